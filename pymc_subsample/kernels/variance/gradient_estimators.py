"""Minibatch estimators of the log-likelihood gradient, for stochastic-gradient Langevin.

Pure NumPy; nothing here imports PyMC or PyTensor. Each estimator gives an unbiased
estimate of ``G(q) = sum_i grad log p(x_i | q)`` over all ``N`` rows from the per-row
gradients of a minibatch, and an estimate of that estimate's covariance from the spread
of the batch's terms (for the step's noise check). The caller evaluates the per-row
gradients (the step's likelihood engine); an estimator only says which rows to read
(:meth:`GradientEstimator.draw_rows`) and combines what was read
(:meth:`GradientEstimator.estimate`).

Every estimator has the form ``G_hat = A + (1/m) sum_k z_k`` with a known constant ``A``
and ``m`` exchangeable terms ``z_k``:

=============  ==============================  =====================================
name           rows                            ``A``; ``z_k`` for row ``i``
=============  ==============================  =====================================
``minibatch``  uniform, without replacement    ``0``; ``N g_i(q)``
``cv``         uniform, without replacement    ``sum_j g_j(c)``; ``N (g_i(q) - g_i(c))``
``saga``       uniform, without replacement    ``sum_j h_j``; ``N (g_i(q) - h_i)``
``is``         ``p_i``, with replacement       ``0``; ``g_i(q) / p_i``
``is_saga``    ``p_i``, with replacement       ``sum_j h_j``; ``(g_i(q) - h_i) / p_i``
=============  ==============================  =====================================

with ``g_i(q) = grad log p(x_i | q)``:

- ``minibatch``: Welling & Teh (2011), "Bayesian learning via stochastic gradient
  Langevin dynamics", eq. 3-4 (El hanchi 2019, "Scaling up MCMC for Bayesian inference
  using adaptive data subsampling", Sec. 4.1).
- ``cv``: a first-order Taylor control variate about a fixed centre ``c`` near the
  posterior mode, whose full-data sum is computed once: SGLD-CV of Baker, Fearnhead,
  Fox & Nemeth (2019), "Control variates for stochastic gradient MCMC", Algorithm 2.
  The terms are ``O(|q - c|)``, so at posterior scale on tall data their spread, and the
  batch needed for a given accuracy, does not grow with ``N``.
- ``saga``: stored per-row gradients ``h_i`` (the gradient last evaluated for row
  ``i``), updated after each step (:meth:`GradientEstimator.update`): SAGA-LD, El hanchi
  Sec. 4.3 (Defazio, Bach & Lacoste-Julien 2014; Dubey et al. 2016). Memory ``N d``.
- ``is`` and ``is_saga``: importance sampling of the rows with probabilities ``p_i``,
  El hanchi Sec. 4.3 (the estimators) and Sec. 5.1 (the probabilities
  ``p_i ∝ ||h_i|| + L_i s``, the KKT solution that minimises his bound on the mean
  squared error; see :func:`~pymc_subsample.kernels.variance.control_variates.importance_weights`).

Covariance. With replacement the terms are i.i.d. and ``Var(G_hat) = Var(z) / m``;
without replacement the finite-population factor ``(N - m) / N`` multiplies the sample
variance (``ddof=1``) over ``m``.
:class:`Estimate` carries ``spread``, an ``(m, d)`` matrix with ``spread' spread`` the
unbiased estimate of ``Var(G_hat)``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from .._validation import InvalidParameterError, check_choice, check_positive_int, check_share
from ..sampling.alias import AliasTable
from .control_variates import StoredGradients

__all__ = [
    "ESTIMATORS",
    "Estimate",
    "GradientEstimator",
    "MinibatchEstimator",
    "ControlVariateEstimator",
    "SagaEstimator",
    "ImportanceEstimator",
    "ImportanceSagaEstimator",
    "make_estimator",
    "largest_eigenvalue",
    "saga_bytes",
]


@dataclass(frozen=True)
class Estimate:
    """One estimate of ``G(q) = sum_i grad log p(x_i | q)``.

    Attributes
    ----------
    grad : numpy.ndarray
        ``G_hat``, shape ``(d,)``.
    spread : numpy.ndarray
        Shape ``(m, d)``: ``spread.T @ spread`` estimates ``Var(G_hat)`` (zeros when the
        batch has fewer than two rows or is the whole data).
    """

    grad: np.ndarray
    spread: np.ndarray

    def whitened_covariance(self, factor=None) -> np.ndarray:
        """``F' Var_hat(G_hat) F``, ``(d, d)``: the covariance estimate in the units of a
        preconditioner ``M = F F'`` (``factor``: ``F`` as a ``(d, d)`` matrix, a ``(d,)``
        vector of per-dimension scales, or None for the identity)."""
        s = self.spread
        if factor is not None:
            s = s * factor if np.ndim(factor) == 1 else s @ factor
        return s.T @ s


def largest_eigenvalue(cov) -> float:
    """Largest eigenvalue of a symmetric ``(d, d)`` matrix (0.0 for an empty one).

    The largest eigenvalue of *one* batch's covariance estimate is biased upwards (the
    top sample eigenvalue of a noisy matrix overshoots: near the trace when a few rows
    dominate the noise); take it of an average of many batches' estimates, as
    :class:`~pymc_subsample.SGLD` does for its ``noise_ratio``."""
    cov = np.asarray(cov, dtype=np.float64)
    if cov.size == 0 or not np.any(cov):
        return 0.0
    return float(np.linalg.eigvalsh(cov)[-1])


def _spread(z: np.ndarray, fpc: float) -> np.ndarray:
    """``(z - mean) sqrt(fpc / (m (m - 1)))``: its Gram matrix is the unbiased estimate of
    the covariance of the mean of the ``m`` terms ``z`` (``fpc``: 1 for i.i.d. terms,
    ``(N - m) / N`` for rows drawn without replacement, Cochran 1977, "Sampling
    techniques", Theorem 2.4)."""
    m = z.shape[0]
    if m < 2 or fpc <= 0.0:
        return np.zeros((0, z.shape[1]))
    return (z - z.mean(axis=0)) * math.sqrt(fpc / (m * (m - 1)))


class GradientEstimator(ABC):
    """Base class: uniform rows without replacement; subclasses combine them
    (:meth:`terms`).

    Parameters
    ----------
    n_rows : int
        ``N``.
    batch_size : int
        ``m`` rows per estimate (all ``N`` rows, exactly, when ``m >= N`` for the uniform
        estimators).

    Attributes
    ----------
    name : str
        The estimator's name in :data:`ESTIMATORS`.
    needs_center : bool
        :meth:`estimate` needs the rows' gradients at the centre too.
    stateful : bool
        The estimator keeps per-chain state (:meth:`reset`, :meth:`update`).
    """

    name = "base"
    needs_center = False
    stateful = False
    with_replacement = False

    def __init__(self, n_rows: int, batch_size: int):
        self.n_rows = check_positive_int("n_rows", n_rows)
        m = check_positive_int("batch_size", batch_size)
        self.batch_size = m if self.with_replacement else min(m, self.n_rows)
        self._all = self.batch_size == self.n_rows and not self.with_replacement
        self._fpc = (self.n_rows - self.batch_size) / self.n_rows

    def reset(self) -> None:
        """Restore the per-chain state (stateless estimators: nothing)."""

    def draw_rows(self, rng: np.random.Generator) -> np.ndarray:
        """The rows of one estimate, sorted (int64)."""
        if self._all:
            return np.arange(self.n_rows, dtype=np.int64)
        rows = rng.choice(self.n_rows, self.batch_size, replace=False)
        rows.sort()
        return rows.astype(np.int64, copy=False)

    @abstractmethod
    def terms(self, rows, grads, grads_center=None) -> tuple[np.ndarray, np.ndarray]:
        """``(A, z)``: the constant and the ``(m, d)`` terms (see the module docs)."""

    def estimate(self, rows, grads, grads_center=None) -> Estimate:
        """Combine the rows' gradients ``grads`` ``(m, d)`` at ``q`` (and, when
        ``needs_center``, ``grads_center`` at the centre) into an :class:`Estimate`."""
        a, z = self.terms(rows, np.asarray(grads, dtype=np.float64), grads_center)
        return Estimate(a + z.mean(axis=0), _spread(z, 1.0 if self.with_replacement
                                                    else self._fpc))

    def update(self, rows, grads) -> None:
        """After a step: the rows' gradients at the chain's state (stored by SAGA)."""


class MinibatchEstimator(GradientEstimator):
    """Plain minibatch estimate ``N / m sum_{i in S} g_i(q)`` (Welling & Teh 2011, eq. 4)."""

    name = "minibatch"

    def terms(self, rows, grads, grads_center=None):
        return 0.0, self.n_rows * grads


class ControlVariateEstimator(GradientEstimator):
    """First-order Taylor control variate about a centre ``c`` (Baker et al. 2019,
    "Control variates for stochastic gradient MCMC", Algorithm 2):
    ``sum_j g_j(c) + N / m sum_{i in S} (g_i(q) - g_i(c))``.

    Parameters
    ----------
    grad_sum_center : numpy.ndarray
        ``sum_j g_j(c)`` over all rows, shape ``(d,)`` (one pass at set-up).
    """

    name = "cv"
    needs_center = True

    def __init__(self, n_rows, batch_size, grad_sum_center):
        super().__init__(n_rows, batch_size)
        self.grad_sum_center = np.asarray(grad_sum_center, dtype=np.float64).copy()

    def terms(self, rows, grads, grads_center=None):
        if grads_center is None:
            raise ValueError("the control-variate estimator needs the rows' gradients at the centre.")
        return self.grad_sum_center, self.n_rows * (grads - grads_center)


def saga_bytes(n_rows: int, ndim: int) -> int:
    """Memory of SAGA's per-row gradient store: two ``N x d`` float64 arrays (the store
    and its starting copy, restored at each chain's start)."""
    return 2 * 8 * int(n_rows) * int(ndim)


class _WithStore:
    """A SAGA store (:class:`~pymc_subsample.kernels.variance.control_variates.StoredGradients`,
    the same class as the MH tests' SAGA control variate) as per-chain state."""

    stateful = True

    def _init_store(self, grads0):
        grads0 = np.asarray(grads0, dtype=np.float64)
        if grads0.ndim != 2 or grads0.shape[0] != self.n_rows:
            raise ValueError(f"the starting gradients must have shape (N={self.n_rows}, d), "
                             f"got {grads0.shape}.")
        self.store = StoredGradients(grads0)

    def reset(self) -> None:
        self.store.reset()

    def update(self, rows, grads) -> None:
        """Store ``grads`` for ``rows`` and keep the sum exact."""
        self.store.update(rows, grads)


class SagaEstimator(_WithStore, GradientEstimator):
    """SAGA: ``sum_j h_j + N / m sum_{i in S} (g_i(q) - h_i)``, then ``h_i <- g_i`` for the
    rows read (El hanchi 2019, Sec. 4.3).

    Parameters
    ----------
    grads0 : numpy.ndarray
        Starting store, shape ``(N, d)`` (the gradients at the centre).
    """

    name = "saga"

    def __init__(self, n_rows, batch_size, grads0):
        super().__init__(n_rows, batch_size)
        self._init_store(grads0)

    def terms(self, rows, grads, grads_center=None):
        return self.store.total, self.n_rows * (grads - self.store.h[rows])


class ImportanceEstimator(GradientEstimator):
    """Importance-sampled rows, with replacement: ``1/m sum_k g_{i_k}(q) / p_{i_k}``
    (El hanchi 2019, Sec. 4.3).

    Parameters
    ----------
    weights : numpy.ndarray
        Positive row weights, shape ``(N,)``; ``p = weights / sum(weights)``, mixed with
        the uniform distribution in the share ``defensive``.
    defensive : float, default 0.1
        Share of the uniform component (defensive importance sampling, Hesterberg 1995,
        "Weighted average importance sampling and defensive mixture distributions"):
        ``p_i >= defensive / N``, so no row's weight ``1 / p_i`` exceeds ``N / defensive``
        wherever the chain goes.
    """

    name = "is"
    with_replacement = True

    def __init__(self, n_rows, batch_size, weights, defensive: float = 0.1):
        super().__init__(n_rows, batch_size)
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (self.n_rows,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise InvalidParameterError(
                "weights must be N non-negative finite numbers with a positive sum.")
        check_share("defensive", defensive)  # the value itself is used below, as given
        p = (1.0 - defensive) * w / w.sum() + defensive / self.n_rows
        self.table = AliasTable(p)
        self.p = self.table.probabilities()
        self.defensive = float(defensive)

    def draw_rows(self, rng):
        rows = self.table.sample(rng, self.batch_size)
        rows.sort()
        return rows.astype(np.int64, copy=False)

    def terms(self, rows, grads, grads_center=None):
        return 0.0, grads / self.p[rows][:, None]


class ImportanceSagaEstimator(_WithStore, ImportanceEstimator):
    """Importance sampling and SAGA: ``sum_j h_j + 1/m sum_k (g_{i_k}(q) - h_{i_k}) /
    p_{i_k}`` (El hanchi 2019, Sec. 4.3 and 5.2.2).

    Parameters
    ----------
    weights, defensive :
        As :class:`ImportanceEstimator`.
    grads0 : numpy.ndarray
        Starting store, shape ``(N, d)``.
    """

    name = "is_saga"

    def __init__(self, n_rows, batch_size, weights, grads0, defensive: float = 0.1):
        super().__init__(n_rows, batch_size, weights, defensive)
        self._init_store(grads0)

    def terms(self, rows, grads, grads_center=None):
        return self.store.total, (grads - self.store.h[rows]) / self.p[rows][:, None]


#: the estimators by name
ESTIMATORS = {
    cls.name: cls
    for cls in (MinibatchEstimator, ControlVariateEstimator, SagaEstimator,
                ImportanceEstimator, ImportanceSagaEstimator)
}


def make_estimator(name: str, n_rows: int, batch_size: int, *, grad_sum_center=None,
                   grads_center=None, weights=None, defensive: float = 0.1) -> GradientEstimator:
    """The estimator ``name`` (a key of :data:`ESTIMATORS`) from what the set-up computed:
    ``grad_sum_center`` (``cv``), the per-row gradients at the centre ``grads_center``
    (``saga``, ``is_saga``), the importance weights ``weights`` (``is``, ``is_saga``)."""
    check_choice("gradient estimator", name, tuple(sorted(ESTIMATORS)))
    if name == "minibatch":
        return MinibatchEstimator(n_rows, batch_size)
    if name == "cv":
        return ControlVariateEstimator(n_rows, batch_size, grad_sum_center)
    if name == "saga":
        return SagaEstimator(n_rows, batch_size, grads_center)
    if name == "is":
        return ImportanceEstimator(n_rows, batch_size, weights, defensive)
    return ImportanceSagaEstimator(n_rows, batch_size, weights, grads_center, defensive)
