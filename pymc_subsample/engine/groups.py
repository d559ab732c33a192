"""Recognising a random intercept per group in a GLM, for the blocked hierarchical sweep.

The models users fit on tall data add a group effect to a GLM's linear predictor,

    eta_i = o_i + x_i . beta + a[g_i],     a_g ~ Normal(loc, scale)   (centred)
                                           a = loc + scale * z, z_g ~ Normal(0, 1)
                                                                      (non-centred)

with ``g`` an integer data array. :func:`find_groups` finds this structure in the graph:
the gather ``X[g]`` of a data-free vector ``X`` by row-indexed integer data (after
:func:`~pymc_subsample.engine.batch_graph.lift_gathers` has lifted ``mu + tau * z[g]``
to ``(mu + tau * z)[g]``), the group variable (``a`` itself, or ``z`` with ``X`` affine
in it), the hyperparameters ``loc`` and ``scale`` depend on, and the fixed part
``f_i = eta_i - X[g_i]``, which must be affine in the remaining variables and read
neither the group variable nor the hyperparameters. Everything is checked on the model's
own functions (affinity by second differences, the row-to-group map by range), and the
answer is a :class:`GroupStructure` or a :class:`NotFound` with the reason, never a guess.

The structure is a list of terms: the fixed block (``f``, affine in the fixed effects)
and the group terms added to it, each a :class:`RandomIntercept` today. A new kind of
term (a random slope, a second grouping factor) is a new term class
with the same interface (its coordinates in ``q``, ``loc_scale``, ``effects``,
``with_effects``, ``describe``), found by its own recogniser and appended to
``GroupStructure.terms``; the sweep (:mod:`pymc_subsample.steps.hierarchical`) adds the
moves that update it.

A family with a sampled parameter the sweep covers -- the Normal likelihood with a
sampled scale, the linear mixed model -- adds the structure's :class:`FamilyScale`
(``sigma``'s coordinate in ``q``); the other such families are refused, naming them.

The arithmetic of the sweep on this structure is NumPy only
(:mod:`pymc_subsample.kernels.hierarchical`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
from pytensor.graph.replace import clone_replace
from pytensor.tensor.elemwise import Elemwise
from .analysis import GATHERS as _GATHERS
from .batch_graph import lift_gathers

try:  # PyTensor >= 2.31 moved graph traversal helpers
    from pytensor.graph.traversal import graph_inputs
except ImportError:  # pragma: no cover
    from pytensor.graph.basic import graph_inputs
from .glm import detect_glm, is_affine, sample_rows
from ..kernels.families import get_family

try:  # PyTensor >= 2.31 moved graph traversal helpers
    from pytensor.graph.traversal import ancestors, io_toposort
except ImportError:  # pragma: no cover
    from pytensor.graph.basic import ancestors, io_toposort

__all__ = ["FamilyScale", "GroupStructure", "NotFound", "RandomIntercept", "find_groups",
           "random_effects"]

#: the families with a sampled parameter the sweep covers: their family parameter is a
#: :class:`FamilyScale` of the structure, with a move of its own
_SCALE_FAMILIES = ("normal_scale",)


@dataclass(frozen=True)
class NotFound:
    """No group structure the sweep covers, and why (the steps' ``hierarchy`` holds it;
    the caller runs its ordinary update, or refuses with this reason)."""

    reason: str

    def __str__(self) -> str:
        return self.reason


class _Refused(Exception):
    """Raised inside the recognition with the reason a model has no covered structure."""


@dataclass
class RandomIntercept:
    """A group term: one intercept per group, ``a[g_i]`` added to the linear predictor.

    Attributes
    ----------
    centred : bool
        The group variable is ``a`` itself (True) or ``z`` with ``a = loc + scale z``.
    group_var, group_name : str
        The group variable's name (``a`` or ``z``) and the name of the index data.
    n_groups : int
    group_of_row : ndarray of int32, shape (N,)
        The group of every row.
    group_idx, hyper_idx : ndarray of int
        Positions in ``q`` of the group variable and of the hyperparameters (what
        ``loc`` and ``scale`` read).
    hyper_names : list of str
    hyper_shared : bool
        Some hyperparameters are sampled by another step (their current values are read
        from the shared variables PyMC refreshes).
    """

    centred: bool
    group_var: str
    group_name: str
    n_groups: int
    group_of_row: np.ndarray = field(repr=False)
    group_idx: np.ndarray = field(repr=False)
    hyper_idx: np.ndarray = field(repr=False)
    hyper_names: list = field(default_factory=list)
    hyper_shared: bool = False
    _loc_scale_fn: object = field(default=None, repr=False)
    #: the row covariates the effects multiply (a random slope), "" for an intercept
    slope: str = ""

    def loc_scale(self, q):
        """``(loc, scale)`` of the group effects at ``q``, each of shape ``(G,)``."""
        loc, scale = self._loc_scale_fn(np.asarray(q, dtype=np.float64))
        shape = (self.n_groups,)
        return (np.broadcast_to(np.asarray(loc, dtype=np.float64), shape),
                np.broadcast_to(np.asarray(scale, dtype=np.float64), shape))

    def effects(self, q, loc_scale=None) -> np.ndarray:
        """The group effects ``a`` (the centred coordinates) at ``q`` (``loc_scale``:
        those of ``q``, when already computed)."""
        c = np.asarray(q, dtype=np.float64)[self.group_idx]
        if self.centred:
            return c.copy()
        loc, scale = self.loc_scale(q) if loc_scale is None else loc_scale
        return loc + scale * c

    def with_effects(self, q, a, loc_scale=None) -> np.ndarray:
        """``q`` with its group coordinates set so that the group effects are ``a``
        (``loc_scale``: those of ``q``, when already computed)."""
        out = np.array(q, dtype=np.float64)
        if self.centred:
            out[self.group_idx] = a
        else:
            loc, scale = self.loc_scale(out) if loc_scale is None else loc_scale
            out[self.group_idx] = (a - loc) / scale
        return out

    def describe(self) -> str:
        """A short text of the term."""
        sizes = np.bincount(self.group_of_row, minlength=self.n_groups)
        form = "centred" if self.centred else "non-centred"
        kind = f"random slope on {self.slope}" if self.slope else "random intercept"
        return (f"{kind} '{self.group_var}' ({form}) over {self.n_groups} groups "
                f"of {self.group_name} (rows per group {int(sizes.min())}-"
                f"{int(sizes.max())}, median {int(np.median(sizes))}); hyperparameters "
                f"{', '.join(self.hyper_names) or '-'}")


@dataclass
class FamilyScale:
    """The family's sampled scale: the Normal likelihood's ``sigma`` (the linear mixed
    model), one scalar free variable of the step read by nothing else of the model's
    likelihood than the rows' scale.

    Attributes
    ----------
    name : str
        The scale's random variable (``sigma``).
    idx : int
        Its position in ``q`` (the step's coordinate of it, e.g. ``log sigma``).
    log_is_coordinate : bool
        ``log sigma`` is the coordinate itself (a log transform, checked numerically):
        the sweep's scale move then draws it from its exact conditional; otherwise it
        proposes by a random walk in the coordinate.
    """

    name: str
    idx: int
    log_is_coordinate: bool
    _log_fn: object = field(default=None, repr=False)

    def log_scale(self, q) -> float:
        """``log sigma`` at ``q``."""
        return float(np.ravel(self._log_fn(np.asarray(q, dtype=np.float64)))[0])

    def describe(self) -> str:
        """A short text of the scale."""
        how = ("its exact conditional given the effects" if self.log_is_coordinate
               else "a random walk")
        return f"sampled scale '{self.name}' (its own move: {how})"


@dataclass
class GroupStructure:
    """A GLM likelihood whose linear predictor is a fixed block plus group terms, in the
    step's raveled ``q``: ``eta_i = f_i + sum_t term_t(i)``.

    Attributes
    ----------
    family : str
        The GLM family (a name of :mod:`pymc_subsample.kernels.families`).
    params : dict
        The family's fixed parameters (scalars).
    terms : list of RandomIntercept
        The group terms (one random intercept for the Taylor-sum sweep; any number of
        intercepts and slopes for the Gaussian sweep).
    fixed_idx : ndarray of int
        Positions in ``q`` of the fixed effects (what ``f`` reads).
    fixed_names : list of str
    scale : FamilyScale or None
        The family's sampled scale (the Normal likelihood's ``sigma``), None for a family
        without a sampled parameter.
    kernel : {"taylor", "gaussian"}
        The sweep that runs on it: the Taylor-sum sweep of one random intercept, or the
        exact Gaussian sweep of a Normal likelihood with several group terms (crossed,
        nested, slopes: :mod:`pymc_subsample.engine.group_terms`).
    factors : list of int or None
        The grouping factor of each term (terms with the same index of rows share one:
        an intercept and the slopes per level of one factor), for the Gaussian sweep.
    """

    family: str
    params: dict
    terms: list
    fixed_idx: np.ndarray = field(repr=False)
    fixed_names: list = field(default_factory=list)
    _f_fn: object = field(default=None, repr=False)
    _y_index: int = field(default=0, repr=False)
    engine: object = field(default=None, repr=False)
    scale: FamilyScale = None
    kernel: str = "taylor"
    _w_fn: object = field(default=None, repr=False)
    factors: list = None

    def weights(self, q, data) -> list:
        """Each term's row weights (1 for an intercept) of the rows in ``data``."""
        n = data[0].shape[0]
        if self._w_fn is None:
            return [np.ones(n) for _ in self.terms]
        return [np.broadcast_to(np.asarray(w, dtype=np.float64), (n,))
                for w in self._w_fn(np.asarray(q, dtype=np.float64), *data)]

    def fixed_part(self, q, data) -> np.ndarray:
        """``f_i = o_i + x_i . beta`` of the rows in ``data`` at ``q``."""
        out = self._f_fn(np.asarray(q, dtype=np.float64), *data)[0]
        return np.broadcast_to(np.asarray(out, dtype=np.float64), (data[0].shape[0],))

    def y(self, data) -> np.ndarray:
        """The observations of the rows in ``data``."""
        return np.asarray(data[self._y_index], dtype=np.float64).reshape(-1)

    def describe(self) -> str:
        """A short text of the structure (the steps' ``repr`` shows it)."""
        terms = "; ".join(t.describe() for t in self.terms)
        scale = ("" if self.scale is None else f" with sampled scale '{self.scale.name}'"
                 if self.kernel == "gaussian" else f" with {self.scale.describe()}")
        how = ("; exact Gaussian sweep of every location at once"
               if self.kernel == "gaussian" else "")
        return (f"{terms}; fixed effects {', '.join(self.fixed_names) or '-'}; "
                f"{get_family(self.family).label} likelihood{scale}{how}")


# ------------------------------------------------------------------ the graph work
def _gathers(eta, is_param, data_vars):
    """The gathers ``X[idx]`` in ``eta`` of a data-free vector ``X`` by row data."""
    found = []
    for node in io_toposort(list(graph_inputs([eta])), [eta]):
        if not isinstance(node.op, _GATHERS):
            continue
        if len(node.inputs) != 2:
            continue
        x, idx = node.inputs
        if x.type.ndim != 1 or not is_param(x):
            continue
        if not any(a in data_vars for a in ancestors([idx])):
            continue
        found.append(node)
    return found


def _matrix_gathers(eta, is_param, data_vars) -> bool:
    """Whether ``eta`` gathers rows of a data-free matrix by row data (``ab[g, 0]``)."""
    for node in io_toposort(list(graph_inputs([eta])), [eta]):
        if (isinstance(node.op, _GATHERS) and node.inputs[0].type.ndim >= 2
                and is_param(node.inputs[0])
                and any(a in data_vars for i in node.inputs[1:] for a in ancestors([i]))):
            return True
    return False


def _rv_name(model, value_var) -> str:
    return model.values_to_rvs[value_var].name


def _normal_params(model, value_var):
    """``(loc, sigma)`` graphs of the Normal random variable of ``value_var``, or None."""
    rv = model.values_to_rvs[value_var]
    op = rv.owner.op
    if type(op).__name__ != "NormalRV":
        return None
    try:
        loc, sigma = op.dist_params(rv.owner)
    except AttributeError:  # pragma: no cover - older PyMC: rng, size, (dtype,) params
        loc, sigma = rv.owner.inputs[-2:]
    if model.rvs_to_transforms.get(rv) is not None:
        return None
    return loc, sigma


def find_groups(engine, q0=None):
    """The :class:`GroupStructure` of ``engine``'s model, or a :class:`NotFound` saying
    why it has none (the caller then runs its ordinary update, or refuses with this
    reason).

    Parameters
    ----------
    engine : LikelihoodEngine
    q0 : array, optional
        A point of the step's ``q`` for the numerical checks (default: the initial one).
    """
    q0 = engine.initial_q() if q0 is None else np.asarray(q0, dtype=np.float64)
    try:
        spec, params = _glm(engine.model)
        eta, nodes, data_vars = _all_gathers(engine, spec)
        scale, scale_vals = _family_scale(engine, spec, q0)
        if len(nodes) == 1 and _unit_weight(engine, eta, nodes[0], q0):
            term, group_value, hyper_vals = _random_intercept(engine, nodes[0], q0)
            return _with_fixed_block(engine, spec, params, eta, nodes[0], term,
                                     [group_value, *hyper_vals], q0, scale, scale_vals)
        from .group_terms import several_terms

        return several_terms(engine, spec, params, eta, nodes, data_vars, q0, scale,
                             scale_vals)
    except _Refused as why:
        return NotFound(str(why))


def _glm(model):
    """The model's GLM and its fixed family parameters (scalars)."""
    try:
        spec = detect_glm(model)
    except ValueError as err:
        raise _Refused(f"not a GLM likelihood the sweep knows ({err})") from None
    family = get_family(spec.family)
    if family.structure != "glm":
        raise _Refused(f"the {family.name} likelihood (rows of several scalars) is not covered")
    if spec.family in _SCALE_FAMILIES:
        if spec.extra:
            raise _Refused(f"the {family.label} likelihood reads further sampled "
                           "parameters (not covered yet)")
    elif spec.two_param or not family.predictor_coordinates:
        raise _Refused(f"the {family.label} likelihood with a sampled scale or shape is not "
                       "covered yet (the sweep covers the Normal likelihood with a sampled "
                       "scale, and the families without a sampled parameter)")
    params = {}
    for key, val in spec.params.items():
        arr = np.asarray(val, dtype=np.float64)
        if arr.size != 1:
            raise _Refused(f"the family parameter {key} varies by row")
        params[key] = float(arr.reshape(-1)[0])
    return spec, params


def _all_gathers(engine, spec):
    """The linear predictor (gathers lifted), its gathers by group indices (at least
    one), and the row data variables."""
    eta = pt.as_tensor_variable(spec.eta)
    data_vars = engine.row_variables([eta])

    def is_param(var):
        return not any(a in data_vars for a in ancestors([var]))

    eta = lift_gathers(eta, is_param)
    gathers = _gathers(eta, is_param, data_vars)
    if not gathers:
        if _matrix_gathers(eta, is_param, data_vars):
            raise _Refused("the group effects are gathered from a matrix of effects (several "
                           "per level, as correlated intercepts and slopes under an MvNormal "
                           "or LKJCholeskyCov prior), which the sweep does not cover yet; "
                           "independent Normal terms per effect are covered")
        raise _Refused("no group effect in the linear predictor")
    return eta, gathers, data_vars


def _unit_weight(engine, eta, node, q0) -> bool:
    """Whether the gather ``node`` enters ``eta`` with weight 1 on every row (a random
    intercept: ``eta = f + X[g]``), checked on a sample of rows at ``q0`` and at a
    moved point; False for a random slope (``X[g] * x``) or any other use."""
    out = node.outputs[0]
    if _added(eta, out):
        return True  # read from the graph: no function to compile
    zero = pt.zeros(node.inputs[1].shape, dtype=out.dtype)
    f0 = clone_replace(eta, {out: zero})
    f1 = clone_replace(eta, {out: pt.ones(node.inputs[1].shape, dtype=out.dtype)})
    fn = engine.compile_batch([f1 - f0])
    rng = np.random.default_rng(1)  # set-up check, not sampling
    data = sample_rows(engine, rng)
    n = data[0].shape[0]
    for q in (q0, q0 + 0.3 * rng.standard_normal(q0.size)):
        w = np.broadcast_to(np.asarray(fn(q, *data)[0], dtype=np.float64), (n,))
        if not np.allclose(w, 1.0, rtol=0.0, atol=1e-12):
            return False
    return True


def _added(eta, out) -> bool:
    """Whether ``out`` reaches ``eta`` through additions only (``eta = f + X[g]``, in
    any order of terms), read from the graph; False where another operation lies on a
    path between them (then :func:`_unit_weight` checks the weight numerically)."""
    memo = {}

    def reaches(v):  # None: v does not depend on out; True: by additions; False: else
        if v is out:
            return True
        if v.owner is None:
            return None
        if v not in memo:
            ins = [reaches(i) for i in v.owner.inputs]
            if not any(r is not None for r in ins):
                memo[v] = None
            elif False in ins or sum(r is not None for r in ins) > 1:
                memo[v] = False  # another operation, or out reached twice (weight 2)
            else:
                op = v.owner.op
                memo[v] = (isinstance(op, Elemwise)
                           and isinstance(op.scalar_op, ps.Add))
        return memo[v]

    return reaches(eta) is True


def _group_variable(engine, x_vec, q0):
    """``(group value variable, centred, n_groups)`` of the gathered vector ``x_vec``:
    ``a`` itself (centred) or the one vector of length G under it."""
    model, slices = engine.model, engine.var_slices()
    x_values = [a for a in ancestors([x_vec]) if a in set(model.value_vars)]
    mine = [v for v in x_values if v in slices]
    if len(mine) != len(x_values):
        raise _Refused("the group effects read variables this step does not sample")
    (x_q,), q_x = engine.in_q([x_vec])
    n_groups = int(np.size(pytensor.function([q_x], x_q, on_unused_input="ignore")(q0)))
    candidates = [v for v in mine if slices[v].size == n_groups
                  and engine._point[v.name].ndim == 1]
    if x_vec in slices:
        return x_vec, True, n_groups
    if len(candidates) == 1:
        return candidates[0], False, n_groups
    raise _Refused("the group effects are not one vector variable (or an affine map of one)")


def _loc_scale_graphs(model, x_vec, group_value, centred):
    """The graphs of the group effects' ``loc`` and ``scale``."""
    normal = _normal_params(model, group_value)
    name = _rv_name(model, group_value)
    if normal is None:
        raise _Refused(f"'{name}' is not a Normal random variable without a transform")
    if centred:
        return tuple(model.replace_rvs_by_values([p])[0] for p in normal)
    z0, z1 = normal
    try:
        if np.any(np.asarray(z0.eval()) != 0.0) or np.any(np.asarray(z1.eval()) != 1.0):
            raise _Refused(f"'{name}' is not Normal(0, 1)")
    except _Refused:
        raise
    except Exception as err:  # noqa: BLE001 - parameters that are not constants
        raise _Refused(f"'{name}' is not Normal(0, 1) ({err})") from None
    loc = clone_replace(x_vec, {group_value: pt.zeros_like(group_value)})
    scale = clone_replace(x_vec, {group_value: pt.ones_like(group_value)}) - loc
    return loc, scale


def _random_intercept(engine, node, q0):
    """The :class:`RandomIntercept` of the gather ``node`` (its index data and group
    count checked), its group variable and its hyperparameters' value variables."""
    model, slices = engine.model, engine.var_slices()
    value_vars = set(model.value_vars)
    x_vec, idx = node.inputs
    group_value, centred, n_groups = _group_variable(engine, x_vec, q0)
    loc, scale = _loc_scale_graphs(model, x_vec, group_value, centred)
    (loc_q, scale_q), q_in = engine.in_q([pt.as_tensor_variable(loc),
                                          pt.as_tensor_variable(scale)])
    loc_scale_fn = pytensor.function([q_in], [loc_q, scale_q], on_unused_input="ignore")
    # hyperparameters sampled by another step (a CompoundStep split) are read from
    # their shared values: the sweep then leaves them to that step
    upstream = [v for v in value_vars & set(ancestors([loc, scale])) if v is not group_value]
    hyper_vals = [v for v in upstream if v in slices]
    groups = np.asarray(pytensor.function([], idx, on_unused_input="ignore")())
    if groups.shape != (engine.n_rows,) or groups.dtype.kind not in "iu":
        raise _Refused("the group index is not one integer per row")
    if groups.size and (groups.min() < 0 or groups.max() >= n_groups):
        raise _Refused(f"group indices outside 0..{n_groups - 1} (found {groups.min()}.."
                       f"{groups.max()})")
    hyper_idx = (np.concatenate([slices[v] for v in hyper_vals]) if hyper_vals
                 else np.zeros(0, dtype=int))
    idx_names = [r.name for r in engine.rows
                 if any(a is r.variable for a in ancestors([idx]))]
    term = RandomIntercept(
        centred=centred, group_var=_rv_name(model, group_value),
        group_name=unnamed_label(idx_names[0], "index") if idx_names else "group index",
        n_groups=n_groups,
        group_of_row=groups.astype(np.int32), group_idx=slices[group_value],
        hyper_idx=np.sort(hyper_idx),
        hyper_names=[_rv_name(model, v) for v in engine.vars if v in hyper_vals],
        hyper_shared=len(hyper_vals) != len(upstream), _loc_scale_fn=loc_scale_fn)
    return term, group_value, hyper_vals


def _family_scale(engine, spec, q0):
    """The :class:`FamilyScale` of a Normal likelihood with a sampled scale (None, [] for
    a family without one) and its value variables: ``log sigma`` must read exactly one
    scalar variable of this step and no row data."""
    if spec.family not in _SCALE_FAMILIES:
        return None, []
    model, slices = engine.model, engine.var_slices()
    log_scale = pt.as_tensor_variable(spec.log_scale)
    if engine.row_variables([log_scale]):
        raise _Refused("the likelihood's scale varies by row (not covered yet)")
    values = [v for v in ancestors([log_scale]) if v in set(model.value_vars)]
    if len(values) != 1 or values[0] not in slices or slices[values[0]].size != 1:
        raise _Refused("the likelihood's scale is not one scalar variable of this step")
    (log_q,), q_in = engine.in_q([log_scale])
    log_fn = pytensor.function([q_in], log_q, on_unused_input="ignore")
    k = int(slices[values[0]][0])
    scale = FamilyScale(name=_rv_name(model, values[0]), idx=k, log_is_coordinate=False,
                        _log_fn=log_fn)
    base = scale.log_scale(q0)
    if not np.isfinite(base):
        raise _Refused(f"the scale '{scale.name}' is not finite at the initial point")
    shifted = []
    for d in (-0.7, 0.4, 1.3):
        q = np.array(q0, dtype=np.float64)
        q[k] += d
        shifted.append(scale.log_scale(q) - base - d)
    scale.log_is_coordinate = bool(np.allclose(shifted, 0.0, atol=1e-10))
    return scale, values


def _with_fixed_block(engine, spec, params, eta, node, term, term_vars, q0, scale=None,
                      scale_vals=()):
    """The structure: the fixed part ``f`` (``eta`` with the gather replaced by zeros,
    affine in the remaining variables, reading none of ``term_vars``: the group variable
    and the hyperparameters, nor the family's scale ``scale_vals``) and the term; every
    variable of the step is one of them."""
    model, slices = engine.model, engine.var_slices()
    value_vars = set(model.value_vars)
    idx = node.inputs[1]
    f = clone_replace(eta, {node.outputs[0]: pt.zeros(idx.shape, dtype=node.outputs[0].dtype)})
    f_values = [v for v in ancestors([f]) if v in value_vars]
    if any(v in f_values for v in term_vars):
        raise _Refused("the linear predictor reads the group variable or its hyperparameters "
                       "outside the group effect")
    if any(v in f_values or v in term_vars for v in scale_vals):
        raise _Refused(f"the scale '{scale.name}' is also read by the linear predictor or "
                       "the group effects")
    if any(v not in slices for v in f_values):
        raise _Refused("the fixed effects include variables of another step")
    f_fn = engine.compile_batch([f])
    rng = np.random.default_rng(0)  # set-up check, not sampling
    data = sample_rows(engine, rng)
    y_index, fixed_vals, fixed_idx = _fixed_block(engine, spec, f_fn, f_values, [term],
                                                  scale, q0, data, rng)
    return GroupStructure(
        family=spec.family, params=params, terms=[term], fixed_idx=np.sort(fixed_idx),
        fixed_names=[_rv_name(model, v) for v in fixed_vals], _f_fn=f_fn,
        _y_index=y_index, engine=engine, scale=scale)


def _fixed_block(engine, spec, f_fn, f_values, terms, scale, q0, data, rng):
    """The checks of the fixed part ``f_fn`` shared by one term and several: affine in
    the fixed effects, the observations a data array, and every variable of the step a
    fixed effect, a term's group variable or hyperparameter, or the scale. Returns the
    observations' row index, the fixed effects' value variables and positions in ``q``;
    raises ``_Refused`` with the reason."""
    model, slices = engine.model, engine.var_slices()
    if not is_affine(lambda q: np.atleast_1d(f_fn(q, *data)[0]), q0, rng):
        raise _Refused("the fixed part of the linear predictor is not affine in the fixed "
                       "effects")
    obs_value = model.rvs_to_values[model[spec.observed]]
    y_index = next((k for k, r in enumerate(engine.rows) if r.variable is obs_value), None)
    if y_index is None:
        raise _Refused("the observations are an expression of the data, not a data array")
    fixed_vals = [v for v in engine.vars if v in f_values]
    fixed_idx = (np.concatenate([slices[v] for v in fixed_vals]) if fixed_vals
                 else np.zeros(0, dtype=int))
    used = set(fixed_idx).union(*(set(t.group_idx) | set(t.hyper_idx) for t in terms))
    if scale is not None:
        used.add(scale.idx)
    if len(used) != engine.ndim:
        rest = [_rv_name(model, v) for v in engine.vars if not set(slices[v]) <= used]
        raise _Refused(f"the step also samples {', '.join(rest)}, which is neither a fixed "
                       "effect nor a hyperparameter of the group effects")
    return y_index, fixed_vals, fixed_idx


def unnamed_label(label: str, what: str) -> str:
    """A row-data label for messages: ``label`` itself (``data 'g'``), or, for data the
    model holds as an unnamed constant (``constant of shape (N,)``, as Bambi writes
    its group indices and covariates), ``an unnamed <what> (constant of shape (N,))``."""
    return f"an unnamed {what} ({label})" if label.startswith("constant of") else label


def gather_label(model, node, data_vars) -> str:
    """``"a[g]"`` of the gather ``node`` of a random effect (for messages): the sampled
    variables it reads, and the name of the row data that index it (``row index`` when
    unnamed)."""
    value_vars = set(model.value_vars)
    sources = [a for a in ancestors([node.inputs[0]]) if a in value_vars]
    names = "/".join(sorted({model.values_to_rvs[v].name for v in sources})) or "?"
    index_data = [a for a in ancestors([node.inputs[1]]) if a in data_vars]
    index = getattr(index_data[0], "name", None) if index_data else None
    return f"{names}[{index or 'row index'}]"


def random_effects(engine) -> list[str]:
    """Labels ``"a[g]"`` of the random effects in the model's likelihood: every gather,
    in an observed variable's distribution parameters, of a vector that depends on the
    sampled variables by integer row data (what a random intercept or slope per level of
    a grouping factor is in a graph). Empty when there is none.

    The steps use it to warn, before sampling, when such a model is not covered by the
    blocked sweep (:func:`find_groups` returned a :class:`NotFound`): a joint move over
    all its coordinates does not mix on it.
    """
    model = engine.model
    params = []
    for rv in model.observed_RVs:
        op = rv.owner.op
        values = op.dist_params(rv.owner) if hasattr(op, "dist_params") else rv.owner.inputs[3:]
        params.extend(v for v in values if isinstance(v, pt.TensorVariable))
    params = model.replace_rvs_by_values(params)
    data_vars = engine.row_variables(params)
    value_vars = set(model.value_vars)
    found = []
    for node in io_toposort(list(graph_inputs(params)), params):
        if not isinstance(node.op, _GATHERS) or len(node.inputs) < 2:
            continue
        x, idx = node.inputs[0], node.inputs[1]
        if not str(getattr(idx, "dtype", "")).startswith(("int", "uint")):
            continue
        sources = [a for a in ancestors([x]) if a in value_vars]
        index_data = [a for a in ancestors([idx]) if a in data_vars]
        if not sources or not index_data or any(a in data_vars for a in ancestors([x])):
            continue
        label = gather_label(model, node, data_vars)
        if label not in found:
            found.append(label)
    return sorted(found)
