"""Per-row bound constants ``psi_i = Ubar_{k,i}`` for Scalable Metropolis-Hastings.

Cornish et al. (2019), eq. 12: SMH-k needs, for every data row, a constant
``Ubar_{k,i} >= sup_theta max_{|beta| = k+1} |d^beta U_i(theta)|`` bounding all
(k+1)-th partial derivatives of ``U_i`` (minus the log-likelihood of row i); with
``phi`` of eq. 13 it gives ``lambda_i <= phi * Ubar_{k,i}`` (Proposition D.1).

Generalised linear models. When ``U_i`` depends on the parameters only through the
linear predictor ``eta_i = x~_i . theta`` (``x~_i`` = the row's covariates, with a
leading 1 when the model has an intercept), the chain rule gives
``d^beta U_i = f_i^(k+1)(eta_i) * prod_{j in beta} x~_ij``, hence

    Ubar_{k,i} = sup_eta |f^(k+1)(eta)| * M_i^(k+1),    M_i = max_j |x~_ij|.

Parameters on which ``U_i`` does not depend (other coordinates of the step's vector)
have zero partial derivatives and do not change the bound. The sup constants must not
depend on the response ``y_i`` (true for the families below) and must hold over the
whole parameter space: families whose derivatives are unbounded (Poisson with log link,
Normal with unknown scale) take the region bounds of :mod:`pymc_subsample.kernels.scalable.region`
instead. The families and their constants are those of the registry
:mod:`pymc_subsample.kernels.families` (:meth:`GLMFamily.sup_derivative`).

Everything works on chunks of rows, so a large (memory-mapped) design matrix is read
once, chunk by chunk, and never copied whole. Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ..families import PROBIT_PEAK3, probit_lambda  # noqa: F401 - read from here too
from ..families import GLMFamily, family_names, find_family

__all__ = [
    "FAMILIES",
    "UpperBounds",
    "glm_bound_constants",
    "glm_row_bounds",
    "glm_sup_derivative",
    "predictor_constants",
    "row_max_abs",
]


def __getattr__(name):
    """``FAMILIES``: the registered families with a global bound, read from the registry
    (:mod:`pymc_subsample.kernels.families`) when asked for."""
    if name == "FAMILIES":
        return family_names("global_bound")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check_params(family: str, params: dict, allowed: tuple[str, ...]) -> None:
    extra = set(params) - set(allowed)
    if extra:
        raise TypeError(
            f"{family}: unexpected parameter(s) {sorted(extra)}; expected {list(allowed)}."
        )
    missing = [a for a in allowed if a not in params]
    if missing:
        raise TypeError(f"{family}: missing parameter(s) {missing}.")


def _canonical_family(family):
    """The registered family ``family`` (name, alias or object) if it has a global
    derivative bound, else a ValueError saying why not."""
    fam = find_family(family)
    if fam is not None and fam.global_bound:
        return fam
    if fam is not None:
        raise ValueError(
            f"No global derivative bound for family {family!r} ({fam.unbounded}); "
            "Scalable MH needs bounds over the whole space: use region bounds "
            "(pymc_subsample.kernels.scalable.region) or a full-data step."
        )
    raise ValueError(
        f"Unknown GLM family {family!r}; supported: {', '.join(family_names('global_bound'))} "
        "(or pass the sup constant as a float)."
    )


def glm_sup_derivative(family, m: int, **params) -> float:
    """``sup_eta |f^(m)(eta)|`` for the per-row GLM term ``U_i = f(eta_i)`` (eq. 12).

    The constants hold for every response ``y_i`` and ``m`` in {2, 3} (SMH-1 uses
    ``m = 2``, SMH-2 ``m = 3``). Each family derives its own in its
    :meth:`~pymc_subsample.kernels.families.GLMFamily.sup_derivative` (the class
    docstrings of :mod:`pymc_subsample.kernels.families` give the derivations):

    * ``"bernoulli_logit"`` (no parameters): ``sup |f''| = 1/4``,
      ``sup |f'''| = 1 / (6 sqrt 3) ~= 0.0962250``;
    * ``"bernoulli_probit"`` (no parameters): ``sup |f''| = 1``,
      ``sup |f'''| = g'''(t*) ~= 0.2957188`` (``g = log Phi``, ``t* = 1.00237``);
    * ``"student_t"`` (``nu``, ``sigma`` fixed): ``sup |f''| = (nu + 1) / (nu sigma^2)``,
      ``sup |f'''| = (nu + 1)(3 + 2 sqrt 2) / (4 (nu sigma^2)^(3/2))``;
    * ``"normal"`` (``sigma`` fixed): ``f'' = 1/sigma^2`` and ``f''' = 0``, so SMH-2's
      Taylor expansion is exact and every ``psi_i`` is 0.

    Parameters
    ----------
    family : str or GLMFamily
        A registered family with a global bound (:data:`FAMILIES`; aliases:
        ``"logistic"``, ``"logit"``, ``"bernoulli"``, ``"probit"``, ``"studentt"``, ``"t"``,
        ``"gaussian"``), or a :class:`~pymc_subsample.kernels.families.GLMFamily`.
    m : int
        Derivative order, ``k + 1`` (2 or 3).
    **params
        The family's fixed parameters: ``nu`` and ``sigma`` for Student-t, ``sigma`` for
        Normal, none for logit and probit.

    Returns
    -------
    float
    """
    fam = _canonical_family(family)
    m = int(m)
    if m not in (2, 3):
        raise ValueError(f"Derivative order m = k + 1 must be 2 or 3 (SMH-1/SMH-2), got {m}.")
    _check_params(fam.name, params, fam.fixed_params)
    return fam.sup_derivative(m, **params)


def row_max_abs(X_chunk, intercept: bool) -> np.ndarray:
    """``M_i = max_j |x~_ij|`` for a chunk of rows (the GLM factor of eq. 12).

    Parameters
    ----------
    X_chunk : array_like, shape (n_rows, p) or (n_rows,)
        Covariates of some rows (a 1-D array is one covariate per row). Only this chunk
        is read; pass slices of a memmap.
    intercept : bool
        Whether the linear predictor has an intercept, i.e. ``x~_i`` has an extra entry
        1, so ``M_i >= 1``.

    Returns
    -------
    ndarray of float64, shape (n_rows,)
    """
    X = np.asarray(X_chunk)
    if X.ndim == 1:
        X = X[:, None]
    elif X.ndim != 2:
        raise ValueError(f"X_chunk must be 1-D or 2-D (rows x covariates), got shape {X.shape}.")
    if X.shape[1] == 0:
        M = np.zeros(X.shape[0], dtype=np.float64)
    else:
        M = np.abs(X).max(axis=1).astype(np.float64, copy=False)
        if not np.isfinite(M).all():
            i = int(np.flatnonzero(~np.isfinite(M))[0])
            raise ValueError(f"Covariates of row {i} of this chunk are not finite.")
    if intercept:
        np.maximum(M, 1.0, out=M)
    return M


def glm_bound_constants(family, M, order: int, *, scale=None, weights=None, **params) -> np.ndarray:
    """Bound constants ``psi_i = Ubar_{k,i}`` (eq. 12) for GLM rows.

    ``psi_i = w_i * C * (|c_i| * M_i)^(k+1)`` with ``C = sup_eta |f^(k+1)(eta)|``
    (:func:`glm_sup_derivative`), ``M_i`` from :func:`row_max_abs`, optional per-row
    coefficient ``c_i`` of the linear predictor (``eta_i = c_i x~_i . theta``, e.g. a
    known exposure multiplier: each derivative gains a factor ``c_i``) and optional
    per-row weight ``w_i >= 0`` of the likelihood term (``U_i = w_i f(eta_i)``, e.g.
    case weights or a tempered likelihood).

    Parameters
    ----------
    family : str, GLMFamily or float
        A family (see :func:`glm_sup_derivative`) or the constant ``C`` itself
        (finite, >= 0) for any other ``f`` with a known bound.
    M : array_like, shape (n_rows,)
        Per-row ``M_i >= 0`` (a chunk is fine).
    order : int
        Taylor order ``k`` (1 or 2).
    scale, weights : array_like or float, optional
        ``c_i`` and ``w_i`` above (broadcast against ``M``).
    **params
        Family parameters (``nu``, ``sigma``).

    Returns
    -------
    ndarray of float64, shape (n_rows,)
    """
    k = int(order)
    if k not in (1, 2):
        raise ValueError(f"Taylor order k must be 1 or 2, got {order!r}.")
    if isinstance(family, (str, GLMFamily)):
        C = glm_sup_derivative(family, k + 1, **params)
    else:
        if params:
            raise TypeError(f"Unexpected parameters {sorted(params)} with a numeric sup constant.")
        C = float(family)
        if not (C >= 0.0 and math.isfinite(C)):
            raise ValueError(f"The sup constant must be finite and >= 0, got {family!r}.")
    M = np.asarray(M, dtype=np.float64)
    if scale is not None:
        M = M * np.abs(np.asarray(scale, dtype=np.float64))
    if not (np.isfinite(M).all() and (M >= 0).all()):
        raise ValueError("M_i (times |scale_i|) must be finite and >= 0.")
    psi = C * M ** (k + 1)
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64)
        if not (np.isfinite(w).all() and (w >= 0).all()):
            raise ValueError("Row weights must be finite and >= 0.")
        psi = psi * w
    if not np.isfinite(psi).all():
        raise ValueError("Bound constants overflowed (covariates too large).")
    return psi


def glm_row_bounds(
    X,
    family,
    order: int,
    *,
    intercept: bool = True,
    scale=None,
    weights=None,
    chunk_rows: int = 65536,
    out: np.ndarray | None = None,
    **params,
) -> np.ndarray:
    """All ``psi_i = Ubar_{k,i}`` (eq. 12) of a GLM, reading ``X`` chunk by chunk.

    Combines :func:`row_max_abs` and :func:`glm_bound_constants` over consecutive
    blocks of ``chunk_rows`` rows, so a memory-mapped design matrix is never loaded
    whole. Memory: the output (N floats) plus one chunk.

    Parameters
    ----------
    X : array_like, shape (N, p) or (N,)
        Design matrix without the intercept column (may be a ``numpy.memmap``).
    family, order, scale, weights, **params
        As in :func:`glm_bound_constants` (``scale`` and ``weights``: None, a scalar or
        an array of length N).
    intercept : bool
        Whether the model has an intercept.
    chunk_rows : int
        Rows per chunk.
    out : ndarray, optional
        Preallocated float64 output of length N.

    Returns
    -------
    ndarray of float64, shape (N,)
    """
    n = X.shape[0]
    if out is None:
        out = np.empty(n, dtype=np.float64)
    elif out.shape != (n,):
        raise ValueError(f"out must have shape ({n},), got {out.shape}.")
    step = max(1, int(chunk_rows))

    def part(v, a, b):
        if v is None or np.ndim(v) == 0:
            return v
        return v[a:b]

    for a in range(0, n, step):
        b = min(n, a + step)
        M = row_max_abs(X[a:b], intercept)
        out[a:b] = glm_bound_constants(
            family, M, order, scale=part(scale, a, b), weights=part(weights, a, b), **params
        )
    return out


def predictor_constants(family, order: int, J, base, *, whiten=None, radius=None, y=None,
                        **params) -> np.ndarray:
    """Bound constants of a chunk of one-parameter GLM rows from their predictor Jacobian.

    ``J`` (rows x coordinates): the exact Jacobian of the affine linear predictor;
    ``base``: the predictors at the centre. The row factor is ``M_i = max_j |J_ij|``
    (eq. 12) or, with ``whiten`` (``L``), ``||J_i L||``; with ``radius`` the supremum of
    ``|f^(k+1)|`` is taken over ``base_i -+ M_i radius`` only (region bounds,
    :func:`pymc_subsample.kernels.scalable.region.local_sup`), else over the whole line
    (:func:`glm_bound_constants`).

    Parameters
    ----------
    family : str or GLMFamily
    order : int
        Taylor order ``k`` (1 or 2).
    J, base : ndarray
    whiten : ndarray, shape (d, d), optional
    radius : float, optional
    y : ndarray, optional
        The rows' responses (families that read them: ``GLMFamily.needs_y``).
    **params
        The family's fixed parameters (per row or one number).

    Returns
    -------
    ndarray of float64, shape (rows,)
    """
    from .region import local_sup  # region bounds; region.py does not import this module

    fam = find_family(family) or family
    if whiten is None:
        M = np.abs(J).max(axis=1)
    else:
        W = J @ whiten
        M = np.sqrt(np.einsum("ij,ij->i", W, W))  # row norms, without norm's temporaries
    M *= 1.0 + 1e-7  # rounding margin: the differences of an affine function are exact
    if radius is not None:
        width = np.abs(base)
        width += 1.0
        width *= 1e-9
        width += M * radius
        C = local_sup(fam, order + 1, base - width, base + width, y=y, **params)
        out = C * M  # C M^(k+1), without a power ufunc
        for _ in range(order):
            out *= M
        return out
    # e.g. f(eta) = g((y - eta) / sigma): the m-th derivative scales as sigma^-m
    scale, sup_params = _canonical_family(fam).global_sup_args(params)
    return glm_bound_constants(fam, M, order, scale=scale, **sup_params)


#: the widening before a cast to float32 in :meth:`UpperBounds.round_up`
_WIDEN = 1.0 + 2.0**-22
_F32_TINY = float(np.finfo(np.float32).tiny)


def _round_up_exactly(v) -> np.ndarray:
    """``v`` (float64) cast to float32 and moved up one step where the cast rounded down:
    the least float32 values ``>= v``."""
    with np.errstate(over="ignore"):
        r = v.astype(np.float32)
    np.nextafter(r, np.float32(np.inf), out=r, where=r < v)
    return r


class UpperBounds:
    """A per-row array of bound constants stored in float32, each rounded up.

    ScalableMH keeps ``psi_i`` for as long as it lives (the thinning reads
    ``phi * psi_i`` for every candidate row). A float32 value rounded up (by at most
    about ``2**-21`` of itself) is still an upper bound, so the algorithm stays exact
    (Cornish et al. 2019 only need ``lambda_i <= phi * psi_i``) while the array takes 4
    bytes per row instead of 8.
    If a finite constant does not fit in float32 (above about 3.4e38) the array
    switches to float64 for all rows. Chunks may be written from several threads.

    Parameters
    ----------
    n : int
        Number of rows.
    """

    def __init__(self, n: int):
        self.values = np.empty(int(n), dtype=np.float32)
        self._lock = threading.Lock()

    @staticmethod
    def round_up(values) -> np.ndarray:
        """``values`` (float64) rounded up to float32, or kept in float64 when a finite
        one does not fit in float32: what :meth:`put` stores, computed where the values
        are (a pass's worker threads) rather than where they are stored."""
        v = np.asarray(values, dtype=np.float64)
        with np.errstate(over="ignore"):  # beyond float32: handled below
            # widened by 2**-22 before the cast to nearest: for a result in float32's
            # normal range the cast moves it by at most 2**-24 of itself, so it stays
            # above v (a product and a cast: a tenth of the cost of comparing each
            # value and stepping up the ones rounded down)
            r = np.asarray(v * _WIDEN).astype(np.float32)  # a 0-d array stays an array
        small = r < _F32_TINY  # zero, negative or subnormal: rounded up one by one
        if small.any():
            r[small] = _round_up_exactly(v[small])
        if not np.isfinite(r).all() and bool((np.isinf(r) & np.isfinite(v)).any()):
            return v
        return r

    def put(self, start: int, stop: int, values) -> None:
        """Store ``values`` for rows ``start:stop``, rounded up: float64 values, or the
        float32 ones of :meth:`round_up` as they are."""
        values = np.asarray(values)
        if values.dtype != np.float32:
            values = self.round_up(values)
        v = np.broadcast_to(values, (stop - start,))
        overflow = v.dtype == np.float64
        with self._lock:
            if overflow and self.values.dtype == np.float32:
                self.values = self.values.astype(np.float64)
            self.values[start:stop] = v
