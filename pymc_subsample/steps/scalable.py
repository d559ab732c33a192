"""ScalableMH: exact subsampling Metropolis-Hastings of Cornish, Vanetti, Bouchard-Cote,
Deligiannidis & Doucet (2019), "Scalable Metropolis-Hastings for exact Bayesian inference
with large datasets": factorised MH with Taylor control variates, Poisson thinning and
truncation."""

from __future__ import annotations

import math

import numpy as np

from ..kernels.variance.control_variates import PredictorTaylorControlVariate
from ..kernels._validation import InvalidParameterError
from ..kernels.scalable.smh import smh_test
from . import scalable_setup
from .mh import Decision, MHStep
from .state import BASE_STATS, acceptance_probability, setting_stats

__all__ = ["ScalableMH"]


class ScalableMH(MHStep):
    """Exact subsampling MH (SMH-k): the chain's invariant distribution is the posterior.

    Set-up, once per step object: the posterior mode ``theta_hat`` and the sums of per-row
    gradients and Hessians there (Newton's method with the exact Hessian, one chunked
    pass per iteration, :func:`pymc_subsample.center.find_center`; or ``center=``), the
    per-row bound constants ``psi_i``, and a table that draws rows in proportion
    to ``psi`` (:class:`~pymc_subsample.kernels.sampling.inverse_cdf.InverseCDFTable`). The Taylor
    control variates are the shared ones of
    :mod:`pymc_subsample.kernels.variance.control_variates`. A step then:

    1. draws a proposal and accepts the data-free first factor exactly (prior, proposal
       ratio and the Taylor approximation ``Uhat_k`` of the whole log-likelihood);
    2. accepts the factorised remainder ``prod_i min(1, exp(R_i(theta) - R_i(theta')))``,
       ``R_i = U_i - Uhat_{k,i}``, by Poisson thinning: ``K ~ Poisson(phi * Psi)`` rows
       drawn from that table, each rejecting with probability ``lambda_i / (phi psi_i)``;
    3. when ``phi * Psi >= truncation`` (default ``N``), or a point leaves the region,
       tests the rest of the ratio on all ``N`` rows instead (TFMH: never more work than
       plain MH), after the data-free factor, so that far proposals the surrogate
       rejects read nothing (delayed acceptance; exact either way).

    Parameters
    ----------
    vars : list of variables, optional
        Continuous variables to sample (default: all continuous free variables).
    order : {1, 2}, default 2
        Order ``k`` of the Taylor control variates. Second order reads O(1/sqrt(N)) rows
        per step, first order O(1), when ``theta_hat`` is near the mode.
    proposal : str or object, optional
        ``None`` picks ``"pcn"`` for order 2 (reversible w.r.t. the Gaussian approximation
        ``N(m, H^-1)``, ``m = theta_hat - H^-1 grad U(theta_hat)``) and
        ``"preconditioned"`` (random walk with covariance ``H^-1``) for order 1, and
        ``"surrogate_hmc"`` (:class:`~pymc_subsample.proposals.SurrogateHMC`, a leapfrog
        trajectory on the data-free surrogate) whenever the bounds live in predictor
        coordinates (below); any of these names, ``"random_walk"``, ``"reversible"``
        (:class:`~pymc_subsample.proposals.ReversibleRandomWalk`, the paper's eq. 17:
        reversible w.r.t. the first-order approximation at ``theta_hat``, for a
        ``center=`` that is only near the mode), or an object with
        ``draw(q, rng) -> (q_new, log_ratio)``.
    rho : float, optional
        pCN autocorrelation in ``[0, 1)``; ``None`` tunes it during tuning.
    scaling : float, optional
        Proposal scale: ``l`` of the preconditioned random walk
        ``theta' = theta + (l / sqrt(d)) L eps`` (default start 2.38), or the random-walk
        standard deviation for ``proposal="random_walk"``. Tuned during tuning.
    truncation : float, optional
        ``R``: use the exact full-data test when ``phi * Psi >= R``. Default ``N``.
    center : dict or array, optional
        ``theta_hat``: a point dict (as from ``pm.find_MAP``) or the raveled vector in
        the step's unconstrained space. Default: the posterior mode, found by Newton's
        method. (Named ``center``, as in AustereMH and BarkerMinibatch: ``mode`` is
        PyTensor's compile mode, which goes in ``compile_kwargs``.)
    bounds : "auto", callable or array, default "auto"
        Per-row constants ``psi_i`` bounding the (k+1)-th derivatives of
        ``-log p(x_i | q)``. ``"auto"`` recognises GLMs (see
        the families listed in ``docs/families.md``; with several observed variables
        sharing the rows, each recognised, a row's constant is the sum of theirs, taken
        in ``q``); a callable ``bounds(order)`` or an
        array of length ``N`` gives them for any other model. A drawn row that breaks its
        bound raises :class:`~pymc_subsample.kernels.scalable.thinning.BoundViolationError`.
    bound_form : {"whitened", "cornish"}, optional
        How ``lambda_i <= phi * psi_i`` is formed. ``"cornish"``: eq. 12-13 of Cornish et
        al. (2019), ``phi`` from L1 distances to ``theta_hat`` and ``psi_i`` from
        ``max_j |x_ij|``. ``"whitened"`` (the default with ``bounds="auto"``): the
        tighter bound of :func:`~pymc_subsample.kernels.scalable.phi.whitened_phi`, with
        distances whitened by the Laplace covariance and a sharp supremum over directions;
        with the region bounds below, 0.80 instead of 6.1 rows per step (order 2) and 29
        instead of 273 (order 1, factorised test) on a 10-feature logistic regression at
        N = 10^5 (``benchmarks/smh_bounds.py``). User ``bounds=`` are eq. 12's constants
        and use ``"cornish"``.
    region : "auto", float or None, default "auto"
        With the whitened bounds: the radius ``R`` of the ball
        ``||L^-1 (theta - theta_hat)|| <= R`` on which the bounds hold (``"auto"``:
        ``sqrt(d) + 4``, which a Gaussian posterior leaves with probability below
        ``1e-6``). Each row's constant is then the supremum of its derivative over the
        interval its linear predictor can reach in the ball
        (:mod:`pymc_subsample.kernels.scalable.region`), smaller than the global one, and finite
        for a Poisson likelihood with a log link. Rows with an unknown scale or shape
        (Normal, Student-t, Gamma-log, NegativeBinomial-log) take the suprema of their
        partials over the box that ``(eta_i, log scale)`` can reach, with the path step
        factor (:func:`~pymc_subsample.kernels.scalable.phi.path_phi`); they need the region.
        A pair with a point outside the ball
        takes the exact full-data test (stat ``fallback``), so the chain stays exact.
        ``None``: global bounds (not available for Poisson).
    data_test : {"factorised", "poisson"}, optional
        How the data factor is tested, with the same rows read on average: SMH's
        factorised test (Cornish et al. 2019; the default for order 2, where it accepts
        about 98% of pCN proposals) or the Poisson auxiliary variables of MH-SS (Prado,
        Nemeth & Sherlock 2024; the default for order 1, where rows whose remainder falls
        offset those whose remainder rises and the acceptance is much higher).
    init : {"laplace", "model"}, default "laplace"
        Where each chain's warm-up starts: a draw of the Laplace approximation at
        ``theta_hat`` (like NUTS's jittered start; the bounds grow with the distance from
        ``theta_hat``, so a start tens of sds away reads many rows per step), or PyMC's
        initial point.
    tune : bool, default True
    model : pymc.Model, optional

    Notes
    -----
    Predictor coordinates: when a GLM's linear predictor is affine in a few data-free
    parameter expressions ``v(q)`` but not in ``q`` (a non-centred hierarchical model:
    ``v = (beta, mu + tau * z)``; a sampled scale adds ``log sigma``), the control
    variates, whitening, region and bounds are taken in ``v``
    (:mod:`pymc_subsample.steps.scalable_bounds`), evaluated exactly at both points of
    every step; exactness is unchanged (Cornish et al. 2019, eq. 10 in ``v``).

    Sample stats per draw: ``accepted``, ``data_used`` (rows whose likelihood was
    evaluated: at most ``K``, or ``N`` on a fallback), ``n_batches``, ``scaling``,
    ``poisson_rate`` (``phi * Psi``) and ``fallback`` (the full-data test was chosen; it
    reads the rows only if the data-free factor accepted). The settings go with every
    draw as constant stats ``setting_order``, ``setting_truncation``, ``setting_region``
    and ``setting_steps_per_draw`` (:func:`pymc_subsample.diagnostics.step_settings`).
    """

    name = "scalable_mh"
    SETTINGS = MHStep.SETTINGS + ("order", "truncation", "region")
    SCALING_FROM_LAPLACE = False
    stats_dtypes_shapes = {
        **BASE_STATS,
        "poisson_rate": (np.float64, []),
        "fallback": (bool, []),
        **setting_stats(SETTINGS),
    }
    PROGRESS_COLUMNS = (
        ("data_used", "pms_rows", "Rows", "{:.2f}"),
        ("accepted", "pms_accept", "Acc", "{:.2f}"),
        ("fallback", "pms_fallback", "Fallbk", "{:.3f}"),
    )

    def __init__(
        self,
        vars=None,
        *,
        order=2,
        proposal=None,
        rho=None,
        scaling=None,
        truncation=None,
        center=None,
        bounds="auto",
        bound_form=None,
        region="auto",
        data_test=None,
        tune=True,
        model=None,
        **kwargs,
    ):
        (self.order, self._truncation_arg, self.bound_form, self._region_arg,
         self.data_test, proposal_kwargs) = scalable_setup.check_args(
            order, truncation, bounds, bound_form, region, data_test, rho, proposal, kwargs)
        self._center_arg = center
        self._bounds_arg = bounds
        super().__init__(
            vars,
            proposal=proposal,
            scaling=scaling,
            tune=tune,
            model=model,
            proposal_kwargs=proposal_kwargs,
            **kwargs,
        )

    def settings(self) -> dict:
        """The recorded settings: the Taylor ``order``, the ``truncation`` in effect
        (``N`` by default), the ``region`` radius in Laplace sds (NaN: global bounds) and
        ``steps_per_draw``."""
        region = None if self.bounds is None else self.bounds.region
        return {**super().settings(), "order": self.order, "truncation": self.truncation,
                "region": np.nan if region is None else float(region)}

    # ------------------------------------------------------------------ set-up
    #: the rows are checked by :meth:`_check_rows` (a recognised GLM's NumPy terms)
    ENGINE_CHECKS_ROWS = False

    def _setup(self):
        self._check_rows()
        super()._setup()
        self._take_row_check()  # whatever path the set-up took, the rows were checked

    def _before_sweep(self):
        self._take_row_check()

    def _check_rows(self):
        """The engine's data checks before anything else reads the data
        (:func:`~pymc_subsample.steps.scalable_setup.check_rows`); the scan of every row
        rides on the mode search's first pass over all rows, and the GLM found for it is
        reused."""
        self._row_check, self._affine_found = scalable_setup.check_rows(
            self.engine, self._bounds_arg, self.bound_form)

    def _take_row_check(self, lik=None):
        """Hand the deferred row check to ``lik``'s next pass over all rows, or (``lik``
        None, or a check that no pass took) run it now."""
        self._row_check = scalable_setup.hand_row_check(self._row_check, lik)

    def _setup_settings(self):
        """The ``truncation`` in effect (whatever the kernel: :meth:`settings` records
        it); no bounds yet (the sweep's are per group, steps/hierarchical/)."""
        self.truncation = (
            float(self.n_rows) if self._truncation_arg is None else float(self._truncation_arg))
        self.bounds = None

    def _setup_target(self):
        """The centre, the control variates and the bounds (:mod:`pymc_subsample.steps.
        scalable_setup`, :mod:`pymc_subsample.steps.scalable_bounds`)."""
        eng = self.engine
        # cheap checks first, before the mode search and the data pass
        msg = self._other_steps_message(
            "ScalableMH (its Taylor control variates and bounds at theta_hat)",
            "Add them to vars= (variables that only enter the prior may be left to other "
            "steps).")
        if msg:
            raise InvalidParameterError(msg)
        #: the recognised GLM of each observed variable (None: user bounds); with several
        #: (sharing the rows) the bounds are the sums of theirs, in q (``q_bounds``)
        self._glm_specs = scalable_setup.recognise_glms(eng, self._bounds_arg)
        several = scalable_setup.summed_specs(self._glm_specs)
        self._glm_spec = None if self._glm_specs is None or several else self._glm_specs[0]
        found, self._affine_found = self._affine_found, None
        # the rows' check rides on the mode search's first pass over all rows, or runs
        self.center, self._setup_warning, affine_map, rider_done = (
            scalable_setup.locate_center(
                eng, self._center_arg, self._glm_spec, found, self._row_check,
                whitened=self.bound_form == "whitened", order=self.order,
                region=self._region_arg))
        self._row_check = None
        self.theta_hat = self.center.theta
        gauss_mean, cov = self.center.laplace()
        self._set_laplace(gauss_mean, cov)
        self.control, self.bounds, self._curved = scalable_setup.control_and_bounds(
            eng, self._glm_specs, self._glm_spec, self.center, cov, self._laplace_chol,
            affine_map, rider_done, order=self.order, bounds_arg=self._bounds_arg,
            bound_form=self.bound_form, region=self._region_arg)
        return self.theta_hat, (gauss_mean, cov)

    def _default_proposal(self) -> str:
        """pCN (order 2) or the preconditioned random walk (order 1); surrogate HMC when
        the bounds live in predictor coordinates that are curved in ``q``."""
        if self._curved:
            return "surrogate_hmc"
        return "pcn" if self.order == 2 else "preconditioned"

    def _compile(self):
        if not isinstance(self.control, PredictorTaylorControlVariate):
            # the exact full-data test (truncation, or a point outside the region) runs
            # the engine's compiled differences: compiled now, not inside the draws
            self.engine.compile("ll_diff")

    # ------------------------------------------------------------------ control variates
    @property
    def psi(self) -> np.ndarray:
        """The bound constants ``psi_i``."""
        return self.bounds.psi

    @property
    def region(self):
        return self.bounds.region

    @property
    def psi_total(self) -> float:
        return self.bounds.psi_total

    @property
    def table(self):
        return self.bounds.table

    def whiten(self, q) -> np.ndarray:
        """Whitened coordinates ``L^-1 (x - x_hat)`` of ``q`` (whitened bounds only)."""
        return self.bounds.whiten_inv @ (self.control.coordinates(q) - self.control.center)

    def proxy_sum_diff(self, q, q_prop) -> float:
        """``sum_i lhat_i(q') - lhat_i(q)`` over all rows, in closed form."""
        return self.control.sum_diff(q, q_prop)

    def remainder_fn(self, q, q_prop):
        """``rows -> R_i(q') - R_i(q)`` (before clipping): minus the control variates'
        residuals (Cornish et al. 2019, Sec. 3.1)."""
        control = self.control

        def remainder(rows):
            return -control.residuals(q, q_prop, rows)

        return remainder

    def full_loglik_diff(self, q, q_prop) -> float:
        """``sum_i l_i(q') - l_i(q)`` over all N rows, for the exact full-data test: the
        predictor coordinates' NumPy row terms chunk by chunk when the bounds live in
        them (nothing to compile), else the engine's compiled differences. A proposal
        whose rows give NaN (a parameter outside its support) gives -inf: rejected."""
        return self.control.full_diff(q, q_prop)

    # ------------------------------------------------------------------ the step
    def _decide(self, q, q_prop, log_prior_ratio, log_qratio) -> Decision:
        control = self.control
        # the proxy and the bounds live in q, or in the predictor coordinates v(q)
        x, x_prop = control.coordinates(q), control.coordinates(q_prop)
        # first factor: prior, proposal ratio and exp(-Uhat_k), exactly (O(d^2))
        log_first = log_qratio + log_prior_ratio + control.sum_diff(q, q_prop)
        first = math.exp(min(0.0, log_first)) if log_first == log_first else 0.0
        if not (np.all(np.isfinite(x_prop)) and log_first == log_first):
            return Decision(False, first_factor=first,
                            extras={"poisson_rate": 0.0, "fallback": False})
        bounds = self.bounds
        phi, outside = bounds.phi(q, q_prop, x, x_prop, control.center, self.theta_hat)

        def full_log_ratio():
            return log_prior_ratio + log_qratio + control.full_diff(q, q_prop)

        res = smh_test(self.rng, log_first, phi, bounds.psi_total, bounds.table, bounds.psi,
                       self.remainder_fn(q, q_prop), full_log_ratio,
                       truncation=self.truncation, force_full=outside,
                       data_test=self.data_test)
        return Decision(
            bool(res.accept), accept=acceptance_probability(res.log_ratio),
            data_used=int(res.data_used), n_batches=int(res.data_used > 0),
            first_factor=first,
            extras={"poisson_rate": float(res.poisson_rate), "fallback": bool(res.fallback)})

