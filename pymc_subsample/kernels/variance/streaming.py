"""Streaming mean and variance (or covariance) with batch merges.

One accumulator of ``(n, mean, M2)``, ``M2`` the sum of squared deviations from the mean
(a matrix of cross-products for vectors), for every running moment the package keeps:
the growing minibatches of the Austerity and Barker tests and the running covariance of
adaptive proposals. Batches are merged with the parallel formula of Chan, Golub & LeVeque
("Updating formulae and a pairwise algorithm for computing sample variances", 1979):
for two parts ``a`` and ``b`` with ``d = mean_b - mean_a`` and ``n = n_a + n_b``,

    mean = mean_a + d n_b / n,    M2 = M2_a + M2_b + d d^T n_a n_b / n,

and each batch's own ``(mean_b, M2_b)`` is taken by two passes over it (mean, then
squared deviations from it). A single observation is the case ``n_b = 1``, ``M2_b = 0``,
which is Welford's update ("Note on a method for calculating corrected sums of squares
and products", 1962).

The scalar functions :func:`batch_moments` and :func:`merge_moments` are what the tests
call once per minibatch (plain floats, no object: they run on the per-transition path);
:class:`RunningMoments` wraps them for scalar or vector streams. Pure NumPy.
"""

from __future__ import annotations

import numpy as np

__all__ = ["RunningMoments", "batch_moments", "merge_moments"]


def batch_moments(x: np.ndarray, total: float | None = None) -> tuple[float, float]:
    """``(mean, M2)`` of a non-empty 1-D float batch, by two passes.

    Parameters
    ----------
    x : numpy.ndarray, shape (k,)
        The batch.
    total : float, optional
        ``x.sum()`` when the caller already has it (it is not recomputed).
    """
    k = x.shape[0]
    mean = (float(x.sum()) if total is None else total) / k
    dev = x - mean
    dev *= dev  # a plain sum, not np.dot: OpenBLAS threads long dot products
    return mean, float(dev.sum())


def merge_moments(n_a: int, mean_a: float, m2_a: float, n_b: int, mean_b: float,
                  m2_b: float) -> tuple[int, float, float]:
    """Merge two parts' ``(n, mean, M2)`` by Chan et al.'s parallel formula (scalars)."""
    n = n_a + n_b
    d = mean_b - mean_a
    return n, mean_a + d * n_b / n, m2_a + (m2_b + d * d * n_a * n_b / n)


class RunningMoments:
    """Running count, mean and ``M2`` of a scalar or vector stream.

    Parameters
    ----------
    ndim : int, optional
        Length of each observation; ``None`` (default) for a scalar stream.

    Attributes
    ----------
    n : int
        Observations so far.
    mean : float or numpy.ndarray, shape (ndim,)
    m2 : float or numpy.ndarray, shape (ndim, ndim)
        Sum of squared deviations from the mean (cross-products for vectors).
    """

    __slots__ = ("n", "mean", "m2", "ndim")

    def __init__(self, ndim: int | None = None):
        self.ndim = ndim
        self.n = 0
        if ndim is None:
            self.mean = 0.0
            self.m2 = 0.0
        else:
            self.mean = np.zeros(int(ndim))
            self.m2 = np.zeros((int(ndim), int(ndim)))

    def add(self, x) -> None:
        """Add one observation (Welford's update)."""
        self.n += 1
        if self.ndim is None:
            x = float(x)
            delta = x - self.mean
            self.mean += delta / self.n
            self.m2 += delta * (x - self.mean)
        else:
            x = np.asarray(x, dtype=np.float64).reshape(-1)
            delta = x - self.mean
            self.mean += delta / self.n
            self.m2 += np.outer(delta, x - self.mean)

    def add_batch(self, x) -> None:
        """Add a batch (shape ``(k,)``, or ``(k, ndim)`` for vectors), merged by
        Chan et al.'s formula."""
        x = np.asarray(x, dtype=np.float64)
        k = x.shape[0]
        if k == 0:
            return
        if self.ndim is None:
            mean_b, m2_b = batch_moments(x.reshape(-1))
            self.n, self.mean, self.m2 = merge_moments(
                self.n, self.mean, self.m2, k, mean_b, m2_b)
            return
        x = x.reshape(k, -1)
        mean_b = x.mean(axis=0)
        dev = x - mean_b
        m2_b = dev.T @ dev
        n = self.n + k
        d = mean_b - self.mean
        self.m2 = self.m2 + m2_b + np.outer(d, d) * (self.n * k / n)
        self.mean = self.mean + d * (k / n)
        self.n = n

    def variance(self, ddof: int = 1):
        """``M2 / (n - ddof)``: the variance (covariance matrix for vectors); NaN (a NaN
        matrix) when ``n <= ddof``."""
        if self.n <= ddof:
            return np.nan if self.ndim is None else np.full_like(self.m2, np.nan)
        return self.m2 / (self.n - ddof)

    covariance = variance
