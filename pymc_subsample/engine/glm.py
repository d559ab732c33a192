"""Recognising generalised linear likelihoods in a PyMC model, for ScalableMH's bounds.

ScalableMH (Cornish et al. 2019) needs per-row constants ``psi_i`` bounding every
(k+1)-th partial derivative of ``U_i = -log p(x_i | theta)`` (see
:mod:`pymc_subsample.kernels.bounds`). For a row term that depends on the step's
variables only through a linear predictor, ``U_i = f(eta_i)`` with
``eta_i = a_i + sum_j J_ij q_j`` (``q`` the step's raveled unconstrained vector), every
(k+1)-th partial derivative is ``f^(k+1)(eta_i) * J_ij1 ... J_ij(k+1)``, so

    psi_i = sup |f^(k+1)| * M_i^(k+1),   M_i = max_j |J_ij|.

This module finds ``f`` and ``eta`` in the model graph and computes ``M_i`` from the
model itself: ``J`` is the Jacobian of ``eta`` with respect to ``q``, which for an affine
``eta`` is constant, so the columns ``eta(q_hat + e_j) - eta(q_hat)`` are exact (up to
rounding, covered by a relative margin).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytensor.tensor as pt
import pytensor.scalar as ps
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.random.basic import (BernoulliRV, GammaRV, NegBinomialRV, NormalRV,
                                          PoissonRV, StudentTRV)

from .evaluate import thread_copy
from ..kernels.bounds import UpperBounds, glm_bound_constants
from ..kernels.region import TWO_PARAM_FAMILIES, local_sup, local_sup2, path_constant

try:  # PyTensor >= 2.31 moved graph traversal helpers
    from pytensor.graph.traversal import ancestors, graph_inputs
except ImportError:  # pragma: no cover - older PyTensor
    from pytensor.graph.basic import ancestors, graph_inputs

__all__ = ["GLMSpec", "detect_glm", "glm_psi", "chunk_psi", "two_param_chunk_psi",
           "eta_is_affine", "SUPPORTED_TEXT"]

SUPPORTED_TEXT = (
    "bounds='auto' recognises one observed variable whose row terms depend on the step's "
    "variables only through a linear predictor eta_i = x_i . beta (+ intercept) and, for "
    "some families, a scale or shape parameter sampled on the log scale: "
    "pm.Bernoulli with logit_p=eta (or p=pm.math.invlogit(eta)) or with a probit link, "
    "p=pm.math.invprobit(eta); pm.Normal(mu=eta, sigma) "
    "and pm.StudentT(nu, mu=eta, sigma) with nu fixed and sigma fixed or a positive "
    "free variable; pm.Poisson(mu=pm.math.exp(eta)); pm.NegativeBinomial(mu=pm.math.exp(eta), "
    "alpha) and pm.Gamma with mean pm.math.exp(eta) and shape alpha fixed or a positive "
    "free variable (the last four and unknown scales need region bounds, the default). "
    "For Bernoulli-logit and -probit, Poisson-log, Normal and Student-t (scale fixed or "
    "sampled) eta may also be affine in data-free parameter expressions only, "
    "as in a non-centred hierarchical model, mu + tau * z[g] + X @ beta (and a sampled "
    "scale may be sigma or sigma[g]). "
    "For any other model "
    "pass bounds=callable: bounds(order) -> array of N per-row "
    "constants psi_i >= sup |(order+1)-th partial derivatives of -log p(x_i | q)| over the "
    "step's unconstrained space (Cornish et al. 2019, eq. 12), or that array itself."
)

_SIGMOID = pt.sigmoid(pt.dvector()).owner.op


@dataclass
class GLMSpec:
    """A recognised GLM likelihood: family, linear predictor and fixed parameters."""

    family: str
    observed: str
    eta: object  # model expression (in terms of value variables)
    params: dict  # fixed family parameters: arrays broadcastable to (N,)
    log_scale: object = None  # two-parameter rows: log scale / log shape expression
    compiled: dict = field(default_factory=dict, repr=False)  # functions built once

    @property
    def two_param(self) -> bool:
        """Rows depend on the parameters through ``eta`` and a log scale (path bound)."""
        return self.family in TWO_PARAM_FAMILIES


def _probit_predictor(p):
    """``eta`` with ``p = Phi(eta)`` (the standard normal cdf), or None.

    PyMC writes the probit link as ``pm.math.invprobit(eta) = 0.5 erfc(-eta / sqrt 2)``;
    ``0.5 (1 + erf(eta / sqrt 2))`` is the other common spelling. Rather than match every
    way of writing the constants, take the argument ``z`` of the first ``erfc`` / ``erf``
    below ``p``, check that ``p`` depends on nothing else, and compare ``p(z)`` with
    ``Phi(-sqrt 2 z)`` (``erfc``) or ``Phi(sqrt 2 z)`` (``erf``) at a few values.
    """
    import pytensor
    from pytensor.graph.replace import clone_replace
    from scipy.special import ndtr

    if p.owner is None:
        return None
    node = p.owner
    for _ in range(8):  # a few elementwise ops above the erf
        if not isinstance(node.op, Elemwise):
            return None
        scalar = node.op.scalar_op
        if isinstance(scalar, (ps.Erfc, ps.Erf)):
            break
        owners = [i.owner for i in node.inputs if i.owner is not None
                  and not all(isinstance(a, pt.TensorConstant) for a in graph_inputs([i]))]
        if len(owners) != 1:
            return None
        node = owners[0]
    else:
        return None
    z = node.inputs[0]
    sign = -1.0 if isinstance(scalar, ps.Erfc) else 1.0
    z_test = pt.vector("z", dtype=z.dtype)
    try:
        h = clone_replace(pt.as_tensor_variable(p), {z: z_test}, rebuild_strict=False)
        if any(v is not z_test and not isinstance(v, pt.TensorConstant) for v in graph_inputs([h])):
            return None
        values = np.linspace(-2.5, 2.5, 11)
        got = pytensor.function([z_test], h, mode="FAST_COMPILE")(values)
    except Exception:  # noqa: BLE001 - not the pattern: the caller says what is supported
        return None
    if not np.allclose(np.broadcast_to(got, values.shape), ndtr(sign * math.sqrt(2.0) * values),
                       rtol=1e-9, atol=1e-12):
        return None
    return sign * math.sqrt(2.0) * z


def _is_fixed(var, model):
    """True when ``var`` depends on no random variable or value variable of the model."""
    free = set(model.free_RVs) | set(model.value_vars) | set(model.observed_RVs)
    return not any(a in free for a in ancestors([var]))


def _fixed_value(var, name, obs, model):
    if not _is_fixed(var, model):
        raise ValueError(
            f"ScalableMH bounds='auto': the {name} of observed '{obs}' depends on a free "
            f"variable; the derivative bounds need a fixed {name} (give it a fixed value, "
            "or pass bounds=). " + SUPPORTED_TEXT
        )
    return np.asarray(var.eval(), dtype=np.float64)


def detect_glm(model) -> GLMSpec:
    """Find the GLM structure of the model's likelihood, or raise a ValueError saying why.

    Parameters
    ----------
    model : pymc.Model

    Returns
    -------
    GLMSpec
    """
    obs = list(model.observed_RVs)
    if len(obs) != 1:
        raise ValueError(
            f"ScalableMH bounds='auto' supports one observed variable, the model has {len(obs)} "
            f"({', '.join(o.name for o in obs)}). " + SUPPORTED_TEXT
        )
    rv = obs[0]
    op = rv.owner.op
    params = op.dist_params(rv.owner) if hasattr(op, "dist_params") else rv.owner.inputs[3:]
    if isinstance(op, BernoulliRV):
        (p,) = params
        if p.owner is not None and isinstance(p.owner.op, Elemwise) and p.owner.op == _SIGMOID:
            spec = GLMSpec("bernoulli_logit", rv.name, p.owner.inputs[0], {})
        elif (eta := _probit_predictor(p)) is not None:
            spec = GLMSpec("bernoulli_probit", rv.name, eta, {})
        else:
            raise ValueError(
                f"ScalableMH bounds='auto': observed '{rv.name}' is Bernoulli but neither with a "
                "logit link (logit_p=eta) nor with a probit link (p=pm.math.invprobit(eta)). "
                + SUPPORTED_TEXT
            )
    elif isinstance(op, StudentTRV):
        nu, mu, sigma = params
        nu_value = _fixed_value(nu, "degrees of freedom nu", rv.name, model)
        if _is_fixed(sigma, model):
            spec = GLMSpec("student_t", rv.name, mu, {
                "nu": nu_value, "sigma": _fixed_value(sigma, "scale sigma", rv.name, model)})
        else:
            spec = GLMSpec("student_t_scale", rv.name, mu, {"nu": nu_value}, pt.log(sigma))
    elif isinstance(op, NormalRV):
        mu, sigma = params
        if _is_fixed(sigma, model):
            spec = GLMSpec("normal", rv.name, mu,
                           {"sigma": _fixed_value(sigma, "scale sigma", rv.name, model)})
        else:
            spec = GLMSpec("normal_scale", rv.name, mu, {}, pt.log(sigma))
    elif isinstance(op, GammaRV):
        # (shape, scale) whatever the user's parametrisation: mean = shape * scale
        shape, scale = params
        spec = GLMSpec("gamma_log", rv.name, pt.log(shape) + pt.log(scale), {}, pt.log(shape))
    elif isinstance(op, NegBinomialRV):
        # (n, p) with n = alpha and p = alpha / (mu + alpha): log mu = log n + log((1-p)/p)
        n, p = params
        spec = GLMSpec("negbinomial_log", rv.name, pt.log(n) + pt.log1p(-p) - pt.log(p), {},
                       pt.log(n))
    elif isinstance(op, PoissonRV):
        (mu,) = params
        if mu.owner is None or not (
            isinstance(mu.owner.op, Elemwise) and isinstance(mu.owner.op.scalar_op, ps.Exp)
        ):
            raise ValueError(
                f"ScalableMH bounds='auto': observed '{rv.name}' is Poisson but not with a log "
                "link (use mu=pm.math.exp(eta)). " + SUPPORTED_TEXT
            )
        spec = GLMSpec("poisson_log", rv.name, mu.owner.inputs[0], {})
    else:
        raise ValueError(
            f"ScalableMH bounds='auto' does not know the likelihood of observed '{rv.name}' "
            f"({type(op).__name__}). " + SUPPORTED_TEXT
        )
    spec.eta = model.replace_rvs_by_values([spec.eta])[0]
    if spec.log_scale is not None:
        spec.log_scale = model.replace_rvs_by_values([spec.log_scale])[0]
    return spec


def is_affine(f, x, rng) -> bool:
    """Whether ``f`` (a vector function) is affine about ``x``: its second differences
    ``f(x+a+b) - f(x+a) - f(x+b) + f(x)`` vanish, up to rounding, for three random pairs
    ``a, b`` drawn from ``rng`` (a set-up check, not sampling)."""
    x = np.asarray(x, dtype=np.float64)
    for _ in range(3):
        a, b = rng.standard_normal(x.size), rng.standard_normal(x.size)
        f00, f10, f01, f11 = (f(x + s) for s in (0.0, a, b, a + b))
        second = f11 - f10 - f01 + f00
        scale = np.abs(f00) + np.abs(f10) + np.abs(f01) + np.abs(f11) + 1.0
        if np.any(np.abs(second) > 1e-8 * scale):
            return False
    return True


def sample_rows(engine, rng, size=64):
    """The data of up to ``size`` random rows, for set-up checks."""
    n = engine.n_rows
    return engine.gather(np.sort(rng.choice(n, size=min(n, size), replace=False)))


def _check_affine(engine, eta_fn, q_hat, rng_seed=0):
    """Check on a few rows and random points that eta is affine in q (second differences)."""
    rng = np.random.default_rng(rng_seed)  # set-up check, not sampling
    data = sample_rows(engine, rng)
    return is_affine(lambda q: eta_fn(q, *data), q_hat, rng)


#: sub-box width and most sub-boxes per axis for the two-parameter region suprema
_PIECE_WIDTH = 0.1
_MAX_PIECES = 8


def eta_is_affine(engine, spec, q_hat) -> bool:
    """Whether the linear predictor of ``spec`` is affine in the step's ``q``."""
    fn = _eta_fn(engine, spec)
    return _check_affine(
        engine, lambda q, *data: np.broadcast_to(fn(q, *data)[0], (data[0].shape[0],)),
        np.asarray(q_hat, dtype=np.float64))


def _eta_fn(engine, spec):
    """``f(q, *rows) -> [eta]``, compiled once per spec."""
    if "eta" not in spec.compiled:
        spec.compiled["eta"] = engine.compile_batch([pt.as_tensor_variable(spec.eta)])
    return spec.compiled["eta"]


def _require_affine(engine, fn, q_hat, what, spec):
    if not _check_affine(engine, fn, q_hat):
        extra = ("; a scale or shape must be a positive free variable (log-transformed) or "
                 "a fixed number" if what != "linear predictor" else "")
        raise ValueError(
            f"ScalableMH bounds='auto': the {what} of observed '{spec.observed}' is not "
            "affine in the step's unconstrained variables (e.g. a coefficient multiplied by "
            "another sampled variable, or a positive-constrained coefficient, which is "
            f"log-transformed){extra}. " + SUPPORTED_TEXT
        )


def _two_param_psi(engine, spec, order, q_hat, chunk, whiten, radius):
    """Row constants ``M_i`` of the path bound (:func:`pymc_subsample.kernels.phi.path_phi`)
    for rows ``l(eta_i, s_i)`` with ``eta_i`` and the log scale ``s_i`` affine in ``q``.

    With ``L`` the whitening matrix, ``a_i = ||J^eta_i L||`` and ``b_i = ||J^s_i L||``, the
    whitened ball of radius ``R`` keeps row ``i`` in the box
    ``[eta_hat_i -+ a_i R] x [s_hat_i -+ b_i R]``; ``M_i`` combines the suprema of the
    (k+1)-th partials over that box (:func:`pymc_subsample.kernels.region.local_sup2`,
    :func:`pymc_subsample.kernels.region.path_constant`). One chunked pass, in parallel.
    """
    if whiten is None or radius is None:
        raise ValueError(
            f"ScalableMH: observed '{spec.observed}' ({spec.family}) has derivatives that are "
            "unbounded over the whole space; it needs region bounds (region='auto' or a "
            "radius, with bound_form='whitened')."
        )
    fn = engine.compile_batch([pt.as_tensor_variable(spec.eta),
                               pt.as_tensor_variable(spec.log_scale),
                               engine.model[spec.observed]])

    def values(q, data):
        e, s, y = thread_copy(fn)(q, *data)
        rows = data[0].shape[0]
        return (np.broadcast_to(e, (rows,)), np.broadcast_to(s, (rows,)),
                np.broadcast_to(y, (rows,)))

    for what, k in (("linear predictor", 0), ("log scale (or log shape)", 1)):
        _require_affine(engine, lambda q, *data, k=k: values(q, data)[k], q_hat, what, spec)
    nu = spec.params.get("nu")
    if nu is not None:
        if np.ndim(nu) and np.unique(nu).size > 1:
            raise ValueError("ScalableMH bounds='auto' needs one nu for all rows. " + SUPPORTED_TEXT)
        nu = float(np.ravel(nu)[0])
    n, d = engine.n_rows, engine.ndim
    eye = np.eye(d)
    psi = UpperBounds(n)

    def one_chunk(start, stop):
        data = engine.gather_slice(start, stop)
        e0, s0, y = values(q_hat, data)
        moved = [values(q_hat + eye[j], data) for j in range(d)]
        Je = np.column_stack([mv[0] - e0 for mv in moved])
        Js = np.column_stack([mv[1] - s0 for mv in moved])
        return two_param_chunk_psi(spec.family, order, (Je, Js), (e0, s0), y,
                                   whiten=whiten, radius=radius, nu=nu)

    engine.map_rows(one_chunk, psi.put, chunk)
    return psi.values


def two_param_chunk_psi(family, order, J, base, y, *, whiten, radius, nu=None):
    """Path-bound constants ``M_i`` of a chunk of rows ``l(eta_i, s_i)`` (:func:`_two_param_psi`)
    from the exact Jacobians ``J = (J^eta, J^s)`` of the affine ``eta`` and log scale and
    their values ``base = (eta_hat, s_hat)`` at the centre; ``whiten`` is ``L``, ``radius``
    the region's. Used in ``q`` and in the predictor coordinates alike."""
    (Je, Js), (e0, s0) = J, base
    # rounding margin: the differences of an affine function are exact
    a = np.linalg.norm(Je @ whiten, axis=1) * (1.0 + 1e-7)
    b = np.linalg.norm(Js @ whiten, axis=1) * (1.0 + 1e-7)
    we = a * radius + 1e-9 * (1.0 + np.abs(e0))
    ws = b * radius + 1e-9 * (1.0 + np.abs(s0))
    # sub-boxes of width <= _PIECE_WIDTH (at most _MAX_PIECES per axis): interval
    # evaluation's excess shrinks with the width; boxes narrow as N grows, so large
    # data sets take one piece
    pieces = tuple(int(min(_MAX_PIECES, max(1, math.ceil(2.0 * float(w.max()) / _PIECE_WIDTH))))
                   for w in (we, ws))
    G = local_sup2(family, order + 1, e0 - we, e0 + we, s0 - ws, s0 + ws, y=y, nu=nu,
                   pieces=pieces)
    return path_constant(G, a, b)


def glm_psi(engine, spec: GLMSpec, order: int, q_hat, *, chunk: int = 65536,
            whiten=None, radius=None) -> np.ndarray:
    """Per-row bound constants ``psi_i`` (Cornish et al. 2019, eq. 12) for a recognised GLM.

    Reads the data once, in chunks of rows (bounded memory; memmap-friendly), in
    parallel (:meth:`LikelihoodEngine.map_rows`).

    Parameters
    ----------
    engine : LikelihoodEngine
    spec : GLMSpec
        From :func:`detect_glm`.
    order : int
        Taylor order ``k`` (1 or 2); the bound is on the (k+1)-th derivatives.
    q_hat : ndarray
        The point the Jacobian columns are taken at (any point: they are constant).
    whiten : ndarray, shape (d, d), optional
        A matrix ``L`` (the Cholesky factor of the Laplace covariance): the row factor is
        then ``s_i = ||J_i L||_2`` instead of ``M_i = max_j |J_ij|``, for the whitened
        bound of :func:`pymc_subsample.kernels.phi.whitened_phi`.
    radius : float, optional
        With ``whiten``: bounds valid on the whitened ball of this radius about ``q_hat``
        only, from the supremum of ``|f^(k+1)|`` over each row's interval
        ``eta_hat_i -+ s_i radius`` (:func:`pymc_subsample.kernels.region.local_sup`).

    Returns
    -------
    ndarray of float32 (rounded up: still bounds), shape (N,)
        :class:`pymc_subsample.kernels.bounds.UpperBounds`; float64 only if a constant
        exceeds float32's range.
    """
    q_hat = np.asarray(q_hat, dtype=np.float64)
    if spec.two_param:
        return _two_param_psi(engine, spec, order, q_hat, chunk, whiten, radius)
    eta_fn = _eta_fn(engine, spec)

    def eta(q, data):
        out = thread_copy(eta_fn)(q, *data)[0]
        return np.broadcast_to(out, (data[0].shape[0],))

    _require_affine(engine, lambda q, *data: eta(q, data), q_hat, "linear predictor", spec)
    n, d = engine.n_rows, engine.ndim
    eye = np.eye(d)
    psi = UpperBounds(n)
    sigma = spec.params.get("sigma")
    nu = spec.params.get("nu")
    if nu is not None:
        if np.ndim(nu) and np.unique(nu).size > 1:
            raise ValueError("ScalableMH bounds='auto' needs one nu for all rows. " + SUPPORTED_TEXT)
        nu = float(np.ravel(nu)[0])
    if radius is not None and whiten is None:
        raise ValueError("region bounds (radius) need the whitening matrix.")
    if radius is None and spec.family == "poisson_log":
        raise ValueError(
            "ScalableMH: a Poisson likelihood with a log link has no global derivative bound; "
            "it needs region bounds (region='auto' or a radius, with bound_form='whitened')."
        )
    y_fn = None
    if radius is not None and spec.family == "student_t":
        y_fn = engine.compile_batch([engine.model[spec.observed]])

    def one_chunk(s, e):
        data = engine.gather_slice(s, e)
        base = eta(q_hat, data)
        J = np.column_stack([eta(q_hat + eye[j], data) - base for j in range(d)])
        y = (None if y_fn is None
             else np.broadcast_to(thread_copy(y_fn)(q_hat, *data)[0], base.shape))
        return chunk_psi(spec, order, J, base, whiten=whiten, radius=radius, y=y,
                         sigma=_chunk_param(sigma, n, s, e), nu=nu)

    engine.map_rows(one_chunk, psi.put, chunk)
    return psi.values


def _chunk_param(value, n, start, stop):
    """A fixed family parameter for rows ``start:stop``: per row or one number."""
    if value is None:
        return None
    return np.broadcast_to(value, (n,))[start:stop] if np.ndim(value) else float(value)


def chunk_psi(spec, order, J, base, *, whiten=None, radius=None, y=None, sigma=None, nu=None):
    """Bound constants of a chunk of one-parameter GLM rows from their predictor Jacobian.

    ``J`` (rows x coordinates): the exact Jacobian of the affine linear predictor;
    ``base``: the predictors at the centre. The row factor is ``M_i = max_j |J_ij|``
    (Cornish et al. 2019, eq. 12) or, with ``whiten``, ``||J_i L||``; with ``radius`` the
    supremum of ``|f^(k+1)|`` is taken over ``base_i -+ M_i radius`` only (region bounds,
    :func:`pymc_subsample.kernels.region.local_sup`), else over the whole line.
    """
    M = np.abs(J).max(axis=1) if whiten is None else np.linalg.norm(J @ whiten, axis=1)
    M = M * (1.0 + 1e-7)  # rounding margin: the differences of an affine function are exact
    if radius is not None:
        width = M * radius + 1e-9 * (1.0 + np.abs(base))
        kw = {}
        if spec.family == "student_t":
            kw = {"y": y, "nu": nu, "sigma": sigma}
        elif spec.family == "normal":
            kw = {"sigma": sigma}
        C = local_sup(spec.family, order + 1, base - width, base + width, **kw)
        return C * M ** (order + 1)
    if spec.family in ("bernoulli_logit", "bernoulli_probit"):
        return glm_bound_constants(spec.family, M, order)
    kw = {"nu": nu} if spec.family == "student_t" else {}
    # f(eta) = g((y - eta) / sigma): the m-th derivative scales as sigma^-m
    return glm_bound_constants(spec.family, M, order, scale=1.0 / np.asarray(sigma),
                               sigma=1.0, **kw)
