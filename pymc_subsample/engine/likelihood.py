"""The likelihood engine: PyTensor graphs of a PyMC model -> batch log-likelihood functions.

A subsampling step method must evaluate the log-likelihood of a few hundred data rows
in time that does not depend on the number of rows ``N``. The engine finds the model's
row-indexed data (:mod:`~pymc_subsample.engine.analysis`), rebuilds the per-observation
log-likelihood graph on a symbolic batch of rows (:mod:`~pymc_subsample.engine.batch_graph`),
gathers the requested rows from the original arrays with NumPy (``numpy.memmap`` works:
only the rows asked for are read) and feeds them to the compiled functions
(:mod:`~pymc_subsample.engine.evaluate`).

Everything is expressed in the step's raveled, unconstrained space (the ``q`` vector
``astep`` receives). Variables the step does not sample enter as shared variables that
``ArrayStepShared.step`` refreshes before every step, so the engine works inside a
``CompoundStep``.
"""

from __future__ import annotations

import numpy as np

import pymc as pm
from pymc.pytensorf import join_nonshared_inputs, make_shared_replacements
from pymc.util import get_value_vars_from_user_vars

from .analysis import (ModelNotSupportedError, RowScan, analyse_model, check_factorises,
                       data_fingerprint)
from .batch_graph import BatchGraph, JoinedGraph
from .evaluate import BatchFunctions, thread_copy

__all__ = ["LikelihoodEngine"]


class LikelihoodEngine(BatchFunctions):
    """Batch log-likelihood, prior and derivative functions of a row-factorising model.

    Parameters
    ----------
    model : pymc.Model, optional
        The model (default: the one on the context stack).
    vars : list of variables, optional
        The variables the step samples (random variables or their value variables).
        Default: all continuous free variables.
    shared : dict, optional
        ``{value variable: shared variable}`` for the model's other value variables, as
        built by ``pymc.pytensorf.make_shared_replacements`` (the step's own dict, so
        that ``ArrayStepShared.step`` refreshes them). Built here when not given.
    row_dim : str, optional
        Name of the observation dim. Default: the leading dim of the observed variables
        when they have dims, otherwise found by shape.
    check : bool, default True
        Verify at build time, on a few random rows, that every row's log-likelihood is
        the same whatever batch it is evaluated in (a model that does not factorise over
        rows fails this and is refused).
    compile_kwargs : dict, optional
        Keyword arguments for ``pytensor.function`` (see :meth:`function`).

    Attributes
    ----------
    n_rows : int
        Number of rows ``N``.
    ndim : int
        Size of the step's raveled space.
    rows : list of RowData
        The row-indexed data tensors.
    """

    def __init__(self, model=None, vars=None, shared=None, *, row_dim=None, check=True,
                 compile_kwargs=None, initial_point=None):
        model = pm.modelcontext(model)
        self.model = model
        if compile_kwargs is not None and not isinstance(compile_kwargs, dict):
            raise TypeError(
                f"compile_kwargs must be a dict of keyword arguments for pytensor.function "
                f"(e.g. {{'mode': 'FAST_RUN'}}), got {type(compile_kwargs).__name__}."
            )
        self.compile_kwargs = dict(compile_kwargs or {})
        if vars is None:
            vars = model.continuous_value_vars
        self.vars = get_value_vars_from_user_vars(vars, model)
        if not self.vars:
            raise ValueError("The step has no variables to sample: pass vars=[...].")
        if initial_point is not None and all(v.name in initial_point
                                             for v in model.value_vars):
            # a whole point (the step's, already the model's where the user gave none):
            # PyMC's initial point compiles a function each time it is asked for
            point = {v.name: np.asarray(initial_point[v.name], dtype=v.dtype)
                     for v in model.value_vars}
        else:
            point = model.initial_point()
            if initial_point is not None:  # the step's initial_point= (PyMC's convention)
                point = {**point, **{k: np.asarray(v, dtype=point[k].dtype)
                                     for k, v in initial_point.items() if k in point}}
        empty = [v for v in self.vars if np.size(point[v.name]) == 0]
        if empty:
            raise ValueError(
                "Variable(s) " + ", ".join(f"'{model.values_to_rvs[v].name}'" for v in empty)
                + " have no elements (shape (0,) or a zero-length dim): there is nothing to "
                "sample. Check the number of columns of the data they multiply (a design "
                "matrix with 0 columns?), or leave them out of the model."
            )
        if shared is None:
            shared = make_shared_replacements(point, self.vars, model)
        self.shared = shared
        self._point = point

        found = analyse_model(model, shared, point, row_dim)
        self.row_dim, self.n_rows, self.rows = found.row_dim, found.n_rows, found.rows
        self.batch_graph = BatchGraph(model, self.rows, self.n_rows, self.row_dim)
        self._batch_inputs = self.batch_graph.inputs
        batch_ll = self.batch_graph.loglik(found.loglik_terms)
        # one raveled input q for the step's variables; nothing is compiled yet
        self._joined = JoinedGraph.join(point, batch_ll, found.prior, self.vars, shared,
                                        self._batch_inputs)
        self._compiled = {}
        self.ndim = int(sum(np.prod(point[v.name].shape, dtype=int) for v in self.vars))
        self.graph_token = self._graph_token(point)
        if check:
            self.validate()

    def validate(self, *, terms=None, defer: bool = False):
        """The construction's data checks at the initial point: :meth:`check_rows` (every
        row), then :func:`~pymc_subsample.engine.analysis.check_factorises` (a few rows
        alone and in batches). ``terms``, ``defer``: see :meth:`check_rows`; returns its
        :class:`DeferredRowCheck` (None when nothing is deferred). A step that builds its
        engine with ``check=False`` calls this itself, before its set-up reads the data
        otherwise."""
        q = self.initial_q()
        # the data first: a NaN covariate makes PyMC's parameter checks (one switch
        # over the whole batch) fail every row of a batch that holds it
        pending = self.check_rows(q, terms=terms, defer=defer)
        try:
            check_factorises(self.loglik, self.n_rows, q,
                             [rv.name for rv in self.model.observed_RVs])
        except ModelNotSupportedError:
            if pending is not None:
                pending.run()  # bad data is the better explanation: it raises first
            raise
        return pending

    def _graph_token(self, point) -> tuple:
        """What the compiled functions are built from (:meth:`~pymc_subsample.engine.
        evaluate.BatchFunctions.reused`): the model's variables (by identity: the model
        keeps them alive), the step's variables and the shapes of every value variable,
        the shared variables' keys, the row data and their types, ``N`` and the compile
        settings. Two engines with equal tokens compile the same graphs."""
        m = self.model
        ids = lambda xs: tuple(id(x) for x in xs)  # noqa: E731
        return (
            ids(m.free_RVs), ids(m.observed_RVs), ids(m.potentials), ids(m.value_vars),
            ids(self.vars), tuple(sorted(id(k) for k in self.shared)),
            tuple((k, np.shape(v), str(np.asarray(v).dtype)) for k, v in sorted(point.items())),
            tuple((id(r.variable), str(r.batch_input.type)) for r in self.rows),
            self.row_dim, self.n_rows, repr(sorted(self.compile_kwargs.items())),
        )

    def check_rows(self, q, *, chunk: int = 65536, terms=None, defer: bool = False):
        """One pass over all rows (:meth:`map_rows`) that refuses data the steps cannot
        sample: NaN or infinite float data, and rows whose log-likelihood term at ``q``
        is not finite (observations outside the support: NUTS refuses these too). It
        also compares a few rows' terms in the pass with the same rows' terms computed
        alone, which refuses a likelihood that couples the rows (a normaliser over all
        rows) even when small batches leave it saturated.

        ``terms``: optional ``terms(data) -> per-row values``, thread-safe NumPy that is
        finite exactly where the model's term at ``q`` is (a recognised GLM's row terms
        with its support, :meth:`~pymc_subsample.engine.predictor.PredictorMap.
        check_terms`). The pass then runs on it, in parallel (the compiled graph holds
        Python's lock and ran a pass 4x slower on two threads), and the probe rows'
        chunks alone are evaluated by the compiled graph for the comparison.

        ``defer`` (with ``terms``): check the probes' chunks now, and return a
        :class:`DeferredRowCheck` whose scan of the other rows rides on the set-up's first
        pass over all rows (the mode search's), instead of a pass of its own; it raises
        from that pass as this method would. Without anything to defer, None.

        Raises
        ------
        InvalidDataError
            Naming the data or observed variable, the rows and their values.
        ModelNotSupportedError
            When the likelihood does not factorise over rows.
        """
        names = [rv.name for rv in self.model.observed_RVs]
        probes = np.random.default_rng(2468).choice(self.n_rows, size=min(self.n_rows, 4),
                                                    replace=False)
        found = RowScan(self.rows, probes)
        # the C-compiled function (also that of the factorisation check): FAST_COMPILE's
        # Python implementations ran this pass 25x slower (float32 covariates)
        f = self._fn("ll")
        q = np.asarray(q, dtype=np.float64)

        def compiled(data):
            return np.asarray(thread_copy(f)(q, *data))

        evaluate = compiled if terms is None else terms
        if defer and terms is not None:
            pending = DeferredRowCheck(self, q, terms, chunk)
            if self._probe_chunks_clean(q, probes, chunk, compiled, terms, names):
                return pending
            pending.run()  # bad data in a probe's chunk: the full pass names it
            return None

        def one_chunk(start, stop):
            data = self.gather_slice(start, stop)
            with np.errstate(all="ignore"):
                values = evaluate(data)
            return found.scan(start, stop, data, values)

        self.map_rows(one_chunk, lambda start, stop, rec: found.add(rec), chunk)
        found.raise_if_bad(names)
        if terms is not None:
            # the probes' terms in their chunks, from the model's own graph
            probe_scan = RowScan(self.rows, probes)
            for start in sorted({int(r) // chunk * chunk for r in probes}):
                stop = min(start + chunk, self.n_rows)
                data = self.gather_slice(start, stop)
                with np.errstate(all="ignore"):
                    probe_scan.add(probe_scan.scan(start, stop, data, compiled(data)))
            found = probe_scan
        found.check_probes(self.loglik, q, names)

    def _probe_chunks_clean(self, q, probes, chunk, compiled, terms, names) -> bool:
        """:meth:`check_rows` with ``defer``: the probes' chunks scanned with ``terms`` and
        the model's own graph, and the probes compared with their rows computed alone.
        False (nothing compared) when these chunks hold data the full scan must name."""
        probe_scan = RowScan(self.rows, probes)
        for start in sorted({int(r) // chunk * chunk for r in probes}):
            stop = min(start + chunk, self.n_rows)
            data = self.gather_slice(start, stop)
            with np.errstate(all="ignore"):
                own = compiled(data)
                rec = probe_scan.scan(start, stop, data, terms(data))
                if rec[0] or rec[1] or not np.all(np.isfinite(own)):
                    return False
                probe_scan.add(probe_scan.scan(start, stop, data, own))
        probe_scan.check_probes(self.loglik, q, names)
        return True

    # ------------------------------------------------------------------ model expressions
    def to_batch(self, outputs):
        """Model expressions rebuilt over a batch of rows
        (:meth:`~pymc_subsample.engine.batch_graph.BatchGraph.to_batch`)."""
        return self.batch_graph.to_batch(outputs)

    def row_variables(self, outputs) -> set:
        """The row-indexed data among the graph inputs of ``outputs``
        (:meth:`~pymc_subsample.engine.batch_graph.BatchGraph.row_variables`)."""
        return self.batch_graph.row_variables(outputs)

    def compile_batch(self, outputs):
        """Compile model expressions as ``f(q, *batch_data)`` in the step's raveled space.

        ``outputs`` are expressions of the model (e.g. a linear predictor) with a leading
        row axis; use with ``f(q, *engine.gather(rows))``.
        """
        # model expressions are written in terms of random variables; the compiled
        # function reads their values (back-transformed from q)
        outputs = self.model.replace_rvs_by_values(list(outputs))
        joined, q = self.in_q(self.to_batch(outputs))
        return self.compile_over_rows([q], joined)

    def in_q(self, outputs):
        """``(outputs', q)``: graphs of the step's value variables rewritten as graphs of
        one raveled vector ``q`` (the step's unconstrained space), shared variables of
        other steps kept as they are (``pymc.pytensorf.join_nonshared_inputs``)."""
        return join_nonshared_inputs(self._point, list(outputs), self.vars,
                                     shared_inputs=self.shared)

    @property
    def batch_inputs(self) -> list:
        """The symbolic inputs of a batch of rows, one per row-indexed data tensor, in
        the order of :meth:`gather`."""
        return list(self._batch_inputs)

    def compile_over_rows(self, inputs, outputs):
        """Compile ``outputs`` (graphs over a batch of rows, e.g. from :meth:`to_batch`)
        as ``f(*inputs, *engine.gather(rows))``, with the engine's compile settings."""
        return self.function([*inputs, *self._batch_inputs], outputs)

    # ------------------------------------------------------------------ data
    def initial_q(self) -> np.ndarray:
        """The initial point of the step's variables (the step's ``initial_point=``, else
        the model's), raveled."""
        return np.concatenate([np.ravel(self._point[v.name]) for v in self.vars]).astype(
            np.float64
        )

    def var_slices(self) -> dict:
        """``{value variable: its positions in q}``, in the step's raveled order."""
        out, start = {}, 0
        for v in self.vars:
            size = int(np.size(self._point[v.name]))
            out[v] = np.arange(start, start + size)
            start += size
        return out

    def gather(self, rows) -> list[np.ndarray]:
        """The data of the given rows, one array per row-indexed data tensor."""
        out = []
        for r in self.rows:
            arr = r.array()
            if arr.shape[0] != self.n_rows:
                raise ValueError(
                    f"{r.name} now has {arr.shape[0]} rows but the step was built for "
                    f"{self.n_rows}; rebuild the step after pm.set_data changes the row count."
                )
            out.append(np.asarray(np.take(arr, rows, axis=0), dtype=r.batch_input.type.dtype))
        return out

    def gather_slice(self, start: int, stop: int) -> list[np.ndarray]:
        """The data of rows ``start:stop`` (views for in-memory and memmap arrays)."""
        return [np.asarray(r.array()[start:stop], dtype=r.batch_input.type.dtype)
                for r in self.rows]

    #: rows read by :meth:`data_fingerprint` (evenly spread; all rows when N is smaller)
    FINGERPRINT_ROWS = 65536

    def data_fingerprint(self) -> tuple:
        """A cheap summary of the row-indexed data's current values: per array its shape,
        dtype and a digest of ``FINGERPRINT_ROWS`` evenly spread rows (O(1) in N).

        Steps keep the one of their construction, to notice a later ``pm.set_data`` (their
        control-variate sums, bounds and Laplace fit were computed on the old values).
        """
        return data_fingerprint(self.rows, self.n_rows, self.FINGERPRINT_ROWS)

    def data_arrays(self) -> list[np.ndarray]:
        """The row-indexed data arrays as they are now (no copies)."""
        return [r.array() for r in self.rows]

    def describe(self) -> str:
        """A short text: rows, row-indexed data, step variables."""
        lines = [f"N = {self.n_rows} rows" + (f" (dim '{self.row_dim}')" if self.row_dim else "")]
        lines += [f"  row data: {r.name}" for r in self.rows]
        lines.append("  step variables: " + ", ".join(v.name for v in self.vars))
        return "\n".join(lines)


class DeferredRowCheck:
    """The rest of :meth:`LikelihoodEngine.check_rows`'s pass, riding on another pass over
    all rows (``check_rows(..., defer=True)``): that pass calls :meth:`scan` on each of its
    chunks with ``ok``, per row ``0`` where the row's response is in the family's support
    and ``-inf`` elsewhere, and :meth:`add` on the records in row order, then
    :meth:`finish` with whether its own sum of the rows' terms was finite. Any row found
    (NaN or infinite data, a response outside the support) or a non-finite sum runs
    :meth:`run`, the full check, which raises naming the rows (or passes: a sum can
    overflow at a far point of the mode search). A check no pass took runs by itself
    (:meth:`run`) before the set-up goes on."""

    def __init__(self, engine, q, terms, chunk):
        self.engine, self.q, self.terms, self.chunk = engine, q, terms, chunk
        self.found = RowScan(engine.rows, np.empty(0, dtype=np.int64))
        #: what the pass's workers call, ``scan(start, stop, data, ok) -> record``: a
        #: scanner without the row data, so that it pickles small for a client's workers
        self.scan = RowScan((), np.empty(0, dtype=np.int64)).scan
        self.done = False

    def add(self, record):
        self.found.add(record)

    def finish(self, total_finite: bool):
        """After the pass: the full check if anything looked wrong."""
        if self.found.bad_data or self.found.bad_terms or not total_finite:
            self.run()
        self.done = True

    def run(self):
        """The full check (:meth:`LikelihoodEngine.check_rows` with these terms): raises
        :class:`~pymc_subsample.engine.analysis.InvalidDataError` naming the rows."""
        self.done = True
        self.engine.check_rows(self.q, chunk=self.chunk, terms=self.terms)
