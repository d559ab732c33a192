"""The arithmetic of the blocked hierarchical sweep: groups' rows, Taylor sums per group,
exact small groups, and factorised acceptance with Poisson thinning (NumPy only).

The model (:mod:`pymc_subsample.engine.groups`): rows ``i`` in groups ``g_i`` with linear
predictor ``eta_i = f_i + a_{g_i}``, ``f_i = o_i + x_i . beta`` affine in the fixed
effects ``beta``, and group effects ``a_g`` that are conditionally independent given
their hyperparameters. Every move of the sweep changes ``beta`` or ``a`` (or neither) and
needs the difference of the log-likelihood between two points:

* the rows of every group can contribute the difference of their second-order Taylor
  expansions in ``eta`` about a centre ``eta_hat_i = f_i(beta_hat) + a_hat_{g_i}``,
  computed exactly from per-group sums (Bardenet, Doucet and Holmes 2017, "On Markov
  chain Monte Carlo methods for tall data", Sec. 7.1, in the predictor form);
* and the remainders ``D_i = R_i(eta') - R_i(eta)`` of those rows enter through the
  factorised acceptance of Cornish, Vanetti, Bouchard-Cote, Deligiannidis and Doucet
  (2019, "Scalable Metropolis-Hastings for exact Bayesian inference with large
  datasets", Algorithm 2): the move is accepted with probability
  ``min(1, exp(first)) * prod_i min(1, exp(-D_i))``, the product decided by Poisson
  thinning with per-group bounds ``|D_i| <= c_g`` from the family's local supremum of
  the third derivative (:meth:`~pymc_subsample.kernels.families.GLMFamily.local_sup`).
  The factorised acceptance is reversible, so every move is exact;
* rows of **small groups** (at most ``exact_rows`` rows, 16 by default) are also kept in
  memory at set-up, to be evaluated exactly when a move of the group's effect is long
  enough that thinning would cost more: their cost per move is bounded by
  ``exact_rows x number of groups`` whatever ``N``.

The group moves (all groups at once, each accepted on its own: the groups are
conditionally independent) and the joint moves share the same code
(:func:`thinning_rates`, :func:`draw_events`, :func:`thinned_rejections`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .families import get_family
from .variance.predictor import remainder_difference, row_loglik

__all__ = ["GroupRows", "GroupTaylor", "SmallRows", "normal_logpdf", "eb_fit",
           "thinning_rates", "draw_events"]


def normal_logpdf(x, loc, scale):
    """``log N(x | loc, scale)`` elementwise."""
    z = (x - loc) / scale
    return -0.5 * z * z - np.log(scale) - 0.5 * math.log(2.0 * math.pi)


class GroupRows:
    """The rows of every group, stored once: ``order`` (rows sorted by group, int32 when
    ``N < 2^31``) and ``offsets`` (the groups' starts in ``order``).

    Parameters
    ----------
    group_of_row : ndarray of int, shape (N,)
    n_groups : int
    """

    def __init__(self, group_of_row, n_groups: int):
        g = np.asarray(group_of_row)
        self.n_groups = int(n_groups)
        self.sizes = np.bincount(g, minlength=self.n_groups).astype(np.int64)
        dtype = np.int32 if g.size < 2**31 else np.int64
        self.order = np.argsort(g, kind="stable").astype(dtype)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)])

    def rows_of(self, groups) -> np.ndarray:
        """All rows of ``groups`` (concatenated in the order given)."""
        groups = np.asarray(groups, dtype=np.int64)
        if groups.size == 0:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([self.order[self.offsets[k]:self.offsets[k + 1]]
                               for k in groups]).astype(np.int64)

    def sample(self, groups, rng) -> np.ndarray:
        """One row drawn uniformly from each entry of ``groups`` (repeats allowed)."""
        groups = np.asarray(groups, dtype=np.int64)
        u = rng.random(groups.size)
        pos = self.offsets[groups] + np.minimum((u * self.sizes[groups]).astype(np.int64),
                                                self.sizes[groups] - 1)
        return self.order[pos].astype(np.int64)


@dataclass
class SmallRows:
    """The rows of the small groups, in memory: ``f_i`` at the centre, the design ``x_i``
    of the fixed effects, ``y_i`` and the group."""

    f_hat: np.ndarray
    x: np.ndarray
    y: np.ndarray
    group: np.ndarray

    @property
    def size(self) -> int:
        return int(self.y.size)

    def eta(self, db, a) -> np.ndarray:
        """Linear predictors at fixed effects ``beta_hat + db`` and group effects ``a``."""
        return self.f_hat + self.x @ db + a[self.group]


@dataclass
class GroupTaylor:
    """Second-order Taylor sums of the expanded groups' rows about the centre, in ``eta``.

    With ``d_i = eta_i - eta_hat_i = x_i . db + da_{g_i}`` (``db = beta - beta_hat``,
    ``da = a - a_hat``), the rows' Taylor sum ``sum_i l'_i d_i + l''_i d_i^2 / 2`` is

        db . s1x + db' s2xx db / 2 + sum_g [da_g s1_g + da_g s2x_g . db + da_g^2 s2_g / 2]

    (each ``l`` at ``eta_hat_i``). ``lo``, ``hi``: the range of ``eta_hat`` in each group;
    ``xmax``: the largest ``||x_i||_2`` in each group (the thinning bounds).
    """

    beta_hat: np.ndarray
    a_hat: np.ndarray
    large: np.ndarray  # bool per group: expanded (the sweep expands every non-empty one)
    s1: np.ndarray
    s2: np.ndarray
    s2x: np.ndarray
    s1x: np.ndarray
    s2xx: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    xmax: np.ndarray
    sizes: np.ndarray
    family: str
    params: dict = field(default_factory=dict)

    def group_terms(self, db, da) -> np.ndarray:
        """The per-group part of the Taylor sum (zero for groups not expanded)."""
        t = da * (self.s1 + self.s2x @ db + 0.5 * self.s2 * da)
        return np.where(self.large, t, 0.0)

    def fixed_term(self, db) -> float:
        return float(db @ self.s1x + 0.5 * db @ self.s2xx @ db)

    def radius(self, db, da) -> np.ndarray:
        """A bound on ``|eta_i - eta_hat_i|`` over each group's rows."""
        return self.xmax * float(np.linalg.norm(db)) + np.abs(da)

    def bounds(self, db, da, db_new, da_new) -> np.ndarray:
        """``c_g >= |D_i|`` for the rows of each expanded group (0 for the others).

        With ``K`` the family's supremum of ``|f'''|`` over every ``eta`` within
        ``r = max(r0, r1)`` of the group's centres (``r0``, ``r1`` the radii of the two
        points), two bounds hold and the smaller is used:

        * ``|R_i(eta)| <= K |eta - eta_hat_i|^3 / 6`` at each point, so
          ``|D_i| <= K (r0^3 + r1^3) / 6`` (Cornish et al. 2019, eq. 12);
        * ``R_i'(t) = f'''(xi) (t - eta_hat_i)^2 / 2`` between the points, so
          ``|D_i| <= K |eta'_i - eta_i| r^2 / 2`` with ``|eta'_i - eta_i| <=
          xmax_g ||db' - db|| + |da'_g - da_g|``: much the smaller for a short move
          of a group far from its centre (a data-poor group, whose effect roams the
          prior's width).
        """
        big = self.large
        c = np.zeros(big.size)
        if not np.any(big):
            return c
        r0, r1 = self.radius(db, da)[big], self.radius(db_new, da_new)[big]
        r = np.maximum(r0, r1)
        fam = get_family(self.family)
        if fam.global_bound:  # a supremum over the line
            k = fam.sup_derivative(3, **self.params)
        else:
            k = fam.local_sup(3, self.lo[big] - r, self.hi[big] + r, **self.params)
        step = (self.xmax[big] * float(np.linalg.norm(np.asarray(db_new) - db))
                + np.abs(np.asarray(da_new) - da)[big])
        c[big] = np.asarray(k, dtype=np.float64) * np.minimum((r0**3 + r1**3) / 6.0,
                                                             step * r * r / 2.0)
        return c


def thinning_rates(taylor: GroupTaylor, db, da, db_new, da_new):
    """``(c_g, n_g c_g)``: the per-row bound and the Poisson rate of each group."""
    c = taylor.bounds(db, da, db_new, da_new)
    return c, c * taylor.sizes


def draw_events(rates, rng, *, per_group: bool):
    """The groups of the Poisson events of the thinning (Cornish et al. 2019, Alg. 2):
    ``Poisson(rate_g)`` events in each group (``per_group``), or ``Poisson(sum rates)``
    events spread over the groups in proportion to their rates."""
    if per_group:
        counts = rng.poisson(rates)
        return np.repeat(np.arange(rates.size), counts)
    total = float(rates.sum())
    n = rng.poisson(total) if total > 0 else 0
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    cdf = np.cumsum(rates)
    return np.minimum(np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right"),
                      rates.size - 1)


def thinned_rejections(family, params, y, eta, eta_new, eta_hat, bound, rng):
    """Whether each event rejects: with probability ``max(0, D_i) / c`` (``D_i`` the
    remainder difference of the event's row, ``c`` its group's bound)."""
    d = remainder_difference(family, y, params, eta, eta_new, eta_hat, 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(bound > 0, np.maximum(d, 0.0) / bound, 1.0)
    return rng.random(p.size) < p, float(np.max(p, initial=0.0))


def small_diff(small: SmallRows, family, params, db, a, db_new, a_new, n_groups,
               groups=None):
    """``sum_i l_i(eta') - l_i(eta)`` per group over the small groups' rows (only the rows
    of groups whose effect moved, when the fixed effects did not; only those of
    ``groups``, a mask, when given), and the number of rows evaluated."""
    if small.size == 0:
        return np.zeros(n_groups), 0
    keep = np.ones(small.size, bool) if groups is None else groups[small.group]
    if np.array_equal(db, db_new):
        keep &= (a != a_new)[small.group]
    if not np.any(keep):
        return np.zeros(n_groups), 0
    if not np.all(keep):
        small = SmallRows(small.f_hat[keep], small.x[keep], small.y[keep], small.group[keep])
    e0, e1 = small.eta(db, a), small.eta(db_new, a_new)
    l = row_loglik(family, np.stack([e0, e1]), small.y, params, derivatives=0)[0]
    return np.bincount(small.group, weights=l[1] - l[0], minlength=n_groups), small.size


def eb_fit(stats_fn, beta0, a0, n_groups, *, prior_prec_beta=1.0, tau0=1.0, mu0=0.0,
           outer=6, inner=4):
    """A proper centre for the Taylor sums: the mode of ``(beta, a)`` given an empirical-
    Bayes group scale.

    The joint density of a centred hierarchical model has no proper mode (it grows
    without bound as the group scale goes to 0 with every ``a_g`` at its mean), so the
    centre is the mode of ``log p(y | beta, a) + sum_g log N(a_g | mu, tau)
    - |beta|^2 prec / 2`` at fixed ``(mu, tau)``, found by block Newton steps (the
    Hessian's group block is diagonal: a Schur complement in ``beta``), alternated with
    the EM updates ``mu = mean(a)``, ``tau^2 = mean((a - mu)^2 + 1 / h_g)`` (``h_g`` the
    conditional precision of ``a_g``): a Laplace-EM estimate of the marginal maximum-
    likelihood scale, which stays positive because ``1 / h_g > 0``.

    Parameters
    ----------
    stats_fn : callable
        ``(beta, a) -> (s1, s2, s2x, s1x, s2xx)``: the gradient and Hessian blocks of the
        log-likelihood over all rows (one data pass).

    Returns
    -------
    beta, a, mu, tau, cov_beta, cov_beta_marginal
        The covariances of ``beta`` at the centre given ``a`` and with ``a`` integrated
        out (the inverse of the Schur complement), under the Gaussian approximation.
    """
    beta, a = np.array(beta0, dtype=np.float64), np.array(a0, dtype=np.float64)
    mu, tau = float(mu0), float(tau0)
    p = beta.size
    stats = None
    for _ in range(outer):
        for _ in range(inner):
            s1, s2, s2x, s1x, s2xx = stats = stats_fn(beta, a)
            g_b = s1x - prior_prec_beta * beta
            g_a = s1 - (a - mu) / tau**2
            A = -s2xx + prior_prec_beta * np.eye(p)
            D = -s2 + 1.0 / tau**2
            B = -s2x.T  # (p, G)
            S = A - (B / D) @ B.T
            d_b = np.linalg.solve(S, g_b - B @ (g_a / D)) if p else beta
            d_a = (g_a - B.T @ d_b) / D
            step = 1.0
            if np.max(np.abs(d_a), initial=0.0) > 2.0:  # damp the first steps from far
                step = 2.0 / np.max(np.abs(d_a))
            beta, a = beta + step * d_b, a + step * d_a
            if max(np.max(np.abs(d_a), initial=0.0), np.max(np.abs(d_b), initial=0.0)) < 1e-6:
                break
        h = -stats[1] + 1.0 / tau**2
        mu = float(np.mean(a))
        tau = float(math.sqrt(max(np.mean((a - mu) ** 2 + 1.0 / h), 1e-12)))
    s1, s2, s2x, s1x, s2xx = stats_fn(beta, a)
    A = -s2xx + prior_prec_beta * np.eye(p)
    D = -s2 + 1.0 / tau**2
    B = -s2x.T
    if not p:
        return beta, a, mu, tau, np.zeros((0, 0)), np.zeros((0, 0))
    return beta, a, mu, tau, np.linalg.inv(A), np.linalg.inv(A - (B / D) @ B.T)
