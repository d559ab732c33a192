"""AustereMH: Metropolis-Hastings with the sequential-test acceptance of Korattikara,
Chen & Welling (2014), "Austerity in MCMC Land" (Algorithm 1), on Taylor control-variate
residuals by default (Bardenet, Doucet & Holmes 2017, Sec. 7.2)."""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from ..kernels.acceptance.austere_design import design_austerity_test
from ..kernels.acceptance.austere_dp import sequential_test_dp
from ..kernels._validation import InvalidParameterError, check_epsilon, is_real
from ..kernels.acceptance.austere import austere_test
from ..kernels.acceptance.clt_error import austere_clt_weight
from .growing import GROWING_STATS, GrowingBatchStep
from .state import acceptance_probability, setting_stats

__all__ = ["AustereMH"]


class AustereMH(GrowingBatchStep):
    """Approximate Metropolis-Hastings whose accept/reject is a sequential t-test.

    Each step draws a proposal, then decides ``mean(l_i) > mu_0`` (eq. 2-3 of Korattikara
    et al. 2014) from a growing minibatch of rows drawn without replacement: a Student-t
    test (eq. 4-5, with the finite-population correction) stops as soon as the probability
    of a wrong decision falls below ``epsilon``, otherwise the batch grows by
    ``batch_increment`` rows, up to all ``N`` rows (where the decision is exact MH).

    With control variates (``control_variate=2``, the default) the test runs on the
    residuals ``r_i = l_i - lhat_i`` of a Taylor proxy about the posterior mode, whose sum
    over all rows is added to the data-free part exactly
    (:mod:`pymc_subsample.kernels.variance.control_variates`): at posterior scale the residuals
    vary orders of magnitude less than the ``l_i``, so the t-test decides on its first
    batch where the plain test needs most of the data (Seita et al. 2017, Sec. 2.2).

    Parameters
    ----------
    vars : list of variables, optional
        Continuous variables to sample (default: all continuous free variables).
    epsilon : float, default 0.05
        Error level of each sequential test, in ``[0, 0.5)``. The bias knob: ``0`` is exact
        MH (every step reads all ``N`` rows); larger values read fewer rows and bias the
        stationary distribution more (Sec 5.1). The whole test's error is reported per
        step in the ``test_error`` stat.
    batch_size : int, default 500
        Rows in the first minibatch (capped at ``N``).
    batch_increment : int, optional
        Rows added each time the test cannot decide (default: ``batch_size``).
    max_error : float, optional
        Choose ``(batch_size, epsilon)`` by the optimal design of Sec. 5.2
        (:func:`pymc_subsample.design_austerity_test`, worst case, eq. 8): the cheapest
        design whose whole-test error ``E(0, m, epsilon)`` is at most ``max_error``.
        Overrides ``epsilon`` and ``batch_size``.
    control_variate : {None, "taylor2", "taylor1", "saga", "none"} or ControlVariate
        The control variate of the per-row terms, by its name in
        :data:`~pymc_subsample.kernels.variance.control_variates.CONTROL_VARIATES`:
        ``"taylor2"`` or ``"taylor1"``, Taylor proxies of order 2 or 1 about the centre
        (aliases ``2``, ``1``); ``"saga"``, stored per-row gradients updated at the rows
        read (El hanchi 2019, Sec. 4-5; memory ``N d`` floats per chain,
        :class:`~pymc_subsample.kernels.variance.control_variates.StoredGradients`); ``"none"``
        (alias ``0``), the paper's plain test. ``None`` (the default): ``"taylor2"``,
        or ``"none"`` with a warning when the likelihood depends on variables another
        step samples (the centre's sums would go stale). Or an instance of a
        :class:`~pymc_subsample.ControlVariate` subclass of your own (set up with the
        engine and the centre). Recorded as ``setting_control_variate``: 2, 1, -1
        (``"saga"``), 0, or -2 (your own).
    sampling : {"uniform", "importance"}, default "uniform"
        ``"uniform"``: rows without replacement (Algorithm 1). ``"importance"``: i.i.d.
        rows with ``p_i`` proportional to ``||h_i|| + L_i s`` (El hanchi 2019, Sec. 5.1:
        per-row gradient norms at the centre plus their change over a posterior-scale
        move); the t-test then runs on ``t_i / (N p_i)``, without the finite-population
        correction, and takes the exact full-data decision once ``N`` rows were drawn.
    center : dict or array, optional
        Centre of the control variates (a point dict as from ``pm.find_MAP``, or the
        raveled unconstrained vector). Default: the posterior mode, found by Newton's
        method on the full data (:func:`pymc_subsample.center.find_center`).
    recenter : bool, default False
        At the end of tuning, move the centre to the chain's mean over tuning (one more
        pass over the data).
    init : {"laplace", "model"}, default "laplace"
        With control variates, each chain starts its tuning from a draw of the Laplace
        approximation at the centre (as NUTS jitters its start; tuning draws are
        discarded); ``"model"`` keeps PyMC's initial point.
    audit : float, default 0
        Share of steps on which the exact full-data decision is also taken for the same
        proposal and uniform draw; agreement goes to the ``audit`` stat
        (:func:`pymc_subsample.diagnostics.audit_summary`).
    proposal : str or object, optional
        Default: ``"pcn"`` (reversible for the Laplace approximation at the centre) with
        second-order control variates, ``"preconditioned"`` (random walk with the Laplace
        covariance) with first-order, ``"random_walk"`` without. Or ``"langevin"``
        (SGLD proposal from minibatch gradients, Sec 6.4), any name accepted by
        :func:`pymc_subsample.proposals.make_proposal`, or an object with
        ``draw(q, rng) -> (q_new, log_ratio)``.
    scaling : float or array, optional
        The proposal's starting scale (class-specific); tuned during tuning.
    tune : bool, default True
        Adapt the proposal during tuning (acceptance target about 0.23).
    model : pymc.Model, optional

    Notes
    -----
    Sample stats per draw: ``accepted``, ``data_used`` (rows read to decide; ``N`` for an
    exact decision), ``n_batches``, ``scaling``, ``exact`` (the test reached all rows),
    ``test_error`` (plug-in estimate of the probability that this decision differs from
    exact MH for the same uniform draw: ``E(mu_std, m, epsilon)`` of Sec. 5.1 at the
    estimated standardised mean; 0 for an exact decision), ``cv_active``, ``audit`` and
    ``warning``. The settings go with every draw as constant stats ``setting_epsilon``,
    ``setting_batch_size``, ``setting_batch_increment``, ``setting_control_variate``
    (-1 for ``"saga"``) and ``setting_steps_per_draw``
    (:func:`pymc_subsample.diagnostics.step_settings` reads them back).
    """

    name = "austere_mh"
    max_scale_factor = 2.0
    SETTINGS = GrowingBatchStep.SETTINGS + ("epsilon",)
    stats_dtypes_shapes = {
        **GROWING_STATS,
        "test_error": (np.float64, []),
        "clt_edgeworth": (np.float64, []),
        **setting_stats(SETTINGS),
    }

    def __init__(
        self,
        vars=None,
        *,
        epsilon=0.05,
        batch_size=500,
        batch_increment=None,
        max_error=None,
        proposal=None,
        scaling=None,
        tune=True,
        model=None,
        **kwargs,
    ):
        if not is_real(epsilon):  # a string or None is a type error at the boundary
            raise InvalidParameterError(f"epsilon must be a number in [0, 0.5), got {epsilon!r}.")
        self.epsilon = check_epsilon(epsilon)  # 0 is exact MH; typical values 0.01-0.2
        super().__init__(
            vars, batch_size=batch_size, batch_increment=batch_increment, proposal=proposal,
            scaling=scaling, tune=tune, model=model, **kwargs,
        )
        self.design = None
        if max_error is not None:
            self.design = design_austerity_test(self.n_rows, max_error=max_error)
            self.epsilon, self.batch_size = self.design.epsilon, self.design.batch_size
            self.batch_increment = None
        self._dp = None
        self._crit_cache = {}  # _crit's critical values by batch size
        if self.epsilon > 0 and self.batch_size >= 2 and self.n_rows > self.batch_size:
            self._dp = sequential_test_dp(
                self.n_rows, self.batch_size, self.epsilon, batch_increment=self.batch_increment
            )

    def settings(self) -> dict:
        """The recorded settings: ``epsilon`` and the batch sizes in effect (those of the
        ``max_error`` design when one was asked for), the control variate and
        ``steps_per_draw``."""
        return {**super().settings(), "epsilon": self.epsilon}

    def _run_test(self, terms_fn, log_ratio_o1, exact_sum):
        iid = self.is_table is not None
        res = austere_test(
            self.rng,
            terms_fn,
            self.n_rows,
            log_ratio_o1,
            epsilon=self.epsilon,
            batch_size=self.batch_size,
            batch_increment=self.batch_increment,
            # the CLT matters only for the t-test (epsilon = 0 never uses it), and only for
            # the kept draws: their first batches give the pooled skewness
            return_first_batch=self.epsilon > 0 and not self.tune,
            # epsilon = 0 reads every row: the kernel then reads them in order
            sampler=self._sampler.restart(self.rng) if self.epsilon > 0 or iid else None,
            fpc=not iid,
            exact_sum=exact_sum if iid else None,
            check=False,  # validated at construction
        )
        # the normal approximation's error of the acceptance probability, per unit
        # skewness (one-term Edgeworth), pooled over the kept transitions
        weight = 0.0
        if not (res.exact or res.nonfinite) and res.data_used >= 2 and res.sd == res.sd:
            weight = self._clt_weight(res, log_ratio_o1, iid)
        clt = self._clt_pool(
            res.first_batch, weight, self.epsilon, "epsilon",
            "Korattikara et al. (2014, Sec. 4) warn that the test can behave erratically "
            "here (sparse data, outliers): raise batch_size, lower epsilon, or use ScalableMH.")
        self._report_test(res)
        # the log MH ratio the test estimated: its data-free part plus N times the batch
        # mean (the data-free part alone when no row was read); a non-finite term or
        # ratio (a row outside the support: rows read, no mean) rejected it outright
        if res.nonfinite or (res.mean != res.mean and res.data_used > 0):
            log_r = -math.inf
        else:
            log_r = log_ratio_o1 + (self.n_rows * res.mean if res.data_used else 0.0)
        return res, {
            "data_used": int(res.data_used),
            "n_batches": int(res.n_batches),
            "accept": acceptance_probability(log_r),
            "exact": bool(res.exact),
            "test_error": self._test_error(res),
            "clt_edgeworth": clt,
        }

    def _clt_weight(self, res, log_ratio_o1, iid) -> float:
        """The normal approximation's error per unit skewness summed over the stages the
        test went through (each stage could have stopped on a wrong-way tail:
        :func:`~pymc_subsample.kernels.acceptance.clt_error.austere_clt_weight` at its ``n_k``, with
        ``s_k`` from the terms' estimated sd). Stages ``1, 2, 4, 8, ...`` stand for the
        stages up to the next one, so a long test costs a few evaluations."""
        big_n, n = self.n_rows, int(res.data_used)
        fpc = 1.0 if iid else 1.0 - (n - 1) / (big_n - 1)
        if not fpc > 0.0:
            return 0.0
        sigma = res.sd * math.sqrt(n / fpc)  # the terms' sd
        delta = log_ratio_o1 + big_n * res.mean
        first = self.batch_size
        inc = self.batch_size if self.batch_increment is None else self.batch_increment
        stages = int(res.n_batches)
        total, k = 0.0, 1
        while k <= stages:
            n_k = min(first + (k - 1) * inc, n)
            if n_k >= 2:
                corr = 1.0 if iid else 1.0 - (n_k - 1) / (big_n - 1)
                s_k = big_n * sigma * math.sqrt(max(corr, 0.0) / n_k)
                count = min(2 * k, stages + 1) - k
                total += count * austere_clt_weight(
                    n_k, None if iid else big_n, s_k, delta, self._crit(n_k))
            k *= 2
        return total

    def _crit(self, n: int) -> float:
        """The t-test's critical value at ``n`` rows: ``Phi_{n-1}^{-1}(1 - epsilon)``."""
        c = self._crit_cache.get(n)
        if c is None:
            c = self._crit_cache[n] = float(special.stdtrit(n - 1, 1.0 - self.epsilon))
        return c

    def _test_error(self, res) -> float:
        """``E(mu_std, m, epsilon)`` (Sec. 5.1) at the test's estimate of ``mu_std``."""
        if res.exact or self._dp is None:
            return 0.0
        n, big_n = res.data_used, self.n_rows
        fpc = 1.0 - (n - 1) / (big_n - 1)
        if not (res.sd > 0 and fpc > 0):
            return 0.0 if math.isfinite(res.mean) else math.nan
        sigma = res.sd * math.sqrt(n / fpc)  # population sd of the terms
        mu_std = (res.mean - res.mu_0) * math.sqrt(big_n - 1) / sigma
        return float(self._dp.interpolate(mu_std)[0])

    def _exact_decision(self, res, full_log_ratio) -> bool:
        return bool(res.log_u < full_log_ratio)
