"""Synthetic tall data sets for examples, benchmarks and tests.

The data are generated in chunks of rows, each chunk from its own seeded stream, so that
no N-sized temporaries are made beyond the returned arrays and the data for a smaller
``n`` are a prefix of the data for a larger ``n`` (same ``seed``): a benchmark over
N = 2^10 ... 2^20 can generate the largest set once and slice it.

:func:`make_logistic` returns the rows in memory; :func:`write_logistic` writes the same
rows, chunk by chunk, to ``.npy`` files for data larger than memory (open them with
:func:`pymc_subsample.out_of_core.rows`).
"""

from __future__ import annotations

import os

import numpy as np

__all__ = ["make_logistic", "write_logistic"]

_CHUNK = 1 << 16


def _check_shape(n, d):
    n, d = int(n), int(d)
    if n < 1:
        raise ValueError(f"n must be a positive number of rows, got {n}.")
    if d < 1:
        raise ValueError(f"d must be a positive number of columns, got {d}.")
    return n, d


def _true_coefficients(d, seed, coef_sd):
    return np.random.default_rng([seed, 0]).normal(0.0, coef_sd, d)


def _logistic_chunks(n, d, seed, intercept, beta, dtype):
    """Yield ``(start, stop, X_chunk, y_chunk)`` for consecutive chunks of rows.

    The covariates are drawn in float64 and stored in ``dtype``; ``y`` is drawn from the
    stored (rounded) covariates, so the stored rows follow the model exactly.
    """
    first = 1 if intercept else 0
    for c, s in enumerate(range(0, n, _CHUNK)):
        e = min(s + _CHUNK, n)
        rng = np.random.default_rng([seed, 1, c])
        x = np.empty((e - s, d), dtype=dtype)
        if intercept:
            x[:, 0] = 1.0
        # a whole chunk's draws even for a partial last chunk: keeps the prefix property
        x[:, first:] = rng.standard_normal((_CHUNK, d - first))[: e - s]
        u = rng.random(_CHUNK)[: e - s]
        y = u < 1.0 / (1.0 + np.exp(-(x.astype(np.float64, copy=False) @ beta)))
        yield s, e, x, y


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

    See Also
    --------
    write_logistic : the same rows written to ``.npy`` files, for data beyond memory.
    """
    n, d = _check_shape(n, d)
    X = np.empty((n, d))
    y = np.empty(n, dtype=np.int64)
    beta = _true_coefficients(d, seed, coef_sd)
    for s, e, xc, yc in _logistic_chunks(n, d, seed, intercept, beta, np.float64):
        X[s:e] = xc
        y[s:e] = yc
    return X, y, beta


def write_logistic(directory, n, d=10, *, seed=0, intercept=False, coef_sd=0.5,
                   dtype="float32"):
    """Write the rows of a logistic regression to ``X.npy`` and ``y.npy``, chunk by chunk.

    The model and the streams are those of :func:`make_logistic`; only one chunk of rows
    (2^16) is in memory at a time, so ``n`` may exceed the machine's memory. The
    covariates are stored in ``dtype`` and ``y`` is drawn from the stored values, so with
    ``dtype="float64"`` the files hold exactly ``make_logistic(n, d, seed=seed, ...)``.

    Parameters
    ----------
    directory : str or os.PathLike
        Existing directory to write ``X.npy`` (shape ``(n, d)``, ``dtype``) and ``y.npy``
        (shape ``(n,)``, int64) into; existing files of those names are overwritten.
    n, d, seed, intercept, coef_sd
        As in :func:`make_logistic`.
    dtype : {"float32", "float64"}, default "float32"
        Floating-point type of ``X`` on disk (float32 halves the file).

    Returns
    -------
    x_path, y_path : str
        Paths of the two files; open them with
        ``pms.out_of_core.rows(x_path)`` or ``numpy.load(path, mmap_mode="r")``.
    beta : ndarray of shape (d,)
        The true coefficients.
    """
    n, d = _check_shape(n, d)
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype}.")
    if not os.path.isdir(directory):
        raise ValueError(f"directory {directory!r} does not exist; create it first.")
    x_path = os.path.join(os.fspath(directory), "X.npy")
    y_path = os.path.join(os.fspath(directory), "y.npy")
    X = np.lib.format.open_memmap(x_path, mode="w+", dtype=dtype, shape=(n, d))
    y = np.lib.format.open_memmap(y_path, mode="w+", dtype=np.int64, shape=(n,))
    beta = _true_coefficients(d, seed, coef_sd)
    for s, e, xc, yc in _logistic_chunks(n, d, seed, intercept, beta, dtype):
        X[s:e] = xc
        y[s:e] = yc
    X.flush()
    y.flush()
    del X, y
    return x_path, y_path, beta
