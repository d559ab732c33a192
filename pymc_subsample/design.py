"""Error analysis and optimal design of the Austerity MH sequential test.

Sections 5.1-5.2 of Korattikara, Chen & Welling (2014). Pure NumPy/SciPy; no PyMC.

Model (Sec. 5.1 of the paper; the derivation is restated here)
-----------------------------------------------------------------
The per-row differences ``l_i`` form a finite population of size ``N`` with mean ``mu``
and standard deviation ``sigma`` (``1/N`` convention). The test of
:func:`pymc_subsample.kernels.austere.austere_test` looks at ``n_1 < n_2 < ... < N`` rows
drawn without replacement (``n_j = m + (j - 1) * increment``). Treating the t statistic
as a z statistic (``sigma`` known) and the sample means as jointly Gaussian, with the
without-replacement covariance ``cov(l_bar_n, l_bar_n') = sigma^2 (N - n') / (n' (N - 1))``
for ``n <= n'``, the statistic at stage ``j`` is exactly

    t_j = B(tau_j) / sqrt(tau_j),   tau_j = n_j / (N - n_j),   B(tau) = W(tau) + mu_std tau,

with ``W`` a standard Brownian motion and ``mu_std`` the paper's standardised mean

    mu_std = (mu - mu_0) sqrt(N - 1) / sigma.

So ``t_j`` is a Gaussian random walk observed at ``tau_1 < tau_2 < ...``: between stages,
``t_{j+1} = a_j t_j + mu_std sqrt(tau_{j+1}) s_j^2 + s_j Z`` with
``a_j = sqrt(tau_j / tau_{j+1})``, ``s_j^2 = 1 - tau_j / tau_{j+1}``. The test stops at
the first stage with ``|t_j| > c_j``, ``c_j`` the ``1 - epsilon`` quantile of the
Student-t distribution with ``n_j - 1`` degrees of freedom (the same threshold the kernel
uses), and decides for the sign of ``t_j``; at ``n = N`` the decision is exact. (The
kernel's eq. 4 estimates the variance of ``l_bar`` with a relative bias ``1/(N - 1)``,
negligible here.) The error
``E(mu_std, m, epsilon)`` is the probability that the decision differs from the exact MH
decision (the sign of ``mu_std``), and ``pi_bar(mu_std, m, epsilon)`` the expected fraction
of the data used. Both are even in ``mu_std``; ``E(0)`` is defined as the limit
``mu_std -> 0+`` and is the worst case (Fig. 1 of the paper).

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
from dataclasses import dataclass, field

import numpy as np
from scipy import special

__all__ = [
    "SequentialTestDP",
    "sequential_test_dp",
    "sequential_test_error",
    "standardized_mean",
    "AusterityDesign",
    "design_austerity_test",
    "DEFAULT_BATCH_SIZES",
    "DEFAULT_EPSILONS",
]

BGK_BETA = 0.5825971579390106  # -zeta(1/2) / sqrt(2 pi)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
_KAPPA_MAX = 1e6

DEFAULT_BATCH_SIZES = (100, 200, 500, 1000, 2000, 5000, 10000)
DEFAULT_EPSILONS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3)


def _check_int(name, value, minimum):
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        value = int(value)
    if not isinstance(value, (int, np.integer)) or int(value) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return int(value)


def _check_epsilon(epsilon):
    try:
        eps = float(epsilon)
    except (TypeError, ValueError):
        raise ValueError(f"epsilon must be a number in [0, 0.5), got {epsilon!r}.") from None
    if not (0.0 <= eps < 0.5):
        raise ValueError(f"epsilon must be in [0, 0.5), got {epsilon!r}.")
    return eps


def standardized_mean(l_mean, l_sd, mu_0, n_total):
    """Standardised mean ``mu_std`` of Sec. 5.1 (Korattikara et al. 2014).

    ``mu_std = (mu - mu_0) * sqrt(N - 1) / sigma``, where ``mu`` and ``sigma`` are the
    mean and standard deviation (``ddof=0``) of all ``N`` values ``l_i`` of one pair
    ``(theta, theta')``, and ``mu_0 = (log u - log_ratio_o1) / N`` (eq. 2). The error and
    data use of the sequential test depend on ``(theta, theta', u)`` only through it.

    Parameters
    ----------
    l_mean, l_sd, mu_0 : array_like
        Broadcast together (e.g. per-pair statistics of a trial run against the ``mu_0``
        each pair was tested with, or against a grid of ``u``).
    n_total : int
        ``N``.

    Returns
    -------
    numpy.ndarray
        ``mu_std``; ``+-inf`` where ``l_sd == 0`` and ``mu != mu_0``, 0 where both
        vanish.
    """
    n_total = _check_int("n_total", n_total, 2)
    l_mean, l_sd, mu_0 = np.broadcast_arrays(
        np.asarray(l_mean, float), np.asarray(l_sd, float), np.asarray(mu_0, float)
    )
    if np.any(l_sd < 0):
        raise ValueError("l_sd must be non-negative.")
    diff = (l_mean - mu_0) * math.sqrt(n_total - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = diff / l_sd
    return np.where((l_sd == 0) & (diff == 0), 0.0, out)


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


@dataclass
class SequentialTestDP:
    """Driftless dynamic programme of the Austerity sequential test, any ``mu_std``.

    Built by :func:`sequential_test_dp`; see the module docstring for the formulation.
    Call :meth:`evaluate` (or :meth:`error`, :meth:`data_use`) for ``E(mu_std, m,
    epsilon)`` and ``pi_bar(mu_std, m, epsilon)`` of Sec. 5.1, and
    :meth:`acceptance_error` for ``Delta`` of eq. 6.
    """

    n_total: int
    batch_size: int
    batch_increment: int
    epsilon: float
    n_checks: int  # t-tests before n = N
    n_stages: int  # DP stages after merging / truncation
    n_nodes: int
    truncated: bool
    tau: np.ndarray = field(repr=False)
    c: np.ndarray = field(repr=False)
    a: np.ndarray = field(repr=False)
    s: np.ndarray = field(repr=False)
    x: np.ndarray = field(repr=False)
    v: np.ndarray = field(repr=False)
    use_weight: np.ndarray = field(repr=False)
    pi_first: float = 0.0
    _table: tuple | None = field(default=None, repr=False)

    @property
    def exact(self) -> bool:
        """True when the test never stops early (``epsilon == 0`` or ``m >= N``)."""
        return self.n_stages == 0

    def evaluate(self, mu_std, *, chunk_elems: int = 2_000_000):
        """``(E(mu_std), pi_bar(mu_std))``: error and expected data fraction (Sec. 5.1).

        Parameters
        ----------
        mu_std : array_like
            Standardised means; only ``|mu_std|`` matters.

        Returns
        -------
        error, data_use : numpy.ndarray
            Same shape as ``mu_std``. ``data_use`` is a fraction of ``N``.
        """
        z = np.abs(np.asarray(mu_std, dtype=float))
        shape = z.shape
        z = z.ravel()
        if np.any(np.isnan(z)):
            raise ValueError("mu_std contains NaN.")
        err = np.zeros(z.size)
        use = np.ones(z.size)
        if self.exact or z.size == 0:
            return err.reshape(shape), use.reshape(shape)
        order = np.argsort(z)
        zs = z[order]
        M, K = self.x.shape
        sq_tau = np.sqrt(self.tau)
        # exp(kappa x - kappa^2/2) <= exp(c^2/2 - (kappa - c)^2/2): stages with
        # kappa > c + 12 add less than 1e-27 and are skipped.
        cut = float(self.c.max()) + 12.0
        s2 = self.s**2
        per = max(1, min(16, chunk_elems // (M * K)))
        e_out = np.empty(z.size)
        u_out = np.empty(z.size)
        for start in range(0, z.size, per):
            zc = zs[start : start + per]
            # stages beyond which every mu in the chunk has kappa > c + 12 add nothing
            mstop = int(np.searchsorted(sq_tau * zc[0], cut, side="right")) + 1
            mstop = min(max(mstop, 1), M)
            kap = np.minimum(zc[:, None] * sq_tau[None, :mstop], _KAPPA_MAX)  # (c, M')
            with np.errstate(under="ignore"):
                omega = self.v[None, :mstop] * np.exp(
                    kap[:, :, None] * self.x[None, :mstop] - 0.5 * kap[:, :, None] ** 2
                )
                cont = omega.sum(-1)  # P_mu(continue past stage i)
                e = special.ndtr(-self.c[0] - kap[:, 0])
                if mstop > 1:
                    arg = (
                        -self.c[1:mstop, None]
                        - self.a[1:mstop, None] * self.x[: mstop - 1]
                    )[None] - (kap[:, 1:mstop] * s2[1:mstop])[:, :, None]
                    arg /= self.s[1:mstop, None]
                    e = e + (omega[:, : mstop - 1] * special.ndtr(arg)).sum(-1).sum(-1)
            e_out[start : start + zc.size] = e
            u_out[start : start + zc.size] = self.pi_first + cont @ self.use_weight[:mstop]
        err[order] = e_out
        use[order] = np.minimum(u_out, 1.0)
        return err.reshape(shape), use.reshape(shape)

    def error(self, mu_std):
        """``E(mu_std, m, epsilon)``: probability of a decision other than exact MH's."""
        return self.evaluate(mu_std)[0]

    def data_use(self, mu_std):
        """``pi_bar(mu_std, m, epsilon)``: expected fraction of the data used."""
        return self.evaluate(mu_std)[1]

    # -- interpolation table for averages ---------------------------------------------
    def table(self, per_decade: int = 16):
        """Nodes ``z >= 0`` and ``E``, ``pi_bar`` there, for piecewise-linear interpolation.

        The nodes are 0 and a geometric grid from ``0.05 / sqrt(tau_last)`` (below which
        ``E`` and ``pi_bar`` are flat to first order) to ``(c + 10) / sqrt(tau_first)``
        (beyond which the first stage decides correctly with probability ``1 - 1e-23``).
        """
        if self._table is not None and self._table[0] == per_decade:
            return self._table[1:]
        if self.exact:
            nodes = np.array([0.0, 1.0])
        else:
            lo = 0.05 / math.sqrt(self.tau[-1])
            hi = (float(self.c.max()) + 10.0) / math.sqrt(self.tau[0])
            num = max(8, int(math.ceil(per_decade * math.log10(hi / lo))) + 1)
            nodes = np.concatenate([[0.0], np.geomspace(lo, hi, num)])
        e, u = self.evaluate(nodes)
        self._table = (per_decade, nodes, e, u)
        return nodes, e, u

    def interpolate(self, mu_std):
        """``(E, pi_bar)`` at ``mu_std`` by linear interpolation in :meth:`table`."""
        nodes, e, u = self.table()
        z = np.abs(np.asarray(mu_std, dtype=float))
        return np.interp(z, nodes, e), np.interp(z, nodes, u)

    def acceptance_error(self, l_mean, l_sd, log_ratio_o1):
        """Error ``Delta`` in the acceptance probability of pairs ``(theta, theta')``, eq. 6.

        ``Delta = P_a,approx - P_a,exact = int_{P_a}^1 E(mu_std(u)) du -
        int_0^{P_a} E(mu_std(u)) du``. With ``mu_0(u) = (log u - log_ratio_o1) / N``,
        ``mu_std(u) = z_1 + (-log u) / lam`` with ``z_1 = mu_std(u=1)`` and
        ``lam = N sigma / sqrt(N - 1)``, i.e. ``mu_std - z_1`` is exponential with rate
        ``lam`` when ``u`` is uniform; the integral over ``u`` is done exactly against
        the piecewise-linear interpolant of ``E`` (cell masses and conditional means of
        the truncated exponential). Also returns the expected data fraction averaged over
        ``u``.

        Parameters
        ----------
        l_mean, l_sd : array_like
            Mean and standard deviation (``ddof=0``) of all ``N`` values ``l_i`` per pair.
        log_ratio_o1 : array_like
            Data-free log ratio per pair.

        Returns
        -------
        delta, data_use : numpy.ndarray
            One value per pair.
        """
        n = self.n_total
        l_mean, l_sd, o1 = np.broadcast_arrays(
            np.asarray(l_mean, float), np.asarray(l_sd, float), np.asarray(log_ratio_o1, float)
        )
        shape = l_mean.shape
        l_mean, l_sd, o1 = l_mean.ravel(), l_sd.ravel(), o1.ravel()
        if np.any(l_sd < 0) or not np.all(np.isfinite(l_sd)):
            raise ValueError("l_sd must be finite and non-negative.")
        if not (np.all(np.isfinite(l_mean)) and np.all(np.isfinite(o1))):
            raise ValueError("l_mean and log_ratio_o1 must be finite.")
        nodes, e, u = self.table()
        zn = np.concatenate([-nodes[:0:-1], nodes])
        en = np.concatenate([e[:0:-1], e])
        un = np.concatenate([u[:0:-1], u])
        with np.errstate(divide="ignore", invalid="ignore"):
            z1 = standardized_mean(l_mean, l_sd, -o1 / n, n)
            lam = n * l_sd / math.sqrt(n - 1)
        delta = np.zeros(l_mean.size)
        use = np.zeros(l_mean.size)
        deg = ~(lam > 0) | ~np.isfinite(z1)
        ok = ~deg
        if np.any(deg):  # constant l_i: mu_std is z_1 for every u
            zz = np.where(np.isfinite(z1[deg]), z1[deg], np.sign(z1[deg]) * nodes[-1])
            ee, uu = np.interp(np.abs(zz), nodes, e), np.interp(np.abs(zz), nodes, u)
            delta[deg] = -np.sign(zz) * ee
            use[deg] = uu
        if np.any(ok):
            zf, lf = z1[ok][:, None], lam[ok][:, None]
            lo = np.concatenate([[-np.inf], zn])[None, :]
            hi = np.concatenate([zn, [np.inf]])[None, :]
            a = np.maximum(lo, zf)
            width = hi - a
            with np.errstate(over="ignore", invalid="ignore", under="ignore"):
                tail = np.exp(-lf * (a - zf))  # P(Z > a)
                mass = np.where(width > 0, tail * -np.expm1(-lf * width), 0.0)
                x = lf * width
                cmean = np.where(
                    x < 1e-6, a + 0.5 * width, a + 1.0 / lf - width / np.expm1(x)
                )
            cmean = np.where(np.isfinite(cmean), cmean, a)
            ecell = np.interp(cmean, zn, en)
            ucell = np.interp(cmean, zn, un)
            sign = np.where(0.5 * (np.maximum(lo, -1e300) + np.minimum(hi, 1e300)) < 0, 1.0, -1.0)
            sign = np.broadcast_to(sign, mass.shape)
            delta[ok] = (mass * sign * ecell).sum(-1)
            use[ok] = (mass * ucell).sum(-1) / mass.sum(-1)
        return delta.reshape(shape), use.reshape(shape)


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

    Computes, for the test of :func:`~pymc_subsample.kernels.austere.austere_test` with
    first batch ``batch_size`` and increment ``batch_increment``, the driftless
    propagation of the Gaussian random walk followed by the t statistic (module
    docstring), from which :meth:`SequentialTestDP.evaluate` gives
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
    n_total = _check_int("n_total", n_total, 2)
    m0 = _check_int("batch_size", batch_size, 2)
    inc = m0 if batch_increment is None else _check_int("batch_increment", batch_increment, 1)
    eps = _check_epsilon(epsilon)
    merge_step = float(merge_step)
    if not (merge_step >= 0 and math.isfinite(merge_step)):
        raise ValueError(f"merge_step must be a finite number >= 0, got {merge_step!r}.")
    if not (tol > 0):
        raise ValueError(f"tol must be positive, got {tol!r}.")

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
        K = _check_int("n_nodes", n_nodes, 4)
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


@dataclass(frozen=True)
class AusterityDesign:
    """Result of :func:`design_austerity_test`.

    Attributes
    ----------
    batch_size, epsilon : int, float
        The chosen design (``epsilon == 0`` means no grid point met the bound and exact
        MH is the design).
    expected_data_use : float
        Expected fraction of ``N`` used per test under the criterion's averaging.
    error : float
        The constrained error of the chosen design (0 for exact MH).
    criterion : str
        ``"worst-case"`` (eq. 8), ``"average-decision"`` (mean of ``E(mu_std)`` over the
        supplied samples) or ``"average-acceptance"`` (mean ``|Delta|`` of eq. 6-7).
    max_error : float
        The bound.
    n_total : int
    batch_sizes, epsilons : numpy.ndarray
        The grid searched.
    error_grid, data_use_grid : numpy.ndarray
        Shape ``(len(batch_sizes), len(epsilons))``.
    feasible : bool
        False when no grid point met the bound (the exact test is returned).
    """

    batch_size: int
    epsilon: float
    expected_data_use: float
    error: float
    criterion: str
    max_error: float
    n_total: int
    batch_sizes: np.ndarray = field(repr=False)
    epsilons: np.ndarray = field(repr=False)
    error_grid: np.ndarray = field(repr=False)
    data_use_grid: np.ndarray = field(repr=False)
    feasible: bool = True


def design_austerity_test(
    n_total: int,
    *,
    max_error: float = 0.05,
    mu_std=None,
    pair_stats=None,
    batch_sizes=None,
    epsilons=None,
    merge_step: float = 0.05,
) -> AusterityDesign:
    """Optimal sequential test design by grid search (Sec. 5.2, eqs 7-8).

    Picks ``(batch_size m, epsilon)`` on a grid minimising the expected data use subject
    to an error bound (batch increment = ``m``, as in Algorithm 1):

    * **worst case** (neither ``mu_std`` nor ``pair_stats``; eq. 8): minimise
      ``pi_bar(0, m, epsilon)`` s.t. ``E(0, m, epsilon) <= max_error``. ``E(0)`` bounds
      the error of every test and needs no trial run, but is conservative.
    * **average, from standardised means** (``mu_std``: samples of ``mu_std`` over
      ``(theta, theta', u)`` from a trial run, see :func:`standardized_mean`): minimise
      the sample mean of ``pi_bar(mu_std)`` s.t. the sample mean of ``E(mu_std)`` (the
      average probability that the decision differs from exact MH, an upper bound on the
      average ``|Delta|`` of eq. 6) is ``<= max_error``.
    * **average, eq. 7** (``pair_stats=(l_mean, l_sd, log_ratio_o1)``, arrays over the
      trial-run pairs; ``l_sd`` with ``ddof=0``): minimise the pair average of
      ``E_u[pi_bar]`` s.t. the pair average of ``|Delta(theta, theta')|`` (eq. 6, with
      ``u`` integrated out exactly) is ``<= max_error``.

    If no grid point meets the bound, the exact test (``epsilon = 0``) is returned with
    ``feasible=False``.

    Parameters
    ----------
    n_total : int
        ``N``.
    max_error : float, default 0.05
        Bound on the chosen error measure, in ``(0, 1)``.
    mu_std : array_like, optional
        Standardised means for the average design.
    pair_stats : tuple of array_like, optional
        ``(l_mean, l_sd, log_ratio_o1)`` per trial pair for the eq. 7 design.
    batch_sizes : sequence of int, optional
        Grid of ``m`` (default :data:`DEFAULT_BATCH_SIZES`, those below ``N``).
    epsilons : sequence of float, optional
        Grid of ``epsilon`` in ``(0, 0.5)`` (default :data:`DEFAULT_EPSILONS`).
    merge_step : float
        Passed to :func:`sequential_test_dp`.

    Returns
    -------
    AusterityDesign
    """
    n_total = _check_int("n_total", n_total, 2)
    try:
        max_error = float(max_error)
    except (TypeError, ValueError):
        raise ValueError(f"max_error must be a number in (0, 1), got {max_error!r}.") from None
    if not (0.0 < max_error < 1.0):
        raise ValueError(f"max_error must be in (0, 1), got {max_error!r}.")
    if mu_std is not None and pair_stats is not None:
        raise ValueError("give at most one of mu_std and pair_stats.")
    if batch_sizes is None:
        ms = [m for m in DEFAULT_BATCH_SIZES if m < n_total] or [max(2, n_total // 2)]
    else:
        ms = [_check_int("batch_sizes", m, 2) for m in np.atleast_1d(batch_sizes)]
        if not ms:
            raise ValueError("batch_sizes must not be empty.")
    if epsilons is None:
        eps = list(DEFAULT_EPSILONS)
    else:
        eps = [_check_epsilon(e) for e in np.atleast_1d(epsilons)]
        if not eps:
            raise ValueError("epsilons must not be empty.")
        if any(e == 0 for e in eps):
            raise ValueError("epsilons must be positive (epsilon = 0 is the exact fallback).")

    if mu_std is not None:
        z = np.asarray(mu_std, dtype=float).ravel()
        if z.size == 0 or np.any(np.isnan(z)):
            raise ValueError("mu_std must be a non-empty array without NaN.")
        criterion = "average-decision"
    elif pair_stats is not None:
        try:
            l_mean, l_sd, o1 = pair_stats
        except (TypeError, ValueError):
            raise ValueError("pair_stats must be a tuple (l_mean, l_sd, log_ratio_o1).") from None
        criterion = "average-acceptance"
    else:
        criterion = "worst-case"

    err = np.zeros((len(ms), len(eps)))
    use = np.ones((len(ms), len(eps)))
    for i, m in enumerate(ms):
        for j, e in enumerate(eps):
            dp = sequential_test_dp(n_total, m, e, merge_step=merge_step)
            if criterion == "worst-case":
                ee, uu = dp.evaluate(0.0)
                err[i, j], use[i, j] = float(ee), float(uu)
            elif criterion == "average-decision":
                ee, uu = dp.interpolate(z)
                err[i, j], use[i, j] = ee.mean(), uu.mean()
            else:
                dd, uu = dp.acceptance_error(l_mean, l_sd, o1)
                err[i, j], use[i, j] = np.abs(dd).mean(), uu.mean()

    feasible = err <= max_error
    if feasible.any():
        score = np.where(feasible, use, np.inf)
        best = np.flatnonzero(score == score.min())
        i, j = np.unravel_index(best[np.argmin(err.ravel()[best])], err.shape)
        return AusterityDesign(
            batch_size=int(ms[i]), epsilon=float(eps[j]), expected_data_use=float(use[i, j]),
            error=float(err[i, j]), criterion=criterion, max_error=max_error,
            n_total=n_total, batch_sizes=np.asarray(ms), epsilons=np.asarray(eps),
            error_grid=err, data_use_grid=use, feasible=True,
        )
    return AusterityDesign(
        batch_size=int(max(ms)), epsilon=0.0, expected_data_use=1.0, error=0.0,
        criterion=criterion, max_error=max_error, n_total=n_total,
        batch_sizes=np.asarray(ms), epsilons=np.asarray(eps), error_grid=err,
        data_use_grid=use, feasible=False,
    )
