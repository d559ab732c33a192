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
answer is a :class:`GroupStructure` or a reason why not (a string), never a guess.

The arithmetic of the sweep on this structure is NumPy only
(:mod:`pymc_subsample.kernels.hierarchical`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.replace import clone_replace
from pytensor.tensor.subtensor import AdvancedSubtensor

try:  # PyTensor < 3 gathers a vector by one index array with its own op
    from pytensor.tensor.subtensor import AdvancedSubtensor1
    _GATHERS = (AdvancedSubtensor1, AdvancedSubtensor)
except ImportError:  # PyTensor 3: AdvancedSubtensor only
    _GATHERS = (AdvancedSubtensor,)

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

__all__ = ["GroupStructure", "find_groups"]


@dataclass
class GroupStructure:
    """A random intercept per group in a GLM likelihood, in the step's raveled ``q``.

    Attributes
    ----------
    family : str
        The GLM family (a name of :mod:`pymc_subsample.kernels.families`).
    params : dict
        The family's fixed parameters (scalars).
    centred : bool
        The group variable is ``a`` itself (True) or ``z`` with ``a = loc + scale z``.
    group_var, group_name : str
        The group variable's name (``a`` or ``z``) and the name of the index data.
    n_groups : int
    group_of_row : ndarray of int32, shape (N,)
        The group of every row.
    group_idx, hyper_idx, fixed_idx : ndarray of int
        Positions in ``q`` of the group variable, of the hyperparameters (what ``loc``
        and ``scale`` read) and of the fixed effects (what ``f`` reads).
    hyper_names, fixed_names : list of str
    hyper_shared : bool
        Some hyperparameters are sampled by another step (their current values are read
        from the shared variables PyMC refreshes).
    """

    family: str
    params: dict
    centred: bool
    group_var: str
    group_name: str
    n_groups: int
    group_of_row: np.ndarray = field(repr=False)
    group_idx: np.ndarray = field(repr=False)
    hyper_idx: np.ndarray = field(repr=False)
    fixed_idx: np.ndarray = field(repr=False)
    hyper_names: list = field(default_factory=list)
    fixed_names: list = field(default_factory=list)
    hyper_shared: bool = False
    _loc_scale_fn: object = field(default=None, repr=False)
    _f_fn: object = field(default=None, repr=False)
    _y_index: int = field(default=0, repr=False)
    engine: object = field(default=None, repr=False)

    # ------------------------------------------------------------------ functions of q
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

    def fixed_part(self, q, data) -> np.ndarray:
        """``f_i = o_i + x_i . beta`` of the rows in ``data`` at ``q``."""
        out = self._f_fn(np.asarray(q, dtype=np.float64), *data)[0]
        return np.broadcast_to(np.asarray(out, dtype=np.float64), (data[0].shape[0],))

    def y(self, data) -> np.ndarray:
        """The observations of the rows in ``data``."""
        return np.asarray(data[self._y_index], dtype=np.float64).reshape(-1)

    def describe(self) -> str:
        """A short text of the structure (the steps' ``repr`` shows it)."""
        sizes = np.bincount(self.group_of_row, minlength=self.n_groups)
        form = "centred" if self.centred else "non-centred"
        return (f"random intercept '{self.group_var}' ({form}) over {self.n_groups} groups "
                f"of {self.group_name} (rows per group {int(sizes.min())}-"
                f"{int(sizes.max())}, median {int(np.median(sizes))}); hyperparameters "
                f"{', '.join(self.hyper_names) or '-'}; fixed effects "
                f"{', '.join(self.fixed_names) or '-'}; {get_family(self.family).label} "
                "likelihood")


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
    """The :class:`GroupStructure` of ``engine``'s model, or a string saying why it has
    none (the caller then runs its ordinary update, or refuses with this reason).

    Parameters
    ----------
    engine : LikelihoodEngine
    q0 : array, optional
        A point of the step's ``q`` for the numerical checks (default: the initial one).
    """
    model = engine.model
    try:
        spec = detect_glm(model)
    except ValueError as err:
        return f"not a GLM likelihood the sweep knows ({err})"
    family = get_family(spec.family)
    if spec.two_param or not family.predictor_coordinates:
        return f"the {family.label} likelihood with a sampled scale is not covered yet"
    params = {}
    for key, val in spec.params.items():
        arr = np.asarray(val, dtype=np.float64)
        if arr.size != 1:
            return f"the family parameter {key} varies by row"
        params[key] = float(arr.reshape(-1)[0])
    eta = pt.as_tensor_variable(spec.eta)
    data_vars = engine.row_variables([eta])

    def is_param(var):
        return not any(a in data_vars for a in ancestors([var]))

    eta = lift_gathers(eta, is_param)
    gathers = _gathers(eta, is_param, data_vars)
    if len(gathers) != 1:
        return ("no group effect in the linear predictor" if not gathers else
                f"{len(gathers)} gathers by group indices in the linear predictor (one "
                "random intercept is covered)")
    node = gathers[0]
    x_vec, idx = node.inputs
    slices = engine.var_slices()
    value_vars = set(model.value_vars)
    x_values = [a for a in ancestors([x_vec]) if a in value_vars]
    mine = [v for v in x_values if v in slices]
    if len(mine) != len(x_values):
        return "the group effects read variables this step does not sample"
    q0 = engine.initial_q() if q0 is None else np.asarray(q0, dtype=np.float64)
    (x_q,), q_x = engine.in_q([x_vec])
    n_groups = int(np.size(pytensor.function([q_x], x_q, on_unused_input="ignore")(q0)))
    # the group variable: `a` itself (centred) or the one vector of length G under X
    candidates = [v for v in mine if slices[v].size == n_groups
                  and engine._point[v.name].ndim == 1]
    if x_vec in slices:
        group_value, centred = x_vec, True
    elif len(candidates) == 1:
        group_value, centred = candidates[0], False
    else:
        return "the group effects are not one vector variable (or an affine map of one)"
    normal = _normal_params(model, group_value)
    if normal is None:
        return (f"'{_rv_name(model, group_value)}' is not a Normal random variable without "
                "a transform")
    if centred:
        loc, scale = (model.replace_rvs_by_values([p])[0] for p in normal)
    else:
        z0, z1 = normal
        try:
            if np.any(np.asarray(z0.eval()) != 0.0) or np.any(np.asarray(z1.eval()) != 1.0):
                return f"'{_rv_name(model, group_value)}' is not Normal(0, 1)"
        except Exception as err:  # noqa: BLE001 - parameters that are not constants
            return f"'{_rv_name(model, group_value)}' is not Normal(0, 1) ({err})"
        loc = clone_replace(x_vec, {group_value: pt.zeros_like(group_value)})
        scale = clone_replace(x_vec, {group_value: pt.ones_like(group_value)}) - loc
    (loc_q, scale_q), q_in = engine.in_q([pt.as_tensor_variable(loc),
                                          pt.as_tensor_variable(scale)])
    loc_scale_fn = pytensor.function([q_in], [loc_q, scale_q], on_unused_input="ignore")
    group_idx = slices[group_value]
    # hyperparameters sampled by another step (a CompoundStep split) are read from
    # their shared values: the sweep then leaves them to that step
    hyper_vals = [v for v in value_vars & set(ancestors([loc, scale])) if v in slices
                  and v is not group_value]
    hyper_shared = len(hyper_vals) != len([v for v in value_vars & set(ancestors([loc, scale]))
                                           if v is not group_value])
    # the fixed part: eta with the gather replaced by zeros
    f = clone_replace(eta, {node.outputs[0]: pt.zeros(idx.shape, dtype=node.outputs[0].dtype)})
    f_values = [v for v in ancestors([f]) if v in value_vars]
    if group_value in f_values or any(v in f_values for v in hyper_vals):
        return ("the linear predictor reads the group variable or its hyperparameters "
                "outside the group effect")
    if any(v not in slices for v in f_values):
        return "the fixed effects include variables of another step"
    f_fn = engine.compile_batch([f])
    # the data: group indices in range, the fixed part affine in q
    groups = np.asarray(pytensor.function([], idx, on_unused_input="ignore")())
    if groups.shape != (engine.n_rows,) or groups.dtype.kind not in "iu":
        return "the group index is not one integer per row"
    if groups.size and (groups.min() < 0 or groups.max() >= n_groups):
        return (f"group indices outside 0..{n_groups - 1} (found {groups.min()}.."
                f"{groups.max()})")
    rng = np.random.default_rng(0)  # set-up check, not sampling
    data = sample_rows(engine, rng)
    if not is_affine(lambda q: np.atleast_1d(f_fn(q, *data)[0]), q0, rng):
        return "the fixed part of the linear predictor is not affine in the fixed effects"
    obs_value = model.rvs_to_values[model[spec.observed]]
    y_index = next((k for k, r in enumerate(engine.rows) if r.variable is obs_value), None)
    if y_index is None:
        return "the observations are an expression of the data, not a data array"
    hyper_idx = (np.concatenate([slices[v] for v in hyper_vals]) if hyper_vals
                 else np.zeros(0, dtype=int))
    fixed_vals = [v for v in engine.vars if v in f_values]
    fixed_idx = (np.concatenate([slices[v] for v in fixed_vals]) if fixed_vals
                 else np.zeros(0, dtype=int))
    used = set(group_idx) | set(hyper_idx) | set(fixed_idx)
    if len(used) != engine.ndim:
        rest = [_rv_name(model, v) for v in engine.vars
                if not set(slices[v]) <= used]
        return (f"the step also samples {', '.join(rest)}, which is neither a fixed "
                "effect nor a hyperparameter of the group effects")
    idx_names = [r.name for r in engine.rows
                 if any(a is r.variable for a in ancestors([idx]))]
    return GroupStructure(
        family=spec.family, params=params, centred=centred,
        group_var=_rv_name(model, group_value),
        group_name=idx_names[0] if idx_names else "group index",
        n_groups=n_groups, group_of_row=groups.astype(np.int32),
        group_idx=group_idx, hyper_idx=np.sort(hyper_idx), fixed_idx=np.sort(fixed_idx),
        hyper_names=[_rv_name(model, v) for v in engine.vars if v in hyper_vals],
        fixed_names=[_rv_name(model, v) for v in fixed_vals],
        hyper_shared=hyper_shared,
        _loc_scale_fn=loc_scale_fn, _f_fn=f_fn, _y_index=y_index, engine=engine)
