"""The sweep on the linear mixed model: a Normal likelihood with a sampled scale.

For ``y_i ~ Normal(o_i + x_i . beta + a[g_i], sigma)`` the log-likelihood of every move of
the sweep is known in closed form from sufficient statistics kept at set-up, so the
sweep decides each move exactly without reading a row (route (b) of issue 43; the
route of a Taylor-thinned data test of the scale, (a), would read rows for every move of
``sigma`` and bound a remainder that here is exactly zero). With the residuals at the
sweep's centre ``r_i = y_i - o_i - x_i . beta_hat - a_hat[g_i]``, ``db = beta -
beta_hat`` and ``da = a - a_hat``,

    SSR(db, da) = E - 2 c . db + db' X'X db
                  + sum_g [n_g da_g^2 - 2 da_g (R_g - X_g . db)],
    log p(y | beta, a, sigma) = -N log sigma - SSR / (2 sigma^2)   (+ const),

with ``E = sum r_i^2``, ``c = X' r``, ``R_g = sum_{i in g} r_i``, ``X_g = sum_{i in g} x_i``
and ``n_g`` the group's rows (:class:`NormalSums`): ``O(G p + p^2)`` per evaluation,
independent of ``N``. The statistics are taken about the centre (not about zero) so
that no large sums cancel: the differences the moves need are of the size of the moves.

* :class:`NormalSweepFit` -- the sweep's centre and Gaussian approximations
  (:class:`~pymc_subsample.steps.hierarchical.fit.SweepFit`) from the sums, at the
  scale's estimate ``sigma_hat`` (two passes over the data at set-up: the raw sums for
  the centre's search, then :class:`NormalSums` about the centre);
* :class:`ExactNormalTest` -- the data term of every move, exact, in place of the
  factorised test (the Normal family's Taylor expansion in ``eta`` is exact, so the
  factorised test would never thin; with ``sigma`` moving it has no bound);
* :class:`ScaleConditional` -- the move of ``sigma``: given the effects, ``1 / sigma^2``
  under the likelihood alone is ``Gamma(N / 2, SSR / 2)``; it is drawn from that and
  accepted by the prior's ratio (an independence Metropolis-Hastings move whose proposal
  is the likelihood's own conditional), or, when the step's coordinate of ``sigma`` is
  not ``log sigma``, a random walk in that coordinate with the exact ratio.

The group and fixed-effect moves keep their proposals (the approximations at
``sigma_hat``, within ``O(1 / sqrt N)`` of the posterior's scale) and take the current
``sigma`` in their exact decision; every move is therefore exact. The sums are the
step's set-up sums: a ``pm.set_data`` or a changed data file after construction is
refused by the same checks as every step's sums
(:class:`~pymc_subsample.steps.data.DataGuard`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...kernels.hierarchical import GroupTaylor, SmallRows
from .fit import SweepFit
from .moves import BlockMove

__all__ = ["NormalSums", "NormalSweepFit", "ExactNormalTest", "ScaleConditional"]

#: rows per chunk of the set-up passes
_CHUNK = 65536


@dataclass
class NormalSums:
    """The sufficient statistics of the Normal rows about a centre (module docstring):
    ``n`` rows, ``sizes`` (``n_g``), ``E``, ``c``, ``XtX``, ``R`` (``R_g``) and ``Xg``
    (``X_g``, shape ``(G, p)``)."""

    n: int
    sizes: np.ndarray
    E: float
    c: np.ndarray
    XtX: np.ndarray
    R: np.ndarray
    Xg: np.ndarray

    def group_part(self, db, da) -> np.ndarray:
        """Each group's part of ``SSR - E``: ``n_g da_g^2 - 2 da_g (R_g - X_g . db)``."""
        return da * (self.sizes * da - 2.0 * (self.R - self.Xg @ db))

    def fixed_part(self, db) -> float:
        """The fixed effects' part of ``SSR - E``: ``db' X'X db - 2 c . db``."""
        return float(db @ self.XtX @ db - 2.0 * self.c @ db)

    def ssr(self, db, da) -> float:
        """The residual sum of squares at ``(beta_hat + db, a_hat + da)``."""
        return max(self.E + self.fixed_part(db) + float(np.sum(self.group_part(db, da))), 0.0)

    def loglik(self, ssr, log_s) -> float:
        """``-N log sigma - SSR / (2 sigma^2)`` (the constant dropped)."""
        return -self.n * log_s - 0.5 * ssr * math.exp(-2.0 * log_s)


class NormalSweepFit(SweepFit):
    """The sweep's centre and approximations for Normal rows with a sampled scale, from
    sufficient statistics (module docstring): the centre's search
    (:func:`~pymc_subsample.kernels.hierarchical.eb_fit`) evaluates the log-likelihood's
    gradient and Hessian blocks in ``O(G p^2)`` from the raw sums, at a scale estimate
    refined once from the residuals; :attr:`sums` are then taken about the centre in one
    more pass. The Taylor sums of :class:`~pymc_subsample.kernels.hierarchical.
    GroupTaylor` are those at ``sigma_hat``, exact for the Normal (no remainder), and no
    group's rows are kept."""

    def _fit(self):
        """The raw sums (one pass), a first scale (the rows' sd about their mean), the
        centre at it (:meth:`SweepFit._fit`), then the centre again at the scale of its
        residuals."""
        self._build_cache()
        raw = self._raw = self._sums_about(np.zeros(self.s.fixed_idx.size),
                                           np.zeros(self.term.n_groups))
        n = max(raw.n, 1)
        self.sigma_hat = math.sqrt(max(raw.E - float(np.sum(raw.R)) ** 2 / n, 1e-300) / n)
        self.sums = None
        super()._fit()
        super()._fit()

    def _build_cache(self):
        """The design in memory (:meth:`SweepFit._build_cache`), once."""
        if self._cache is None:
            super()._build_cache()

    def _centre_at(self, beta, a, mu, tau, cov_beta, cov_marg, prec):
        """The sums about the centre, the scale's estimate from them, then the centre's
        approximations (:meth:`SweepFit._centre_at`)."""
        self.sums = self._sums_about(beta, a)
        self.sigma_hat = math.sqrt(max(self.sums.E, 1e-300) / max(self.sums.n, 1))
        super()._centre_at(beta, a, mu, tau, cov_beta, cov_marg, prec)

    def _sums_about(self, beta, a) -> NormalSums:
        """One pass: :class:`NormalSums` of the residuals at ``(beta, a)``."""
        n, G, p = self.engine.n_rows, self.term.n_groups, self.s.fixed_idx.size
        E, c, XtX = 0.0, np.zeros(p), np.zeros((p, p))
        R, Xg = np.zeros(G), np.zeros((G, p))
        for start in range(0, n, _CHUNK):
            o, X, y, g = self._design(start, min(n, start + _CHUNK))
            r = y - o - X @ beta - a[g]
            E += float(r @ r)
            c += X.T @ r
            XtX += X.T @ X
            R += np.bincount(g, r, G)
            for j in range(p):
                Xg[:, j] += np.bincount(g, X[:, j], G)
        return NormalSums(n=int(n), sizes=self.groups.sizes.astype(np.float64), E=E, c=c,
                          XtX=0.5 * (XtX + XtX.T), R=R, Xg=Xg)

    def _pass(self, beta, a, *, centre=False):
        """The log-likelihood's gradient and Hessian blocks at ``(beta, a)`` and
        ``sigma_hat`` from the sums (no row read); with ``centre``, the Taylor sums
        there (exact: the Normal has no remainder) and no small groups' rows."""
        t = self.sums if centre else self._raw
        db, da = (np.zeros_like(beta), np.zeros_like(a)) if centre else (beta, a)
        inv = 1.0 / self.sigma_hat**2
        s1 = (t.R - t.Xg @ db - t.sizes * da) * inv
        s2 = -t.sizes * inv
        s2x = -t.Xg * inv
        s1x = (t.c - t.XtX @ db - t.Xg.T @ da) * inv
        s2xx = -t.XtX * inv
        if not centre:
            return s1, s2, s2x, s1x, s2xx
        self._fixed_sums = (s1x, s2xx)
        G, p = a.size, beta.size
        zeros = np.zeros(G)
        taylor = GroupTaylor(
            beta_hat=beta.copy(), a_hat=a.copy(), large=self.groups.sizes > 0, s1=s1, s2=s2,
            s2x=s2x, s1x=s1x, s2xx=s2xx, lo=zeros, hi=zeros, xmax=zeros,
            sizes=self.groups.sizes, family="normal", params={"sigma": self.sigma_hat})
        small = SmallRows(np.zeros(0), np.zeros((0, p)), np.zeros(0), np.zeros(0, int))
        return taylor, small


class ExactNormalTest:
    """The exact data term of every move of the sweep on Normal rows with a sampled
    scale: the log-likelihood difference from :class:`NormalSums` at the points' own
    ``sigma`` (module docstring), in place of
    :class:`~pymc_subsample.steps.hierarchical.factorised.FactorisedTest` (same
    :meth:`decide`). No row is read: the rows-read count is 0."""

    def __init__(self, fit):
        self.fit = fit
        self.scale = fit.s.scale

    def decide(self, db, a, db_new, a_new, log_u, extra, rng, *, per_group, q=None,
               q_new=None):
        """Accept a move from ``(db, a)`` to ``(db_new, a_new)`` (``q``, ``q_new``: the
        points, whose scale the likelihood reads) with probability ``min(1, exp(extra +
        log-likelihood difference))``, per group with ``per_group`` (a group move: the
        fixed effects and the scale unchanged). Returns (accepted, rows read = 0)."""
        sums, a_hat = self.fit.sums, self.fit.taylor.a_hat
        da, da_new = a - a_hat, a_new - a_hat
        log_s = self.scale.log_scale(q)
        if per_group:
            diff = sums.group_part(db_new, da_new) - sums.group_part(db, da)
            first = -0.5 * math.exp(-2.0 * log_s) * diff + extra
            return log_u < np.minimum(first, 0.0), 0
        log_s_new = self.scale.log_scale(q_new)
        if log_s_new == log_s:
            diff = (sums.fixed_part(db_new) - sums.fixed_part(db)
                    + float(np.sum(sums.group_part(db_new, da_new) - sums.group_part(db, da))))
            first = -0.5 * math.exp(-2.0 * log_s) * diff
        else:
            first = (sums.loglik(sums.ssr(db_new, da_new), log_s_new)
                     - sums.loglik(sums.ssr(db, da), log_s))
        return bool(log_u < min(first + extra, 0.0)), 0


class ScaleConditional(BlockMove):
    """The family's scale ``sigma`` given the fixed and group effects (module docstring).

    With ``u = log sigma`` the step's coordinate, ``u' = -log(lambda) / 2`` with ``lambda
    ~ Gamma(N / 2, rate SSR / 2)`` has the density ``exp(-N u' - SSR e^{-2u'} / 2)`` (up to
    a constant), the likelihood's own conditional in ``u``: the Metropolis-Hastings ratio
    is the prior's (in ``u``, with its Jacobian, as the step's log prior holds it); on
    tall data nearly every draw is accepted, an exact Gibbs draw in effect. For another
    coordinate of ``sigma`` (another transform, e.g. a ``Uniform`` prior's interval
    transform) the move is a random walk in it with the exact ratio, scaled by the
    likelihood's curvature ``2 N`` in ``log sigma``, tuned toward 0.3 acceptance and made
    :attr:`random_walk_moves` times per sweep."""

    name, factor = "scale", "log_scale"
    #: moves per sweep of the random walk (the conditional draw makes one)
    random_walk_moves = 6

    def applies(self):
        return self.s.scale is not None

    def propose(self, q, rng, st):
        sc, sums = self.s.scale, self.fit.sums
        db = self._db(q)
        ssr = sums.ssr(db, self.coords.effects(q) - self.fit.taylor.a_hat)
        u = sc.log_scale(q)
        if not (math.isfinite(ssr) and ssr > 0.0):  # a state no proposal can leave
            return None
        q_new = q.copy()
        if sc.log_is_coordinate:
            lam = rng.gamma(0.5 * sums.n, 2.0 / ssr)
            if not lam > 0.0:  # underflow: not a valid point
                return None
            u_new = -0.5 * math.log(lam)
            q_new[sc.idx] += u_new - u
        else:
            step = math.exp(getattr(st, self.factor)) * 2.4 * self._coordinate_sd(q)
            q_new[sc.idx] += step * rng.standard_normal()
            u_new = sc.log_scale(q_new)
            if not math.isfinite(u_new):
                return None
        return q_new, None, (ssr, u, u_new)

    def _coordinate_sd(self, q) -> float:
        """The sd of the scale's coordinate under the likelihood, ``1 / sqrt(2 N)`` in
        ``log sigma`` divided by ``d log sigma / d coordinate`` at ``q``."""
        sc, h = self.s.scale, 1e-5
        e = q.copy()
        e[sc.idx] += h
        slope = abs(sc.log_scale(e) - sc.log_scale(q)) / h
        return 1.0 / math.sqrt(2.0 * max(self.fit.sums.n, 1)) / max(slope, 1e-12)

    def proposal_logpdf(self, u, ssr) -> float:
        """The log density of the proposal at ``u = log sigma`` (up to a constant):
        ``-N u - SSR e^{-2u} / 2`` for the conditional draw, 0 for the random walk
        (symmetric)."""
        if not self.s.scale.log_is_coordinate:
            return 0.0
        return self.fit.sums.loglik(ssr, u)

    def log_ratio(self, q, q_new, prior, aux):
        ssr, u, u_new = aux
        sums = self.fit.sums
        return (prior(q_new) - prior(q) + sums.loglik(ssr, u_new) - sums.loglik(ssr, u)
                + self.proposal_logpdf(u, ssr) - self.proposal_logpdf(u_new, ssr))
