"""Pointwise log-likelihood of posterior draws on any set of rows, chunk by chunk.

:class:`PosteriorLoglik` puts the posterior draws of a sampling result into the
likelihood engine's raveled, unconstrained space (the forward transforms of the model's
free variables, compiled once) and evaluates the per-row log-likelihood of an observed
variable through :class:`~pymc_subsample.engine.LikelihoodEngine`: the rows asked for are
gathered once per chunk (from RAM, a ``numpy.memmap`` or a Zarr array opened with
:mod:`pymc_subsample.out_of_core`) and every draw is evaluated on them. No ``N x draws``
array is ever built unless the caller asks for all rows.

:func:`compute_log_likelihood` is the public face: a ``log_likelihood`` group for a
chosen subset of rows.

The log-likelihood is always **per row and unscaled**: ``log p(y_i | theta)`` of the
model as written on all ``N`` rows, whatever ``total_size`` would have said. (PyMC's own
``compute_log_likelihood`` on a model built with ``pm.Minibatch``/``total_size`` returns
terms multiplied by ``N / batch``, which ``az.loo`` silently mistakes for pointwise values,
PyMC issue 8300; the engine refuses such models.)
"""

from __future__ import annotations

import weakref

import numpy as np
import pymc as pm
import pytensor
from pytensor.graph.replace import clone_replace

from ..diagnostics import get_group
from ..engine import LikelihoodEngine
from ..engine.analysis import model_logp, through_casts
from ..engine.evaluate import thread_copy
from ..kernels._validation import InvalidParameterError, check_bytes

__all__ = ["PosteriorLoglik", "compute_log_likelihood", "MAX_LOGLIK_BYTES",
           "DataMismatchError", "check_observed_data", "observed_array",
           "observed_names", "choose_observed", "check_rows", "is_datatree",
           "with_group"]

#: ``compute_log_likelihood(rows=None)`` refuses when the ``N x chains x draws`` float64
#: array of an observed variable would exceed this many bytes (override with
#: ``max_bytes=``)
MAX_LOGLIK_BYTES = 2**30

#: rows gathered at once when every draw is evaluated on a long list of rows
ROWS_PER_CHUNK = 4096

#: rows compared between the model's data and a result's ``observed_data`` when the
#: whole arrays are not both in memory (spread evenly, the first and last included)
SPREAD_ROWS = 64


class DataMismatchError(ValueError):
    """The model's observed data are not the data of the sampling result (its
    ``observed_data`` group): another number of rows, or other values."""


# ---------------------------------------------------------------------- boundary checks
def observed_names(model) -> list[str]:
    """Names of the model's observed variables, in model order."""
    return [rv.name for rv in model.observed_RVs]


def choose_observed(model, var_name, *, owner: str) -> str:
    """The observed variable ``var_name`` names (or the only one), with a clear error
    naming the candidates when it is unknown or needed and missing."""
    names = observed_names(model)
    if not names:
        raise ValueError(f"{owner}: the model has no observed variables, so there is no "
                         "log-likelihood to evaluate.")
    if var_name is None:
        if len(names) > 1:
            raise ValueError(
                f"{owner}: the model has several observed variables ({', '.join(names)}); "
                "pass var_name= one of them (each has its own log-likelihood).")
        return names[0]
    if var_name not in names:
        raise ValueError(f"{owner}: var_name={var_name!r} is not an observed variable of the "
                         f"model; the observed variables are {', '.join(names)}.")
    return var_name


def observed_array(model, rv):
    """The array behind ``observed=`` of the observed variable ``rv`` (a NumPy array, a
    ``numpy.memmap`` or a Zarr array; a ``pm.Data`` buffer without a copy)."""
    from pytensor.compile.sharedvalue import SharedVariable
    from pytensor.graph.basic import Constant

    value = through_casts(model.rvs_to_values[rv])
    if isinstance(value, Constant):
        return value.data
    if isinstance(value, SharedVariable):
        return value.get_value(borrow=True)
    return value.eval()  # pragma: no cover - observed values are constants or pm.Data


def _in_memory(arr) -> bool:
    return isinstance(arr, np.ndarray) and not isinstance(arr, np.memmap)


def check_observed_data(idata, model, var_names, *, owner: str) -> None:
    """Refuse a model whose observed data are not those of ``idata``.

    For each observed variable of ``var_names`` that ``idata``'s ``observed_data`` group
    holds: the number of rows must agree, and so must the values, compared in full when
    the model's array is in memory (``pm.sample`` then stored it in memory too) and at
    :data:`SPREAD_ROWS` spread rows otherwise (a memory-mapped file or a Zarr array is not
    read in full for the check). A result without an
    ``observed_data`` group, or without the variable in it, is not checked.

    Raises
    ------
    DataMismatchError
        Naming the variable, the two row counts or the first row that differs, and what
        to do.
    """
    try:
        obs = get_group(idata, "observed_data")
    except KeyError:
        return
    for name in var_names:
        if name not in obs.data_vars:
            continue
        stored = obs[name]
        arr = observed_array(model, model[name])
        n_model, n_stored = int(np.shape(arr)[0]), int(stored.shape[0])
        if n_model != n_stored:
            raise DataMismatchError(
                f"{owner}: observed '{name}' has {n_model:,} rows in the model but "
                f"{n_stored:,} in the sampling result's observed_data: the model's data are "
                "not the data that were sampled. Pass the model (and data) pm.sample ran on.")
        dim = stored.dims[0]
        if _in_memory(arr):  # then so is the result's (pm.sample stores it in memory)
            rows = np.arange(n_model)
            mine, theirs = np.asarray(arr), np.asarray(stored.values)
        else:
            rows = np.unique(np.linspace(0, n_model - 1, SPREAD_ROWS).astype(np.int64))
            mine = np.asarray(np.take(arr, rows, axis=0))
            theirs = np.asarray(stored.isel({dim: rows}).values)
        mine = np.asarray(mine, dtype=np.float64).reshape(len(rows), -1)
        theirs = np.asarray(theirs, dtype=np.float64).reshape(len(rows), -1)
        if mine.shape != theirs.shape:
            raise DataMismatchError(
                f"{owner}: observed '{name}' has rows of shape {mine.shape[1:]} in the model "
                f"but {theirs.shape[1:]} in the sampling result's observed_data.")
        same = (mine == theirs) | (np.isnan(mine) & np.isnan(theirs))
        bad = np.flatnonzero(~same.all(axis=1))
        if bad.size:
            i = int(rows[bad[0]])
            raise DataMismatchError(
                f"{owner}: observed '{name}' differs from the sampling result's "
                f"observed_data (row {i:,}: {mine[bad[0]].tolist()[:3]} in the model, "
                f"{theirs[bad[0]].tolist()[:3]} in the result): the model's data are not the "
                "data that were sampled. Pass the model (and data) pm.sample ran on.")


def check_rows(rows, n_rows: int, *, owner: str, name: str = "rows") -> np.ndarray:
    """``rows`` as distinct int64 row indices in ``[0, N)``, in the order given, or an
    :class:`InvalidParameterError` naming the offending values."""
    arr = np.asarray(rows)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1 or arr.size == 0:
        raise InvalidParameterError(
            f"{owner}: {name} must be a non-empty 1-D sequence of row indices, got shape "
            f"{arr.shape}.")
    if arr.dtype == bool:
        raise InvalidParameterError(
            f"{owner}: {name} must hold row indices, not a boolean mask (use "
            f"numpy.flatnonzero(mask)).")
    if not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise InvalidParameterError(
                f"{owner}: {name} must hold integer row indices, got dtype {arr.dtype}.")
    arr = arr.astype(np.int64)
    bad = arr[(arr < 0) | (arr >= n_rows)]
    if bad.size:
        raise InvalidParameterError(
            f"{owner}: {name} holds indices outside the data's {n_rows} rows "
            f"(0 to {n_rows - 1}): {', '.join(map(str, bad[:5]))}"
            + (" ..." if bad.size > 5 else "") + ".")
    if np.unique(arr).size != arr.size:
        raise InvalidParameterError(f"{owner}: {name} holds repeated row indices; pass each "
                                    "row once.")
    return arr


# ---------------------------------------------------------------------- result objects
def is_datatree(idata) -> bool:
    """Whether ``idata`` is an xarray ``DataTree`` (PyMC 6) rather than an
    ``arviz.InferenceData`` (PyMC 5)."""
    return not hasattr(idata, "add_groups") and hasattr(idata, "children")


def with_group(idata, name: str, dataset, *, extend: bool):
    """``idata`` with group ``name`` set to ``dataset`` (in place when ``extend``), or a new
    object of the same kind holding only that group."""
    if is_datatree(idata):
        import xarray as xr

        node = xr.DataTree(dataset=dataset)
        if extend:
            idata[name] = node
            return idata
        return xr.DataTree.from_dict({f"/{name}": dataset})
    import arviz as az

    if not extend:
        return az.InferenceData(**{name: dataset})
    if name in idata.groups():
        del idata[name]
    idata.add_groups({name: dataset})
    return idata


# ---------------------------------------------------------------------- the evaluator
# model -> {graph key: compiled transform function}
_forward_fns: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _forward_function(model):
    """A compiled ``f(*constrained free values) -> [unconstrained value of each value
    variable]`` (the model's forward transforms), kept per model."""
    key = (tuple(id(v) for v in model.free_RVs), tuple(id(v) for v in model.value_vars),
           tuple(id(t) for t in model.rvs_to_transforms.values()))
    per_model = _forward_fns.setdefault(model, {})
    fn = per_model.get(key)
    if fn is None:
        inputs = {rv: rv.type(name=rv.name) for rv in model.free_RVs}
        outs = []
        for rv in model.free_RVs:
            tr = model.rvs_to_transforms.get(rv)
            outs.append(rv if tr is None else tr.forward(rv, *rv.owner.inputs))
        outs = clone_replace(outs, replace=inputs)
        fn = per_model[key] = pytensor.function(list(inputs.values()), outs,
                                                on_unused_input="ignore")
    return fn


class PosteriorLoglik:
    """Per-row log-likelihood of an observed variable at the posterior draws.

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.DataTree
        A sampling result with a ``posterior`` group holding every free variable.
    model : pymc.Model, optional
        The model that was sampled (default: the one on the context stack).
    var_names : list of str
        Observed variables to evaluate (checked by the caller).
    sum_rows : bool, default True
        Sum each variable's terms over their non-row axes (one value per row, the unit of
        leave-one-out); otherwise keep PyMC's elementwise shape.

    Attributes
    ----------
    engine : LikelihoodEngine
        The engine over all the model's value variables (unconstrained space).
    n_rows : int
        ``N``.
    n_chains, n_draws : int
        Of the posterior.
    q_draws : ndarray, shape (chains * draws, ndim)
        The draws in the engine's raveled unconstrained space, chain-major.
    """

    def __init__(self, idata, model=None, var_names=(), *, sum_rows=True):
        model = pm.modelcontext(model)
        self.model = model
        post = get_group(idata, "posterior")
        missing = [rv.name for rv in model.free_RVs if rv.name not in post.data_vars]
        if missing:
            raise ValueError(
                "The posterior has no draws of " + ", ".join(f"'{m}'" for m in missing)
                + ": pass the result of pm.sample on this model (with its model= or "
                "inside its 'with' block).")
        self.n_chains, self.n_draws = int(post.sizes["chain"]), int(post.sizes["draw"])
        self.posterior = post
        # constrained draws -> every value variable's unconstrained value, draw by draw
        forward = _forward_function(model)
        draws = []
        for rv in model.free_RVs:
            arr = np.asarray(post[rv.name].values)
            draws.append(arr.reshape((self.n_chains * self.n_draws,) + arr.shape[2:]))
        n_samples = self.n_chains * self.n_draws
        values = [forward(*[d[s] for d in draws]) for s in range(n_samples)]
        names = [v.name for v in model.value_vars]
        by_value = {v: [np.asarray(vals[i]) for vals in values] for i, v in enumerate(names)}
        mean_point = {v: np.mean(np.stack(by_value[v]), axis=0) for v in names}
        # the point of a mean of the constrained draws (the plpd point), unconstrained
        self._constrained_mean = forward(*[d.mean(axis=0).astype(d.dtype) for d in draws])
        self.engine = LikelihoodEngine(model, vars=model.value_vars, check=False,
                                       initial_point=mean_point)
        self.n_rows = self.engine.n_rows
        slices = self.engine.var_slices()
        self.q_draws = np.empty((n_samples, self.engine.ndim))
        for v, pos in slices.items():
            stacked = np.stack(by_value[v.name]).reshape(n_samples, -1)
            if stacked.shape[1] != pos.size:
                raise ValueError(
                    f"The posterior draws of '{model.values_to_rvs[v].name}' have "
                    f"{stacked.shape[1]} elements per draw but the model's variable has "
                    f"{pos.size}: the sampling result does not belong to this model.")
            self.q_draws[:, pos] = stacked
        self.var_names = list(var_names)
        self.sum_rows = sum_rows
        self._fn = self._compile(self.var_names, sum_rows) if self.var_names else None

    def _compile(self, var_names, sum_rows):
        terms = model_logp(self.model, self.model.observed_RVs, sum=False)
        by_name = dict(zip(observed_names(self.model), terms))
        outs = []
        for name in var_names:
            term = by_name[name]
            if sum_rows and term.ndim > 1:
                term = term.sum(axis=tuple(range(1, term.ndim)))
            outs.append(term)
        return self.engine.compile_batch(outs)

    # ------------------------------------------------------------------ evaluations
    @property
    def n_samples(self) -> int:
        return self.n_chains * self.n_draws

    def plpd_point(self) -> np.ndarray:
        """``q`` at the posterior mean of the (constrained) parameters."""
        q = np.empty(self.engine.ndim)
        names = [v.name for v in self.model.value_vars]
        for v, pos in self.engine.var_slices().items():
            q[pos] = np.ravel(self._constrained_mean[names.index(v.name)])
        return q

    def at_point_all_rows(self, q, *, chunk: int = 65536) -> list[np.ndarray]:
        """Each variable's per-row terms at one point ``q`` over all ``N`` rows: one
        chunked, parallel pass (:meth:`LikelihoodEngine.map_rows`); only the ``N``-vector
        results are held."""
        q = np.ascontiguousarray(q, dtype=np.float64)
        out = None
        f = self._fn
        engine = self.engine

        def one_chunk(start, stop):
            with np.errstate(all="ignore"):
                return [np.asarray(r) for r in thread_copy(f)(q, *engine.gather_slice(start, stop))]

        def consume(start, stop, res):
            nonlocal out
            if out is None:
                out = [np.empty((self.n_rows,) + r.shape[1:]) for r in res]
            for o, r in zip(out, res):
                o[start:stop] = r

        engine.map_rows(one_chunk, consume, chunk)
        return out

    def lpd_all_rows(self, *, max_values: int = 2**22) -> np.ndarray:
        """``log mean_s p(y_i | theta_s)`` of every row (the first variable, summed per
        row): one chunked, parallel pass over all rows in which each chunk is evaluated
        at every draw, ``O(N x draws)`` time, at most ``max_values`` floats per chunk."""
        from scipy.special import logsumexp

        chunk = max(1, int(max_values) // self.n_samples)
        out = np.empty(self.n_rows)
        f, engine, draws = self._fn, self.engine, self.q_draws
        log_s = np.log(self.n_samples)

        def one_chunk(start, stop):
            data = engine.gather_slice(start, stop)
            fn = thread_copy(f)
            with np.errstate(all="ignore"):
                vals = np.stack([np.asarray(fn(q, *data)[0]) for q in draws])
            return logsumexp(vals, axis=0) - log_s

        def consume(start, stop, res):
            out[start:stop] = res

        engine.map_rows(one_chunk, consume, chunk)
        return out

    def at_rows(self, rows, *, chunk: int = ROWS_PER_CHUNK) -> list[np.ndarray]:
        """Each variable's terms at every draw on ``rows``: arrays of shape
        ``(len(rows), chains * draws, ...)``, computed ``chunk`` rows at a time (the rows of
        a chunk are gathered once, in increasing order, then every draw is evaluated)."""
        rows = np.asarray(rows, dtype=np.int64)
        order = np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        out = None
        for s in range(0, rows.size, chunk):
            idx = sorted_rows[s : s + chunk]
            data = self.engine.gather(idx)
            per_draw = [self._fn(q, *data) for q in self.q_draws]
            if out is None:
                out = [np.empty((rows.size, self.n_samples) + np.shape(r)[1:])
                       for r in per_draw[0]]
            for k, o in enumerate(out):
                block = np.stack([np.asarray(p[k]) for p in per_draw], axis=1)
                o[order[s : s + chunk]] = block
        return out


def _row_dim(engine, var_name, model) -> str:
    """The row dim's name: the model's (``dims=``) or PyMC's default ``<var>_dim_0``."""
    dims = model.named_vars_to_dims.get(var_name)
    if dims and dims[0] is not None:
        return dims[0]
    return engine.row_dim or f"{var_name}_dim_0"


def _other_dims(model, var_name, shape) -> list[str]:
    dims = list(model.named_vars_to_dims.get(var_name) or [])
    return [dims[i] if i < len(dims) and dims[i] is not None else f"{var_name}_dim_{i}"
            for i in range(1, 1 + len(shape))]


def loglik_dataset(ev: PosteriorLoglik, values, rows):
    """An ``xarray.Dataset`` of ``(chain, draw, row, ...)`` log-likelihood values with the row
    indices as the row coordinate."""
    import xarray as xr

    data_vars = {}
    for name, vals in zip(ev.var_names, values):
        row_dim = _row_dim(ev.engine, name, ev.model)
        extra = _other_dims(ev.model, name, vals.shape[2:])
        arr = np.moveaxis(vals, 1, 0).reshape((ev.n_chains, ev.n_draws) + vals.shape[:1]
                                              + vals.shape[2:])
        data_vars[name] = xr.DataArray(arr, dims=("chain", "draw", row_dim, *extra),
                                       coords={row_dim: np.asarray(rows)})
    post = ev.posterior
    coords = {"chain": post["chain"].values, "draw": post["draw"].values}
    return xr.Dataset(data_vars).assign_coords(coords)


def compute_log_likelihood(idata, model=None, *, rows=None, var_names=None,
                           max_bytes=None, extend_inferencedata=True, check_data=True):
    """Pointwise log-likelihood of the posterior draws on a subset of rows, in chunks.

    The tall-data counterpart of ``pm.compute_log_likelihood``: the rows' terms are
    computed through the likelihood engine (data in RAM, a ``numpy.memmap`` or Zarr),
    ``ROWS_PER_CHUNK`` rows at a time, so memory holds only the result.

    The values are **per row and unscaled**, ``log p(y_i | theta)`` for the model as
    written on all ``N`` rows: no ``total_size`` scaling is ever applied (a model with
    ``pm.Minibatch`` / ``total_size`` is refused by the engine).

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.DataTree
        The result of ``pm.sample`` on ``model`` (its ``posterior`` group is read).
    model : pymc.Model, optional
        Default: the model on the context stack.
    rows : sequence of int, optional
        Row indices (distinct, in ``[0, N)``). ``None`` means all rows, which is refused
        when an ``N x chains x draws`` float64 array exceeds ``max_bytes``.
    var_names : list of str, optional
        Observed variables (default: all).
    max_bytes : float, optional
        The limit for ``rows=None`` (default :data:`MAX_LOGLIK_BYTES`, 1 GiB).
    extend_inferencedata : bool, default True
        Add the group to ``idata`` (replacing an existing ``log_likelihood`` group) and
        return it; otherwise return a new object with that group only.
    check_data : bool, default True
        Refuse a model whose observed data are not ``idata``'s ``observed_data``
        (:func:`check_observed_data`). Set False only to evaluate the posterior on other
        data on purpose (held-out rows set with ``pm.set_data``).

    Returns
    -------
    arviz.InferenceData or xarray.DataTree
        Same kind as ``idata`` (PyMC 5: ``InferenceData``; PyMC 6: ``DataTree``), with a
        ``log_likelihood`` group: one variable per observed variable, dims
        ``(chain, draw, <row dim>, ...)``, the row dim's coordinate being the row indices.

    Raises
    ------
    ValueError
        ``rows=None`` over the memory limit (the message says to pass ``rows=`` or use
        :func:`pymc_subsample.loo`); unknown ``var_names``.
    DataMismatchError
        The model's observed data are not the result's (another number of rows, or other
        values), unless ``check_data=False``.
    InvalidParameterError
        Row indices out of range, repeated, or not integers.
    """
    owner = "compute_log_likelihood"
    model = pm.modelcontext(model)
    names = observed_names(model)
    if var_names is None:
        var_names = names
    else:
        if isinstance(var_names, str):
            var_names = [var_names]
        for v in var_names:
            choose_observed(model, v, owner=owner)
    limit = check_bytes("max_bytes", max_bytes, owner=owner)
    limit = MAX_LOGLIK_BYTES if limit is None else limit
    if check_data:
        check_observed_data(idata, model, var_names, owner=owner)
    ev = PosteriorLoglik(idata, model, var_names, sum_rows=False)
    if rows is None:
        # at least one float64 per row, draw and variable
        need = 8.0 * ev.n_rows * ev.n_samples * len(var_names)
        if need > limit:
            raise ValueError(
                f"{owner}: the log-likelihood of all {ev.n_rows:,} rows at "
                f"{ev.n_chains} x {ev.n_draws} draws needs {need / 2**30:.1f} GiB, over the "
                f"limit of {limit / 2**30:.2f} GiB (max_bytes=). Pass rows= (e.g. "
                "numpy.random.default_rng(0).choice(N, 1000, replace=False)) for a subset, "
                "or use pms.loo(idata) for leave-one-out cross-validation, which needs only "
                "a subsample's log-likelihood.")
        rows = np.arange(ev.n_rows, dtype=np.int64)
    else:
        rows = check_rows(rows, ev.n_rows, owner=owner)
    values = ev.at_rows(rows)
    ds = loglik_dataset(ev, values, rows)
    return with_group(idata, "log_likelihood", ds, extend=extend_inferencedata)
