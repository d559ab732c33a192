"""The running checks of the growing-minibatch steps (AustereMH, BarkerMinibatch), each
with its per-chain state: do the control variates reduce the variance of the per-row
terms (:class:`CVChecks`), is the Laplace fit the proposal and the control variates rest
on near where the chain went during tuning (:class:`TuningMean`), and is the test's
normal approximation safe (:class:`CLTPool`)? Each returns the message of a warning for
the step to issue, or None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..kernels.acceptance.clt_error import PooledSkewness
from ..kernels.variance.control_variates import VarianceCheck

__all__ = ["CVChecks", "TuningMean", "CLTPool"]

#: steps between verdicts of the variance check while tuning
CV_WINDOW = 100


@dataclass
class CVChecks:
    """The variance check of the control variates over windows of ``CV_WINDOW``
    tuning transitions, then on every 10th kept transition
    (:class:`~pymc_subsample.kernels.variance.control_variates.VarianceCheck`)."""

    active: bool
    check: VarianceCheck = field(default_factory=lambda: VarianceCheck(CV_WINDOW // 2))
    verdict: bool | None = None
    ratio: float = math.nan
    fails: int = 0
    n_steps: int = 0

    def wants_batch(self, tuning: bool) -> bool:
        """Whether this transition's first batch feeds the check (every transition while
        tuning, every 10th after)."""
        return self.active and (tuning or self.n_steps % 10 == 0)

    def after_step(self, tuning: bool) -> str | None:
        """Count the transition; at the end of a tuning window record its verdict. After
        tuning: the warning when the control variates do not help."""
        if not self.active:
            return None
        self.n_steps += 1
        if tuning:
            if self.n_steps % CV_WINDOW == 0:
                self.verdict, self.ratio = self.check.verdict(), self.check.ratio
                # consecutive failing windows: one extreme window decides nothing
                self.fails = self.fails + 1 if self.verdict is False else 0
                self.check.reset()
            return None
        if self.check.verdict() is False:
            return ("the Taylor control variates do not reduce the variance of the per-row "
                    f"terms (residual/plain variance {self.check.ratio:.3g}): the test reads "
                    "more rows than plain differences would. Consider control_variate=0 or "
                    "recenter=True.")
        return None

    def turn_off(self, fail_windows: int) -> str | None:
        """End of tuning: turn the control variates off when the last ``fail_windows``
        windows all failed (the only one, when tuning had one); the warning, or None."""
        windows = max(1, self.n_steps // CV_WINDOW)
        if not (self.active and self.fails >= min(fail_windows, windows)):
            return None
        self.active = False
        return ("the Taylor control variates did not reduce the variance of the per-row "
                f"terms at the end of tuning (residual/plain variance {self.ratio:.3g}); "
                "this chain falls back to plain differences, which read more rows per "
                "step. A multimodal or heavy-tailed likelihood, or a centre far from the "
                "posterior, causes this.")


_FUNNEL_ADVICE = (
    "For a hierarchical model (centred or not), the default hierarchical='auto' runs a "
    "blocked sweep when the likelihood is a GLM with one Normal random intercept gathered "
    "by integer group indices and neither proposal= nor scaling= is given (the step's "
    "repr says whether it runs, and step.hierarchy why not)")


@dataclass
class TuningMean:
    """The chain's running mean over tuning and the rows its tests read (for
    ``recenter=True`` and the check of the Laplace fit)."""

    q: np.ndarray
    n: int = 0
    rows: int = 0

    def add(self, q_now, data_used: int) -> None:
        self.n += 1
        self.q += (q_now - self.q) / self.n
        self.rows += data_used

    def rows_warning(self, cv_active: bool, batch_size: int, n_rows: int) -> str | None:
        """With control variates on, a test that still read many rows during tuning."""
        rows = self.rows / self.n
        if not (cv_active and rows > 2 * batch_size and rows > 0.1 * n_rows):
            return None
        return (f"with control variates the test still read {rows:,.0f} rows per step during "
                f"tuning ({100 * rows / n_rows:.0f}% of the data): the Taylor proxy about "
                "the centre leaves large residuals, so the Laplace fit there is poor (a "
                "funnel-shaped hierarchical posterior, for instance) and the chain may not "
                f"mix. Check R-hat and ESS. {_FUNNEL_ADVICE}; otherwise consider "
                "recenter=True or NUTS.")

    def laplace_warning(self, mean, chol, max_sd: float) -> str | None:
        """The chain's mean over tuning more than ``max_sd`` Laplace sds from the
        Laplace mean in some coordinate."""
        sd = np.sqrt(np.einsum("ij,ij->i", chol, chol))
        z = np.abs(self.q - mean) / sd
        if not np.max(z) > max_sd:
            return None
        return (f"the chain's mean over tuning lies {np.max(z):.1f} Laplace sds from the "
                f"Laplace approximation at the centre (coordinate {int(np.argmax(z))} of the "
                "step's unconstrained space): the Gaussian fit that the default proposal and "
                "control variates rely on is poor here (a funnel-shaped hierarchical "
                "posterior, for instance), and the chain may not mix. Check R-hat and ESS. "
                f"{_FUNNEL_ADVICE}; otherwise "
                "consider recenter=True, proposal='random_walk' with "
                "proposal_kwargs={'adapt_covariance': True}, or NUTS.")


@dataclass
class CLTPool:
    """The normal approximation's error pooled over the kept transitions
    (:mod:`pymc_subsample.kernels.acceptance.clt_error`).

    Each transition gives its error of the acceptance probability per unit skewness,
    ``w_t``; the skewness is pooled over the first batches of the kept transitions
    (:class:`~pymc_subsample.kernels.acceptance.clt_error.PooledSkewness`), so that one batch's
    sample moments decide nothing. The verdict compares
    ``err_pooled = gamma_pooled * mean_t(w_t)`` with the step's knob from
    ``min_transitions`` kept transitions on.
    """

    skew: PooledSkewness = field(default_factory=PooledSkewness)
    wsum: float = 0.0
    n: int = 0

    def add(self, first_batch, weight: float, knob: float, name: str, advice: str,
            min_transitions: int):
        """Pool one kept transition. Returns ``(estimate, warning)``: this transition's
        estimate ``gamma_pooled * w_t`` (NaN before any batch was pooled, unless ``w_t``
        is 0) and the warning's message once the pooled error exceeds ``knob``."""
        if first_batch is not None:
            self.skew.add(first_batch)
        w = float(weight) if weight == weight else 0.0
        self.n += 1
        self.wsum += w
        g = self.skew.gamma
        if g != g:
            return (0.0 if w == 0.0 else math.nan), None
        pooled = g * self.wsum / self.n
        warning = None
        if self.n >= min_transitions and pooled > knob:
            warning = (
                f"the test's normal approximation looks unsafe: over {self.n} kept "
                f"transitions the estimated error of its acceptance probability (one-term "
                f"Edgeworth, pooled skewness of the terms {g:.3g}) averages {pooled:.3g}, "
                f"above {name}={knob:g}. {advice}")
        return g * w, warning
