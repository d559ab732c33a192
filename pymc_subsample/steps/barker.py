"""BarkerMinibatch: the minibatch Barker test with an additive correction variable of
Seita, Pan, Chen & Canny (2017), "An Efficient Minibatch Acceptance Test for
Metropolis-Hastings" (Algorithm 1, "MHminibatch"), on Taylor control-variate residuals
by default (Bardenet, Doucet & Holmes 2017, Sec. 7.2)."""

from __future__ import annotations

import math

from scipy.special import expit

from ..kernels._validation import InvalidParameterError, check_choice, check_positive
from ..kernels.acceptance.barker import barker_test
from ..kernels.acceptance.clt_error import barker_clt_weight
from ..kernels.acceptance.barker_correction import default_correction
from .growing import GROWING_STATS, GrowingBatchStep
from .state import setting_stats

__all__ = ["BarkerMinibatch"]


class BarkerMinibatch(GrowingBatchStep):
    """Approximate MH with Barker's acceptance function, decided on small minibatches.

    Barker's test accepts iff ``Delta + X_log > 0`` with ``X_log`` standard logistic and
    ``Delta`` the log acceptance ratio. On a minibatch, ``Delta* = (N / b) sum l_i + ...``
    is approximately ``N(Delta, s^2)``; once ``s^2 < 1`` and the CLT error estimate is at
    most ``delta``, the test adds ``X_nc ~ N(0, 1 - s^2)`` and a correction variable
    ``X_corr`` (``N(0, 1) + X_corr`` is logistic, Sec 4) and accepts iff
    ``Delta* + X_nc + X_corr > 0``. Otherwise the batch grows by ``batch_increment`` rows;
    with all ``N`` rows the exact Barker test is used.

    With control variates (``control_variate=2``, the default) ``Delta*`` is built from
    the residuals ``r_i = l_i - lhat_i`` of a Taylor proxy about the posterior mode, and
    the proxy's sum over all rows enters exactly
    (:mod:`pymc_subsample.kernels.variance.control_variates`): Barker's condition ``s^2 < 1``
    then holds on the first batch at posterior scale, where the plain test needs almost
    all rows (the algebra of Seita et al. 2017, Sec. 2.2, applies to ``s^2`` too).

    Parameters
    ----------
    vars : list of variables, optional
        Continuous variables to sample (default: all continuous free variables).
    batch_size : int, default 100
        Rows in the first minibatch (capped at ``N``).
    batch_increment : int, optional
        Rows added each time the test cannot decide (default: ``batch_size``).
    delta : float, default 0.01
        Bound on the CLT error of the acceptance probability (see
        :func:`pymc_subsample.kernels.acceptance.barker.barker_test` for the formula).
    temperature : float, default 1.0
        ``T``: the step targets ``p(theta) prod_i p(x_i | theta)^(1/T)`` (Sec 6.1).
    control_variate, center, recenter, init, audit
        As in :class:`~pymc_subsample.AustereMH` (uniform rows only). The audit compares with the exact
        Barker decision ``Delta + X > 0`` for the same noise ``X = X_nc + X_corr``.
    proposal, scaling, tune, model
        As in :class:`~pymc_subsample.AustereMH` (without control variates: a random walk
        tuned towards an acceptance rate of 0.234, its scale capped at twice the start).
    error : {"acceptance", "lemma3"}, default "acceptance"
        Which CLT error estimate ``delta`` bounds.
    steps_per_draw : int, optional
        Barker transitions per PyMC draw (see :class:`~pymc_subsample.steps.base.SubsampleStep`).
        Barker's acceptance probability ``pi' / (pi + pi')`` is at least half of
        Metropolis's ``min(1, pi' / pi)`` and at most equal to it (never above 1/2 even
        for a perfect proposal), so one Barker transition can be up to twice as
        autocorrelated as one MH transition (Latuszynski & Roberts 2013, "CLTs and
        asymptotic variance of time-sampled Markov chains": ``var(f, P_Barker) <=
        2 var(f, P_MH) + var_pi(f)``). A transition costs about as much as PyMC's own
        handling of a draw, so several per draw raise the ESS per second: measured on the
        README demo (N = 10^6) and on a logistic, a hierarchical logistic and a Student-t
        regression, 3 gave 3-25% more ESS per second of sampling than 2 (and 2 more than
        1). 1 gives the paper's chain. Default (None): 3, or 1 sweep per draw when the
        blocked hierarchical sweep runs (``hierarchical=``).

    Notes
    -----
    Sample stats per draw (over its ``steps_per_draw`` transitions): ``accepted``,
    ``data_used``, ``n_batches``, ``scaling``,
    ``clt_error`` (the estimate compared with ``delta`` when the test stopped),
    ``lemma3_error`` (the paper's Lemma 3 / Corollary 1 bound on the same batch),
    ``delta_var`` (the variance ``s^2`` of ``Delta*``), ``exact`` (the test used all
    ``N`` rows), ``cv_active``, ``audit`` and ``warning``. The step warns once per chain
    when the skewness or kurtosis of the first batch's terms makes the CLT doubtful.
    The settings go with every draw as constant stats ``setting_delta``,
    ``setting_temperature``, ``setting_batch_size``, ``setting_batch_increment``,
    ``setting_control_variate`` and ``setting_steps_per_draw``
    (:func:`pymc_subsample.diagnostics.step_settings`).
    """

    name = "barker_minibatch"
    max_scale_factor = 2.0
    SETTINGS = GrowingBatchStep.SETTINGS + ("delta", "temperature")
    stats_dtypes_shapes = {
        **GROWING_STATS,
        "clt_error": (float, []),
        "lemma3_error": (float, []),
        "delta_var": (float, []),
        "clt_edgeworth": (float, []),
        **setting_stats(SETTINGS),
    }

    def __init__(
        self,
        vars=None,
        *,
        batch_size=100,
        batch_increment=None,
        delta=0.01,
        temperature=1.0,
        proposal=None,
        scaling=None,
        tune=True,
        model=None,
        error="acceptance",
        steps_per_draw=None,
        **kwargs,
    ):
        self.delta = check_positive("delta", delta, finite=False, strict=True,
                                    what="a positive number")
        if not self.delta <= 0.5:
            raise InvalidParameterError(
                f"delta must be at most 0.5, got {delta!r}: it bounds the error of the "
                "acceptance probability (typical values 0.001-0.05; smaller reads more rows).")
        self.temperature = check_positive("temperature", temperature, finite=False,
                                          strict=True, what="a positive number")
        if not math.isfinite(self.temperature):
            raise InvalidParameterError(
                f"temperature must be a finite positive number, got {temperature!r}.")
        check_choice("error", error, ("acceptance", "lemma3"))
        self.loglik_weight = 1.0 / self.temperature  # the tempered target, for set-up
        self.error = error
        if kwargs.get("sampling", "uniform") != "uniform":
            raise InvalidParameterError(
                "BarkerMinibatch draws rows uniformly without replacement (its variance "
                "estimate and Lemma 3 assume it); sampling='importance' is AustereMH's."
            )
        #: the blocked hierarchical sweep makes one sweep per draw unless told otherwise
        self._steps_per_draw_default = steps_per_draw is None
        self.correction = default_correction()
        self._r_max = self.correction.max_density
        super().__init__(
            vars, batch_size=batch_size, batch_increment=batch_increment, proposal=proposal,
            scaling=scaling, tune=tune, model=model,
            steps_per_draw=3 if steps_per_draw is None else steps_per_draw, **kwargs,
        )

    def settings(self) -> dict:
        """The recorded settings: ``delta``, ``temperature``, the batch sizes, the
        control variate and ``steps_per_draw``."""
        return {**super().settings(), "delta": self.delta, "temperature": self.temperature}

    def _run_test(self, terms_fn, log_ratio_o1, exact_sum):
        check_clt = not self.tune  # the kept transitions' first batches: pooled skewness
        first = []

        def terms(rows):
            out = terms_fn(rows)
            if check_clt and not first:
                first.append(out)
            return out

        res = barker_test(
            self.rng,
            terms,
            self.n_rows,
            log_ratio_o1,
            batch_size=self.batch_size,
            batch_increment=self.batch_increment,
            delta=self.delta,
            temperature=self.temperature,
            correction=self.correction,
            sampler=self._sampler.restart(self.rng),
            error=self.error,
            check=False,  # validated at construction
        )
        # the normal approximation's error of the acceptance probability per unit
        # skewness (one-term Edgeworth), pooled over the kept transitions
        weight = 0.0
        if not (res.exact or res.nonfinite):
            weight = barker_clt_weight(res.data_used, self.n_rows, res.delta_var,
                                       res.delta_star)
        clt = self._clt_pool(
            first[0] if first else None, weight, self.delta, "delta",
            "Seita et al. (2017) assume Delta* normal: raise batch_size or use ScalableMH.")
        self._report_test(res)
        return res, {
            "data_used": int(res.data_used),
            "n_batches": int(res.n_batches),
            # Barker's acceptance function 1 / (1 + exp(-Delta)) at the estimate Delta*
            # (0 when a non-finite term or ratio rejected the proposal outright)
            "accept": 0.0 if res.nonfinite or res.delta_star != res.delta_star
            else float(expit(res.delta_star)),
            "clt_error": float(res.clt_error),
            "lemma3_error": float(res.lemma3_error),
            "delta_var": float(res.delta_var),
            "exact": bool(res.exact),
            "clt_edgeworth": clt,
        }

    def _exact_decision(self, res, full_log_ratio) -> bool:
        noise = res.noise if math.isfinite(res.noise) else 0.0
        return bool(full_log_ratio + noise > 0.0)
