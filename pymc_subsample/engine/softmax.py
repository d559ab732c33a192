"""Recognising multinomial-logit (softmax) likelihoods for ScalableMH's ``bounds="auto"``.

The model

    eta = a + X @ B                                            # (N, K), or a zero column
    pm.Categorical("y", p=pm.math.softmax(eta, axis=-1), observed=y)   # or logit_p=eta

has rows ``U_i = lse(eta_i) - eta_{i, y_i}`` that depend on ``q`` through K class
predictors at once, not through one linear predictor. Its family in the registry,
``categorical_softmax`` (:class:`pymc_subsample.kernels.families.categorical.
CategoricalSoftmax`), declares the structure ``"softmax"``, whose reader is here: the
registry's detection (:func:`pymc_subsample.engine.glm.detect_glm`) finds the class
predictors with :func:`read_softmax` and builds the :class:`SoftmaxSpec` with
:func:`softmax_spec`. :func:`softmax_psi` computes the rows' exact Jacobians ``J_i``
(K x d: the columns ``eta_i(q_hat + e_j) - eta_i(q_hat)`` of the affine predictors, as
:func:`pymc_subsample.engine.glm.glm_psi` does for one predictor) and hands them to the
family's :meth:`~pymc_subsample.kernels.families.categorical.CategoricalSoftmax.
row_constants` (:func:`pymc_subsample.kernels.scalable.softmax.softmax_constants`) for
the constants of Cornish et al. (2019), "Scalable Metropolis-Hastings for exact Bayesian
inference with large datasets", eq. 12, or their whitened and region forms under the
path step factor (:func:`pymc_subsample.kernels.scalable.phi.path_phi`). The control
variates come from the model's own autodiff, in ``q``.

ScalableMH reaches it through :func:`detect_specs` (its ``bounds="auto"`` recognition,
:func:`pymc_subsample.engine.glm.detect_glms`) and :meth:`SoftmaxSpec.row_psi` (called
by :func:`pymc_subsample.engine.glm.glm_psi`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytensor.tensor as pt

from .evaluate import thread_copy
from .glm import detect_glms, is_affine, sample_rows
from ..kernels.scalable.bounds import UpperBounds
from ..kernels.families import auto_refusal, get_family

__all__ = ["SoftmaxSpec", "bounds_in_q", "detect_specs", "read_softmax", "softmax_psi",
           "softmax_spec"]

#: ScalableMH's ``bounds="auto"`` recognition (``steps/scalable.py`` reads it here): one
#: spec per observed variable, every variable through the family registry
#: (:func:`pymc_subsample.engine.glm.detect_glms`), multinomial-logit and ordered rows
#: included; the registry's refusal when a variable is not recognised
detect_specs = detect_glms


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
    family: str  # its registered family (categorical_softmax)
    n_classes: int | None = None
    params: dict = field(default_factory=dict)
    log_scale: object = None
    compiled: dict = field(default_factory=dict, repr=False)

    two_param = True  # several affine inputs per row: the path bound
    in_q = True  # bounds and control variates in q

    @property
    def glm_family(self):
        """The registered family of :attr:`family`."""
        return get_family(self.family)

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


def read_softmax(params, family):
    """The class predictors ``eta`` of a Categorical whose ``p`` (``params["p"]``) is
    ``softmax(eta, axis=-1)`` (``p=pm.math.softmax(eta, axis=-1)`` or ``logit_p=eta``), else
    None: the ``"softmax"`` structure's reader
    (:func:`pymc_subsample.engine.glm.structure_readers`)."""
    return _softmax_input(params[family.link_param])


def softmax_spec(family, params, eta, rv, model) -> SoftmaxSpec:
    """The :class:`SoftmaxSpec` of the observed ``rv`` with class predictors ``eta``
    (:func:`read_softmax`), or a refusal when they are not an ``(N, K)`` matrix."""
    if eta.type.ndim != 2:
        raise ValueError(auto_refusal(
            f"the class predictors of observed '{rv.name}' (Categorical) must be an "
            f"(N, K) matrix, one row per observation; got {eta.type.ndim} dimensions."))
    k = eta.type.shape[1]
    eta = model.replace_rvs_by_values([eta])[0]
    return SoftmaxSpec(rv.name, eta, family.name, None if k is None else int(k))


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
    evaluations of the affine class predictors) and predictors at ``q_hat``, then the
    family's ``row_constants``
    (:func:`~pymc_subsample.kernels.scalable.softmax.softmax_constants`).

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
    fam = spec.glm_family

    def one_chunk(s, e):
        rows = engine.gather_slice(s, e)
        base = _eta(engine, spec, q_hat, rows)
        J = np.stack([_eta(engine, spec, q_hat + eye[j], rows) - base for j in range(d)],
                     axis=2)
        return fam.row_constants(order, J, base, whiten=whiten, radius=radius)

    engine.map_rows(one_chunk, psi.put, chunk)
    return psi.values
