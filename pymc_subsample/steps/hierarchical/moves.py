"""The moves of the sweep: what each proposes, its data-free log ratio (with its
Jacobian), and how it is decided.

Every move is a small object (:class:`Move`) with a ``name`` (its entry in
:attr:`HierarchicalSweep.DEFAULT_MOVES <pymc_subsample.steps.hierarchical.sweep.
HierarchicalSweep.DEFAULT_MOVES>` and the prefix of its stats), the chain's tuned log
scale factor it adapts (``factor``, a field of the chain's
:class:`~pymc_subsample.steps.hierarchical.sweep.SweepState`), ``propose`` and
``log_ratio``. Two kinds share the decision:

* a :class:`GroupMove` moves every group effect at once, each accepted on its own (the
  group effects are conditionally independent given the rest);
* a :class:`BlockMove` moves a block (the hyperparameters, the fixed effects; the group
  effects possibly following) as one proposal with one decision.

The data enter through the factorised test
(:class:`~pymc_subsample.steps.hierarchical.factorised.FactorisedTest`), the log prior
through the data-free ratio. The hyperparameter and fixed-effect moves are in
:mod:`pymc_subsample.steps.hierarchical.block_moves`.
"""

from __future__ import annotations

import abc
import math

import numpy as np

from ...kernels.hierarchical import normal_logpdf

__all__ = ["GroupCoordinates", "Move", "GroupMove", "BlockMove", "GroupRandomWalk",
           "GroupGaussian", "conditional", "robbins_monro"]


def conditional(b, prec, loc, scale):
    """Mean and sd of ``a`` under ``exp(b a - prec a^2 / 2) N(a | loc, scale)``."""
    q = prec + 1.0 / scale**2
    return (b + loc / scale**2) / q, 1.0 / np.sqrt(q)


def robbins_monro(value, accept, target, n):
    """One Robbins-Monro step of a log scale factor toward an acceptance target."""
    return value + (np.asarray(accept, dtype=np.float64) - target) / (1.0 + n) ** 0.6 * 2.0


class GroupCoordinates:
    """The group effects of a term at ``q``, with its ``(loc, scale)`` reused while the
    hyperparameters are unchanged (one cache for all the moves of a sweep)."""

    def __init__(self, term):
        self.term = term
        self._ls = (None, None)

    def loc_scale(self, q):
        """``(loc, scale)`` at ``q``."""
        if self.term.hyper_shared:  # another step moves some of them between draws
            return self.term.loc_scale(q)
        key = q[self.term.hyper_idx].tobytes()
        if self._ls[0] != key:
            self._ls = (key, self.term.loc_scale(q))
        return self._ls[1]

    def effects(self, q, loc_scale=None):
        """The group effects at ``q`` (``loc_scale``: those of ``q``, when computed)."""
        if self.term.centred:
            return self.term.effects(q)
        return self.term.effects(q, self.loc_scale(q) if loc_scale is None else loc_scale)


class Move(abc.ABC):
    """One move of the sweep, on the sweep's shared parts: its ``fit``
    (:class:`~pymc_subsample.steps.hierarchical.fit.SweepFit`), its factorised ``test``
    and the term's :class:`GroupCoordinates`.

    :meth:`apply` makes the move from ``q`` with the chain's state ``st`` and returns
    ``(q, rows read, accepted share)``.
    """

    #: the move's entry in the sweep's ``DEFAULT_MOVES`` and the prefix of its stats
    name = ""
    #: the field of the chain's ``SweepState`` holding the log scale factor it tunes
    factor = None
    #: the stats of one application (the sweep keeps their means per move)
    stats_dtypes_shapes = {"accepted": (np.float64, []), "data_used": (np.int64, [])}

    def __init__(self, fit, test, coords):
        self.fit, self.test, self.coords = fit, test, coords
        self.s, self.term = fit.s, fit.term

    @abc.abstractmethod
    def apply(self, q, rng, prior, st, tune):
        """Make the move from ``q``: returns ``(q, rows read, accepted share)``
        (:class:`GroupMove` and :class:`BlockMove` implement it)."""

    def _db(self, q):
        """The fixed effects at ``q`` as ``beta - beta_hat``."""
        return q[self.s.fixed_idx] - self.fit.taylor.beta_hat


class GroupMove(Move):
    """Every group effect at once, each accepted on its own: ``propose(a, db, loc, scale,
    rng, st) -> (a_new, aux)`` and ``log_ratio(a, a_new, loc, scale, aux)``, the per-group
    data-free log ratio (prior and proposal densities)."""

    def apply(self, q, rng, prior, st, tune):
        loc, scale = self.coords.loc_scale(q)
        a = self.coords.effects(q, (loc, scale))
        db = self._db(q)
        a_new, aux = self.propose(a, db, loc, scale, rng, st)
        extra = self.log_ratio(a, a_new, loc, scale, aux)
        log_u = np.log(rng.random(a.size))
        ok, used = self.test.decide(db, a, db, a_new, log_u, extra, rng, per_group=True,
                                    q=q, q_new=q)
        q = self.term.with_effects(q, np.where(ok, a_new, a), (loc, scale))
        if tune:
            self.adapt(st, ok)
        return q, used, float(np.mean(ok))

    def adapt(self, st, ok) -> None:
        """Tune the chain's state after the groups' decisions ``ok``. Default: none."""


class GroupRandomWalk(GroupMove):
    """A random walk per group scaled by its conditional curvature at the centre, tuned
    per group toward 0.44 acceptance."""

    name = "groups"

    def propose(self, a, db, loc, scale, rng, st):
        prec = self.fit.curv + 1.0 / scale**2
        step = np.exp(st.log_group) * 2.4 / np.sqrt(prec)
        return a + step * rng.standard_normal(a.size), None

    def log_ratio(self, a, a_new, loc, scale, aux):
        return normal_logpdf(a_new, loc, scale) - normal_logpdf(a, loc, scale)

    def adapt(self, st, ok):
        st.log_group = robbins_monro(st.log_group, ok, 0.44, st.n_tuned)


class GroupGaussian(GroupMove):
    """Every group effect from the Gaussian approximation of its conditional (the
    Taylor sums at the centre moved to the current fixed effects, times its prior): an
    independence proposal per group, accepted on its own with the proposal densities in
    the ratio. For a group rich in data the approximation is close and the move is
    nearly an independent draw of its effect."""

    name = "groups_gaussian"

    def propose(self, a, db, loc, scale, rng, st):
        m, sd = conditional(*self.fit.gaussian_likelihood(db), loc, scale)
        return m + sd * rng.standard_normal(a.size), (m, sd)

    def log_ratio(self, a, a_new, loc, scale, aux):
        m, sd = aux
        return (normal_logpdf(a_new, loc, scale) - normal_logpdf(a, loc, scale)
                + normal_logpdf(a, m, sd) - normal_logpdf(a_new, m, sd))


class BlockMove(Move):
    """A block as one proposal with one decision: ``propose(q, rng, st) -> (q_new, data,
    aux)`` (None: not a valid point, rejected without a test; ``data = (db, a, db_new,
    a_new)`` for the factorised test, None when no row's likelihood changes) and
    ``log_ratio(q, q_new, prior, aux)``, the data-free log ratio with the Jacobian of the
    move's coordinates. The decision tunes the chain's ``factor`` toward 0.3
    acceptance."""

    def applies(self) -> bool:
        """Whether there is a block to move (a move that does not apply counts as
        accepted)."""
        return True

    def apply(self, q, rng, prior, st, tune):
        if not self.applies():
            return q, 0, 1.0
        proposed = self.propose(q, rng, st)
        if proposed is None:
            return self._decide(q, q, None, -np.inf, rng, st, tune)
        q_new, data, aux = proposed
        return self._decide(q, q_new, data, self.log_ratio(q, q_new, prior, aux), rng, st,
                            tune)

    def _decide(self, q, q_new, data, log_r, rng, st, tune):
        """Accept or reject the move (``log_r`` NaN or -inf rejects without reading
        data); returns ``(state, rows read, accepted)``."""
        ok, used = False, 0
        if log_r == log_r and log_r > -np.inf:
            log_u = math.log(rng.random())
            if data is None:
                ok = log_u < min(log_r, 0.0)
            else:
                ok, used = self.test.decide(*data, log_u, log_r, rng, per_group=False,
                                            q=q, q_new=q_new)
        if tune:
            setattr(st, self.factor, float(robbins_monro(getattr(st, self.factor), ok, 0.3,
                                                         st.n_tuned)))
        return (q_new if ok else q), used, float(ok)
