"""The exact Gaussian sweep: a linear mixed model with any number of group terms.

On a Normal likelihood whose linear predictor holds several group terms -- crossed or
nested grouping factors, random slopes with their own scales
(:mod:`pymc_subsample.engine.group_terms`) -- the location parameters ``theta`` (the
fixed effects and every term's effects) are jointly Gaussian given the variance
parameters ``v`` (the likelihood's ``sigma`` and the terms' hyperparameters), up to the
fixed effects' prior. The sweep uses that, and reads no row while sampling
(:mod:`pymc_subsample.kernels.gaussian_locations`: sufficient statistics from two passes
at set-up, one conditional ``O(D_r^3)`` per move):

1. ``locations`` -- every location at once from its Gaussian conditional given ``v``
   (the fixed effects' prior replaced by its Gaussian approximation at the centre; the
   Metropolis-Hastings ratio corrects it, and is 1 for a Normal prior): the blocked
   update of Papaspiliopoulos, Stumpf-Fetizon and Zanella ("Scalable Bayesian
   computation for crossed and nested hierarchical models"), whose mixing does not
   degrade with the numbers of rows and levels;
2. ``scale`` and ``hyper`` -- each block of ``v`` (the scale; each term's
   hyperparameters) by a random walk, **the locations redrawn from their conditional at
   the proposed ``v``**: a Metropolis-Hastings move on ``(v, theta)`` whose proposal
   density of ``theta`` (with the Jacobian ``prod scale`` of a non-centred term's
   ``z``) is in the ratio. With a Normal prior on the fixed effects its ratio is that of
   the marginal posterior of ``v`` -- the locations integrated out exactly -- so the
   variances mix as a random walk on a handful of coordinates, neither the centred
   form's nor the non-centred form's funnel in the way.

Every move is exact. The random walks are tuned as the Taylor-sum sweep's
(:class:`~pymc_subsample.steps.hierarchical.sweep.HierarchicalSweep`): a Robbins-Monro
factor toward 0.3 acceptance and each block's covariance over the tuning draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...engine.analysis import ModelNotSupportedError
from ...kernels.gaussian_locations import GaussianConditional, Layout, LocationSums
from ..kernel import TransitionKernel
from .fit import fixed_design
from .moves import robbins_monro
from .sweep import MoveStats, _memo_prior

__all__ = ["GaussianFit", "GaussianSweep", "GaussianSweepState"]

#: rows per chunk of the set-up passes
_CHUNK = 65536


class GaussianFit:
    """The set-up of the Gaussian sweep: the sufficient statistics about a centre (two
    passes over the rows), and the Gaussian approximation of the fixed effects' prior.

    Attributes
    ----------
    layout : Layout
    sums : LocationSums
        About the centre :attr:`theta_hat` (a ridge fit of every location).
    beta_prec : ndarray, shape (p, p)
        The fixed effects' prior precision at the centre (minus its log density's
        Hessian, clipped to positive semi-definite; 0 for a flat prior).
    """

    def __init__(self, engine, structure):
        self.engine, self.s = engine, structure
        self.q_template = q = engine.initial_q()
        s = structure
        self.layout = Layout(s.fixed_idx.size, [t.n_groups for t in s.terms], s.factors)
        zz, c0, e0 = None, np.zeros(self.layout.size), 0.0
        for chunk in self._chunks():
            X, groups, weights, r = chunk
            part = self.layout.zz(X, groups, weights)
            zz = list(part) if zz is None else [a + b for a, b in zip(zz, part)]
            c0 += self.layout.zt_times(r, X, groups, weights)
            e0 += float(r @ r)
        self.n = int(engine.n_rows)
        self._zz = zz
        self._prior_at(q)
        # the centre: every location's mean given a residual scale and a weak prior on
        # the effects (a ridge fit); only a reference point for the sums below
        var = max(e0 / max(self.n, 1) - (float(c0[0]) / max(self.n, 1)) ** 2, 1e-12)
        lam = np.r_[np.zeros(self.layout.p), np.full(self.layout.size - self.layout.p,
                                                      1.0 / var)]
        raw = self._sums(e0, c0)
        shift = np.r_[self.grad_beta + self.beta_prec @ q[s.fixed_idx],
                      np.zeros(self.layout.size - self.layout.p)]
        p = self.layout.p
        # every location's conditional is proper iff the fixed effects' block is: each
        # term's effects have a proper Normal prior (``X'X / sigma^2 + prior precision``)
        m = zz[0][:p, :p] / var + self.beta_prec
        d = np.sqrt(np.clip(np.diag(m), 1e-300, None))  # scale-free: correlation form
        try:
            if p and not np.linalg.eigvalsh(m / np.outer(d, d))[0] > 1e-10:
                raise np.linalg.LinAlgError
            centre = GaussianConditional(raw, 1.0 / var, lam, self.beta_prec, shift).mean()
        except np.linalg.LinAlgError:
            raise ModelNotSupportedError(
                "the fixed effects are not identified by the data and their prior (the "
                f"design of {', '.join(s.fixed_names)} is rank deficient and the prior "
                "flat): give them a proper prior, or drop the collinear columns") from None
        self.theta_hat = centre
        c, e = np.zeros(self.layout.size), 0.0
        for X, groups, weights, r in self._chunks():
            res = r - self.layout.z_times(centre, X, groups, weights)
            c += self.layout.zt_times(res, X, groups, weights)
            e += float(res @ res)
        self.sums = self._sums(e, c)

    def _sums(self, e, c) -> LocationSums:
        rr, rb, bb = self._zz
        return LocationSums(n=self.n, E=e, c=c, r_idx=self.layout.r_idx,
                            b_idx=self.layout.b_idx, ZZ_rr=rr, ZZ_rb=rb, ZZ_bb=bb)

    def _chunks(self):
        """Per chunk of rows: ``X``, each term's levels and weights, ``y - o``."""
        n, q = self.engine.n_rows, self.q_template
        for start in range(0, n, _CHUNK):
            stop = min(n, start + _CHUNK)
            data = self.engine.gather_slice(start, stop)
            o, X, y = fixed_design(self.s, q, data)
            groups = [t.group_of_row[start:stop] for t in self.s.terms]
            yield X, groups, self.s.weights(q, data), y - o

    def _prior_at(self, q):
        """``grad_beta``, ``beta_prec`` and ``beta0``: the fixed effects' log prior's
        gradient and (minus) Hessian at ``q``, by differences of its exact gradient."""
        idx = self.s.fixed_idx
        grad = self.engine.prior_and_grad(q)[1]
        H = np.zeros((idx.size, idx.size))
        for col, j in enumerate(idx):
            h = 1e-4 * max(1.0, abs(q[j]))
            up, down = q.copy(), q.copy()
            up[j] += h
            down[j] -= h
            H[:, col] = (self.engine.prior_and_grad(up)[1][idx]
                         - self.engine.prior_and_grad(down)[1][idx]) / (2.0 * h)
        vals, vecs = np.linalg.eigh(-0.5 * (H + H.T))
        self.beta_prec = (vecs * np.clip(vals, 0.0, None)) @ vecs.T
        self.grad_beta = np.asarray(grad, dtype=np.float64)[idx]
        self.beta0 = q[idx].copy()


@dataclass
class GaussianSweepState:
    """A chain's tuning: each block's log factor and covariance over the tuning draws,
    and the moves' stats (``{"<move>__<stat>": [sum, count]}``)."""

    factors: dict
    n_tuned: int = 0
    sums: dict = field(default_factory=dict)
    chols: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)


class GaussianSweep(MoveStats, TransitionKernel):
    """The exact Gaussian sweep on a :class:`~pymc_subsample.engine.groups.
    GroupStructure` with ``kernel="gaussian"`` (module docstring).

    Parameters
    ----------
    engine : LikelihoodEngine
    structure : GroupStructure
    moves : dict, optional
        Moves per sweep, by name (``DEFAULT_MOVES``): ``locations``, ``scale`` (each
        random walk of the likelihood's scale) and ``hyper`` (of each term's
        hyperparameters).
    """

    DEFAULT_MOVES = {"locations": 1, "scale": 2, "hyper": 3}
    stats_dtypes_shapes = {"accepted": (np.float64, []), "accept": (np.float64, []),
                           "data_used": (np.int64, []), "n_batches": (np.int64, [])}

    def __init__(self, engine, structure, *, moves=None):
        self.engine, self.s = engine, structure
        self.fit = GaussianFit(engine, structure)
        self.counts = {**self.DEFAULT_MOVES, **(moves or {})}
        self.blocks = []  # (move name, positions in q, initial sd of each coordinate)
        if structure.scale is not None:
            self.blocks.append(("scale", np.array([structure.scale.idx]),
                                self._scale_sd()))
        seen = set()
        for t in structure.terms:
            key = tuple(t.hyper_idx)
            if key and key not in seen:
                seen.add(key)
                self.blocks.append((f"hyper_{t.group_var}", t.hyper_idx,
                                    1.0 / math.sqrt(2.0 * max(t.n_groups, 1))))
        self._v_idx = np.unique(np.concatenate([b[1] for b in self.blocks] or [[0]])
                                ).astype(int) if self.blocks else np.zeros(0, dtype=int)
        self._conds = {}
        self.state = None

    def _scale_sd(self) -> float:
        """The sd of the scale's coordinate under the likelihood: ``1 / sqrt(2 N)`` in
        ``log sigma``, over ``d log sigma / d coordinate`` at the initial point."""
        sc, q, h = self.s.scale, self.fit.q_template, 1e-5
        e = q.copy()
        e[sc.idx] += h
        slope = abs(sc.log_scale(e) - sc.log_scale(q)) / h
        return 1.0 / math.sqrt(2.0 * max(self.fit.n, 1)) / max(slope, 1e-12)

    # ------------------------------------------------------------------ coordinates
    def _theta(self, q) -> np.ndarray:
        return np.concatenate([q[self.s.fixed_idx], *(t.effects(q) for t in self.s.terms)])

    def _with_theta(self, q, theta) -> np.ndarray:
        out = np.array(q, dtype=np.float64)
        lay = self.fit.layout
        out[self.s.fixed_idx] = theta[:lay.p]
        for k, t in enumerate(self.s.terms):
            out = t.with_effects(out, theta[lay.offsets[k]:lay.offsets[k] + lay.sizes[k]])
        return out

    def _log_sigma(self, q) -> float:
        if self.s.scale is not None:
            return self.s.scale.log_scale(q)
        return math.log(self.s.params["sigma"])

    def _conditional(self, q):
        """``(conditional of theta, log Jacobian)`` at ``q``'s variances, or None where
        they are not valid (a scale not finite and positive, an improper conditional);
        the last few kept."""
        key = q[self._v_idx].tobytes()
        if key in self._conds:
            return self._conds[key]
        lay, fit = self.fit.layout, self.fit
        lam, shift, log_jac = np.zeros(lay.size), np.zeros(lay.size), 0.0
        shift[:lay.p] = fit.grad_beta - fit.beta_prec @ (fit.theta_hat[:lay.p] - fit.beta0)
        out = None
        for k, t in enumerate(self.s.terms):
            loc, scale = t.loc_scale(q)
            if not (np.all(np.isfinite(scale)) and np.all(scale > 0) and np.all(
                    np.isfinite(loc))):
                break
            sl = slice(lay.offsets[k], lay.offsets[k] + lay.sizes[k])
            lam[sl] = 1.0 / scale**2
            shift[sl] = lam[sl] * (loc - fit.theta_hat[sl])
            if not t.centred:
                log_jac += float(np.sum(np.log(scale)))
        else:
            log_s = self._log_sigma(q)
            if math.isfinite(log_s):
                try:
                    out = (GaussianConditional(fit.sums, math.exp(-2.0 * log_s), lam,
                                               fit.beta_prec, shift), log_jac)
                except (np.linalg.LinAlgError, ValueError, OverflowError):  # degenerate
                    out = None
        if len(self._conds) >= 4:
            self._conds.pop(next(iter(self._conds)))
        self._conds[key] = out
        return out

    # ------------------------------------------------------------------ chain state
    def reset(self):
        self.state = GaussianSweepState(factors={name: 0.0 for name, _, _ in self.blocks})
        self._conds = {}

    @property
    def scaling(self) -> float:
        if self.state is None or not self.blocks:
            return 1.0
        return math.exp(self.state.factors[self.blocks[0][0]])

    # ------------------------------------------------------------------ the kernel
    def init(self, q, *, warm_start):
        """A tuning chain from ``init="laplace"`` starts at the centre's locations."""
        if not warm_start:
            return q
        return self._with_theta(q, self.fit.theta_hat)

    def step(self, q, rng, tune):
        """One sweep: the locations, then each block of variances with the locations
        redrawn (module docstring)."""
        prior = _memo_prior(self.engine.prior)
        accepts = []
        for _ in range(self.counts["locations"]):
            q, ok = self._move(q, None, rng, prior, tune)
            accepts.append(ok)
            self._tally("locations", ok, 0)
        for name, idx, sd in self.blocks:
            for _ in range(self.counts["scale" if name == "scale" else "hyper"]):
                q, ok = self._move(q, (name, idx, sd), rng, prior, tune)
                accepts.append(ok)
                self._tally(name, ok, 0)
        if tune:
            self._tune_blocks(q)
        accepted = float(np.mean(accepts))
        return q, {"accepted": accepted, "accept": accepted, "data_used": 0, "n_batches": 0}

    def _log_target(self, q, d, prior) -> float:
        return prior(q) + self.fit.sums.loglik(d, self._log_sigma(q))

    def _move(self, q, block, rng, prior, tune):
        """One move: the locations at ``q``'s variances (``block`` None), or the block's
        random walk with the locations redrawn; returns ``(q, accepted)``."""
        st, theta_hat = self.state, self.fit.theta_hat
        here = self._conditional(q)
        d = self._theta(q) - theta_hat
        q_new = q
        if block is not None:
            name, idx, sd = block
            k = idx.size
            chol = st.chols.get(name)
            chol = sd * np.eye(k) if chol is None else chol
            q_new = q.copy()
            q_new[idx] += (math.exp(st.factors[name]) * 2.38 / math.sqrt(k)
                           * (chol @ rng.standard_normal(k)))
        there = self._conditional(q_new)
        ok = False
        if here is not None and there is not None:
            (cond, jac), (cond_new, jac_new) = here, there
            d_new = cond_new.sample(rng)
            q_new = self._with_theta(q_new, theta_hat + d_new)
            log_r = (self._log_target(q_new, d_new, prior) - self._log_target(q, d, prior)
                     + cond.logpdf(d) + jac - cond_new.logpdf(d_new) - jac_new)
            ok = bool(log_r == log_r and math.log(rng.random()) < min(log_r, 0.0))
        if tune and block is not None:
            target = 0.44 if block[1].size == 1 else 0.3
            st.factors[block[0]] = float(robbins_monro(st.factors[block[0]], ok, target,
                                                       st.n_tuned))
        return (q_new if ok else q), float(ok)

    def _tune_blocks(self, q):
        """Each block's covariance over the tuning draws (its Cholesky factor scales the
        block's random walk from the 50th tuning draw on, every 10th)."""
        st = self.state
        st.n_tuned += 1
        for name, idx, _ in self.blocks:
            v = q[idx]
            total, sq = st.sums.get(name, (np.zeros(v.size), np.zeros((v.size, v.size))))
            st.sums[name] = (total + v, sq + np.outer(v, v))
            if st.n_tuned >= 50 and st.n_tuned % 10 == 0:
                mean = st.sums[name][0] / st.n_tuned
                cov = st.sums[name][1] / st.n_tuned - np.outer(mean, mean)
                try:
                    st.chols[name] = np.linalg.cholesky(cov + 1e-12 * np.eye(v.size))
                except np.linalg.LinAlgError:
                    pass
