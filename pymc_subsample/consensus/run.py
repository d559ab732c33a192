"""Divide-and-conquer MCMC on Dask: sample each shard of the data, then combine.

:func:`consensus_sample` splits row-aligned data into ``S`` contiguous row blocks, builds
the user's model on each block with the prior raised to the power ``1/S``
(:func:`add_prior_power`), samples every shard with ``pm.sample`` as one Dask task, and
combines the shards' draws in the unconstrained space with the combiners of
:mod:`pymc_subsample.consensus.combine` (Scott et al. 2016, "Bayes and big data: the
consensus Monte Carlo algorithm"; Neiswanger, Wang & Xing 2014, "Asymptotically Exact,
Embarrassingly Parallel MCMC").

Dask is an optional dependency (``pip install "pymc-subsample[dask]"``), imported only
when :func:`consensus_sample` runs.
"""

from __future__ import annotations

import time
import uuid
import warnings

import numpy as np

from .. import _memmap, passes
from ..out_of_core import is_zarr
from ..kernels._validation import InvalidParameterError, check_callable, check_int
from .combine import COMBINERS

__all__ = ["consensus_sample", "add_prior_power", "BIAS_STATEMENT"]

#: the honest statement recorded in the result's attrs
BIAS_STATEMENT = (
    "Consensus weighting is exact only when every shard's posterior is Gaussian; otherwise "
    "its draws are biased (the bias shrinks as each shard's posterior approaches "
    "normality). The semiparametric and nonparametric density-product combiners are exact "
    "only asymptotically (as the number of shard draws grows and the kernel bandwidth "
    "shrinks); with finitely many draws they carry kernel-smoothing error. The "
    "semiparametric product falls back to the Gaussian product on near-Gaussian shards and "
    "does not correct a skewness confined to a few directions in higher dimensions. Shards "
    "are contiguous row blocks: rows should be in random order."
)

#: name of the Potential that raises the prior to the power 1/S
PRIOR_POWER_NAME = "consensus_prior_power"


# ---------------------------------------------------------------------- the shard model


def add_prior_power(model, n_shards: int):
    """Raise the prior of ``model`` to the power ``1 / n_shards`` in place.

    Adds the data-free ``pm.Potential`` named ``"consensus_prior_power"`` equal to
    ``(1/S - 1) sum_v log p(v)`` over the free variables ``v`` (their prior log densities
    in the constrained space, without Jacobian terms), so that the model's log density
    becomes ``log p(x_s | theta) + (1/S) log p(theta)`` (+ the Jacobian of the value
    transforms): the subposterior of Scott et al. (2016), Sec. 2, whose product over the
    ``S`` shards is the full posterior. Nothing is added when ``n_shards == 1``.

    Parameters
    ----------
    model : pymc.Model
    n_shards : int

    Returns
    -------
    pymc.Model
        ``model``.
    """
    import pymc as pm
    import pytensor.tensor as pt

    if n_shards == 1:
        return model
    with model:
        terms = [pt.sum(pm.logp(rv, rv)) for rv in model.free_RVs]
        pm.Potential(PRIOR_POWER_NAME, (1.0 / n_shards - 1.0) * pt.add(*terms)
                     if len(terms) > 1 else (1.0 / n_shards - 1.0) * terms[0])
    return model


def _build_shard_model(model_fn, shard_data, n_shards):
    import pymc as pm

    model = model_fn(**shard_data)
    if not isinstance(model, pm.Model):
        raise InvalidParameterError(
            "model_fn must return a pymc.Model built on the shard's data "
            f"(model_fn(**shard_data)); it returned {type(model).__name__}.")
    if not model.free_RVs:
        raise InvalidParameterError("model_fn returned a model without free variables.")
    return add_prior_power(model, n_shards)


# ---------------------------------------------------------------------- data references


class _ZarrRows:
    """Rows ``[start, stop)`` of a Zarr array, read where the task runs (the array pickles
    as a reference to its store): copied chunk by chunk into an ``.npy`` file in the
    worker's temporary directory and memory-mapped (:func:`pymc_subsample.out_of_core.
    open_rows`), so the shard's rows are never all in memory."""

    def __init__(self, array, start, stop):
        self.array, self.start, self.stop = array, int(start), int(stop)

    def read(self):
        from ..out_of_core import open_rows

        return open_rows(_RowRange(self.array, self.start, self.stop))


class _RowRange:
    """A slicing view of rows ``[start, stop)`` of an array that has no lazy views."""

    def __init__(self, array, start, stop):
        self.array, self.start, self.stop = array, start, stop
        self.shape = (stop - start,) + tuple(array.shape[1:])
        self.dtype = array.dtype

    def __getitem__(self, key):
        s, e, _ = key.indices(self.shape[0])
        return self.array[self.start + s : self.start + e]


def _materialise(value):
    return value.read() if isinstance(value, _ZarrRows) else value


# ---------------------------------------------------------------------- the Dask tasks


def _run_shard(payload: bytes) -> dict:
    """One shard: build the model on its rows, sample, return plain arrays (a Dask task)."""
    import arviz as az
    import pymc as pm

    from ..diagnostics import find_stat, get_group

    t0 = time.perf_counter()
    spec = _memmap.loads(payload)
    data = {k: _materialise(v) for k, v in spec["data"].items()}
    model = _build_shard_model(spec["model_fn"], data, spec["n_shards"])
    kw = {"progressbar": False, "compute_convergence_checks": False}
    kw.update(spec["sample_kwargs"])
    idata_kwargs = dict(kw.pop("idata_kwargs", None) or {})
    idata_kwargs["include_transformed"] = True
    # on a dask.distributed worker the workers already run shards in parallel: the
    # step's set-up passes run in the task's thread (no nested thread pool)
    with passes.configure(scheduler="sync" if _on_distributed_worker() else None), model:
        step = spec["step"](**spec["step_kwargs"])
        idata = pm.sample(draws=spec["draws"], tune=spec["tune"], chains=spec["chains"],
                          cores=1, step=step, random_seed=spec["seed"],
                          idata_kwargs=idata_kwargs, **kw)
    post = get_group(idata, "posterior")
    free = [rv.name for rv in model.free_RVs]
    values = [model.rvs_to_values[rv].name for rv in model.free_RVs]
    unc = {v: np.asarray(post[v].values, dtype=np.float64) for v in values}
    constrained = post[free]
    constrained.attrs = {}
    stats = get_group(idata, "sample_stats")
    acc, used = find_stat(stats, "accepted"), find_stat(stats, "data_used")
    ess = az.ess(constrained, method="bulk")
    ess_min = min(float(np.min(ess[v].values)) for v in ess.data_vars)
    if spec["chains"] > 1:
        rhat = az.rhat(constrained)
        rhat_max = max(float(np.max(rhat[v].values)) for v in rhat.data_vars)
    else:
        rhat_max = np.nan
    return {
        "free": free, "values": values, "unconstrained": unc, "posterior": constrained,
        "transformed": [f != v for f, v in zip(free, values)],
        "ess_bulk_min": ess_min, "rhat_max": rhat_max,
        "acceptance_rate": np.nan if acc is None else float(np.mean(acc.values)),
        "mean_data_used": np.nan if used is None else float(np.mean(used.values)),
        "n_rows": int(spec["n_rows"]), "row_start": int(spec["row_start"]),
        "seed": int(spec["seed"]), "wall_time": time.perf_counter() - t0,
        "result_type": type(idata).__name__,
    }


def _on_distributed_worker() -> bool:
    try:
        from distributed import get_worker

        get_worker()
    except (ImportError, ValueError):
        return False
    return True


def _map_back(payload: bytes, unconstrained: dict) -> dict:
    """Constrained values of the free variables at combined unconstrained draws (a Dask
    task: it builds the shard model, which needs the shard's data, on a worker)."""
    import pytensor

    spec = _memmap.loads(payload)
    data = {k: _materialise(v) for k, v in spec["data"].items()}
    model = _build_shard_model(spec["model_fn"], data, spec["n_shards"])
    outs = model.replace_rvs_by_values(model.free_RVs)
    fn = pytensor.function(model.value_vars, outs, on_unused_input="ignore")
    names = [v.name for v in model.value_vars]
    n = len(next(iter(unconstrained.values())))
    res = {rv.name: [] for rv in model.free_RVs}
    for i in range(n):
        vals = fn(*[unconstrained[name][i] for name in names])
        for rv, val in zip(model.free_RVs, vals):
            res[rv.name].append(np.asarray(val))
    return {k: np.stack(v) for k, v in res.items()}


# ---------------------------------------------------------------------- validation


def _check_data(data):
    if not isinstance(data, dict) or not data:
        raise InvalidParameterError(
            "data must be a non-empty dict of name -> row-aligned array (passed to "
            f"model_fn as keyword arguments); got {type(data).__name__}.")
    out, rows = {}, {}
    for name, arr in data.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidParameterError(
                f"data keys must be valid keyword names; got {name!r}.")
        if not (isinstance(arr, np.ndarray) or is_zarr(arr)):
            arr = np.asarray(arr)
        if len(getattr(arr, "shape", ())) == 0:
            raise InvalidParameterError(
                f"data[{name!r}] is a scalar: every array needs rows.")
        out[name], rows[name] = arr, int(arr.shape[0])
    if len(set(rows.values())) > 1:
        raise InvalidParameterError(
            f"data arrays must have the same number of rows; got {rows}.")
    return out, next(iter(rows.values()))


def _check_step(step):
    import pymc as pm

    if step is None:
        from ..steps.scalable import ScalableMH

        return ScalableMH
    if isinstance(step, pm.step_methods.compound.BlockedStep) or not callable(step):
        raise InvalidParameterError(
            "step must be a step-method class (e.g. pms.ScalableMH) or a callable "
            "returning a step inside the shard's model context, not a step instance: each "
            "shard builds its own step on its own model.")
    return step


def _check_combiners(combiners) -> tuple:
    """``combiners`` as a tuple of distinct names from :data:`COMBINERS` (a single name
    is allowed)."""
    if isinstance(combiners, str):
        combiners = (combiners,)
    combiners = tuple(combiners)
    unknown = [c for c in combiners if c not in COMBINERS]
    if not combiners or unknown or len(set(combiners)) != len(combiners):
        raise InvalidParameterError(
            f"combiners must be distinct names from {sorted(COMBINERS)}; got "
            f"{list(combiners)}.")
    return combiners


def _check_sample_kwargs(sample_kwargs) -> dict:
    """A copy of ``sample_kwargs``, which may not set what consensus_sample sets."""
    sample_kwargs = {} if sample_kwargs is None else dict(sample_kwargs)
    fixed = {"draws", "tune", "chains", "cores", "step", "random_seed", "model"}
    clash = fixed & set(sample_kwargs)
    if clash:
        raise InvalidParameterError(
            f"sample_kwargs may not set {sorted(clash)}: they are arguments of "
            "consensus_sample or fixed by it.")
    return sample_kwargs


def _check_client(client):
    """``client``: None or a ``dask.distributed.Client`` (anything with ``submit`` and
    ``gather``)."""
    if client is not None and not (hasattr(client, "submit") and hasattr(client, "gather")):
        raise InvalidParameterError("client must be a dask.distributed.Client or None; got "
                                    f"{type(client).__name__}.")
    return client


def _import_dask():
    try:
        import dask
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("consensus_sample needs Dask: pip install "
                          "'pymc-subsample[dask]'.") from err
    return dask


def _shard_slices(n_rows, n_shards):
    bounds = np.linspace(0, n_rows, n_shards + 1).round().astype(np.int64)
    return list(zip(bounds[:-1], bounds[1:]))


def _shard_value(arr, start, stop):
    if is_zarr(arr):
        return _ZarrRows(arr, start, stop)
    return arr[start:stop]  # a memmap's slice stays a file reference in _memmap.dumps


# ---------------------------------------------------------------------- public


def consensus_sample(model_fn, data, *, n_shards=4, step=None, step_kwargs=None, draws=1000,
                     tune=1000, chains=1, combiners=("consensus", "semiparametric"),
                     client=None, random_seed=None, sample_kwargs=None):
    """Divide-and-conquer MCMC: sample shards of the data on Dask workers, then combine.

    The rows of ``data`` are split into ``n_shards`` contiguous blocks. Shard ``s``
    samples the subposterior ``p(theta)^(1/S) p(x_s | theta)`` (the model of
    ``model_fn`` on the block's rows, with the Potential of :func:`add_prior_power`),
    whose product over shards is the full posterior (Scott et al. 2016, "Bayes and big
    data: the consensus Monte Carlo algorithm", Sec. 2). Each shard's ``pm.sample`` is one
    Dask task; the shards' draws of the unconstrained value variables are then combined
    (see :mod:`pymc_subsample.consensus.combine`) and mapped back through the model's
    transforms.

    Shards are contiguous row blocks, so the rows should be in random order: a file
    sorted by time, group or outcome gives shards whose posteriors differ systematically
    (their product is still the full posterior in principle, but the combiners'
    Gaussian or kernel approximations then fit worse). No shuffling is done, since it
    would copy a file-backed array.

    Parameters
    ----------
    model_fn : callable
        ``model_fn(**shard_data) -> pm.Model``: builds the model on one shard's rows. It
        runs in the worker, so it must be picklable (``cloudpickle``: a function in
        ``__main__``, a notebook or an importable module).
    data : dict of str -> array
        Row-aligned arrays (same first dimension): NumPy arrays, ``numpy.memmap`` (e.g.
        ``np.load(path, mmap_mode="r")``) or Zarr arrays. A memmap's block is sent to the
        worker as a reference to its file (:mod:`pymc_subsample._memmap`), a Zarr
        array's as the array (a reference to its store) and the row range, read inside
        the worker; a NumPy array's block is sent by value.
    n_shards : int, default 4
        ``S``, between 1 and the number of rows.
    step : class or callable, optional
        Called as ``step(**step_kwargs)`` inside each shard's model context; default
        :class:`pymc_subsample.ScalableMH`.
    step_kwargs : dict, optional
    draws, tune, chains : int
        Per shard (``pm.sample(..., cores=1)``; chains run one after the other).
    combiners : sequence of str, default ("consensus", "semiparametric")
        Names from ``pymc_subsample.consensus.COMBINERS``: ``"consensus"``
        (:func:`~pymc_subsample.consensus.consensus_weighting`), ``"semiparametric"``
        and ``"nonparametric"`` (:func:`~pymc_subsample.consensus.semiparametric_product`).
        The first gives the ``posterior`` group.
    client : dask.distributed.Client, optional
        ``None``: run the tasks one after the other in this process with Dask's
        synchronous scheduler. A client (``Client(LocalCluster(...))`` or
        ``Client("scheduler-address")``): submit the shards to its workers, which need
        this package, the model's dependencies and (for memmaps) the files at the same
        paths.
    random_seed : int, optional
        Seeds every shard (``numpy.random.SeedSequence(random_seed).spawn``) and the
        combiners; the same seed gives the same draws whichever scheduler runs the tasks.
    sample_kwargs : dict, optional
        More arguments of ``pm.sample`` (default ``progressbar=False``,
        ``compute_convergence_checks=False``).

    Returns
    -------
    arviz.InferenceData (PyMC 5) or xarray.DataTree (PyMC 6)
        ``posterior``: the first combiner's draws (one chain) of the free variables;
        ``posterior_<name>``: each other combiner's; ``shard_posterior``: each shard's own
        draws, with a ``shard`` dimension; ``shard_diagnostics``: per shard
        ``ess_bulk_min``, ``rhat_max`` (NaN with one chain), ``acceptance_rate``,
        ``mean_data_used`` (rows read per draw), ``wall_time`` (seconds, of the task),
        ``n_rows``, ``row_start`` and ``seed``. The attrs (of every group, and of the
        DataTree's root) give ``n_shards``, ``combiners`` and ``bias_statement``
        (:data:`BIAS_STATEMENT`). Deterministics are not combined.
    """
    import pymc as pm

    check_callable("model_fn", model_fn, signature="model_fn(**shard_data) -> pymc.Model")
    data, n_rows = _check_data(data)
    n_shards = check_int("n_shards", n_shards, 1, strict=True)
    if n_shards > n_rows:
        raise InvalidParameterError(
            f"n_shards = {n_shards} exceeds the number of rows ({n_rows}).")
    draws = check_int("draws", draws, 1, strict=True)
    tune = check_int("tune", tune, 0, strict=True)
    chains = check_int("chains", chains, 1, strict=True)
    combiners = _check_combiners(combiners)
    step = _check_step(step)
    step_kwargs = {} if step_kwargs is None else dict(step_kwargs)
    sample_kwargs = _check_sample_kwargs(sample_kwargs)
    client = _check_client(client)
    dask = _import_dask()

    seeds, combine_rng = _seeds(random_seed, n_shards)
    common = {
        "model_fn": model_fn, "n_shards": n_shards, "step": step,
        "step_kwargs": step_kwargs, "draws": draws, "tune": tune, "chains": chains,
        "sample_kwargs": sample_kwargs,
    }
    payloads = _shard_payloads(common, data, n_rows, n_shards, seeds)
    token = uuid.uuid4().hex[:8]
    results = _run_tasks(dask, client, _run_shard, [(p,) for p in payloads],
                         [f"consensus-shard-{s}-{token}" for s in range(n_shards)])
    values, free, shapes, shard_draws = _stack_shard_draws(results)
    combined = _combine(combiners, shard_draws, combine_rng, values, shapes)
    if any(results[0]["transformed"]):
        mapped = _run_tasks(dask, client, _map_back,
                            [(payloads[0], c) for c in combined.values()],
                            [f"consensus-map-{name}-{token}" for name in combined])
        constrained = dict(zip(combined, mapped))
    else:
        constrained = {name: {f: c[v] for f, v in zip(free, values)}
                       for name, c in combined.items()}

    return _assemble(results, constrained, combiners, n_shards=n_shards, n_rows=n_rows,
                     step=step, pymc_major=int(pm.__version__.split(".")[0]))


# ---------------------------------------------------------------------- the run's parts


def _seeds(random_seed, n_shards):
    """One seed per shard and the combiners' generator, from
    ``numpy.random.SeedSequence(random_seed).spawn(n_shards + 1)``."""
    children = np.random.SeedSequence(random_seed).spawn(n_shards + 1)
    seeds = [int(c.generate_state(1, dtype=np.uint32)[0]) for c in children[:-1]]
    return seeds, np.random.default_rng(children[-1])


def _shard_payloads(common, data, n_rows, n_shards, seeds):
    """Each shard's task spec (``common`` plus its seed, rows and data), pickled with
    :func:`pymc_subsample._memmap.dumps` (memmaps as references to their file)."""
    payloads = []
    for s, (a, b) in enumerate(_shard_slices(n_rows, n_shards)):
        spec = {
            **common, "seed": seeds[s], "n_rows": b - a, "row_start": a,
            "data": {k: _shard_value(v, a, b) for k, v in data.items()},
        }
        payloads.append(_memmap.dumps(spec))
    return payloads


def _run_tasks(dask, client, fn, calls, keys):
    """``fn(*args)`` for every ``args`` of ``calls``, results in order: without a client,
    one after the other in this process (Dask's synchronous scheduler); with one, as
    tasks on its workers under ``keys``."""
    if client is None:
        tasks = [dask.delayed(fn, pure=False)(*args) for args in calls]
        return list(dask.compute(*tasks, scheduler="synchronous"))
    futures = [client.submit(fn, *args, key=key) for args, key in zip(calls, keys)]
    return client.gather(futures)


def _stack_shard_draws(results):
    """Each shard's unconstrained draws as one ``(chains * draws, d)`` array, after
    checking that every shard has shard 0's variables and shapes: ``(values, free,
    shapes, shard_draws)``."""
    values, free = results[0]["values"], results[0]["free"]
    shapes = [results[0]["unconstrained"][v].shape[2:] for v in values]
    for s, r in enumerate(results):
        got = [r["unconstrained"][v].shape[2:] for v in r["values"]]
        if r["values"] != values or got != shapes:
            raise ValueError(f"shard {s}'s model has variables {list(zip(r['values'], got))} "
                             f"but shard 0's has {list(zip(values, shapes))}: model_fn must "
                             "build the same parameters on every shard.")
    sizes = [int(np.prod(sh)) for sh in shapes]
    shard_draws = [np.concatenate([r["unconstrained"][v].reshape(-1, k)
                                   for v, k in zip(values, sizes)], axis=1) for r in results]
    return values, free, shapes, shard_draws


def _combine(combiners, shard_draws, rng, values, shapes):
    """Each combiner's draws (in the order of ``combiners``, all from ``rng``), split back
    into the value variables: ``{name: {value_var: (n, *shape)}}``."""
    sizes = [int(np.prod(sh)) for sh in shapes]
    combined = {}
    for name in combiners:
        flat = COMBINERS[name](shard_draws, rng=rng)
        parts = np.split(flat, np.cumsum(sizes)[:-1], axis=1)
        combined[name] = {v: p.reshape((len(flat),) + sh)
                          for v, p, sh in zip(values, parts, shapes)}
    return combined


def _assemble(results, constrained, combiners, *, n_shards, n_rows, step, pymc_major):
    import xarray as xr

    attrs = {
        "n_shards": n_shards,
        "combiners": ", ".join(combiners),
        "bias_statement": BIAS_STATEMENT,
        "n_rows": n_rows,
        "shard_step": getattr(step, "__name__", repr(step)),
        "method": "divide-and-conquer MCMC (pymc_subsample.consensus_sample)",
    }
    template = results[0]["posterior"]

    def as_dataset(draws, combiner):
        data_vars = {}
        for name, arr in draws.items():
            dims = ("chain", "draw") + tuple(template[name].dims[2:])
            data_vars[name] = (dims, np.asarray(arr)[None])
        coords = {k: v for k, v in template.coords.items() if k not in ("chain", "draw")}
        n = len(next(iter(draws.values())))
        ds = xr.Dataset(data_vars, coords={**coords, "chain": [0], "draw": np.arange(n)})
        ds.attrs = {**attrs, "combiner": combiner}
        return ds

    groups = {}
    for i, name in enumerate(combiners):
        groups["posterior" if i == 0 else f"posterior_{name}"] = as_dataset(
            constrained[name], name)
    shard_post = xr.concat([r["posterior"] for r in results], dim="shard")
    shard_post = shard_post.assign_coords(shard=np.arange(n_shards))
    shard_post.attrs = dict(attrs)
    diag_names = ["ess_bulk_min", "rhat_max", "acceptance_rate", "mean_data_used",
                  "wall_time", "n_rows", "row_start", "seed"]
    diag = xr.Dataset({k: ("shard", np.array([r[k] for r in results])) for k in diag_names},
                      coords={"shard": np.arange(n_shards)})
    diag.attrs = dict(attrs)
    groups["shard_posterior"] = shard_post
    groups["shard_diagnostics"] = diag

    if pymc_major >= 6:
        tree = xr.DataTree.from_dict({"/": xr.Dataset(attrs=attrs), **{
            f"/{k}": v for k, v in groups.items()}})
        return tree
    import arviz as az

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*InferenceData scheme.*")
        warnings.filterwarnings("ignore", category=UserWarning)
        return az.InferenceData(**groups)
