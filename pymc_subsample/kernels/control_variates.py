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
from dataclasses import dataclass

import numpy as np

__all__ = ["TaylorProxy", "residuals", "VarianceCheck", "StoredGradients", "importance_weights"]

#: Control variates accepted by the steps: Taylor orders (``0``: plain differences) and
#: ``"saga"`` (stored per-row gradients, :class:`StoredGradients`).
ORDERS = (0, 1, 2, "saga")


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


class StoredGradients:
    """SAGA-style stored per-row gradients: the control variate of the MH tests, and the
    store of the SAGA gradient estimators
    (:mod:`pymc_subsample.kernels.gradient_estimators`).

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
