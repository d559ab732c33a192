"""The blocked sweep the Metropolis-Hastings steps run on a GLM with a random intercept
per group.

A tall hierarchical model defeats one joint proposal: in the centred form the joint
density has no proper mode (the group scale collapses onto the mode search's centre),
in the non-centred form a few hundred group effects and their scale form a funnel that a
random walk or pCN move from one Gaussian fit crosses at a rate falling with the number
of groups. When :func:`~pymc_subsample.engine.groups.find_groups` recognises the
structure, AustereMH, BarkerMinibatch and ScalableMH replace their joint move by this
sweep, whose every move is exact (:mod:`pymc_subsample.kernels.hierarchical`: the rows
through Taylor sums and the factorised test with Poisson thinning of Cornish et al. 2019,
Algorithm 2, and some small groups' rows evaluated exactly):

1. **group effects**, all groups at once, each accepted on its own (conditionally
   independent given the rest): a random walk per group scaled by its conditional
   curvature, tuned per group, and an independence proposal per group from the
   Gaussian approximation of its conditional;
2. **hyperparameters given the group effects** (the sufficient, centred augmentation):
   no data row is read;
3. **hyperparameters with the group effects integrated out**, in effect: every group
   effect held at fixed ``u_g = (a_g - m_g) / s_g``, with ``m_g``, ``s_g`` the mean and
   sd of a Gaussian approximation of its conditional, which moves with the
   hyperparameters (a marginal Metropolis-Hastings move in conditional coordinates,
   exact through its Jacobian);
4. **fixed effects given the group effects**, by a random walk with their conditional
   covariance at the centre and by an independence proposal from a Gaussian
   approximation of their conditional, and **fixed effects with the group effects
   following them** at fixed ``u_g`` (their covariance with the group effects
   integrated out);
5. **hyperparameters given the standardised effects** ``z = (a - loc) / scale`` of the
   data-poor groups (the ancillary, non-centred augmentation), those effects moving with
   them.

Moves 2 and 5 together are the ancillarity-sufficiency interweaving of Yu and Meng (2011,
"To center or not to center: that is not the question -- an ancillarity-sufficiency
interweaving strategy (ASIS) for boosting MCMC efficiency"), applied per group as the
data-poor groups call for the non-centred form and the rich ones for the centred form;
the centred and non-centred forms of a model run the same chain in different
coordinates. The cost per sweep is bounded by the rows of the small groups plus the
thinning's events: it does not grow with ``N``.

The centre of the Taylor sums is a proper one: the mode of ``(beta, a)`` at an empirical-
Bayes group scale (:func:`~pymc_subsample.kernels.hierarchical.eb_fit`), never the
degenerate joint mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..kernels.hierarchical import (
    GroupRows,
    GroupTaylor,
    SmallRows,
    draw_events,
    eb_fit,
    normal_logpdf,
    small_diff,
    thinned_rejections,
    thinning_rates,
)
from ..kernels.predictor import row_loglik

__all__ = ["HierarchicalSweep", "SweepState"]

#: rows per chunk of the set-up passes
_CHUNK = 65536
#: design arrays (x_i, o_i, y_i) kept in memory up to this many bytes
_CACHE_BYTES = 1 << 30
#: a small group's thinning rate up to which a group move expands it instead of
#: evaluating its rows
_SMALL_RATE = 0.1


@dataclass
class SweepState:
    """A chain's tuning of the sweep: per-group log scale factors, the fixed effects' and
    the hyperparameters' scale factors, and counts."""

    log_group: np.ndarray
    log_fixed: float = 0.0
    log_hyper: float = 0.0
    log_anc: float = 0.0
    log_marg: float = 0.0
    log_fixed_marg: float = 0.0
    log_fixed_gauss: float = 0.0
    n_tuned: int = 0
    hyper_sum: np.ndarray = None
    hyper_sq: np.ndarray = None
    started: bool = False
    hyper_chol: np.ndarray = None
    stats: dict = field(default_factory=dict)


def _conditional(b, prec, loc, scale):
    """Mean and sd of ``a`` under ``exp(b a - prec a^2 / 2) N(a | loc, scale)``."""
    q = prec + 1.0 / scale**2
    return (b + loc / scale**2) / q, 1.0 / np.sqrt(q)


def _mvn_logpdf(x, mean, chol) -> float:
    """``log N(x | mean, chol chol')`` up to its constant."""
    z = np.linalg.solve(chol, x - mean)
    return float(-0.5 * z @ z)


def _robbins_monro(value, accept, target, n):
    """One Robbins-Monro step of a log scale factor toward an acceptance target."""
    return value + (np.asarray(accept, dtype=np.float64) - target) / (1.0 + n) ** 0.6 * 2.0


class HierarchicalSweep:
    """The sweep of a step on a :class:`~pymc_subsample.engine.groups.GroupStructure`
    (module docstring): the set-up passes, then :meth:`transition`.

    Parameters
    ----------
    engine : LikelihoodEngine
    structure : GroupStructure
    exact_rows : int
        Groups with at most this many rows are kept in memory; a group move evaluates
        them exactly when thinning would cost more (``_SMALL_RATE``).
    moves : dict
        Moves per sweep, by kind (``DEFAULT_MOVES``): ``groups`` (random walk per
        group), ``groups_gaussian`` (independence proposal per group), ``hyper``
        (data-free), ``marginal``, ``fixed``, ``fixed_gaussian``, ``fixed_marginal``,
        ``ancillary``.
    """

    DEFAULT_MOVES = {"groups": 1, "groups_gaussian": 1, "hyper": 2, "marginal": 6, "fixed": 1,
                     "fixed_gaussian": 2, "fixed_marginal": 3, "ancillary": 2}

    def __init__(self, engine, structure, *, exact_rows: int = 16, moves=None):
        self.engine, self.s = engine, structure
        self.exact_rows = int(exact_rows)
        defaults = dict(self.DEFAULT_MOVES)
        self.moves = {**defaults, **(moves or {})}
        self.groups = GroupRows(structure.group_of_row, structure.n_groups)
        self.large = self.groups.sizes > self.exact_rows
        self.state = None
        self.q_template = engine.initial_q()
        self._cache = None
        self._ls = (None, None)
        self._fit()

    # ------------------------------------------------------------------ set-up
    def _q_beta(self, beta) -> np.ndarray:
        q = self.q_template.copy()
        q[self.s.fixed_idx] = beta
        return q

    def _design(self, start, stop):
        """``(o, X, y, g)`` of rows ``start:stop``: ``f_i = o_i + X_i . beta``."""
        if self._cache is not None:
            o, X, y = self._cache
            return o[start:stop], X[start:stop], y[start:stop], self.s.group_of_row[start:stop]
        o, X, y = self._design_from(self.engine.gather_slice(start, stop))
        return o, X, y, self.s.group_of_row[start:stop]

    def _build_cache(self):
        n, p = self.engine.n_rows, self.s.fixed_idx.size
        if n * (p + 2) * 8 > _CACHE_BYTES:
            return
        parts = [self._design(s, min(n, s + _CHUNK)) for s in range(0, n, _CHUNK)]
        self._cache = tuple(np.concatenate([pt[k] for pt in parts]) for k in range(3))

    def _pass(self, beta, a, *, centre=False):
        """One pass: the log-likelihood's gradient and Hessian blocks at ``(beta, a)``;
        with ``centre``, also the large groups' Taylor sums and the small groups' rows."""
        s, n, G = self.s, self.engine.n_rows, self.s.n_groups
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
        # groups exactly (_expanded), from ``small``
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
        s = self.s
        beta0 = self.q_template[s.fixed_idx]
        prec = self._prior_precision_beta()
        beta, a, mu, tau, cov_beta, cov_marg = eb_fit(
            lambda b, a_: self._pass(b, a_), beta0, np.zeros(s.n_groups), s.n_groups,
            prior_prec_beta=prec)
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
        self.center_q = self.s.with_effects(self._q_beta(beta), a)
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

    # ------------------------------------------------------------------ chain state
    def reset(self):
        self.state = SweepState(log_group=np.zeros(self.s.n_groups))

    def get_state(self):
        return None if self.state is None else {"sweep": self.state}

    def set_state(self, state):
        if state is not None:
            self.state = state["sweep"]

    def stop_tuning(self):
        pass

    @property
    def scaling(self) -> float:
        return math.exp(self.state.log_fixed) if self.state is not None else 1.0

    def start(self, q) -> np.ndarray:
        """Where a tuning chain starts: the centre's fixed and group effects, the chain's
        own hyperparameters (a warm-up start only)."""
        q = np.array(q, dtype=np.float64)
        q[self.s.fixed_idx] = self.center_q[self.s.fixed_idx]
        return self.s.with_effects(q, self.taylor.a_hat)

    @staticmethod
    def _memo_prior(prior):
        """``prior`` remembering its last three points (a move evaluates the current state
        and the proposal; the next move starts where this one ended)."""
        memo = {}

        def cached(q):
            key = q.tobytes()
            value = memo.get(key)
            if value is None:
                if len(memo) >= 3:
                    memo.pop(next(iter(memo)))
                value = memo[key] = prior(q)
            return value

        return cached

    def _loc_scale(self, q):
        """``(loc, scale)`` at ``q``, reused while the hyperparameters are unchanged."""
        if self.s.hyper_shared:  # another step moves some of them between draws
            return self.s.loc_scale(q)
        key = q[self.s.hyper_idx].tobytes()
        if self._ls[0] != key:
            self._ls = (key, self.s.loc_scale(q))
        return self._ls[1]

    def _effects(self, q, loc_scale=None):
        """The group effects at ``q`` (:meth:`GroupStructure.effects` with the cached
        ``(loc, scale)``)."""
        if self.s.centred:
            return self.s.effects(q)
        return self.s.effects(q, self._loc_scale(q) if loc_scale is None else loc_scale)

    # ------------------------------------------------------------------ the data terms
    def _rows_eta(self, rows, db_pairs, a_pairs):
        """``y`` and the linear predictors of ``rows`` at each ``(db, a)``, and at the
        centre."""
        if self._cache is not None:
            o, X, y = (c[rows] for c in self._cache)
        else:
            data = self.engine.gather(rows)
            o, X, y = self._design_from(data)
        g = self.s.group_of_row[rows]
        beta_hat = self.taylor.beta_hat
        etas = [o + X @ (beta_hat + db) + a[g] for db, a in zip(db_pairs, a_pairs)]
        eta_hat = o + X @ beta_hat + self.taylor.a_hat[g]
        return y, etas, eta_hat

    def _design_from(self, data):
        """``(o, X, y)`` of the rows in ``data``: ``f_i = o_i + X_i . beta``, the columns
        of ``X`` exact differences (``f`` is affine in the fixed effects)."""
        beta0 = self.q_template[self.s.fixed_idx]
        f0 = self.s.fixed_part(self.q_template, data)
        cols = []
        for j in self.s.fixed_idx:
            e = self.q_template.copy()
            e[j] += 1.0
            cols.append(self.s.fixed_part(e, data) - f0)
        X = np.column_stack(cols) if cols else np.zeros((f0.size, 0))
        return f0 - X @ beta0, X, self.s.y(data)

    def _data_test(self, db, a, db_new, a_new, log_u, extra, rng, *, per_group):
        """The factorised test of a move of ``(beta, a)``. ``extra``: the data-free log
        ratio (per group with ``per_group``). Returns (accepted, rows read).

        Every group's rows may enter through Taylor sums and thinning (``self.taylor``
        expands every group): the joint moves, which shift every row's
        predictor a little, always take that route and read only the thinning's events.
        The group moves take it for the large groups and for each small group whose
        thinning rate is low (:meth:`_expanded`), and evaluate the other small groups'
        rows exactly. The choice depends on the pair of points only through the bound,
        which is symmetric in them, so each group's test stays reversible."""
        G = self.s.n_groups
        t = self.taylor
        da, da_new = a - t.a_hat, a_new - t.a_hat
        if per_group:
            c, rates = thinning_rates(t, db, da, db_new, da_new)
            expanded = self._expanded(rates)
            exact, used = small_diff(self.small, self.s.family, self.s.params, db, a,
                                     db_new, a_new, G, ~expanded)
            terms = t.group_terms(db_new, da_new) - t.group_terms(db, da)
            first = exact + np.where(expanded, terms, 0.0) + extra
            ok = log_u < np.minimum(first, 0.0)
            rates = np.where(ok & expanded, rates, 0.0)
        else:
            first = (float(np.sum(t.group_terms(db_new, da_new) - t.group_terms(db, da)))
                     + t.fixed_term(db_new) - t.fixed_term(db) + extra)
            ok = log_u < min(first, 0.0)
            if not ok:  # rejected by the first factor: no bounds, no rows
                return False, 0
            c, rates = thinning_rates(t, db, da, db_new, da_new)
            used = 0
        ev = draw_events(rates, rng, per_group=per_group)
        used += ev.size
        if ev.size:
            rows = self.groups.sample(ev, rng)
            y, (e0, e1), eh = self._rows_eta(rows, (db, db_new), (a, a_new))
            reject, _ = thinned_rejections(self.s.family, self.s.params, y, e0, e1, eh,
                                           c[ev], rng)
            if per_group:
                ok = ok & (np.bincount(ev[reject], minlength=G) == 0)
            else:
                ok = not np.any(reject)
        return ok, used

    def _expanded(self, rates) -> np.ndarray:
        """The groups a group move takes through Taylor sums and thinning: the large
        ones, and a small one when its Poisson rate (the expected thinning events, and a
        bound on the log acceptance it can lose) is at most ``_SMALL_RATE``."""
        return self.large | (rates <= _SMALL_RATE)

    # ------------------------------------------------------------------ the moves
    def transition(self, q, rng, prior, tune):
        """One sweep from ``q``; ``prior(q)`` is the step's log prior. Returns the new
        ``q`` and the stats ``(accepted share, rows read)``."""
        st = self.state
        s = self.s
        used, accepts = 0, []
        prior = self._memo_prior(prior)
        moves = (("groups", lambda q: self._move_groups(q, rng, tune)),
                 ("groups_gaussian", lambda q: self._move_groups_gaussian(q, rng)),
                 ("hyper", lambda q: self._move_hyper(q, rng, prior, tune)),
                 ("marginal", lambda q: self._move_marginal(q, rng, prior, tune)),
                 ("fixed", lambda q: self._move_fixed(q, rng, prior, tune)),
                 ("fixed_gaussian", lambda q: self._move_fixed_gaussian(q, rng, prior, tune)),
                 ("fixed_marginal", lambda q: self._move_fixed_marginal(q, rng, prior, tune)),
                 ("ancillary", lambda q: self._move_ancillary(q, rng, prior, tune)))
        for kind, move in moves:
            for _ in range(self.moves[kind]):
                q, u, acc = move(q)
                used += u
                accepts.append(acc)
                total = st.stats.setdefault(kind, [0.0, 0])
                total[0] += acc
                total[1] += 1
        if tune:
            st.n_tuned += 1
            h = q[s.hyper_idx]
            if st.hyper_sum is None:
                st.hyper_sum, st.hyper_sq = np.zeros_like(h), np.zeros((h.size, h.size))
            st.hyper_sum += h
            st.hyper_sq += np.outer(h, h)
            if st.n_tuned >= 50 and st.n_tuned % 10 == 0:
                mean = st.hyper_sum / st.n_tuned
                cov = st.hyper_sq / st.n_tuned - np.outer(mean, mean)
                try:
                    st.hyper_chol = np.linalg.cholesky(cov + 1e-8 * np.eye(h.size))
                except np.linalg.LinAlgError:
                    pass
        return q, {"accepted": float(np.mean(accepts)), "data_used": int(used)}

    def _move_groups(self, q, rng, tune):
        st, s = self.state, self.s
        loc, scale = self._loc_scale(q)
        a = self._effects(q, (loc, scale))
        db = q[s.fixed_idx] - self.taylor.beta_hat
        prec = self.curv + 1.0 / scale**2
        step = np.exp(st.log_group) * 2.4 / np.sqrt(prec)
        a_new = a + step * rng.standard_normal(a.size)
        extra = normal_logpdf(a_new, loc, scale) - normal_logpdf(a, loc, scale)
        q, used, ok = self._decide_groups(q, db, a, a_new, extra, (loc, scale), rng)
        if tune:
            st.log_group = _robbins_monro(st.log_group, ok, 0.44, st.n_tuned)
        return q, used, float(np.mean(ok))

    def _decide_groups(self, q, db, a, a_new, extra, loc_scale, rng):
        """Accept or reject each group's proposal ``a_new`` on its own (``extra``: the
        data-free log ratio per group). Returns ``(state, rows read, accepted mask)``."""
        log_u = np.log(rng.random(a.size))
        ok, used = self._data_test(db, a, db, a_new, log_u, extra, rng, per_group=True)
        return self.s.with_effects(q, np.where(ok, a_new, a), loc_scale), used, ok

    def _move_groups_gaussian(self, q, rng):
        """Every group effect from the Gaussian approximation of its conditional (the
        Taylor sums at the centre moved to the current fixed effects, times its prior):
        an independence proposal per group, accepted on its own with the proposal
        densities in the ratio. For a group rich in data the approximation is close and
        the move is nearly an independent draw of its effect."""
        s = self.s
        loc, scale = self._loc_scale(q)
        a = self._effects(q, (loc, scale))
        db = q[s.fixed_idx] - self.taylor.beta_hat
        m, sd = _conditional(*self._gaussian_likelihood(db), loc, scale)
        a_new = m + sd * rng.standard_normal(a.size)
        extra = (normal_logpdf(a_new, loc, scale) - normal_logpdf(a, loc, scale)
                 + normal_logpdf(a, m, sd) - normal_logpdf(a_new, m, sd))
        q, used, ok = self._decide_groups(q, db, a, a_new, extra, (loc, scale), rng)
        return q, used, float(np.mean(ok))

    def _hyper_step(self, rng, factor):
        """A random-walk step of the hyperparameters: ``2.38 / sqrt(k)`` times the
        chain's factor times the Cholesky factor of their covariance over the tuning
        draws so far (0.3 per coordinate before 50 of them; held after tuning)."""
        st, s = self.state, self.s
        k = s.hyper_idx.size
        chol = st.hyper_chol if st.hyper_chol is not None else 0.3 * np.eye(k)
        return math.exp(factor) * 2.38 / math.sqrt(max(k, 1)) * (chol @ rng.standard_normal(k))

    def _move_hyper(self, q, rng, prior, tune):
        """Hyperparameters given every group effect (the sufficient augmentation): no
        data row is read."""
        return self._hyper_move(q, rng, prior, tune, None, "log_hyper")

    def _decide_joint(self, q, q_new, moves, log_r, rng, tune, factor):
        """Accept or reject a move of several blocks: ``moves = (db, a, db_new, a_new)``
        (None: no data term), ``log_r`` its data-free log ratio (NaN or -inf rejects
        without reading data); tunes the chain's scale ``factor`` toward 0.3 acceptance.
        Returns ``(state, rows read, accepted)``."""
        st = self.state
        ok, used = False, 0
        if log_r == log_r and log_r > -np.inf:
            log_u = math.log(rng.random())
            if moves is None:
                ok = log_u < min(log_r, 0.0)
            else:
                ok, used = self._data_test(*moves, log_u, log_r, rng, per_group=False)
        if tune:
            setattr(st, factor, float(_robbins_monro(getattr(st, factor), ok, 0.3,
                                                     st.n_tuned)))
        return (q_new if ok else q), used, float(ok)

    def _move_fixed(self, q, rng, prior, tune):
        """Fixed effects given the group effects (all rows: Taylor sums and thinning)."""
        st, s = self.state, self.s
        p = s.fixed_idx.size
        if p == 0:
            return q, 0, 1.0
        step = math.exp(st.log_fixed) * 2.38 / math.sqrt(p)
        q_new = q.copy()
        q_new[s.fixed_idx] += step * (self.chol_beta @ rng.standard_normal(p))
        a = self._effects(q)
        db = q[s.fixed_idx] - self.taylor.beta_hat
        db_new = q_new[s.fixed_idx] - self.taylor.beta_hat
        return self._decide_joint(q, q_new, (db, a, db_new, a), prior(q_new) - prior(q),
                                  rng, tune, "log_fixed")

    def _move_ancillary(self, q, rng, prior, tune):
        """Hyperparameters given ``z_g = (a_g - loc_g) / scale_g`` of the groups poor in
        data (the ancillary augmentation; their effects move with the hyperparameters)
        and given ``a_g`` of the groups rich in data."""
        return self._hyper_move(q, rng, prior, tune, self.poor, "log_anc")

    def _move_marginal(self, q, rng, prior, tune):
        """Hyperparameters and every group effect together, in conditional coordinates:
        a random-walk step of the hyperparameters ``h`` at fixed

            u_g = (a_g - m_g(h)) / s_g(h),

        ``m_g``, ``s_g`` the mean and sd of the Gaussian approximation of ``a_g``'s
        conditional (its likelihood from the Taylor sums at the centre, moved to the
        current fixed effects, times its prior ``N(loc_g(h), scale_g(h))``).

        In these coordinates the group effects are, under the approximation, independent
        of ``h``, so ``h`` moves as its marginal posterior allows (a marginal, or
        collapsed, move); they interpolate between the non-centred form for a group
        poor in data (``m_g``, ``s_g`` close to ``loc_g``, ``scale_g``: ``u_g`` is
        ``z_g``) and the centred form for a group rich in data (``a_g`` nearly held), a
        fully conditional version of the partially non-centred parametrisations of
        Papaspiliopoulos, Roberts and Skold (2003, "Non-centered parameterisations for
        hierarchical models and data augmentation"). The move is exact whatever the
        approximation's quality: the target in ``(beta, h, u)`` is the density in ``q``
        times the Jacobian ``prod_g s_g(h)`` for a centred ``q`` (``prod_g s_g(h) /
        scale_g(h)`` for a non-centred one), and the data enter by the factorised test;
        every effect moves by an amount proportional to the step, so the test reads a
        few thinning events."""
        s = self.s
        if s.hyper_idx.size == 0:
            return q, 0, 1.0
        (loc, scale), a, q_new, (loc_new, scale_new) = self._propose_hyper(q, rng, "log_marg")
        if q_new is None:
            return self._decide_joint(q, q, None, -np.inf, rng, tune, "log_marg")
        db = q[s.fixed_idx] - self.taylor.beta_hat
        b, prec = self._gaussian_likelihood(db)
        m0, s0 = _conditional(b, prec, loc, scale)
        m1, s1 = _conditional(b, prec, loc_new, scale_new)
        a_new = m1 + (s1 / s0) * (a - m0)
        q_new = s.with_effects(q_new, a_new, (loc_new, scale_new))
        log_r = (prior(q_new) - prior(q)
                 + self._conditional_log_jacobian(s0, s1, scale, scale_new))
        return self._decide_joint(q, q_new, (db, a, db, a_new), log_r, rng, tune, "log_marg")

    def _conditional_log_jacobian(self, s0, s1, scale, scale_new) -> float:
        """The log Jacobian of the change from ``q`` to the conditional coordinates
        ``u_g = (a_g - m_g) / s_g`` when the sds move from ``s0`` to ``s1`` and the
        scales from ``scale`` to ``scale_new``: ``sum log(s1 / s0)`` for a centred ``q``
        (``da'/da = s1 / s0``), minus ``sum log(scale_new / scale)`` for a non-centred
        one (``dz'/dz = (s1 / s0) (scale / scale_new)``)."""
        log_jac = float(np.sum(np.log(s1) - np.log(s0)))
        if not self.s.centred:
            log_jac -= float(np.sum(np.log(scale_new) - np.log(scale)))
        return log_jac

    def _move_fixed_gaussian(self, q, rng, prior, tune):
        """Fixed effects given the group effects, drawn from a Gaussian approximation of
        their conditional (the Taylor sums over all rows at the centre, moved to the
        current group effects, and the prior's curvature): an independence proposal given
        ``a``, exact through the proposal densities in the ratio. On tall data the
        approximation is close and most proposals are accepted, so each move is nearly an
        independent draw of the fixed effects given the group effects."""
        s = self.s
        p = s.fixed_idx.size
        if p == 0:
            return q, 0, 1.0
        a = self._effects(q)
        db = q[s.fixed_idx] - self.taylor.beta_hat
        mean, chol = self._fixed_conditional(a)
        db_new = mean + chol @ rng.standard_normal(p)
        q_new = q.copy()
        q_new[s.fixed_idx] = self.taylor.beta_hat + db_new
        log_r = (prior(q_new) - prior(q) + _mvn_logpdf(db, mean, chol)
                 - _mvn_logpdf(db_new, mean, chol))
        return self._decide_joint(q, q_new, (db, a, db_new, a), log_r, rng, tune,
                                  "log_fixed_gauss")

    def _fixed_conditional(self, a):
        """Mean (as ``beta - beta_hat``) and Cholesky factor of the Gaussian
        approximation of the fixed effects given the group effects ``a``."""
        s1x, _ = self._fixed_sums
        t = self.taylor
        prec, chol = self._fixed_precision
        grad = s1x + t.s2x.T @ (a - t.a_hat) - self.prec_beta * t.beta_hat
        return np.linalg.solve(prec, grad), chol

    @property
    def _fixed_precision(self):
        """The precision of that approximation (it does not depend on ``a``) and the
        factor ``L^-T`` of its inverse (``mean + L^-T z`` has covariance ``prec^-1``),
        computed once."""
        if getattr(self, "_fixed_prec_cache", None) is None:
            s1x, s2xx = self._fixed_sums
            prec = -s2xx + self.prec_beta * np.eye(s1x.size)
            self._fixed_prec_cache = (prec, np.linalg.inv(np.linalg.cholesky(prec)).T)
        return self._fixed_prec_cache

    def _move_fixed_marginal(self, q, rng, prior, tune):
        """Fixed effects and every group effect together: a random-walk step of the
        fixed effects with their covariance with the group effects integrated out (the
        Schur complement at the centre), each group effect shifted by the change of the
        mean of its Gaussian conditional (:meth:`_move_marginal`'s coordinates ``u_g``
        held; their sd does not depend on the fixed effects, so the Jacobian is 1);
        exact by the factorised test. A fixed effect that the group effects confound,
        an intercept-like covariate, moves as far as its marginal posterior allows."""
        st, s = self.state, self.s
        p = s.fixed_idx.size
        if p == 0:
            return q, 0, 1.0
        loc, scale = self._loc_scale(q)
        a = self._effects(q, (loc, scale))
        step = math.exp(st.log_fixed_marg) * 2.38 / math.sqrt(p)
        q_new = q.copy()
        q_new[s.fixed_idx] += step * (self.chol_beta_marginal @ rng.standard_normal(p))
        db = q[s.fixed_idx] - self.taylor.beta_hat
        db_new = q_new[s.fixed_idx] - self.taylor.beta_hat
        m0 = _conditional(*self._gaussian_likelihood(db), loc, scale)[0]
        m1 = _conditional(*self._gaussian_likelihood(db_new), loc, scale)[0]
        a_new = a + (m1 - m0)
        q_new = s.with_effects(q_new, a_new, (loc, scale))
        return self._decide_joint(q, q_new, (db, a, db_new, a_new), prior(q_new) - prior(q),
                                  rng, tune, "log_fixed_marg")

    def _gaussian_likelihood(self, db):
        """``(b, P)``: each group's log-likelihood in ``a_g`` approximated by
        ``b_g a_g - P_g a_g^2 / 2`` (the Taylor sums over all its rows at the centre,
        moved to the current fixed effects)."""
        t = self.taylor
        prec = self.curv_all
        b = t.s1 + t.s2x @ db + prec * t.a_hat
        return b, prec

    def _propose_hyper(self, q, rng, factor):
        """A random-walk proposal of the hyperparameters scaled by the chain's ``factor``:
        ``((loc, scale), a, q_new, (loc_new, scale_new))`` with ``q_new`` None when the
        proposed scale is not finite and positive (the move is rejected)."""
        loc_scale = self._loc_scale(q)
        a = self._effects(q, loc_scale)
        q_new = q.copy()
        q_new[self.s.hyper_idx] += self._hyper_step(rng, getattr(self.state, factor))
        loc_new, scale_new = self._loc_scale(q_new)
        if not (np.all(np.isfinite(scale_new)) and np.all(scale_new > 0)):
            q_new = None
        return loc_scale, a, q_new, (loc_new, scale_new)

    def _log_jacobian(self, log_s, moved) -> float:
        """The log Jacobian of the change from ``q`` to coordinates in which the effects
        of ``moved`` are held at fixed ``z`` and the others at fixed ``a`` (``log_s``:
        ``log(scale' / scale)`` per group): ``sum_moved`` for a centred ``q``,
        ``-sum_held`` for a non-centred one."""
        if self.s.centred:
            return float(np.sum(log_s[moved]))
        return -float(np.sum(log_s[~moved]))

    def _hyper_move(self, q, rng, prior, tune, moved, factor):
        """A random-walk move of the hyperparameters, the group effects of ``moved``
        (None: none) following it at fixed ``z``, the others held fixed.

        In the coordinates ``(beta, h, a_held, z_moved)`` the proposal is symmetric; the
        target there is the step's density in ``q`` times the Jacobian of the change of
        coordinates, ``prod_{moved} scale_g`` for a centred ``q`` and
        ``prod_{held} 1 / scale_g`` for a non-centred one."""
        s = self.s
        if s.hyper_idx.size == 0:
            return q, 0, 1.0
        (loc, scale), a, q_new, (loc_new, scale_new) = self._propose_hyper(q, rng, factor)
        if q_new is None:
            return self._decide_joint(q, q, None, -np.inf, rng, tune, factor)
        if moved is None or not np.any(moved):
            moved, a_new = np.zeros(a.size, bool), a
        else:
            a_new = np.where(moved, loc_new + scale_new * (a - loc) / scale, a)
        q_new = s.with_effects(q_new, a_new, (loc_new, scale_new))
        log_s = np.log(scale_new) - np.log(scale)
        log_r = prior(q_new) - prior(q) + self._log_jacobian(log_s, moved)
        db = q[s.fixed_idx] - self.taylor.beta_hat
        data = (db, a, db, a_new) if np.any(moved) else None
        return self._decide_joint(q, q_new, data, log_r, rng, tune, factor)
