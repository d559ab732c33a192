"""One-time passes over all rows, in chunks, in parallel on threads or a Dask cluster.

The steps' set-up reads every row a few times: the mode search's Newton passes, the
control-variate sums at the mode, and ScalableMH's bound constants. Each pass is a map
over contiguous chunks of rows followed by a sum (and, for the bound constants, a write
of each chunk's values into a per-row array). :func:`map_chunks` runs such a map:

- on this process's threads by default (``num_workers`` threads; NumPy releases the
  GIL in the arithmetic that dominates a chunk, so threads run in parallel and share the
  process's memory map of the data). The chunks go straight to a thread pool, a few per
  thread ahead of the one being consumed: Dask's threaded scheduler, used before, cost
  about 0.5 ms per chunk and waited for the slowest chunk of each wave (0.1-0.2 s of a
  10^7-row pass);
- on a ``dask.distributed.Client`` when one is configured: the function is pickled once
  with :func:`pymc_subsample._memmap.dumps` (file-backed arrays travel as references to
  their file, so every worker maps the file instead of receiving rows) and each task
  gets a range of rows;
- serially, in this thread, with ``scheduler="sync"``.

At most a few chunks per worker are in flight, and their results are handed to
``consume`` in row order, so at most a few chunks' results are held at once whatever
the number of rows.

Configure with :func:`configure` (process-wide) or as a context manager::

    with pms.passes.configure(num_workers=2):
        step = pms.ScalableMH()

    from dask.distributed import Client
    with pms.passes.configure(client=Client("tcp://scheduler:8786")):
        step = pms.ScalableMH()

Both kinds of pass run in parallel: the NumPy passes of generalised linear models in
predictor coordinates, and the passes through compiled PyTensor functions (any other
likelihood), where each worker thread calls its own copy of the compiled function
(:func:`pymc_subsample.engine.evaluate.thread_copy`; a function whose graph holds inner
compiled functions, such as a ``Scan``, is called by one thread at a time instead).
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import os
import threading
from collections.abc import Callable, Sequence

__all__ = ["configure", "current", "map_chunks"]

_SCHEDULERS = ("threads", "sync")
_config = {"num_workers": None, "client": None, "scheduler": "threads", "wave": 4}


class configure:
    """Set how the one-time passes over the data run: process-wide, or for a ``with``
    block (the previous settings come back at its end).

    Parameters
    ----------
    num_workers : int, optional
        Threads of the passes (default: the number of CPUs).
    client : dask.distributed.Client, optional
        Run the passes on this client's workers instead (a ``LocalCluster`` or
        ``Client("scheduler-address")``). The workers must be able to open the data
        files at the same paths, and the client must stay open while steps are built
        (a closed one raises ``ValueError`` here, ``RuntimeError`` at a pass).
    scheduler : {"threads", "sync"}, optional
        ``"sync"`` runs every chunk in the calling thread (no Dask needed).
    wave : int, optional
        Chunks in flight per worker (bounds the results held at once).
    """

    def __init__(self, *, num_workers: int | None = None, client=None,
                 scheduler: str | None = None, wave: int | None = None):
        new = dict(_config)
        if num_workers is not None:
            if int(num_workers) != num_workers or num_workers < 1:
                raise ValueError(
                    f"passes.configure: num_workers must be a positive integer, got "
                    f"{num_workers!r}.")
            new["num_workers"] = int(num_workers)
        if client is not None:
            if not hasattr(client, "submit") or not hasattr(client, "gather"):
                raise TypeError(
                    "passes.configure: client must be a dask.distributed.Client, got "
                    f"{type(client).__name__}.")
            _check_open(client, "passes.configure", ValueError)
            new["client"] = client
        if scheduler is not None:
            if scheduler not in _SCHEDULERS:
                raise ValueError(
                    f"passes.configure: scheduler must be one of {_SCHEDULERS}, got "
                    f"{scheduler!r}.")
            new["scheduler"] = scheduler
        if wave is not None:
            if int(wave) != wave or wave < 1:
                raise ValueError(f"passes.configure: wave must be a positive integer, got {wave!r}.")
            new["wave"] = int(wave)
        self._previous = dict(_config)
        _config.update(new)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _config.clear()
        _config.update(self._previous)
        return False


def current() -> dict:
    """The settings in force: ``num_workers``, ``client``, ``scheduler``, ``wave``, and
    ``backend`` (``"distributed"``, ``"threads"`` or ``"serial"``)."""
    out = dict(_config)
    out["backend"] = _backend()
    return out


def _backend() -> str:
    if _config["client"] is not None:
        return "distributed"
    if _config["scheduler"] == "sync":
        return "serial"
    return "threads"


#: ``Client.status`` of a client that can no longer run tasks
_CLOSED_STATUS = ("closing", "closed", "failed")


def _check_open(client, where: str, error=RuntimeError) -> None:
    """Raise ``error`` saying what to do when ``client`` is closed (its ``status``; a
    closed client would fail later with an ``AttributeError`` of ``NoneType`` or
    ``IOLoop is closed``)."""
    status = getattr(client, "status", None)
    status = getattr(status, "name", status)  # a str, or an enum in some versions
    if status in _CLOSED_STATUS:
        raise error(
            f"{where}: the dask.distributed client {client!r} is {status} and cannot run "
            "the passes over the data. Configure an open one, "
            "pms.passes.configure(client=Client(...)), and keep it open until the steps "
            "are built; use configure as a context manager (with pms.passes.configure("
            "client=...): ...) so that the client setting ends with the block and the "
            "passes go back to this process's threads.")


def _workers() -> int:
    if _config["client"] is not None:
        _check_open(_config["client"], "passes")
        n = len(_config["client"].scheduler_info().get("workers", {}))
        return max(n, 1)
    return _config["num_workers"] or os.cpu_count() or 1


def map_chunks(fn: Callable[[int, int], object], ranges: Sequence[tuple[int, int]],
               consume: Callable[[int, int, object], None],
               progress: Callable[[int], None] | None = None) -> None:
    """Run ``fn(start, stop)`` on every range of rows and hand each result to
    ``consume(start, stop, result)``, in row order.

    Parameters
    ----------
    fn : callable
        ``fn(start, stop) -> result``; must be thread-safe (and picklable with a client).
    ranges : sequence of (int, int)
        Contiguous chunks of rows (:meth:`LikelihoodEngine.row_ranges`).
    consume : callable
        Called in the calling thread, in the order of ``ranges``.
    progress : callable, optional
        ``progress(stop)`` after each consumed chunk (a progress bar).
    """
    ranges = list(ranges)
    backend = _backend()
    if backend == "serial" or len(ranges) <= 1:
        for s, e in ranges:
            consume(s, e, fn(s, e))
            if progress is not None:
                progress(e)
        return
    size = _workers() * _config["wave"]
    if backend == "threads":
        _threads_in_order(fn, ranges, consume, progress, size)
        return
    run = _distributed_runner(fn, _config["client"])
    for k in range(0, len(ranges), size):
        wave = ranges[k : k + size]
        for (s, e), result in zip(wave, run(wave)):
            consume(s, e, result)
            if progress is not None:
                progress(e)


def map_local(fn: Callable[[object], object], items: Sequence) -> list:
    """``[fn(item) for item in items]`` on this process's threads: for work on data
    already in memory (a gathered subsample), which a client's workers would first have
    to be sent. Serial when passes are (``scheduler="sync"``, ``num_workers=1``, no
    Dask)."""
    items = list(items)
    workers = _config["num_workers"] or os.cpu_count() or 1
    if len(items) <= 1 or workers <= 1 or (_config["client"] is None
                                           and _backend() == "serial"):
        return [fn(item) for item in items]
    return list(_thread_pool(workers).map(fn, items))


def _threads_in_order(fn, ranges, consume, progress, ahead: int) -> None:
    """:func:`map_chunks` on this process's thread pool: ``ahead`` chunks in flight,
    the oldest consumed as soon as it is done (no barrier between waves)."""
    pool = _thread_pool(_workers())
    pending = collections.deque()
    todo = iter(ranges)
    try:
        for s, e in itertools.islice(todo, ahead):
            pending.append((s, e, pool.submit(fn, s, e)))
        while pending:
            s, e, future = pending.popleft()
            consume(s, e, future.result())
            if progress is not None:
                progress(e)
            nxt = next(todo, None)
            if nxt is not None:
                pending.append((*nxt, pool.submit(fn, *nxt)))
    finally:  # an error: the chunks not yet started are not run
        for *_, future in pending:
            future.cancel()


_pools: dict = {}


def _thread_pool(workers: int):
    """This process's pool of ``workers`` threads for the passes.

    A process forked by ``pm.sample(cores>1)`` inherits this cache without the threads:
    a pass run there (a chain's re-centring at the end of tuning) would wait forever.
    The pools are keyed by process id, so a forked worker makes its own."""
    from concurrent.futures import ThreadPoolExecutor

    key = (os.getpid(), workers)
    pool = _pools.get(key)
    if pool is None:
        for stale in [k for k in _pools if k[0] != key[0]]:
            del _pools[stale]  # inherited from the parent: its threads are not here
        pool = _pools[key] = ThreadPoolExecutor(workers, thread_name_prefix="pms-pass")
    return pool


def _distributed_runner(fn, client):
    """A wave runner on ``client``: ``fn`` is pickled once (memmaps by reference) and
    sent to every worker, which unpickles it once and keeps it."""
    from . import _memmap

    _check_open(client, "passes")
    blob = _memmap.dumps(fn)
    key = hashlib.sha1(blob).hexdigest()
    [blob_future] = client.scatter([blob], broadcast=True, hash=False)

    def run(wave):
        futures = [client.submit(_call_pickled, key, blob_future, s, e, pure=False)
                   for s, e in wave]
        return client.gather(futures)

    return run


_loaded: dict = {}
_loaded_lock = threading.Lock()


def _call_pickled(key, blob, start, stop):
    """Run the pickled chunk function ``blob`` on rows ``start:stop`` (in a worker)."""
    with _loaded_lock:
        fn = _loaded.get(key)
        if fn is None:
            from . import _memmap

            _loaded.clear()  # one pass at a time: keep only the current function
            fn = _loaded[key] = _memmap.loads(blob)
    return fn(start, stop)
