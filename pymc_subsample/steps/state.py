"""What a chain of a subsampling step changes, and what it reports per draw.

The layer under :class:`~pymc_subsample.steps.base.SubsampleStep`:

* the sample stats every step declares (:data:`BASE_STATS`) and the recorded settings
  (:func:`setting_stats`: constant per-draw stats ``setting_<name>``);
* :func:`summarise`, one draw's stats from its ``steps_per_draw`` transitions;
* :class:`SubsampleStepState` and :class:`ChainState`: the per-chain state (tuning flag,
  proposal tuning, warnings issued) that PyMC resets once per chain (``set_rng`` on
  PyMC 5, ``setup_chain`` on PyMC 6) and carries in ``sampling_state``;
* the progress-bar columns (:func:`progressbar_config`,
  :func:`progressbar_update_functions`).
"""

from __future__ import annotations

import copy
import math

import numpy as np
from pymc.step_methods.compound import StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.stats.convergence import SamplerWarning, WarningType
from pymc.util import get_random_generator

__all__ = [
    "BASE_STATS",
    "SETTING_DTYPES",
    "setting_stats",
    "summarise",
    "SubsampleStepState",
    "ChainState",
    "progressbar_config",
    "progressbar_update_functions",
]

BASE_STATS = {
    # share of the draw's transitions that accepted (0.0 or 1.0 with one transition per
    # draw); float64, as pm.Metropolis declares it, so that the steps compose with it
    "accepted": (np.float64, []),
    # the MH acceptance probability min(1, exp(log ratio)) as the test estimated it (the
    # approximate tests' estimate of the ratio; ScalableMH: its control-variate surrogate
    # plus a Poisson estimate of the remainders from the rows read, exact after a
    # full-data test, which bounds its factorised test's probability from above;
    # BarkerMinibatch: Barker's 1 / (1 + exp(-Delta*)); a step that gives none: the
    # decision), averaged over the draw's transitions; 0.0 for a proposal rejected
    # before any test
    "accept": (np.float64, []),
    "data_used": (np.int64, []),
    "n_batches": (np.int64, []),
    "scaling": (np.float64, []),
    # PyMC's sampler-warning mechanism (as NUTS): logged by pm.sample in the main
    # process, dropped from the returned trace unless keep_warning_stat=True
    "warning": (SamplerWarning, None),
}

#: dtypes of the settings a step records with its draws (one name, one dtype, whatever
#: the step: a CompoundStep refuses a stat name declared with two dtypes)
SETTING_DTYPES = {
    "steps_per_draw": np.int64,
    "batch_size": np.int64,
    "batch_increment": np.int64,
    # 0 (none), 1 or 2 (Taylor order), -1 ("saga": stored per-row gradients)
    "control_variate": np.int64,
    "epsilon": np.float64,
    "delta": np.float64,
    "temperature": np.float64,
    "order": np.int64,
    "truncation": np.float64,
    "region": np.float64,  # NaN: global bounds (region=None)
    "step_size": np.float64,  # SGLD's h at the start of sampling
}

#: prefix of the recorded settings' stat names
SETTING_PREFIX = "setting_"


def setting_stats(names) -> dict:
    """``stats_dtypes_shapes`` entries of the settings ``names`` (keys of
    :data:`SETTING_DTYPES`): one scalar stat ``setting_<name>`` each.

    PyMC gives a step no way to write the ``attrs`` of ``sample_stats`` (on PyMC 5 and 6
    they hold only ``sampling_time`` and ``tuning_steps``, set from the trace's report),
    so the settings travel as stats that are constant over the draws; see
    :func:`pymc_subsample.diagnostics.step_settings`.
    """
    return {SETTING_PREFIX + n: (SETTING_DTYPES[n], []) for n in names}

#: stats that a draw of several transitions sums (anything numeric else: the largest)
_SUMMED = frozenset({"data_used", "n_batches", "accepted", "accept"})


def acceptance_probability(log_ratio: float) -> float:
    """``min(1, exp(log_ratio))``; 0.0 for NaN (a rejected proposal)."""
    return math.exp(min(0.0, log_ratio)) if log_ratio == log_ratio else 0.0


def summarise(transitions: list[dict]) -> dict:
    """One draw's stats from its transitions' (see ``steps_per_draw``): counts add,
    flags are true if any transition set them, the audit's agreement is the mean over
    the audited transitions (NaN if none), error bounds and variances are the largest
    (NaN where no transition set them)."""
    if len(transitions) == 1:
        return dict(transitions[0])
    out = {}
    for key in {k for t in transitions for k in t}:
        vals = [t[key] for t in transitions if key in t]
        if key in _SUMMED:
            out[key] = sum(vals)
        elif isinstance(vals[0], (bool, np.bool_)):
            out[key] = any(vals)
        else:
            finite = [v for v in vals if v == v]
            if key == "audit":
                out[key] = float(np.mean(finite)) if finite else np.nan
            else:
                out[key] = max(finite) if finite else vals[-1]
    return out


@dataclass_state
class SubsampleStepState(StepMethodState):
    """What a chain of a subsampling step changes, for PyMC's ``sampling_state``: the
    tuning flag, the proposal's tuned state and the step's per-chain attributes
    (``CHAIN_ATTRS``: warnings issued, control-variate checks, a re-centred centre)."""

    tune: bool
    proposal_state: dict
    chain_state: dict


class ChainState:
    """The per-chain state of a subsampling step and PyMC's hooks around it (a mixin of
    :class:`~pymc_subsample.steps.base.SubsampleStep`).

    PyMC hands each chain a generator once (``set_rng`` on PyMC 5, ``setup_chain`` on
    PyMC 6); both reset the chain (:meth:`_reset_chain`): proposal tuning, warnings
    issued, the tuning flag and whatever a subclass lists in ``CHAIN_ATTRS``.
    ``sampling_state`` (``_state_class = SubsampleStepState``) carries the same state.
    """

    #: per-chain attributes of :attr:`chain_state` (what ``_reset_chain`` re-creates)
    CHAIN_ATTRS: tuple[str, ...] = ("_warned", "_pending", "_start_pending",
                                    "_estimator_state")

    @property
    def _estimator_state(self):
        """The per-chain state of a stateful gradient estimator (SAGA's store and its sum;
        :class:`~pymc_subsample.steps.gradients.GradientOracle`), or None."""
        oracle = getattr(self, "_oracle", None)
        if oracle is None or not oracle.estimator.stateful:
            return None
        store = oracle.estimator.store
        return {"h": store.h, "total": store.total}

    @_estimator_state.setter
    def _estimator_state(self, state) -> None:
        if state is not None:
            store = self._oracle.estimator.store
            store.h, store.total = state["h"].copy(), state["total"].copy()

    @property
    def proposal_state(self) -> dict:
        """The proposal's chain state (:meth:`~pymc_subsample.proposals.Proposal.get_state`)."""
        get = getattr(self.proposal, "get_state", None)
        return get() if get is not None else {}

    @proposal_state.setter
    def proposal_state(self, state: dict) -> None:
        if state:
            self.proposal.set_state(state)

    @property
    def chain_state(self) -> dict:
        """The step's per-chain attributes (``CHAIN_ATTRS``), copied."""
        return {k: copy.deepcopy(getattr(self, k)) for k in self.CHAIN_ATTRS if hasattr(self, k)}

    @chain_state.setter
    def chain_state(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, copy.deepcopy(v))


    # ------------------------------------------------------------------ per-chain state
    def _reset_chain(self):
        """Reset everything a chain changes (proposal tuning, warnings issued)."""
        self._check_data_unchanged()
        if hasattr(self.proposal, "reset"):
            self.proposal.reset()
        if getattr(self, "_oracle", None) is not None:
            self._oracle.reset()
        self._warned = set()
        self._pending = []
        self.tune = self.adapt
        self._start_pending = True
        self._settings_cache = None  # the recorded settings, built on the first draw
        msg = getattr(self, "_setup_warning", None)  # e.g. a mode search that failed
        if msg:
            self.warn_once("center", msg)

    def set_rng(self, rng):  # PyMC 5: once per chain
        self.rng = get_random_generator(rng, copy=False)
        self._reset_chain()

    def setup_chain(self, rng, tune, draws):  # PyMC 6: once per chain
        self.rng = get_random_generator(rng, copy=False)
        self._reset_chain()

    def reset_tuning(self):
        self.tune = self.adapt

    def stop_tuning(self):
        self.tune = False
        if hasattr(self.proposal, "stop_tuning"):
            self.proposal.stop_tuning()

    def warn_once(self, key, message, kind=WarningType.BAD_PARAMS):
        """Issue a sampler warning at most once per chain.

        It travels in the ``warning`` sample stat of the next draw (PyMC's
        :class:`~pymc.stats.convergence.SamplerWarning`, as NUTS reports divergences), so
        ``pm.sample`` logs it in the main process whatever the number of cores.
        """
        if key in self._warned:
            return
        self._warned.add(key)
        self._pending.append(SamplerWarning(kind, f"{type(self).__name__}: {message}", "warn"))


def progressbar_config(columns, n_chains: int = 1):
    """PyMC's progress-bar hook (``_progressbar_config``): one ``rich`` text column per
    entry ``(stat, field, header, format)`` of ``columns``."""
    from rich.progress import TextColumn
    from rich.table import Column

    out = [
        TextColumn(f"{{task.fields[{field}]}}", table_column=Column(header, ratio=1))
        for _, field, header, _ in columns
    ]
    return out, {field: ["-"] * n_chains for _, field, _, _ in columns}


def progressbar_update_functions(columns):
    """PyMC's progress-bar hook (``_make_progressbar_update_functions``): the running
    means of the columns' stats over the draws so far. PyMC passes a draw's stats
    without its chain, so the means pool the chains (which run the same kernel); tuning
    draws count too."""
    totals = {stat: 0.0 for stat, *_ in columns}
    count = [0]

    def update_stats(step_stats):
        count[0] += 1
        out = {}
        for stat, field, _, fmt in columns:
            totals[stat] += float(step_stats.get(stat, 0.0))
            out[field] = fmt.format(totals[stat] / count[0])
        return out

    return (update_stats,)
