"""Posterior predictive draws for a subset of rows of tall data.

The observed variable's distribution is rebuilt over a batch of rows: its parameters
(e.g. ``p = sigmoid(X @ beta)``, ``mu = a[g] + X @ beta``) are model expressions that the
likelihood engine rewrites with every row-indexed data tensor replaced by a batch input
(:meth:`~pymc_subsample.engine.LikelihoodEngine.to_batch`), and the observed variable's own
random variable op draws from them. One PyTensor function ``(q, rng, *rows' data) ->
(rng', draw)`` is compiled; the chosen rows are gathered once per chunk (RAM, memmap or
Zarr) and every posterior draw gives one predictive draw per row. Memory holds the result
(``rows x chains x draws``) only.

With ``store=`` (a path or a Zarr store) the draws of every chosen row (by default all
``N`` rows) are written to a Zarr store on disk chunk by chunk, in groups
``posterior_predictive`` and ``observed_data``, and the result reads them lazily (Dask
arrays): memory holds one chunk of rows for every posterior draw (``ROWS_PER_CHUNK x
chains x draws`` values), whatever ``N``. The store holds ``N x chains x draws`` values:
thin the posterior first (``idata.sel(draw=slice(None, None, 10))``) when that is too much.
"""

from __future__ import annotations

import os

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pytensor.tensor.random.op import RandomVariable
from pytensor.tensor.random.type import random_generator_type

from ..engine import ModelNotSupportedError
from .loglik import (ROWS_PER_CHUNK, PosteriorLoglik, _other_dims, _row_dim, check_rows,
                     check_observed_data, is_datatree, observed_array, observed_names)

__all__ = ["sample_posterior_predictive", "DEFAULT_ROWS"]

#: rows drawn at random when ``rows=None`` and the data have more
DEFAULT_ROWS = 1000


def _draw_function(ev: PosteriorLoglik, rv):
    """Compile ``f(q, rng, *batch) -> (next rng, draw of rv on the batch)``."""
    node = rv.owner
    op = node.op
    if not isinstance(op, RandomVariable):
        raise ModelNotSupportedError(
            f"sample_posterior_predictive: observed variable '{rv.name}' is a "
            f"{type(op).__name__} (a symbolic distribution such as pm.CustomDist, "
            "pm.Censored or pm.Mixture), which this function cannot draw from row by row. "
            "Use pm.sample_posterior_predictive on a model built on the subset of rows "
            "(e.g. with pm.set_data).")
    engine = ev.engine
    model = ev.model
    size = op.size_param(node)
    params = list(op.dist_params(node))
    has_size = isinstance(getattr(size, "type", None), pt.TensorType)
    graphs = params + ([size] if has_size else [])
    graphs = model.replace_rvs_by_values(graphs)
    batch = engine.to_batch(graphs)
    in_q, q = engine.in_q(batch)
    new_params = in_q[: len(params)]
    n_batch = engine.batch_inputs[0].shape[0]
    if has_size:
        new_size = in_q[-1]
        new_size = pt.concatenate([pt.cast(n_batch, new_size.dtype)[None], new_size[1:]])
    else:
        new_size = size
    rng = random_generator_type("rng")
    next_rng, draw = op.make_node(rng, new_size, *new_params).outputs
    return engine.function([q, rng, *engine.batch_inputs], [next_rng, draw])


def _observed_values(model, rv, rows) -> np.ndarray:
    """The observed values of ``rows`` (read from the array behind ``observed=``)."""
    return np.asarray(np.take(observed_array(model, rv), rows, axis=0), dtype=rv.dtype)


def _draw_chunks(ev, f, rows, order, rng):
    """``(positions, draws)`` per chunk of ``ROWS_PER_CHUNK`` rows, in increasing row
    order: ``draws[i, k]`` is the predictive draw of row ``rows[positions[k]]`` at the
    i-th posterior sample. One random stream, drawn chunk by chunk and draw by draw, so
    the in-memory and the streamed results are the same draws."""
    gen = np.random.default_rng(rng.integers(2**63))
    for s in range(0, rows.size, ROWS_PER_CHUNK):
        pos = order[s : s + ROWS_PER_CHUNK]
        data = ev.engine.gather(rows[pos])
        out = None
        for i, q in enumerate(ev.q_draws):
            gen, draw = f(q, gen, *data)
            draw = np.asarray(draw)
            if out is None:
                out = np.empty((ev.n_samples,) + draw.shape, dtype=draw.dtype)
            out[i] = draw
        yield pos, out


class _ZarrWriter:
    """Writes the chunks of :func:`_draw_chunks` into regions of a Zarr store (xarray's
    ``to_zarr(region=...)``), after a template of the whole arrays (Dask zeros, not
    computed) has laid out the store."""

    def __init__(self, store, row_dim_of, rows, coords):
        self.store, self.row_dim_of, self.rows, self.coords = store, row_dim_of, rows, coords
        self.started = set()

    def _template(self, group, name, dims, shape, dtype, chunks, coords):
        import dask.array as da
        import xarray as xr

        arr = da.zeros(shape, dtype=dtype, chunks=chunks)
        ds = xr.Dataset({name: xr.DataArray(arr, dims=dims)}).assign_coords(coords)
        mode = "a" if group in self.started else "w"
        ds.to_zarr(self.store, group=group, mode=mode, compute=False, consolidated=False)
        self.started.add(group)

    def write(self, group, name, dims, values, start, first, chunks, coords):
        import xarray as xr

        row_dim = self.row_dim_of[name]
        try:
            if first:
                shape = list(values.shape)
                shape[dims.index(row_dim)] = self.rows.size
                self._template(group, name, dims, tuple(shape), values.dtype, chunks, coords)
            region = {d: slice(None) for d in dims}
            region[row_dim] = slice(start, start + values.shape[dims.index(row_dim)])
            xr.Dataset({name: xr.DataArray(values, dims=dims)}).to_zarr(
                self.store, group=group, region=region, consolidated=False)
        except OSError as err:
            raise self._failed(err) from err

    def _failed(self, err: OSError) -> OSError:
        """The error of a failed write (a full disk, a lost mount), naming the store; a
        store given as a path is removed, not left holding part of the result."""
        import shutil

        if isinstance(self.store, (str, os.PathLike)):
            path = os.fspath(self.store)
            shutil.rmtree(path, ignore_errors=True)
            what = (f"writing the store {path!r} failed ({err}); the partial store was "
                    "removed. Free space there, or pass another store=")
        else:
            what = (f"writing the store {self.store!r} failed ({err}); it holds part of "
                    "the result: delete it before reading it")
        return OSError(err.errno, f"sample_posterior_predictive: {what}.")


def _open_lazy(store, group):
    import xarray as xr

    return xr.open_zarr(store, group=group, consolidated=False)


def sample_posterior_predictive(idata, model=None, *, rows=None, var_names=None,
                                random_seed=None, n_rows=DEFAULT_ROWS, store=None,
                                check_data=True):
    """Posterior predictive draws for a subset of rows, with their observed values.

    For each posterior draw, one draw of each observed variable on the chosen rows from
    the model's distribution at that draw's parameters. The rows' data are read through
    the likelihood engine (RAM, ``numpy.memmap`` or Zarr), so the cost and memory are
    ``O(rows x draws)`` whatever ``N``.

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.DataTree
        The result of ``pm.sample`` on ``model``.
    model : pymc.Model, optional
        Default: the model on the context stack.
    rows : sequence of int, optional
        Row indices (distinct, in ``[0, N)``). Default: ``n_rows`` rows drawn at random
        (all rows when ``N <= n_rows``), with ``random_seed``; with ``store``, all rows.
    var_names : list of str, optional
        Observed variables (default: all; they share the rows).
    random_seed : int or numpy.random.Generator, optional
        Seeds the choice of rows and the predictive draws.
    n_rows : int, default 1000
        How many rows ``rows=None`` draws (without ``store``).
    store : str, os.PathLike or Zarr store, optional
        Stream the draws to this Zarr store (created, or overwritten) instead of memory:
        groups ``posterior_predictive`` and ``observed_data``, chunked by
        ``ROWS_PER_CHUNK`` rows, written chunk by chunk. The result's datasets are opened
        lazily from it. Needs ``zarr`` and ``dask`` (``pip install
        "pymc-subsample[dask]"``). The rows are written in increasing order.
    check_data : bool, default True
        Refuse a model whose observed data are not ``idata``'s ``observed_data``
        (:func:`~pymc_subsample.workflow.loglik.check_observed_data`). Set False only to
        draw on other data on purpose (new rows set with ``pm.set_data``).

    Returns
    -------
    arviz.InferenceData or xarray.DataTree
        Same kind as ``idata``, with groups ``posterior_predictive`` (dims ``(chain, draw,
        <row dim>, ...)``) and ``observed_data`` (``(<row dim>, ...)``), the row dim's
        coordinate being the row indices, so ``az.plot_ppc`` (ArviZ 0.x) or
        ``az.plot_ppc_dist`` (ArviZ 1.x) compares them directly. With ``store``, both
        groups are read lazily from the store.

    Raises
    ------
    ModelNotSupportedError
        An observed variable that is not a plain PyMC distribution (``pm.CustomDist``,
        ``pm.Censored``, ``pm.Mixture``).
    InvalidParameterError
        Row indices out of range, repeated or not integers.
    DataMismatchError
        The model's observed data are not the result's (another number of rows, or other
        values), unless ``check_data=False``.
    """
    import xarray as xr

    owner = "sample_posterior_predictive"
    model = pm.modelcontext(model)
    if var_names is None:
        var_names = observed_names(model)
    elif isinstance(var_names, str):
        var_names = [var_names]
    for v in var_names:
        if v not in observed_names(model):
            raise ValueError(f"{owner}: {v!r} is not an observed variable of the model; the "
                             f"observed variables are {', '.join(observed_names(model))}.")
    rng = random_seed if isinstance(random_seed, np.random.Generator) else \
        np.random.default_rng(random_seed)
    if check_data:
        check_observed_data(idata, model, var_names, owner=owner)
    ev = PosteriorLoglik(idata, model, [])
    n = ev.n_rows
    if rows is None:
        k = int(n_rows)
        if store is not None or n <= k:
            rows = np.arange(n)
        else:
            rows = np.sort(rng.choice(n, size=k, replace=False))
    rows = check_rows(rows, n, owner=owner)
    order = np.argsort(rows, kind="stable")
    if store is not None:
        rows, order = rows[order], np.arange(rows.size)  # written in increasing row order
    pp, obs = {}, {}
    post = ev.posterior
    coords = {"chain": post["chain"].values, "draw": post["draw"].values}
    row_dims = {name: _row_dim(ev.engine, name, model) for name in var_names}
    writer = None if store is None else _ZarrWriter(store, row_dims, rows, coords)
    for name in var_names:
        rv = model[name]
        f = _draw_function(ev, rv)
        row_dim, out = row_dims[name], None
        for pos, draws in _draw_chunks(ev, f, rows, order, rng):
            extra = _other_dims(model, name, draws.shape[2:])
            if writer is None:
                if out is None:
                    out = np.empty((ev.n_samples, rows.size) + draws.shape[2:],
                                   dtype=draws.dtype)
                out[:, pos] = draws
                continue
            first, start = pos[0] == 0, int(pos[0])
            dims = ("chain", "draw", row_dim, *extra)
            values = draws.reshape((ev.n_chains, ev.n_draws) + draws.shape[1:])
            chunks = (ev.n_chains, ev.n_draws, ROWS_PER_CHUNK) + draws.shape[2:]
            writer.write("posterior_predictive", name, dims, values, start, first, chunks,
                         {**coords, row_dim: rows})
            writer.write("observed_data", name, (row_dim, *extra),
                         _observed_values(model, rv, rows[pos]), start, first,
                         (ROWS_PER_CHUNK,) + draws.shape[2:], {row_dim: rows})
        if writer is not None:
            continue
        extra = _other_dims(model, name, out.shape[2:])
        arr = out.reshape((ev.n_chains, ev.n_draws) + out.shape[1:])
        pp[name] = xr.DataArray(arr, dims=("chain", "draw", row_dim, *extra),
                                coords={row_dim: rows})
        obs[name] = xr.DataArray(_observed_values(model, rv, rows),
                                 dims=(row_dim, *extra), coords={row_dim: rows})
    if writer is not None:
        pp_ds = _open_lazy(store, "posterior_predictive")
        obs_ds = _open_lazy(store, "observed_data")
    else:
        pp_ds = xr.Dataset(pp).assign_coords(coords)
        obs_ds = xr.Dataset(obs)
    if is_datatree(idata):
        return xr.DataTree.from_dict({"/posterior_predictive": pp_ds, "/observed_data": obs_ds})
    import arviz as az

    return az.InferenceData(posterior_predictive=pp_ds, observed_data=obs_ds)
