"""Taylor control variates for subsampled log-likelihood differences.

Shared by the three step methods. Pure NumPy; nothing here imports PyMC or PyTensor.

With ``l_i(theta, theta') = log p(x_i | theta') - log p(x_i | theta)`` and a fixed centre
``c`` near the posterior mode, the order-``k`` Taylor proxy of row ``i`` is

    lhat_i(theta) = g_i . d + (k = 2) 1/2 d' H_i d,     d = theta - c,

with ``g_i`` and ``H_i`` the gradient and Hessian of ``log p(x_i | theta)`` at ``c``. The
sum of the data terms splits exactly into a closed form and a residual sum,

    sum_i l_i = [G . u + 1/2 u' H w]  +  sum_i r_i,
    r_i = l_i - g_i . u - 1/2 u' H_i w,     u = theta' - theta,  w = (theta' - c) + (theta - c),

with ``G = sum_i g_i`` and ``H = sum_i H_i`` from one pass over the data (the ``H`` terms
are dropped for ``k = 1``; ``d1' H d1 - d0' H d0 = u' H w`` for symmetric ``H``). The
closed form costs O(d^2) and no data; a minibatch estimates only the residual sum, whose
terms are of order ``|u| |d|^k`` instead of ``|u|``. This is the "proxy" of the
confidence sampler with proxies (Bardenet, Doucet & Holmes 2017, "On Markov chain Monte
Carlo methods for tall data", Sec. 7.2), the difference estimator of Quiroz, Kohn,
Villani & Tran (2019, "Speeding up MCMC by efficient data subsampling", Sec. 2.3), and
the control variates of Cornish et al. (2019, "Scalable Metropolis-Hastings for exact
Bayesian inference with large datasets", Sec. 3.1: ``R_i(theta') - R_i(theta) = -r_i``).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

__all__ = [
    "TaylorProxy", "residuals", "VarianceCheck", "StoredGradients", "importance_weights",
    "ControlVariate", "NoControlVariate", "TaylorControlVariate",
    "PredictorTaylorControlVariate", "SagaControlVariate", "StoreState",
    "ControlVariateKind", "CONTROL_VARIATES", "CONTROL_VARIATE_NAMES",
    "CONTROL_VARIATE_ALIASES", "DEFAULT_CONTROL_VARIATE", "USER_CONTROL_VARIATE",
    "control_variate_kind", "control_variate_label",
]


@dataclass(frozen=True)
class ControlVariateKind:
    """One entry of :data:`CONTROL_VARIATES`: a control variate the steps build by name.

    Attributes
    ----------
    name : str
        The name ``control_variate=`` accepts (its key in :data:`CONTROL_VARIATES`).
    code : int
        The value recorded in the stats as ``setting_control_variate`` (users read it:
        the codes never change).
    taylor_order : int
        Order of the Taylor proxy (0: not a Taylor proxy).
    alias : int or None
        The integer also accepted for it (the Taylor order; None: the name only).
    description : str
        What it is, for the docs and the refusal messages.
    """

    name: str
    code: int
    taylor_order: int
    alias: int | None
    description: str


#: The control variates a step builds by name (``AustereMH(control_variate="taylor2")``);
#: the integers ``0``, ``1`` and ``2`` are kept as aliases of ``"none"``, ``"taylor1"``
#: and ``"taylor2"``. Construction from an entry is the steps' (``steps/setup.py``,
#: ``control_variate``); a :class:`ControlVariate` instance of the user's is the other
#: way in (:data:`USER_CONTROL_VARIATE`).
CONTROL_VARIATES: dict[str, ControlVariateKind] = {kind.name: kind for kind in (
    ControlVariateKind("none", 0, 0, 0, "no control variate: the plain differences "
                       "(the papers' tests, :class:`NoControlVariate`)"),
    ControlVariateKind("taylor1", 1, 1, 1, "first-order Taylor proxies about the centre "
                       "(:class:`TaylorControlVariate`)"),
    ControlVariateKind("taylor2", 2, 2, 2, "second-order Taylor proxies about the centre "
                       "(:class:`TaylorControlVariate`)"),
    ControlVariateKind("saga", -1, 0, None, "stored per-row gradients updated at the rows "
                       "read (El hanchi 2019, Sec. 4-5; :class:`SagaControlVariate`)"),
)}
#: Names accepted by :func:`control_variate_kind`.
CONTROL_VARIATE_NAMES: tuple[str, ...] = tuple(CONTROL_VARIATES)
#: The integer aliases: ``{0: "none", 1: "taylor1", 2: "taylor2"}``.
CONTROL_VARIATE_ALIASES: dict[int, str] = {
    kind.alias: kind.name for kind in CONTROL_VARIATES.values() if kind.alias is not None}
#: What ``control_variate=None`` asks for (where the step can have control variates).
DEFAULT_CONTROL_VARIATE = "taylor2"
#: A :class:`ControlVariate` instance of the user's (not selectable by name).
USER_CONTROL_VARIATE = ControlVariateKind(
    "user", -2, 0, None, "a ControlVariate instance of your own")


def control_variate_kind(value) -> ControlVariateKind:
    """The entry of :data:`CONTROL_VARIATES` that ``value`` names.

    Parameters
    ----------
    value : str or int
        A name (case, ``-`` and ``_`` insensitive: ``"Taylor-2"`` is ``"taylor2"``) or
        an integer alias (``0``, ``1``, ``2``; not a ``bool``).

    Raises
    ------
    InvalidParameterError
        For anything else (the message lists the names and aliases).
    """
    # imported here: this module loads on its own, outside the package (a test checks it)
    from .._validation import InvalidParameterError, is_int

    if is_int(value) and int(value) in CONTROL_VARIATE_ALIASES:
        return CONTROL_VARIATES[CONTROL_VARIATE_ALIASES[int(value)]]
    if isinstance(value, str):
        key = value.strip().lower().replace("-", "").replace("_", "")
        if key in CONTROL_VARIATES:
            return CONTROL_VARIATES[key]
    names = ", ".join(
        f"{name!r}" + (f" (or {kind.alias})" if kind.alias is not None else "")
        for name, kind in CONTROL_VARIATES.items())
    raise InvalidParameterError(
        f"control_variate must be one of {names}, None (the default: "
        f"{DEFAULT_CONTROL_VARIATE!r} where possible) or a ControlVariate instance, "
        f"got {value!r}.")


def control_variate_label(code: int):
    """The recorded ``setting_control_variate`` ``code`` as users name it: the integer
    alias where there is one (``0``, ``1``, ``2``), else the name (``-1``: ``"saga"``);
    an unknown code (``-2``, a user's) is given back as is."""
    for kind in CONTROL_VARIATES.values():
        if kind.code == code:
            return kind.code if kind.alias == kind.code else kind.name
    return code


@dataclass(frozen=True)
class TaylorProxy:
    """The data-free part of the Taylor control variates about a centre.

    Attributes
    ----------
    center : numpy.ndarray
        ``c``, shape ``(d,)``, in the step's unconstrained space.
    grad_sum : numpy.ndarray
        ``G = sum_i grad log p(x_i | c)``, shape ``(d,)``.
    hess_sum : numpy.ndarray or None
        ``H = sum_i hess log p(x_i | c)``, shape ``(d, d)``; None for order 1.
    order : int
        1 or 2.
    """

    center: np.ndarray
    grad_sum: np.ndarray
    hess_sum: np.ndarray | None
    order: int

    def __post_init__(self):
        assert self.order in (1, 2)
        assert self.center.shape == self.grad_sum.shape
        assert self.order == 1 or self.hess_sum.shape == 2 * self.center.shape

    def sum_diff(self, q, q_prop) -> float:
        """``sum_i lhat_i(q') - lhat_i(q)`` over all ``N`` rows, in closed form (O(d^2))."""
        u = q_prop - q
        out = float(self.grad_sum @ u)
        if self.order == 2:
            w = (q_prop - self.center) + (q - self.center)
            out += 0.5 * float(u @ self.hess_sum @ w)
        return out


    def grad(self, q) -> np.ndarray:
        """Gradient of ``sum_i lhat_i`` at ``q``: ``G + H (q - c)`` (``G`` for order 1)."""
        if self.order == 1:
            return self.grad_sum.copy()
        return self.grad_sum + self.hess_sum @ (np.asarray(q, dtype=np.float64) - self.center)


def residuals(terms: np.ndarray) -> np.ndarray:
    """Residual differences ``r_i`` from the engine's Taylor terms.

    Parameters
    ----------
    terms : numpy.ndarray
        Shape ``(k + 1, n)``: ``l_i``, ``g_i . u`` and, for ``k = 2``, ``u' H_i w``
        (:meth:`pymc_subsample.engine.LikelihoodEngine.loglik_diff_taylor`).

    Returns
    -------
    numpy.ndarray
        ``r_i = l_i - g_i . u - 1/2 u' H_i w``, shape ``(n,)``.
    """
    r = terms[0] - terms[1]
    if terms.shape[0] == 3:
        r = r - 0.5 * terms[2]
    return r


class VarianceCheck:
    """Does the proxy reduce the variance of the per-row terms? (online, per chain)

    The control variates help only where each row's Taylor proxy is close to its
    log-likelihood (a concentrated, locally quadratic posterior). Far from the centre, or
    for multimodal or heavy-tailed rows, the residuals can vary more than the plain
    differences. The step feeds both on the first batch of each step; after ``min_steps``
    steps :meth:`verdict` compares the variances by the median over the batches of the
    per-batch ratio residual/plain variance, so that one extreme batch (a transition far
    out in a funnel, say) cannot decide the verdict of a window.

    Parameters
    ----------
    min_steps : int, default 50
        Steps before a verdict is given.
    """

    def __init__(self, min_steps: int = 50):
        self.min_steps = int(min_steps)
        self.reset()

    def reset(self) -> None:
        self.n = 0
        self.var_plain = 0.0
        self.var_resid = 0.0
        self._ratios = []

    def add(self, plain: np.ndarray, resid: np.ndarray) -> None:
        """Record one batch's plain differences and residuals (same rows)."""
        if plain.size < 2:
            return
        vp, vr = _var(plain), _var(resid)
        if math.isfinite(vp) and math.isfinite(vr):
            self.n += 1
            self.var_plain += vp
            self.var_resid += vr
            self._ratios.append(vr / vp if vp > 0.0 else (math.inf if vr > 0.0 else 1.0))

    @property
    def ratio(self) -> float:
        """The median over the batches of residual variance / plain variance (NaN before
        any batch)."""
        if self.n == 0:
            return math.nan
        return float(np.median(self._ratios))

    def verdict(self) -> bool | None:
        """True: the proxy helps; False: it does not (ratio >= 1); None: too early."""
        if self.n < self.min_steps:
            return None
        r = self.ratio
        return None if math.isnan(r) else bool(r < 1.0)


def _var(x: np.ndarray) -> float:
    """Population variance of a batch (``np.var``, without its Python-level overhead:
    this runs once per tuning transition)."""
    d = x - x.mean()
    d *= d  # not a dot product: OpenBLAS threads those over 10^4 elements
    return float(d.sum()) / x.size


@dataclass(frozen=True)
class StoreState:
    """The per-chain state of a :class:`StoredGradients`: the stored gradients ``h``,
    shape ``(N, d)``, and their sum."""

    h: np.ndarray
    total: np.ndarray


class StoredGradients:
    """SAGA-style stored per-row gradients: the control variate of the MH tests, and the
    store of the SAGA gradient estimators
    (:mod:`pymc_subsample.kernels.variance.gradient_estimators`).

    El hanchi (2019, Sec. 4-5) stores, for every row, the gradient ``h_i`` last evaluated
    for it (SAGA, Defazio, Bach & Lacoste-Julien 2014) and keeps their sum ``S`` exact.
    For the difference of the log-likelihood at two points on the same rows, stored
    *values* would cancel; stored *gradients* give a first-order control variate
    ``h_i . u`` (``u = theta' - theta``) whose sum ``S . u`` is known exactly:

        sum_i l_i = S . u + sum_i (l_i - h_i . u).

    The minibatch estimates the second sum; after the step the rows read get their
    gradient at the chain's new state (so ``h`` is fixed whenever a batch is drawn, and
    the estimate is unbiased). Memory ``N d`` floats, kept per chain.

    Parameters
    ----------
    grads : numpy.ndarray
        Initial ``h``, shape ``(N, d)`` (e.g. the gradients at the posterior mode).
    """

    def __init__(self, grads: np.ndarray):
        self._h0 = np.ascontiguousarray(grads, dtype=np.float64)
        self.reset()

    def reset(self) -> None:
        self.h = self._h0.copy()
        self.total = self.h.sum(axis=0)

    def get_state(self) -> StoreState:
        """The chain's store (copied)."""
        return StoreState(self.h.copy(), self.total.copy())

    def set_state(self, state: StoreState) -> None:
        self.h, self.total = state.h.copy(), state.total.copy()

    def sum_diff(self, q, q_prop) -> float:
        """``S . u``: the control variate's exact sum over all rows."""
        return float(self.total @ (q_prop - q))

    def residuals(self, l: np.ndarray, rows: np.ndarray, q, q_prop) -> np.ndarray:
        """``l_i - h_i . u`` for ``rows``."""
        return l - self.h[rows] @ (q_prop - q)

    def update(self, rows: np.ndarray, grads: np.ndarray) -> None:
        """Store the new gradients of ``rows`` and keep the sum exact (a row drawn more
        than once, with replacement, keeps its first value)."""
        rows = np.asarray(rows, dtype=np.int64)
        grads = np.asarray(grads, dtype=np.float64)
        unique, first = np.unique(rows, return_index=True)
        if unique.size != rows.size:
            rows, grads = unique, grads[first]
        self.total += (grads - self.h[rows]).sum(axis=0)
        self.h[rows] = grads


def importance_weights(grad: np.ndarray, grad_moved: np.ndarray) -> np.ndarray:
    """Row weights ``||h_i|| + L_i s`` of El hanchi (2019, Sec. 5.1, the KKT solution).

    ``L_i s``, a row's Lipschitz constant times a typical move, is estimated as
    ``||grad_i(c + delta) - grad_i(c)||`` for one move ``delta`` of posterior scale.

    Parameters
    ----------
    grad, grad_moved : numpy.ndarray
        Per-row gradients at the centre and at the moved point, shape ``(N, d)``.

    Returns
    -------
    numpy.ndarray
        Positive weights, shape ``(N,)`` (a floor of 1e-12 of their mean keeps every row
        reachable, so the importance-sampled estimate stays unbiased).
    """
    w = np.linalg.norm(grad, axis=1) + np.linalg.norm(grad_moved - grad, axis=1)
    return np.maximum(w, 1e-12 * max(float(w.mean()), 1e-300))


# ---------------------------------------------------------------------- the protocol
class ControlVariate(ABC):
    """What a step holds for the per-row terms of its test: a control variate whose sum
    over all ``N`` rows is known exactly, and the rows' residuals about it.

    For ``l_i = log p(x_i | q') - log p(x_i | q)`` and a control variate ``c_i`` with
    ``C = sum_i c_i`` known in closed form, ``sum_i l_i = C + sum_i (l_i - c_i)``: the step
    adds :meth:`sum_diff` (``C``) to its test's data-free part and hands the kernel the
    residuals ``l_i - c_i`` of the rows it reads (Bardenet, Doucet & Holmes 2017, "On
    Markov chain Monte Carlo methods for tall data", Sec. 7.2; Cornish et al. 2019,
    "Scalable Metropolis-Hastings for exact Bayesian inference with large datasets",
    Sec. 3.1, where ``R_i(q') - R_i(q)`` is minus the residual).

    The likelihood back-end ``lik`` is duck-typed (the steps pass their engine): it
    provides ``loglik_diff(q, q_new, rows)`` and ``full_loglik_diff(q, q_new)``, and for
    the Taylor variants ``loglik_diff_taylor`` or a predictor map's terms.

    Adding a control variate: subclass, implement :meth:`setup` (it receives the step's
    engine and the centre), :meth:`sum_diff` and :meth:`terms` (and :meth:`update` /
    :meth:`reset` / :meth:`get_state` / :meth:`set_state` if it changes along a chain),
    and hand an instance to ``AustereMH(control_variate=...)`` or
    ``BarkerMinibatch(control_variate=...)``.
    """

    #: the value recorded as the step's ``setting_control_variate``: the code of its
    #: entry of :data:`CONTROL_VARIATES` (:data:`USER_CONTROL_VARIATE`'s for any other)
    setting: int = USER_CONTROL_VARIATE.code
    #: order of the Taylor proxy (0: not a Taylor proxy; the surrogate gradient needs 1/2)
    taylor_order: int = 0
    #: whether :meth:`update` changes anything (the step then tells it the rows it read)
    stateful: bool = False

    def setup(self, lik, center) -> None:
        """Called once by the step at its set-up: ``lik`` is its engine, ``center`` the
        :class:`~pymc_subsample.center.Center` (the posterior mode, or ``center=``, with
        the full-data gradient ``loglik_grad`` and Hessian ``loglik_hess`` there)."""
        self.lik = lik

    def coordinates(self, q) -> np.ndarray:
        """Where the control variate lives: ``q`` itself, or predictor coordinates."""
        return q

    @abstractmethod
    def sum_diff(self, q, q_new) -> float:
        """``sum_i c_i(q, q_new)`` over all ``N`` rows, exactly."""

    @abstractmethod
    def terms(self, q, q_new, rows) -> tuple[np.ndarray, np.ndarray]:
        """``(plain, residual)`` of ``rows``: ``l_i`` and ``l_i - c_i``."""

    def residuals(self, q, q_new, rows) -> np.ndarray:
        """``l_i - c_i`` of ``rows`` (when the plain differences are not needed)."""
        return self.terms(q, q_new, rows)[1]

    def full_diff(self, q, q_new) -> float:
        """``sum_i l_i`` over all rows (the exact full-data log-likelihood ratio)."""
        return self.lik.full_loglik_diff(q, q_new)

    def grad(self, q) -> np.ndarray:
        """Gradient in ``q`` of the proxy's sum ``sum_i lhat_i`` (Taylor proxies only:
        the data-free surrogate that :class:`~pymc_subsample.proposals.SurrogateHMC`
        follows)."""
        raise ValueError(
            f"{type(self).__name__} has no data-free surrogate to follow: "
            "proposal='surrogate_hmc' needs Taylor control variates (control_variate=1 or 2).")

    def update(self, q_now, rows) -> None:
        """After a transition that read ``rows``: the chain is at ``q_now``."""

    def recenter_at(self, q) -> None:
        """Move the control variate's centre to ``q`` for the rest of the chain (one pass
        over the data; :meth:`reset` undoes it)."""
        raise ValueError(f"{type(self).__name__} has no centre to move: recenter=True "
                         "needs Taylor control variates (control_variate=1 or 2).")

    def reset(self) -> None:
        """Start of a chain: back to the state right after the set-up."""

    def get_state(self):
        """What a chain changed (for PyMC's ``sampling_state``; None: nothing)."""
        return None

    def set_state(self, state) -> None:
        """Restore :meth:`get_state`."""


class NoControlVariate(ControlVariate):
    """No control variate: the residuals are the plain differences (the papers' tests)."""

    setting = CONTROL_VARIATES["none"].code

    def __init__(self, lik):
        self.lik = lik

    def sum_diff(self, q, q_new) -> float:
        return 0.0

    def terms(self, q, q_new, rows):
        plain = self.lik.loglik_diff(q, q_new, rows)
        return plain, plain


class TaylorControlVariate(ControlVariate):
    """Taylor proxies of order 1 or 2 about a centre, in the step's space ``q``: the sum
    in closed form (:class:`TaylorProxy`), the rows' terms from one call of the engine's
    ``loglik_diff_taylor`` (directional derivatives; no per-row Hessian is formed).

    :meth:`recenter_at` moves the proxy for a chain (e.g. to the chain's mean at the end
    of tuning); :meth:`reset` restores the set-up's.
    """

    def __init__(self, lik, proxy: TaylorProxy):
        self.lik, self._proxy0, self.proxy = lik, proxy, proxy
        self.taylor_order = proxy.order
        self.setting = CONTROL_VARIATES[f"taylor{proxy.order}"].code

    @property
    def center(self) -> np.ndarray:
        """The proxy's centre, in the coordinates of :meth:`coordinates`."""
        return self.proxy.center

    def sum_diff(self, q, q_new) -> float:
        return self.proxy.sum_diff(self.coordinates(q), self.coordinates(q_new))

    def terms(self, q, q_new, rows):
        t = self.lik.loglik_diff_taylor(q, q_new, self.proxy.center, rows, self.proxy.order)
        return t[0], residuals(t)

    def grad(self, q) -> np.ndarray:
        return self.proxy.grad(q)

    def recenter_at(self, q) -> None:
        q = np.array(q, dtype=np.float64)
        _, g, h = self.lik.full_loglik_hessian(q)
        order = self.proxy.order
        self.proxy = TaylorProxy(q, g, h if order == 2 else None, order)

    def reset(self) -> None:
        self.proxy = self._proxy0

    def get_state(self) -> TaylorProxy:
        return self.proxy

    def set_state(self, state: TaylorProxy) -> None:
        self.proxy = state


class PredictorTaylorControlVariate(TaylorControlVariate):
    """Taylor proxies in predictor coordinates ``v = v(q)``: a GLM whose linear predictor
    is affine in a few data-free parameter expressions but not in ``q`` (a non-centred
    hierarchical model). ``vmap`` is the predictor map (``v``, ``vjp``, ``terms_fn``,
    ``remainder_fn``, ``full_loglik_diff``); ``v(q)`` of the last two points is kept,
    since a step asks for both several times."""

    def __init__(self, vmap, proxy: TaylorProxy):
        super().__init__(vmap, proxy)
        self.vmap = vmap
        self._seen = []

    def coordinates(self, q) -> np.ndarray:
        for q_seen, v in self._seen:
            if q_seen is q:
                return v
        v = self.vmap.v(q)
        self._seen = [(q, v), *self._seen[:1]]
        return v

    def terms(self, q, q_new, rows):
        fn = self.vmap.terms_fn(self.coordinates(q), self.coordinates(q_new),
                                self.proxy.center, self.proxy.order)
        return fn(rows)

    def residuals(self, q, q_new, rows) -> np.ndarray:
        fn = self.vmap.remainder_fn(self.coordinates(q), self.coordinates(q_new),
                                    self.proxy.center, self.proxy.order)
        return -fn(rows)

    def recenter_at(self, q) -> None:
        self.proxy = self.vmap.proxy(self.vmap.v(q), self.proxy.order)

    def full_diff(self, q, q_new) -> float:
        """The predictor map's NumPy row terms chunk by chunk (nothing to compile); a
        proposal whose rows give NaN (a parameter outside its support) gives -inf."""
        with np.errstate(all="ignore"):
            total = self.vmap.full_loglik_diff(self.coordinates(q), self.coordinates(q_new))
        return total if total == total else -math.inf

    def grad(self, q) -> np.ndarray:
        return self.vmap.vjp(q, self.proxy.grad(self.vmap.v(q)))

    def reset(self) -> None:
        super().reset()
        self._seen = []


class SagaControlVariate(ControlVariate):
    """Stored per-row gradients (:class:`StoredGradients`, El hanchi 2019, "Scaling up
    MCMC for Bayesian inference using adaptive data subsampling", Sec. 4-5): the
    residuals ``l_i - h_i . u``; after each transition the rows read store their gradient
    at the chain's new state (:meth:`update`)."""

    setting = CONTROL_VARIATES["saga"].code
    stateful = True

    def __init__(self, lik, store: StoredGradients):
        self.lik, self.store = lik, store

    def sum_diff(self, q, q_new) -> float:
        return self.store.sum_diff(q, q_new)

    def terms(self, q, q_new, rows):
        plain = self.lik.loglik_diff(q, q_new, rows)
        return plain, self.store.residuals(plain, rows, q, q_new)

    def update(self, q_now, rows) -> None:
        self.store.update(rows, self.lik.loglik_rows_grad(q_now, rows)[1])

    def reset(self) -> None:
        self.store.reset()

    def get_state(self) -> StoreState:
        return self.store.get_state()

    def set_state(self, state: StoreState) -> None:
        self.store.set_state(state)
