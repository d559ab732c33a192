"""The engine's compiled functions, described by one table and called three ways.

Every function the engine compiles is an entry of :data:`FUNCTIONS`: how to build its
graph from the :class:`~pymc_subsample.engine.batch_graph.JoinedGraph`, whether it reads
a batch of rows and what it returns for no rows. :class:`BatchFunctions` compiles an
entry on first use (or at a step's construction, :meth:`BatchFunctions.compile`) and calls
it in one of three ways:

- on a batch of rows (:meth:`BatchFunctions._on_rows`), e.g. ``loglik_diff``;
- on a long list of rows in chunks, per-row outputs concatenated
  (:meth:`BatchFunctions._on_row_chunks`), e.g. ``loglik_rows_grad``;
- over all ``N`` rows in contiguous chunks, outputs summed (:meth:`BatchFunctions._on_all_rows`),
  e.g. ``full_loglik_grad``, with a progress bar inside :meth:`BatchFunctions.showing_progress`.

The public methods are one line each over these.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytensor
import pytensor.tensor as pt

from .batch_graph import grad, jacobian, pushforward, rows_jacobian

__all__ = ["BatchFunctions", "Evaluation", "FUNCTIONS", "compile_mode"]

_DEFAULT_CHUNK = 8192


def compile_mode():
    """PyTensor's default mode, without its BLAS rewrites when no BLAS library is linked
    (``blas__ldflags`` empty, as with a pip install): PyTensor's ``Gemv`` then runs as a
    Python-level SciPy call per node, and the plain ``Dot`` (NumPy) it replaces is as fast
    on big chunks and about 30% cheaper per call on the minibatch steps' batches of a
    hundred rows."""
    mode = pytensor.compile.mode.get_default_mode()
    if not pytensor.config.blas__ldflags:
        mode = mode.excluding("BlasOpt")
    return mode


# id(fn) -> (fn, {thread: copy}, lock or None), newest last
_copies: OrderedDict = OrderedDict()
_COPIES_KEPT = 16  # functions whose copies are kept
_copies_lock = threading.Lock()


def _holds_inner_functions(fn) -> bool:
    """Whether a compiled function's graph has ops that keep a compiled function of
    their own (``Scan``, ``OpFromGraph``): a copy of ``fn`` shares those, with their
    storage, so two threads must not run it at the same time."""
    from pytensor.compile.builders import OpFromGraph
    from pytensor.scan.op import Scan

    fgraph = getattr(getattr(fn, "maker", None), "fgraph", None)
    if fgraph is None:
        return True  # not a PyTensor function: assume the worst
    return any(isinstance(node.op, (Scan, OpFromGraph)) for node in fgraph.apply_nodes)


class _OneAtATime:
    """``fn`` called by one thread at a time (a function :func:`thread_copy` cannot copy
    safely): correct, without the parallel speed-up."""

    def __init__(self, fn, lock):
        self.fn, self.lock = fn, lock

    def __call__(self, *args, **kwargs):
        with self.lock:
            return self.fn(*args, **kwargs)


def thread_copy(fn):
    """``fn`` in the main thread; in another thread (a worker of the parallel passes,
    :mod:`pymc_subsample.passes`) that thread's own copy of the compiled function,
    whose input and output storage no other thread touches. A function whose graph
    holds inner compiled functions (``Scan``, e.g. a Hessian by rows) cannot be copied
    apart: the worker threads then call it one at a time. The copies of the 16 most
    recently used functions are kept (PyTensor 3's functions cannot be referenced
    weakly, so the copies cannot simply go with their function)."""
    if threading.current_thread() is threading.main_thread():
        return fn
    ident = threading.get_ident()
    with _copies_lock:
        entry = _copies.pop(id(fn), None)
        if entry is None:
            shared = threading.Lock() if _holds_inner_functions(fn) else None
            entry = (fn, {}, shared)
        _copies[id(fn)] = entry
        while len(_copies) > _COPIES_KEPT:
            _copies.popitem(last=False)
        _, per_thread, shared = entry
        if shared is not None:
            # the lock lives as long as fn's entry: a pass calls one function over and
            # over, which keeps it the newest entry while the pass runs
            return _OneAtATime(fn, shared)
        copy = per_thread.get(ident)
        if copy is None:
            copy = per_thread[ident] = fn.copy(share_memory=False)
            copy.trust_input = fn.trust_input
    return copy


# model -> {(graph token, key): (compiled function(s), {value var: shared variable})}
_reused: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_reused_lock = threading.Lock()


def _swapped(compiled, swap):
    """``compiled`` (a function, or a tuple or list of them) reading the shared variables
    ``swap`` maps to instead of their keys: ``Function.copy(swap=...)``, which links the
    already rewritten graph again (no graph rewriting)."""
    if isinstance(compiled, (tuple, list)):
        return type(compiled)(_swapped(c, swap) for c in compiled)
    if not hasattr(compiled, "maker"):
        return compiled
    present = {i.variable for i in compiled.maker.inputs}
    mine = {old: new for old, new in swap.items() if old in present}
    if not mine:
        return compiled
    out = compiled.copy(swap=mine)
    out.trust_input = compiled.trust_input
    return out


@dataclass(frozen=True)
class Evaluation:
    """One compiled function of the engine.

    Attributes
    ----------
    graph : callable
        ``graph(joined) -> (point inputs, outputs)``; the batch inputs follow the points
        when ``rows`` is true.
    rows : bool
        The function reads the data of a batch of rows.
    per_row : bool
        The outputs have a leading row axis (summed over it in a pass over all rows).
    empty : callable or None
        ``empty(ndim)``: the result for no rows, returned without a call (some C ops,
        e.g. softmax in a mixture, fail on empty input); None calls the function.
    """

    graph: Callable
    rows: bool = True
    per_row: bool = False
    empty: Callable | None = None


def _pair(g):
    return [g.q, g.q_prop], pt.stack([g.loglik, g.loglik_at(g.q_prop)])


def _diff(g):
    return [g.q, g.q_prop], g.loglik_at(g.q_prop) - g.loglik


def _prior_hessian(g):
    d = grad(g.prior, g.q)
    # vectorised reverse mode: priors have no row indexing, and compile fast this way
    return [g.q], [g.prior, d, jacobian(d, g.q, vectorize=True)]


def _sum_hessian(g):
    d = grad(g.loglik.sum(), g.q)
    return [g.q], [g.loglik.sum(), d, jacobian(d, g.q, vectorize=False)]


def _taylor(order):
    """Taylor control variates about a centre ``c`` (kernels.variance.control_variates): the plain
    differences ``l_i = ll_i(q') - ll_i(q)``, the first-order terms ``grad ll_i(c) . u``
    and (order 2) ``u' H_i(c) w``, ``u = q' - q``, ``w = (q' - c) + (q - c)``, as
    directional derivatives: no per-row gradient or Hessian is materialised."""

    def build(g):
        q, q2 = g.q, g.q_prop
        c = q.type("center")
        ll_c = g.loglik_at(c)
        gu = pushforward(ll_c, c, q2 - q)
        outs = [g.loglik_at(q2) - g.loglik, gu]
        if order == 2:
            outs.append(pushforward(gu, c, (q2 - c) + (q - c)))
        return [q, q2, c], pt.stack(outs)

    return build


def _row_grad_pair(g):
    """Per-row gradients at ``q`` and at a centre ``c`` in one call (the control-variate
    gradient estimator of :mod:`pymc_subsample.kernels.variance.gradient_estimators`)."""
    c = g.q.type("center")
    return [g.q, c], [rows_jacobian(g.loglik, g.q), rows_jacobian(g.loglik_at(c), c)]


def _zeros(*shape):
    return lambda d: np.zeros(shape)


#: every compiled function of the engine, by the key of its cache
FUNCTIONS = {
    "prior": Evaluation(lambda g: ([g.q], g.prior), rows=False),
    "prior_grad": Evaluation(lambda g: ([g.q], [g.prior, grad(g.prior, g.q)]), rows=False),
    "prior_hess": Evaluation(_prior_hessian, rows=False),
    "ll": Evaluation(lambda g: ([g.q], g.loglik), per_row=True, empty=_zeros(0)),
    "ll_pair": Evaluation(_pair, empty=_zeros(2, 0)),
    "ll_diff": Evaluation(_diff, per_row=True, empty=_zeros(0)),
    "cv1": Evaluation(_taylor(1), empty=_zeros(2, 0)),
    "cv2": Evaluation(_taylor(2), empty=_zeros(3, 0)),
    "ll_sum": Evaluation(lambda g: ([g.q], g.loglik.sum())),
    "ll_sum_grad": Evaluation(lambda g: ([g.q], [g.loglik.sum(), grad(g.loglik.sum(), g.q)]),
                              empty=lambda d: (0.0, np.zeros(d))),
    "sum_hess": Evaluation(_sum_hessian),
    "row_grad": Evaluation(lambda g: ([g.q], [g.loglik, rows_jacobian(g.loglik, g.q)]),
                           per_row=True, empty=lambda d: (np.empty(0), np.empty((0, d)))),
    "row_grad_pair": Evaluation(_row_grad_pair, per_row=True,
                                empty=lambda d: (np.empty((0, d)), np.empty((0, d)))),
}


def _as_result(out):
    """Scalars as Python floats; several outputs as a tuple."""
    if isinstance(out, (list, tuple)):
        return tuple(_as_result(o) for o in out)
    return float(out) if np.ndim(out) == 0 else out


def _points(points):
    return [np.asarray(p, dtype=np.float64) for p in points]


class BatchFunctions:
    """Compiling and calling the functions of :data:`FUNCTIONS` (a base of
    :class:`~pymc_subsample.engine.likelihood.LikelihoodEngine`, which provides
    ``_joined``, ``_compiled``, ``compile_kwargs``, ``gather``, ``gather_slice``,
    ``n_rows``, ``ndim``, ``model``, ``shared`` and ``graph_token``)."""

    #: whether a Hessian pass costs about a gradient pass (the mode search then takes
    #: exact Newton steps from its warm start); the compiled Hessian graph does not
    cheap_hessian = False

    # ------------------------------------------------------------------ compiling
    def function(self, inputs, outputs, **overrides):
        """``pytensor.function(inputs, outputs)`` for the sampling loop and the data passes:
        :func:`compile_mode` unless the step's ``compile_kwargs`` say otherwise (PyMC's
        convention, e.g. ``compile_kwargs={"mode": "NUMBA"}``); ``overrides`` win over
        both. Inputs are trusted. As in ``pymc.pytensorf.compile``, a parameter outside
        its support gives a log density of -inf instead of raising (PyMC's
        ``local_check_parameter_to_ninf_switch``, whatever the mode): a far proposal is
        rejected, not an error."""
        kwargs = {"mode": compile_mode(), "on_unused_input": "ignore", **self.compile_kwargs,
                  **overrides}
        kwargs["mode"] = pytensor.compile.mode.get_mode(kwargs["mode"]).including(
            "local_check_parameter_to_ninf_switch")
        f = pytensor.function(inputs, outputs, **kwargs)
        f.trust_input = True
        return f

    def reused(self, key, build):
        """``build()``'s compiled function(s), built once per model graph and process.

        Building a step again on the same model (a second ``pm.sample`` in a notebook, a
        benchmark's repeats) rewrites the same graphs again, which costs more than the
        step's passes over the data at 10^6 rows even with PyTensor's compile cache warm.
        So compiled functions are kept per model (weakly: they go with the model) under
        ``(graph_token, key)``: ``graph_token`` names what the graphs are built from (the
        model's variables, the step's variables and their shapes, the row data's types,
        the compile settings) and ``key`` what is built from it. The graphs read the
        step's variables through ``q`` and other steps' variables through shared
        variables; a new step has new ones of those, which the reused function is
        copied to read (``Function.copy(swap=...)``: linking only).
        """
        token = (self.graph_token, key)
        with _reused_lock:
            per_model = _reused.get(self.model)
            entry = None if per_model is None else per_model.get(token)
        if entry is None:
            compiled = build()
            with _reused_lock:
                _reused.setdefault(self.model, {})[token] = (compiled, dict(self.shared))
            return compiled
        compiled, shared = entry
        swap = {shared[k]: v for k, v in self.shared.items() if shared.get(k) is not v}
        return _swapped(compiled, swap) if swap else compiled

    def reused_if_any(self, key):
        """What :meth:`reused` would return for ``key`` if it was built before, else None
        (nothing is built)."""
        with _reused_lock:
            per_model = _reused.get(self.model)
            entry = None if per_model is None else per_model.get((self.graph_token, key))
        if entry is None:
            return None
        return self.reused(key, None)

    def _fn(self, key, *, fast_compile=False):
        """The compiled function ``key`` of :data:`FUNCTIONS`, compiled on first use
        (compiles dominate set-up) or reused from an engine of the same model graph
        (:meth:`reused`).

        ``fast_compile=True`` compiles without generating C code (PyTensor's
        ``FAST_COMPILE`` mode: seconds less to build, slower to run), for functions that
        are called a handful of times: the set-up checks and the prior's Hessian.
        """
        cache_key = (key, "fast") if fast_compile else key
        f = self._compiled.get(cache_key)
        if f is None:
            spec = FUNCTIONS[key]

            def build():
                inputs, outputs = spec.graph(self._joined)
                if spec.rows:
                    inputs = [*inputs, *self._joined.batch]
                return self.function(inputs, outputs, **(
                    {"mode": "FAST_COMPILE"} if fast_compile else {}))

            f = self._compiled[cache_key] = self.reused(("engine", cache_key), build)
        return f

    def compile(self, *keys) -> None:
        """Compile the functions ``keys`` now (at a step's construction) rather than on
        first use: compiled once in the parent process, they reach every worker that
        PyMC forks instead of being compiled again inside each chain's first draws."""
        for key in keys:
            self._fn(key)

    def _call_rarely(self, key, *args):
        """Call the function ``key`` compiled in FAST_COMPILE mode; if that mode cannot run
        the graph (e.g. an elementwise op with more inputs than NumPy ufuncs take), use
        the normally compiled one."""
        try:
            return self._fn(key, fast_compile=True)(*args)
        except Exception:  # noqa: BLE001 - the C-compiled function is the reference
            return self._fn(key)(*args)

    # ------------------------------------------------------------------ three ways to call
    def _on_rows(self, key, points, rows=None, *, rarely=False):
        """The function ``key`` at ``points`` (``q``, ``q_prop``, ...) on the data of
        ``rows`` (when it reads rows), scalars as floats."""
        spec = FUNCTIONS[key]
        args = _points(points)
        if spec.rows:
            if spec.empty is not None and np.size(rows) == 0:
                return spec.empty(self.ndim)
            args += self.gather(np.asarray(rows, dtype=np.int64))
        out = self._call_rarely(key, *args) if rarely else self._fn(key)(*args)
        return _as_result(out)

    def _on_row_chunks(self, key, q, rows, chunk):
        """The per-row outputs of ``key`` on ``rows``, ``chunk`` rows per call, joined."""
        rows = np.asarray(rows, dtype=np.int64)
        f = self._fn(key)
        (q,) = _points([q])
        parts = [f(q, *self.gather(rows[s : s + chunk])) for s in range(0, rows.size, chunk)]
        if not parts:
            return FUNCTIONS[key].empty(self.ndim)
        return tuple(np.concatenate(p) for p in zip(*parts))

    def _on_all_rows(self, key, points, chunk):
        """The outputs of ``key`` summed over all ``N`` rows, read in contiguous chunks
        (bounded memory; one parallel pass over the data, see :meth:`map_rows`). The
        chunks' sums are added in row order, so the result does not depend on the
        number of threads."""
        per_row = FUNCTIONS[key].per_row
        f = self._fn(key)
        args = _points(points)

        def one_chunk(start, stop):
            out = thread_copy(f)(*args, *self.gather_slice(start, stop))
            if not isinstance(out, (list, tuple)):
                return float(out.sum() if per_row else out)
            return [float(o) if np.ndim(o) == 0 else o for o in out]

        values, total = [], []

        def add(start, stop, out):
            if not isinstance(out, list):
                # one output: the chunks' values are added by Python's sum (compensated
                # from Python 3.12), the others in order
                values.append(out)
            else:
                total[:] = ([t + o for t, o in zip(total, out)] if total
                            else [0.0 + o for o in out])

        self.map_rows(one_chunk, add, chunk)
        return tuple(total) if total else float(sum(values))

    # ------------------------------------------------------------------ public functions
    #: whether :meth:`prior` reads the compiled prior-and-gradient function (False once
    #: its gradient graph could not be built)
    _prior_by_grad = True

    def prior(self, q) -> float:
        """Log prior density of all free variables (with transform Jacobians) plus the
        data-free Potentials, at the step's point ``q`` (other variables as set in
        ``shared``). O(1) in N.

        The value is the first output of the function of :meth:`prior_and_grad`, which
        every step's set-up compiles for its mode search: one compilation of the prior
        instead of two (0.05-0.1 s of a construction), at no measurable cost a call (the
        gradient of a prior is a few operations). A prior whose gradient graph cannot be
        built gets a compiled function of its own."""
        if self._prior_by_grad:
            try:
                fn = self._fn("prior_grad")
            except Exception:  # noqa: BLE001 - no gradient graph: the value's own graph
                self._prior_by_grad = False
            else:
                return float(fn(np.asarray(q, dtype=np.float64))[0])
        return self._on_rows("prior", [q])

    def prior_and_grad(self, q):
        """Log prior and its gradient with respect to ``q``."""
        return self._on_rows("prior_grad", [q])

    #: up to this many dimensions the prior's Hessian is taken by differences of its
    #: compiled gradient (2 d calls); above, by its own graph
    PRIOR_HESSIAN_BY_DIFFERENCES = 200

    def prior_hessian(self, q):
        """Log prior, gradient and Hessian with respect to ``q``.

        Up to ``PRIOR_HESSIAN_BY_DIFFERENCES`` dimensions the Hessian is the central
        difference of the compiled exact gradient (steps ``1e-5 max(1, |q_j|)``,
        symmetrised: relative error about 1e-10 for a smooth prior): the Hessian graph's
        compilation took 0.5 s for a prior of ten coefficients, a tenth of a step's first
        construction, while the differences cost microseconds. The Hessian serves the
        mode search and the Laplace approximation (both approximate by nature); no
        acceptance test reads it. Above that size, or where a difference is not
        finite, the Hessian graph is compiled (FAST_COMPILE) and used."""
        q = np.asarray(q, dtype=np.float64)
        if q.size <= self.PRIOR_HESSIAN_BY_DIFFERENCES:
            value, grad = self.prior_and_grad(q)
            if np.isfinite(value) and np.all(np.isfinite(grad)):
                hess = np.empty((q.size, q.size))
                for j in range(q.size):
                    step = 1e-5 * max(1.0, abs(float(q[j])))
                    e = np.zeros_like(q)
                    e[j] = step
                    hess[:, j] = (self.prior_and_grad(q + e)[1]
                                  - self.prior_and_grad(q - e)[1]) / (2.0 * step)
                if np.all(np.isfinite(hess)):
                    return value, grad, 0.5 * (hess + hess.T)
        return self._on_rows("prior_hess", [q], rarely=True)

    def loglik(self, q, rows) -> np.ndarray:
        """Per-row log-likelihood terms (summed over all observed variables) of ``rows``."""
        return self._on_rows("ll", [q], rows)

    def loglik_pair(self, q, q_prop, rows) -> np.ndarray:
        """Per-row log-likelihood at two points on the same rows, in one call: (2, len(rows))."""
        return self._on_rows("ll_pair", [q, q_prop], rows)

    def loglik_diff(self, q, q_prop, rows) -> np.ndarray:
        """``l_i = log p(x_i | q_prop) - log p(x_i | q)`` for ``rows``, in one call."""
        return self._on_rows("ll_diff", [q, q_prop], rows)

    def loglik_diff_taylor(self, q, q_prop, center, rows, order: int) -> np.ndarray:
        """Plain differences and Taylor terms of ``rows`` in one call, for the control
        variates of :mod:`pymc_subsample.kernels.variance.control_variates`.

        Returns an array of shape ``(order + 1, n)``: ``l_i = ll_i(q') - ll_i(q)``,
        ``grad ll_i(c) . (q' - q)`` and, for ``order=2``,
        ``(q' - q)' H_i(c) ((q' - c) + (q - c))``, ``c`` the centre.
        """
        if order not in (1, 2):
            raise ValueError(f"order must be 1 or 2, got {order!r}.")
        return self._on_rows(f"cv{order}", [q, q_prop, center], rows)

    def loglik_sum(self, q, rows) -> float:
        """Sum of the rows' log-likelihood."""
        return self._on_rows("ll_sum", [q], rows)

    def loglik_sum_grad(self, q, rows):
        """Sum of the rows' log-likelihood and its gradient with respect to ``q``."""
        return self._on_rows("ll_sum_grad", [q], rows)

    def loglik_hessian(self, q, rows):
        """Sum of the rows' log-likelihood, its gradient and its Hessian with respect to ``q``."""
        return self._on_rows("sum_hess", [q], rows)

    def loglik_rows_grad(self, q, rows, *, chunk: int = 256):
        """Per-row log-likelihood ``(n,)`` and per-row gradients ``(n, ndim)``."""
        return self._on_row_chunks("row_grad", q, rows, chunk)

    def loglik_rows_grad_pair(self, q, center, rows):
        """Per-row gradients ``(n, ndim)`` at ``q`` and at ``center``, in one call."""
        return self._on_rows("row_grad_pair", [q, center], rows)

    def loglik_rows_hessian(self, q, rows, *, chunk: int = 32):
        """Per-row log-likelihood, gradients ``(n, ndim)`` and Hessians ``(n, ndim, ndim)``.

        Each row's Hessian is the reverse-mode Hessian of a one-row batch (``sum_hess``),
        one call per row. (A second forward derivative vectorised over the rows gives the
        same numbers but takes minutes to build for many likelihoods: a bounded
        transform, a mixture, an ``MvNormal`` per row.) For reference computations and
        diagnostics; the sampling loop never needs per-row Hessians. ``chunk`` is the
        number of rows per call of the gradients.
        """
        rows = np.asarray(rows, dtype=np.int64)
        vals, grads = self.loglik_rows_grad(q, rows, chunk=chunk)
        hess = np.empty((rows.size, self.ndim, self.ndim))
        for k in range(rows.size):
            hess[k] = self.loglik_hessian(q, rows[k : k + 1])[2]
        return vals, grads, hess

    def full_loglik(self, q, *, chunk: int = _DEFAULT_CHUNK) -> float:
        """Sum of all N rows' log-likelihood, in chunks (bounded memory)."""
        return self._on_all_rows("ll_sum", [q], chunk)

    def full_loglik_diff(self, q, q_prop, *, chunk: int = _DEFAULT_CHUNK) -> float:
        """``sum_i l_i`` over all N rows (the exact MH log-likelihood ratio), in chunks."""
        return self._on_all_rows("ll_diff", [q, q_prop], chunk)

    def full_loglik_grad(self, q, *, chunk: int = _DEFAULT_CHUNK):
        """Sum of all rows' log-likelihood and its gradient, in chunks."""
        return self._on_all_rows("ll_sum_grad", [q], chunk)

    def full_loglik_hessian(self, q, *, chunk: int = 4096):
        """Sum of all rows' log-likelihood, gradient and Hessian, in chunks."""
        return self._on_all_rows("sum_hess", [q], chunk)

    def logp(self, q, *, chunk: int = _DEFAULT_CHUNK) -> float:
        """Full model log density at ``q``: ``prior(q) + full_loglik(q)``."""
        return self.prior(q) + self.full_loglik(q, chunk=chunk)

    # ------------------------------------------------------------------ passes over the data
    #: passes over at least this many rows show a progress bar during a step's set-up
    PROGRESS_ROWS = 5_000_000

    _bar = None

    @contextlib.contextmanager
    def showing_progress(self, enabled=None, label="set-up"):
        """Within the block, each full pass over the rows (mode search, sums, bounds)
        shows a progress bar: ``enabled=None`` for passes over ``PROGRESS_ROWS`` rows or
        more, True / False to force it. The bars are removed when the block ends."""
        show = self.n_rows >= self.PROGRESS_ROWS if enabled is None else bool(enabled)
        if not show:
            yield
            return
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("{task.description}"), BarColumn(),
                   TextColumn("{task.completed:,} / {task.total:,} rows"), TimeElapsedColumn())
        with Progress(*columns, transient=True) as bar:
            self._bar, self._bar_label, self._bar_passes = bar, label, 0
            try:
                yield
            finally:
                self._bar = None

    @contextlib.contextmanager
    def _one_pass(self, chunk):
        """``(ranges, progress)`` of one pass over all rows in chunks of ``chunk`` rows:
        the ``(start, stop)`` ranges, and ``progress(stop)`` to call as each is done (the
        pass's task on the progress bar of :meth:`showing_progress`, if one is active)."""
        chunk = int(chunk)
        if chunk < 1:
            raise ValueError(f"chunk must be a positive number of rows, got {chunk}.")
        n, bar = self.n_rows, self._bar
        ranges = [(s, min(s + chunk, n)) for s in range(0, n, chunk)]
        if bar is None:
            yield ranges, lambda stop: None
            return
        self._bar_passes += 1
        task = bar.add_task(f"{self._bar_label}: pass {self._bar_passes} over the data",
                            total=n)
        try:
            yield ranges, lambda stop: bar.update(task, completed=stop)
        finally:
            bar.remove_task(task)

    def row_ranges(self, chunk):
        """``(start, stop)`` of consecutive chunks covering all rows: one pass over the
        data, shown on the progress bar of :meth:`showing_progress` when one is active."""
        with self._one_pass(chunk) as (ranges, progress):
            for s, e in ranges:
                yield s, e
                progress(e)

    def map_rows(self, fn, consume, chunk: int = 65536):
        """One pass over all rows in parallel (:func:`pymc_subsample.passes.map_chunks`:
        this process's threads, or the configured ``dask.distributed`` client):
        ``fn(start, stop)`` on every chunk of ``chunk`` rows, ``consume(start, stop,
        result)`` in row order in this thread. ``fn`` must be thread-safe: NumPy arithmetic on
        :meth:`gather_slice`, and compiled functions only through a per-thread copy. The
        pass shows on the progress bar like :meth:`row_ranges`."""
        from ..passes import map_chunks

        with self._one_pass(chunk) as (ranges, progress):
            map_chunks(fn, ranges, consume, progress)

