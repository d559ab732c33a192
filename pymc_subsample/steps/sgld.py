"""SGLD: stochastic gradient Langevin dynamics with variance-reduced gradient estimators
(Welling & Teh 2011; Baker, Fearnhead, Fox & Nemeth 2019; El hanchi 2019)."""

from __future__ import annotations

import math

import numpy as np
from pymc.exceptions import SamplingError
from pymc.stats.convergence import WarningType

from ..kernels._validation import InvalidParameterError, check_batch_size
from ..kernels.sgld import Schedule, gaussian_variance_inflation, langevin_update, noise_ratio
from . import setup, sgld_checks, sgld_setup
from .base import SubsampleStep
from .sgld_checks import SGLDChain
from .state import BASE_STATS, setting_stats

__all__ = ["SGLD", "SGLDDivergenceError"]


class SGLDDivergenceError(SamplingError):
    """SGLD's chain left the finite numbers (a step size too large for the posterior).

    No longer raised: SGLD now keeps a diverging chain at its last finite values, records
    the draw in the ``diverging`` sample stat and warns once (see :class:`SGLD`). The
    class stays so that code catching it still imports."""


class SGLD(SubsampleStep):
    """Stochastic gradient Langevin dynamics (no Metropolis-Hastings correction).

    Each transition reads one minibatch, estimates the gradient of the log posterior
    from it, and moves (Welling & Teh 2011, "Bayesian learning via stochastic gradient
    Langevin dynamics", eq. 4, preconditioned as in their Sec. 4):

        ``q' = q + (h / 2) M g_hat(q) + sqrt(h) F eps``,  ``eps ~ N(0, I)``, ``M = F F'``.

    Every move is kept. The chain is therefore approximate: its stationary distribution
    differs from the posterior by the discretisation error of the step size and by the
    gradient estimator's noise (below). The default estimator, Taylor control variates
    about the posterior mode, keeps the noise small at posterior scale whatever ``N``
    (Baker, Fearnhead, Fox & Nemeth 2019, "Control variates for stochastic gradient
    MCMC"); for an exact chain use ScalableMH, or the MH-corrected variant,
    ``AustereMH(proposal=Langevin(gradient=...))``.

    Parameters
    ----------
    vars : list of variables, optional
        Continuous variables to sample (default: all continuous free variables). Every
        variable the likelihood depends on must be in ``vars`` when the estimator uses a
        centre.
    gradient : {"cv", "minibatch", "saga", "is", "is_saga"}, default "cv"
        The gradient estimator (:mod:`pymc_subsample.kernels.variance.gradient_estimators`):

        - ``"cv"``: first-order Taylor control variates about the centre (Baker et al.
          2019, Algorithm 2): each row's gradient is evaluated at ``q`` and at the centre.
        - ``"minibatch"``: the plain estimate ``N / m sum_S grad log p(x_i | q)`` (Welling
          & Teh 2011).
        - ``"saga"``: stored per-row gradients (El hanchi 2019, "Scaling up MCMC for
          Bayesian inference using adaptive data subsampling", Sec. 4.3). **Memory:**
          ``2 N d`` float64 per chain (the store and its starting copy; 1.6 GB for
          ``N = 10^7, d = 10``); refused with a ``MemoryError`` above ``max_memory``.
        - ``"is"``: rows drawn with replacement with probabilities ``p_i`` proportional
          to ``||h_i|| + L_i s`` (El hanchi Sec. 5.1), mixed with the uniform
          distribution in the share ``defensive``.
        - ``"is_saga"``: importance sampling and SAGA together (El hanchi Sec. 4.3, 5.2.2).
    batch_size : int, default 100
        Rows per transition (``m``); ``>= N`` reads all rows (exact gradients: unadjusted
        Langevin). A draw reads ``steps_per_draw x batch_size`` rows: 1,000 with the
        defaults (10 transitions of 100 rows), the ``data_used`` stat.
    step_size : float, optional
        ``h``. With the default preconditioner it is in units of the Laplace covariance;
        default 0.2. With ``precondition=False`` it is in the units of the unconstrained
        space (El hanchi's ``epsilon`` is ``h / 2``); default 0.2 times the smallest
        eigenvalue of the Laplace covariance.
    schedule : {"fixed", "decreasing"}, default "fixed"
        ``"fixed"``: ``h`` throughout. ``"decreasing"``: ``h (1 + t / schedule_t0)^-
        schedule_gamma`` at the ``t``-th transition after tuning (Welling & Teh's
        polynomial decay; the bias vanishes as ``t`` grows, and so does the chain's
        speed). Tuning uses ``h``. As in PyMC's other steps, draws are not weighted by
        their step size; the ``step_size`` stat records it for users who weight them.
    schedule_t0, schedule_gamma : float, default 100, 0.55
        Offset and exponent of the decreasing schedule (``gamma`` in ``(0.5, 1]``).
    precondition : bool, default True
        ``M`` = the covariance of the Laplace approximation at the centre (one factor
        ``F`` of it); ``False``: ``M = I``.
    center : dict or array, optional
        Centre of the control variates and of the Laplace approximation. Default: the
        posterior mode by Newton's method on the full data
        (:func:`pymc_subsample.center.find_center`).
    steps_per_draw : int, optional
        Transitions per PyMC draw (the draw keeps the last). Default 10 with the default
        preconditioned step size (about two autocorrelation times of a Gaussian
        posterior: ``(1 - h/2)^10 = 0.35``), else 1. Each transition reads
        ``batch_size`` rows, so a draw reads ``steps_per_draw x batch_size``.
    defensive : float, default 0.1
        Uniform share of the importance-sampling distribution (``"is"``, ``"is_saga"``).
    max_memory : float, optional
        Bytes that SAGA's store may take (default: half the memory available, at most
        4 GiB).
    init : {"laplace", "model"}, default "laplace"
        Start each chain's tuning from a draw of the Laplace approximation.
    hierarchical : {"refuse", "allow"}, default "refuse"
        What to do with a model whose GLM likelihood has a random intercept per group: a
        vector of group effects gathered by an integer data array, centred (``a ~
        Normal(mu, tau)``) or non-centred (``a = mu + tau * z``), as
        :func:`pymc_subsample.engine.groups.find_groups` recognises it. ``"refuse"``:
        raise :class:`~pymc_subsample.engine.analysis.ModelNotSupportedError` naming the
        group variable and the index. SGLD's fixed step size cannot follow the funnel of
        the group scale (the group effects' spread shrinks with ``tau``), so on these
        models it diverges or is biased; AustereMH, BarkerMinibatch and ScalableMH
        recognise the structure and update the groups in a blocked sweep. ``"allow"``:
        sample the model anyway, for users who check the draws themselves (the
        ``diverging`` stat and its warning still flag a chain that runs away).
    tune, model, rng, initial_point, compile_kwargs, progressbar :
        As for the other steps (:class:`pymc_subsample.AustereMH`).

    Notes
    -----
    **Bias, stated.** Two errors remain, and neither is corrected:

    - *Discretisation.* On a Gaussian posterior with exact gradients, the preconditioned
      update is an AR(1) process whose stationary variance is ``1 / (1 - h / 4)`` times
      the posterior's (the mean is right): 1.053 at the default ``h = 0.2``, so standard
      deviations come out 2.6% too wide (:func:`pymc_subsample.kernels.sgld.
      gaussian_variance_inflation`). Non-Gaussian posteriors add an error of order ``h``
      to the mean.
    - *Gradient noise.* The estimate's error adds ``(h/2)^2 Var(g_hat)`` to the variance
      ``h M`` the update injects. The ``noise_ratio`` stat is Welling & Teh's ``alpha =
      (h / 4) lambda_max(F' Var(g_hat) F)``, the relative excess variance along the worst
      direction, with ``Var(g_hat)`` estimated from the batches' spread, averaged over the
      last 200 transitions of the chain. The step warns when its chain mean exceeds
      0.1. With control variates it is of order ``h d / m`` at posterior scale; with the
      plain minibatch estimator it grows with ``N`` (El hanchi's failure of SGLD).

    ``benchmarks/sgld.py`` measures both against exact references.

    **Divergence.** Without an accept/reject step nothing undoes a move that runs away (a
    step size too large for the posterior's curvature). A transition diverges when the
    gradient estimate or the move is not finite, or when the move lands more than
    ``RUNAWAY`` (1000) standard deviations of the Laplace approximation from its mean in
    some coordinate (when the step has a Laplace fit; a gradient too large for the
    posterior shows there). The chain then stays at its last finite values, the draw's
    ``diverging`` stat is True, and the step warns once per chain (once while tuning and
    once after) with a ``SamplerWarning``. Such a chain is not sampling the posterior:
    lower ``step_size`` or use a Metropolis-Hastings step.

    Sample stats per draw: ``accepted`` and ``accept`` (1.0: every move is kept; 0.0 for a
    transition that stayed because it diverged), ``diverging`` (a transition of the draw
    diverged), ``data_used`` (rows read by the draw: transitions per draw x batch size,
    ``steps_per_draw x batch_size``, 10 x 100 = 1,000 with the defaults),
    ``n_batches``, ``step_size`` (the largest ``h`` of the draw's transitions;
    ``scaling``: the next transition's), ``noise_ratio`` (the largest of the draw's
    transitions; NaN when all of them diverged; beyond 256 parameters the noise estimate
    is refreshed every ``ceil(d / 256)`` transitions, see
    :class:`~pymc_subsample.kernels.sgld.NoiseAverage`) and ``warning``; settings
    ``setting_batch_size``, ``setting_step_size`` (``h`` at the start) and
    ``setting_steps_per_draw``.
    """

    name = "sgld"
    SETTINGS = SubsampleStep.SETTINGS + ("batch_size", "step_size")
    stats_dtypes_shapes = {
        **BASE_STATS,
        "step_size": (np.float64, []),
        "noise_ratio": (np.float64, []),
        # a transition of the draw diverged and stayed (bool, as PyMC's NUTS declares it)
        "diverging": (bool, []),
        **setting_stats(SETTINGS),
    }
    #: the noise ratio first: rows per draw are steps_per_draw x batch_size, constant
    PROGRESS_COLUMNS = (
        ("noise_ratio", "pms_noise", "Noise", "{:.3f}"),
        ("data_used", "pms_rows", "Rows", "{:.0f}"),
    )
    #: default ``h`` in the Laplace covariance's units
    DEFAULT_STEP = 0.2
    #: warn when the chain's mean ``noise_ratio`` exceeds this
    NOISE_WARN = 0.1
    keeps_data_sums = True
    _chain_class = SGLDChain

    def __init__(
        self,
        vars=None,
        *,
        gradient="cv",
        batch_size=100,
        step_size=None,
        schedule="fixed",
        schedule_t0=100.0,
        schedule_gamma=0.55,
        precondition=True,
        center=None,
        steps_per_draw=None,
        defensive=0.1,
        max_memory=None,
        hierarchical="refuse",
        **kwargs,
    ):
        (step_size, schedule_t0, schedule_gamma, self.hierarchical, defensive,
         max_memory) = sgld_setup.check_args(
            kwargs, gradient=gradient, step_size=step_size, schedule=schedule,
            schedule_t0=schedule_t0, schedule_gamma=schedule_gamma,
            precondition=precondition, hierarchical=hierarchical, defensive=defensive,
            max_memory=max_memory)
        self.gradient = gradient
        self._batch_arg = batch_size
        self._user_step = None if step_size is None else float(step_size)
        self.schedule = schedule
        self.schedule_t0, self.schedule_gamma = float(schedule_t0), float(schedule_gamma)
        self.precondition = bool(precondition)
        self._center_arg = center
        self.defensive = float(defensive)
        self.max_memory = max_memory
        if steps_per_draw is None:
            steps_per_draw = 10 if (self.precondition and step_size is None) else 1
        super().__init__(vars, steps_per_draw=steps_per_draw, **kwargs)

    # ------------------------------------------------------------------ set-up
    def _needs_center(self) -> bool:
        return (self.gradient != "minibatch" or self.precondition or self._user_step is None
                or self._center_arg is not None)

    def _setup(self):
        eng = self.engine
        if self.hierarchical == "refuse":
            sgld_setup.refuse_groups(eng)
        self.batch_size = check_batch_size(self._batch_arg, "batch_size", self.n_rows)
        self.center = None
        self._laplace_sd = None
        if self._needs_center():
            msg = self.gradient != "minibatch" and self._other_steps_message(
                f"SGLD(gradient={self.gradient!r})", "Add them to vars=, or use "
                "gradient='minibatch'.")
            if msg:
                raise InvalidParameterError(msg)
            self.center, self._setup_warning = setup.locate_center(
                setup.mode_likelihood(eng), eng, self._center_arg,
                "the centre of the control variates and of the Laplace preconditioner",
                "pass center=.")
            mean, cov = self.center.laplace(self.loglik_weight)
            self._set_laplace(mean, cov)
            self._laplace_sd = sgld_checks.laplace_sds(self._laplace_chol)
        self._factor = self._laplace_chol if self.precondition else None
        if self._user_step is not None:
            h0 = self._user_step
        elif self.precondition:
            h0 = self.DEFAULT_STEP
        else:
            h0 = self.DEFAULT_STEP * float(np.linalg.eigvalsh(cov)[0])
        self._oracle = setup.gradient_oracle(
            eng, self.gradient, self.batch_size, center=self.center, chol=self._laplace_chol,
            loglik_weight=self.loglik_weight, defensive=self.defensive,
            max_memory=self.max_memory, owner="SGLD")
        self.estimator = self._oracle.estimator
        self.step_schedule = Schedule(h0, self.schedule, self.schedule_t0, self.schedule_gamma)
        eng.compile("prior_grad", "row_grad_pair" if self.estimator.needs_center else "row_grad")

    def settings(self) -> dict:
        return {**super().settings(), "batch_size": self.batch_size,
                "step_size": self.step_schedule.h0}

    @property
    def step_size(self) -> float:
        """``h`` at the start of sampling (the schedule's ``h0``)."""
        return self.step_schedule.h0

    def variance_inflation(self) -> float:
        """The stationary variance's inflation on a Gaussian posterior, ``1 / (1 - h/4)``
        (preconditioned step; see the class notes)."""
        return (gaussian_variance_inflation(self.step_schedule.h0) if self.precondition
                else math.nan)

    def stop_tuning(self):
        """End of tuning: the noise check starts again on the kept draws (its warning,
        if any, then travels with a kept draw)."""
        super().stop_tuning()
        chain = self.chain
        chain.noise_sum, chain.noise_n = 0.0, 0
        chain.warnings.issued.discard("noise")
        chain.warnings.issued.discard("diverging")

    def _scaling(self) -> float:
        return self.step_schedule.at(self.chain.t)

    # ------------------------------------------------------------------ the step
    #: Laplace standard deviations from the Laplace mean, in any coordinate, beyond which
    #: a move is taken to have diverged (a posterior has no mass there; SGLD's draws grow
    #: geometrically once its step is unstable, e.g. h >= 4 preconditioned)
    RUNAWAY = 1e3

    def _diverged(self, q, h, stats, what):
        """A diverging transition: the chain stays at ``q``, its last finite values (SGLD
        has no accept/reject step to undo the move, and inf, NaN or runaway draws must
        never be returned silently); the draw's ``diverging`` stat is True and the chain
        warns once."""
        self.warn_once(
            "diverging", sgld_checks.divergence_warning(
                what, h, tuning=self.tune, precondition=self.precondition),
            kind=WarningType.TUNING_DIVERGENCE if self.tune else WarningType.DIVERGENCE,
        )
        if not self.tune:
            self.chain.t += 1
        stats.update(accepted=0.0, accept=0.0, noise_ratio=math.nan, diverging=True)
        return q, stats

    def _transition(self, q):
        """One Langevin move (every move is kept: no Metropolis-Hastings correction),
        unless it diverges (:meth:`_diverged`)."""
        chain = self.chain
        h = self.step_schedule.at(chain.t)
        rows = self._oracle.draw_rows(self.rng)
        g = self._oracle(q, rows)
        stats = {"data_used": int(rows.size), "n_batches": 1, "step_size": h}
        if not np.all(np.isfinite(g)):
            return self._diverged(q, h, stats, "the gradient estimate is not finite")
        eps = self.rng.standard_normal(self.ndim)
        q_new = langevin_update(q, g, h, eps, self._factor)
        what = sgld_checks.divergence(q_new, self._laplace_mean, self._laplace_sd,
                                      self.RUNAWAY)
        if what is not None:
            return self._diverged(q, h, stats, what)
        self._oracle.update(q)
        noise = chain.noise
        fold = noise.due(self.ndim)  # every transition up to EXACT_DIM or a full window
        if fold:
            noise.add(self._oracle.last.whitened_covariance(self._factor))
            noise.largest()
        ratio = noise_ratio(h, noise.top) * self.loglik_weight**2
        stats.update(accepted=1.0, accept=1.0, noise_ratio=ratio, diverging=False)
        if not self.tune:
            chain.t += 1
        chain.noise_sum += ratio
        chain.noise_n += 1
        msg = sgld_checks.noise_warning(
            chain.noise_sum, chain.noise_n, h, threshold=self.NOISE_WARN,
            batch_size=self.batch_size, n_rows=self.n_rows, gradient=self.gradient)
        if msg is not None:
            self.warn_once("noise", msg, kind=WarningType.CONVERGENCE)
        return q_new, stats
