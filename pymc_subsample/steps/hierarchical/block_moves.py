"""The block moves of the sweep: the hyperparameters (given the group effects, given their
standardised values, or with them integrated out in effect) and the fixed effects (given
the group effects, from their Gaussian conditional, or with the group effects following).

Each is a :class:`~pymc_subsample.steps.hierarchical.moves.BlockMove`: ``propose``, and
``log_ratio`` with the Jacobian of the coordinates the move holds fixed.
"""

from __future__ import annotations

import math

import numpy as np

from .moves import BlockMove, conditional

__all__ = ["HyperGivenEffects", "HyperMarginal", "HyperAncillary", "FixedRandomWalk",
           "FixedGaussian", "FixedMarginal"]


def _mvn_logpdf(x, mean, chol) -> float:
    """``log N(x | mean, chol chol')`` up to its constant."""
    z = np.linalg.solve(chol, x - mean)
    return float(-0.5 * z @ z)


class _HyperMove(BlockMove):
    """A random-walk move of the hyperparameters ``h``: ``2.38 / sqrt(k)`` times the
    chain's factor times the Cholesky factor of their covariance over the tuning draws
    so far (0.3 per coordinate before 50 of them; held after tuning)."""

    def applies(self):
        return self.term.hyper_idx.size > 0

    def _propose_hyper(self, q, rng, st):
        """``((loc, scale), a, q_new, (loc_new, scale_new))`` with ``q_new`` None when the
        proposed scale is not finite and positive."""
        loc_scale = self.coords.loc_scale(q)
        a = self.coords.effects(q, loc_scale)
        k = self.term.hyper_idx.size
        chol = st.hyper_chol if st.hyper_chol is not None else 0.3 * np.eye(k)
        step = (math.exp(getattr(st, self.factor)) * 2.38 / math.sqrt(max(k, 1))
                * (chol @ rng.standard_normal(k)))
        q_new = q.copy()
        q_new[self.term.hyper_idx] += step
        loc_new, scale_new = self.coords.loc_scale(q_new)
        if not (np.all(np.isfinite(scale_new)) and np.all(scale_new > 0)):
            q_new = None
        return loc_scale, a, q_new, (loc_new, scale_new)


class _HyperAtFixedZ(_HyperMove):
    """The hyperparameters, the group effects of :meth:`moved` (None: none) following at
    fixed ``z = (a - loc) / scale``, the others held fixed.

    In the coordinates ``(beta, h, a_held, z_moved)`` the proposal is symmetric; the
    target there is the step's density in ``q`` times the Jacobian of the change of
    coordinates, ``prod_{moved} scale_g`` for a centred ``q`` and ``prod_{held} 1 /
    scale_g`` for a non-centred one."""

    def moved(self):
        """The groups whose effects follow the hyperparameters (None: none)."""
        return None

    def propose(self, q, rng, st):
        (loc, scale), a, q_new, (loc_new, scale_new) = self._propose_hyper(q, rng, st)
        if q_new is None:
            return None
        moved = self.moved()
        if moved is None or not np.any(moved):
            moved, a_new = np.zeros(a.size, bool), a
        else:
            a_new = np.where(moved, loc_new + scale_new * (a - loc) / scale, a)
        q_new = self.term.with_effects(q_new, a_new, (loc_new, scale_new))
        log_s = np.log(scale_new) - np.log(scale)
        db = self._db(q)
        data = (db, a, db, a_new) if np.any(moved) else None
        return q_new, data, (log_s, moved)

    def log_ratio(self, q, q_new, prior, aux):
        return prior(q_new) - prior(q) + self.log_jacobian(*aux)

    def log_jacobian(self, log_s, moved) -> float:
        """The log Jacobian of the change to coordinates in which the effects of
        ``moved`` are held at fixed ``z`` and the others at fixed ``a`` (``log_s``:
        ``log(scale' / scale)`` per group): ``sum_moved`` for a centred ``q``,
        ``-sum_held`` for a non-centred one."""
        if self.term.centred:
            return float(np.sum(log_s[moved]))
        return -float(np.sum(log_s[~moved]))


class HyperGivenEffects(_HyperAtFixedZ):
    """Hyperparameters given every group effect (the sufficient, centred augmentation):
    no data row is read."""

    name, factor = "hyper", "log_hyper"


class HyperAncillary(_HyperAtFixedZ):
    """Hyperparameters given ``z_g = (a_g - loc_g) / scale_g`` of the groups poor in
    data (the ancillary augmentation; their effects move with the hyperparameters) and
    given ``a_g`` of the groups rich in data. With :class:`HyperGivenEffects` the
    ancillarity-sufficiency interweaving of Yu and Meng (2011), per group."""

    name, factor = "ancillary", "log_anc"

    def moved(self):
        return self.fit.poor


class HyperMarginal(_HyperMove):
    """Hyperparameters and every group effect together, in conditional coordinates: a
    random-walk step of ``h`` at fixed

        u_g = (a_g - m_g(h)) / s_g(h),

    ``m_g``, ``s_g`` the mean and sd of the Gaussian approximation of ``a_g``'s
    conditional (its likelihood from the Taylor sums at the centre, moved to the current
    fixed effects, times its prior ``N(loc_g(h), scale_g(h))``).

    In these coordinates the group effects are, under the approximation, independent of
    ``h``, so ``h`` moves as its marginal posterior allows (a marginal, or collapsed,
    move); they interpolate between the non-centred form for a group poor in data and
    the centred form for a group rich in data, a fully conditional version of the
    partially non-centred parametrisations of Papaspiliopoulos, Roberts and Skold (2003).
    The move is exact whatever the approximation's quality: the target in ``(beta, h,
    u)`` is the density in ``q`` times the Jacobian (:meth:`log_jacobian`), and the data
    enter by the factorised test; every effect moves by an amount proportional to the
    step, so the test reads a few thinning events."""

    name, factor = "marginal", "log_marg"

    def propose(self, q, rng, st):
        (loc, scale), a, q_new, (loc_new, scale_new) = self._propose_hyper(q, rng, st)
        if q_new is None:
            return None
        db = self._db(q)
        b, prec = self.fit.gaussian_likelihood(db)
        m0, s0 = conditional(b, prec, loc, scale)
        m1, s1 = conditional(b, prec, loc_new, scale_new)
        a_new = m1 + (s1 / s0) * (a - m0)
        q_new = self.term.with_effects(q_new, a_new, (loc_new, scale_new))
        return q_new, (db, a, db, a_new), (s0, s1, scale, scale_new)

    def log_ratio(self, q, q_new, prior, aux):
        return prior(q_new) - prior(q) + self.log_jacobian(*aux)

    def log_jacobian(self, s0, s1, scale, scale_new) -> float:
        """The log Jacobian of the change from ``q`` to the conditional coordinates
        ``u_g`` when the sds move from ``s0`` to ``s1`` and the scales from ``scale`` to
        ``scale_new``: ``sum log(s1 / s0)`` for a centred ``q`` (``da'/da = s1 / s0``),
        minus ``sum log(scale_new / scale)`` for a non-centred one (``dz'/dz = (s1 / s0)
        (scale / scale_new)``)."""
        log_jac = float(np.sum(np.log(s1) - np.log(s0)))
        if not self.term.centred:
            log_jac -= float(np.sum(np.log(scale_new) - np.log(scale)))
        return log_jac


class _FixedMove(BlockMove):
    """A move of the fixed effects (all rows: Taylor sums and thinning)."""

    def applies(self):
        return self.s.fixed_idx.size > 0

    def log_ratio(self, q, q_new, prior, aux):
        return prior(q_new) - prior(q)


class FixedRandomWalk(_FixedMove):
    """Fixed effects given the group effects: a random walk with their conditional
    covariance at the centre."""

    name, factor = "fixed", "log_fixed"

    def propose(self, q, rng, st):
        p = self.s.fixed_idx.size
        step = math.exp(st.log_fixed) * 2.38 / math.sqrt(p)
        q_new = q.copy()
        q_new[self.s.fixed_idx] += step * (self.fit.chol_beta @ rng.standard_normal(p))
        a = self.coords.effects(q)
        return q_new, (self._db(q), a, self._db(q_new), a), None


class FixedGaussian(_FixedMove):
    """Fixed effects given the group effects, drawn from a Gaussian approximation of
    their conditional (the Taylor sums over all rows at the centre, moved to the
    current group effects, and the prior's curvature): an independence proposal given
    ``a``, exact through the proposal densities in the ratio. On tall data most
    proposals are accepted: nearly an independent draw given the group effects."""

    name, factor = "fixed_gaussian", "log_fixed_gauss"

    def propose(self, q, rng, st):
        a = self.coords.effects(q)
        db = self._db(q)
        mean, chol = self.fit.fixed_conditional(a)
        db_new = mean + chol @ rng.standard_normal(self.s.fixed_idx.size)
        q_new = q.copy()
        q_new[self.s.fixed_idx] = self.fit.taylor.beta_hat + db_new
        return q_new, (db, a, db_new, a), (db, db_new, mean, chol)

    def log_ratio(self, q, q_new, prior, aux):
        db, db_new, mean, chol = aux
        return (prior(q_new) - prior(q) + _mvn_logpdf(db, mean, chol)
                - _mvn_logpdf(db_new, mean, chol))


class FixedMarginal(_FixedMove):
    """Fixed effects and every group effect together: a random-walk step of the fixed
    effects with their covariance with the group effects integrated out (the Schur
    complement at the centre), each group effect shifted by the change of the mean of
    its Gaussian conditional (:class:`HyperMarginal`'s coordinates ``u_g`` held; their
    sd does not depend on the fixed effects, so the Jacobian is 1). A fixed effect that
    the group effects confound, an intercept-like covariate, moves as far as its
    marginal posterior allows."""

    name, factor = "fixed_marginal", "log_fixed_marg"

    def propose(self, q, rng, st):
        p = self.s.fixed_idx.size
        loc, scale = self.coords.loc_scale(q)
        a = self.coords.effects(q, (loc, scale))
        step = math.exp(st.log_fixed_marg) * 2.38 / math.sqrt(p)
        q_new = q.copy()
        q_new[self.s.fixed_idx] += step * (self.fit.chol_beta_marginal @ rng.standard_normal(p))
        db, db_new = self._db(q), self._db(q_new)
        m0 = conditional(*self.fit.gaussian_likelihood(db), loc, scale)[0]
        m1 = conditional(*self.fit.gaussian_likelihood(db_new), loc, scale)[0]
        a_new = a + (m1 - m0)
        q_new = self.term.with_effects(q_new, a_new, (loc, scale))
        return q_new, (db, a, db_new, a_new), None
