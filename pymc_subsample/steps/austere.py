"""AustereMH: Metropolis-Hastings with the sequential-test acceptance of Korattikara,
Chen & Welling (2014), "Austerity in MCMC Land" (Algorithm 1)."""

from __future__ import annotations

import numbers

from ..kernels.austere import austere_test, clt_check
from .base import BASE_STATS, GrowingBatchStep

__all__ = ["AustereMH"]


class AustereMH(GrowingBatchStep):
    """Approximate Metropolis-Hastings whose accept/reject is a sequential t-test.

    Each step draws a proposal, then decides ``mean(l_i) > mu_0`` (eq. 2-3 of Korattikara
    et al. 2014) from a growing minibatch of rows drawn without replacement: a Student-t
    test (eq. 4-5, with the finite-population correction) stops as soon as the probability
    of a wrong decision falls below ``epsilon``, otherwise the batch grows by
    ``batch_increment`` rows, up to all ``N`` rows (where the decision is exact MH).

    Parameters
    ----------
    vars : list of variables, optional
        Continuous variables to sample (default: all continuous free variables).
    epsilon : float, default 0.05
        Error level of each sequential test, in ``[0, 0.5)``. The bias knob: ``0`` is exact
        MH (every step reads all ``N`` rows); larger values read fewer rows and bias the
        stationary distribution more (Sec 5.1). :func:`pymc_subsample.design_austerity_test`
        picks ``(batch_size, epsilon)`` for a target error.
    batch_size : int, default 500
        Rows in the first minibatch (capped at ``N``).
    batch_increment : int, optional
        Rows added each time the test cannot decide (default: ``batch_size``).
    proposal : str or object, optional
        ``"random_walk"`` (default), ``"langevin"`` (SGLD proposal from minibatch
        gradients, Sec 6.4, with its asymmetric proposal ratio), any name accepted by
        :func:`pymc_subsample.proposals.make_proposal`, or an object with
        ``draw(q, rng) -> (q_new, log_ratio)``.
    scaling : float or array, optional
        Random-walk standard deviation in the step's unconstrained space; ``None`` starts
        from the curvature of the log posterior and tunes during tuning.
    tune : bool, default True
        Adapt the proposal during tuning (acceptance target about 0.23).
    model : pymc.Model, optional

    Notes
    -----
    Sample stats per draw: ``accepted``, ``data_used`` (rows read to decide; ``N`` for an
    exact decision), ``n_batches``, ``scaling``, ``exact`` (the test reached all rows).
    """

    name = "austere_mh"
    max_scale_factor = 2.0
    stats_dtypes_shapes = {**BASE_STATS, "exact": (bool, [])}

    def __init__(
        self,
        vars=None,
        *,
        epsilon=0.05,
        batch_size=500,
        batch_increment=None,
        proposal=None,
        scaling=None,
        tune=True,
        model=None,
        **kwargs,
    ):
        if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
            raise TypeError(f"epsilon must be a number in [0, 0.5), got {epsilon!r}.")
        if not 0.0 <= float(epsilon) < 0.5:
            raise ValueError(
                f"epsilon={epsilon} is out of range: it must be in [0, 0.5) (0 is exact MH; "
                "typical values 0.01-0.2)."
            )
        self.epsilon = float(epsilon)
        super().__init__(
            vars, proposal=proposal, scaling=scaling, tune=tune, model=model, **kwargs
        )
        self._set_batches(batch_size, batch_increment)

    def _decide(self, q, q_prop, log_prior_ratio, log_qratio):
        res = austere_test(
            self.rng,
            self.loglik_diff_fn(q, q_prop),
            self.n_rows,
            log_prior_ratio + log_qratio,
            epsilon=self.epsilon,
            batch_size=self.batch_size,
            batch_increment=self.batch_increment,
            # the CLT matters only for the t-test: epsilon = 0 never uses it
            return_first_batch=self.epsilon > 0 and "clt" not in self._warned,
            # epsilon = 0 reads every row: the kernel then reads them in order
            sampler=self._sampler.restart(self.rng) if self.epsilon > 0 else None,
        )
        if res.first_batch is not None and res.first_batch.size > 2:
            ok, msg = clt_check(res.first_batch, self.n_rows)
            if not ok:
                self.warn_once(
                    "clt",
                    f"AustereMH: the t-test's normal approximation looks unsafe ({msg}). The "
                    "approximate test can behave erratically here (sparse data, outliers): "
                    "raise batch_size, lower epsilon, or use ScalableMH.",
                )
            else:
                self._warned.add("clt")  # checked once per chain
        if res.nonfinite:
            self.warn_once(
                "nonfinite",
                "AustereMH: a non-finite log-likelihood difference was met and the proposal "
                "rejected; check the model at the proposed values.",
            )
        return bool(res.accept), {
            "data_used": int(res.data_used),
            "n_batches": int(res.n_batches),
            "exact": bool(res.exact),
        }
