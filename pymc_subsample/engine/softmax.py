"""Recognising multinomial-logit (softmax) likelihoods for ScalableMH's ``bounds="auto"``.

The model

    eta = a + X @ B                                            # (N, K), or a zero column
    pm.Categorical("y", p=pm.math.softmax(eta, axis=-1), observed=y)   # or logit_p=eta

has rows ``U_i = lse(eta_i) - eta_{i, y_i}`` that depend on ``q`` through K class
predictors at once, so it is not a one-parameter GLM of the family registry
(:mod:`pymc_subsample.kernels.families`): this module recognises it
(:func:`detect_softmax`), computes the rows' exact Jacobians ``J_i`` (K x d: the columns
``eta_i(q_hat + e_j) - eta_i(q_hat)`` of the affine predictors, as
:func:`pymc_subsample.engine.glm.glm_psi` does for one predictor) and hands them to
:func:`pymc_subsample.kernels.scalable.softmax.softmax_constants` for the constants of Cornish et
al. (2019), "Scalable Metropolis-Hastings for exact Bayesian inference with large
datasets", eq. 12, or their whitened and region forms under the path step factor
(:func:`pymc_subsample.kernels.scalable.phi.path_phi`). The control variates come from the model's
own autodiff, in ``q``.

ScalableMH reaches it through :func:`detect_specs` (its ``bounds="auto"`` recognition) and
:meth:`SoftmaxSpec.row_psi` (called by :func:`pymc_subsample.engine.glm.glm_psi`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytensor.tensor as pt

from .evaluate import thread_copy
from .glm import detect_glm, detect_glms, is_affine, sample_rows
from ..kernels.scalable.bounds import UpperBounds
from ..kernels.families import auto_refusal
from ..kernels.scalable.softmax import softmax_constants

__all__ = ["SOFTMAX_FAMILY", "SoftmaxSpec", "bounds_in_q", "detect_softmax", "detect_specs",
           "softmax_psi"]

#: the name ScalableMH's specs and docs use for these rows
SOFTMAX_FAMILY = "categorical_softmax"


@dataclass
class SoftmaxSpec:
    """A recognised multinomial logit: ``Categorical(p=softmax(eta, axis=-1))``.

    Duck-types the parts of :class:`pymc_subsample.engine.glm.GLMSpec` that ScalableMH
    reads: ``two_param`` is True because the rows depend on ``q`` through several affine
    functions (the K class predictors), which takes the path step factor; ``in_q`` keeps
    the control variates and bounds in ``q`` (no predictor coordinates);
    :meth:`row_psi` gives the constants.
    """

    observed: str
    eta: object  # (N, K) model expression in terms of value variables
    n_classes: int | None = None
    family: str = SOFTMAX_FAMILY
    params: dict = field(default_factory=dict)
    log_scale: object = None
    compiled: dict = field(default_factory=dict, repr=False)

    two_param = True  # several affine inputs per row: the path bound
    in_q = True  # bounds and control variates in q

    def row_psi(self, engine, order, q_hat, *, chunk=65536, whiten=None, radius=None):
        """:func:`softmax_psi` of this spec."""
        return softmax_psi(engine, self, order, q_hat, chunk=chunk, whiten=whiten,
                           radius=radius)


def _softmax_input(p):
    """``eta`` with ``p = softmax(eta, axis=-1)`` (``pm.math.softmax``, or PyMC's own for
    ``logit_p=``), else None."""
    node = p.owner
    if node is None or type(node.op).__name__ != "Softmax":
        return None
    eta = node.inputs[0]
    axis = getattr(node.op, "axis", None)  # an int (PyTensor 2.x) or a tuple (3.x)
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    if len(axes) != 1 or axes[0] is None or axes[0] not in (-1, eta.type.ndim - 1):
        return None  # not one softmax per row (axis=None normalises over all of eta)
    return eta


def detect_softmax(model, rv):
    """A :class:`SoftmaxSpec` for the observed ``rv`` when it is a ``pm.Categorical`` with
    ``p=softmax(eta, axis=-1)`` (or ``logit_p=eta``) and ``eta`` an ``(N, K)`` matrix; None
    when ``rv`` is not a Categorical; a ValueError (a refusal) for a Categorical of
    another form."""
    node = rv.owner
    if node is None or type(node.op).__name__ != "CategoricalRV":
        return None
    op = node.op
    values = op.dist_params(node) if hasattr(op, "dist_params") else node.inputs[3:]
    eta = _softmax_input(values[0])
    if eta is None:
        raise ValueError(auto_refusal(
            f"observed '{rv.name}' is Categorical but its p is not softmax(eta, axis=-1) "
            "(write p=pm.math.softmax(eta, axis=-1) or logit_p=eta)."))
    if eta.type.ndim != 2:
        raise ValueError(auto_refusal(
            f"the class predictors of observed '{rv.name}' (Categorical) must be an "
            f"(N, K) matrix, one row per observation; got {eta.type.ndim} dimensions."))
    k = eta.type.shape[1]
    eta = model.replace_rvs_by_values([eta])[0]
    return SoftmaxSpec(rv.name, eta, None if k is None else int(k))


def detect_specs(model) -> list:
    """ScalableMH's ``bounds="auto"`` recognition: one spec per observed variable, a
    :class:`~pymc_subsample.engine.glm.GLMSpec` (:func:`~pymc_subsample.engine.glm.
    detect_glms`) or a :class:`SoftmaxSpec`; the GLM refusal when a variable is neither."""
    try:
        return detect_glms(model)
    except ValueError as err:
        first = err
    specs = []
    from .ordered import detect_ordered  # ordered logit/probit: a Categorical too
    for rv in model.observed_RVs:
        spec = detect_ordered(model, rv) or detect_softmax(model, rv)
        if spec is None:
            if len(model.observed_RVs) == 1:
                raise first
            spec = detect_glm(model, rv)  # its own refusal
        specs.append(spec)
    if not any(getattr(s, "in_q", False) for s in specs):
        raise first  # e.g. rows of different lengths
    return specs


def bounds_in_q(specs) -> bool:
    """Whether ScalableMH keeps the bounds of ``specs`` in ``q`` (a softmax among them)."""
    return specs is not None and any(getattr(s, "in_q", False) for s in specs)


def _eta_fn(engine, spec):
    if "eta" not in spec.compiled:
        spec.compiled["eta"] = engine.compile_batch([pt.as_tensor_variable(spec.eta)])
    return spec.compiled["eta"]


def _eta(engine, spec, q, data):
    """The (rows, K) class predictors of the rows ``data`` at ``q``."""
    out = np.asarray(thread_copy(_eta_fn(engine, spec))(q, *data)[0], dtype=np.float64)
    if out.ndim != 2:
        raise ValueError(auto_refusal(
            f"the class predictors of observed '{spec.observed}' (Categorical) must be an "
            "(N, K) matrix, one row per observation."))
    return np.broadcast_to(out, (data[0].shape[0], out.shape[1]))


def softmax_psi(engine, spec: SoftmaxSpec, order: int, q_hat, *, chunk: int = 65536,
                whiten=None, radius=None) -> np.ndarray:
    """Per-row constants of a multinomial logit (:mod:`pymc_subsample.kernels.scalable.softmax`).

    One chunked pass: each chunk's exact Jacobians ``J_i`` (rows x K x d, from ``d + 1``
    evaluations of the affine class predictors) and predictors at ``q_hat``, then
    :func:`~pymc_subsample.kernels.scalable.softmax.softmax_constants`.

    Parameters
    ----------
    engine : LikelihoodEngine
    spec : SoftmaxSpec
    order : int
        Taylor order ``k`` (1 or 2).
    q_hat : ndarray
        The centre.
    chunk : int
        Rows per chunk.
    whiten : ndarray (d, d), optional
        ``L``: the whitened path-bound constants; None: eq. 12's constants in ``q``.
    radius : float, optional
        The region's radius (with ``whiten``); None: global constants.

    Returns
    -------
    ndarray of float32 (rounded up), shape (N,)
    """
    q_hat = np.asarray(q_hat, dtype=np.float64)
    rng = np.random.default_rng(0)  # set-up check, not sampling
    data = sample_rows(engine, rng)
    if not is_affine(lambda q: _eta(engine, spec, q, data).ravel(), q_hat, rng):
        raise ValueError(auto_refusal(
            f"the class predictors of observed '{spec.observed}' (Categorical) are not "
            "affine in the sampled variables (e.g. a product of two of them)."))
    n, d = engine.n_rows, engine.ndim
    eye = np.eye(d)
    psi = UpperBounds(n)

    def one_chunk(s, e):
        rows = engine.gather_slice(s, e)
        base = _eta(engine, spec, q_hat, rows)
        J = np.stack([_eta(engine, spec, q_hat + eye[j], rows) - base for j in range(d)],
                     axis=2)
        return softmax_constants(order, J, base, whiten=whiten, radius=radius)

    engine.map_rows(one_chunk, psi.put, chunk)
    return psi.values
