"""The minibatch-test layer shared by AustereMH and BarkerMinibatch.

:class:`GrowingBatchStep` decides each proposal on a minibatch of rows that grows until
the step's test is confident. It adds to :class:`~pymc_subsample.steps.base.SubsampleStep`
the batch sizes, a row sampler per chain, and the control variates of
:mod:`pymc_subsample.kernels.control_variates` (Taylor proxies about the posterior mode,
or SAGA's stored per-row gradients), with their centre, variance check and re-centring.
A subclass only runs its acceptance kernel (:meth:`GrowingBatchStep._run_test`).
"""

from __future__ import annotations

import math
import numbers
import warnings
from abc import abstractmethod

import numpy as np
from pymc.stats.convergence import WarningType

from ..center import center_at
from ..kernels.control_variates import (
    ORDERS,
    StoredGradients,
    VarianceCheck,
    importance_weights,
    residuals,
)
from ..kernels.clt_error import PooledSkewness
from ..kernels.rows import ImportanceSampler, RowSampler
from ..kernels.alias import AliasTable
from ..engine.predictor import curved_predictor_map
from ..proposals import SurrogateHMC
from .base import SubsampleStep
from .state import BASE_STATS

__all__ = ["GrowingBatchStep", "GROWING_STATS", "check_batch_size"]

#: stats of the steps that decide on growing minibatches with control variates
GROWING_STATS = {
    **BASE_STATS,
    "exact": (bool, []),
    "cv_active": (bool, []),
    # 1.0 / 0.0: the audited decision agreed / disagreed with the exact full-data
    # decision for the same proposal and randomness; NaN: not audited
    "audit": (np.float64, []),
}


def check_batch_size(value, name: str, n_rows: int, *, allow_none: bool = False):
    """Validate a batch-size argument: a positive integer, capped at the ``N`` rows.

    A batch larger than the data means "all rows" and is capped at ``N``; zero, negative
    and non-integer values raise with a message naming the argument.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer number of rows, got {value!r}.")
    if value < 1:
        raise ValueError(
            f"{name}={value} is out of range: it must be a positive number of rows "
            f"(at most the N={n_rows} rows of the data)."
        )
    return min(int(value), n_rows)


class GrowingBatchStep(SubsampleStep):
    """Base of the steps that decide on a minibatch grown until a test is confident
    (AustereMH, BarkerMinibatch).

    It holds what both share: validated ``batch_size`` / ``batch_increment``, a
    without-replacement :class:`~pymc_subsample.kernels.rows.RowSampler` per chain, and
    the Taylor control variates of :mod:`pymc_subsample.kernels.control_variates`. With
    control variates (the default) the step finds the posterior mode once
    (:func:`pymc_subsample.center.find_center`), the closed-form proxy difference enters
    the test's data-free part exactly and the minibatch estimates only the residual sum;
    the default proposal is then preconditioned by the Laplace approximation there.
    For a one-parameter GLM whose linear predictor is affine in data-free parameter
    expressions but not in the sampled variables (a non-centred hierarchical model), the
    proxy is taken in those predictor coordinates (:mod:`pymc_subsample.engine.predictor`) and
    the default proposal is :class:`~pymc_subsample.proposals.SurrogateHMC`.

    Subclasses implement :meth:`_run_test` (the acceptance kernel on a row function and a
    data-free log ratio) and :meth:`_exact_decision` (for the audit).
    """

    #: the proposal used when ``proposal=None``, by control-variate order
    DEFAULT_PROPOSALS = {0: "random_walk", 1: "preconditioned", 2: "pcn"}
    #: steps between verdicts of the variance check while tuning
    CV_WINDOW = 100
    SETTINGS = SubsampleStep.SETTINGS + ("batch_size", "batch_increment", "control_variate")
    CHAIN_ATTRS = SubsampleStep.CHAIN_ATTRS + (
        "cv_active", "_vcheck", "_cv_verdict", "_cv_ratio", "_n_steps", "center", "proxy",
        "_mean_n", "_mean_q", "_rows_tuning", "_first_prob", "_cv_fails",
        "_clt_skew", "_clt_wsum", "_clt_n",
    )
    #: kept transitions before the first verdict of the pooled normal-approximation check
    CLT_MIN_TRANSITIONS = 50
    #: consecutive failing variance-check windows at the end of tuning that turn the
    #: control variates off (fewer when tuning had fewer windows)
    CV_FAIL_WINDOWS = 2

    def __init__(
        self,
        vars=None,
        *,
        batch_size,
        batch_increment=None,
        control_variate=None,
        center=None,
        recenter=False,
        audit=0.0,
        sampling="uniform",
        **kwargs,
    ):
        if control_variate is not None and (
            isinstance(control_variate, bool) or control_variate not in ORDERS
        ):
            raise ValueError(
                f"control_variate must be 2 (second-order Taylor control variates), 1 (first "
                f"order), 'saga' (stored per-row gradients), 0 (none: the paper's plain test) "
                f"or None (2 where possible, the default), got {control_variate!r}."
            )
        self._cv_arg = control_variate
        # cv: 0 (none), 1 or 2 (Taylor order) or "saga"; cv_order is truthy iff a centre
        # is used (1 for "saga": its stored gradients start at the centre's)
        self.cv = 2 if control_variate is None else control_variate
        self.cv_order = 1 if self.cv == "saga" else int(self.cv)
        if self.cv_order == 0 and center is not None:
            raise ValueError("center= is the centre of the control variates: it needs "
                             "control_variate=1 or 2 (or 'saga').")
        self._center_arg = center
        self.recenter = bool(recenter)
        if isinstance(audit, bool) or not isinstance(audit, numbers.Real) or not 0 <= audit <= 1:
            raise ValueError(
                f"audit must be the share of steps, in [0, 1], on which the exact full-data "
                f"decision is also taken (e.g. 0.01), got {audit!r}."
            )
        self.audit = float(audit)
        if sampling not in ("uniform", "importance"):
            raise ValueError(f"sampling must be 'uniform' or 'importance', got {sampling!r}.")
        self.sampling = sampling
        super().__init__(vars, **kwargs)
        self._set_batches(batch_size, batch_increment)

    @property
    def keeps_data_sums(self) -> bool:
        """A centre (control variates, stored gradients or importance weights) and the
        Laplace fit come from the data; without them the test reads the live data."""
        return bool(self.cv_order)

    def _set_batches(self, batch_size, batch_increment):
        """Validate and store the batch sizes (``batch_increment=None``: same as
        ``batch_size``, resolved by the kernels)."""
        self.batch_size = check_batch_size(batch_size, "batch_size", self.n_rows)
        self.batch_increment = check_batch_size(
            batch_increment, "batch_increment", self.n_rows, allow_none=True
        )

    def settings(self) -> dict:
        """The batch sizes (``batch_increment`` resolved: ``batch_size`` when None) and
        the control variate in effect (0, 1, 2, or -1 for ``"saga"``; 0 when it was
        turned off because another step samples a variable of the likelihood)."""
        return {
            **super().settings(),
            "batch_size": self.batch_size,
            "batch_increment": (self.batch_size if self.batch_increment is None
                                else self.batch_increment),
            "control_variate": -1 if self.cv == "saga" else int(self.cv),
        }

    # ------------------------------------------------------------------ set-up
    def _choose_proposal(self, proposal, scaling):
        """Decide the control-variate order (the engine now exists), then the proposal:
        by default preconditioned by the Laplace approximation at the centre; a random
        walk when the user gave ``scaling`` (documented as its standard deviation)."""
        others = self.likelihood_vars_of_other_steps()
        if others and self.cv_order:
            names = ", ".join(repr(o) for o in others)
            if self._cv_arg is not None:
                raise ValueError(
                    f"control_variate={self._cv_arg} needs every variable the likelihood "
                    f"depends on in this step's vars=, but {names} is sampled by another step: "
                    "the control variates' sums are computed once at a centre and would go "
                    "stale. Add them to vars=, or pass control_variate=0."
                )
            warnings.warn(
                f"{type(self).__name__}: the likelihood depends on {names}, sampled by another "
                "step, so the Taylor control variates are off (plain differences, which read "
                "more rows per step). Add them to vars= to use control variates.",
                UserWarning, stacklevel=5,
            )
            self.cv, self.cv_order = 0, 0
        self._proposal_is_default = proposal is None and scaling is None
        if proposal is None:
            order = 0 if scaling is not None else self.cv_order
            self.default_proposal = self.DEFAULT_PROPOSALS[order]
        if self.sampling == "importance" and self.cv_order == 0:
            # the importance weights come from per-row gradients at the centre
            self.cv_order = -1  # a centre, but no control variate
        return super()._choose_proposal(proposal, scaling)

    def _setup_proposal(self, scaling):
        self.saga = None
        self.is_table = None
        if self.cv_order == 0:
            self.center = self.proxy = None
            self.engine.compile("ll_diff")  # the per-step function, compiled before forking
            return super()._setup_proposal(scaling)
        eng = self.engine
        self.center = self._locate_center(
            "the control variates' centre",
            "the control variates may not reduce the variance. Pass center= (e.g. from "
            "pm.find_MAP) or set recenter=True.",
        )
        self.proxy = self.center.proxy(self.cv) if self.cv in (1, 2) else None
        self._vmap = None
        if self.cv in (1, 2) and self.sampling == "uniform":
            # a curved predictor (non-centred hierarchical): control variates in the
            # predictor coordinates, where the rows are an ordinary GLM
            self._vmap = curved_predictor_map(eng, self.center.theta)
            if self._vmap is not None:
                self.proxy = self._vmap.proxy(self._vmap.v(self.center.theta), self.cv)
                if self._proposal_is_default:
                    self.proposal = SurrogateHMC()
        self._center0, self._proxy0 = self.center, self.proxy
        self._attach_proposal(scaling)
        if self.cv == "saga" or self.sampling == "importance":
            self._setup_row_terms()
        if self.cv in (1, 2) and self._vmap is None:
            eng.compile(f"cv{self.cv}")  # the per-step function, compiled before forking

    #: largest memory, in bytes, for SAGA's stored per-row gradients (two copies)
    SAGA_MEMORY = 4 * 2**30

    def _setup_row_terms(self):
        """One pass of per-row gradients at the centre: SAGA's starting store and/or the
        importance weights of El hanchi (2019, Sec. 5.1)."""
        n, d = self.n_rows, self.ndim
        if self.cv == "saga" and 2 * n * d * 8 > self.SAGA_MEMORY:
            raise MemoryError(
                f"control_variate='saga' stores {n:,} x {d} per-row gradients per chain "
                f"({2 * n * d * 8 / 2**30:.1f} GiB with the initial copy), over the "
                f"{self.SAGA_MEMORY / 2**30:.0f} GiB limit: use control_variate=2 (Taylor), "
                "which stores nothing per row."
            )
        eng, c = self.engine, self.center.theta
        rows = np.arange(n)
        _, g = eng.loglik_rows_grad(c, rows, chunk=8192)
        if self.cv == "saga":
            self.saga = StoredGradients(g)
        if self.sampling == "importance":
            z = np.random.default_rng(0).standard_normal(d)  # set-up, not sampling
            _, g_moved = eng.loglik_rows_grad(c + self._laplace_chol @ z, rows, chunk=8192)
            self.is_table = AliasTable(importance_weights(g, g_moved))
            self._is_scale = n * self.is_table.probabilities()  # N p_i, once

    def _attach_proposal(self, scaling):
        """Set the proposal up with the Laplace approximation at the current centre."""
        mean, cov = self.center.laplace(self.loglik_weight)
        self._set_laplace(mean, cov)
        if scaling is None:
            scaling = self.proposal.scaling_from_sd(np.sqrt(np.diag(cov)))
        self.proposal.setup(
            self.ndim, scaling=scaling, grad_fn=self._proposal_grad_fn(), n_total=self.n_rows,
            mode=mean if self._wants_gaussian_mean() else self.center.theta, cov=cov,
        )

    def _reset_chain(self):
        super()._reset_chain()
        if self.is_table is not None:
            self._sampler = ImportanceSampler(self.is_table, self.rng)
        else:
            self._sampler = RowSampler(self.n_rows, self.rng)
        if self.saga is not None:
            self.saga.reset()
        self.cv_active = self.cv != 0
        self._vcheck = VarianceCheck(min_steps=self.CV_WINDOW // 2)
        self._cv_verdict = None
        self._cv_fails = 0
        self._n_steps = 0
        self._clt_skew = PooledSkewness()
        self._clt_wsum, self._clt_n = 0.0, 0
        if self.cv_order:  # a re-centred chain must not hand its centre to the next one
            self.center, self.proxy = self._center0, self._proxy0
            self._mean_n, self._mean_q, self._rows_tuning = 0, np.zeros(self.ndim), 0

    #: warn when the tuning mean lies more than this many Laplace sds from its mean
    LAPLACE_WARN_SD = 3.0

    def _check_laplace_fit(self):
        """Warn when the chain's mean over tuning is far from the Laplace approximation
        that the default proposal and the control variates are built on (e.g. a funnel of
        a hierarchical model): the draws may then not have mixed, and nothing else would
        say so, since the step's own stats can look normal."""
        if not self.cv_order or self._mean_n < 50:
            return
        rows = self._rows_tuning / self._mean_n
        if self.cv_active and rows > 2 * self.batch_size and rows > 0.1 * self.n_rows:
            self.warn_once(
                "cv_rows",
                f"with control variates the test still read {rows:,.0f} rows per step during "
                f"tuning ({100 * rows / self.n_rows:.0f}% of the data): the Taylor proxy "
                "about the centre leaves large residuals, so the Laplace fit there is poor "
                "(a funnel-shaped hierarchical posterior, for instance) and the chain may not "
                "mix. Check R-hat and ESS. For a hierarchical model whose groups each hold "
                "many rows, write it in the centred form (a ~ Normal(mu, tau), a[g]); "
                "otherwise consider recenter=True or NUTS.",
                kind=WarningType.CONVERGENCE,
            )
        sd = np.sqrt(np.einsum("ij,ij->i", self._laplace_chol, self._laplace_chol))
        z = np.abs(self._mean_q - self._laplace_mean) / sd
        if np.max(z) > self.LAPLACE_WARN_SD:
            self.warn_once(
                "laplace",
                f"the chain's mean over tuning lies {np.max(z):.1f} Laplace sds from the "
                f"Laplace approximation at the centre (coordinate {int(np.argmax(z))} of the "
                "step's unconstrained space): the Gaussian fit that the default proposal and "
                "control variates rely on is poor here (a funnel-shaped hierarchical "
                "posterior, for instance), and the chain may not mix. Check R-hat and ESS. "
                "For a hierarchical model whose groups each hold many rows, write it in the "
                "centred form (a ~ Normal(mu, tau), a[g]), whose joint mode lies in the "
                "posterior's bulk; otherwise consider recenter=True, proposal='random_walk' "
                "with proposal_kwargs={'adapt_covariance': True}, or NUTS.",
                kind=WarningType.CONVERGENCE,
            )

    def stop_tuning(self):
        super().stop_tuning()
        self._check_laplace_fit()
        windows = max(1, self._n_steps // self.CV_WINDOW)
        if self.cv_active and self._cv_fails >= min(self.CV_FAIL_WINDOWS, windows):
            # the last CV_FAIL_WINDOWS windows of tuning all failed (the only one, when
            # tuning had one): a persistent failure, not one extreme window
            self.cv_active = False
            self.warn_once(
                "cv_off",
                "the Taylor control variates did not reduce the variance of the per-row terms "
                f"at the end of tuning (residual/plain variance {self._cv_ratio:.3g}); this chain "
                "falls back to plain differences, which read more rows per step. A multimodal "
                "or heavy-tailed likelihood, or a centre far from the posterior, causes this.",
            )
        if self.recenter and self.cv_active and self.proxy is not None and self._mean_n > 0:
            self.center = center_at(self.engine, self._mean_q)
            self.proxy = (self.center.proxy(self.cv) if self._vmap is None
                          else self._vmap.proxy(self._vmap.v(self._mean_q), self.cv))

    # ------------------------------------------------------------------ the step
    def cv_sum(self, q, q_prop, coords=None) -> float:
        """The control variate's exact sum over all rows (0 without control variates).
        ``coords``: ``(coordinates(q), coordinates(q_prop))`` when already computed."""
        if not self.cv_active:
            return 0.0
        if self.saga is not None:
            return self.saga.sum_diff(q, q_prop)
        v, v_prop = coords if coords is not None else (self.coordinates(q),
                                                       self.coordinates(q_prop))
        return self.proxy.sum_diff(v, v_prop)

    def diff_fn(self, q, q_prop, coords=None):
        """``rows -> terms`` for the kernel: the control-variate residuals (or the plain
        differences), divided by ``N p_i`` for importance-sampled rows. The first call of
        a step feeds the variance check (every step while tuning, every 10th after)."""
        eng, cv = self.engine, self.cv if self.cv_active else 0
        # the variance check reads every tuning step, and every 10th step after tuning
        first = [self.cv_active and (self.tune or self._n_steps % 10 == 0)]
        scale = None if self.is_table is None else self._is_scale

        vterms = None
        if cv in (1, 2) and self._vmap is not None:
            v, v_prop = coords if coords is not None else (self.coordinates(q),
                                                           self.coordinates(q_prop))
            vterms = self._vmap.terms_fn(v, v_prop, self.proxy.center, cv)

        def terms(rows):
            if vterms is not None:
                plain, r = vterms(rows)
            elif cv in (1, 2):
                t = eng.loglik_diff_taylor(q, q_prop, self.proxy.center, rows, cv)
                plain, r = t[0], residuals(t)
            else:
                plain = r = eng.loglik_diff(q, q_prop, rows)
                if cv == "saga":
                    r = self.saga.residuals(plain, rows, q, q_prop)
            if first[0]:
                first[0] = False
                self._vcheck.add(plain, r)
            return r if scale is None else r / scale[rows]

        return terms

    def _decide(self, q, q_prop, log_prior_ratio, log_qratio):
        o1 = log_prior_ratio + log_qratio
        # the control variates' coordinates of q, q' once, for the closed-form sum and the
        # rows' terms (v(q) in predictor coordinates, else q itself)
        coords = ((self.coordinates(q), self.coordinates(q_prop))
                  if self.cv_active and self.saga is None else None)
        cv_sum = self.cv_sum(q, q_prop, coords)
        # the control variate's exact sum over all N rows enters the data-free part
        o1 += self.loglik_weight * cv_sum
        self._first_prob = math.exp(min(0.0, o1)) if o1 == o1 else 0.0
        eng = self.engine

        def exact_sum():  # sum_i of the terms over all rows (i.i.d. draws reached N)
            return eng.full_loglik_diff(q, q_prop) - cv_sum

        audited = self.audit > 0 and self.rng.random() < self.audit
        res, stats = self._run_test(self.diff_fn(q, q_prop, coords), o1, exact_sum)
        accept = bool(res.accept)
        stats["cv_active"] = self.cv_active
        stats["audit"] = np.nan
        if audited:
            full = log_prior_ratio + log_qratio + self.loglik_weight * (
                eng.full_loglik_diff(q, q_prop)
            )
            stats["audit"] = float(self._exact_decision(res, full) == accept)
        q_now = q_prop if accept else q
        if self.saga is not None and self.cv_active and res.data_used < self.n_rows:
            rows = np.unique(self._sampler.drawn())
            if rows.size:
                self.saga.update(rows, eng.loglik_rows_grad(q_now, rows)[1])
        self._after_step(q_now, res.data_used)
        return accept, stats

    def _after_step(self, q_now, data_used):
        """The chain's running mean and rows read over tuning (for ``recenter`` and the
        checks of the Laplace fit) and the variance-check windows."""
        if self.cv_order and self.tune:
            self._mean_n += 1
            self._mean_q += (q_now - self._mean_q) / self._mean_n
            self._rows_tuning += data_used
        if not self.cv_active:
            return
        self._n_steps += 1
        if self.tune:
            if self._n_steps % self.CV_WINDOW == 0:
                self._cv_verdict, self._cv_ratio = self._vcheck.verdict(), self._vcheck.ratio
                # consecutive failing windows: one extreme window decides nothing
                self._cv_fails = self._cv_fails + 1 if self._cv_verdict is False else 0
                self._vcheck.reset()
        elif self._vcheck.verdict() is False:
            self.warn_once(
                "cv_poor",
                "the Taylor control variates do not reduce the variance of the per-row terms "
                f"(residual/plain variance {self._vcheck.ratio:.3g}): the test reads more rows "
                "than plain differences would. Consider control_variate=0 or recenter=True.",
            )

    def _clt_pool(self, first_batch, weight: float, knob: float, name: str,
                  advice: str) -> float:
        """Pool the normal-approximation error over the kept transitions; warn once per
        chain when the pooled estimate exceeds the step's knob.

        The kernel gives this transition's error of the acceptance probability per unit
        skewness, ``weight`` (:mod:`pymc_subsample.kernels.clt_error`); the skewness is
        pooled over the first batches of the kept transitions
        (:class:`~pymc_subsample.kernels.clt_error.PooledSkewness`), so that one batch's
        sample moments decide nothing. The verdict compares

            err_pooled = gamma_pooled * mean_t(w_t)

        (the mean estimated error per transition) with ``knob`` from
        ``CLT_MIN_TRANSITIONS`` kept transitions on. Returns this transition's estimate
        ``gamma_pooled * w_t`` (NaN while tuning or before any batch was pooled).
        """
        if self.tune:
            return math.nan
        if first_batch is not None:
            self._clt_skew.add(first_batch)
        w = float(weight) if weight == weight else 0.0
        self._clt_n += 1
        self._clt_wsum += w
        g = self._clt_skew.gamma
        if g != g:
            return 0.0 if w == 0.0 else math.nan
        pooled = g * self._clt_wsum / self._clt_n
        if self._clt_n >= self.CLT_MIN_TRANSITIONS and pooled > knob:
            self.warn_once(
                "clt",
                f"the test's normal approximation looks unsafe: over {self._clt_n} kept "
                f"transitions the estimated error of its acceptance probability (one-term "
                f"Edgeworth, pooled skewness of the terms {g:.3g}) averages {pooled:.3g}, "
                f"above {name}={knob:g}. {advice}",
            )
        return g * w

    def _report_test(self, res):
        """The warning about one test, once per chain: non-finite terms (the test
        rejected). The normal approximation is judged by :meth:`_clt_pool`."""
        if res.nonfinite:
            self.warn_once(
                "nonfinite",
                "a NaN or +inf log-likelihood difference was met and the proposal rejected; "
                "check the model at the current and proposed values.",
            )

    @abstractmethod
    def _run_test(self, terms_fn, log_ratio_o1, exact_sum):
        """Run the acceptance kernel; return ``(result, stats)``. ``exact_sum()`` gives the
        terms' sum over all rows (for i.i.d. importance-sampled rows)."""

    @abstractmethod
    def _exact_decision(self, result, full_log_ratio) -> bool:
        """The exact full-data decision for the randomness ``result`` used (audit)."""
