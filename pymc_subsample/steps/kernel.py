"""The transition-kernel protocol of the Metropolis-Hastings steps, and the joint move.

A step (:class:`~pymc_subsample.steps.mh.MHStep`) holds one kernel and calls it once
per Markov transition, in the spirit of BlackJAX's ``init``/``step`` kernels over a
state and of the steps PyMC's ``CompoundStep`` composes:

* :meth:`TransitionKernel.init` -- where a chain starts (its first draw);
* :meth:`TransitionKernel.step` -- ``step(q, rng, tune) -> (q, stats)``: one transition;
* :meth:`~TransitionKernel.get_state`, :meth:`~TransitionKernel.set_state` and
  :meth:`~TransitionKernel.reset` -- its per-chain state (tuning), which the step carries
  in PyMC's ``sampling_state`` and resets once per chain;
* ``stats_dtypes_shapes`` -- the sample stats :meth:`~TransitionKernel.step` returns,
  declared as PyMC's steps declare theirs.

Two kernels implement it: :class:`JointMove`, one proposal of the whole ``q`` and the
step's accept/reject decision (:meth:`MHStep._decide`, a :class:`Decision`), and the
blocked sweep on a random-intercept GLM (:class:`~pymc_subsample.steps.hierarchical.
HierarchicalSweep`).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

__all__ = ["TransitionKernel", "JointMove", "Decision", "REJECTED"]


class TransitionKernel(ABC):
    """One Markov transition of a step, with its per-chain state and declared stats."""

    #: the stats :meth:`step` returns: ``{name: (dtype, shape)}`` (PyMC's convention)
    stats_dtypes_shapes: dict = {}

    def init(self, q, *, warm_start: bool) -> np.ndarray:
        """Where a chain starts, from PyMC's start ``q`` (its first draw);
        ``warm_start``: the chain tunes from ``init="laplace"`` and may be moved to a
        better warm-up start. Default: ``q``."""
        return q

    @abstractmethod
    def step(self, q, rng, tune: bool):
        """One transition from ``q`` with the chain's generator ``rng``, adapting when
        ``tune``. Returns the new state and its stats (keys of ``stats_dtypes_shapes``)."""

    @abstractmethod
    def get_state(self):
        """The chain's state (for ``sampling_state``), or None before a chain starts."""

    @abstractmethod
    def set_state(self, state) -> None:
        """Continue the chain whose :meth:`get_state` was ``state``."""

    @abstractmethod
    def reset(self) -> None:
        """A fresh chain's state."""

    def stop_tuning(self) -> None:
        """The end of the chain's tuning."""

    @property
    def scaling(self) -> float:
        """The draw's ``scaling`` stat."""
        return math.nan


@dataclass(frozen=True)
class Decision:
    """One accept/reject decision (the record :meth:`MHStep._decide` returns).

    Attributes
    ----------
    accepted : bool
    accept : float
        The acceptance probability as the test estimated it; NaN: none (the decision
        itself is reported).
    data_used, n_batches : int
        Rows read and batches drawn.
    first_factor : float
        The acceptance probability of the data-free first factor (prior, proposal
        ratio and the control variates' sum): what a surrogate-trajectory proposal
        tunes on (``Proposal.tune_signal == "first_factor"``).
    extras : dict
        The step's own stats.
    """

    accepted: bool
    accept: float = math.nan
    data_used: int = 0
    n_batches: int = 0
    first_factor: float = 0.0
    extras: dict = field(default_factory=dict)

    def stats(self) -> dict:
        """The transition's sample stats."""
        accepted = float(bool(self.accepted))
        return {"data_used": self.data_used, "n_batches": self.n_batches, **self.extras,
                "accepted": accepted,
                "accept": accepted if self.accept != self.accept else self.accept}


#: a proposal rejected before any test (not finite, outside the prior's support)
REJECTED = Decision(False)


class JointMove(TransitionKernel):
    """A Metropolis-Hastings move of the whole ``q``: the proposal's draw, then the
    step's test (the prior ratio and :meth:`MHStep._decide`).

    Parameters
    ----------
    proposal : Proposal
        Set up (:mod:`pymc_subsample.proposals`); its tuning is the chain's state.
    test : callable
        ``test(q, q_prop, log_qratio) -> Decision``.
    tune_signal : callable
        ``tune_signal(decision)``: what the proposal's tuning sees.
    oracle : GradientOracle, optional
        A Langevin proposal's gradient estimator (its rows count in ``data_used``).
    stats_dtypes_shapes : dict
        The stats the step's decisions carry.
    """

    def __init__(self, proposal, test, tune_signal, oracle, stats_dtypes_shapes):
        self.proposal = proposal
        self.test = test
        self.tune_signal = tune_signal
        self.oracle = oracle
        self.stats_dtypes_shapes = dict(stats_dtypes_shapes)

    def step(self, q, rng, tune):
        q_prop, log_qratio = self.proposal.draw(q, rng)
        q_prop = np.asarray(q_prop, dtype=np.float64)
        log_qratio = float(log_qratio)
        decision = REJECTED
        if np.all(np.isfinite(q_prop)) and not (np.isnan(log_qratio) or log_qratio == -np.inf):
            decision = self.test(q, q_prop, log_qratio)
        q_now = q_prop if decision.accepted else q
        if tune:
            self.proposal.tune(self.tune_signal(decision), q=q_now)
        stats = decision.stats()
        if self.oracle is not None:  # a Langevin proposal's estimator: its rows count
            stats["data_used"] += self.oracle.update(q_now)
        return q_now, stats

    def get_state(self):
        return self.proposal.get_state()

    def set_state(self, state):
        self.proposal.set_state(state)

    def reset(self):
        self.proposal.reset()

    def stop_tuning(self):
        self.proposal.stop_tuning()

    @property
    def scaling(self) -> float:
        return float(self.proposal.scaling)
