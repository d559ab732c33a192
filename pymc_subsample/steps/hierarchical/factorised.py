"""The data term of every move of the sweep: the factorised test with Poisson thinning.

:class:`FactorisedTest` accepts a move of ``(beta, a)`` with the factorised probability
``min(1, exp(first)) * prod_i min(1, exp(-D_i))`` of Cornish et al. (2019, "Scalable
Metropolis-Hastings for exact Bayesian inference with large datasets", Algorithm 2):
``first`` the data-free log ratio plus the Taylor sums' difference at the sweep's centre
(:class:`~pymc_subsample.steps.hierarchical.fit.SweepFit`), the product decided by
Poisson thinning of the remainders (:mod:`pymc_subsample.kernels.hierarchical`). A move
of all groups at once decides each group on its own.
"""

from __future__ import annotations

import numpy as np

from ...kernels.hierarchical import draw_events, small_diff, thinned_rejections, thinning_rates

__all__ = ["FactorisedTest"]

#: a small group's thinning rate up to which a group move expands it instead of
#: evaluating its rows
_SMALL_RATE = 0.1


class FactorisedTest:
    """The factorised test of the moves of a sweep on ``fit`` (a
    :class:`~pymc_subsample.steps.hierarchical.fit.SweepFit`)."""

    def __init__(self, fit):
        self.fit = fit

    def expanded(self, rates) -> np.ndarray:
        """The groups a group move takes through Taylor sums and thinning: the large
        ones, and a small one when its Poisson rate (the expected thinning events, and a
        bound on the log acceptance it can lose) is at most ``_SMALL_RATE``."""
        return self.fit.large | (rates <= _SMALL_RATE)

    def decide(self, db, a, db_new, a_new, log_u, extra, rng, *, per_group, q=None,
               q_new=None):
        """The factorised test of a move of ``(beta, a)``. ``extra``: the data-free log
        ratio (per group with ``per_group``); ``q``, ``q_new``: the two points (not read
        here: the family has no sampled parameter; the test of a family with one reads
        it from them). Returns (accepted, rows read).

        Every group's rows may enter through Taylor sums and thinning (the fit's
        ``taylor`` expands every group): the joint moves, which shift every row's
        predictor a little, always take that route and read only the thinning's events.
        The group moves take it for the large groups and for each small group whose
        thinning rate is low (:meth:`expanded`), and evaluate the other small groups'
        rows exactly. The choice depends on the pair of points only through the bound,
        which is symmetric in them, so each group's test stays reversible."""
        fit = self.fit
        s, G, t = fit.s, fit.term.n_groups, fit.taylor
        da, da_new = a - t.a_hat, a_new - t.a_hat
        if per_group:
            c, rates = thinning_rates(t, db, da, db_new, da_new)
            expanded = self.expanded(rates)
            exact, used = small_diff(fit.small, s.family, s.params, db, a, db_new, a_new, G,
                                     ~expanded)
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
            rows = fit.groups.sample(ev, rng)
            y, (e0, e1), eh = fit.rows_eta(rows, (db, db_new), (a, a_new))
            reject, _ = thinned_rejections(s.family, s.params, y, e0, e1, eh, c[ev], rng)
            if per_group:
                ok = ok & (np.bincount(ev[reject], minlength=G) == 0)
            else:
                ok = not np.any(reject)
        return ok, used
