"""The likelihood engine: PyTensor graphs of a PyMC model -> batch log-likelihood functions.

A subsampling step method must evaluate the log-likelihood of a few hundred data rows
in time that does not depend on the number of rows ``N``. PyTensor does not push an
index through ``dot(X, beta)``: indexing the elementwise log-likelihood still computes
all ``N`` rows. The engine therefore rebuilds the model's per-observation log-likelihood
graph with every row-indexed data tensor (observed values, ``pm.Data`` containers,
NumPy covariates, integer group indices) replaced by a symbolic *batch* input, gathers
the requested rows from the original arrays with NumPy (``numpy.memmap`` works: only the
rows asked for are read) and feeds them to the compiled function.

Everything is expressed in the step's raveled, unconstrained space (the ``q`` vector
``astep`` receives). Variables the step does not sample enter as shared variables that
``ArrayStepShared.step`` refreshes before every step, so the engine works inside a
``CompoundStep``.
"""

from __future__ import annotations

import contextlib
import hashlib

from dataclasses import dataclass, field

import numpy as np
import pytensor
import pytensor.gradient
import pytensor.graph.replace
from pytensor.graph.replace import vectorize_graph
import pytensor.tensor as pt
from pytensor.compile.builders import OpFromGraph
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.tensor.basic import Alloc, get_underlying_scalar_constant_value
from pytensor.tensor.exceptions import NotScalarConstantError
from pytensor.tensor.shape import SpecifyShape

import pymc as pm
from pymc.pytensorf import join_nonshared_inputs, make_shared_replacements
from pymc.data import MinibatchIndexRV
from pymc.util import get_value_vars_from_user_vars
from pymc.variational.minibatch_rv import MinibatchRandomVariable

try:  # PyTensor >= 2.31 moved graph traversal helpers
    from pytensor.graph.traversal import ancestors, graph_inputs, io_toposort
except ImportError:  # pragma: no cover - older PyTensor
    from pytensor.graph.basic import ancestors, graph_inputs, io_toposort

__all__ = ["LikelihoodEngine", "ModelNotSupportedError", "RowData"]

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


def _rows_jacobian(f, q):
    """Forward-mode Jacobian of the per-row expression ``f`` (leading row axis) with respect
    to the raveled vector ``q``, with the ``q`` axis appended last: ``(n, ..., d)``.

    One directional derivative (``Rop``) per coordinate of ``q``, vectorised over the
    identity matrix: time and memory are O(n d) per order, where a reverse-mode Jacobian of
    the n-vector of row terms would build n x n intermediates (and is slow to compile for
    indexing ops such as a group index).
    """
    v = q.type("direction")
    # PyTensor 3 renamed Rop to pushforward (Rop warns); both default to the double-pullback
    df = _pushforward(f, q, v)  # same shape as f
    jac = vectorize_graph(df, {v: pt.eye(q.shape[0], dtype=q.dtype)})  # (d, n, ...)
    return pt.moveaxis(jac, 0, -1)


def _pushforward(f, wrt, direction):
    """Directional derivative ``J_f(wrt) . direction`` (forward mode), same shape as ``f``;
    zero when ``f`` does not depend on ``wrt``."""
    push = getattr(pytensor.gradient, "pushforward", None) or pytensor.gradient.Rop
    if wrt not in set(ancestors([f])):
        return pt.zeros_like(f)
    return push(f, wrt, direction)


def _grad(cost, wrt):
    """Gradient that is zero, not an error, where ``cost`` does not depend on ``wrt``
    (a ``pm.Flat`` / ``pm.HalfFlat`` prior has a constant log density)."""
    return pytensor.grad(cost, wrt, disconnected_inputs="ignore")


def _jacobian(g, wrt, **kwargs):
    if wrt not in set(ancestors([g])):
        return pt.zeros((wrt.shape[0], wrt.shape[0]), dtype=wrt.dtype)
    return pytensor.gradient.jacobian(g, wrt, disconnected_inputs="ignore", **kwargs)


def _scan_jacobian(g, q):
    """Jacobian of the vector ``g`` with respect to ``q`` by a loop over the coordinates of
    ``g`` (reverse mode): used for the Hessian of a scalar, whose vectorised form compiles
    pathologically slowly for some models (e.g. a group index)."""
    return _jacobian(g, q, vectorize=False)


#: the ops of PyMC's own minibatching (``pm.Minibatch`` data, ``total_size=``)
_MINIBATCH_OPS = (MinibatchRandomVariable, MinibatchIndexRV)


class ModelNotSupportedError(ValueError):
    """The model cannot be subsampled row by row (the message says why and what to do)."""


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


def _var_label(var) -> str:
    return var.name if getattr(var, "name", None) else f"<unnamed {type(var).__name__} {var.type}>"


def _static_len(var) -> int | None:
    """Length of the leading axis, read without evaluating any graph."""
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


def _constant_int(var) -> int | None:
    """The integer value of a graph that folds to a constant (e.g. ``[N][0]``), else None."""
    try:
        return int(get_underlying_scalar_constant_value(var))
    except (NotScalarConstantError, TypeError, ValueError):
        return None


def _full_shape(var) -> tuple[int, ...]:
    if isinstance(var, Constant):
        return tuple(np.shape(var.data))
    return tuple(np.shape(var.get_value(borrow=True)))


class LikelihoodEngine:
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
                 compile_kwargs=None):
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
        point = model.initial_point()
        if shared is None:
            shared = make_shared_replacements(point, self.vars, model)
        self.shared = shared
        self._point = point

        self._check_observed(model)
        self.row_dim, self.n_rows = self._find_rows(model, row_dim)
        ll_terms = self._loglik_terms(model)
        prior_terms = self._prior_terms(model)
        self.rows = self._find_row_data(model, ll_terms)
        self._check_no_row_latents(model, ll_terms)

        batch_ll = self._batch_graph(model, ll_terms)
        self._build_functions(batch_ll, prior_terms)
        self.ndim = int(sum(np.prod(point[v.name].shape, dtype=int) for v in self.vars))
        if check:
            self._check_factorises()

    # ------------------------------------------------------------------ model analysis
    @staticmethod
    def _check_observed(model):
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

    def _find_rows(self, model, row_dim):
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
        if row_dim is None and len(dims_seen) == 1:
            row_dim = next(iter(dims_seen))
        if row_dim is not None:
            if row_dim not in model.dim_lengths:
                raise ValueError(f"row_dim='{row_dim}' is not a dim of the model.")
        return row_dim, n_rows

    def _loglik_terms(self, model):
        terms = model.logp(vars=model.observed_RVs, sum=False)
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

    def _prior_terms(self, model):
        data_vars = self._data_candidates(model)
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
        return model.logp(vars=prior_vars, jacobian=True, sum=True)

    def _data_candidates(self, model):
        """Constants and shared data of the observed terms with a leading axis of length N."""
        n = self.n_rows
        cands = set()
        terms = [model.rvs_to_values[rv] for rv in model.observed_RVs]
        terms += list(model.observed_RVs)
        for var in graph_inputs(terms + list(model.potentials)):
            if isinstance(var, (Constant, SharedVariable)) and var not in self.shared.values():
                try:
                    if _static_len(var) == n:
                        cands.add(var)
                except Exception:  # RNGs and other non-array shared variables
                    continue
        for rv in model.observed_RVs:
            cands.add(model.rvs_to_values[rv])
        return cands

    def _find_row_data(self, model, ll_terms):
        n = self.n_rows
        dims_of = model.named_vars_to_dims
        data_names = {v: k for k, v in model.named_vars.items()}
        dim_length_vars = set(model.dim_lengths.values())
        obs_values = {model.rvs_to_values[rv]: rv.name for rv in model.observed_RVs}
        rows = []
        transposed = []
        for var in graph_inputs([t for _, t in ll_terms]):
            if not isinstance(var, (Constant, SharedVariable)):
                continue
            if var in self.shared.values() or var in dim_length_vars:
                continue
            if isinstance(var, SharedVariable) and not isinstance(
                getattr(var, "type", None), pt.TensorType
            ):
                continue  # random generators and other non-tensor shared state
            if var.type.ndim == 0:
                continue
            shape = _full_shape(var)
            name = obs_values.get(var) or data_names.get(var) or _var_label(var)
            dims = dims_of.get(name) if name in model.named_vars else None
            if dims and dims[0] is not None and self.row_dim is not None:
                is_row = dims[0] == self.row_dim
            else:
                is_row = shape[0] == n
            if not is_row:
                if n in shape[1:] and n > 1 and not (dims and self.row_dim in dims[:1]):
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
                "data with one observation per leading index (e.g. X of shape (N, k), not (k, N))."
            )
        if not rows:  # pragma: no cover - the observed values are always row data
            raise ModelNotSupportedError("No row-indexed data was found in the likelihood.")
        return rows

    def _check_no_row_latents(self, model, ll_terms):
        n = self.n_rows
        used = set(ancestors([t for _, t in ll_terms]))
        for v in model.value_vars:
            val = self._point[v.name]
            if v in used and np.ndim(val) >= 1 and val.shape[0] == n and n > 1:
                dims = model.named_vars_to_dims.get(model.values_to_rvs[v].name)
                if dims and self.row_dim is not None and dims[0] != self.row_dim:
                    continue
                raise ModelNotSupportedError(
                    f"Free variable '{model.values_to_rvs[v].name}' has one value per data row "
                    f"(shape {val.shape}): a per-row latent variable makes every step O(N) "
                    "(its prior has N terms). Subsampling steps need a parameter vector whose "
                    "size does not grow with the data; integrate the latent variable out."
                )

    # ------------------------------------------------------------------ graph surgery
    def _batch_graph(self, model, ll_terms):
        """The per-row log-likelihood of a batch: the observed terms summed over their
        trailing (non-row) axes and over observed variables, rebuilt by :meth:`to_batch`."""
        total = None
        for rv, term in ll_terms:
            if term.ndim > 1:
                term = term.sum(axis=tuple(range(1, term.ndim)))
            total = term if total is None else total + term
        self._mapping = self._initial_mapping(model)
        return self.to_batch([total])[0]

    def _initial_mapping(self, model):
        n = self.n_rows
        n_batch = self.rows[0].batch_input.shape[0]
        mapping: dict[Variable, Variable] = {r.variable: r.batch_input for r in self.rows}
        for name, dl in model.dim_lengths.items():
            if isinstance(dl, SharedVariable) and (
                name == self.row_dim or (self.row_dim is None and int(dl.get_value()) == n > 1)
            ):
                mapping[dl] = pt.cast(n_batch, dl.type.dtype)
        return mapping

    def to_batch(self, outputs):
        """Rebuild model expressions over a batch of rows.

        Row-indexed data are replaced by the batch inputs, the row-count dim length and
        constant ``Alloc`` lengths equal to ``N`` by the batch size, and ``SpecifyShape``
        assertions (tied to the old ``N``) are dropped; every other node is rebuilt with
        ``make_node`` so static shapes are inferred again.
        """
        self.row_variables(outputs)
        return self._rebuild(list(outputs), self._mapping)

    def row_variables(self, outputs) -> set:
        """The row-indexed data among the graph inputs of ``outputs``.

        Constants that hold the same rows as a row constant of the likelihood count too
        (and are mapped to its batch input): a model expression (e.g. ``z[g]`` and
        ``sigma[g]`` with a NumPy ``g``) can carry one constant per use of the same array,
        while ``model.logp`` merges them into the one the engine found."""
        n = self.n_rows
        consts = [(r, r._array) for r in self.rows if r._array is not None]
        for var in graph_inputs(list(outputs)):
            if (not isinstance(var, Constant) or var in self._mapping or var.type.ndim == 0
                    or np.shape(var.data)[:1] != (n,)):
                continue
            for r, arr in consts:
                if arr is var.data or (arr.shape == np.shape(var.data)
                                       and arr.dtype == var.data.dtype
                                       and np.array_equal(arr, var.data)):
                    self._mapping[var] = r.batch_input
                    break
        return {v for v in graph_inputs(list(outputs)) if v in self._mapping}

    def _rebuild(self, outputs, mapping, *, rebuild_all=False):
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
                new_outputs = self._rebuild(list(node.op.inner_outputs), inner, rebuild_all=True)
                mapping.update(zip(node.outputs, new_outputs))
                continue
            if isinstance(node.op, Alloc) and len(new_inputs) > 1:
                if n > 1 and _constant_int(node.inputs[1]) == n:
                    new_inputs[1] = pt.cast(n_batch, node.inputs[1].type.dtype)
            new_node: Apply = node.op.make_node(*new_inputs)
            for old, new in zip(node.outputs, new_node.outputs):
                mapping[old] = new
        return [mapping.get(o, o) for o in outputs]

    def compile_batch(self, outputs):
        """Compile model expressions as ``f(q, *batch_data)`` in the step's raveled space.

        ``outputs`` are expressions of the model (e.g. a linear predictor) with a leading
        row axis; use with ``f(q, *engine.gather(rows))``.
        """
        # model expressions are written in terms of random variables; the compiled
        # function reads their values (back-transformed from q)
        outputs = self.model.replace_rvs_by_values(list(outputs))
        batch = self.to_batch(outputs)
        joined, q = join_nonshared_inputs(self._point, batch, self.vars, shared_inputs=self.shared)
        return self.function([q, *self._batch_inputs], joined)

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

    def _build_functions(self, batch_ll, prior):
        """Join the step's variables into one raveled input ``q``; compile nothing yet."""
        (ll_q, prior_q), q = join_nonshared_inputs(
            self._point, [batch_ll, prior], self.vars, shared_inputs=self.shared
        )
        q.name = "q"
        q2 = q.type(name="q_prop")
        self._q, self._q2, self._ll_q, self._prior_q = q, q2, ll_q, prior_q
        self._batch_inputs = [r.batch_input for r in self.rows]
        self._compiled = {}

    def _graph(self, key):
        """Inputs and outputs of the function ``key`` (see :meth:`_fn`)."""
        q, q2, ll, prior, batch = self._q, self._q2, self._ll_q, self._prior_q, self._batch_inputs
        if key == "prior":
            return [q], prior
        if key == "prior_grad":
            return [q], [prior, _grad(prior, q)]
        if key == "prior_hess":
            g = _grad(prior, q)
            # vectorised reverse mode: priors have no row indexing, and compile fast this way
            return [q], [prior, g, _jacobian(g, q, vectorize=True)]
        if key == "ll":
            return [q, *batch], ll
        if key in ("ll_pair", "ll_diff"):
            ll2 = pytensor.graph.replace.clone_replace(ll, {q: q2})
            out = pt.stack([ll, ll2]) if key == "ll_pair" else ll2 - ll
            return [q, q2, *batch], out
        if key == "ll_sum":
            return [q, *batch], ll.sum()
        if key == "ll_sum_grad":
            return [q, *batch], [ll.sum(), _grad(ll.sum(), q)]
        if key == "sum_hess":
            g = _grad(ll.sum(), q)
            return [q, *batch], [ll.sum(), g, _scan_jacobian(g, q)]
        if key in ("cv1", "cv2"):
            # Taylor control variates about a centre c (kernels.control_variates): the
            # plain differences l_i = ll_i(q') - ll_i(q), the first-order terms
            # grad ll_i(c) . u and (order 2) u' H_i(c) w, u = q' - q, w = (q' - c) + (q - c),
            # as directional derivatives: no per-row gradient or Hessian is materialised.
            c = q.type("center")
            ll_c = pytensor.graph.replace.clone_replace(ll, {q: c})
            ll2 = pytensor.graph.replace.clone_replace(ll, {q: q2})
            u = q2 - q
            gu = _pushforward(ll_c, c, u)
            outs = [ll2 - ll, gu]
            if key == "cv2":
                outs.append(_pushforward(gu, c, (q2 - c) + (q - c)))
            return [q, q2, c, *batch], pt.stack(outs)
        if key == "row_grad":
            return [q, *batch], [ll, _rows_jacobian(ll, q)]
        if key == "row_hess":
            jac = _rows_jacobian(ll, q)  # (n, d)
            return [q, *batch], [ll, jac, _rows_jacobian(jac, q)]  # (n, d, d)
        raise KeyError(key)  # pragma: no cover

    def _fn(self, key, *, fast_compile=False):
        """The compiled function ``key``, compiled on first use (compiles dominate set-up).

        ``fast_compile=True`` compiles without generating C code (PyTensor's
        ``FAST_COMPILE`` mode: seconds less to build, slower to run), for functions that
        are called a handful of times: the set-up checks and the prior's Hessian.
        """
        cache_key = (key, "fast") if fast_compile else key
        f = self._compiled.get(cache_key)
        if f is None:
            inputs, outputs = self._graph(key)
            f = self.function(inputs, outputs, **({"mode": "FAST_COMPILE"} if fast_compile
                                                  else {}))
            self._compiled[cache_key] = f
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

    def _check_factorises(self):
        """Each row's term must not depend on which other rows are in the batch."""
        n = self.n_rows
        rng = np.random.default_rng(12345)  # fixed: a build-time check, not sampling
        k = min(n, 6)
        rows = rng.choice(n, size=k, replace=False).astype(np.int64)
        # away from the initial point: at e.g. a zero coefficient a cumulative sum or a
        # centring over the batch can vanish and hide the dependence between rows
        q = self.initial_q() + rng.normal(0.0, 0.3, self.ndim)

        def loglik(r):
            return self._call_rarely("ll", q, *self.gather(r))

        try:
            a = loglik(rows)
            b = loglik(rows[::-1])[::-1]
            c = np.array([loglik(rows[i : i + 1])[0] for i in range(min(k, 3))])
        except Exception as err:
            raise ModelNotSupportedError(
                "Evaluating the likelihood on a subset of rows failed, so the model does not "
                "look row-factorising (some data or parameter seems to be tied to all N rows). "
                f"Underlying error: {type(err).__name__}: {err}"
            ) from err
        if a.shape != (k,):
            raise ModelNotSupportedError(
                f"The batch log-likelihood returned shape {a.shape} for {k} rows; the likelihood "
                "does not factorise over the rows of the data."
            )
        ok = np.allclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True) and np.allclose(
            a[: c.size], c, rtol=1e-9, atol=1e-12, equal_nan=True
        )
        if not ok:
            names = ", ".join(rv.name for rv in self.model.observed_RVs)
            raise ModelNotSupportedError(
                f"The likelihood of {names} does not factorise over rows: a row's log-likelihood "
                "changes with the other rows in the batch (e.g. the model uses a sum, mean, "
                "cumulative sum or sort over the data). Subsampling needs one independent "
                "term per row."
            )

    # ------------------------------------------------------------------ public API
    def initial_q(self) -> np.ndarray:
        """The model's initial point of the step's variables, raveled."""
        return np.concatenate([np.ravel(self._point[v.name]) for v in self.vars]).astype(
            np.float64
        )

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

    #: rows read by :meth:`data_fingerprint` (evenly spread; all rows when N is smaller)
    FINGERPRINT_ROWS = 65536

    def data_fingerprint(self) -> tuple:
        """A cheap summary of the row-indexed data's current values: per array its shape,
        dtype and a digest of ``FINGERPRINT_ROWS`` evenly spread rows (O(1) in N).

        Steps keep the one of their construction, to notice a later ``pm.set_data`` (their
        control-variate sums, bounds and Laplace fit were computed on the old values).
        """
        n = self.n_rows
        rows = np.unique(np.linspace(0, n - 1, min(n, self.FINGERPRINT_ROWS)).astype(np.int64))
        out = []
        for r in self.rows:
            arr = r.array()
            part = np.ascontiguousarray(np.take(arr, rows, axis=0)) if arr.shape[:1] == (n,) \
                else np.ascontiguousarray(arr)
            digest = hashlib.blake2b(part.tobytes(), digest_size=16).hexdigest()
            out.append((r.name, tuple(arr.shape), str(arr.dtype), digest))
        return tuple(out)

    def data_arrays(self) -> list[np.ndarray]:
        """The row-indexed data arrays as they are now (no copies)."""
        return [r.array() for r in self.rows]

    def gather_slice(self, start: int, stop: int) -> list[np.ndarray]:
        """The data of rows ``start:stop`` (views for in-memory and memmap arrays)."""
        out = []
        for r in self.rows:
            arr = r.array()[start:stop]
            out.append(np.asarray(arr, dtype=r.batch_input.type.dtype))
        return out

    @staticmethod
    def _as_rows(rows) -> np.ndarray:
        return np.asarray(rows, dtype=np.int64)

    def prior(self, q) -> float:
        """Log prior density of all free variables (with transform Jacobians) plus the
        data-free Potentials, at the step's point ``q`` (other variables as set in
        ``shared``). O(1) in N."""
        return float(self._fn("prior")(np.asarray(q, dtype=np.float64)))

    def prior_and_grad(self, q):
        """Log prior and its gradient with respect to ``q``."""
        v, g = self._fn("prior_grad")(np.asarray(q, dtype=np.float64))
        return float(v), g

    def prior_hessian(self, q):
        """Log prior, gradient and Hessian with respect to ``q``."""
        v, g, h = self._call_rarely("prior_hess", np.asarray(q, dtype=np.float64))
        return float(v), g, h

    def loglik(self, q, rows) -> np.ndarray:
        """Per-row log-likelihood terms (summed over all observed variables) of ``rows``."""
        rows = self._as_rows(rows)
        if rows.size == 0:  # some C ops (e.g. softmax in a mixture) fail on empty input
            return np.zeros(0)
        return self._fn("ll")(np.asarray(q, dtype=np.float64), *self.gather(rows))

    def loglik_pair(self, q, q_prop, rows) -> np.ndarray:
        """Per-row log-likelihood at two points on the same rows, in one call: (2, len(rows))."""
        if np.size(rows) == 0:
            return np.zeros((2, 0))
        return self._fn("ll_pair")(
            np.asarray(q, dtype=np.float64),
            np.asarray(q_prop, dtype=np.float64),
            *self.gather(self._as_rows(rows)),
        )

    def loglik_diff(self, q, q_prop, rows) -> np.ndarray:
        """``l_i = log p(x_i | q_prop) - log p(x_i | q)`` for ``rows``, in one call."""
        if np.size(rows) == 0:
            return np.zeros(0)
        return self._fn("ll_diff")(
            np.asarray(q, dtype=np.float64),
            np.asarray(q_prop, dtype=np.float64),
            *self.gather(self._as_rows(rows)),
        )

    def loglik_diff_taylor(self, q, q_prop, center, rows, order: int) -> np.ndarray:
        """Plain differences and Taylor terms of ``rows`` in one call, for the control
        variates of :mod:`pymc_subsample.kernels.control_variates`.

        Returns an array of shape ``(order + 1, n)``: ``l_i = ll_i(q') - ll_i(q)``,
        ``grad ll_i(c) . (q' - q)`` and, for ``order=2``,
        ``(q' - q)' H_i(c) ((q' - c) + (q - c))``, ``c`` the centre.
        """
        if order not in (1, 2):
            raise ValueError(f"order must be 1 or 2, got {order!r}.")
        if np.size(rows) == 0:
            return np.zeros((order + 1, 0))
        return self._fn(f"cv{order}")(
            np.asarray(q, dtype=np.float64),
            np.asarray(q_prop, dtype=np.float64),
            np.asarray(center, dtype=np.float64),
            *self.gather(self._as_rows(rows)),
        )

    def loglik_sum(self, q, rows) -> float:
        """Sum of the rows' log-likelihood."""
        return float(self._fn("ll_sum")(
            np.asarray(q, dtype=np.float64), *self.gather(self._as_rows(rows))
        ))

    def loglik_sum_grad(self, q, rows):
        """Sum of the rows' log-likelihood and its gradient with respect to ``q``."""
        if np.size(rows) == 0:
            return 0.0, np.zeros(self.ndim)
        v, g = self._fn("ll_sum_grad")(
            np.asarray(q, dtype=np.float64), *self.gather(self._as_rows(rows))
        )
        return float(v), g

    def loglik_hessian(self, q, rows):
        """Sum of the rows' log-likelihood, its gradient and its Hessian with respect to ``q``."""
        v, g, h = self._fn("sum_hess")(
            np.asarray(q, dtype=np.float64), *self.gather(self._as_rows(rows))
        )
        return float(v), g, h

    def loglik_rows_grad(self, q, rows, *, chunk: int = 256):
        """Per-row log-likelihood ``(n,)`` and per-row gradients ``(n, ndim)``."""
        rows = self._as_rows(rows)
        f = self._fn("row_grad")
        q = np.asarray(q, dtype=np.float64)
        vals, grads = [], []
        for s in range(0, rows.size, chunk):
            v, g = f(q, *self.gather(rows[s : s + chunk]))
            vals.append(v)
            grads.append(g)
        if not vals:
            return np.empty(0), np.empty((0, self.ndim))
        return np.concatenate(vals), np.concatenate(grads)

    def loglik_rows_hessian(self, q, rows, *, chunk: int = 32):
        """Per-row log-likelihood, gradients ``(n, ndim)`` and Hessians ``(n, ndim, ndim)``."""
        rows = self._as_rows(rows)
        f = self._fn("row_hess")
        q = np.asarray(q, dtype=np.float64)
        out = [[], [], []]
        for s in range(0, rows.size, chunk):
            for acc, val in zip(out, f(q, *self.gather(rows[s : s + chunk]))):
                acc.append(val)
        if not out[0]:
            d = self.ndim
            return np.empty(0), np.empty((0, d)), np.empty((0, d, d))
        return tuple(np.concatenate(a) for a in out)

    #: passes over at least this many rows show a progress bar during a step's set-up
    PROGRESS_ROWS = 5_000_000

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

    _bar = None

    def row_ranges(self, chunk):
        """``(start, stop)`` of consecutive chunks covering all rows: one pass over the
        data, shown on the progress bar of :meth:`showing_progress` when one is active."""
        chunk = int(chunk)
        if chunk < 1:
            raise ValueError(f"chunk must be a positive number of rows, got {chunk}.")
        n, bar = self.n_rows, self._bar
        task = None
        if bar is not None:
            self._bar_passes += 1
            task = bar.add_task(f"{self._bar_label}: pass {self._bar_passes} over the data",
                                total=n)
        for s in range(0, n, chunk):
            e = min(s + chunk, n)
            yield s, e
            if task is not None:
                bar.update(task, completed=e)
        if task is not None:
            bar.remove_task(task)

    def _chunks(self, chunk):
        for s, e in self.row_ranges(chunk):
            yield self.gather_slice(s, e)

    def full_loglik(self, q, *, chunk: int = _DEFAULT_CHUNK) -> float:
        """Sum of all N rows' log-likelihood, in chunks (bounded memory)."""
        q = np.asarray(q, dtype=np.float64)
        return float(sum(float(self._fn("ll_sum")(q, *data)) for data in self._chunks(chunk)))

    def full_loglik_diff(self, q, q_prop, *, chunk: int = _DEFAULT_CHUNK) -> float:
        """``sum_i l_i`` over all N rows (the exact MH log-likelihood ratio), in chunks."""
        q = np.asarray(q, dtype=np.float64)
        q2 = np.asarray(q_prop, dtype=np.float64)
        return float(sum(float(self._fn("ll_diff")(q, q2, *d).sum()) for d in self._chunks(chunk)))

    def full_loglik_grad(self, q, *, chunk: int = _DEFAULT_CHUNK):
        """Sum of all rows' log-likelihood and its gradient, in chunks."""
        q = np.asarray(q, dtype=np.float64)
        total, grad = 0.0, np.zeros(self.ndim)
        for data in self._chunks(chunk):
            v, g = self._fn("ll_sum_grad")(q, *data)
            total += float(v)
            grad += g
        return total, grad

    def full_loglik_hessian(self, q, *, chunk: int = 4096):
        """Sum of all rows' log-likelihood, gradient and Hessian, in chunks."""
        q = np.asarray(q, dtype=np.float64)
        f = self._fn("sum_hess")
        total, grad, hess = 0.0, np.zeros(self.ndim), np.zeros((self.ndim, self.ndim))
        for data in self._chunks(chunk):
            v, g, h = f(q, *data)
            total += float(v)
            grad += g
            hess += h
        return total, grad, hess

    def logp(self, q, *, chunk: int = _DEFAULT_CHUNK) -> float:
        """Full model log density at ``q``: ``prior(q) + full_loglik(q)``."""
        return self.prior(q) + self.full_loglik(q, chunk=chunk)

    def describe(self) -> str:
        """A short text: rows, row-indexed data, step variables."""
        lines = [f"N = {self.n_rows} rows" + (f" (dim '{self.row_dim}')" if self.row_dim else "")]
        lines += [f"  row data: {r.name}" for r in self.rows]
        lines.append("  step variables: " + ", ".join(v.name for v in self.vars))
        return "\n".join(lines)


