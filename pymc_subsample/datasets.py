"""Synthetic tall data sets for examples, benchmarks and tests.

The data are generated in chunks of rows, each chunk from its own seeded stream, so that
no N-sized temporaries are made beyond the returned arrays and the data for a smaller
``n`` are a prefix of the data for a larger ``n`` (same ``seed``): a benchmark over
N = 2^10 ... 2^20 can generate the largest set once and slice it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["make_logistic"]

_CHUNK = 1 << 16


def make_logistic(n, d=10, *, seed=0, intercept=False, coef_sd=0.5):
    """Rows of a logistic regression: ``y_i ~ Bernoulli(logit^-1(X_i @ beta))``.

    Parameters
    ----------
    n : int
        Number of rows (>= 1).
    d : int, default 10
        Number of columns of ``X`` (coefficients).
    seed : int, default 0
        Seed of the generator (``beta`` and every chunk of rows derive from it).
    intercept : bool, default False
        If True the first column of ``X`` is all ones (an intercept); otherwise every
        column is standard normal.
    coef_sd : float, default 0.5
        Standard deviation of the true coefficients ``beta ~ N(0, coef_sd^2)``.

    Returns
    -------
    X : ndarray of shape (n, d), float64
    y : ndarray of shape (n,), int64 (0 or 1)
    beta : ndarray of shape (d,)
        The true coefficients.
    """
    n, d = int(n), int(d)
    if n < 1:
        raise ValueError(f"n must be a positive number of rows, got {n}.")
    if d < 1:
        raise ValueError(f"d must be a positive number of columns, got {d}.")
    beta = np.random.default_rng([seed, 0]).normal(0.0, coef_sd, d)
    X = np.empty((n, d))
    y = np.empty(n, dtype=np.int64)
    first = 1 if intercept else 0
    for c, s in enumerate(range(0, n, _CHUNK)):
        e = min(s + _CHUNK, n)
        rng = np.random.default_rng([seed, 1, c])
        if intercept:
            X[s:e, 0] = 1.0
        # a whole chunk's draws even for a partial last chunk: keeps the prefix property
        X[s:e, first:] = rng.standard_normal((_CHUNK, d - first))[: e - s]
        u = rng.random(_CHUNK)[: e - s]
        y[s:e] = u < 1.0 / (1.0 + np.exp(-(X[s:e] @ beta)))
    return X, y, beta
