"""ScalableMH: exact subsampling Metropolis-Hastings of Cornish, Vanetti, Bouchard-Cote,
Deligiannidis & Doucet (2019), "Scalable Metropolis-Hastings for exact Bayesian inference
with large datasets": factorised MH with Taylor control variates, Poisson thinning and
truncation."""

from __future__ import annotations

import math
import numbers

import numpy as np
import scipy.linalg as sla

from ..center import center_at, find_center, parse_point
from ..engine.glm import (SUPPORTED_TEXT, chunk_psi, detect_glm, glm_psi,
                   two_param_chunk_psi)
from ..kernels.control_variates import TaylorProxy
from ..engine.predictor import affine_likelihood, bound_coordinates
from ..kernels.predictor import whitening
from ..proposals import SurrogateHMC
from ..kernels.control_variates import residuals
from ..kernels.phi import region_phi, taylor_phi
from ..kernels.alias import AliasTable
from ..kernels.smh import smh_test
from .base import SubsampleStep
from .state import BASE_STATS, acceptance_probability, setting_stats

__all__ = ["ScalableMH"]


class ScalableMH(SubsampleStep):
    """Exact subsampling MH (SMH-k): the chain's invariant distribution is the posterior.

    Set-up, once per step object: the posterior mode ``theta_hat`` and the sums of per-row
    gradients and Hessians there (Newton's method with the exact Hessian, one chunked
    pass per iteration, :func:`pymc_subsample.center.find_center`; or ``center=``), the
    per-row bound constants ``psi_i``, and Walker's alias table over ``psi``. The Taylor
    control variates are the shared ones of
    :mod:`pymc_subsample.kernels.control_variates`. A step then:

    1. draws a proposal and accepts the data-free first factor exactly (prior, proposal
       ratio and the Taylor approximation ``Uhat_k`` of the whole log-likelihood);
    2. accepts the factorised remainder ``prod_i min(1, exp(R_i(theta) - R_i(theta')))``,
       ``R_i = U_i - Uhat_{k,i}``, by Poisson thinning: ``K ~ Poisson(phi * Psi)`` rows
       from the alias table, each rejecting with probability ``lambda_i / (phi psi_i)``;
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
        :data:`pymc_subsample.engine.glm.SUPPORTED_TEXT`); a callable ``bounds(order)`` or an
        array of length ``N`` gives them for any other model. A drawn row that breaks its
        bound raises :class:`~pymc_subsample.kernels.thinning.BoundViolationError`.
    bound_form : {"whitened", "cornish"}, optional
        How ``lambda_i <= phi * psi_i`` is formed. ``"cornish"``: eq. 12-13 of Cornish et
        al. (2019), ``phi`` from L1 distances to ``theta_hat`` and ``psi_i`` from
        ``max_j |x_ij|``. ``"whitened"`` (the default with ``bounds="auto"``): the
        tighter bound of :func:`~pymc_subsample.kernels.phi.whitened_phi`, with
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
        (:mod:`pymc_subsample.kernels.region`), smaller than the global one, and finite
        for a Poisson likelihood with a log link. Rows with an unknown scale or shape
        (Normal, Student-t, Gamma-log, NegativeBinomial-log) take the suprema of their
        partials over the box that ``(eta_i, log scale)`` can reach, with the path step
        factor (:func:`~pymc_subsample.kernels.phi.path_phi`); they need the region.
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
    Predictor coordinates. When the linear predictor of a GLM (Bernoulli-logit or
    -probit, Poisson-log, Normal or Student-t with a fixed or sampled scale) is not affine in
    the step's unconstrained variables but is affine in a few data-free parameter
    expressions, ``eta_i = a_i . v(q) + o_i`` (a non-centred hierarchical model:
    ``v = (beta, mu + tau * z)``), the Taylor control variates, the whitening, the region
    and the bound constants are taken in ``v`` (:mod:`pymc_subsample.engine.predictor`), and
    ``v`` is evaluated exactly at both points of every step. A sampled scale adds its
    parameter parts (``log sigma``, or ``log sigma`` per group) to ``v``; the rows are then
    functions of ``(eta_i, log sigma_i)``, with path bounds over the box they can reach in
    the region. The factorisation of the target, and hence exactness, is unchanged (Cornish et al. 2019, eq. 10 with the
    proxy expanded in ``v``).

    Sample stats per draw: ``accepted``, ``data_used`` (rows whose likelihood was
    evaluated: at most ``K``, or ``N`` on a fallback), ``n_batches``, ``scaling``,
    ``poisson_rate`` (``phi * Psi``) and ``fallback`` (the full-data test was chosen; it
    reads the rows only if the data-free factor accepted). The settings go with every
    draw as constant stats ``setting_order``, ``setting_truncation``, ``setting_region``
    and ``setting_steps_per_draw`` (:func:`pymc_subsample.diagnostics.step_settings`).
    """

    name = "scalable_mh"
    SETTINGS = SubsampleStep.SETTINGS + ("order", "truncation", "region")
    stats_dtypes_shapes = {
        **BASE_STATS,
        "poisson_rate": (np.float64, []),
        "fallback": (bool, []),
        **setting_stats(SETTINGS),
    }
    CHAIN_ATTRS = SubsampleStep.CHAIN_ATTRS + ("_first_prob",)
    PROGRESS_COLUMNS = (
        ("data_used", "pms_rows", "Rows/draw", "{:,.2f}"),
        ("accepted", "pms_accept", "Accept", "{:.2f}"),
        ("fallback", "pms_fallback", "Fallback", "{:.3f}"),
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
        if isinstance(order, bool) or order not in (1, 2):
            raise ValueError(f"order must be 1 or 2 (the Taylor order k), got {order!r}.")
        self.order = int(order)
        if truncation is not None:
            if not isinstance(truncation, numbers.Real) or not truncation > 0:
                raise ValueError(f"truncation must be a positive number, got {truncation!r}.")
        self._truncation_arg = truncation
        if "mode" in kwargs:
            raise TypeError(
                "ScalableMH takes its centre theta_hat as center= (it was mode=). For "
                "PyTensor's compile mode pass compile_kwargs={'mode': ...}, as with PyMC's "
                "own step methods."
            )
        self._center_arg = center
        self._bounds_arg = bounds
        auto = isinstance(bounds, str)
        if bound_form is None:
            bound_form = "whitened" if auto else "cornish"
        if bound_form not in ("whitened", "cornish"):
            raise ValueError(
                f"bound_form must be 'whitened' or 'cornish', got {bound_form!r}.")
        if bound_form == "whitened" and not auto:
            raise ValueError(
                "bound_form='whitened' needs bounds='auto' (the whitened row factors come "
                "from the recognised linear predictor); user bounds are the constants of "
                "Cornish et al. (2019, eq. 12): use bound_form='cornish'.")
        self.bound_form = bound_form
        if region is not None and not (isinstance(region, str) and region == "auto"):
            if isinstance(region, bool) or not isinstance(region, numbers.Real) or not (
                    0 < region < np.inf):
                raise ValueError(
                    f"region must be 'auto', None or a positive radius (in Laplace sds), got "
                    f"{region!r}.")
        if region is not None and bound_form != "whitened":
            region = None  # region bounds are whitened bounds: eq. 12's are global
        self._region_arg = region
        if data_test is None:
            data_test = "poisson" if self.order == 1 else "factorised"
        if data_test not in ("factorised", "poisson"):
            raise ValueError(
                f"data_test must be 'factorised' (SMH) or 'poisson' (MH-SS), got {data_test!r}.")
        self.data_test = data_test
        # None: pCN (order 2) or the preconditioned random walk (order 1); surrogate HMC
        # when the bounds live in predictor coordinates (a curved posterior)
        self._default_proposal = proposal is None
        if proposal is None:
            proposal = "pcn" if self.order == 2 else "preconditioned"
        proposal_kwargs = dict(kwargs.pop("proposal_kwargs", None) or {})
        if isinstance(proposal, str) and proposal.lower() == "pcn":
            proposal_kwargs.setdefault("rho", rho)
        elif rho is not None:
            raise ValueError("rho applies to proposal='pcn' only.")
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
        region = getattr(self, "region", None)
        return {**super().settings(), "order": self.order, "truncation": self.truncation,
                "region": np.nan if region is None else float(region)}

    # ------------------------------------------------------------------ set-up
    def _setup_proposal(self, scaling):
        eng = self.engine
        self.truncation = (
            float(self.n_rows) if self._truncation_arg is None else float(self._truncation_arg)
        )
        # cheap checks first, before the mode search and the data pass
        self._check_likelihood_vars()
        self._glm_spec = self._check_bounds_arg()
        # an ordinary GLM: the mode search's passes use the predictor coordinates' NumPy
        # row terms instead of compiling the engine's Hessian graph
        lik = eng
        self._affine_vmap = None
        if self._glm_spec is not None and self.bound_form == "whitened":
            self._affine_vmap, lik = affine_likelihood(eng, self._glm_spec, eng.initial_q())
        if self._center_arg is None:
            self.center = find_center(lik)
        else:
            self.center = center_at(lik, parse_point(self._center_arg, eng, "center"))
        self.theta_hat = self.center.theta
        self.proxy = self.center.proxy(self.order)
        gauss_mean, cov = self.center.laplace()
        self._set_laplace(gauss_mean, cov)
        self._vmap = bound_coordinates(self.engine, self._glm_spec, self.theta_hat,
                                       self._affine_vmap, self.bound_form == "whitened")
        if self._vmap is None:
            # the exact full-data test (truncation, or a point outside the region) runs
            # the engine's compiled differences: compiled now, not inside the draws
            eng.compile("ll_diff")
        if self._vmap is not None:
            self.psi = self._setup_predictor_coordinates(cov)
        else:
            if self.bound_form == "whitened":
                self._whiten_inv = sla.solve_triangular(
                    self._laplace_chol, np.eye(self.ndim), lower=True)
            self.region = self._region_radius(self.ndim)
            self.psi = self._bound_constants()
        if self.psi.shape != (self.n_rows,) or not np.all(np.isfinite(self.psi)) or np.any(
            self.psi < 0
        ):
            raise ValueError(
                f"ScalableMH: the bound constants must be {self.n_rows} finite values >= 0, got "
                f"shape {self.psi.shape}."
            )
        self.psi_total = float(self.psi.sum(dtype=np.float64))  # psi may be float32
        self.alias = AliasTable(self.psi) if self.psi_total > 0 else None
        if self._vmap is not None and self._default_proposal and not self._vmap.v_is_affine(
                self.theta_hat):
            self.proposal = SurrogateHMC()  # a curved posterior: follow it
        self.proposal.setup(
            self.ndim,
            scaling=scaling,
            grad_fn=self._proposal_grad_fn(),
            n_total=self.n_rows,
            mode=gauss_mean if self._wants_gaussian_mean() else self.theta_hat,
            cov=cov,
        )

    def _region_radius(self, dim):
        """The region's radius in whitened units (``"auto"``: ``sqrt(dim) + 4``), or None."""
        r = self._region_arg
        return (math.sqrt(dim) + 4.0) if r == "auto" else (None if r is None else float(r))

    def _setup_predictor_coordinates(self, cov):
        """Taylor proxy, whitening, region and bound constants in the predictor
        coordinates ``v = v(q)`` (:mod:`pymc_subsample.kernels.predictor`): one pass."""
        spec, vmap = self._glm_spec, self._vmap
        v_hat = vmap.v(self.theta_hat)
        chol, self._whiten_inv = whitening(vmap.jacobian_v(self.theta_hat), cov)
        self.region = self._region_radius(vmap.size)
        if self.region is None and (spec.family == "poisson_log" or vmap.scale):
            raise ValueError(
                f"ScalableMH: observed '{spec.observed}' ({spec.family}) has derivatives that "
                "are unbounded over the whole space; it needs region bounds (region='auto' "
                "or a radius).")
        nu, sigma = vmap.params.get("nu"), vmap.params.get("sigma")

        def psi_chunk(J, base, y, start, stop):
            if vmap.scale:
                return two_param_chunk_psi(spec.family, self.order, J, base, y, whiten=chol,
                                           radius=self.region, nu=nu)
            return chunk_psi(spec, self.order, J, base, whiten=chol, radius=self.region,
                             y=y, sigma=sigma, nu=nu)

        grad, hess, psi = vmap.data_pass(v_hat, self.order, psi_chunk)
        self.proxy = TaylorProxy(v_hat, grad, hess, self.order)
        return psi

    def _check_likelihood_vars(self):
        """Refuse a likelihood that depends on variables this step does not sample.

        ``theta_hat``, the Taylor coefficients and their sums are computed once, with the
        other variables at their initial values; if another step (e.g. NUTS in a
        ``CompoundStep``) moved a variable of the likelihood, the control variates would
        be stale and the bounds ``lambda_i <= phi * psi_i`` would not hold.
        """
        others = self.likelihood_vars_of_other_steps()
        if others:
            raise ValueError(
                "ScalableMH must sample every variable the likelihood depends on: its Taylor "
                "control variates at theta_hat are computed once, so the likelihood cannot "
                f"depend on {', '.join(repr(o) for o in others)}, sampled by another step. Add "
                "them to vars= (variables that only enter the prior may be left to other steps)."
            )

    def _check_bounds_arg(self):
        """Validate ``bounds=`` early; for ``"auto"`` recognise the GLM (or raise)."""
        bounds = self._bounds_arg
        if isinstance(bounds, str):
            if bounds != "auto":
                raise ValueError(f"bounds must be 'auto', a callable or an array. {SUPPORTED_TEXT}")
            return detect_glm(self.engine.model)
        if bounds is None:
            raise ValueError(f"ScalableMH needs bound constants. {SUPPORTED_TEXT}")
        return None

    def _bound_constants(self):
        bounds = self._bounds_arg
        if isinstance(bounds, str):
            whiten = self._laplace_chol if self.bound_form == "whitened" else None
            return glm_psi(self.engine, self._glm_spec, self.order, self.theta_hat,
                           whiten=whiten, radius=self.region)
        if callable(bounds):
            return np.asarray(bounds(self.order), dtype=np.float64)
        return np.asarray(bounds, dtype=np.float64)

    # ------------------------------------------------------------------ control variates
    def whiten(self, q) -> np.ndarray:
        """Whitened coordinates ``L^-1 (x - x_hat)`` of ``q`` (whitened bounds only)."""
        return self._whiten_inv @ (self.coordinates(q) - self.proxy.center)

    def proxy_sum_diff(self, q, q_prop) -> float:
        """``sum_i lhat_i(q') - lhat_i(q)`` over all rows, in closed form."""
        return self.proxy.sum_diff(self.coordinates(q), self.coordinates(q_prop))

    def remainder_fn(self, q, q_prop, x=None, x_prop=None):
        """``rows -> R_i(q') - R_i(q)`` (before clipping), in the step's coordinates
        (``x``, ``x_prop``: those of ``q``, ``q_prop`` when already computed)."""
        if self._vmap is None:
            return self._remainder_fn(q, q_prop)
        x = self.coordinates(q) if x is None else x
        x_prop = self.coordinates(q_prop) if x_prop is None else x_prop
        return self._vmap.remainder_fn(x, x_prop, self.proxy.center, self.order)

    def _remainder_fn(self, q, q_prop):
        """``rows -> R_i(q') - R_i(q)``, ``R_i = U_i - Uhat_{k,i}`` (lambda_i before clipping):
        minus the control-variate residuals, from one engine call (directional
        derivatives at ``theta_hat``; no per-row Hessian is formed)."""
        eng, c, order = self.engine, self.theta_hat, self.order

        def remainder(rows):
            return -residuals(eng.loglik_diff_taylor(q, q_prop, c, rows, order))

        return remainder

    def full_loglik_diff(self, q, q_prop, x=None, x_prop=None) -> float:
        """``sum_i l_i(q') - l_i(q)`` over all N rows, for the exact full-data test: the
        predictor coordinates' NumPy row terms chunk by chunk when the bounds live in
        them (nothing to compile), else the engine's compiled differences. A proposal
        whose rows give NaN (a parameter outside its support) gives -inf: rejected."""
        if self._vmap is None:
            return self.engine.full_loglik_diff(q, q_prop)
        x = self.coordinates(q) if x is None else x
        x_prop = self.coordinates(q_prop) if x_prop is None else x_prop
        with np.errstate(all="ignore"):
            total = self._vmap.full_loglik_diff(x, x_prop)
        return total if total == total else -math.inf

    # ------------------------------------------------------------------ the step
    def _decide(self, q, q_prop, log_prior_ratio, log_qratio):
        # the proxy and the bounds live in q, or in the predictor coordinates v(q)
        x, x_prop, center = self.coordinates(q), self.coordinates(q_prop), self.proxy.center
        remainder_fn = self.remainder_fn(q, q_prop, x, x_prop)
        # first factor: prior, proposal ratio and exp(-Uhat_k), exactly (O(d^2))
        log_first = log_qratio + log_prior_ratio + self.proxy.sum_diff(x, x_prop)
        self._first_prob = math.exp(min(0.0, log_first)) if log_first == log_first else 0.0
        if not (np.all(np.isfinite(x_prop)) and log_first == log_first):
            return False, {"data_used": 0, "n_batches": 0, "poisson_rate": 0.0,
                           "fallback": False}
        outside = False
        if self.bound_form == "whitened":
            w = self._whiten_inv
            phi, outside = region_phi(
                w @ (x - center), w @ (x_prop - center), self.order, region=self.region,
                path=self._glm_spec is not None and self._glm_spec.two_param)
        else:
            try:
                phi = taylor_phi(q, q_prop, self.theta_hat, self.order)
            except OverflowError:
                phi = math.inf  # a point too far for the bounds' arithmetic: exact test
        if self.psi_total == 0.0:
            phi = 0.0  # the remainders vanish (e.g. a Normal likelihood with known scale)

        def full_log_ratio():
            return log_prior_ratio + log_qratio + self.full_loglik_diff(q, q_prop, x, x_prop)

        res = smh_test(
            self.rng,
            log_first,
            phi,
            self.psi_total,
            self.alias,
            self.psi,
            remainder_fn,
            full_log_ratio,
            truncation=self.truncation,
            force_full=outside,
            data_test=self.data_test,
        )
        return bool(res.accept), {
            "data_used": int(res.data_used),
            "accept": acceptance_probability(res.log_ratio),
            "n_batches": int(res.data_used > 0),
            "poisson_rate": float(res.poisson_rate),
            "fallback": bool(res.fallback),
        }
