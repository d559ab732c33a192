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
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.shape import SpecifyShape
from pytensor.tensor.subtensor import AdvancedSubtensor

try:  # PyTensor < 3 has a separate Op for a gather by one index vector
    from pytensor.tensor.subtensor import AdvancedSubtensor1
except ImportError:  # pragma: no cover - PyTensor 3 (PyMC 6)
    AdvancedSubtensor1 = AdvancedSubtensor

from pymc.pytensorf import join_nonshared_inputs

try:  # PyTensor >= 2.31 moved graph traversal helpers
    from pytensor.graph.traversal import ancestors, graph_inputs, io_toposort
except ImportError:  # pragma: no cover - older PyTensor
    from pytensor.graph.basic import ancestors, graph_inputs, io_toposort

__all__ = ["BatchGraph", "JoinedGraph", "grad", "jacobian", "lift_gathers", "parameter_parts",
           "pushforward", "rows_jacobian"]


def _constant_int(var) -> int | None:
    """The integer value of a graph that folds to a constant (e.g. ``[N][0]``), else None."""
    try:
        return int(get_underlying_scalar_constant_value(var))
    except (NotScalarConstantError, TypeError, ValueError):
        return None


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

    def row_variables(self, outputs) -> set:
        """The row-indexed data among the graph inputs of ``outputs``.

        Constants that hold the same rows as a row constant of the likelihood count too
        (and are mapped to its batch input): a model expression (e.g. ``z[g]`` and
        ``sigma[g]`` with a NumPy ``g``) can carry one constant per use of the same array,
        while ``model.logp`` merges them into the one the engine found."""
        n = self.n_rows
        consts = [(r, r._array) for r in self.rows if r._array is not None]
        for var in graph_inputs(list(outputs)):
            if (not isinstance(var, Constant) or var in self.mapping or var.type.ndim == 0
                    or np.shape(var.data)[:1] != (n,)):
                continue
            for r, arr in consts:
                if arr is var.data or (arr.shape == np.shape(var.data)
                                       and arr.dtype == var.data.dtype
                                       and np.array_equal(arr, var.data)):
                    self.mapping[var] = r.batch_input
                    break
        return {v for v in graph_inputs(list(outputs)) if v in self.mapping}

    def rebuild(self, outputs, mapping, *, rebuild_all=False):
        """The loop of :meth:`to_batch` over the graph of ``outputs``, extending ``mapping``.

        ``OpFromGraph`` nodes whose inputs change (e.g. PyTensor 3's ``logsumexp``, used by
        mixture likelihoods) are inlined: their inner graph is rebuilt with the same rules,
        since their ``make_node`` may pin the old static shape.
        """
        n = self.n_rows
        n_batch = self.rows[0].batch_input.shape[0]
        for node in io_toposort(list(graph_inputs(outputs)), outputs):
            if node.outputs[0] in mapping:
                continue
            new_inputs = [mapping.get(i, i) for i in node.inputs]
            if not rebuild_all and all(a is b for a, b in zip(new_inputs, node.inputs)):
                continue
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
        return [mapping.get(o, o) for o in outputs]


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
