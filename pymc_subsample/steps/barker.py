"""BarkerMinibatch: the minibatch Barker test with an additive correction variable of
Seita, Pan, Chen & Canny (2017), "An Efficient Minibatch Acceptance Test for
Metropolis-Hastings" (Algorithm 1, "MHminibatch")."""

from __future__ import annotations

import math
import numbers

from ..kernels.barker import barker_test
from ..kernels.barker_correction import default_correction
from .base import BASE_STATS, GrowingBatchStep

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
        :func:`pymc_subsample.kernels.barker.barker_test` for the formula).
    temperature : float, default 1.0
        ``T``: the step targets ``p(theta) prod_i p(x_i | theta)^(1/T)`` (Sec 6.1).
    proposal, scaling, tune, model
        As in :class:`~pymc_subsample.AustereMH` (random walk tuned towards an acceptance
        rate of 0.234, its scale capped at twice the start).
    error : {"acceptance", "lemma3"}, default "acceptance"
        Which CLT error estimate ``delta`` bounds.

    Notes
    -----
    Sample stats per draw: ``accepted``, ``data_used``, ``n_batches``, ``scaling``,
    ``clt_error`` (the estimate when the test stopped), ``delta_var`` (the variance
    ``s^2`` of ``Delta*``) and ``exact`` (the test used all ``N`` rows).
    """

    name = "barker_minibatch"
    max_scale_factor = 2.0
    stats_dtypes_shapes = {
        **BASE_STATS,
        "clt_error": (float, []),
        "delta_var": (float, []),
        "exact": (bool, []),
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
        **kwargs,
    ):
        for name, value in (("delta", delta), ("temperature", temperature)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
                raise ValueError(f"{name} must be a positive number, got {value!r}.")
        if not math.isfinite(temperature):
            raise ValueError(f"temperature must be a finite positive number, got {temperature!r}.")
        if error not in ("acceptance", "lemma3"):
            raise ValueError(f"error must be 'acceptance' or 'lemma3', got {error!r}.")
        self.delta = float(delta)
        self.temperature = float(temperature)
        self.loglik_weight = 1.0 / self.temperature  # the tempered target, for set-up
        self.error = error
        self.correction = default_correction()
        super().__init__(
            vars, proposal=proposal, scaling=scaling, tune=tune, model=model, **kwargs
        )
        self._set_batches(batch_size, batch_increment)

    def _decide(self, q, q_prop, log_prior_ratio, log_qratio):
        res = barker_test(
            self.rng,
            self.loglik_diff_fn(q, q_prop),
            self.n_rows,
            log_prior_ratio + log_qratio,
            batch_size=self.batch_size,
            batch_increment=self.batch_increment,
            delta=self.delta,
            temperature=self.temperature,
            correction=self.correction,
            sampler=self._sampler.restart(self.rng),
            error=self.error,
        )
        return bool(res.accept), {
            "data_used": int(res.data_used),
            "n_batches": int(res.n_batches),
            "clt_error": float(res.clt_error),
            "delta_var": float(res.delta_var),
            "exact": bool(res.exact),
        }
