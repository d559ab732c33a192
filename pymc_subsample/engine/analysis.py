"""Model analysis: which models the engine can subsample, and where their data rows are.

Everything here reads the PyMC model and its PyTensor graph; nothing is compiled except
by :func:`check_factorises`, which evaluates a function it is given. A model the
subsampling steps cannot handle is refused with a :class:`ModelNotSupportedError` that
names the variable and says what to do instead.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import threading
import weakref
from dataclasses import dataclass, field

import numpy as np
import pytensor.tensor as pt
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant, Variable
from pytensor.tensor.elemwise import Elemwise

from pymc.data import MinibatchIndexRV
from pymc.variational.minibatch_rv import MinibatchRandomVariable

try:  # PyTensor >= 2.31 moved graph traversal helpers
    from pytensor.graph.traversal import ancestors, graph_inputs, io_toposort
except ImportError:  # pragma: no cover - older PyTensor
    from pytensor.graph.basic import ancestors, graph_inputs, io_toposort
from pytensor.tensor.subtensor import AdvancedSubtensor  # noqa: E402

try:  # PyTensor < 3 gathers a vector by one index array with its own op
    from pytensor.tensor.subtensor import AdvancedSubtensor1
    #: the ops that gather a vector by an index array (``a[g]``)
    GATHERS = (AdvancedSubtensor1, AdvancedSubtensor)
except ImportError:  # PyTensor 3: AdvancedSubtensor only
    GATHERS = (AdvancedSubtensor,)

__all__ = ["ModelNotSupportedError", "InvalidDataError", "RowData", "ModelRows",
           "analyse_model", "check_factorises", "RowScan", "data_fingerprint"]

#: the ops of PyMC's own minibatching (``pm.Minibatch`` data, ``total_size=``)
_MINIBATCH_OPS = (MinibatchRandomVariable, MinibatchIndexRV)


class ModelNotSupportedError(ValueError):
    """The model cannot be subsampled row by row (the message says why and what to do)."""


class InvalidDataError(ValueError):
    """The data cannot be sampled as they are: a NaN or infinite covariate, or rows whose
    log-likelihood is not finite at the initial point (the message names the variable,
    the rows and their values)."""


@dataclass
class RowData:
    """One row-indexed data tensor of the model.

    Attributes
    ----------
    name : str
        Readable name (the ``pm.Data`` / observed variable name, or a description).
    variable : Variable
        The constant or shared variable in the model's graph.
    batch_input : Variable
        The symbolic input that replaces it in the batch graph (leading dim unknown).
    """

    name: str
    variable: Variable
    batch_input: Variable
    _array: np.ndarray | None = field(default=None, repr=False)

    def array(self) -> np.ndarray:
        """The full data array (no copy). Shared values are re-read on every call."""
        if self._array is not None:
            return self._array
        return self.variable.get_value(borrow=True)


@dataclass
class ModelRows:
    """What :func:`analyse_model` finds in a model.

    Attributes
    ----------
    row_dim : str or None
        The observation dim, when the model names one.
    n_rows : int
        Number of rows ``N``.
    rows : list of RowData
        The row-indexed data tensors of the likelihood.
    loglik_terms : list of (TensorVariable, TensorVariable)
        ``(observed variable, elementwise log-likelihood)`` pairs, leading axis the rows.
    prior : TensorVariable
        Log density of the free variables (with transform Jacobians) and the Potentials.
    """

    row_dim: str | None
    n_rows: int
    rows: list
    loglik_terms: list
    prior: Variable


def analyse_model(model, shared, point, row_dim=None) -> ModelRows:
    """Check that ``model`` factorises over data rows and find those rows.

    Parameters
    ----------
    model : pymc.Model
    shared : dict
        ``{value variable: shared variable}`` of the variables the step does not sample
        (they are never row data).
    point : dict
        The model's initial point (for the per-row latent variable check).
    row_dim : str, optional
        Name of the observation dim (default: found from the observed variables).

    Returns
    -------
    ModelRows

    Raises
    ------
    ModelNotSupportedError
        When the model cannot be subsampled row by row.
    """
    _check_observed(model)
    row_dim, n_rows = _find_rows(model, row_dim)
    ll_terms = _loglik_terms(model)
    prior = _prior_terms(model, _data_candidates(model, n_rows, shared))
    rows = _find_row_data(model, ll_terms, n_rows, row_dim, shared)
    _check_gather_indices(model, ll_terms, rows, point)
    _check_row_selection(model, rows, n_rows, point)
    _check_no_row_latents(model, ll_terms, point, n_rows, row_dim)
    return ModelRows(row_dim, n_rows, rows, ll_terms, prior)


def _var_label(var) -> str:
    return var.name if getattr(var, "name", None) else f"<unnamed {type(var).__name__} {var.type}>"


def through_casts(var):
    """``var`` with the unary elementwise ops above its data peeled off.

    PyMC inserts such ops between the data and an observed variable: integer data in a
    ``pm.Data`` (stored as int32) observed by a discrete distribution is seen through a
    ``Cast{int64}`` of the shared variable. They keep the shape, so the row count is the
    data's.
    """
    while (var.owner is not None and isinstance(var.owner.op, Elemwise)
           and len(var.owner.inputs) == 1):
        var = var.owner.inputs[0]
    return var


def _static_len(var) -> int | None:
    """Length of the leading axis, read without evaluating any graph."""
    var = through_casts(var)
    if isinstance(var, Constant):
        data = var.data
        return None if np.ndim(data) == 0 else int(np.shape(data)[0])
    if isinstance(var, SharedVariable):
        val = var.get_value(borrow=True)
        return None if np.ndim(val) == 0 else int(np.shape(val)[0])
    shp = getattr(var.type, "shape", None)
    if shp and shp[0] is not None:
        return int(shp[0])
    return None


def _full_shape(var) -> tuple[int, ...]:
    if isinstance(var, Constant):
        return tuple(np.shape(var.data))
    return tuple(np.shape(var.get_value(borrow=True)))


#: distributions whose support has bounds among their parameters: ``{op class name:
#: positions of the bounds in dist_params}``
_BOUNDED_SUPPORT = {"UniformRV": (0, 1), "DiscreteUniformRV": (0, 1), "ParetoRV": (1,),
                    "TriangularRV": (0, 2), "TruncatedNormalRV": (2, 3),
                    "TruncatedRV": (-2, -1)}


def _check_support_bounds(model):
    """Refuse a likelihood whose support depends on a sampled variable (``y ~
    Uniform(0, theta)``): the rows that bound it are seen only when a batch draws them,
    so a move past the bound is accepted on the other rows' evidence."""
    free = set(model.free_RVs)
    for rv in model.observed_RVs:
        op = rv.owner.op
        where = _BOUNDED_SUPPORT.get(type(op).__name__)
        if where is None or not hasattr(op, "dist_params"):
            continue
        params = op.dist_params(rv.owner)
        names = sorted({a.name for i in where for a in ancestors([params[i]]) if a in free})
        if names:
            raise ModelNotSupportedError(
                f"Observed variable '{rv.name}' ({type(op).__name__[:-2]}) has a support "
                f"bound that depends on {', '.join(repr(n) for n in names)}: a row's "
                "log-likelihood is -inf once the bound passes it, and a batch that misses "
                "the bounding rows (for Uniform(0, theta), the largest) accepts such a "
                "move, so the draws would leave the support. The subsampling steps cannot "
                "sample it; use pm.sample() on the full data, or write the likelihood "
                "through its sufficient statistic (for Uniform(0, theta): N log theta "
                "and theta > max(y), a pm.Potential)."
            )


def _check_observed(model):
    _check_support_bounds(model)
    if not model.observed_RVs:
        raise ModelNotSupportedError(
            "The model has no observed variables: there are no data rows to subsample. "
            "Use a full-data sampler (pm.NUTS, pm.Metropolis) for this model."
        )
    free_names = {rv.name for rv in model.free_RVs}
    for rv in model.observed_RVs:
        name = rv.name
        if name.endswith("_observed") and name[: -len("_observed")] + "_unobserved" in free_names:
            base = name[: -len("_observed")]
            raise ModelNotSupportedError(
                f"Observed variable '{base}' has missing values, which PyMC imputes with the "
                f"free variable '{base}_unobserved'. Subsampling steps need fully observed "
                "rows: drop the rows with missing values (or model the missingness "
                "explicitly) before building the model."
            )
        # pm.Minibatch / total_size: PyMC's own subsampling for variational inference
        # (the observed variable is wrapped in a MinibatchRandomVariable, the data
        # drawn by a MinibatchIndexRV)
        if any(v.owner is not None and isinstance(v.owner.op, _MINIBATCH_OPS)
               for v in ancestors([rv])):
            raise ModelNotSupportedError(
                f"Observed variable '{name}' uses pm.Minibatch or total_size=, PyMC's "
                "subsampling for variational inference. The subsampling steps draw the "
                "rows themselves and need the whole data set in the model: build it on "
                "all N rows (the arrays, a pm.Data or a numpy.memmap) without "
                "pm.Minibatch and total_size=; each step then reads only the rows it "
                "draws."
            )


def _find_rows(model, row_dim):
    lengths = {}
    dims_seen = set()
    for rv in model.observed_RVs:
        value = model.rvs_to_values[rv]
        n = _static_len(value)
        if n is None:
            raise ModelNotSupportedError(
                f"Observed variable '{rv.name}' is a scalar: there is no row axis to "
                "subsample. Give each observation its own row (a 1-D or 2-D observed array)."
            )
        lengths[rv.name] = n
        dims = model.named_vars_to_dims.get(rv.name)
        if dims and dims[0] is not None:
            dims_seen.add(dims[0])
    if len(set(lengths.values())) > 1:
        listing = ", ".join(f"'{k}' has {v}" for k, v in lengths.items())
        raise ModelNotSupportedError(
            "The observed variables have rows of different lengths "
            f"({listing}); subsampling needs every observed variable indexed by the same "
            "rows. Split the model or align the observed arrays row by row."
        )
    n_rows = next(iter(lengths.values()))
    if n_rows == 0:
        raise ModelNotSupportedError(
            f"Observed variable '{next(iter(lengths))}' has 0 rows: there is nothing to "
            "subsample. Build the model on the data (check the filter or the file that "
            "produced the arrays)."
        )
    if n_rows == 1:
        raise ModelNotSupportedError(
            f"Observed variable '{next(iter(lengths))}' has 1 row: a batch of it is the "
            "whole data set, and a one-row axis cannot be told from a broadcast one. "
            "The subsampling steps are for tall data; sample this model with pm.sample() "
            "(NUTS)."
        )
    if row_dim is None and len(dims_seen) == 1:
        row_dim = next(iter(dims_seen))
    if row_dim is not None:
        if row_dim not in model.dim_lengths:
            raise ValueError(f"row_dim='{row_dim}' is not a dim of the model.")
    return row_dim, n_rows


# model -> {(structure, vars, options): graph}
_logp_graphs: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def model_logp(model, vars, **kwargs):
    """``model.logp(vars=vars, **kwargs)``, built once per model structure and process.

    PyMC derives a log-density graph by rewriting the model's graph (tens of
    milliseconds, several times per step construction); a step built again on the same
    model reuses the graphs (immutable, like every PyTensor graph). The key holds the
    identities of the model's variables, transforms and potentials, so a model that
    gained a variable gets new graphs."""
    key = (
        tuple(id(v) for v in model.free_RVs), tuple(id(v) for v in model.observed_RVs),
        tuple(id(v) for v in model.potentials), tuple(id(v) for v in model.value_vars),
        tuple(id(t) for t in model.rvs_to_transforms.values()),
        tuple(id(v) for v in vars), tuple(sorted(kwargs.items())),
    )
    per_model = _logp_graphs.setdefault(model, {})
    graph = per_model.get(key)
    if graph is None:
        with _constant_signatures_once():
            graph = per_model[key] = model.logp(vars=vars, **kwargs)
    return graph


#: constants with more elements than this get a signature whose hash reads a sample
_BIG_CONSTANT = 1 << 16
_signature_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _sampled_signature_class():
    from pytensor.tensor.variable import TensorConstantSignature

    class SampledSignature(TensorConstantSignature):
        """PyTensor's signature of a constant (equality unchanged: type, shape and every
        value), hashed by a strided sample of at most ``_BIG_CONSTANT`` values: equal
        data still give equal hashes."""

        def __hash__(self):
            t, d = self
            try:
                return self._pms_hash
            except AttributeError:
                flat = np.asarray(d).reshape(-1)
                step = max(1, flat.size // _BIG_CONSTANT)
                sample = np.ascontiguousarray(flat[::step])
                digest = hashlib.blake2b(sample.tobytes(), digest_size=8).hexdigest()
                self._pms_hash = hash((TensorConstantSignature, t, d.shape, digest))
                return self._pms_hash

    return SampledSignature


class _FixedSignature:
    """A large constant's ``signature`` method, set on the constant itself: the sampled
    signature made once (see :func:`_constant_signatures_once`)."""

    __slots__ = ("signature",)

    def __init__(self, signature):
        self.signature = signature

    def __call__(self):
        return self.signature


@contextlib.contextmanager
def _constant_signatures_once():
    """While PyMC derives a log density: one signature per large constant, made once.

    PyTensor makes a new signature object each time a constant is hashed or compared,
    and hashes it by a NaN-masked sum of all its values. PyMC's derivation hashes the
    model's data constants several times: at N = 10^7 rows of 10 float64 columns that
    was 1.0 s of a step's construction. Within this context a large constant's
    signature is made once and hashed from a sample; equality is PyTensor's, so
    rewriting is unchanged.

    The signature stays on the constant (an instance attribute ``signature``; PyTensor
    never changes a constant's data), so that the model's later derivations hash it as
    cheaply: ``pm.sample`` builds the model's log density once more before its draws
    (``assign_step_methods``), which hashed a 10^7-row observed constant 73 times, 0.45 s.
    Constants of other models, and small ones, keep PyTensor's own signature."""
    from pytensor.tensor.variable import TensorConstant

    original = TensorConstant.__dict__.get("signature")
    if original is None:  # another PyTensor: leave it alone
        yield
        return
    sampled = _sampled_signature_class()

    def signature(self):
        if np.size(self.data) <= _BIG_CONSTANT:
            return original(self)
        fixed = self.__dict__.get("signature")
        if not isinstance(fixed, _FixedSignature):
            fixed = self.__dict__["signature"] = _FixedSignature(
                sampled((self.type, self.data)))
        return fixed()

    with _signature_lock:
        TensorConstant.signature = signature
        try:
            yield
        finally:
            TensorConstant.signature = original


def _loglik_terms(model):
    terms = model_logp(model, model.observed_RVs, sum=False)
    out = []
    for rv, term in zip(model.observed_RVs, terms):
        if term.ndim == 0:
            raise ModelNotSupportedError(
                f"The likelihood of observed variable '{rv.name}' does not factorise over "
                "rows: its log-density is one term for all rows together (e.g. an observed "
                "GaussianRandomWalk, AR or a single MvNormal across all rows). Subsampling "
                "needs one log-likelihood term per row."
            )
        out.append((rv, term))
    return out


def _prior_terms(model, data_vars):
    prior_vars = list(model.free_RVs)
    for pot in model.potentials:
        touched = [v for v in ancestors([pot]) if v in data_vars]
        if touched:
            raise ModelNotSupportedError(
                f"Potential '{pot.name}' uses the data rows "
                f"({', '.join(sorted({_var_label(v) for v in touched}))}). A Potential is one "
                "term over all rows at once, which a subsampling step cannot split. Write "
                "per-row terms as an observed pm.CustomDist (one logp term per row) instead."
            )
        prior_vars.append(pot)
    if not prior_vars:
        return pt.constant(0.0, dtype="float64")
    return model_logp(model, prior_vars, jacobian=True, sum=True)


def _data_candidates(model, n, shared):
    """Constants and shared data of the observed terms with a leading axis of length N."""
    cands = set()
    terms = [model.rvs_to_values[rv] for rv in model.observed_RVs]
    terms += list(model.observed_RVs)
    for var in graph_inputs(terms + list(model.potentials)):
        if isinstance(var, (Constant, SharedVariable)) and var not in shared.values():
            try:
                if _static_len(var) == n:
                    cands.add(var)
            except Exception:  # RNGs and other non-array shared variables
                continue
    for rv in model.observed_RVs:
        cands.add(model.rvs_to_values[rv])
    return cands


def _find_row_data(model, ll_terms, n, row_dim, shared):
    dims_of = model.named_vars_to_dims
    data_names = {v: k for k, v in model.named_vars.items()}
    dim_length_vars = set(model.dim_lengths.values())
    obs_values = {model.rvs_to_values[rv]: rv.name for rv in model.observed_RVs}
    rows = []
    transposed = []
    for var in graph_inputs([t for _, t in ll_terms]):
        if not isinstance(var, (Constant, SharedVariable)):
            continue
        if var in shared.values() or var in dim_length_vars:
            continue
        if not isinstance(getattr(var, "type", None), pt.TensorType):
            # random generators and other non-tensor shared state; the slice and None
            # constants of an indexing expression (``X[:, [0, 2]]``)
            continue
        if var.type.ndim == 0:
            continue
        shape = _full_shape(var)
        name = obs_values.get(var) or data_names.get(var) or _var_label(var)
        dims = dims_of.get(name) if name in model.named_vars else None
        if dims and dims[0] is not None and row_dim is not None:
            is_row = dims[0] == row_dim
        else:
            is_row = shape[0] == n
        if not is_row:
            if n in shape[1:] and n > 1 and not (dims and row_dim in dims[:1]):
                transposed.append((name, shape))
            continue
        if var in obs_values:
            label = f"observed '{name}'"
        elif name in model.named_vars:
            label = f"data '{name}'"
        else:
            label = f"constant of shape {shape}"
        static = (None,) + tuple(var.type.shape[1:])
        batch = pt.TensorType(var.type.dtype, shape=static)(name=f"rows[{len(rows)}]")
        arr = var.data if isinstance(var, Constant) else None
        rows.append(RowData(label, var, batch, arr))
    if transposed:
        what = ", ".join(f"{nm} with shape {sh}" for nm, sh in transposed)
        raise ModelNotSupportedError(
            f"Data ({what}) has {n} (the number of rows) along an axis other than the first. "
            "Subsampling gathers rows along the first axis of every data array: store the "
            "data with one observation per leading index (e.g. X of shape (N, k), not (k, N)); "
            "a transposed selection computed in the model from a constant (e.g. "
            "pm.math.dot(b, X.T[:4])) is such data too: write it on the rows "
            "(pm.math.dot(X[:, :4], b)) or pass X as pm.Data."
        )
    if not rows:  # pragma: no cover - the observed values are always row data
        raise ModelNotSupportedError("No row-indexed data was found in the likelihood.")
    return rows


def _index_range(arr, chunk: int = 1 << 20):
    """``(min, max)`` of an integer array, chunk by chunk (a memory map is read once)."""
    lo, hi = None, None
    for s in range(0, int(arr.shape[0]), chunk):
        part = np.asarray(arr[s : s + chunk])
        if part.size:
            lo = int(part.min()) if lo is None else min(lo, int(part.min()))
            hi = int(part.max()) if hi is None else max(hi, int(part.max()))
    return lo, hi


def _check_row_selection(model, rows, n_rows, point):
    """Refuse a selection or reordering of the data rows inside the likelihood
    (``eta[perm]``, ``eta[::-1]``, ``eta[:1000]``), read from the observed variables'
    graphs as written: PyMC 6 folds ``(b * x)[perm]`` into ``b * x[perm]`` in the
    log-likelihood, while the predictor readers see the graph as written, with the
    whole data's rows against a batch's."""
    from .batch_graph import _data_label, _row_indexing_error, first_axis_index

    row_vars = {r.variable for r in rows}
    params = [i for rv in model.observed_RVs for i in rv.owner.inputs]
    for node in io_toposort(list(graph_inputs(params)), params):
        if first_axis_index(node) != "index":
            continue
        x = node.inputs[0]
        if len(node.inputs) > 1 and through_casts(node.inputs[1]) in row_vars:
            continue  # a gather by row data (a[g]): _check_gather_indices
        data = [v for v in graph_inputs([x]) if isinstance(v, (Constant, SharedVariable))
                and _full_shape(v)[:1] == (n_rows,)]
        if data and _gathered_length(x, point) == n_rows:
            raise _row_indexing_error(", ".join(_data_label(v) for v in data), node)


def _gathered_length(x, point):
    """The length of the gathered vector ``x`` (static, else at the initial point), or
    None when it cannot be read."""
    if x.type.shape and x.type.shape[0] is not None:
        return int(x.type.shape[0])
    import pytensor

    inputs = [v for v in graph_inputs([x]) if getattr(v, "name", None) in point
              and not isinstance(v, (Constant, SharedVariable))]
    try:
        fn = pytensor.function(inputs, x.shape[0], on_unused_input="ignore")
        return int(fn(*[point[v.name] for v in inputs]))
    except Exception:  # noqa: BLE001 - then PyTensor's own check is the guard
        return None


def _check_gather_indices(model, ll_terms, rows, point):
    """Refuse row data used as indices (``a[g]``) with values outside the gathered
    vector: PyTensor's ``IndexError`` from deep in a compiled graph named neither."""
    by_var = {r.variable: r for r in rows}
    terms = [t for _, t in ll_terms]
    for node in io_toposort(list(graph_inputs(terms)), terms):
        if not isinstance(node.op, GATHERS) or len(node.inputs) < 2:
            continue
        x, idx = node.inputs[0], node.inputs[1]
        row = by_var.get(through_casts(idx))
        if row is None or not np.issubdtype(np.dtype(idx.dtype), np.integer):
            continue
        length = _gathered_length(x, point)
        if length is None:
            continue
        lo, hi = _index_range(row.array())
        if lo is None or (lo >= 0 and hi < length):
            continue
        names = sorted({model.values_to_rvs[v].name for v in ancestors([x])
                        if v in model.values_to_rvs})
        what = f"'{names[0]}'" if len(names) == 1 else "a vector"
        arr = row.array()
        first = next(s + int(np.flatnonzero((part < 0) | (part >= length))[0])
                     for s in range(0, int(arr.shape[0]), 1 << 20)
                     for part in [np.asarray(arr[s : s + (1 << 20)])]
                     if np.any((part < 0) | (part >= length)))
        raise InvalidDataError(
            f"The index data {row.name} holds values {lo}..{hi} (row {first}: "
            f"{int(arr[first])}), but it indexes {what} of length {length}: every index "
            f"must be in 0..{length - 1}. Recode the groups as 0..G-1 (e.g. "
            "pandas.factorize) or give the effects one entry per group.")


#: below this many rows a free vector as long as the data may be a coefficient vector
_FEW_ROWS = 10_000


def _check_no_row_latents(model, ll_terms, point, n, row_dim):
    used = set(ancestors([t for _, t in ll_terms]))
    for v in model.value_vars:
        val = point[v.name]
        if v in used and np.ndim(val) >= 1 and val.shape[0] == n and n > 1:
            dims = model.named_vars_to_dims.get(model.values_to_rvs[v].name)
            if dims and row_dim is not None and dims[0] != row_dim:
                continue
            name = model.values_to_rvs[v].name
            few = (f" If '{name}' is not per row but has {n} values as the data have {n} "
                   "rows, the data are too few to subsample: sample the model with "
                   "pm.sample() (NUTS).") if n < _FEW_ROWS else ""
            raise ModelNotSupportedError(
                f"Free variable '{name}' has one value per data row "
                f"(shape {val.shape}): a per-row latent variable makes every step O(N) "
                "(its prior has N terms). Subsampling steps need a parameter vector whose "
                "size does not grow with the data; integrate the latent variable out." + few
            )


def _not_factorising(observed_names) -> ModelNotSupportedError:
    return ModelNotSupportedError(
        f"The likelihood of {', '.join(observed_names)} does not factorise over rows: a "
        "row's log-likelihood changes with the other rows it is evaluated with (e.g. the "
        "model uses a sum, mean, logsumexp, normaliser, cumulative sum or sort over the "
        "data rows). Subsampling needs one independent term per row: write the likelihood "
        "row by row, or use a full-data sampler (pm.NUTS)."
    )


#: scales of the random moves away from the initial point at which the factorisation is
#: checked: a small one, and larger ones under which a normaliser over the rows (a
#: logsumexp, a softmax over rows, a clipped ratio) leaves its saturated range
FACTORISATION_SCALES = (0.3, 3.0, 10.0)


def check_factorises(loglik, n_rows, q0, observed_names):
    """Refuse a model whose rows' terms depend on the other rows of the batch.

    At the initial point and at random points about it (:data:`FACTORISATION_SCALES`),
    the terms of a few random rows are computed alone, together (in both orders) and
    inside a larger batch of other random rows; a row-factorising likelihood gives each
    row the same term in all of them. This is numerical, so it does not depend on the
    form of the graph; :meth:`RowScan.check_probes` repeats it against the terms of the
    set-up pass over all rows, which catches a normaliser that the small batches leave
    saturated.

    Parameters
    ----------
    loglik : callable
        ``loglik(q, rows) -> (len(rows),)`` per-row log-likelihood terms.
    n_rows : int
    q0 : ndarray
        The initial point.
    observed_names : list of str
        For the message.
    """
    rng = np.random.default_rng(12345)  # fixed: a build-time check, not sampling
    k = min(n_rows, 6)
    rows = rng.choice(n_rows, size=k, replace=False).astype(np.int64)
    others = np.setdiff1d(rng.choice(n_rows, size=min(n_rows, 512), replace=False), rows)
    big = np.concatenate([others[: others.size // 2], rows, others[others.size // 2 :]])
    at = slice(others.size // 2, others.size // 2 + k)
    # away from the initial point too: at e.g. a zero coefficient a cumulative sum or a
    # centring over the batch can vanish and hide the dependence between rows
    points = [q0] + [q0 + rng.normal(0.0, s, q0.size) for s in FACTORISATION_SCALES]
    for q in points:
        try:
            a = loglik(q, rows)
            b = loglik(q, rows[::-1])[::-1]
            c = np.array([loglik(q, rows[i : i + 1])[0] for i in range(min(k, 3))])
            d = loglik(q, big)[at]
        except Exception as err:
            raise ModelNotSupportedError(
                "Evaluating the likelihood on a subset of rows failed, so the model does "
                "not look row-factorising (some data or parameter seems to be tied to all "
                f"N rows). Underlying error: {type(err).__name__}: {err}"
            ) from err
        if a.shape != (k,):
            raise ModelNotSupportedError(
                f"The batch log-likelihood returned shape {a.shape} for {k} rows; the "
                "likelihood does not factorise over the rows of the data."
            )
        if not (_same_terms(a, b) and _same_terms(a[: c.size], c) and _same_terms(a, d)):
            raise _not_factorising(observed_names)


def _same_terms(a, b) -> bool:
    """Whether two evaluations of the same rows' terms agree: equal to rounding where
    both are finite, and non-finite at the same rows. A row that is not finite at a far
    point (``-inf`` in one batch, NaN in another: a NegativeBinomial's ``p = alpha /
    (mu + alpha)`` at ``alpha`` far out, as Bambi writes it) tells nothing about the
    rows' dependence on each other."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    fa, fb = np.isfinite(a), np.isfinite(b)
    if a.shape != b.shape or not np.array_equal(fa, fb):
        return False
    return bool(np.allclose(a[fa], b[fb], rtol=1e-8, atol=1e-10))


class RowScan:
    """What the set-up's check of every row finds, chunk by chunk. NUTS refuses a model
    whose initial log density is not finite; a subsampling step reads a few rows per
    step and would otherwise meet such a row late, or never, and sample a wrong
    posterior.

    ``scan(start, stop, data, terms)`` is called on each chunk (any thread) and returns a
    small record; ``add(record)`` consumes the records in row order. ``raise_if_bad()``
    then refuses NaN or infinite float data (naming the variable, the first row and its
    value) and non-finite per-row terms (naming the observed variables, the first rows
    and their values). ``probes`` are rows whose terms are kept, to compare with the
    same rows' terms computed alone (:meth:`check_probes`).

    Parameters
    ----------
    rows : list of RowData
        The engine's row data (same order as ``data`` in :meth:`scan`).
    probes : ndarray of int
        Row indices whose terms are recorded.
    """

    #: how many offending rows a message lists
    SHOW = 5

    def __init__(self, rows, probes):
        self.rows = rows
        self.probes = np.asarray(probes, dtype=np.int64)
        self.bad_data = {}     # array index -> (row, value)
        self.bad_terms = []    # (row, term)
        self.probe_terms = {}  # row -> term

    def scan(self, start, stop, data, terms):
        bad_data = {}
        for j, arr in enumerate(data):
            if arr.dtype.kind in "fc":
                finite = np.isfinite(arr)
                if not finite.all():
                    flat = finite.reshape(len(arr), -1).all(axis=1)
                    i = int(np.argmin(flat))
                    bad_data[j] = (start + i, arr[i])
        bad = np.flatnonzero(~np.isfinite(terms))[: self.SHOW]
        inside = self.probes[(self.probes >= start) & (self.probes < stop)]
        return (bad_data, [(start + int(i), float(terms[i])) for i in bad],
                {int(r): float(terms[r - start]) for r in inside})

    def add(self, record):
        bad_data, bad_terms, probes = record
        for j, found in bad_data.items():
            self.bad_data.setdefault(j, found)
        if len(self.bad_terms) < self.SHOW:
            self.bad_terms += bad_terms[: self.SHOW - len(self.bad_terms)]
        self.probe_terms.update(probes)

    def raise_if_bad(self, observed_names, where="the initial point"):
        """Raise :class:`InvalidDataError` for what the scan found, covariates first."""
        if self.bad_data:
            j, (row, value) = next(iter(sorted(self.bad_data.items())))
            r = self.rows[j]
            raise InvalidDataError(
                f"{r.name} (data of the likelihood of {', '.join(observed_names)}) has a "
                f"NaN or infinite value in row {row} (value {_short(value)}). "
                "Drop or impute the rows with missing or infinite values before building "
                "the model (for a file, pms.out_of_core.rows() checks this when it opens "
                "it)."
            )
        if self.bad_terms:
            rows = [i for i, _ in self.bad_terms]
            shown = []
            for r in self.rows:
                if r.name.startswith("observed"):
                    vals = np.take(r.array(), rows, axis=0)
                    shown.append(f"{r.name} = {', '.join(_short(v) for v in vals)}")
            terms = ", ".join(_short(t) for _, t in self.bad_terms)
            raise InvalidDataError(
                f"The log-likelihood of {', '.join(observed_names)} is not finite at "
                f"{where} in row(s) {', '.join(map(str, rows))} (terms {terms}; "
                f"{'; '.join(shown)}). These observations lie outside the support of "
                "the likelihood (e.g. a Bernoulli needs 0 or 1, a Poisson counts >= 0), or "
                "the initial point is impossible for them. PyMC's NUTS refuses such a "
                "model too (its initial log density is not finite). Fix or drop these "
                "rows, or give the variables an initval where every row's term is finite."
            )

    def check_probes(self, loglik, q, observed_names):
        """Refuse a non-factorising likelihood: the probe rows' terms computed alone
        must equal those computed in the pass over all rows (:func:`check_factorises`)."""
        if not self.probe_terms:
            return
        rows = np.array(sorted(self.probe_terms), dtype=np.int64)
        in_pass = np.array([self.probe_terms[int(r)] for r in rows])
        alone = np.array([loglik(q, rows[i : i + 1])[0] for i in range(rows.size)])
        if not _same_terms(in_pass, alone):
            raise _not_factorising(observed_names)


def _short(v) -> str:
    v = np.asarray(v)
    return repr(v.item()) if v.size == 1 else np.array2string(v, threshold=6)


def data_fingerprint(rows, n_rows, n_read) -> tuple:
    """Shape, dtype and a digest of ``n_read`` evenly spread rows of each row-data array.

    Parameters
    ----------
    rows : list of RowData
    n_rows : int
        ``N``, the row count the engine was built for.
    n_read : int
        How many rows to digest (all rows when ``N`` is smaller): O(1) in ``N``.

    Returns
    -------
    tuple of (name, shape, dtype, hex digest)
    """
    picked = np.unique(np.linspace(0, n_rows - 1, min(n_rows, n_read)).astype(np.int64))
    out = []
    for r in rows:
        arr = r.array()
        part = np.ascontiguousarray(np.take(arr, picked, axis=0)) if arr.shape[:1] == (n_rows,) \
            else np.ascontiguousarray(arr)
        digest = hashlib.blake2b(part.tobytes(), digest_size=16).hexdigest()
        out.append((r.name, tuple(arr.shape), str(arr.dtype), digest))
    return tuple(out)
