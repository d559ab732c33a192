"""The sweep as a transition kernel: its moves in order, and the chain's state.

:class:`HierarchicalSweep` implements :class:`~pymc_subsample.steps.kernel.
TransitionKernel`: :meth:`~HierarchicalSweep.init` (a tuning chain starts at the centre's
fixed and group effects), :meth:`~HierarchicalSweep.step` (one sweep: every move of
:data:`SWEEP_MOVES` as many times as ``moves`` says), and the chain's
:class:`SweepState` (the moves' tuned scale factors, the hyperparameters' covariance over
the tuning draws, the per-move means of the stats).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ...engine.groups import RandomIntercept
from ..kernel import TransitionKernel
from .block_moves import (FixedGaussian, FixedMarginal, FixedRandomWalk, HyperAncillary,
                          HyperGivenEffects, HyperMarginal)
from .factorised import FactorisedTest
from .fit import SweepFit
from .moves import GroupCoordinates, GroupGaussian, GroupRandomWalk
from .normal import ExactNormalTest, NormalSweepFit, ScaleConditional

__all__ = ["HierarchicalSweep", "MoveStats", "SweepState", "SWEEP_MOVES"]

#: the moves of a sweep over a structure whose one group term is of each type, in the
#: order a sweep makes them
SWEEP_MOVES = {
    RandomIntercept: (GroupRandomWalk, GroupGaussian, HyperGivenEffects, HyperMarginal,
                      FixedRandomWalk, FixedGaussian, FixedMarginal, HyperAncillary),
}
#: the moves added after those of :data:`SWEEP_MOVES` for a family with a sampled
#: parameter (the structure's ``scale``), by family name
SCALE_MOVES = {"normal_scale": (ScaleConditional,)}


@dataclass
class SweepState:
    """A chain's tuning of the sweep: per-group log scale factors, the fixed effects' and
    the hyperparameters' scale factors, counts, and the running sums of the moves'
    stats (``stats``: ``{"<move>__<stat>": [sum, count]}``)."""

    log_group: np.ndarray
    log_fixed: float = 0.0
    log_hyper: float = 0.0
    log_anc: float = 0.0
    log_marg: float = 0.0
    log_fixed_marg: float = 0.0
    log_fixed_gauss: float = 0.0
    log_scale: float = 0.0
    n_tuned: int = 0
    hyper_sum: np.ndarray = None
    hyper_sq: np.ndarray = None
    hyper_chol: np.ndarray = None
    stats: dict = field(default_factory=dict)


class MoveStats:
    """A sweep's chain state as the step's ``kernel_state`` (``{"sweep": state}``) and its
    per-move stats (its ``state.stats``: ``{"<move>__<stat>": [sum, count]}``), prefixed
    per move as PyMC's ``CompoundStep`` prefixes its steps' stats."""

    def get_state(self):
        return None if self.state is None else {"sweep": self.state}

    def set_state(self, state):
        if state is not None:
            self.state = state["sweep"]

    def move_stats(self) -> dict:
        """The chain's means of every move's stats so far, ``{"<move>__<stat>": mean}``."""
        return {key: total / n if n else math.nan
                for key, (total, n) in self.state.stats.items()}

    def _tally(self, name, accepted, rows):
        """Add one application of move ``name`` to the chain's per-move stats."""
        for stat, value in (("accepted", accepted), ("data_used", rows)):
            total = self.state.stats.setdefault(f"{name}__{stat}", [0.0, 0])
            total[0] += value
            total[1] += 1


class HierarchicalSweep(MoveStats, TransitionKernel):
    """The sweep of a step on a :class:`~pymc_subsample.engine.groups.GroupStructure`
    (package docstring): the set-up passes (:class:`~pymc_subsample.steps.hierarchical.
    fit.SweepFit`), then :meth:`step`.

    Parameters
    ----------
    engine : LikelihoodEngine
    structure : GroupStructure
    exact_rows : int
        Groups with at most this many rows are kept in memory; a group move evaluates
        them exactly when thinning would cost more.
    moves : dict
        Moves per sweep, by name (``DEFAULT_MOVES``): ``groups`` (random walk per
        group), ``groups_gaussian`` (independence proposal per group), ``hyper``
        (data-free), ``marginal``, ``fixed``, ``fixed_gaussian``, ``fixed_marginal``,
        ``ancillary``; and with a sampled family scale (``DEFAULT_SCALE_MOVES``)
        ``scale``.

    Notes
    -----
    On the linear mixed model (the Normal likelihood with a sampled scale: the
    structure's ``scale``) the fit, the data term of every move and the scale's own move
    are those of :mod:`~pymc_subsample.steps.hierarchical.normal`: exact from
    sufficient statistics, no row read while sampling.
    """

    DEFAULT_MOVES = {"groups": 1, "groups_gaussian": 1, "hyper": 2, "marginal": 6, "fixed": 1,
                     "fixed_gaussian": 2, "fixed_marginal": 3, "ancillary": 2}
    #: the family scale's moves per sweep (a structure with a ``scale`` only; its random
    #: walk, when ``sigma``'s coordinate is not ``log sigma``, makes
    #: ``ScaleConditional.random_walk_moves``)
    DEFAULT_SCALE_MOVES = {"scale": 1}
    #: one sweep's stats: the moves' mean acceptance and their rows read (no batches)
    stats_dtypes_shapes = {"accepted": (np.float64, []), "accept": (np.float64, []),
                           "data_used": (np.int64, []), "n_batches": (np.int64, [])}

    def __init__(self, engine, structure, *, exact_rows: int = 16, moves=None):
        self.engine, self.s = engine, structure
        walk = {}
        if structure.scale is not None and not structure.scale.log_is_coordinate:
            walk = {"scale": ScaleConditional.random_walk_moves}
        self.counts = {**self.DEFAULT_MOVES, **self.DEFAULT_SCALE_MOVES, **walk, **(moves or {})}
        kinds = SWEEP_MOVES[type(structure.terms[0])]
        if structure.scale is None:
            self.fit = SweepFit(engine, structure, exact_rows)
            self.factorised = FactorisedTest(self.fit)
        else:
            self.fit = NormalSweepFit(engine, structure, exact_rows)
            self.factorised = ExactNormalTest(self.fit)
            kinds = kinds + SCALE_MOVES[structure.family]
        (term,) = structure.terms
        coords = GroupCoordinates(term)
        self.moves = [cls(self.fit, self.factorised, coords) for cls in kinds]
        self.state = None

    # ------------------------------------------------------------------ chain state
    def reset(self):
        self.state = SweepState(log_group=np.zeros(self.fit.term.n_groups))

    @property
    def scaling(self) -> float:
        return math.exp(self.state.log_fixed) if self.state is not None else 1.0

    # ------------------------------------------------------------------ the kernel
    def init(self, q, *, warm_start):
        """Where a tuning chain starts: the centre's fixed and group effects, the chain's
        own hyperparameters (a warm-up start only)."""
        if not warm_start:
            return q
        q = np.array(q, dtype=np.float64)
        q[self.s.fixed_idx] = self.fit.center_q[self.s.fixed_idx]
        return self.fit.term.with_effects(q, self.fit.taylor.a_hat)

    def step(self, q, rng, tune):
        """One sweep from ``q``: every move, ``counts[name]`` times each, in the order
        of :data:`SWEEP_MOVES`."""
        st = self.state
        used, accepts = 0, []
        prior = _memo_prior(self.engine.prior)
        for move in self.moves:
            for _ in range(self.counts[move.name]):
                q, u, acc = move.apply(q, rng, prior, st, tune)
                used += u
                accepts.append(acc)
                self._tally(move.name, acc, u)
        if tune:
            self._tune_hyper(q)
        accepted = float(np.mean(accepts))
        return q, {"accepted": accepted, "accept": accepted, "data_used": int(used),
                   "n_batches": 0}

    def _tune_hyper(self, q):
        """The hyperparameters' covariance over the tuning draws (its Cholesky factor
        scales their random-walk moves from the 50th tuning draw on, every 10th)."""
        st, idx = self.state, self.fit.term.hyper_idx
        st.n_tuned += 1
        h = q[idx]
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
