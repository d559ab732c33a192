"""PyMC step methods (thin classes over the engine, the proposals and the kernels).

:data:`REGISTRY` lists the step methods, as :data:`pymc_subsample.proposals.REGISTRY`
lists the proposals: one :class:`StepEntry` per step, by the name users write
(``pms.AustereMH``), with what the rest of the package needs to know of it: whether it is
exact or which argument sets its approximation, whether :func:`pymc_subsample.advise`
tries it, and the arguments that make it quick for the conformance checks
(:func:`pymc_subsample.check_step`). :func:`pymc_subsample.advise`, the tests that run
over every step and the API docs (``tests/test_docs.py`` checks them) take their lists
from here.

A new step method is one module (for a Metropolis-Hastings step, an
:class:`~pymc_subsample.steps.mh.MHStep` subclass with its ``_decide``) plus one line in
:data:`REGISTRY`; ``tests/test_extending.py`` shows that such a step passes
:func:`~pymc_subsample.check_step` with no edit to the common tests.

The entries name their classes by import path, so that this module loads without PyMC.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module

from ..kernels._validation import InvalidParameterError

__all__ = ["StepEntry", "REGISTRY", "STEP_NAMES", "step_entry"]


@dataclass(frozen=True)
class StepEntry:
    """One step method of :data:`REGISTRY`.

    Attributes
    ----------
    name : str
        The class name users write (``pms.<name>``), its key in :data:`REGISTRY`.
    target : str or type
        The class, or where it is: ``"module:Class"`` (imported by :meth:`load`).
    knob : str or None
        None for an exact step (its draws target the posterior exactly); otherwise the
        constructor argument that sets the approximation (``"epsilon"``).
    advise : bool
        Whether :func:`pymc_subsample.advise` tries it by default.
    check_kwargs : dict
        Constructor arguments for the quick runs of :func:`pymc_subsample.check_step`
        (small batches), on a model of a few hundred rows.
    refusals : tuple of dict
        Bad constructor arguments, each of which the step must refuse with
        :class:`~pymc_subsample.errors.InvalidParameterError` (checked by
        :func:`pymc_subsample.check_step`, with ``proposal="no_such_proposal"``).
    """

    name: str
    target: str | type
    knob: str | None = None
    advise: bool = True
    check_kwargs: dict = field(default_factory=dict, compare=False)
    refusals: tuple = field(default=(), compare=False)

    @property
    def exact(self) -> bool:
        """True when the step's draws target the posterior exactly."""
        return self.knob is None

    @property
    def exactness(self) -> str:
        """``"exact"``, or ``"approx. (<knob>)"`` (the column of ``pms.advise``'s table,
        e.g. ``"approx. (step size)"`` for ``step_size``)."""
        return "exact" if self.knob is None else f"approx. ({self.knob.replace('_', ' ')})"

    def load(self) -> type:
        """The step class (imported on first use: it needs PyMC)."""
        if isinstance(self.target, type):
            return self.target
        module, _, attr = self.target.partition(":")
        return getattr(import_module(module), attr)


#: The package's step methods, in the order :func:`pymc_subsample.advise` tries them.
REGISTRY: dict[str, StepEntry] = {entry.name: entry for entry in (
    StepEntry("ScalableMH", "pymc_subsample.steps.scalable:ScalableMH",
              refusals=({"order": 3}, {"bound_form": "tight"}, {"rho": 0.5, "order": 1})),
    StepEntry("AustereMH", "pymc_subsample.steps.austere:AustereMH", knob="epsilon",
              check_kwargs={"batch_size": 50},
              refusals=({"epsilon": 0.7}, {"epsilon": "0.05"}, {"control_variate": 3},
                        {"control_variate": 0, "center": [0.0, 0.0, 0.0]})),
    StepEntry("BarkerMinibatch", "pymc_subsample.steps.barker:BarkerMinibatch",
              knob="delta", check_kwargs={"batch_size": 50},
              refusals=({"delta": 0.0}, {"sampling": "importance"},
                        {"control_variate": "taylor3"})),
    StepEntry("SGLD", "pymc_subsample.steps.sgld:SGLD", knob="step_size",
              check_kwargs={"batch_size": 50},
              refusals=({"gradient": "exact"}, {"scaling": 0.1},
                        {"step_size": 4.0, "precondition": True})),
)}

#: The names of the built-in step methods (the keys of :data:`REGISTRY` at import).
STEP_NAMES: tuple[str, ...] = tuple(REGISTRY)


def step_entry(name: str) -> StepEntry:
    """The :class:`StepEntry` of ``name`` in :data:`REGISTRY`.

    Raises
    ------
    InvalidParameterError
        For a name that is not registered (the message lists the names).
    """
    if name not in REGISTRY:
        raise InvalidParameterError(
            f"Unknown step method {name!r}; registered: {list(REGISTRY)}.")
    return REGISTRY[name]
