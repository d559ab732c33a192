"""The running checks of SGLD: has a transition diverged, and does the gradient noise
inflate the variance the update injects?

SGLD (Welling & Teh 2011, "Bayesian learning via stochastic gradient Langevin dynamics")
keeps every move, so nothing undoes one that runs away (:func:`divergence`, with the
warning :func:`divergence_warning`), and the gradient estimate's noise adds
``(h/2)^2 Var(g_hat)`` to the variance ``h M`` of each update (their Sec. 4; the
``noise_ratio`` stat, checked by :func:`noise_warning`). As in
:mod:`pymc_subsample.steps.checks`, each check returns the message of a warning for the
step to issue, or None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..kernels.sgld import NoiseAverage
from .state import ChainVars

__all__ = ["SGLDChain", "laplace_sds", "divergence", "divergence_warning", "noise_warning"]

#: transitions of a chain before its mean noise ratio is checked
NOISE_MIN_TRANSITIONS = 50


@dataclass
class SGLDChain(ChainVars):
    """What a chain of SGLD changes: its sampling transitions so far (the schedule's
    ``t``) and the state of the gradient-noise check (:func:`noise_warning`): the
    windowed noise covariance and the running sum and count of ``noise_ratio``."""

    t: int = 0
    noise: NoiseAverage = field(default_factory=NoiseAverage)
    noise_sum: float = 0.0
    noise_n: int = 0


def laplace_sds(chol) -> np.ndarray:
    """The Laplace approximation's standard deviations of the coordinates: the row norms
    of its covariance's Cholesky factor ``chol``."""
    return np.sqrt(np.einsum("ij,ij->i", chol, chol))


def divergence(q_new, laplace_mean, laplace_sd, runaway: float) -> str | None:
    """Why the move to ``q_new`` diverged, or None: it is not finite, or more than
    ``runaway`` Laplace sds (``laplace_sd``, None without a Laplace fit: not checked)
    from the Laplace mean in some coordinate."""
    if not np.all(np.isfinite(q_new)):
        return "the move left the finite numbers"
    if laplace_sd is None:
        return None
    far = float(np.max(np.abs(q_new - laplace_mean) / laplace_sd))
    if far > runaway:
        return (f"the move went {far:.3g} sds (of the Laplace approximation) from the "
                "posterior mode")
    return None


def divergence_warning(what: str, h: float, *, tuning: bool, precondition: bool) -> str:
    """The warning of a diverging transition (``what`` diverged, at step size ``h``):
    the chain stays at its last finite values, and what to change."""
    advice = "" if precondition else ", keep precondition=True"
    return (
        f"a transition diverged{' while tuning' if tuning else ''}: {what} (step "
        f"size h = {h:.3g}). The chain stays at its last finite values and the draw's "
        "diverging stat is True; near such draws the chain is not sampling the "
        f"posterior. Lower step_size (e.g. step_size={h / 10:.3g}; the default, "
        f"step_size=None, sets it from the posterior's scale){advice}, or use a "
        "Metropolis-Hastings step (pms.AustereMH, pms.BarkerMinibatch, pms.ScalableMH).")


def noise_warning(noise_sum: float, noise_n: int, h: float, *, threshold: float,
                  batch_size: int, n_rows: int, gradient: str) -> str | None:
    """The warning that the chain's mean ``noise_ratio`` (``noise_sum / noise_n``, Welling
    & Teh's ``alpha``) exceeds ``threshold``, once the chain has made
    :data:`NOISE_MIN_TRANSITIONS` transitions; None otherwise."""
    if not (noise_n >= NOISE_MIN_TRANSITIONS and noise_sum > threshold * noise_n):
        return None
    mean = noise_sum / noise_n
    advice = _noise_advice(mean, h, threshold, batch_size, n_rows, gradient)
    return (f"the gradient noise adds {100 * mean:.0f}% to the variance each update "
            "injects (mean noise_ratio; Welling & Teh's alpha): the draws are more "
            f"spread than the posterior. {advice}")


def _noise_advice(mean: float, h: float, threshold: float, m: int, n_rows: int,
                  gradient: str) -> str:
    """What lowers the gradient noise, for the noise warning. The mean
    ``noise_ratio``, ``alpha = (h / 4) lambda_max(F' Var(g_hat) F)`` (Welling & Teh
    2011, "Bayesian learning via stochastic gradient Langevin dynamics", Sec. 4), is
    proportional to the step size ``h`` and, as ``Var(g_hat)`` is to ``1 / m``, to
    ``1 / batch_size`` where the chain is; so ``h`` or the batch size ``m`` changed by
    the factor ``mean / threshold`` brings it to about the threshold (below it with
    control variates, whose noise also falls as the chain narrows). Taylor control
    variates (Baker et al. 2019, "Control variates for stochastic gradient MCMC") are
    suggested only when another estimator is in use: ``'cv'`` is the default."""
    factor = mean / threshold
    bigger = min(n_rows, math.ceil(m * factor))
    knobs = (f"Lower step_size (h = {h:.3g} now, e.g. step_size={h / factor:.2g}) or "
             f"raise batch_size ({m} now, e.g. batch_size={bigger})")
    if gradient == "minibatch":
        return (f"{knobs}, or use gradient='cv' (Taylor control variates, the default): "
                "the plain minibatch estimate's noise grows with N.")
    if gradient != "cv":
        return f"{knobs}, or use gradient='cv' (Taylor control variates, the default)."
    return knobs + "."
