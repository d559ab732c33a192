"""What a chain of a subsampling step changes, and what it reports per draw.

The layer under :class:`~pymc_subsample.steps.base.SubsampleStep`:

* the sample stats every step declares (:data:`BASE_STATS`) and the recorded settings
  (:func:`setting_stats`: constant per-draw stats ``setting_<name>``);
* :func:`summarise`, one draw's stats from its ``steps_per_draw`` transitions;
* :func:`one_thread`: a step draws from one thread at a time;
* :class:`SubsampleStepState` and :class:`ChainState`: the per-chain state (tuning flag,
  the transition kernel's tuning, warnings issued) that PyMC resets once per chain
  (``set_rng`` on PyMC 5, ``setup_chain`` on PyMC 6) and carries in ``sampling_state``.
"""

from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import dataclass, field

import numpy as np
from pymc.step_methods.compound import StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.stats.convergence import SamplerWarning, WarningType
from pymc.util import get_random_generator

from .watch import ChainWatch

__all__ = [
    "BASE_STATS",
    "SETTING_DTYPES",
    "setting_stats",
    "summarise",
    "one_thread",
    "SubsampleStepState",
    "ChainState",
    "ChainVars",
    "Warnings",
    "DRAW_STATS",
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

#: the stats a step adds to its kernel's for the draw (the settings aside)
DRAW_STATS = frozenset({"scaling", "warning"})

#: dtypes of the settings a step records with its draws (one name, one dtype, whatever
#: the step: a CompoundStep refuses a stat name declared with two dtypes)
SETTING_DTYPES = {
    "steps_per_draw": np.int64,
    "batch_size": np.int64,
    "batch_increment": np.int64,
    # 0 (none), 1 or 2 (Taylor order), -1 ("saga": stored per-row gradients), -2 (a user's)
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


@dataclass
class Warnings:
    """The sampler warnings of a chain: the keys issued (each warns once per chain) and
    the warnings waiting for the next draw's ``warning`` stat."""

    issued: set = field(default_factory=set)
    pending: list = field(default_factory=list)


@dataclass
class ChainVars:
    """What every chain of a subsampling step changes (re-created by
    :meth:`ChainState._reset_chain`; steps extend it with their components' states)."""

    warnings: Warnings = field(default_factory=Warnings)
    #: the next draw is the chain's first (the Laplace start of ``init="laplace"``)
    start_pending: bool = True
    #: the counts of :mod:`pymc_subsample.steps.watch` (a stuck chain, fallbacks)
    watch: ChainWatch = field(default_factory=ChainWatch)


@dataclass_state
class SubsampleStepState(StepMethodState):
    """What a chain of a subsampling step changes, for PyMC's ``sampling_state``: the
    tuning flag, the transition kernel's state (:mod:`pymc_subsample.steps.kernel`: the
    proposal's tuning, or the sweep's), the control variate's and the gradient
    estimator's chain state, and the step's typed per-chain record (``chain``, a
    :class:`ChainVars` of the step's own kind)."""

    tune: bool
    kernel_state: object
    control_state: object
    estimator_state: object
    chain: ChainVars


class _PartState:
    """A ``sampling_state`` field that is the chain state of one of the step's parts (its
    transition kernel, control variate or gradient estimator): the part's ``get_state()``, or
    None when the step has no such part; setting it calls the part's ``set_state``."""

    def __init__(self, attr: str):
        self.attr = attr

    def __get__(self, step, owner=None):
        if step is None:
            return self
        part = getattr(step, self.attr)
        return None if part is None else part.get_state()

    def __set__(self, step, state) -> None:
        part = getattr(step, self.attr)
        if part is not None and state is not None:
            part.set_state(state)


class ChainState:
    """The per-chain state of a subsampling step and PyMC's hooks around it (a mixin of
    :class:`~pymc_subsample.steps.base.SubsampleStep`).

    PyMC hands each chain a generator once (``set_rng`` on PyMC 5, ``setup_chain`` on
    PyMC 6); both reset the chain (:meth:`_reset_chain`): the typed record ``chain``
    (``_chain_class``), the transition kernel's state, the control variate and the
    gradient estimator, and the tuning flag. ``sampling_state`` (``_state_class =
    SubsampleStepState``) carries the same state.
    """

    #: the per-chain record's type (a :class:`ChainVars`)
    _chain_class = ChainVars
    #: the step's transition kernel (:mod:`pymc_subsample.steps.kernel`), proposal,
    #: control variate and gradient estimates (None where it has none)
    kernel = None
    proposal = None
    control = None
    _oracle = None

    #: the chain states of the step's parts (``get_state()`` / ``set_state``; None for a
    #: part the step does not have), fields of ``sampling_state``
    kernel_state = _PartState("kernel")
    control_state = _PartState("control")
    estimator_state = _PartState("_oracle")

    # ------------------------------------------------------------------ per-chain state
    def _reset_chain(self):
        """Reset everything a chain changes (the kernel's tuning, warnings issued)."""
        self._check_data_unchanged()
        for part in (self.kernel, self.control, self._oracle):
            if part is not None:
                part.reset()
        self.chain = self._new_chain()
        self.tune = self.adapt
        self._settings_cache = None  # the recorded settings, built on the first draw
        msg = getattr(self, "_setup_warning", None)  # e.g. a mode search that failed
        if msg:
            self.warn_once("center", msg)
        msg = getattr(self, "_structure_warning", None)  # random effects the sweep misses
        if msg:
            self.warn_once("structure", msg)
        msg = getattr(self, "_improper_warning", None)  # a flat prior left improper
        if msg:
            self.warn_once("improper", msg)

    def _new_chain(self) -> ChainVars:
        """A fresh per-chain record (steps whose record has fields without defaults
        override this)."""
        return self._chain_class()

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
        if self.kernel is not None:
            self.kernel.stop_tuning()

    def warn_once(self, key, message, kind=WarningType.BAD_PARAMS):
        """Issue a sampler warning at most once per chain.

        It travels in the ``warning`` sample stat of the next draw (PyMC's
        :class:`~pymc.stats.convergence.SamplerWarning`, as NUTS reports divergences), so
        ``pm.sample`` logs it in the main process whatever the number of cores.
        """
        warnings = self.chain.warnings
        if key in warnings.issued:
            return
        warnings.issued.add(key)
        warnings.pending.append(
            SamplerWarning(kind, f"{type(self).__name__}: {message}", "warn"))


@contextlib.contextmanager
def one_thread(step):
    """A draw of ``step`` from this thread: a step holds the state of the one chain it
    draws, so a second thread drawing with the same step object at once gets a clear
    error instead of crossed state."""
    me, other = threading.get_ident(), step.__dict__.get("_drawing_thread")
    if other is not None and other != me:
        raise RuntimeError(
            f"This {type(step).__name__} step is drawing in another thread: a step holds "
            "the state of the one chain it draws (its rows, tuning, running checks). "
            "Build one step per concurrent pm.sample call (or sample the chains in one "
            "call: pm.sample(chains=..., cores=...) copies the step per chain)."
        )
    step._drawing_thread = me
    try:
        yield
    finally:
        step._drawing_thread = None
