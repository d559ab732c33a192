"""Recognising ordered-logistic and ordered-probit likelihoods for ScalableMH's ``bounds="auto"``.

``pm.OrderedLogistic("y", eta=eta, cutpoints=c, observed=y)`` is a ``Categorical`` whose
``p`` PyMC builds from differences of ``sigmoid(c - eta[:, None])`` (PyMC 5 and 6 alike);
``pm.OrderedProbit`` from ``Phi((c - eta[:, None]) / sigma)`` differences. Their families
in the registry, ``ordered_logistic`` and ``ordered_probit``
(:mod:`pymc_subsample.kernels.families.categorical`), declare the structure
``"ordered"``, whose reader is here (:func:`read_ordered`, used by the registry's
detection, :func:`pymc_subsample.engine.glm.detect_glm`, which builds the
:class:`OrderedSpec` with :func:`ordered_spec`): it finds the ``(N, K-1)`` difference
``c - eta[:, None]`` (or ``eta[:, None] - c``) in the graph of ``p`` and checks
numerically, with test values in place of ``eta`` and ``c``, that ``p`` is the family's
cdf differences of it (so a look-alike graph, or a probit with a sampled ``sigma``,
matches neither family); :func:`ordered_psi` checks it again on sample rows at several
points, where it also reads the probit's fixed ``sigma``.

Row ``i`` depends on ``q`` through ``a_i = c_{y_i} - eta_i`` and ``b_i = c_{y_i-1} - eta_i``.
``eta`` must be affine in ``q``; the cutpoints are data-free and, under the ordered
transform, curved in ``q`` (``c_k = q_0 + sum_{j<=k} exp(q_j)``). The bounds stay in ``q``
(the model's own autodiff gives the Taylor control variates, as for the multinomial
logit of :mod:`pymc_subsample.engine.softmax`), with the exact curvature of the
cutpoints: they must be of the form ``c(q) = c_hat + P (q - q_hat) + B (exp(q_S) -
exp(q_hat_S))``, which covers the ordered transform, a cumulative sum of positive
(log-transformed) increments and fixed or affine cutpoints; this form is found by
differences and verified at random points. Taking predictor coordinates ``v = (beta, c)``
instead would make the rows affine, but would need a second set of control variates in
``v``; the curvature terms in ``q`` are a few closed-form numbers per category.

The constants are the family's ``row_constants``,
:func:`pymc_subsample.kernels.scalable.ordered.ordered_constants` (Cornish et al. 2019,
"Scalable Metropolis-Hastings for exact Bayesian inference with large datasets", eq. 12,
in the whitened region form of the path step factor).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import weakref

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Constant

from .evaluate import thread_copy
from .glm import is_affine, sample_rows
from ..kernels.scalable.bounds import UpperBounds
from ..kernels.families import auto_refusal, get_family

try:
    from pytensor.graph.traversal import ancestors, graph_inputs
except ImportError:  # pragma: no cover
    from pytensor.graph.basic import ancestors, graph_inputs

__all__ = ["OrderedSpec", "cut_structure", "ordered_psi", "ordered_spec", "read_ordered"]


@dataclass
class OrderedSpec:
    """A recognised ``pm.OrderedLogistic`` / ``pm.OrderedProbit``.

    Duck-types what ScalableMH reads of a :class:`~pymc_subsample.engine.glm.GLMSpec`
    (like :class:`~pymc_subsample.engine.softmax.SoftmaxSpec`): ``two_param`` (rows of
    several affine-or-curved scalars: the path step factor), ``in_q`` (bounds and control
    variates in ``q``) and :meth:`row_psi`.
    """

    observed: str
    eta: object  # (N,) expression in value variables
    cut: object  # (K-1,) expression in value variables
    p: object  # (N, K) the Categorical's p
    orientation: int  # +1: the graph has c - eta; -1: eta - c
    family: str  # its registered family: ordered_logistic or ordered_probit
    params: dict = field(default_factory=dict)  # link and sigma, set by ordered_psi
    log_scale: object = None
    compiled: dict = field(default_factory=dict, repr=False)

    two_param = True
    in_q = True

    @property
    def glm_family(self):
        """The registered family of :attr:`family`."""
        return get_family(self.family)

    def row_psi(self, engine, order, q_hat, *, chunk=65536, whiten=None, radius=None):
        """:func:`ordered_psi` of this spec."""
        return ordered_psi(engine, self, order, q_hat, chunk=chunk, whiten=whiten,
                           radius=radius)


def _expand_input(v, axis):
    """``x`` when ``v`` is ``x`` with a new broadcast axis at ``axis`` (``shape_padright``
    or ``padleft``), else None."""
    node = v.owner
    if node is None or type(node.op).__name__ not in ("DimShuffle", "ExpandDims"):
        return None
    x = node.inputs[0]
    if x.type.ndim != 1 or v.type.ndim != 2:
        return None
    order = getattr(node.op, "new_order", None)
    want = (0, "x") if axis == 1 else ("x", 0)
    if order is not None and tuple(order) != want:
        return None
    return x


def _candidates(p):
    """``(eta, cut, orientation)`` for each ``(N, K-1)`` difference of an expanded vector
    and an expanded (or broadcast) row of cutpoints in the graph of ``p``."""
    out = []
    for v in ancestors([p]):
        node = v.owner
        if node is None or type(getattr(node.op, "scalar_op", None)).__name__ != "Sub":
            continue
        if v.type.ndim != 2 or len(node.inputs) != 2:
            continue
        x, z = node.inputs
        for sign, e_in, c_in in ((-1, x, z), (1, z, x)):
            eta = _expand_input(e_in, 1)
            if eta is None:
                continue
            cut = _expand_input(c_in, 0)
            if cut is None and c_in.type.ndim == 1:
                cut = c_in
            if cut is not None:
                out.append((eta, cut, sign))
    return out


#: ``p -> (eta, cut, sign, tests)`` of the graphs read so far (:func:`_probe`): the
#: detection runs several times per step set-up, the test function is compiled once
_PROBED = weakref.WeakKeyDictionary()
#: distances of test predictors from the first test cutpoint (:func:`_test_values`), on
#: both sides: a probit scale from about 0.005 to 50 is read from them
_OFFSETS = np.geomspace(0.01, 20.0, 7)


def _cut_length(cut, p):
    """The number of cutpoints: static, or one less than ``p``'s classes, or evaluated
    (None when unknown)."""
    import pytensor

    if cut.type.shape[0] is not None:
        return int(cut.type.shape[0])
    if p.type.shape[-1] is not None:
        return int(p.type.shape[-1]) - 1
    try:
        return int(pytensor.function([], cut.shape[0], mode="FAST_COMPILE")())
    except Exception:  # noqa: BLE001 - not readable: not the pattern
        return None


def _test_values(k):
    """Two sets of test ``(eta, cut)``, ``k`` increasing cutpoints and predictors about
    the first of them (:data:`_OFFSETS`) and across all (the second set shifted and
    stretched)."""
    out = []
    for j in range(2):
        cut = np.linspace(-1.0, 1.2, k) * (1.0 + 0.3 * j) + 0.2 * j
        eta = np.concatenate([cut[0] - _OFFSETS, cut[0] + _OFFSETS,
                              np.linspace(-2.5, 2.5, 11) + 0.37 * j])
        out.append((eta, cut))
    return out


def _probe(p):
    """``(eta, cut, sign, tests)`` of the first cutpoint difference in the graph of
    ``p`` (:func:`_candidates`), ``tests`` a list of ``(eta, cut, p)`` values of ``p`` as a
    function of test values of ``eta`` and ``cut`` (:func:`_test_values`), or None when the
    graph has no such difference or ``p`` depends on anything else (a sampled probit
    ``sigma``). Cached per graph (:data:`_PROBED`)."""
    if p in _PROBED:
        return _PROBED[p]
    _PROBED[p] = out = _probe_graph(p)
    return out


def _probe_graph(p):
    """:func:`_probe`, uncached."""
    import pytensor
    from pytensor.graph.replace import clone_replace

    found = _candidates(p)
    if not found:
        return None
    eta, cut, sign = found[0]
    k = _cut_length(cut, p)
    if k is None or k < 1:
        return None
    e_test = pt.vector("eta_test", dtype=eta.dtype)
    c_test = pt.vector("cut_test", dtype=cut.dtype)
    try:
        h = clone_replace(pt.as_tensor_variable(p), {eta: e_test, cut: c_test},
                          rebuild_strict=False)
        if any(v is not e_test and v is not c_test and not isinstance(v, Constant)
               for v in graph_inputs([h])):
            return None
        fn = pytensor.function([e_test, c_test], h, mode="FAST_COMPILE")
        tests = [(e, c, np.asarray(fn(e, c), dtype=np.float64)) for e, c in _test_values(k)]
    except Exception:  # noqa: BLE001 - not the pattern: the caller says what is supported
        return None
    return eta, cut, sign, tests


def _scale_fits(family, tests):
    """The scale ``sigma`` with which ``family``'s cdf differences
    (:meth:`~pymc_subsample.kernels.families.categorical.OrderedLogistic.probabilities`)
    reproduce every ``(eta, cut, p)`` of ``tests`` (fitted on the first), or None."""
    if any(np.ndim(t[2]) != 2 or np.shape(t[2])[1] != t[1].size + 1 for t in tests):
        return None  # not K - 1 cutpoints' K classes per row
    eta, cut, p = tests[0][:3]
    sigma = family.fit_scale(eta, cut, p[:, 0])
    if sigma is None:
        return None
    if all(np.allclose(family.probabilities(e, c, sigma), q, rtol=1e-6, atol=1e-9)
           for e, c, q in (t[:3] for t in tests)):
        return sigma
    return None


def read_ordered(params, family):
    """``(eta, cut, sign)`` when the Categorical's ``p`` (``params["p"]``) is built from a
    cutpoint difference ``c - eta[:, None]`` and is ``family``'s cdf differences of it for
    test values of ``eta`` and ``c`` (with one fixed scale, for the probit), else None: the
    ``"ordered"`` structure's reader (:func:`pymc_subsample.engine.glm.
    structure_readers`)."""
    probed = _probe(params[family.link_param])
    if probed is None or _scale_fits(family, probed[3]) is None:
        return None
    return probed[:3]


def ordered_spec(family, params, found, rv, model) -> OrderedSpec:
    """The :class:`OrderedSpec` of the observed ``rv`` from :func:`read_ordered`'s
    ``found``, in value variables."""
    eta, cut, sign = found
    eta, cut, p = model.replace_rvs_by_values([eta, cut, params[family.link_param]])
    return OrderedSpec(rv.name, eta, cut, p, sign, family.name)


def _fns(engine, spec):
    if "fn" not in spec.compiled:
        y = engine.model[spec.observed]
        spec.compiled["fn"] = engine.compile_batch(
            [pt.as_tensor_variable(spec.eta), pt.as_tensor_variable(spec.cut),
             pt.as_tensor_variable(spec.p), y])
    return spec.compiled["fn"]


def _eval(engine, spec, q, data):
    """``(eta (rows,), cut (K-1,), p (rows, K), y (rows,))`` at ``q``."""
    eta, cut, p, y = thread_copy(_fns(engine, spec))(np.asarray(q, dtype=np.float64), *data)
    n = data[0].shape[0]
    eta = np.broadcast_to(np.asarray(eta, dtype=np.float64), (n,))
    return (eta, np.asarray(cut, dtype=np.float64).reshape(-1),
            np.asarray(p, dtype=np.float64), np.asarray(y).reshape(-1))


def _link_scale(engine, spec, q_hat, data):
    """The scale ``sigma`` (1 for the logistic) with which the family's cdf differences
    reproduce the graph's ``p`` on the rows ``data`` at several points, or a refusal."""
    rng = np.random.default_rng(0)
    points = [q_hat] + [q_hat + 0.3 * rng.standard_normal(q_hat.size) for _ in range(2)]
    sigma = _scale_fits(spec.glm_family, [_eval(engine, spec, q, data) for q in points])
    if sigma is None:
        raise ValueError(auto_refusal(
            f"the p of observed '{spec.observed}' is not {spec.family}'s cdf differences "
            "on its rows (with one fixed sigma, for the probit)."))
    return sigma


def cut_structure(cut_fn, q_hat, *, seed: int = 0):
    """``(c_hat, P, B, S)`` with ``c(q) = c_hat + P (q - q_hat) + B (exp(q_S) -
    exp(q_hat_S))`` exactly (up to rounding), found by unit differences in each
    coordinate and verified at three random points; None when ``c`` is not of this form.

    Parameters
    ----------
    cut_fn : callable
        ``q -> c(q)`` (data-free).
    q_hat : ndarray, shape (d,)
    """
    q_hat = np.asarray(q_hat, dtype=np.float64)
    c_hat = cut_fn(q_hat)
    d = q_hat.size
    P = np.zeros((c_hat.size, d))
    Bcols, S = [], []
    e1, em1 = np.e - 1.0, np.exp(-1.0) - 1.0
    for j in range(d):
        step = np.zeros(d)
        step[j] = 1.0
        up, down = cut_fn(q_hat + step) - c_hat, cut_fn(q_hat - step) - c_hat
        tol = 1e-9 * (1.0 + np.abs(c_hat) + np.abs(up) + np.abs(down))
        if np.all(np.abs(up + down) <= tol):
            P[:, j] = up
            continue
        coef = up / e1  # B_j exp(q_hat_j)
        if not np.all(np.abs(coef * em1 - down) <= tol):
            return None
        Bcols.append(coef / np.exp(q_hat[j]))
        S.append(j)
    B = np.column_stack(Bcols) if Bcols else np.zeros((c_hat.size, 0))
    S = np.asarray(S, dtype=np.int64)
    rng = np.random.default_rng(seed)
    for _ in range(3):
        q = q_hat + 0.5 * rng.standard_normal(d)
        model = c_hat + P @ (q - q_hat) + B @ (np.exp(q[S]) - np.exp(q_hat[S]))
        got = cut_fn(q)
        if not np.allclose(got, model, rtol=1e-8, atol=1e-10):
            return None
    return c_hat, P, B, S


def ordered_psi(engine, spec: OrderedSpec, order: int, q_hat, *, chunk: int = 65536,
                whiten=None, radius=None) -> np.ndarray:
    """Per-row constants of ordered-logistic or ordered-probit rows (the family's
    ``row_constants``, :mod:`pymc_subsample.kernels.scalable.ordered`), in one chunked
    pass: each chunk's predictors at ``q_hat`` and their exact Jacobians (``d + 1``
    evaluations of the affine ``eta``), the responses, and the cutpoints' structure
    (once).

    Parameters
    ----------
    engine : LikelihoodEngine
    spec : OrderedSpec
    order : int
        Taylor order ``k`` (1 or 2).
    q_hat : ndarray
    chunk : int
    whiten : ndarray (d, d)
        ``L``; required (the whitened region bounds).
    radius : float
        The region's radius; required.

    Returns
    -------
    ndarray of float32 (rounded up), shape (N,)
    """
    name = spec.observed
    if whiten is None or radius is None:
        raise ValueError(auto_refusal(
            f"observed '{name}' ({spec.family}) has bounds only in the whitened region form "
            "(bound_form='whitened', region='auto' or a radius)."))
    q_hat = np.asarray(q_hat, dtype=np.float64)
    L = np.asarray(whiten, dtype=np.float64)
    rng = np.random.default_rng(0)  # set-up checks, not sampling
    data = sample_rows(engine, rng)
    fam = spec.glm_family
    sigma = _link_scale(engine, spec, q_hat, data)
    spec.params = {"link": fam.link, "sigma": sigma}
    if not is_affine(lambda q: _eval(engine, spec, q, data)[0], q_hat, rng):
        raise ValueError(auto_refusal(
            f"eta of observed '{name}' ({spec.family}) is not affine in the sampled "
            "variables (e.g. a product of two of them)."))
    found = cut_structure(lambda q: _eval(engine, spec, q, data)[1], q_hat)
    if found is None:
        raise ValueError(auto_refusal(
            f"the cutpoints of observed '{name}' are not an affine map plus exp of "
            "sampled variables (use transform=ordered or a cumsum of positive increments)."))
    c_hat, P, B, S = found
    # probit: F((c - eta) / sigma), sigma fixed: the kernels take c / sigma and eta / sigma
    c_hat, P, B = c_hat / sigma, P / sigma, B / sigma
    n, d = engine.n_rows, engine.ndim
    eye = np.eye(d)
    psi = UpperBounds(n)

    def one_chunk(s, e):
        rows = engine.gather_slice(s, e)
        base, _, _, y = _eval(engine, spec, q_hat, rows)
        J = np.column_stack([_eval(engine, spec, q_hat + eye[j], rows)[0] - base
                             for j in range(d)])
        y = np.asarray(y, dtype=np.int64)
        return fam.row_constants(order, y, base / sigma, (J / sigma) @ L, c_hat, P, B,
                                 q_hat[S], S, L, radius)

    engine.map_rows(one_chunk, psi.put, chunk)
    values = psi.values
    if not np.all(np.isfinite(values)):
        raise ValueError(auto_refusal(
            f"the cutpoints of observed '{name}' may meet inside the region (a zero gap "
            "makes the bound infinite); use transform=ordered or a smaller region."))
    return values
