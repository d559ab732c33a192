"""Dynamic programme for the error of the Austerity MH sequential test (Sec. 5.1).

Builds the :class:`~pymc_subsample.kernels.acceptance.austere_error.SequentialTestDP` of Section 5.1
of Korattikara, Chen & Welling (2014), "Austerity in MCMC Land: Cutting the
Metropolis-Hastings Budget", for the test of
:func:`pymc_subsample.kernels.acceptance.austere.austere_test`. The model (the t statistic as a
Gaussian random walk in ``tau = n / (N - n)``) is stated in
:mod:`pymc_subsample.kernels.acceptance.austere_error`. Pure NumPy/SciPy; no PyMC.

Dynamic programme and discretisation
------------------------------------
One driftless pass (``mu_std = 0``) propagates the sub-density of the not-yet-stopped
statistic through the stages; every ``mu_std`` is then obtained by a change of measure
(Girsanov / likelihood ratio ``exp(mu_std B(tau) - mu_std^2 tau / 2)``, which does not
depend on the path before ``tau``), so one pass per ``(m, epsilon)`` serves all
``mu_std``.

* **State space.** At each stage the continuation region is the interval
  ``[-c_j, c_j]`` of ``t``; the sub-density there is represented at ``K`` Gauss-Legendre
  nodes scaled to that interval (Nystrom method). The integrand (a Gaussian kernel of
  width ``s_j`` times a smooth density) is analytic, so the quadrature converges
  exponentially; by default ``K = 3 c_max / s_min + 16`` (clipped to 24..600), with
  ``s_min`` the smallest one-stage standard deviation of ``t`` (48 nodes for
  ``epsilon = 0.05``, 77 for ``epsilon = 0.001``); doubling ``K`` changes ``E`` by less
  than ``1e-7``.
  Exits are integrated analytically (normal cdf) from the previous stage's nodes.
* **Stages.** Only the first and last few checks are far apart in the natural time
  ``r = log tau``; in between, consecutive checks are ``~1/j`` apart and there are up to
  ``N/m`` of them. Runs of checks closer than ``merge_step`` in ``r`` are merged into one
  check, whose boundary is moved inwards by the Broadie-Glasserman-Kou continuity
  correction ``beta (sqrt(dr_merged) - sqrt(dr_fine))``, ``beta = -zeta(1/2)/sqrt(2 pi)
  = 0.5826``, so that monitoring every ``dr_merged`` mimics monitoring every ``dr_fine``.
  The number of DP stages is then ``~2/merge_step + 2 log(N/m)/merge_step`` whatever
  ``N``: 496 for ``N = 1e8``, ``m = 100`` (a million checks), 247 for ``N = 1e6``,
  ``m = 500``. Data use inside a merged run is interpolated linearly (trapezoid) between
  its end points. Against the unmerged DP the merged one is off by at most about
  ``4e-4`` in ``E`` and ``1.3e-3`` in the data fraction (``merge_step = 0.05``;
  ``1e-4`` and ``6e-4`` with ``0.02``).
* **Truncation.** The pass stops once the driftless continuing mass times
  ``exp(c^2/2)`` (a bound on the continuing mass under any drift) is below ``tol``; the
  remainder is charged the full data set and no error.

``merge_step=0`` turns merging off (one DP stage per check; ``K`` then grows like
``sqrt(N/m)``, only practical for small ``N/m``). The tests check the DP against
simulation of the kernel with sampling without replacement (as Fig. 1 of the paper does),
against the unmerged DP, and against a direct drifted DP.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import special

from .._validation import check_epsilon, check_int, check_real
from .austere_error import SequentialTestDP

__all__ = ["BGK_BETA", "sequential_test_dp", "sequential_test_error"]

BGK_BETA = 0.5825971579390106  # -zeta(1/2) / sqrt(2 pi)
_SQRT_2PI = math.sqrt(2.0 * math.pi)


@functools.lru_cache(maxsize=64)
def _leggauss(k):
    gx, gw = np.polynomial.legendre.leggauss(k)
    gx.setflags(write=False)
    gw.setflags(write=False)
    return gx, gw


def _schedule(n_total, m0, inc, merge_step):
    """Real checks (t-tests at n < N) and the merged DP stages over them.

    Returns arrays over DP stages: index q of the real check each stage sits at, the
    number k of real checks merged into the step leading to it, and n at the check.
    """
    n_checks = 0 if m0 >= n_total else (n_total - m0 + inc - 1) // inc  # checks with n < N

    def n_of(q):
        return m0 + q * inc

    def r_of(q):
        n = n_of(q)
        return math.log(n / (n_total - n))

    qs = [0]
    ks = [0]
    p = 0
    while p < n_checks - 1:
        if merge_step > 0:
            target = r_of(p) + merge_step
            # largest q with r_q <= target: n_q <= N * expit(target)
            n_max = n_total * special.expit(target)
            q = int(math.floor((n_max - m0) / inc))
            q = min(max(q, p + 1), n_checks - 1)
            while q > p + 1 and r_of(q) > target:  # guard against rounding
                q -= 1
        else:
            q = p + 1
        qs.append(q)
        ks.append(q - p)
        p = q
    qs = np.asarray(qs, dtype=np.int64)
    return n_checks, qs, np.asarray(ks, dtype=np.int64), m0 + qs * inc


def sequential_test_dp(
    n_total: int,
    batch_size: int,
    epsilon: float,
    *,
    batch_increment: int | None = None,
    merge_step: float = 0.05,
    n_nodes: int | None = None,
    tol: float = 1e-10,
) -> SequentialTestDP:
    """Dynamic programme for the error of the whole sequential test (Sec. 5.1).

    Computes, for the test of :func:`~pymc_subsample.kernels.acceptance.austere.austere_test` with
    first batch ``batch_size`` and increment ``batch_increment``, the driftless
    propagation of the Gaussian random walk followed by the t statistic (module
    docstring), from which :meth:`~pymc_subsample.kernels.acceptance.austere_error.SequentialTestDP.evaluate` gives
    ``E(mu_std, m, epsilon)`` and the expected data fraction for any ``mu_std``.

    Parameters
    ----------
    n_total : int
        ``N``, at least 2.
    batch_size : int
        First mini-batch ``m``, at least 2 (a t-test needs two rows).
    epsilon : float
        Per-test level in ``[0, 0.5)``; 0 gives the exact test (``E = 0``, all data).
    batch_increment : int, optional
        Rows added per stage (default ``batch_size``).
    merge_step : float, default 0.05
        Checks closer than this in ``log tau`` are merged with the Broadie-Glasserman-Kou
        boundary correction; 0 disables merging.
    n_nodes : int, optional
        Gauss-Legendre nodes per stage (default: from ``c_max / s_min``, 24 to 600).
    tol : float, default 1e-10
        Truncation tolerance on the continuing probability under any drift.

    Returns
    -------
    SequentialTestDP
    """
    n_total = check_int("n_total", n_total, 2)
    m0 = check_int("batch_size", batch_size, 2)
    inc = m0 if batch_increment is None else check_int("batch_increment", batch_increment, 1)
    eps = check_epsilon(epsilon)
    merge_step = check_real("merge_step", merge_step, 0.0, math.inf, closed="left")
    check_real("tol", tol, 0.0, math.inf, closed="right")

    def empty():
        z = np.zeros(0)
        return SequentialTestDP(
            n_total, m0, inc, eps, 0 if eps == 0 else max(0, -(-(n_total - m0) // inc)),
            0, 0, False, z, z, z, z, np.zeros((0, 0)), np.zeros((0, 0)), z, 1.0,
        )

    if eps == 0.0 or m0 >= n_total:
        return empty()

    n_checks, qs, ks, ns = _schedule(n_total, m0, inc, merge_step)
    M = qs.size
    tau = ns / (n_total - ns)
    c = special.stdtrit(ns - 1.0, 1.0 - eps)
    a = np.ones(M)
    s = np.ones(M)
    if M > 1:
        ratio = tau[:-1] / tau[1:]
        a[1:] = np.sqrt(ratio)
        s[1:] = np.sqrt(-np.expm1(np.log(ratio)))
        # Broadie-Glasserman-Kou: merged monitoring every dr mimics monitoring every dr/k.
        dr = -np.log(ratio)
        k = ks[1:]
        fine = np.sqrt(-np.expm1(-dr / k))
        shift = BGK_BETA * (s[1:] - fine)
        c[1:] = np.maximum(c[1:] - np.where(k > 1, shift, 0.0), 0.5 * c[1:])
    if n_nodes is None:
        s_min = s[1:].min() if M > 1 else 1.0
        K = int(np.clip(math.ceil(3.0 * c.max() / s_min) + 16, 24, 600))
    else:
        K = check_int("n_nodes", n_nodes, 4)
    gx, gw = _leggauss(K)

    xs = np.empty((M, K))
    vs = np.empty((M, K))
    xs[0] = c[0] * gx
    vs[0] = c[0] * gw * np.exp(-0.5 * xs[0] ** 2) / _SQRT_2PI  # t_1 ~ N(0, 1)
    last = M - 1
    truncated = False
    for i in range(1, M):
        if vs[i - 1].sum() * math.exp(0.5 * c[i - 1] ** 2) < tol:
            last = i - 1
            truncated = True
            break
        y = c[i] * gx
        d = (y[:, None] - a[i] * xs[i - 1][None, :]) * (1.0 / s[i])
        g = np.exp(-0.5 * d * d) @ vs[i - 1] / (s[i] * _SQRT_2PI)
        xs[i] = y
        vs[i] = c[i] * gw * g
    M = last + 1
    xs, vs = xs[:M], vs[:M]
    tau, c, a, s, ks, qs, ns = tau[:M], c[:M], a[:M], s[:M], ks[:M], qs[:M], ns[:M]

    w = np.zeros(M)
    step = inc / n_total
    if M > 1:
        kk = ks[1:].astype(float)
        w[:-1] += step * (kk + 1) / 2
        w[1:] += step * (kk - 1) / 2
    w[-1] += (n_total - ns[-1]) / n_total
    return SequentialTestDP(
        n_total=n_total, batch_size=m0, batch_increment=inc, epsilon=eps,
        n_checks=n_checks, n_stages=M, n_nodes=K, truncated=truncated,
        tau=tau, c=c, a=a, s=s, x=xs, v=vs, use_weight=w, pi_first=m0 / n_total,
    )


def sequential_test_error(mu_std, n_total, batch_size, epsilon, **kwargs):
    """``(E(mu_std, m, epsilon), pi_bar(mu_std, m, epsilon))`` of Sec. 5.1.

    Convenience wrapper: ``sequential_test_dp(n_total, batch_size, epsilon,
    **kwargs).evaluate(mu_std)``.
    """
    return sequential_test_dp(n_total, batch_size, epsilon, **kwargs).evaluate(mu_std)
