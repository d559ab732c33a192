"""The sweep's centre and the approximations its moves draw on: a few passes over the data.

:class:`SweepFit` reads the rows' design (``f_i = o_i + X_i . beta``, the columns of
``X`` exact differences of the model's own fixed part), finds a proper centre -- the mode
of ``(beta, a)`` at an empirical-Bayes group scale
(:func:`~pymc_subsample.kernels.hierarchical.eb_fit`), never the degenerate joint mode --
and keeps there the large groups' Taylor sums
(:class:`~pymc_subsample.kernels.hierarchical.GroupTaylor`), the small groups' rows, and
the Gaussian approximations of the conditionals of the group effects
(:meth:`SweepFit.gaussian_likelihood`) and of the fixed effects
(:meth:`SweepFit.fixed_conditional`).
"""

from __future__ import annotations

import numpy as np

from ...kernels.hierarchical import GroupRows, GroupTaylor, SmallRows, eb_fit
from ...kernels.variance.predictor import row_loglik

__all__ = ["SweepFit", "fixed_design"]

#: rows per chunk of the set-up passes
_CHUNK = 65536
#: design arrays (x_i, o_i, y_i) kept in memory up to this many bytes
_CACHE_BYTES = 1 << 30


def fixed_design(structure, q_template, data):
    """``(o, X, y)`` of the rows in ``data``: ``f_i = o_i + X_i . beta``, the columns of
    ``X`` exact differences at ``q_template`` (``f`` is affine in the fixed effects)."""
    beta0 = q_template[structure.fixed_idx]
    f0 = structure.fixed_part(q_template, data)
    cols = []
    for j in structure.fixed_idx:
        e = q_template.copy()
        e[j] += 1.0
        cols.append(structure.fixed_part(e, data) - f0)
    X = np.column_stack(cols) if cols else np.zeros((f0.size, 0))
    return f0 - X @ beta0, X, structure.y(data)


class SweepFit:
    """The centre of the sweep on ``structure`` and its sums (module docstring).

    Parameters
    ----------
    engine : LikelihoodEngine
    structure : GroupStructure
    exact_rows : int
        Groups with at most this many rows are "small": their rows are kept in memory.
    """

    def __init__(self, engine, structure, exact_rows: int):
        self.engine, self.s = engine, structure
        self.term = structure.terms[0]
        self.groups = GroupRows(self.term.group_of_row, self.term.n_groups)
        self.large = self.groups.sizes > int(exact_rows)
        self.q_template = engine.initial_q()
        self._cache = None
        self._fixed_prec_cache = None
        self._fit()

    # ------------------------------------------------------------------ the design
    def _q_beta(self, beta) -> np.ndarray:
        q = self.q_template.copy()
        q[self.s.fixed_idx] = beta
        return q

    def _design(self, start, stop):
        """``(o, X, y, g)`` of rows ``start:stop``: ``f_i = o_i + X_i . beta``."""
        g = self.term.group_of_row[start:stop]
        if self._cache is not None:
            o, X, y = self._cache
            return o[start:stop], X[start:stop], y[start:stop], g
        o, X, y = self._design_from(self.engine.gather_slice(start, stop))
        return o, X, y, g

    def _build_cache(self):
        n, p = self.engine.n_rows, self.s.fixed_idx.size
        if n * (p + 2) * 8 > _CACHE_BYTES:
            return
        parts = [self._design(s, min(n, s + _CHUNK)) for s in range(0, n, _CHUNK)]
        self._cache = tuple(np.concatenate([pt[k] for pt in parts]) for k in range(3))

    def _design_from(self, data):
        """``(o, X, y)`` of the rows in ``data`` (:func:`fixed_design`)."""
        return fixed_design(self.s, self.q_template, data)

    def rows_eta(self, rows, db_pairs, a_pairs):
        """``y`` and the linear predictors of ``rows`` at each ``(db, a)``, and at the
        centre."""
        if self._cache is not None:
            o, X, y = (c[rows] for c in self._cache)
        else:
            o, X, y = self._design_from(self.engine.gather(rows))
        g = self.term.group_of_row[rows]
        beta_hat = self.taylor.beta_hat
        etas = [o + X @ (beta_hat + db) + a[g] for db, a in zip(db_pairs, a_pairs)]
        eta_hat = o + X @ beta_hat + self.taylor.a_hat[g]
        return y, etas, eta_hat

    # ------------------------------------------------------------------ the passes
    def _pass(self, beta, a, *, centre=False):
        """One pass: the log-likelihood's gradient and Hessian blocks at ``(beta, a)``;
        with ``centre``, also the large groups' Taylor sums and the small groups' rows."""
        s, n, G = self.s, self.engine.n_rows, self.term.n_groups
        p = s.fixed_idx.size
        s1, s2, s2x = np.zeros(G), np.zeros(G), np.zeros((G, p))
        s1x, s2xx = np.zeros(p), np.zeros((p, p))
        if centre:
            lo, hi, xmax = np.full(G, np.inf), np.full(G, -np.inf), np.zeros(G)
            small = []
        for start in range(0, n, _CHUNK):
            o, X, y, g = self._design(start, min(n, start + _CHUNK))
            f = o + X @ beta
            eta = f + a[g]
            _, d1, d2 = row_loglik(s.family, eta, y, s.params)
            s1 += np.bincount(g, d1, G)
            s2 += np.bincount(g, d2, G)
            for j in range(p):
                s2x[:, j] += np.bincount(g, d2 * X[:, j], G)
            s1x += X.T @ d1
            s2xx += (X * d2[:, None]).T @ X
            if centre:
                big = self.large[g]
                np.minimum.at(lo, g, eta)
                np.maximum.at(hi, g, eta)
                np.maximum.at(xmax, g, np.linalg.norm(X, axis=1) if p else np.zeros(g.size))
                if np.any(~big):
                    small.append((f[~big], X[~big], y[~big], g[~big]))
        if not centre:
            return s1, s2, s2x, s1x, 0.5 * (s2xx + s2xx.T)
        self._fixed_sums = (s1x, 0.5 * (s2xx + s2xx.T))  # all rows, at the centre
        # every non-empty group is expanded; the group moves still evaluate some small
        # groups exactly (FactorisedTest.expanded), from ``small``
        taylor = GroupTaylor(
            beta_hat=beta.copy(), a_hat=a.copy(), large=self.groups.sizes > 0, s1=s1, s2=s2,
            s2x=s2x, s1x=self._fixed_sums[0], s2xx=self._fixed_sums[1], lo=lo, hi=hi,
            xmax=xmax, sizes=self.groups.sizes, family=s.family, params=s.params)
        if small:
            small = SmallRows(*(np.concatenate([t[k] for t in small]) for k in range(4)))
        else:
            small = SmallRows(np.zeros(0), np.zeros((0, p)), np.zeros(0), np.zeros(0, int))
        return taylor, small

    def _fit(self):
        """The centre (an empirical-Bayes mode, :func:`eb_fit`), its Taylor sums and the
        small groups' rows: a few passes over the data."""
        self._build_cache()
        s, G = self.s, self.term.n_groups
        beta0 = self.q_template[s.fixed_idx]
        prec = self._prior_precision_beta()
        beta, a, mu, tau, cov_beta, cov_marg = eb_fit(
            lambda b, a_: self._pass(b, a_), beta0, np.zeros(G), G, prior_prec_beta=prec)
        self._centre_at(beta, a, mu, tau, cov_beta, cov_marg, prec)

    def _centre_at(self, beta, a, mu, tau, cov_beta, cov_marg, prec):
        """Keep the centre ``(beta, a)`` found by :func:`eb_fit` (at the empirical-Bayes
        ``mu``, ``tau``), its Taylor sums (one pass, :meth:`_pass`) and the
        approximations the moves draw on."""
        self.taylor, self.small = self._pass(beta, a, centre=True)
        self.eb = {"mu": mu, "tau": tau}
        self.cov_beta = cov_beta
        self.chol_beta = (np.linalg.cholesky(cov_beta) if cov_beta.size
                          else np.zeros((0, 0)))
        self.chol_beta_marginal = (np.linalg.cholesky(cov_marg) if cov_marg.size
                                   else np.zeros((0, 0)))
        self.prec_beta = prec
        # conditional curvature of each group effect at the centre (its proposal scale)
        self.curv = self.curv_all = np.maximum(-self.taylor.s2, 0.0)
        self.center_q = self.term.with_effects(self._q_beta(beta), a)
        #: groups whose data say less than the prior at the empirical-Bayes scale: their
        #: effects follow the hyperparameters in the ancillary move
        self.poor = self.curv * tau**2 < 1.0

    def _prior_precision_beta(self) -> float:
        """The prior precision of the fixed effects for the centre's ridge: the median of
        the log prior's second differences along them at the initial point (1 when they
        are not finite). It only steadies the Newton steps: any centre keeps every move
        exact."""
        idx = self.s.fixed_idx
        if idx.size == 0:
            return 1.0
        q0, h = self.q_template, 1e-3
        p0 = self.engine.prior(q0)
        curv = []
        for j in idx:
            e = np.zeros_like(q0)
            e[j] = h
            curv.append(-(self.engine.prior(q0 + e) - 2.0 * p0 + self.engine.prior(q0 - e)) / h**2)
        d = np.median(curv)
        return float(np.clip(d, 1e-6, 1e6)) if np.isfinite(d) else 1.0

    # ------------------------------------------------------------------ approximations
    def gaussian_likelihood(self, db):
        """``(b, P)``: each group's log-likelihood in ``a_g`` approximated by
        ``b_g a_g - P_g a_g^2 / 2`` (the Taylor sums over all its rows at the centre,
        moved to the current fixed effects)."""
        t = self.taylor
        prec = self.curv_all
        b = t.s1 + t.s2x @ db + prec * t.a_hat
        return b, prec

    def fixed_conditional(self, a):
        """Mean (as ``beta - beta_hat``) and Cholesky factor of the Gaussian
        approximation of the fixed effects given the group effects ``a``."""
        s1x, _ = self._fixed_sums
        t = self.taylor
        prec, chol = self.fixed_precision
        grad = s1x + t.s2x.T @ (a - t.a_hat) - self.prec_beta * t.beta_hat
        return np.linalg.solve(prec, grad), chol

    @property
    def fixed_precision(self):
        """The precision of that approximation (it does not depend on ``a``) and the
        factor ``L^-T`` of its inverse (``mean + L^-T z`` has covariance ``prec^-1``),
        computed once."""
        if self._fixed_prec_cache is None:
            s1x, s2xx = self._fixed_sums
            prec = -s2xx + self.prec_beta * np.eye(s1x.size)
            self._fixed_prec_cache = (prec, np.linalg.inv(np.linalg.cholesky(prec)).T)
        return self._fixed_prec_cache
