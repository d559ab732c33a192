"""SGLD's arguments and the models it refuses, checked before any set-up.

:class:`~pymc_subsample.steps.sgld.SGLD` (Welling & Teh 2011, "Bayesian learning via
stochastic gradient Langevin dynamics") takes no proposal and no test: its arguments are
the gradient estimator (:mod:`pymc_subsample.kernels.variance.gradient_estimators`), the
step size and its schedule (:mod:`pymc_subsample.kernels.sgld`), the preconditioner and
the estimators' own settings (:func:`check_args`). A random intercept per group is refused
unless asked for (:func:`refuse_groups`): a fixed step size cannot follow the funnel of
the group scale.
"""

from __future__ import annotations

from ..engine.analysis import ModelNotSupportedError
from ..kernels._validation import (
    InvalidParameterError, check_bytes, check_choice, check_positive, check_share)
from ..kernels.sgld import SCHEDULES
from ..kernels.variance.gradient_estimators import ESTIMATORS

__all__ = ["check_args", "refuse_groups"]


def check_args(kwargs: dict, *, gradient, step_size, schedule, schedule_t0, schedule_gamma,
               precondition, hierarchical, defensive, max_memory) -> tuple:
    """SGLD's own arguments, checked (:class:`InvalidParameterError` otherwise), and the
    PyMC-step keywords of ``kwargs`` that an MH step takes and SGLD does not
    (``proposal``, ``scaling``, ``proposal_kwargs``) refused.

    The preconditioned update multiplies the distance from a Gaussian posterior's mean
    by ``1 - h/2`` each step, so ``h >= 4`` with ``precondition=True`` is refused: the
    chain would diverge.

    Returns
    -------
    tuple
        ``(step_size, schedule_t0, schedule_gamma, hierarchical, defensive, max_memory)``
        as checked (``step_size`` None when not given).
    """
    for bad in ("proposal", "scaling", "proposal_kwargs"):
        if bad in kwargs:
            raise InvalidParameterError(
                f"SGLD takes no {bad}=: its move is the Langevin update itself. Set its "
                "step with step_size= (and precondition=), or use "
                "AustereMH(proposal=pms.proposals.Langevin(...)) for an MH-corrected chain."
            )
    check_choice("gradient", gradient, tuple(sorted(ESTIMATORS)),
                 what=f"one of {sorted(ESTIMATORS)} (the gradient estimator)")
    check_choice("schedule", schedule, tuple(SCHEDULES),
                 what=f"one of {tuple(SCHEDULES)}")
    schedule_t0 = check_positive("schedule_t0", schedule_t0, finite=False, strict=True)
    schedule_gamma = check_positive("schedule_gamma", schedule_gamma, finite=False,
                                    strict=True)
    if step_size is not None:
        step_size = check_positive("step_size", step_size, strict=True,
                                   what="a positive finite number (h)")
    if step_size is not None and precondition and step_size >= 4:
        raise InvalidParameterError(
            f"step_size={step_size!r} with precondition=True: the preconditioned update "
            "is unstable for h >= 4 (on a Gaussian posterior it multiplies the distance "
            "from the mean by 1 - h/2 each step) and the chain would diverge. Use h "
            "below 1 (the default is 0.2)."
        )
    hierarchical = check_choice(
        "hierarchical", hierarchical, ("refuse", "allow"),
        what="'refuse' or 'allow' (what to do with a random intercept per group)")
    defensive = check_share("defensive", defensive, strict=True)
    max_memory = check_bytes("max_memory", max_memory)
    return step_size, schedule_t0, schedule_gamma, hierarchical, defensive, max_memory


def refuse_groups(engine) -> None:
    """``hierarchical="refuse"``: raise :class:`ModelNotSupportedError` when the
    likelihood has a random intercept per group
    (:func:`~pymc_subsample.engine.groups.find_groups`). A failure of the recognition
    itself (its import included) counts as no structure."""
    try:
        from ..engine.groups import NotFound, find_groups

        structure = find_groups(engine)
    except Exception:  # noqa: BLE001 - the recognition is a check, not a requirement
        return
    if isinstance(structure, NotFound):  # no group structure (the reason)
        return
    raise ModelNotSupportedError(
        f"SGLD does not sample this model: its likelihood has a {structure.describe()}. "
        "SGLD's fixed step size cannot follow the funnel of the group scale (the group "
        "effects' spread changes with it by orders of magnitude), so on such models it "
        "diverges or is biased. Use pms.AustereMH(), pms.BarkerMinibatch() or "
        "pms.ScalableMH(): they recognise the group structure and update the groups in "
        "a blocked sweep. To run SGLD anyway, pass hierarchical='allow'."
    )
