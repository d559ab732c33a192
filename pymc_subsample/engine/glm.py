"""Recognising generalised linear likelihoods in a PyMC model, for ScalableMH's bounds.

ScalableMH (Cornish et al. 2019) needs per-row constants ``psi_i`` bounding every
(k+1)-th partial derivative of ``U_i = -log p(x_i | theta)`` (see
:mod:`pymc_subsample.kernels.scalable.bounds`). For a row term that depends on the step's
variables only through a linear predictor, ``U_i = f(eta_i)`` with
``eta_i = a_i + sum_j J_ij q_j`` (``q`` the step's raveled unconstrained vector), every
(k+1)-th partial derivative is ``f^(k+1)(eta_i) * J_ij1 ... J_ij(k+1)``, so

    psi_i = sup |f^(k+1)| * M_i^(k+1),   M_i = max_j |J_ij|.

This module finds ``f`` and ``eta`` in the model graph and computes ``M_i`` from the
model itself: ``J`` is the Jacobian of ``eta`` with respect to ``q``, which for an affine
``eta`` is constant, so the columns ``eta(q_hat + e_j) - eta(q_hat)`` are exact (up to
rounding, covered by a relative margin).

The families are those of the registry :mod:`pymc_subsample.kernels.families`: each
declares, in plain strings, the PyMC distribution op it matches, its parameters and the
link reader of :data:`LINKS` that finds ``eta``, and what must be fixed or free;
:func:`detect_glm` takes the one family that matches (two matching is an error of the
registry, not a choice by order), and the numbers (suprema, row terms) are the family's
methods. Only the graph work is here. Families of rows with several scalars (a
Categorical's multinomial logit, ordered logistic and probit rows) are in the same
registry and recognised by the same :func:`detect_glm`: their
:attr:`~pymc_subsample.kernels.families.GLMFamily.structure` names another reader
(:func:`structure_readers`: :mod:`pymc_subsample.engine.softmax`,
:mod:`pymc_subsample.engine.ordered`), which builds their spec.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytensor.tensor as pt
import pytensor.scalar as ps
from pytensor.tensor.elemwise import Elemwise

from .evaluate import thread_copy
from ..kernels.scalable.bounds import UpperBounds, predictor_constants
from ..kernels.families import FAMILIES, auto_refusal, get_family, supported_text
from ..kernels.scalable.region import path_constants

try:  # PyTensor >= 2.31 moved graph traversal helpers
    from pytensor.graph.traversal import ancestors, graph_inputs
except ImportError:  # pragma: no cover - older PyTensor
    from pytensor.graph.basic import ancestors, graph_inputs

__all__ = ["AmbiguousFamilies", "GLMSpec", "LINKS", "detect_glm", "detect_glms", "glm_psi",
           "chunk_psi", "two_param_chunk_psi", "eta_is_affine", "register_link",
           "structure_readers", "SUPPORTED_TEXT"]


def __getattr__(name):
    """``SUPPORTED_TEXT``: what ``bounds='auto'`` recognises, generated from the family
    registry when read (:func:`pymc_subsample.kernels.families.supported_text`), so that
    it lists families registered later too."""
    if name == "SUPPORTED_TEXT":
        return supported_text()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_SIGMOID = pt.sigmoid(pt.dvector()).owner.op


@dataclass
class GLMSpec:
    """A recognised GLM likelihood: family, linear predictor and fixed parameters."""

    family: str  # a name in the registry (pymc_subsample.kernels.families.FAMILIES)
    observed: str
    eta: object  # model expression (in terms of value variables)
    params: dict  # fixed family parameters: arrays broadcastable to (N,)
    log_scale: object = None  # two-parameter rows: log scale / log shape expression
    extra: tuple = ()  # further row coordinates (GLMFamily.extra_coords), e.g. log nu
    compiled: dict = field(default_factory=dict, repr=False)  # functions built once

    @property
    def glm_family(self):
        """The :class:`~pymc_subsample.kernels.families.GLMFamily` of :attr:`family`."""
        return get_family(self.family)

    @property
    def two_param(self) -> bool:
        """Rows depend on the parameters through ``eta`` and a log scale (path bound)."""
        return self.glm_family.two_param


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


# ----------------------------------------------------------------- link readers
def _is_scalar_op(node, kind) -> bool:
    """Whether ``node`` is an elementwise op of scalar op type ``kind``."""
    return (node is not None and isinstance(node.op, Elemwise)
            and isinstance(node.op.scalar_op, kind))


def _constant_value(x):
    """The value of a constant expression ``x`` (one number, possibly expanded), or
    None."""
    if not all(isinstance(v, pt.TensorConstant) for v in graph_inputs([x])):
        return None
    try:
        value = np.asarray(x.eval(), dtype=np.float64)
    except Exception:  # noqa: BLE001 - not a constant we can read: not the pattern
        return None
    if value.size == 0 or not np.all(value == value.reshape(-1)[0]):
        return None
    return float(value.reshape(-1)[0])


def _unguarded(p):
    """``p`` without the wrappers a model builder puts around a link's output, which do
    not change it where it is not exactly 0 or 1: a ``pm.Deterministic``'s ``ViewOp``,
    and guards ``switch(eq(x, c), k, x)`` with ``c`` 0 or 1 and the constant ``k``
    within ``1e-6`` of ``c`` (Bambi's clipping of a Bernoulli's ``p = sigmoid(eta)``
    away from 0 and 1 by machine epsilon). Under such a guard ``sigmoid(eta)`` differs
    from the guarded value only where it rounds to 1, ``eta > 36.7``, where the
    guarded value's ``log(1 - p)`` is ``log(eps) = -36.04`` and the logit link's is
    ``-eta``: the steps read the guard as the link it guards."""
    from pytensor.compile.ops import ViewOp

    for _ in range(16):
        node = p.owner
        if node is None:
            return p
        if isinstance(node.op, ViewOp):
            p = node.inputs[0]
            continue
        if _is_scalar_op(node, ps.Switch):
            cond, then, other = node.inputs
            cnode = cond.owner
            if _is_scalar_op(cnode, ps.EQ):
                x, c = cnode.inputs
                c_val, k_val = _constant_value(c), _constant_value(then)
                if (x is other and c_val in (0.0, 1.0) and k_val is not None
                        and abs(k_val - c_val) <= 1e-6):
                    p = other
                    continue
        return p
    return p


def _identity_link(params, family):
    """``eta`` is the parameter itself (a location)."""
    return params[family.link_param]


def _logit_link(params, family):
    """``p = sigmoid(eta)`` (``logit_p=eta``, ``p=pm.math.invlogit(eta)`` or
    ``pm.math.sigmoid(eta)``, possibly under the guards of :func:`_unguarded`)."""
    p = _unguarded(params[family.link_param])
    if p.owner is not None and isinstance(p.owner.op, Elemwise) and p.owner.op == _SIGMOID:
        return p.owner.inputs[0]
    return None


def _probit_link(params, family):
    """``p = Phi(eta)`` (:func:`_probit_predictor`)."""
    return _probit_predictor(_unguarded(params[family.link_param]))


def _log_link(params, family):
    """``mu = exp(eta)`` (under a ``pm.Deterministic``: :func:`_unguarded`)."""
    mu = _unguarded(params[family.link_param])
    if mu.owner is None or not (
        isinstance(mu.owner.op, Elemwise) and isinstance(mu.owner.op.scalar_op, ps.Exp)
    ):
        return None
    return mu.owner.inputs[0]


def _log_mean_shape_scale(params, family):
    """The log mean of a Gamma: (shape, scale) whatever the user's parametrisation,
    mean = shape * scale."""
    return pt.log(params["shape"]) + pt.log(params["scale"])


def _log_mean_negbinomial(params, family):
    """The log mean of a NegativeBinomial: (n, p) with n = alpha and
    p = alpha / (mu + alpha), so log mu = log n + log((1 - p) / p)."""
    n, p = params["n"], params["p"]
    return pt.log(n) + pt.log1p(-p) - pt.log(p)


def _stacked_pair(w):
    """``(a, b)`` when ``w`` stacks two tensors along its last axis (``pt.stack([a, b],
    axis=-1)``: a ``MakeVector`` of scalars or a ``Join`` of expanded tensors), else
    None."""
    from pytensor.tensor.basic import Join, MakeVector
    from pytensor.tensor.elemwise import DimShuffle

    node = w.owner
    if node is None:
        return None
    if isinstance(node.op, MakeVector) and len(node.inputs) == 2:
        return tuple(node.inputs)
    if not (isinstance(node.op, Join) and len(node.inputs) == 3):
        return None
    parts = []
    for x in node.inputs[1:]:
        if (x.owner is None or not isinstance(x.owner.op, DimShuffle)
                or x.owner.op.new_order[-1] != "x"):
            return None
        parts.append(x.owner.inputs[0])
    return tuple(parts)


def _constant_equal(x, value) -> bool:
    """Whether ``x`` is a constant expression equal to ``value`` everywhere."""
    if not all(isinstance(v, pt.TensorConstant) for v in graph_inputs([x])):
        return False
    try:
        return bool(np.all(np.asarray(x.eval()) == value))
    except Exception:  # noqa: BLE001 - not a constant we can read: not the pattern
        return False


def _zero_inflated_params(params, family):
    """``psi`` and the count component's parameters of a zero-inflated mixture, as
    ``pm.ZeroInflatedPoisson`` (and ``ZeroInflatedNegativeBinomial``) build it: a
    ``Mixture`` of ``DiracDelta(0)`` and the count distribution (op
    ``family.component``) with weights ``stack([1 - psi, psi], axis=-1)``. Returns
    ``{"psi": psi, <family.derived_params[1:]>: the component's parameters}``, or None
    when the mixture is not of that form."""
    zero, count = params["zero"], params["count"]
    for rv, op_name in ((zero, "DiracDeltaRV"), (count, family.component)):
        if rv.owner is None or type(rv.owner.op).__name__ != op_name:
            return None
    if not _constant_equal(zero.owner.op.dist_params(zero.owner)[0], 0):
        return None
    pair = _stacked_pair(params["w"])
    if pair is None:
        return None
    rest, psi = pair
    node = rest.owner
    if not (node is not None and isinstance(node.op, Elemwise)
            and isinstance(node.op.scalar_op, ps.Sub) and node.inputs[1] is psi
            and _constant_equal(node.inputs[0], 1)):
        return None
    values = count.owner.op.dist_params(count.owner)
    if len(values) != len(family.derived_params) - 1:
        return None
    return {"psi": psi, **dict(zip(family.derived_params[1:], values))}


def _censored_params(params, family):
    """``mu`` and ``sigma`` of the distribution inside ``pm.Censored(dist, lower, upper)``
    (op ``CensoredRV``, parameters ``(dist, lower, upper)``; PyMC 5 and 6): ``dist`` is
    the output of a ``family.component`` op (``NormalRV``), whose own parameters are
    read by ``family.derived_params``. None when ``dist`` is another distribution."""
    dist = params["dist"]
    node = dist.owner
    if node is None or type(node.op).__name__ != family.component:
        return None
    values = node.op.dist_params(node)
    if len(values) != len(family.derived_params):
        return None
    return dict(zip(family.derived_params, values))


#: readers of derived parameters by name (``GLMFamily.param_reader``):
#: ``reader(params, family) -> dict or None`` adds the parameters ``family.derived_params``
#: to the op's (by ``dist_params`` names), or None when the graph does not have the
#: family's structure (the family is then skipped)
PARAM_READERS = {
    "zero_inflated": _zero_inflated_params,
    "censored": _censored_params,
}


def _family_params(family, values):
    """The parameters of ``family`` by name: the op's ``values`` and those its
    ``param_reader`` derives (None when that reader does not match)."""
    params = dict(zip(family.dist_params, values))
    if family.param_reader is None:
        return params
    if len(values) != len(family.dist_params):
        # another op layout (a NormalMixture's ``(w, components)``, a mixture of three):
        # not the family's structure
        return None
    derived = PARAM_READERS[family.param_reader](params, family)
    return None if derived is None else {**params, **derived}


def _second_coordinate(family, params, obs=None, model=None, found=None):
    """The second row coordinate of a two-parameter family: ``log`` or ``logit`` of its
    ``scale_param`` (``GLMFamily.scale_transform``), or ``log(p - c)`` for
    ``"log_shifted"`` (:func:`_shifted_log`, ``c`` stored in ``found``), or None."""
    if family.scale_param is None:
        return None
    p = params[family.scale_param]
    if family.scale_transform == "logit":
        return pt.log(p) - pt.log1p(-p)
    if family.scale_transform == "log_shifted":
        return _shifted_log(p, family.scale_param, obs, model, found)
    if family.scale_transform != "log":
        raise ValueError(f"GLM family {family.name!r}: unknown scale_transform "
                         f"{family.scale_transform!r} (expected 'log', 'logit' or "
                         "'log_shifted').")
    return pt.log(p)


def _shifted_log(p, name, obs, model, found):
    """``log(p - c)`` for ``p = c + x`` (``c >= 0`` fixed, ``x`` positive and free: ``nu =
    1 + pm.Exponential(...)``), else ``log p`` (``c = 0``); ``c`` is stored in
    ``found[name + "_shift"]``. The log must still be affine in the sampled variables
    (checked with the bounds' Jacobians)."""
    from pytensor.tensor.elemwise import DimShuffle

    shift, base = 0.0, p
    node = p.owner
    while node is not None and isinstance(node.op, DimShuffle):  # PyMC's ExpandDims
        node = node.inputs[0].owner
    sub = (node is not None and isinstance(node.op, Elemwise)
           and isinstance(node.op.scalar_op, ps.Sub) and len(node.inputs) == 2)
    if (node is not None and isinstance(node.op, Elemwise) and len(node.inputs) == 2
            and (sub or isinstance(node.op.scalar_op, ps.Add))):
        fixed = [_is_fixed(x, model) for x in node.inputs]
        if fixed.count(True) == 1 and not (sub and fixed[0]):
            c = np.asarray(node.inputs[fixed.index(True)].eval(), dtype=np.float64)
            c = -c if sub else c  # x - c is x + (-c)
            if c.size != 1 or not np.isfinite(c).all() or float(c.ravel()[0]) < 0:
                raise ValueError(auto_refusal(
                    f"the {name} of observed '{obs}' is c + a free variable with c not one "
                    "number >= 0; use a positive free variable or c + one, c >= 0."))
            shift, base = float(c.ravel()[0]), node.inputs[fixed.index(False)]
    if found is not None:
        found[f"{name}_shift"] = shift
    return pt.log(base)


#: link readers by name (``GLMFamily.link``): ``reader(params, family) -> eta or None``,
#: ``params`` the distribution's parameters by the family's ``dist_params`` names; None
#: when the graph does not have the link (the next family of the distribution is tried)
LINKS = {
    "identity": _identity_link,
    "logit": _logit_link,
    "probit": _probit_link,
    "log": _log_link,
    "log_mean_shape_scale": _log_mean_shape_scale,
    "log_mean_negbinomial": _log_mean_negbinomial,
}


def register_link(name: str, reader) -> None:
    """Add a link reader ``reader(params, family) -> eta or None`` to :data:`LINKS`, for
    a family whose ``link`` the built-in readers do not cover."""
    LINKS[name] = reader


def _free_refusal(name, obs) -> ValueError:
    """The refusal of a parameter that must be fixed and depends on a free variable."""
    return ValueError(auto_refusal(
        f"the {name} of observed '{obs}' depends on a free variable; its bounds need "
        "it fixed (give it a fixed value)."))


def _fixed_value(var, name, obs, model):
    if not _is_fixed(var, model):
        raise _free_refusal(name, obs)
    return np.asarray(var.eval(), dtype=np.float64)


def _read_link(params, family):
    """The ``eta`` of ``family``'s link reader (:data:`LINKS`), or None."""
    return LINKS[family.link](params, family)


def _match(family, params, eta, rv, model):
    """The :class:`GLMSpec` of ``family`` for the observed ``rv`` with distribution
    parameters ``params`` (by name) and the linear predictor ``eta`` its link read, in
    terms of the model's value variables; its fixed parameters must be fixed
    (ValueError)."""
    values = {p: _fixed_value(params[p], family.param_label(p), rv.name, model)
              for p in family.fixed_params}
    log_scale = _second_coordinate(family, params, rv.name, model, values)
    # further row coordinates (a sampled Student-t nu: t = log(nu - c))
    extra = tuple(_shifted_log(params[p], p, rv.name, model, values)
                  for p in family.extra_coords)
    spec = GLMSpec(family.name, rv.name, eta, values, log_scale, extra)
    spec.eta = model.replace_rvs_by_values([spec.eta])[0]
    if spec.log_scale is not None:
        spec.log_scale = model.replace_rvs_by_values([spec.log_scale])[0]
    if spec.extra:
        spec.extra = tuple(model.replace_rvs_by_values(list(spec.extra)))
    return spec


def structure_readers() -> dict:
    """The engine's readers of a family's row structure, by the name a family declares
    (:attr:`~pymc_subsample.kernels.families.GLMFamily.structure`): ``(read, build)``
    with ``read(params, family) -> found or None`` (what the family's link finds in the
    distribution's parameters ``params``, by name; None: not this family) and
    ``build(family, params, found, rv, model) -> spec`` (the spec of the observed ``rv``,
    in value variables, or a ValueError refusal):

    * ``"glm"``: one linear predictor, :data:`LINKS` and :class:`GLMSpec`;
    * ``"softmax"``: ``K`` class predictors (:mod:`pymc_subsample.engine.softmax`);
    * ``"ordered"``: a predictor and cutpoints (:mod:`pymc_subsample.engine.ordered`).
    """
    from .ordered import ordered_spec, read_ordered  # they import this module
    from .softmax import read_softmax, softmax_spec

    return {"glm": (_read_link, _match), "softmax": (read_softmax, softmax_spec),
            "ordered": (read_ordered, ordered_spec)}


class AmbiguousFamilies(RuntimeError):
    """Two registered GLM families both match one model: an error of the registry (each
    family's :attr:`~pymc_subsample.kernels.families.GLMFamily.requirements` must tell it
    apart from the others of its distribution), never resolved by registration order."""


def _candidates(model, rv, values):
    """``(family, params, unmet, found)`` for each registered family of ``rv``'s op whose
    parameter reader matches: its unmet requirements
    (:meth:`~pymc_subsample.kernels.families.GLMFamily.unmet`) and what its structure's
    reader found (:func:`structure_readers`: the link's ``eta`` for a GLM; None when the
    link does not match)."""
    op_name = type(rv.owner.op).__name__
    readers = structure_readers()
    out = []
    for family in [f for f in FAMILIES.values() if f.distribution == op_name]:
        params = _family_params(family, values)
        if params is None:
            continue
        unmet = family.unmet(lambda p, params=params: _is_fixed(params[p], model))
        if family.structure not in readers:
            raise ValueError(f"GLM family {family.name!r}: unknown structure "
                             f"{family.structure!r} (the engine reads {sorted(readers)}).")
        out.append((family, params, unmet, readers[family.structure][0](params, family)))
    return out


def _refusal(rv, candidates):
    """The ValueError for a model no family matches, from the closest families (fewest
    unmet requirements): one whose link matches names its first unmet requirement (a
    parameter that must be fixed, raised by :func:`_fixed_value`); else the links the
    closest families expected."""
    if not candidates:
        op = rv.owner.op
        return ValueError(auto_refusal(
            f"it does not know the likelihood of observed '{rv.name}' "
            f"({type(op).__name__})."))
    fewest = min(len(c[2]) for c in candidates)
    closest = [c for c in candidates if len(c[2]) == fewest]
    linked = [c for c in closest if c[3] is not None]
    if linked:
        family, _, unmet, _ = linked[0]
        param, need = unmet[0]
        label = family.param_label(param)
        if need == "fixed":
            return _free_refusal(label, rv.name)
        return ValueError(auto_refusal(
            f"the {label} of observed '{rv.name}' is fixed; its family ({family.name}) "
            "needs it to depend on a free variable."))
    hints = [c[0].link_hint or f"a {c[0].link} link" for c in closest]
    links = (f"not with {hints[0]}" if len(hints) == 1
             else "neither with " + " nor with ".join(hints))
    return ValueError(auto_refusal(f"observed '{rv.name}' is {closest[0][0].label} but {links}."))


def detect_glm(model, observed=None) -> GLMSpec:
    """Find the GLM structure of the model's likelihood, or raise a ValueError saying why.

    Of the registered families (:data:`pymc_subsample.kernels.families.FAMILIES`) whose
    ``distribution`` is the observed variable's op, exactly one may match: its
    parameter reader and link reader (or, for another structure, that structure's
    reader: :func:`structure_readers`) match the graph and its requirements (what must
    be fixed, what free) hold. Two matching raise :class:`AmbiguousFamilies`; none, a
    ValueError naming what the closest family needs (:func:`_refusal`).

    Parameters
    ----------
    model : pymc.Model
    observed : observed random variable of ``model``, optional
        The variable to read (:func:`detect_glms` reads each); default: the model's only
        observed variable (a ValueError when it has several).

    Returns
    -------
    GLMSpec
        Or the spec of the family's structure (a
        :class:`~pymc_subsample.engine.softmax.SoftmaxSpec`, an
        :class:`~pymc_subsample.engine.ordered.OrderedSpec`).
    """
    obs = list(model.observed_RVs) if observed is None else [observed]
    if len(obs) != 1:
        names = ", ".join(o.name for o in obs[:3]) + (", ..." if len(obs) > 3 else "")
        raise ValueError(auto_refusal(
            f"it supports one observed variable, the model has {len(obs)} ({names})."))
    rv = obs[0]
    op = rv.owner.op
    values = op.dist_params(rv.owner) if hasattr(op, "dist_params") else rv.owner.inputs[3:]
    candidates = _candidates(model, rv, values)
    matches = [c for c in candidates if not c[2] and c[3] is not None]
    if len(matches) > 1:
        raise AmbiguousFamilies(
            f"GLM families {[c[0].name for c in matches]} all match observed '{rv.name}': "
            "the registry needs each family of a distribution to require a parameter "
            "fixed or free that tells it apart (GLMFamily.fixed_params / free_params).")
    if not matches:
        raise _refusal(rv, candidates)
    family, params, _, found = matches[0]
    return structure_readers()[family.structure][1](family, params, found, rv, model)


def detect_glms(model) -> list:
    """One spec per observed variable of ``model`` (:func:`detect_glm` on each: a
    :class:`GLMSpec`, or the spec of a Categorical family's structure), or a ValueError
    saying which variable is not recognised. ScalableMH's ``bounds="auto"`` recognition
    (:func:`pymc_subsample.engine.softmax.detect_specs`).

    The engine sums the observed variables' terms row by row
    (:meth:`pymc_subsample.engine.batch_graph.BatchGraph.loglik`), so row ``i``'s term is
    ``U_i = sum_v U_i^(v)`` and, the derivatives of a sum being bounded by the sum of
    the bounds, ``psi_i = sum_v psi_i^(v)`` bounds it (docs/engine.md, "Several observed
    variables"). That needs the variables to share their rows: observed variables of
    different lengths are refused, as the engine refuses them.

    Parameters
    ----------
    model : pymc.Model

    Returns
    -------
    list of GLMSpec (or specs of another structure)
        In the order of ``model.observed_RVs``.
    """
    from .analysis import _static_len

    obs = list(model.observed_RVs)
    if not obs:
        raise ValueError(auto_refusal("the model has no observed variable."))
    lengths = {rv.name: _static_len(model.rvs_to_values[rv]) for rv in obs}
    if len(set(lengths.values())) > 1:
        listing = ", ".join(f"'{k}' {v}" for k, v in list(lengths.items())[:3])
        raise ValueError(auto_refusal(
            f"the observed variables have different numbers of rows ({listing}"
            f"{', ...' if len(lengths) > 3 else ''}): align them row by row (the bounds "
            "are per row, summed over its variables)."))
    return [detect_glm(model, rv) for rv in obs]


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
        detail = (" (e.g. a product of two of them, or a positive-constrained coefficient)"
                  if what == "linear predictor"
                  else ": nu must be a positive free variable, c + one (c >= 0) or fixed"
                  if "nu" in what
                  else ": a scale or shape must be a positive free variable or fixed")
        raise ValueError(auto_refusal(
            f"the {what} of observed '{spec.observed}' ({spec.glm_family.label}) is not "
            f"affine in the sampled variables{detail}."))


def _two_param_psi(engine, spec, order, q_hat, chunk, whiten, radius):
    """Row constants ``M_i`` of the path bound (:func:`pymc_subsample.kernels.scalable.phi.path_phi`)
    for rows ``l(eta_i, s_i)`` with ``eta_i`` and the log scale ``s_i`` affine in ``q``.

    With ``L`` the whitening matrix, ``a_i = ||J^eta_i L||`` and ``b_i = ||J^s_i L||``, the
    whitened ball of radius ``R`` keeps row ``i`` in the box
    ``[eta_hat_i -+ a_i R] x [s_hat_i -+ b_i R]``; ``M_i`` combines the suprema of the
    (k+1)-th partials over that box (:func:`pymc_subsample.kernels.scalable.region.local_sup2`,
    :func:`pymc_subsample.kernels.scalable.region.path_constant`). One chunked pass, in parallel.
    """
    if whiten is None or radius is None:
        raise ValueError(
            f"ScalableMH: observed '{spec.observed}' ({spec.family}) has derivatives that are "
            "unbounded over the whole space; it needs region bounds (region='auto' or a "
            "radius, with bound_form='whitened')."
        )
    coords = [spec.eta, spec.log_scale, *spec.extra]
    fn = engine.compile_batch([pt.as_tensor_variable(x) for x in coords]
                              + [engine.model[spec.observed]])

    def values(q, data):
        rows = data[0].shape[0]
        return tuple(np.broadcast_to(v, (rows,)) for v in thread_copy(fn)(q, *data))

    names = ["linear predictor", "log scale (or log shape)"]
    if spec.glm_family.scale_transform == "log_shifted":
        names[1] = f"log {spec.glm_family.param_label(spec.glm_family.scale_param)}"
    names += [f"log {spec.glm_family.param_label(p)}"
              for p in spec.glm_family.extra_coords]
    for k, what in enumerate(names):
        _require_affine(engine, lambda q, *data, k=k: values(q, data)[k], q_hat, what, spec)
    nu = _one_nu(spec)
    fixed = {k: v for k, v in spec.params.items() if k != "nu"}
    n, d = engine.n_rows, engine.ndim
    eye = np.eye(d)
    psi = UpperBounds(n)

    def one_chunk(start, stop):
        data = engine.gather_slice(start, stop)
        *base, y = values(q_hat, data)
        moved = [values(q_hat + eye[j], data) for j in range(d)]
        J = tuple(np.column_stack([mv[k] - base[k] for mv in moved])
                  for k in range(len(base)))
        return two_param_chunk_psi(spec.family, order, J, tuple(base), y,
                                   whiten=whiten, radius=radius, nu=nu,
                                   **{k: _chunk_param(v, n, start, stop)
                                      for k, v in fixed.items()})

    engine.map_rows(one_chunk, psi.put, chunk)
    return psi.values


def two_param_chunk_psi(family, order, J, base, y, *, whiten, radius, nu=None, **params):
    """Path-bound constants ``M_i`` of a chunk of rows ``l(eta_i, s_i)`` (:func:`_two_param_psi`):
    :func:`pymc_subsample.kernels.scalable.region.path_constants`."""
    return path_constants(family, order, J, base, y, whiten=whiten, radius=radius, nu=nu,
                          **params)


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
        bound of :func:`pymc_subsample.kernels.scalable.phi.whitened_phi`.
    radius : float, optional
        With ``whiten``: bounds valid on the whitened ball of this radius about ``q_hat``
        only, from the supremum of ``|f^(k+1)|`` over each row's interval
        ``eta_hat_i -+ s_i radius`` (:func:`pymc_subsample.kernels.scalable.region.local_sup`).

    Returns
    -------
    ndarray of float32 (rounded up: still bounds), shape (N,)
        :class:`pymc_subsample.kernels.scalable.bounds.UpperBounds`; float64 only if a constant
        exceeds float32's range.
    """
    q_hat = np.asarray(q_hat, dtype=np.float64)
    if getattr(spec, "row_psi", None) is not None:  # other structures (softmax, ordered)
        return spec.row_psi(engine, order, q_hat, chunk=chunk, whiten=whiten, radius=radius)
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
    fam = spec.glm_family
    nu = _one_nu(spec)
    fixed = {k: v for k, v in spec.params.items() if k != "nu"}
    if radius is not None and whiten is None:
        raise ValueError("region bounds (radius) need the whitening matrix.")
    if radius is None and not fam.global_bound:
        raise ValueError(
            f"ScalableMH: observed '{spec.observed}' ({spec.family}) has no global derivative "
            f"bound ({fam.unbounded}); it needs region bounds (region='auto' or a radius, with "
            "bound_form='whitened')."
        )
    y_fn = None
    if radius is not None and fam.needs_y:
        y_fn = engine.compile_batch([engine.model[spec.observed]])

    def one_chunk(s, e):
        data = engine.gather_slice(s, e)
        base = eta(q_hat, data)
        J = np.column_stack([eta(q_hat + eye[j], data) - base for j in range(d)])
        y = (None if y_fn is None
             else np.broadcast_to(thread_copy(y_fn)(q_hat, *data)[0], base.shape))
        return chunk_psi(spec, order, J, base, whiten=whiten, radius=radius, y=y, nu=nu,
                         **{k: _chunk_param(v, n, s, e) for k, v in fixed.items()})

    engine.map_rows(one_chunk, psi.put, chunk)
    return psi.values


def _chunk_param(value, n, start, stop):
    """A fixed family parameter for rows ``start:stop``: per row or one number."""
    if value is None:
        return None
    return np.broadcast_to(value, (n,))[start:stop] if np.ndim(value) else float(value)


def _one_nu(spec):
    """The degrees of freedom ``nu`` of ``spec`` as one number (None without one): the
    bounds need one ``nu`` for all rows."""
    nu = spec.params.get("nu")
    if nu is not None:
        if np.ndim(nu) and np.unique(nu).size > 1:
            raise ValueError(auto_refusal(
                f"observed '{spec.observed}' has a nu per row; its bounds need one nu for "
                "all rows."))
        nu = float(np.ravel(nu)[0])
    return nu


def chunk_psi(spec, order, J, base, *, whiten=None, radius=None, y=None, **params):
    """Bound constants of a chunk of one-parameter GLM rows of ``spec`` from their predictor
    Jacobian: :func:`pymc_subsample.kernels.scalable.bounds.predictor_constants`.

    ``params``: the family's fixed parameters (``sigma=``, ``nu=``: per row or one
    number, None when absent); one missing is read from ``spec.params`` when it is one
    number.
    """
    fam = spec.glm_family
    params = {k: v for k, v in params.items() if v is not None}
    for k in fam.fixed_params:
        if k not in params and k in spec.params and np.size(spec.params[k]) == 1:
            params[k] = float(np.ravel(spec.params[k])[0])
    return predictor_constants(fam, order, J, base, whiten=whiten, radius=radius, y=y, **params)
