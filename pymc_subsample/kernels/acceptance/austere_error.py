"""Error and data use of the Austerity MH sequential test (Sec. 5.1).

Section 5.1 of Korattikara, Chen & Welling (2014), "Austerity in MCMC Land: Cutting the
Metropolis-Hastings Budget": the probability ``E(mu_std, m, epsilon)`` that the sequential
t-test of :func:`pymc_subsample.kernels.acceptance.austere.austere_test` decides otherwise than exact
MH, its expected data use ``pi_bar(mu_std, m, epsilon)`` and the acceptance error
``Delta`` of eq. 6, read off the dynamic programme built by
:func:`pymc_subsample.kernels.acceptance.austere_dp.sequential_test_dp`. Pure NumPy/SciPy; no PyMC.

Model (Sec. 5.1 of the paper; the derivation is restated here)
--------------------------------------------------------------
The per-row differences ``l_i`` form a finite population of size ``N`` with mean ``mu``
and standard deviation ``sigma`` (``1/N`` convention). The test of
:func:`pymc_subsample.kernels.acceptance.austere.austere_test` looks at ``n_1 < n_2 < ... < N`` rows
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

"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import special

from .._validation import check_int

__all__ = ["SequentialTestDP", "standardized_mean"]

_KAPPA_MAX = 1e6


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
    n_total = check_int("n_total", n_total, 2)
    l_mean, l_sd, mu_0 = np.broadcast_arrays(
        np.asarray(l_mean, float), np.asarray(l_sd, float), np.asarray(mu_0, float)
    )
    if np.any(l_sd < 0):
        raise ValueError("l_sd must be non-negative.")
    diff = (l_mean - mu_0) * math.sqrt(n_total - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = diff / l_sd
    return np.where((l_sd == 0) & (diff == 0), 0.0, out)


@dataclass
class SequentialTestDP:
    """Driftless dynamic programme of the Austerity sequential test, any ``mu_std``.

    Built by :func:`~pymc_subsample.kernels.acceptance.austere_dp.sequential_test_dp`; see the
    module docstrings of this module and of :mod:`pymc_subsample.kernels.acceptance.austere_dp`
    for the formulation.
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
