"""Predictor coordinates: a GLM's linear predictor as an affine function of a few
parameter expressions, for ScalableMH's bounds on models whose predictor is not affine
in the sampled variables.

A non-centred hierarchical regression, ``eta_i = x_i . beta + mu + tau * z[g_i]`` with
``tau`` sampled on the log scale, is not affine in the step's unconstrained vector ``q``:
its third derivatives in ``log tau`` do not shrink at posterior scale, so per-row bounds
on them are large even though their sum nearly cancels. The same predictor *is* affine in
``v = (beta, mu + tau * z)``: after the group gather is lifted above the elementwise
arithmetic (``mu + tau * z[g] == (mu + tau * z)[g]``), the predictor reads the
parameters only through *parameter parts*, maximal sub-expressions that involve no data.
Replacing each part by a slice of one vector ``v`` gives ``eta_i = a_i . v + o_i``, and
the control variates and bounds of :mod:`pymc_subsample.kernels.variance.predictor` apply with
``v = v(q)`` evaluated exactly at both points of every step.

A Normal or Student-t likelihood with a sampled scale has a second row quantity, the log
scale ``s_i``; its parameter parts (``log sigma``, or ``log sigma[g]`` lifted the same way)
join ``v``, and the rows are functions of ``(eta_i, s_i)``, both affine in ``v``.

The graph work (finding the parts, compiling ``v(q)`` and ``eta(v, rows)``) is here; the
arithmetic is in :mod:`pymc_subsample.kernels.variance.predictor` (no PyMC).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.replace import vectorize_graph

from .batch_graph import lift_gathers, parameter_parts
from .evaluate import thread_copy
from ..passes import map_local
from .glm import detect_glm, is_affine, sample_rows
from ..kernels.scalable.bounds import UpperBounds
from ..kernels.variance.control_variates import TaylorProxy
from ..kernels.families import auto_refusal, get_family
from ..kernels.variance.predictor import (
    predictor_sums,
    remainder_difference,
    row_loglik,
    scale_remainder_difference,
    scale_row_loglik,
    scale_sums,
)

try:
    from pytensor.graph.traversal import ancestors
except ImportError:  # pragma: no cover
    from pytensor.graph.basic import ancestors

__all__ = ["PredictorMap", "PredictorLikelihood", "predictor_map", "covered_predictor_map",
           "curved_predictor_map", "affine_likelihood"]


@dataclass
class PredictorMap:
    """``v(q)`` and ``eta(v, rows)`` of a GLM likelihood (module docstring).

    Attributes
    ----------
    family : str
        One of :data:`pymc_subsample.kernels.variance.predictor.PREDICTOR_FAMILIES`.
    params : dict
        The family's fixed parameters (scalars).
    size : int
        Length ``p`` of ``v``.
    labels : list of str
        What each block of ``v`` is (for messages).
    scale : bool
        The rows also read a log scale ``s_i`` (``family`` in
        :data:`~pymc_subsample.kernels.variance.predictor.SCALE_FAMILIES`).
    """

    family: str
    params: dict
    size: int
    labels: list
    _v_fn: object
    _eta_fn: object
    _y_index: int
    engine: object
    _vjp_fn: object = None
    scale: bool = False
    #: the rows' values at every row of a matrix ``V`` of coordinates (the batch graph
    #: vectorised over ``v``), or None
    _stack_fn: object = None
    #: ``v(q) == q[select]`` exactly (the parts are the sampled variables themselves, as
    #: in an ordinary GLM): indexing instead of a compiled call, several per step
    _select: np.ndarray | None = None
    #: index ``k`` of a row-data array with ``eta = data[k] @ v`` exactly (an ordinary GLM
    #: written ``X @ beta``), whose rows are then the Jacobian, read in place
    #: (:meth:`jacobian`); -1 when there is none; None until :meth:`design_index` looks
    _design: int | None = None

    @property
    def _x(self) -> int | None:
        """:meth:`design_index` when already found, else None (never looks: the search
        itself evaluates the predictors)."""
        return self._design if self._design is not None and self._design >= 0 else None

    def __getstate__(self):
        # spawned workers cannot build the stacked function (its builder is a closure
        # over graphs): built here unless X @ v replaces it
        if self._stack_fn is not None and self._x is None:
            self._stack_fn.get()
        return self.__dict__.copy()

    def v(self, q) -> np.ndarray:
        """The predictor coordinates at ``q``."""
        if self._select is not None:
            return np.asarray(q, dtype=np.float64)[self._select]
        return np.asarray(self._v_fn(np.asarray(q, dtype=np.float64)), dtype=np.float64)

    def eta(self, v, data) -> np.ndarray:
        """Linear predictors of the rows in ``data`` at coordinates ``v``."""
        out = self.channels(v, data)
        return out[0] if self.scale else out

    def channels(self, v, data):
        """The rows' linear predictors at ``v``, or ``(eta, s)`` with a log scale."""
        if self._x is not None:  # eta = X v (design_index)
            return np.asarray(data[self._x], dtype=np.float64) @ np.asarray(
                v, dtype=np.float64)
        out = thread_copy(self._eta_fn)(np.asarray(v, dtype=np.float64), *data)
        rows = (data[0].shape[0],)
        if self.scale:
            return tuple(np.broadcast_to(np.asarray(o, dtype=np.float64), rows) for o in out)
        return np.broadcast_to(np.asarray(out, dtype=np.float64), rows)

    def vjp(self, q, u) -> np.ndarray:
        """``(dv/dq)' u`` at ``q`` (compiled for a ``v(q)`` curved about the initial
        point; for an affine one ``A' u`` with ``A`` by differences)."""
        if self._vjp_fn is None:
            return self.jacobian_v(q).T @ np.asarray(u, dtype=np.float64)
        return np.asarray(self._vjp_fn(np.asarray(q, dtype=np.float64),
                                       np.asarray(u, dtype=np.float64)))

    def y(self, data) -> np.ndarray:
        return np.asarray(data[self._y_index], dtype=np.float64).reshape(-1)

    def jacobian_v(self, q, *, rel_step: float = 1e-6) -> np.ndarray:
        """``dv/dq`` at ``q`` by central differences (used only to whiten ``v``: its
        accuracy affects efficiency, never validity)."""
        q = np.asarray(q, dtype=np.float64)
        cols = []
        for j in range(q.size):
            h = rel_step * max(1.0, abs(q[j]))
            e = np.zeros_like(q)
            e[j] = h
            cols.append((self.v(q + e) - self.v(q - e)) / (2.0 * h))
        return np.column_stack(cols)

    def channels_at(self, points, data):
        """:meth:`channels` at each of ``points`` (a ``(k, p)`` array): one call of the
        batch graph vectorised over ``v`` when there is one. Returns ``(k, rows)``
        arrays (a pair with a log scale)."""
        rows = data[0].shape[0]
        if self._x is not None:  # eta = X v (design_index)
            return np.asarray(points, dtype=np.float64) @ np.asarray(
                data[self._x], dtype=np.float64).T
        fn = None if self._stack_fn is None else self._stack_fn.get()
        if fn is None:
            values = [self.channels(p, data) for p in points]
            channels = list(zip(*values)) if self.scale else [values]
            channels = [np.stack(c) for c in channels]
        else:
            out = thread_copy(fn)(np.asarray(points, dtype=np.float64), *data)
            channels = [np.broadcast_to(np.asarray(o, dtype=np.float64), (len(points), rows))
                        for o in (out if self.scale else [out])]
        return tuple(channels) if self.scale else channels[0]

    def _rows(self, rows, *points):
        """``y`` and the rows' values (:meth:`channels`) at each of ``points``: one gather
        and one evaluation (:meth:`channels_at`)."""
        data = self.engine.gather(np.asarray(rows, dtype=np.int64))
        out = self.channels_at(np.vstack(points), data)
        if self.scale:
            return self.y(data), [tuple(c[k] for c in out) for k in range(len(points))]
        return self.y(data), list(out)

    def remainder_fn(self, v, v_prop, v_hat, order: int):
        """``rows -> R_i(v') - R_i(v)`` (:func:`~pymc_subsample.kernels.variance.predictor.
        remainder_difference`), one gather and three predictor evaluations."""

        diff = scale_remainder_difference if self.scale else remainder_difference

        def remainder(rows):
            y, (e, ep, eh) = self._rows(rows, v, v_prop, v_hat)
            return diff(self.family, y, self.params, e, ep, eh, order)

        return remainder

    def v_is_affine(self, q, *, seed: int = 0) -> bool:
        """Whether ``v(q)`` is affine: then so is the linear predictor in ``q``, and the
        posterior is as Gaussian as an ordinary GLM's."""
        return is_affine(self.v, q, np.random.default_rng(seed))

    def terms_fn(self, v, v_prop, v_hat, order: int):
        """``rows -> (plain, residual)`` differences of the rows' log-likelihood, for the
        minibatch tests: ``l_i(v') - l_i(v)`` and the same minus the Taylor proxy's."""

        def terms(rows):
            y, (e, ep, eh) = self._rows(rows, v, v_prop, v_hat)
            if self.scale:
                plain = (scale_row_loglik(self.family, *ep, y, self.params)[0]
                         - scale_row_loglik(self.family, *e, y, self.params)[0])
                resid = -scale_remainder_difference(self.family, y, self.params, e, ep, eh,
                                                    order)
                return plain, resid
            l0 = row_loglik(self.family, np.stack([e, ep]), y, self.params, derivatives=0)[0]
            resid = -remainder_difference(self.family, y, self.params, e, ep, eh, order)
            return l0[1] - l0[0], resid

        return terms

    def proxy(self, v_hat, order: int):
        """The Taylor proxy about ``v_hat`` (one pass over the data, no bounds)."""
        grad, hess, _ = self.data_pass(v_hat, order, lambda J, base, y, a, b: 0.0)
        return TaylorProxy(np.asarray(v_hat, dtype=np.float64), grad, hess, order)

    def check_affine(self, v_hat, *, seed: int = 0) -> bool:
        """Whether ``eta`` (and the log scale) is affine in ``v``, on 64 random rows
        (set-up check)."""
        rng = np.random.default_rng(seed)  # set-up check, not sampling
        data = sample_rows(self.engine, rng)
        return is_affine(lambda v: np.concatenate(np.atleast_2d(self.channels(v, data))),
                         v_hat, rng)

    def design_index(self) -> int | None:
        """The index in a batch of row data of the array ``X`` with ``eta = X v`` (the
        model's linear predictor is exactly ``X @ beta`` in these coordinates), or None.

        Found once, on 64 rows (the first and last, and random ones: a fixed seed, set-up
        not sampling), from the batch graph: ``eta(0) = 0``, ``eta(e_j)`` equal to column
        ``j`` of ``X`` bit for bit, and ``eta(w) = X w`` at a random ``w``. ``eta`` is
        affine in ``v`` (checked when the map is built), so these determine it."""
        if self._design is None:
            self._design = self._find_design()
        return self._x

    def _find_design(self) -> int:
        if self.scale:
            return -1
        n, p = self.engine.n_rows, self.size
        rng = np.random.default_rng(1357)  # set-up check, not sampling
        rows = np.unique(np.concatenate([np.arange(min(n, 8)), [n - 1], rng.choice(
            n, size=min(n, 55), replace=False)])).astype(np.int64)
        data = self.engine.gather(rows)
        w = rng.standard_normal(p)
        try:  # the compiled linear predictor, point by point (not the stacked graph)
            out = np.asarray([self.channels(x, data) for x in np.vstack(
                [np.zeros(p), np.eye(p), w])], dtype=np.float64)
        except Exception:  # noqa: BLE001 - the differences of the graph stay the reference
            return -1
        if out.shape != (p + 2, rows.size) or np.any(out[0] != 0.0):
            return -1
        cols = out[1:-1].T
        for k, arr in enumerate(data):
            arr = np.asarray(arr)
            if (arr.shape == cols.shape and arr.dtype.kind == "f"
                    and np.array_equal(arr.astype(np.float64, copy=False), cols)
                    and np.allclose(arr @ w, out[-1], rtol=1e-12, atol=1e-12)):
                return k
        return -1

    def jacobian(self, v, data):
        """The rows' values at ``v`` (:meth:`channels`) and their exact Jacobian in ``v``
        (columns ``eta(v + e_j) - eta(v)``: ``eta`` is affine in ``v``); pairs
        ``(eta, s)``, ``(A, B)`` with a log scale.

        For ``eta = X v`` (:meth:`design_index`) the Jacobian is the chunk of ``X``
        itself, read in place, and ``eta = X v`` one matrix-vector product. Otherwise the
        ``p + 1`` points are evaluated in one call of the batch graph vectorised over
        ``v`` (for an intercept and ``X`` one matrix product ``X [v, v + e_1, ...]``,
        which reads the chunk once instead of ``p + 1`` times)."""
        v = np.asarray(v, dtype=np.float64)
        k = self.design_index()
        if k is not None:
            J = np.asarray(data[k], dtype=np.float64)
            return J @ v, J
        out = self.channels_at(np.vstack([v, v + np.eye(self.size)]), data)
        channels = list(out) if self.scale else [out]
        base = [c[0].copy() for c in channels]
        J = [(c[1:] - c[0]).T for c in channels]
        if self.scale:
            return tuple(base), tuple(J)
        return base[0], J[0]

    def chunk_sums(self, v, data, order: int = 2, *, base=None, J=None):
        """``(sum_i l_i, G, H)`` over the rows in ``data`` at ``v`` (``l_i`` up to a
        constant per row; ``H`` None for ``order=1``)."""
        if base is None:
            base, J = self.jacobian(v, data)
        y = self.y(data)
        if self.scale:
            return scale_sums(self.family, y, self.params, *base, *J, order, value=True)
        return predictor_sums(self.family, y, self.params, base, J, order, value=True)

    def chunk_loglik(self, v, data) -> float:
        """``sum_i l_i`` over the rows in ``data`` at ``v`` (up to a constant per row)."""
        y = self.y(data)
        if self.scale:
            return float(scale_row_loglik(self.family, *self.channels(v, data), y,
                                          self.params)[0].sum())
        return float(row_loglik(self.family, self.eta(v, data), y, self.params,
                                derivatives=0)[0].sum())

    def check_terms(self, v):
        """For :meth:`~pymc_subsample.engine.likelihood.LikelihoodEngine.check_rows`:
        ``terms(data)``, the rows' log-likelihood terms at ``v`` (up to a constant per
        row) in NumPy, ``-inf`` where a response is outside the family's support, so
        finite exactly where the model's own terms are; None when the family declares no
        support (:attr:`~pymc_subsample.kernels.families.GLMFamily.support`)."""
        fam = get_family(self.family)
        if fam.support is None:
            return None
        v = np.asarray(v, dtype=np.float64)

        def terms(data):
            y = self.y(data)
            if self.scale:
                l0 = scale_row_loglik(self.family, *self.channels(v, data), y, self.params)[0]
            else:
                l0 = row_loglik(self.family, self.eta(v, data), y, self.params,
                                derivatives=0)[0]
            return np.where(fam.in_support(y), l0, -np.inf)

        return terms

    def support_ok(self, data) -> np.ndarray:
        """Per row ``0`` where the response is in the family's support, ``-inf`` elsewhere
        (the ``ok`` of :class:`~pymc_subsample.engine.likelihood.DeferredRowCheck`; the
        family declares its support)."""
        y = self.y(data)
        return np.where(get_family(self.family).in_support(y), 0.0, -np.inf)

    def full_loglik_diff(self, v, v_prop, *, chunk: int = 65536) -> float:
        """``sum_i l_i(v') - l_i(v)`` over all rows, chunk by chunk in parallel (the
        engine's :meth:`map_rows`; the chunks are added in row order)."""
        eng, total = self.engine, [0.0]

        def one_chunk(start, stop):
            data = eng.gather_slice(start, stop)
            return self.chunk_loglik(v_prop, data) - self.chunk_loglik(v, data)

        def add(start, stop, value):
            total[0] += value

        eng.map_rows(one_chunk, add, chunk)
        return total[0]

    def data_pass(self, v_hat, order: int, chunk_psi, *, chunk: int = 65536):
        """One chunked pass: the proxy sums ``G``, ``H`` in ``v`` and the row constants.

        ``chunk_psi(J, eta_hat, y, start, stop)`` returns a chunk's bound constants from
        the rows' Jacobian ``J`` (``a_i``, exact: ``eta`` is affine in ``v``). With a log
        scale, ``J`` and ``eta_hat`` are pairs: ``(A, B)`` and ``(eta_hat, s_hat)``.
        """
        eng, p = self.engine, self.size
        self.design_index()  # found once, before the pass's threads read it
        sums = [np.zeros(p), np.zeros((p, p)) if order == 2 else None]
        psi = UpperBounds(eng.n_rows)

        def one_chunk(start, stop):
            data = eng.gather_slice(start, stop)
            base, J = self.jacobian(v_hat, data)
            _, g, h = self.chunk_sums(v_hat, data, order, base=base, J=J)
            return g, h, chunk_psi(J, base, self.y(data), start, stop)

        def add(start, stop, result):
            g, h, values = result
            sums[0] += g
            if sums[1] is not None:
                sums[1] += h
            psi.put(start, stop, values)

        eng.map_rows(one_chunk, add, chunk)
        grad, hess, psi = sums[0], sums[1], psi.values
        if hess is not None:
            hess = 0.5 * (hess + hess.T)
        return grad, hess, psi


class PredictorLikelihood:
    """The log-likelihood of a GLM whose predictor coordinates are affine in ``q``
    (``v = v0 + A (q - q0)``), with its gradient and Hessian in ``q`` from the NumPy row
    terms (``A' G``, ``A' H A``): the duck-typed engine that
    :func:`pymc_subsample.center.find_center` searches the mode with, in place of the
    engine's compiled Hessian graph, whose compilation dominated a first use. The prior
    and everything else come from the engine. Values are up to a constant (the same at
    every point)."""

    #: a Hessian pass costs about a gradient pass here (both need the rows' Jacobian), so
    #: the mode search takes exact Newton steps from its warm start
    cheap_hessian = True
    #: a :class:`~pymc_subsample.engine.likelihood.DeferredRowCheck` that rides on the next
    #: pass over all rows (:meth:`_pass`), set by the step; None once taken
    row_check = None

    def __init__(self, engine, vmap, q0):
        self.engine, self.vmap = engine, vmap
        q0 = np.asarray(q0, dtype=np.float64)
        v0 = vmap.v(q0)
        eye = np.eye(q0.size)
        self.A = np.column_stack([vmap.v(q0 + eye[j]) - v0 for j in range(q0.size)])
        vmap.design_index()  # found once here, before the passes' threads read it

    # the rest of the mode search's interface: the engine's
    @property
    def n_rows(self) -> int:
        return self.engine.n_rows

    @property
    def ndim(self) -> int:
        return self.engine.ndim

    @property
    def vars(self):
        return self.engine.vars

    def initial_q(self) -> np.ndarray:
        return self.engine.initial_q()

    def prior(self, q) -> float:
        return self.engine.prior(q)

    def prior_and_grad(self, q):
        return self.engine.prior_and_grad(q)

    def prior_hessian(self, q):
        return self.engine.prior_hessian(q)

    def _pass(self, q, order, chunks=None, rider=None):
        """``(sum_i l_i, gradient, Hessian)`` in ``q``: over ``chunks`` (a list of row
        data), or over all rows by the engine's parallel pass (:meth:`map_rows`).

        ``rider`` (all rows only): an object whose ``chunk(J, base, y, start, stop)`` is
        computed on every chunk from the rows' Jacobian in ``v`` and whose
        ``add(start, stop, result)`` takes the results in row order; its ``sums_v`` is
        set to the pass's gradient and Hessian in ``v`` (see :func:`pymc_subsample.center.
        find_center`'s ``rider=``)."""
        v, vmap = self.vmap.v(q), self.vmap
        acc = [0.0, 0.0, 0.0]
        # the workers get the rider's chunk function only (it pickles: no lock inside)
        rider_chunk = None if rider is None else rider.chunk
        check = self.row_check if chunks is None else None
        self.row_check = None if check is not None else self.row_check
        scan = None if check is None else check.scan

        def add(start, stop, result):
            val, g, h = result[:3]
            acc[0], acc[1] = acc[0] + val, acc[1] + g
            acc[2] = acc[2] + h if order == 2 else None
            if rider is not None:
                rider.add(start, stop, result[3])
            if check is not None:
                check.add(result[-1])

        def one_chunk(data, start=0, stop=0):
            base, J = vmap.jacobian(v, data)
            out = vmap.chunk_sums(v, data, order, base=base, J=J)
            if rider_chunk is not None:
                out = (*out, rider_chunk(J, base, vmap.y(data), start, stop))
            if scan is not None:
                with np.errstate(all="ignore"):
                    out = (*out, scan(start, stop, data, vmap.support_ok(data)))
            return out

        if chunks is None:
            eng = self.engine
            eng.map_rows(lambda a, b: one_chunk(eng.gather_slice(a, b), a, b), add)
        else:  # a gathered subsample, in memory: this process's threads
            for result in map_local(one_chunk, chunks):
                add(0, 0, result)
        total, grad, hess = acc
        if check is not None:  # raises naming the rows, as the engine's own check does
            check.finish(bool(np.isfinite(total) and np.all(np.isfinite(grad))))
        if hess is not None:
            hess = 0.5 * (hess + hess.T)
        if rider is not None:
            rider.sums_v = (grad, hess)
        return total, self.A.T @ grad, (None if hess is None else self.A.T @ hess @ self.A)

    def loglik_hessian(self, q, rows):
        return self._pass(q, 2, [self.engine.gather(np.asarray(rows, dtype=np.int64))])

    def subsample(self, rows):
        """The log-likelihood of ``rows`` with their data gathered once: an object with
        ``hessian(q)`` (as :meth:`loglik_hessian`) and ``value(q)`` (as
        :meth:`loglik_sum`), for the mode search's warm start."""
        return _Subsample(self, self.engine.gather(np.asarray(rows, dtype=np.int64)))

    def loglik_sum(self, q, rows) -> float:
        data = self.engine.gather(np.asarray(rows, dtype=np.int64))
        return self.vmap.chunk_loglik(self.vmap.v(q), data)

    def full_loglik(self, q) -> float:
        v, eng, parts = self.vmap.v(q), self.engine, []
        eng.map_rows(lambda a, b: self.vmap.chunk_loglik(v, eng.gather_slice(a, b)),
                     lambda a, b, val: parts.append(val))
        return math.fsum(parts)

    def full_loglik_grad(self, q):
        total, grad, _ = self._pass(q, 1)
        return total, grad

    def full_loglik_hessian(self, q, *, rider=None):
        return self._pass(q, 2, rider=rider)


class _Subsample:
    """:meth:`PredictorLikelihood.subsample`: the gathered rows, read in chunks of
    ``CHUNK`` rows (bounded temporaries: the Jacobian and the weighted Gram matrix are
    a few arrays of ``CHUNK x p``)."""

    CHUNK = 65536

    def __init__(self, lik, data):
        n = data[0].shape[0]
        self.lik = lik
        self.chunks = [[d[s:s + self.CHUNK] for d in data] for s in range(0, n, self.CHUNK)]

    def hessian(self, q):
        return self.lik._pass(q, 2, self.chunks)

    def value(self, q) -> float:
        vmap = self.lik.vmap
        v = vmap.v(q)
        return math.fsum(map_local(lambda c: vmap.chunk_loglik(v, c), self.chunks))


def affine_likelihood(engine, spec, q0):
    """``(vmap, PredictorLikelihood)`` when ``spec``'s predictor coordinates cover it and
    are affine in ``q`` about ``q0`` (an ordinary GLM), else ``(None, engine)``."""
    vmap = covered_predictor_map(engine, spec, q0)
    if vmap is None or not vmap.v_is_affine(q0):
        return None, engine
    return vmap, PredictorLikelihood(engine, vmap, q0)


def predictor_map(engine, spec, *, curved_at=None) -> PredictorMap | None:
    """Build the predictor coordinates of ``spec`` (a one-parameter GLM, or a Normal or
    Student-t with a sampled scale), or raise a ValueError saying why the linear predictor
    (or log scale) is not affine in any parameter parts.

    With ``curved_at`` (a point ``q``), return None as soon as ``v(q)`` is found affine
    about it, before the linear predictor is compiled (the callers that only want
    curved predictors skip most of the compilation on an ordinary GLM).

    The compiled functions are built once per model graph (:meth:`~pymc_subsample.
    engine.evaluate.BatchFunctions.reused`): a second step on the same model reuses
    them."""
    if not get_family(spec.family).predictor_coordinates:
        raise ValueError(f"predictor coordinates do not cover the family {spec.family!r}.")
    scale = spec.two_param
    params = {}
    for key, val in spec.params.items():
        arr = np.asarray(val, dtype=np.float64)
        if arr.size != 1:
            raise ValueError(auto_refusal(
                f"observed '{spec.observed}' has a {key} per row; the predictor coordinates "
                "need one value for all rows."))
        params[key] = float(arr.reshape(-1)[0])
    key = ("predictor_map", spec.observed, str(spec.family), scale)
    cached = engine.reused_if_any(key)
    if cached is None:
        analysis = _predictor_parts(engine, spec, scale)
        if curved_at is not None and is_affine(
            analysis[0], np.asarray(curved_at, dtype=np.float64), np.random.default_rng(0)
        ):
            return None
        cached = engine.reused(key, lambda: _compile_predictor(engine, spec, scale, analysis))
    v_fn, eta_fn, stack_fn, vjp_fn, offset, labels, y_index, select = cached
    if curved_at is not None and is_affine(
        v_fn, np.asarray(curved_at, dtype=np.float64), np.random.default_rng(0)
    ):
        return None
    return PredictorMap(spec.family, params, offset, labels, v_fn, eta_fn, y_index, engine,
                        _vjp_fn=vjp_fn, scale=scale, _stack_fn=stack_fn, _select=select)


def _selection(v_fn, ndim: int) -> np.ndarray | None:
    """``idx`` with ``v_fn(q) == q[idx]`` exactly for every ``q`` tried, else None. Two
    points with distinct random entries (a fixed seed: set-up, not sampling) locate
    each coordinate and confirm it."""
    rng = np.random.default_rng(0)
    try:
        first, second = rng.standard_normal(ndim), rng.standard_normal(ndim)
        v1 = np.asarray(v_fn(first), dtype=np.float64)
        idx = np.array([int(np.flatnonzero(first == x)[0]) if np.any(first == x) else -1
                        for x in v1], dtype=np.int64)
        if idx.size == 0 or np.any(idx < 0):
            return None
        if not np.array_equal(np.asarray(v_fn(second), dtype=np.float64), second[idx]):
            return None
    except Exception:  # noqa: BLE001 - the compiled function stays the reference
        return None
    return idx


def _predictor_parts(engine, spec, scale):
    """``(v_fn, q, flat, shapes, parts, channels)``: the parameter parts of the linear
    predictor (and log scale) and ``v(q)`` compiled (:func:`predictor_map`)."""
    model = engine.model
    data_vars = engine.row_variables(
        [pt.as_tensor_variable(x) for x in (spec.eta, spec.log_scale) if x is not None])
    value_vars = set(model.value_vars)

    def is_param(var):
        return not any(a in data_vars for a in ancestors([var]))

    channels = [lift_gathers(pt.as_tensor_variable(x), is_param)
                 for x in ([spec.eta, spec.log_scale] if scale else [spec.eta])]
    parts = []
    for x in channels:
        parts += [p for p in parameter_parts(x, is_param, value_vars)
                  if not any(p is o for o in parts)]
    if not parts:
        raise ValueError(
            f"ScalableMH: the linear predictor of '{spec.observed}' depends on no sampled "
            "variable.")
    (flat, *shapes), q = engine.in_q(
        [pt.concatenate([pt.flatten(p) for p in parts])]
        + [pt.as_tensor_variable(p.shape) for p in parts])
    v_fn = pytensor.function([q], flat)
    v_fn.trust_input = True
    return v_fn, q, flat, shapes, parts, channels


class LazyFunction:
    """A compiled function built on its first :meth:`get` (under a lock: the passes'
    threads may ask at once), or None when it cannot be built (e.g. a graph that
    ``vectorize_graph`` does not take). Pickles as what was built so far (None if
    nothing: the builder is a closure over graphs)."""

    def __init__(self, build):
        self._build, self._fn, self._failed = build, None, False
        self._lock = threading.Lock()

    @property
    def built(self) -> bool:
        return self._fn is not None or self._failed

    def get(self):
        if not self.built and self._build is not None:
            with self._lock:
                if not self.built:
                    try:
                        self._fn = self._build()
                    except Exception:  # noqa: BLE001 - callers fall back without it
                        self._failed = True
        return self._fn

    def __getstate__(self):
        return {"_fn": self._fn, "_failed": self._fn is None}

    def __setstate__(self, state):
        self.__init__(None)
        self._fn, self._failed = state["_fn"], state["_failed"]


def _compile_predictor(engine, spec, scale, analysis):
    """The compiled functions of :class:`PredictorMap` and its sizes: ``(v_fn, eta_fn,
    stack_fn, vjp_fn, size, labels, y_index, select)`` (``select``: :func:`_selection`); ``vjp_fn`` only when ``v(q)`` is curved
    about the initial point (the surrogate gradient of a curved predictor), ``stack_fn``
    None when the batch graph could not be vectorised over ``v``."""
    v_fn, q, flat, shapes, parts, channels = analysis
    model = engine.model
    value_vars = set(model.value_vars)
    shape_fn = pytensor.function([q], shapes, mode="FAST_COMPILE")  # called once
    q0 = engine.initial_q()
    part_shapes = [tuple(int(s) for s in sh) for sh in shape_fn(q0)]
    sizes = [int(np.prod(sh, dtype=int)) for sh in part_shapes]
    v_in = pt.dvector("v")
    replace, offset = {}, 0
    for part, sh, size in zip(parts, part_shapes, sizes):
        replace[part] = pt.cast(v_in[offset:offset + size].reshape(sh), part.dtype)
        offset += size
    channels_v = engine.batch_graph.rebuild(channels, dict(replace))
    left = [a for a in ancestors(channels_v) if a in value_vars]
    if left:
        raise ValueError(auto_refusal(
            f"the linear predictor of observed '{spec.observed}' reads {str(left[0])[:40]} "
            "outside any data-free parameter expression."))
    batch = engine.to_batch(channels_v)
    eta_fn = engine.compile_over_rows([v_in], batch if scale else batch[0])

    def build_stack():
        V_in = pt.dmatrix("V")
        stacked = vectorize_graph(batch, replace={v_in: V_in})
        return engine.compile_over_rows([V_in], stacked if scale else stacked[0])

    # compiled on first use: an ordinary GLM written X @ beta never needs it
    stack_fn = LazyFunction(build_stack)
    vjp_fn = None
    if not is_affine(v_fn, q0, np.random.default_rng(0)):
        u_in = pt.dvector("u")
        vjp_fn = pytensor.function([q, u_in], pytensor.grad(pt.sum(flat * u_in), q))
        vjp_fn.trust_input = True
    obs_value = model.rvs_to_values[model[spec.observed]]
    y_index = next((k for k, r in enumerate(engine.rows) if r.variable is obs_value), None)
    if y_index is None:
        raise ValueError(
            f"predictor coordinates: the observations of '{spec.observed}' are an "
            "expression of the data (e.g. PyMC's conversion of a file in another dtype), "
            "not a data array.")
    labels = [str(p.name or p.owner.op if p.owner else p) for p in parts]
    return (v_fn, eta_fn, stack_fn, vjp_fn, offset, labels, y_index,
            _selection(v_fn, q0.size))


def covered_predictor_map(engine, spec, q_hat, *, curved_only=False):
    """The predictor map of ``spec``, or None where predictor coordinates do not cover it:
    a family without NumPy row terms (``GLMFamily.predictor_coordinates``: Gamma and
    NegativeBinomial),
    a per-row family parameter, or a linear predictor (or log scale) that is affine in no
    data-free parameter expressions (with ``curved_only``, also when ``v(q)`` is affine
    about ``q_hat``)."""
    if not get_family(spec.family).predictor_coordinates:
        return None
    try:
        vmap = predictor_map(engine, spec, curved_at=q_hat if curved_only else None)
    except ValueError:
        return None
    return vmap if vmap is not None and vmap.check_affine(vmap.v(q_hat)) else None


def curved_predictor_map(engine, q_hat):
    """The predictor map of a one-parameter GLM whose predictor is affine in parameter
    parts but not in ``q`` (a non-centred hierarchical model), or None when the model is
    not such a GLM (anything else keeps the control variates in ``q``)."""
    try:
        spec = detect_glm(engine.model)
    except ValueError:
        return None
    if spec.two_param:
        # ScalableMH only, so far: the minibatch steps' variance check and warnings are
        # not yet validated on far proposals of the log scale (their terms overflow there)
        return None
    return covered_predictor_map(engine, spec, q_hat, curved_only=True)
