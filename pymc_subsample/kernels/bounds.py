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
Normal with unknown scale) take the region bounds of :mod:`pymc_subsample.kernels.region`
instead.

Everything works on chunks of rows, so a large (memory-mapped) design matrix is read
once, chunk by chunk, and never copied whole. Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import math
import threading

import numpy as np
from scipy.special import log_ndtr

from ._validation import check_finite_positive

__all__ = [
    "FAMILIES",
    "UpperBounds",
    "glm_bound_constants",
    "glm_row_bounds",
    "glm_sup_derivative",
    "row_max_abs",
]

FAMILIES = ("bernoulli_logit", "bernoulli_probit", "student_t", "normal")

_ALIASES = {
    "bernoulli_logit": "bernoulli_logit",
    "logistic": "bernoulli_logit",
    "logit": "bernoulli_logit",
    "bernoulli": "bernoulli_logit",
    "bernoulli_probit": "bernoulli_probit",
    "probit": "bernoulli_probit",
    "student_t": "student_t",
    "studentt": "student_t",
    "t": "student_t",
    "normal": "normal",
    "gaussian": "normal",
}

_UNBOUNDED = {
    "poisson": "Poisson with log link: f(eta) = exp(eta) - y eta has unbounded derivatives",
    "poisson_log": "Poisson with log link: f(eta) = exp(eta) - y eta has unbounded derivatives",
}

#: sup_s |s (1 - s)(1 - 2 s)| over s in (0, 1), attained at s = 1/2 -+ 1/(2 sqrt 3).
_LOGIT_SUP3 = 1.0 / (6.0 * math.sqrt(3.0))
#: sup_x |x (x^2 - 3)| / (1 + x^2)^3, attained at x = sqrt(2) - 1.
_T_SUP3 = (3.0 + 2.0 * math.sqrt(2.0)) / 8.0

def probit_lambda(t):
    """The inverse Mills ratio ``lambda(t) = phi(t) / Phi(t)`` (``g' `` for ``g = log Phi``),
    from ``log_ndtr`` so that it stays finite far in the left tail."""
    t = np.asarray(t, dtype=np.float64)
    return np.exp(-0.5 * t * t - 0.5 * math.log(2.0 * math.pi) - log_ndtr(t))


#: the peak of g''' for g = log Phi (the standard normal log cdf), a root of g'''' found
#: by Brent's method: g''' > 0 rises on (-inf, t*] and falls on [t*, inf)
PROBIT_PEAK3 = 1.0023693410546552
#: sup_t |g'''(t)| = g'''(PROBIT_PEAK3) = 0.295718819193..., with a 1e-6 relative margin
_PROBIT_SUP3 = 0.29571881919312326 * (1.0 + 1e-6)


def _positive(name: str, value, family: str) -> float:
    return check_finite_positive(name, value, label=f"{family}: parameter {name}")


def _check_params(family: str, params: dict, allowed: tuple[str, ...]) -> None:
    extra = set(params) - set(allowed)
    if extra:
        raise TypeError(
            f"{family}: unexpected parameter(s) {sorted(extra)}; expected {list(allowed)}."
        )
    missing = [a for a in allowed if a not in params]
    if missing:
        raise TypeError(f"{family}: missing parameter(s) {missing}.")


def _canonical_family(family: str) -> str:
    key = str(family).lower().replace("-", "_")
    if key in _ALIASES:
        return _ALIASES[key]
    if key in _UNBOUNDED:
        raise ValueError(
            f"No global derivative bound for family {family!r} ({_UNBOUNDED[key]}); "
            "Scalable MH needs bounds over the whole space, use a full-data step."
        )
    raise ValueError(
        f"Unknown GLM family {family!r}; supported: {', '.join(FAMILIES)} "
        "(or pass the sup constant as a float)."
    )


def glm_sup_derivative(family: str, m: int, **params) -> float:
    """``sup_eta |f^(m)(eta)|`` for the per-row GLM term ``U_i = f(eta_i)`` (eq. 12).

    The constants below hold for every response ``y_i`` and ``m`` in {2, 3} (SMH-1
    uses ``m = 2``, SMH-2 ``m = 3``).

    **Bernoulli with logit link** (``family="bernoulli_logit"``; no parameters).
    With ``y in {-1, 1}``, ``f(eta) = log(1 + exp(-y eta))``; with ``y in {0, 1}``,
    ``f(eta) = log(1 + exp(eta)) - y eta``. Both have, with ``s = sigmoid(eta)``,
    ``|f''| = s (1 - s)`` and ``|f'''| = |s (1 - s)(1 - 2 s)|`` (the sign of ``y`` only
    flips odd derivatives; the linear term drops out). ``s (1 - s) <= 1/4`` (at
    ``s = 1/2``). For ``g(s) = s (1 - s)(1 - 2 s)``, ``g'(s) = 6 s^2 - 6 s + 1 = 0`` at
    ``s = 1/2 -+ 1/(2 sqrt 3)``, where ``s (1 - s) = 1/6`` and ``|1 - 2 s| = 1/sqrt 3``:

        sup |f''| = 1/4,    sup |f'''| = 1 / (6 sqrt 3) ~= 0.0962250.

    **Bernoulli with probit link** (``family="bernoulli_probit"``; no parameters).
    ``f(eta) = -log Phi(s eta)`` with ``s = 2 y - 1``, so ``|f^(m)(eta)| = |g^(m)(s eta)|``
    for ``g = log Phi``. With ``lambda = phi / Phi`` (the inverse Mills ratio, and
    ``lambda' = -lambda (t + lambda)``): ``g'' = -lambda (t + lambda)`` and
    ``g''' = lambda (t + lambda)(t + 2 lambda) - lambda``. ``-g''`` is the variance
    reduction of a normal truncated above, which lies in ``(0, 1)`` and tends to 1 as
    ``t -> -inf`` (Sampford 1953, "Some inequalities on Mill's ratio and related
    functions"); ``g'''`` is positive with one peak, at ``t* = 1.00237`` (a root of
    ``g''''``, found numerically; the tests check both facts on a fine grid):

        sup |f''| = 1,    sup |f'''| = g'''(t*) ~= 0.2957188.

    **Student-t regression**, fixed ``nu > 0`` and scale ``sigma > 0``
    (``family="student_t"``). Up to constants,
    ``f(eta) = a log(1 + r^2 / c)`` with ``r = y - eta``, ``a = (nu + 1) / 2``,
    ``c = nu sigma^2``. Derivatives in ``eta`` are ``(-1)^m`` times those in ``r``:

        f''  = 2 a (c - r^2) / (c + r^2)^2,
        f''' = 4 a r (r^2 - 3 c) / (c + r^2)^3     (as a function of r).

    ``|f''|``: in ``t = r^2``, ``h(t) = (c - t) / (c + t)^2`` is decreasing until its
    minimum ``-1/(8c)`` at ``t = 3c``, then increases to 0; so
    ``sup |h| = max(h(0), 1/(8c)) = 1/c``. ``|f'''|``: with ``r = sqrt(c) x``,
    ``f''' = 4 a c^(-3/2) k(x)``, ``k(x) = x (x^2 - 3) / (1 + x^2)^3``;
    ``k'(x) = -3 (x^4 - 6 x^2 + 1) / (1 + x^2)^4`` vanishes at ``x^2 = 3 -+ 2 sqrt 2``,
    i.e. ``x = sqrt 2 -+ 1``, where ``|k| = 1/(4 -+ 2 sqrt 2)^2``; the larger is
    ``1/(24 - 16 sqrt 2) = (3 + 2 sqrt 2)/8`` (``k -> 0`` as ``|x| -> inf``). Hence

        sup |f''|  = (nu + 1) / (nu sigma^2),
        sup |f'''| = (nu + 1)(3 + 2 sqrt 2) / (4 (nu sigma^2)^(3/2)).

    Neither depends on ``y``.

    **Normal regression**, fixed ``sigma > 0`` (``family="normal"``).
    ``f(eta) = (y - eta)^2 / (2 sigma^2)``: ``f'' = 1/sigma^2``, ``f''' = 0``, so
    SMH-2's Taylor expansion is exact and every ``psi_i`` is 0 (the thinning test then
    never touches the data).

    Parameters
    ----------
    family : str
        One of :data:`FAMILIES` (aliases: ``"logistic"``, ``"logit"``, ``"bernoulli"``, ``"probit"``,
        ``"studentt"``, ``"t"``, ``"gaussian"``).
    m : int
        Derivative order, ``k + 1`` (2 or 3).
    **params
        ``nu`` and ``sigma`` for Student-t; ``sigma`` for Normal; none for logit and probit.

    Returns
    -------
    float
    """
    fam = _canonical_family(family)
    m = int(m)
    if m not in (2, 3):
        raise ValueError(f"Derivative order m = k + 1 must be 2 or 3 (SMH-1/SMH-2), got {m}.")
    if fam == "bernoulli_logit":
        _check_params(fam, params, ())
        return 0.25 if m == 2 else _LOGIT_SUP3
    if fam == "bernoulli_probit":
        _check_params(fam, params, ())
        return 1.0 if m == 2 else _PROBIT_SUP3
    if fam == "student_t":
        _check_params(fam, params, ("nu", "sigma"))
        nu = _positive("nu", params["nu"], fam)
        sigma = _positive("sigma", params["sigma"], fam)
        c = nu * sigma * sigma
        if m == 2:
            return (nu + 1.0) / c
        return 2.0 * (nu + 1.0) * _T_SUP3 / c**1.5
    # normal
    _check_params(fam, params, ("sigma",))
    sigma = _positive("sigma", params["sigma"], fam)
    return 1.0 / (sigma * sigma) if m == 2 else 0.0


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
    family : str or float
        A family name (see :func:`glm_sup_derivative`) or the constant ``C`` itself
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
    if isinstance(family, str):
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


class UpperBounds:
    """A per-row array of bound constants stored in float32, each rounded up.

    ScalableMH keeps ``psi_i`` for as long as it lives (the thinning reads
    ``phi * psi_i`` for every candidate row). A float32 value rounded towards +inf is
    still an upper bound, so the algorithm stays exact (Cornish et al. 2019 only need
    ``lambda_i <= phi * psi_i``) while the array takes 4 bytes per row instead of 8.
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

    def put(self, start: int, stop: int, values) -> None:
        """Store ``values`` (float64, for rows ``start:stop``), rounded up."""
        v = np.broadcast_to(np.asarray(values, dtype=np.float64), (stop - start,))
        with np.errstate(over="ignore"):  # beyond float32: handled below
            r = v.astype(np.float32)
        low = r < v  # rounded down (or to -inf): move up one float32 step
        r[low] = np.nextafter(r[low], np.float32(np.inf))
        overflow = np.isinf(r) & np.isfinite(v)
        with self._lock:
            if overflow.any() and self.values.dtype == np.float32:
                self.values = self.values.astype(np.float64)
            if self.values.dtype == np.float64:
                self.values[start:stop] = v
            else:
                self.values[start:stop] = r
