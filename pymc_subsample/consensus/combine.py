"""Combiners of shard posterior draws (divide-and-conquer MCMC), pure NumPy/SciPy.

The data are split into ``S`` shards; shard ``s`` is sampled from its *subposterior*
``p_s(theta) ∝ p(theta)^(1/S) p(x_s | theta)``, so that the full posterior is the product
``p(theta | x) ∝ prod_s p_s(theta)``. A combiner turns ``S`` sets of shard draws into
draws that approximate that product. Every combiner here takes ``shard_draws``: a
sequence of ``S`` arrays of shape ``(T_s, d)`` holding draws of the same ``d``-vector (in
the unconstrained space, where a Gaussian approximation is most sensible); a 1-D array is
read as ``d = 1``.

* :func:`consensus_weighting`: the consensus Monte Carlo average of Scott et al. (2016),
  exact when every subposterior is Gaussian.
* :func:`semiparametric_product` / :func:`nonparametric_product`: the density-product
  estimators of Neiswanger, Wang & Xing (2014), with cross-validated bandwidths, sampled
  by an independence Metropolis-Hastings chain on the estimated product density;
  asymptotically exact for non-Gaussian subposteriors as well.

``COMBINERS`` maps the names that :func:`pymc_subsample.consensus_sample` accepts to these
functions. Randomness comes only from the ``numpy.random.Generator`` argument ``rng``.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg, special

from ..kernels._validation import (
    InvalidParameterError,
    check_choice,
    check_generator,
    check_positive,
    check_positive_int,
)

__all__ = [
    "consensus_weighting",
    "gaussian_product",
    "semiparametric_product",
    "nonparametric_product",
    "COMBINERS",
]


# ---------------------------------------------------------------------- validation


def _check_shard_draws(shard_draws, *, name: str = "shard_draws",
                       same_length: bool = False) -> list[np.ndarray]:
    """Shard draws as a list of finite float64 ``(T_s, d)`` arrays with a common ``d`` and
    enough draws for a non-singular sample covariance (``T_s >= d + 2``)."""
    if isinstance(shard_draws, np.ndarray) and shard_draws.ndim == 3:
        shard_draws = list(shard_draws)
    if isinstance(shard_draws, np.ndarray) or not hasattr(shard_draws, "__len__"):
        raise InvalidParameterError(
            f"{name} must be a sequence of S arrays of shape (T, d) (one per shard) or an "
            f"array (S, T, d); got {type(shard_draws).__name__}.")
    if len(shard_draws) == 0:
        raise InvalidParameterError(f"{name} is empty: give the draws of at least one shard.")
    out = []
    for s, x in enumerate(shard_draws):
        try:
            x = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise InvalidParameterError(f"{name}[{s}] is not a numeric array.") from err
        if x.ndim == 1:
            x = x[:, None]
        if x.ndim != 2:
            raise InvalidParameterError(
                f"{name}[{s}] must have shape (T, d); got shape {x.shape}.")
        out.append(x)
    d = out[0].shape[1]
    for s, x in enumerate(out):
        if x.shape[1] != d:
            raise InvalidParameterError(
                f"{name}[{s}] has d = {x.shape[1]} columns but {name}[0] has {d}: every "
                "shard must hold draws of the same vector.")
        if x.shape[0] < d + 2:
            raise InvalidParameterError(
                f"{name}[{s}] has {x.shape[0]} draws: at least d + 2 = {d + 2} are needed "
                "to estimate its covariance.")
        if not np.all(np.isfinite(x)):
            raise InvalidParameterError(
                f"{name}[{s}] contains non-finite draws (NaN or inf).")
    if same_length and len({x.shape[0] for x in out}) > 1:
        raise InvalidParameterError(
            f"{name}: consensus weighting pairs the t-th draws of every shard, so every "
            f"shard needs the same number of draws; got {[x.shape[0] for x in out]}.")
    return out


def _cov(x: np.ndarray, s: int, name: str = "shard_draws") -> np.ndarray:
    c = np.atleast_2d(np.cov(x, rowvar=False))
    try:
        linalg.cho_factor(c, lower=True)
    except linalg.LinAlgError as err:
        raise InvalidParameterError(
            f"{name}[{s}] has a singular sample covariance (a constant component, or a "
            "chain that never moved).") from err
    return c


def _precisions(draws, name="shard_draws"):
    """Sample means, covariances and precision matrices of the shards."""
    means = [x.mean(axis=0) for x in draws]
    covs = [_cov(x, s, name) for s, x in enumerate(draws)]
    precs = [linalg.cho_solve(linalg.cho_factor(c, lower=True), np.eye(len(c))) for c in covs]
    return means, covs, [0.5 * (p + p.T) for p in precs]


# ---------------------------------------------------------------------- parametric


def gaussian_product(shard_draws):
    """Mean and covariance of the product of the shards' Gaussian approximations.

    With ``mu_s``, ``Sigma_s`` the sample mean and covariance of shard ``s``,
    ``prod_s N(theta | mu_s, Sigma_s) ∝ N(theta | mu_M, Sigma_M)`` with
    ``Sigma_M = (sum_s Sigma_s^-1)^-1`` and ``mu_M = Sigma_M sum_s Sigma_s^-1 mu_s``: the
    "parametric" estimator of Neiswanger, Wang & Xing (2014), "Asymptotically Exact,
    Embarrassingly Parallel MCMC" (Sec. 3).

    Parameters
    ----------
    shard_draws : sequence of array_like, each (T_s, d)

    Returns
    -------
    mean : ndarray (d,)
    cov : ndarray (d, d)
    """
    draws = _check_shard_draws(shard_draws)
    means, _, precs = _precisions(draws)
    prec = sum(precs)
    cov = linalg.cho_solve(linalg.cho_factor(prec, lower=True), np.eye(len(prec)))
    cov = 0.5 * (cov + cov.T)
    return cov @ sum(p @ m for p, m in zip(precs, means)), cov


def consensus_weighting(shard_draws, weights="inverse_covariance"):
    """Consensus Monte Carlo: a matrix-weighted average of the shards' t-th draws.

    Scott, Blocker, Bonassi, Chipman, George & McCulloch (2016), "Bayes and big data: the
    consensus Monte Carlo algorithm" (Sec. 2, eq. for ``theta_g``):

    ``theta_t = (sum_s W_s)^-1 sum_s W_s theta_{s,t}``,  ``t = 1..T``,

    with ``W_s = Sigma_s^-1`` the inverse of shard ``s``'s sample covariance. If every
    subposterior is Gaussian, ``N(mu_s, Sigma_s)``, then ``theta_t`` is Gaussian with
    mean ``mu_M`` and covariance ``Sigma_M`` (see :func:`gaussian_product`): exactly the
    product of the subposteriors, i.e. the full posterior. Otherwise the combined draws
    are biased (by an amount that vanishes as the subposteriors approach normality, as
    each shard's data grow).

    Parameters
    ----------
    shard_draws : sequence of array_like, each (T, d)
        Draws of each shard's subposterior; all shards need the same number ``T`` (draw
        ``t`` of every shard enters combined draw ``t``; shards' draws are independent,
        so the pairing is arbitrary).
    weights : {"inverse_covariance", "identity"}, default "inverse_covariance"
        ``"identity"``: the plain average ``(1/S) sum_s theta_{s,t}``, exact only when the
        shards' posteriors have equal covariances (given for comparison).

    Returns
    -------
    ndarray (T, d)
    """
    draws = _check_shard_draws(shard_draws, same_length=True)
    check_choice("weights", weights, ("inverse_covariance", "identity"))
    if weights == "identity":
        return np.mean(draws, axis=0)
    _, _, precs = _precisions(draws)
    total = linalg.cho_factor(sum(precs), lower=True)
    weighted = sum(x @ p for x, p in zip(draws, precs))  # rows: (W_s theta_{s,t})'
    return linalg.cho_solve(total, weighted.T).T


# ---------------------------------------------------------------------- density products

_LOG_2PI = float(np.log(2.0 * np.pi))
#: what the message of a bad ``bandwidth`` asks for
_BANDWIDTH = "'cv', 'rule' or a positive finite number"
#: bandwidth grids searched by cross-validation, in units of each shard's own sd
_CV_GRID = {False: np.geomspace(0.03, 30.0, 19), True: np.geomspace(0.03, 3.0, 16)}


def _sq_dist(a: np.ndarray, b: np.ndarray, bb: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances between the rows of ``a`` and of ``b`` (``bb``: the
    rows' squared norms of ``b``)."""
    d2 = np.einsum("ij,ij->i", a, a)[:, None] - 2.0 * (a @ b.T) + bb[None, :]
    return np.maximum(d2, 0.0)


class _ShardEstimate:
    """One shard's density estimate, in the shard's own whitened coordinates
    ``u = R^-1 (theta - m)`` (``m``, ``R R'``: the shard's sample mean and covariance),
    where its Gaussian fit is ``N(0, I)`` and the kernel is ``N(0, h^2 I)``."""

    def __init__(self, x: np.ndarray, s: int):
        self.mean = x.mean(axis=0)
        self.chol = np.linalg.cholesky(_cov(x, s))
        self.u = self.whiten(x)
        self.uu = np.einsum("ij,ij->i", self.u, self.u)
        self.T, self.d = self.u.shape

    def whiten(self, y: np.ndarray) -> np.ndarray:
        return linalg.solve_triangular(self.chol, (y - self.mean).T, lower=True).T

    def log_density(self, y, h, nonparametric, chunk=2048):
        """``log p_s(y)`` up to a constant that does not depend on ``y``: the kernel
        density estimate, or the semiparametric estimate
        ``f(v) (1/T) sum_t K_h(v - u_t) / f(u_t)`` with ``v`` the whitened ``y``."""
        v = self.whiten(y)
        out = np.empty(len(v))
        for a in range(0, len(v), chunk):
            lk = -_sq_dist(v[a:a + chunk], self.u, self.uu) / (2.0 * h * h)
            if not nonparametric:
                lk += 0.5 * self.uu[None, :]  # 1 / f(u_t)
            out[a:a + chunk] = special.logsumexp(lk, axis=1)
        if not nonparametric:
            out -= 0.5 * np.einsum("ij,ij->i", v, v)  # f(v)
        return out

    def lag_window(self) -> int:
        """Draws within this many steps of a held-out draw are left out of its
        cross-validation fit: ``2 tau - 2`` with ``tau`` the largest integrated
        autocorrelation time over the coordinates (0 for independent draws), so that
        a chain's neighbouring (or repeated) draws do not pull the bandwidth to 0."""
        T = self.T
        if T < 40:
            return 0
        x = self.u - self.u.mean(axis=0)
        n = 1 << int(np.ceil(np.log2(2 * T)))
        f = np.fft.rfft(x, n=n, axis=0)
        ac = np.fft.irfft(f * np.conj(f), n=n, axis=0)[: T // 10]
        ac = ac[1:] / ac[0]
        tau = 1.0
        for j in range(self.d):
            small = ac[:, j] < 0.05
            stop = int(np.argmax(small)) if small.any() else len(small)
            tau = max(tau, 1.0 + 2.0 * float(ac[:stop, j].sum()))
        return max(int(np.ceil(2.0 * tau)) - 2, 0)

    def cv_score(self, grid, nonparametric, max_points=500):
        """Mean leave-out log density of (at most ``max_points`` evenly spaced) draws,
        for each bandwidth of ``grid``. The semiparametric estimate does not integrate
        to 1; it is normalised by ``Z = (1/T) sum_t g(u_t) / f(u_t)``, with
        ``g = N(0, (1 + h^2) I)`` the kernel-smoothed fit, before it is scored."""
        T, d = self.T, self.d
        w = self.lag_window()
        held = np.unique(np.linspace(0, T - 1, min(T, max_points)).round().astype(int))
        d2 = _sq_dist(self.u[held], self.u, self.uu)
        out = np.abs(held[:, None] - np.arange(T)[None, :]) <= w  # left out
        log_n = np.log((~out).sum(axis=1))
        scores = np.empty(len(grid))
        for k, h in enumerate(grid):
            lk = -d2 / (2.0 * h * h)
            if not nonparametric:
                lk += 0.5 * self.uu[None, :]
            lk[out] = -np.inf
            val = special.logsumexp(lk, axis=1) - log_n - d * np.log(h) - 0.5 * d * _LOG_2PI
            if not nonparametric:
                val += -0.5 * self.uu[held] - 0.5 * d * _LOG_2PI  # log f(u_t)
                lz = (-0.5 * d * np.log1p(h * h) + 0.5 * self.uu * h * h / (1.0 + h * h))
                lz = np.where(out, -np.inf, lz[None, :])
                val -= special.logsumexp(lz, axis=1) - log_n
            scores[k] = val.mean()
        return scores


def semiparametric_product(shard_draws, *, rng, draws=None, bandwidth="cv",
                           nonparametric=False, proposals_per_draw=4, return_info=False):
    """Draws from the semiparametric (or nonparametric) density-product estimator.

    The estimator is that of Neiswanger, Wang & Xing (2014), "Asymptotically Exact,
    Embarrassingly Parallel MCMC" (Sec. 3); the bandwidth choice and the sampler are not
    the paper's (see below, and ``docs/consensus.md``).

    **Estimator.** Each subposterior is estimated by its Gaussian fit
    ``f_s = N(m_s, Sigma_s)`` (sample mean and covariance) times a kernel correction
    (the semiparametric density estimator of Hjort & Glad, "Nonparametric density
    estimation with a parametric start"),

    ``p_s(theta) ≈ f_s(theta) (1/T_s) sum_t K_s(theta - theta^s_t) / f_s(theta^s_t)``,

    with the Gaussian kernel ``K_s = N(0, h_s^2 Sigma_s)`` (shaped like the shard's
    covariance), and the full posterior by the product ``prod_s p_s``. Since
    ``prod_s f_s ∝ N(mu_M, Sigma_M)`` (:func:`gaussian_product`), the product is
    ``N(mu_M, Sigma_M) prod_s r_s(theta)`` with the correction factors
    ``r_s = (1/T_s) sum_t K_s(theta - theta^s_t) / f_s(theta^s_t)``. As ``h_s -> inf`` it
    tends to the Gaussian (parametric) product; as ``h_s -> 0`` to the product of the
    kernel density estimates ``(1/T_s) sum_t K_s(theta - theta^s_t)``, which
    ``nonparametric=True`` uses instead. If the shard's draws come from ``f_s``, the
    correction has expectation 1 for every ``h_s``: for Gaussian subposteriors the
    estimator has no smoothing bias, only noise, which a large ``h_s`` removes.

    **Bandwidth.** ``bandwidth="cv"`` (default) picks each ``h_s`` (in units of the
    shard's sd) from a grid by leave-out likelihood cross-validation of the shard's
    estimate (normalised), leaving out the held-out draw's chain neighbours within
    twice the autocorrelation time. On Gaussian-looking shards this selects a large
    ``h_s`` (the estimate is then essentially the Gaussian product); on skewed or
    bounded shards a small one. ``bandwidth="rule"`` uses ``h_s = T_s^(-1/(4+d))``, the
    final value of the paper's annealing schedule; a number fixes every ``h_s``.

    **Sampler.** The product density above is evaluated exactly, at ``O(T_s d)`` cost per
    shard and point, so it is sampled directly by an independence Metropolis-Hastings
    chain with proposal ``0.9 N(mu_M, Sigma_M) + 0.1 N(mu_M, 4 Sigma_M)``
    (``proposals_per_draw`` proposals per returned draw, the chain thinned
    accordingly). The weight ``target / proposal`` is bounded (each ``r_s`` is), so the
    chain is uniformly ergodic. The paper's sampler, Metropolis-within-Gibbs over the
    tuple of shard-draw indices with an annealed bandwidth, was used here before and
    replaced: at small bandwidths the index tuple barely moves (measured: with S = 2,
    T = 30 draws, d = 1, h = 0.3, the variance of 150,000-draw halves of one chain
    ranged over 0.39 - 0.50 against the exact mixture's 0.451), and on Gaussian shards
    in d = 3 its means were off by up to 0.3 sd.

    Parameters
    ----------
    shard_draws : sequence of array_like, each (T_s, d)
        Draws of each shard's subposterior (shards may hold different numbers of draws).
    rng : numpy.random.Generator
        The only source of randomness.
    draws : int, optional
        Number of combined draws; default ``max_s T_s``.
    bandwidth : "cv", "rule" or float, default "cv"
        The kernel sds ``h_s`` in units of each shard's sd (see above).
    nonparametric : bool, default False
        Sample the nonparametric product of kernel density estimates.
    proposals_per_draw : int, default 4
        Independence proposals per returned draw (the cost is proportional to it).
    return_info : bool, default False
        Also return a dict: ``bandwidths`` (the ``h_s``), ``acceptance_rate`` of the
        independence chain, and ``importance_ess``, the effective sample size of the
        proposals' importance weights (``sum(w)^2 / sum(w^2)``; if it is far below
        ``draws``, the returned draws hold few distinct points).

    Returns
    -------
    ndarray (draws, d), and the dict if ``return_info``.

    Notes
    -----
    The draws are a (thinned) Markov chain; their mean carries the chain's Monte Carlo
    error plus the estimator's own error from the finitely many shard draws, which for
    a small bandwidth grows quickly with ``d`` (the kernel estimates are then noisy where
    the shards overlap, in their tails). Cost: ``O(draws * proposals_per_draw * S * T * d)``.
    """
    xs = _check_shard_draws(shard_draws)
    rng = check_generator("rng", rng)
    n = max(x.shape[0] for x in xs) if draws is None else check_positive_int("draws", draws)
    k = check_positive_int("proposals_per_draw", proposals_per_draw)
    S, d = len(xs), xs[0].shape[1]
    shards = [_ShardEstimate(x, s) for s, x in enumerate(xs)]
    if isinstance(bandwidth, str):
        check_choice("bandwidth", bandwidth, ("cv", "rule"), what=_BANDWIDTH)
        if bandwidth == "cv":
            grid = _CV_GRID[bool(nonparametric)]
            hs = [float(grid[np.argmax(sh.cv_score(grid, nonparametric))]) for sh in shards]
        else:
            hs = [float(sh.T ** (-1.0 / (4.0 + d))) for sh in shards]
    else:
        hs = [check_positive("bandwidth", bandwidth, what=_BANDWIDTH)] * S

    # proposals from the defensive mixture 0.9 N(mu_M, Sigma_M) + 0.1 N(mu_M, 4 Sigma_M)
    mu_m, sigma_m = gaussian_product(xs)
    chol = np.linalg.cholesky(sigma_m)
    alpha, wide = 0.1, 2.0
    M = k * n
    z = rng.standard_normal((M, d))
    z[rng.random(M) < alpha] *= wide
    log_u = np.log(rng.random(M))
    y = mu_m + z @ chol.T
    zz = np.einsum("ij,ij->i", z, z)
    log_q = np.logaddexp(np.log1p(-alpha) - 0.5 * zz,
                         np.log(alpha) - d * np.log(wide) - 0.5 * zz / wide**2)
    log_w = sum(sh.log_density(y, h, nonparametric) for sh, h in zip(shards, hs)) - log_q
    if not np.all(np.isfinite(log_w)):  # a proposal far beyond every kernel (underflow)
        log_w = np.where(np.isfinite(log_w), log_w, -np.inf)
    w = np.exp(log_w - log_w.max())
    importance_ess = float(w.sum() ** 2 / (w**2).sum())

    keep = np.empty(n, dtype=np.int64)
    cur = int(np.argmax(np.isfinite(log_w)))
    accepted = 0
    for i in range(M):
        if log_u[i] < log_w[i] - log_w[cur]:
            cur = i
            accepted += 1
        if i % k == k - 1:
            keep[i // k] = cur
    theta = y[keep]
    if return_info:
        return theta, {"bandwidths": hs, "acceptance_rate": accepted / M,
                       "importance_ess": importance_ess}
    return theta


def nonparametric_product(shard_draws, *, rng, draws=None, bandwidth="cv",
                          proposals_per_draw=4, return_info=False):
    """Draws from the nonparametric product of the shards' kernel density estimates.

    Neiswanger, Wang & Xing (2014), "Asymptotically Exact, Embarrassingly Parallel MCMC",
    Sec. 3: :func:`semiparametric_product` with ``nonparametric=True`` (see there for the
    estimator, the bandwidth choice and the sampler). It carries the kernel-smoothing
    bias of each estimate (every shard's estimate is widened by its kernel), so it is
    mainly given for comparison; prefer the semiparametric product.
    """
    return semiparametric_product(shard_draws, rng=rng, draws=draws, bandwidth=bandwidth,
                                  nonparametric=True, proposals_per_draw=proposals_per_draw,
                                  return_info=return_info)


def _consensus(shard_draws, *, rng=None, draws=None):
    return consensus_weighting(shard_draws)


#: combiner name -> function ``f(shard_draws, *, rng, draws=None) -> (draws, d)``
COMBINERS = {
    "consensus": _consensus,
    "semiparametric": semiparametric_product,
    "nonparametric": nonparametric_product,
}
