"""Graph surgery: the model's per-row log-likelihood rebuilt on a batch of rows, its
derivatives, and the parameter parts of a linear predictor.

PyTensor does not push an index through ``dot(X, beta)``: indexing the elementwise
log-likelihood still computes all ``N`` rows. :class:`BatchGraph` therefore rebuilds a
model expression with every row-indexed data tensor replaced by a symbolic *batch* input
(leading length unknown); the engine gathers the requested rows with NumPy and feeds
them to the compiled function.

The derivative helpers at the end build the graphs of the engine's compiled functions:
forward mode for per-row derivatives (O(n d) per order), reverse mode for sums.
:func:`lift_gathers` and :func:`parameter_parts` rewrite a linear predictor so that the
parameters enter it through data-free sub-expressions only
(:mod:`pymc_subsample.engine.predictor`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytensor
import pytensor.gradient
import pytensor.tensor as pt
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.replace import clone_replace, vectorize_graph
from pytensor.tensor.basic import Alloc, get_underlying_scalar_constant_value
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.shape import SpecifyShape
from pytensor.tensor.subtensor import AdvancedSubtensor, Subtensor, indices_from_subtensor
from pytensor.tensor.type import TensorType

try:  # PyTensor < 3 has a separate Op for a gather by one index vector
    from pytensor.tensor.subtensor import AdvancedSubtensor1
except ImportError:  # pragma: no cover - PyTensor 3 (PyMC 6)
    AdvancedSubtensor1 = AdvancedSubtensor

from pymc.pytensorf import join_nonshared_inputs

from .analysis import ModelNotSupportedError, RowData

try:  # PyTensor >= 2.31 moved graph traversal helpers
    from pytensor.graph.traversal import ancestors, graph_inputs, io_toposort
except ImportError:  # pragma: no cover - older PyTensor
    from pytensor.graph.basic import ancestors, graph_inputs, io_toposort

__all__ = ["BatchGraph", "JoinedGraph", "grad", "jacobian", "lift_gathers", "parameter_parts",
           "pushforward", "rows_jacobian"]


# ---------------------------------------------------------------- indexing and folding
def first_axis_index(node) -> str | None:
    """How an indexing node treats the first axis of the array it indexes: ``"full"``
    when it keeps it whole (``x[:, :4]``, ``x[:, [0, 2]]``, ``x[..., 1]``), ``"index"``
    when it slices or selects along it (``x[:1000]``, ``x[::2]``, ``x[idx]``), None when
    ``node`` is not an indexing op."""
    op = node.op
    if isinstance(op, AdvancedSubtensor1) and not isinstance(op, AdvancedSubtensor):
        return "index"
    if not isinstance(op, (Subtensor, AdvancedSubtensor)):
        return None
    if getattr(op, "idx_list", None) is not None:
        first = indices_from_subtensor(node.inputs[1:], op.idx_list)[0]
    elif len(node.inputs) > 1:  # PyTensor 2's AdvancedSubtensor: the indices are inputs
        first = node.inputs[1]
        if isinstance(first, Constant) and isinstance(first.data, slice):
            first = first.data
        elif first.owner is not None and type(first.owner.op).__name__ == "MakeSlice":
            first = slice(*(None if isinstance(a, Constant) and a.data is None else a
                            for a in first.owner.inputs))
    else:
        return "full"
    if isinstance(first, slice) and first.start is None and first.stop is None \
            and first.step is None:
        return "full"
    return "index"


def _evaluate(var):
    """The value of ``var``, a graph of constants (and shared variables, at their current
    values), computed node by node with the ops' Python implementations (no compilation)."""
    if var.owner is None:
        return var.data if isinstance(var, Constant) else var.get_value(borrow=True)
    storage = {}
    for v in graph_inputs([var]):
        storage[v] = [v.data if isinstance(v, Constant) else v.get_value(borrow=True)]
    for node in io_toposort(list(storage), [var]):
        for o in node.outputs:
            storage[o] = [None]
        compute = {v: [True] for v in node.inputs}
        compute.update({o: [False] for o in node.outputs})
        node.op.make_py_thunk(node, storage, compute, [])()
    return storage[var][0]


def _structure_key(var, memo):
    """A hashable key of the graph of ``var`` (ops and constants' identities): PyMC's
    ``replace_rvs_by_values`` clones a model expression, so the same data expression
    reaches :meth:`BatchGraph.to_batch` as new variables."""
    key = memo.get(var)
    if key is None:
        if var.owner is None:
            data = getattr(var, "data", None)
            key = ("c", id(data) if data is not None else id(var))
        else:
            node = var.owner
            key = (node.op, tuple(_structure_key(i, memo) for i in node.inputs),
                   node.outputs.index(var))
        memo[var] = key
    return key


def _same_array(a, b) -> bool:
    """``a`` and ``b`` hold the same values (same buffer and layout, or equal)."""
    if a is b:
        return True
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    try:
        same_buffer = (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
                       and a.strides == b.strides)
    except (AttributeError, TypeError):  # pragma: no cover - exotic array types
        same_buffer = False
    return same_buffer or bool(np.array_equal(a, b))


def _describe(var) -> str:
    """A short text of an expression, for messages (``Subtensor{::2}(X)``)."""
    if var.owner is None:
        return _data_label(var)
    args = ", ".join(_describe(i) if i.owner is not None or getattr(i.type, "ndim", 0)
                     else str(getattr(i, "data", i)) for i in var.owner.inputs)
    return f"{var.owner.op}({args})"


def _data_label(var) -> str:
    if getattr(var, "name", None):
        return f"'{var.name}'"
    if isinstance(var, Constant):
        return f"a constant of shape {np.shape(var.data)}"
    if isinstance(var, SharedVariable):
        return f"a shared variable of shape {np.shape(var.get_value(borrow=True))}"
    return str(var)


def _row_indexing_error(data_label, node, extra="") -> ModelNotSupportedError:
    return ModelNotSupportedError(
        f"The model indexes the rows of {data_label} (its first axis, the one the "
        f"subsampling steps gather rows along) with {node.op}{extra}. The steps replace the data "
        "by a batch of rows, so a row selection inside the model would select rows of the "
        "batch, not of the data. Select the rows before building the model (in NumPy: "
        "X = X[:1000] or X[::2], then pass X or pm.Data('X', X)); selections of columns "
        "such as X[:, :4], X[:, [0, 2, 5]] or X[:, 1] are fine. A fixed reordering "
        "(eta[perm] observed as y[perm], or reversed rows) is not needed either: the "
        "likelihood does not depend on the rows' order, so leave it out, or reorder "
        "the arrays in NumPy (X[perm], y[perm]) before building the model."
    )


def _constant_int(var) -> int | None:
    """The integer value of a graph that folds to a constant (e.g. ``[N][0]``), else None."""
    try:
        return int(get_underlying_scalar_constant_value(var))
    except (NotScalarConstantError, TypeError, ValueError):
        return None


def _reshaped_rows(arr, data) -> bool:
    """Whether ``data`` holds the rows of ``arr`` in another row shape (same rows, same
    number of values per row, same values in C order), e.g. ``(N, 1)`` against ``(N,)``."""
    data = np.asarray(data)
    if arr.shape == data.shape or arr.shape[:1] != data.shape[:1] or arr.size != data.size:
        return False
    return arr.dtype == data.dtype and np.array_equal(arr.reshape(data.shape), data)


class BatchGraph:
    """Rebuilds model expressions over a batch of rows.

    Parameters
    ----------
    model : pymc.Model
    rows : list of RowData
        The row-indexed data tensors (:func:`pymc_subsample.engine.analysis.analyse_model`).
    n_rows : int
        ``N``.
    row_dim : str or None
        The observation dim; its length follows the batch size.
    """

    def __init__(self, model, rows, n_rows, row_dim):
        self.rows, self.n_rows = rows, n_rows
        n_batch = rows[0].batch_input.shape[0]
        mapping: dict[Variable, Variable] = {r.variable: r.batch_input for r in rows}
        for name, dl in model.dim_lengths.items():
            if isinstance(dl, SharedVariable) and (
                name == row_dim or (row_dim is None and int(dl.get_value()) == n_rows > 1)
            ):
                mapping[dl] = pt.cast(n_batch, dl.type.dtype)
        #: model variable -> its batch counterpart, extended by every rebuild
        self.mapping = mapping
        #: batch variables whose first axis is the batch's rows -> the data's name
        self._carries = {r.batch_input: r.name for r in rows}
        #: structure key of a constant expression -> (its row data or None, the expression)
        self._folds: dict = {}
        #: the constant expressions mapped to row data (:meth:`fold_constants`)
        self._folded: set = set()
        #: indexing nodes of non-row data already checked (:meth:`_check_data_rows_selection`)
        self._checked: set = set()
        # the model's data expressions, e.g. ``X[:, :4]``: PyMC's logp rewrites fold them
        # into new constants, which the likelihood then reads (found by value here)
        self.fold_constants(list(model.observed_RVs), add=True)

    @property
    def inputs(self) -> list:
        """The batch inputs, in the order of :meth:`LikelihoodEngine.gather`'s arrays."""
        return [r.batch_input for r in self.rows]

    def loglik(self, ll_terms):
        """The per-row log-likelihood of a batch: the observed terms summed over their
        trailing (non-row) axes and over observed variables, rebuilt by :meth:`to_batch`."""
        total = None
        for _, term in ll_terms:
            if term.ndim > 1:
                term = term.sum(axis=tuple(range(1, term.ndim)))
            total = term if total is None else total + term
        return self.to_batch([total])[0]

    def to_batch(self, outputs):
        """Rebuild model expressions over a batch of rows.

        Row-indexed data are replaced by the batch inputs, the row-count dim length and
        constant ``Alloc`` lengths equal to ``N`` by the batch size, and ``SpecifyShape``
        assertions (tied to the old ``N``) are dropped; every other node is rebuilt with
        ``make_node`` so static shapes are inferred again.
        """
        self.row_variables(outputs)
        return self.rebuild(list(outputs), self.mapping)

    def fold_constants(self, outputs, *, add=False):
        """Map the data expressions of ``outputs`` to the row data that hold their values.

        A model reads a column selection of a constant (``X[:, :4]`` of a NumPy array or of
        :func:`pymc_subsample.out_of_core.rows`) through an expression of constants only;
        PyMC's logp rewrites fold it into a new ``(N, 4)`` constant, which is the row data
        of the likelihood, while the model's own expressions (a linear predictor) still
        read ``X`` through the indexing op. Each maximal constant sub-expression of
        ``outputs`` with ``N`` rows is evaluated once and mapped to the row data with the
        same values (so both graphs read the same batch). With ``add``, one that no row
        data holds and that reads no row data becomes row data of its own (at build time);
        otherwise it is refused, since leaving it would keep all ``N`` rows in the batch
        graph.
        """
        n = self.n_rows
        outputs = [o for o in outputs if isinstance(o, Variable)]
        inputs = list(graph_inputs(outputs))
        nodes = io_toposort(inputs, outputs)
        const = {v for v in inputs if isinstance(v, Constant)}
        for node in nodes:
            if all(i in const for i in node.inputs):
                const.update(node.outputs)
        used = set(outputs)  # constant expressions read by non-constant nodes
        for node in nodes:
            if not all(i in const for i in node.inputs):
                used.update(node.inputs)
        memo: dict = {}
        for v in [v for v in used if v in const and v.owner is not None]:
            if v in self.mapping or not isinstance(v.type, TensorType) or v.type.ndim == 0:
                continue
            if v.type.shape[0] not in (None, n) or n <= 1:
                continue
            key = _structure_key(v, memo)
            if key not in self._folds:
                # ``v`` is kept: the key holds the identities of its constants' data
                self._folds[key] = (self._match_fold(v, add), v)
            target = self._folds[key][0]
            if target is not None:
                self.mapping[v] = target.batch_input
                self._folded.add(v)

    def _match_fold(self, var, add):
        """The row data holding the value of the constant expression ``var``
        (:meth:`fold_constants`), or None when it has no row axis, reads row data itself
        (then it is rebuilt over the batch) or cannot be evaluated in Python (then the
        factorisation check of the engine is the guard)."""
        n = self.n_rows
        try:
            value = np.asarray(_evaluate(var))
        except Exception:  # noqa: BLE001 - an op without a Python implementation
            return None
        if value.ndim == 0 or value.shape[0] != n:
            return None
        for r in self.rows:
            if r._array is not None and _same_array(np.asarray(r._array), value):
                return r
        if any(i in self.mapping for i in graph_inputs([var])):
            return None
        if not add:
            sources = [i for i in graph_inputs([var])
                       if isinstance(i, Constant) and i.type.ndim >= 1]
            what = ", ".join(_data_label(i) for i in sources) or "constants"
            raise ModelNotSupportedError(
                f"The model computes data with {n} rows ({_describe(var)}) from {what}, "
                "and the engine cannot match it to the rows of the likelihood. Compute it "
                "with NumPy before building the model and pass the result (an array or a "
                "pm.Data with one row per observation)."
            )
        # build time: the likelihood reads this expression folded in some other form;
        # its rows are gathered from the value computed here
        static = (None,) + tuple(var.type.shape[1:])
        batch = TensorType(var.type.dtype, shape=static)(name=f"rows[{len(self.rows)}]")
        sources = [i for i in graph_inputs([var]) if isinstance(i, Constant) and i.type.ndim]
        label = (f"constant of shape {value.shape} computed from "
                 + (", ".join(_data_label(i) for i in sources) or "constants"))
        row = RowData(label, var, batch, value)
        self.rows.append(row)
        self._carries[batch] = label
        return row

    def _map_if_row_constant(self, var) -> None:
        """Map a constant with ``N`` rows that are all the same (a column of ones: the
        intercept column Bambi multiplies a group effect by, ``a[g] * 1``) and that no row
        data hold to its first row broadcast over the batch: exact for any batch, and
        nothing of length ``N`` is left in the batch graph (PyMC's logp rewrites drop such
        a column from the likelihood, so no row data carry it; compiled over a batch, the
        model's expression would otherwise assert the old length)."""
        data = np.asarray(var.data)
        if data.shape[0] < 2 or not np.all(data == data[:1]):
            return
        n_batch = self.rows[0].batch_input.shape[0]
        first = pt.as_tensor_variable(data[0])
        self.mapping[var] = pt.alloc(first, n_batch, *data.shape[1:])

    def row_variables(self, outputs) -> set:
        """The row-indexed data among the graph inputs of ``outputs``.

        Constants that hold the same rows as a row constant of the likelihood count too
        (and are mapped to its batch input): a model expression (e.g. ``z[g]`` and
        ``sigma[g]`` with a NumPy ``g``) can carry one constant per use of the same array,
        while ``model.logp`` merges them into the one the engine found."""
        n = self.n_rows
        consts = [(r, r._array) for r in self.rows if r._array is not None]
        for var in graph_inputs(list(outputs)):
            if (not isinstance(var, Constant) or var in self.mapping
                    or not isinstance(var.type, TensorType) or var.type.ndim == 0
                    or np.shape(var.data)[:1] != (n,)):
                continue
            for r, arr in consts:
                if arr is var.data or (arr.shape == np.shape(var.data)
                                       and arr.dtype == var.data.dtype
                                       and np.array_equal(arr, var.data)):
                    self.mapping[var] = r.batch_input
                    break
                if _reshaped_rows(arr, var.data):
                    # the same rows in another row shape: a one-column ``X`` of the
                    # model's graph that PyMC's logp rewrites squeezed to ``(N,)``
                    self.mapping[var] = r.batch_input.reshape(
                        (r.batch_input.shape[0], *np.shape(var.data)[1:]))
                    break
            else:
                self._map_if_row_constant(var)
        # data expressions of constants (``X[:, :4]``), folded by PyMC in the likelihood
        self.fold_constants(list(outputs))
        found = {v for v in graph_inputs(list(outputs)) if v in self.mapping}
        if self._folded:
            found |= {v for v in ancestors(list(outputs)) if v in self._folded}
        return found

    def rebuild(self, outputs, mapping, *, rebuild_all=False):
        """The loop of :meth:`to_batch` over the graph of ``outputs``, extending ``mapping``.

        ``OpFromGraph`` nodes whose inputs change (e.g. PyTensor 3's ``logsumexp``, used by
        mixture likelihoods) are inlined: their inner graph is rebuilt with the same rules,
        since their ``make_node`` may pin the old static shape.
        """
        n = self.n_rows
        n_batch = self.rows[0].batch_input.shape[0]
        # the graph below the mapped variables only (what they are computed from, e.g.
        # ``X`` of a folded ``X[:1000]``, is not read)
        leaves = list(graph_inputs(outputs, blockers=mapping))
        leaves += [v for v in ancestors(outputs, blockers=mapping)
                   if v.owner is not None and v in mapping]
        for node in io_toposort(leaves, outputs):
            if node.outputs[0] in mapping:
                continue
            new_inputs = [mapping.get(i, i) for i in node.inputs]
            if not rebuild_all and all(a is b for a, b in zip(new_inputs, node.inputs)):
                self._check_data_rows_selection(node)
                continue
            if first_axis_index(node) == "index" and new_inputs[0] in self._carries:
                raise _row_indexing_error(self._carries[new_inputs[0]], node)
            if isinstance(node.op, SpecifyShape):
                mapping[node.outputs[0]] = new_inputs[0]
                continue
            if isinstance(node.op, OpFromGraph):
                inner = dict(zip(node.op.inner_inputs, new_inputs))
                # every inner node is rebuilt (PyTensor 3 freezes inner graphs)
                new_outputs = self.rebuild(list(node.op.inner_outputs), inner, rebuild_all=True)
                mapping.update(zip(node.outputs, new_outputs))
                continue
            if isinstance(node.op, Alloc) and len(new_inputs) > 1:
                if n > 1 and _constant_int(node.inputs[1]) == n:
                    new_inputs[1] = pt.cast(n_batch, node.inputs[1].type.dtype)
            new_node: Apply = node.op.make_node(*new_inputs)
            for old, new in zip(node.outputs, new_node.outputs):
                mapping[old] = new
            self._carry(node, new_inputs, new_node)
        return [mapping.get(o, o) for o in outputs]

    def _carry(self, node, new_inputs, new_node):
        """Record the rebuilt outputs whose first axis is still the batch's rows: those
        of elementwise ops, of transpositions that keep the first axis first and of
        indexing that keeps it whole (``X[:, :4]``), on such an input."""
        out = new_node.outputs[0]
        if len(new_node.outputs) != 1 or getattr(out.type, "ndim", 0) == 0:
            return
        op = node.op
        if isinstance(op, Elemwise):
            src = [i for i in new_inputs if i in self._carries and i.type.ndim == out.type.ndim]
        elif isinstance(op, DimShuffle):
            src = new_inputs[:1] if op.new_order[:1] == (0,) else []
        elif first_axis_index(node) == "full":
            src = new_inputs[:1]
        else:
            src = []
        src = [i for i in src if i in self._carries]
        if src:
            self._carries[out] = self._carries[src[0]]

    def _check_data_rows_selection(self, node):
        """Refuse a data array that is not row data but is indexed along its first axis
        into ``N`` rows (``pm.Data('X', X)[:1000]`` for 1000 observations): the batch graph
        would keep those ``N`` rows whatever batch it is given."""
        if node in self._checked or first_axis_index(node) != "index":
            return
        self._checked.add(node)
        data = node.inputs[0]
        if (not isinstance(data.type, TensorType) or data.type.ndim == 0
                or getattr(node.outputs[0].type, "ndim", 0) == 0 or self.n_rows <= 1):
            return
        # an expression of data only (constants, pm.Data), indexed by data only: a
        # parameter index is not a selection of rows
        if not all(isinstance(i, (Constant, SharedVariable)) for i in graph_inputs(node.inputs)):
            return
        sources = [i for i in graph_inputs([data]) if isinstance(i.type, TensorType)
                   and i.type.ndim >= 1]
        if not sources:
            return
        try:
            rows = np.shape(_evaluate(node.outputs[0]))[:1]
        except Exception:  # noqa: BLE001 - checked numerically by check_factorises
            return
        if rows == (self.n_rows,):
            what = ", ".join(_data_label(i) + (f" (shape {np.shape(_evaluate(i))})"
                                               if getattr(i, "name", None) else "")
                             for i in sources)
            raise _row_indexing_error(
                what, node, f" to get the {self.n_rows} rows of the observed data")


@dataclass
class JoinedGraph:
    """The batch log-likelihood and the log prior as graphs of the step's raveled ``q``.

    Attributes
    ----------
    q, q_prop : TensorVariable
        The current and the proposed point.
    loglik : TensorVariable
        Per-row log-likelihood of the batch, ``(n,)``.
    prior : TensorVariable
        Log prior (scalar).
    batch : list of TensorVariable
        The batch inputs.
    """

    q: Variable
    q_prop: Variable
    loglik: Variable
    prior: Variable
    batch: list

    @classmethod
    def join(cls, point, loglik, prior, vars, shared, batch):
        """Join the step's variables ``vars`` into one raveled input ``q``."""
        (ll_q, prior_q), q = join_nonshared_inputs(point, [loglik, prior], vars,
                                                   shared_inputs=shared)
        q.name = "q"
        return cls(q, q.type(name="q_prop"), ll_q, prior_q, list(batch))

    def loglik_at(self, point):
        """The per-row log-likelihood with ``q`` replaced by ``point``."""
        return clone_replace(self.loglik, {self.q: point})


def rows_jacobian(f, q):
    """Forward-mode Jacobian of the per-row expression ``f`` (leading row axis) with respect
    to the raveled vector ``q``, with the ``q`` axis appended last: ``(n, ..., d)``.

    One directional derivative per coordinate of ``q``, vectorised over the identity
    matrix: time and memory are O(n d) per order, where a reverse-mode Jacobian of the
    n-vector of row terms would build n x n intermediates (and is slow to compile for
    indexing ops such as a group index).
    """
    v = q.type("direction")
    df = pushforward(f, q, v)  # same shape as f
    jac = vectorize_graph(df, {v: pt.eye(q.shape[0], dtype=q.dtype)})  # (d, n, ...)
    return pt.moveaxis(jac, 0, -1)


def pushforward(f, wrt, direction):
    """Directional derivative ``J_f(wrt) . direction`` (forward mode), same shape as ``f``;
    zero when ``f`` does not depend on ``wrt``."""
    # PyTensor 3 renamed Rop to pushforward (Rop warns); both default to the double-pullback
    push = getattr(pytensor.gradient, "pushforward", None) or pytensor.gradient.Rop
    if wrt not in set(ancestors([f])):
        return pt.zeros_like(f)
    return push(f, wrt, direction)


def grad(cost, wrt):
    """Gradient that is zero, not an error, where ``cost`` does not depend on ``wrt``
    (a ``pm.Flat`` / ``pm.HalfFlat`` prior has a constant log density)."""
    return pytensor.grad(cost, wrt, disconnected_inputs="ignore")


def jacobian(g, wrt, *, vectorize):
    """Jacobian of the vector ``g`` with respect to ``wrt`` (reverse mode), zero where
    ``g`` does not depend on ``wrt``. ``vectorize=False`` loops over the coordinates of
    ``g`` (``scan``): the vectorised form of a likelihood's Hessian compiles
    pathologically slowly for some models (e.g. a group index)."""
    if wrt not in set(ancestors([g])):
        return pt.zeros((wrt.shape[0], wrt.shape[0]), dtype=wrt.dtype)
    return pytensor.gradient.jacobian(g, wrt, disconnected_inputs="ignore",
                                      vectorize=vectorize)


# ---------------------------------------------------------------- parameter parts
def _gather_parts(var):
    """``(source, index)`` when ``var = source[index]`` (one index vector, 1-D source)."""
    own = var.owner
    if own is None or not isinstance(own.op, (AdvancedSubtensor1, AdvancedSubtensor)):
        return None
    if len(own.inputs) != 2:
        return None
    src, idx = own.inputs
    if src.ndim == 1 and idx.ndim == 1 and idx.dtype.startswith(("int", "uint")):
        return src, idx
    return None


def _lift(op, inputs, is_param):
    """``op(p[idx], c) -> op(p, c)[idx]`` for an elementwise op whose inputs are gathers of
    parameter vectors by one shared index, or broadcastable parameter expressions."""
    idx, parts = None, []
    for x in inputs:
        g = _gather_parts(x)
        if g is not None and is_param(g[0]):
            if idx is not None and g[1] is not idx:
                return None
            idx = g[1]
            parts.append(g[0])
        elif is_param(x) and x.ndim <= 1 and all(x.type.broadcastable):
            parts.append(x)
        else:
            return None
    if idx is None:
        return None
    return op(*parts)[idx]


def lift_gathers(eta, is_param):
    """``eta`` with every gather of parameter vectors by one index lifted above the
    elementwise arithmetic on it, ``mu + tau * z[g] -> (mu + tau * z)[g]`` (:func:`_lift`):
    the parameters then enter through data-free sub-expressions (:func:`parameter_parts`).
    ``is_param(var)`` says whether ``var`` is free of row data."""
    mapping = {}
    for node in io_toposort(list(graph_inputs([eta])), [eta]):
        new_inputs = [mapping.get(i, i) for i in node.inputs]
        if isinstance(node.op, Elemwise) and len(node.outputs) == 1:
            lifted = _lift(node.op, new_inputs, is_param)
            if lifted is not None:
                mapping[node.outputs[0]] = lifted
                continue
        if all(a is b for a, b in zip(new_inputs, node.inputs)):
            continue
        new_node = node.op.make_node(*new_inputs)
        mapping.update(zip(node.outputs, new_node.outputs))
    return mapping.get(eta, eta)


def parameter_parts(eta, is_param, value_vars):
    """The maximal data-free sub-expressions of ``eta`` that depend on a value variable."""
    parts, seen, stack = [], set(), [eta]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if is_param(v):
            if any(a in value_vars for a in ancestors([v])):
                parts.append(v)
        elif v.owner is not None:
            stack.extend(v.owner.inputs)
    return parts
