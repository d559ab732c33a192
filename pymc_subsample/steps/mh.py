"""The Metropolis-Hastings layer of the subsampling steps: one transition kernel
(:mod:`pymc_subsample.steps.kernel`) per step.

:class:`MHStep` adds to :class:`~pymc_subsample.steps.base.SubsampleStep` the choice of
its kernel: the blocked sweep on a random-intercept GLM
(:mod:`pymc_subsample.steps.hierarchical`), or the joint move
(:class:`~pymc_subsample.steps.kernel.JointMove`) over the proposal (chosen once the
set-up knows the centre and the control variate; built with the user's
``proposal_kwargs``; set up with the Laplace approximation when there is one; tuned
during tuning) and the subclass's :meth:`MHStep._decide`, which returns a frozen
:class:`~pymc_subsample.steps.kernel.Decision`. AustereMH, BarkerMinibatch (through
:mod:`pymc_subsample.steps.growing`) and ScalableMH derive from it.
"""

from __future__ import annotations

import math
import warnings
from abc import abstractmethod

import numpy as np

from ..engine.groups import NotFound, find_groups, random_effects
from ..kernels._validation import InvalidParameterError, check_choice
from ..kernels.variance.control_variates import NoControlVariate
from ..proposals import as_proposal
from .base import SubsampleStep
from .state import DRAW_STATS, SETTING_PREFIX
from .kernel import REJECTED, Decision, JointMove
from .setup import gradient_oracle

__all__ = ["MHStep", "Decision", "REJECTED"]


class MHStep(SubsampleStep):
    """Base of the Metropolis-Hastings subsampling steps.

    Subclasses implement :meth:`_decide` and, when they have a set-up of their own,
    :meth:`_setup_target` (the set-up passes: centre, control variate, bounds; returns
    the centre and the Laplace approximation, or None) and :meth:`_default_proposal`.

    Parameters
    ----------
    proposal : str or object, optional
        A proposal name (``"random_walk"``, ``"langevin"``, ...) or an object with
        ``draw(q, rng) -> (q_new, log_ratio)``; None: the step's default.
    scaling : float or array, optional
        The proposal's start scale (for the random walk, its standard deviation in the
        step's unconstrained space, scalar or one per dimension). ``None`` picks a start
        from the Laplace approximation, or from the curvature of the log posterior at the
        initial point, and tunes it during tuning.
    proposal_kwargs : dict, optional
        Keyword arguments of the proposal named by ``proposal=`` (or of the default one).
    hierarchical : {"auto", "off"}, default "auto"
        On a GLM with a random intercept per group (a vector of group effects gathered
        by an integer data array, centred ``a ~ Normal(mu, tau)`` or non-centred
        ``a = mu + tau * z``; :func:`~pymc_subsample.engine.groups.find_groups`), run
        the blocked sweep of :mod:`pymc_subsample.steps.hierarchical` instead of one
        joint move: group effects one by one (all groups at once), hyperparameters
        interweaving the centred and non-centred forms, fixed effects; every move exact
        (factorised test with Poisson thinning), at a cost per draw that does not grow
        with ``N``. The step's own test and ``proposal=`` are then not used (the
        ``repr`` and :attr:`hierarchy` say so: the structure, or a
        :class:`~pymc_subsample.engine.groups.NotFound` with the reason). ``"off"``, or a ``proposal=``,
        ``scaling=`` or ``proposal_kwargs=`` given: the joint move.
    **kwargs
        Those of :class:`~pymc_subsample.steps.base.SubsampleStep`.
    """

    #: cap of the default random walk's tuned scale, as a multiple of its start (the
    #: approximate tests accept large moves too often: tuning would inflate their bias)
    max_scale_factor = math.inf
    #: whether a start scale comes from the Laplace approximation's marginal sds (with a
    #: centre) rather than the proposal's own default
    SCALING_FROM_LAPLACE = True
    #: the sweep makes one transition per draw when ``steps_per_draw`` was not given
    #: (a step whose own default is several joint moves sets this in its constructor)
    _steps_per_draw_default = False

    def __init__(self, vars=None, *, proposal=None, scaling=None, proposal_kwargs=None,
                 hierarchical="auto", **kwargs):
        self._hierarchical_arg = check_choice("hierarchical", hierarchical, ("auto", "off"))
        self._proposal_arg = proposal
        self._scaling_arg = scaling
        self._proposal_kwargs = dict(proposal_kwargs or {})
        #: the centre of the control variates and of the proposal's Gaussian fit (or None)
        self.center = None
        super().__init__(vars, **kwargs)

    # ------------------------------------------------------------------ set-up
    def _setup(self):
        if self._scaling_arg is not None:
            self._scaling_arg = self._check_scaling(self._scaling_arg)
        self.user_scaling = self._scaling_arg
        self._setup_settings()
        self._searched = False
        self.hierarchy = self._find_structure()
        if not isinstance(self.hierarchy, NotFound):
            self.kernel = self._build_sweep(self.hierarchy)
            return
        if self._searched:
            self._warn_uncovered(self.hierarchy)
        if self._proposal_arg is not None:  # a user's proposal: checked before the passes
            self.proposal = self._build_proposal()
        fit = self._setup_target()
        if self.proposal is None:
            self.proposal = self._build_proposal()
        self._setup_proposal(fit)
        self._compile()
        self.kernel = JointMove(self.proposal, self._test, self._tune_signal, self._oracle,
                                self._decision_stats())

    def _setup_settings(self):
        """The set-up of the recorded settings (:meth:`settings`) that does not depend
        on the kernel: the arguments checked and resolved. Default: none."""

    def _find_structure(self):
        """The group structure the sweep runs on (:func:`~pymc_subsample.engine.groups.
        find_groups`), or a :class:`~pymc_subsample.engine.groups.NotFound` with why the
        step keeps the joint move."""
        if self._hierarchical_arg == "off":
            return NotFound("hierarchical='off'")
        if self.loglik_weight != 1.0:
            return NotFound("a tempered target (temperature != 1) keeps the joint move")
        if (self._proposal_arg is not None or self._scaling_arg is not None
                or self._proposal_kwargs):
            return NotFound("proposal=, scaling= or proposal_kwargs= configures the joint move")
        self._searched = True
        try:
            return find_groups(self.engine)
        except Exception as err:  # noqa: BLE001 - an unforeseen graph: the joint move
            return NotFound(f"the graph could not be read ({type(err).__name__}: {err})")

    def _warn_uncovered(self, why):
        """Warn, before sampling, when the likelihood has random effects that the sweep
        does not cover (:func:`~pymc_subsample.engine.groups.random_effects`): the joint
        move over all coordinates does not mix on such a model. The warning names the
        effects and ``why``; it is issued now (a ``UserWarning``) and again in the first
        draw's ``warning`` stat of each chain."""
        try:
            effects = random_effects(self.engine)
        except Exception:  # noqa: BLE001 - the warning is best effort, never a refusal
            effects = []
        if not effects:
            return
        msg = (f"the model has random effects ({', '.join(effects)}) that the blocked "
               f"hierarchical sweep does not cover ({why}). The step runs one joint move "
               f"over all {self.ndim} coordinates, which mixes poorly on such models (R-hat "
               "1.6-3.7 seen on real data): check R-hat and ESS of every variable, or "
               "sample this model with NUTS.")
        self._structure_warning = msg
        warnings.warn(f"{type(self).__name__}: {msg}", UserWarning, stacklevel=4)

    def _build_sweep(self, structure):
        """The blocked sweep (:mod:`pymc_subsample.steps.hierarchical`) on ``structure``,
        in place of the joint move."""
        from .hierarchical import sweep_for

        self._before_sweep()
        sweep = sweep_for(self.engine, structure)
        if self._steps_per_draw_default:  # a step's own default
            self.steps_per_draw = 1
        self.control = NoControlVariate(self.engine)
        return sweep

    def _before_sweep(self):
        """Called once the sweep is chosen, before it reads the rows (a step's pending data
        checks run here)."""

    @property
    def sweep(self):
        """The blocked hierarchical sweep the step runs, or None (the joint move)."""
        return None if isinstance(self.hierarchy, NotFound) else self.kernel

    def _decision_stats(self) -> dict:
        """The stats the joint move's decisions carry: the step's declared stats but
        those of the draw (``scaling``, ``warning``, the settings)."""
        return {k: v for k, v in type(self).stats_dtypes_shapes.items()
                if k not in DRAW_STATS and not k.startswith(SETTING_PREFIX)}

    def __repr__(self) -> str:
        what = (f"blocked hierarchical sweep: {self.hierarchy.describe()}"
                if self.sweep is not None else "joint move")
        return f"{type(self).__name__}(N={self.n_rows}, d={self.ndim}; {what})"

    def _setup_target(self):
        """The set-up passes (centre, control variate, bounds); returns ``(centre theta,
        (mean, cov))`` of the Laplace approximation, or None without a centre. Default:
        no centre and no control variate (a step that reads its rows plainly)."""
        self.control = NoControlVariate(self.engine)
        return None

    def _default_proposal(self) -> str:
        """The proposal's name when ``proposal=None`` (decided after the set-up)."""
        return "random_walk"

    def _compile(self):
        """Compile the per-step functions now, before PyMC forks its workers."""

    def _build_proposal(self):
        """The proposal object: ``proposal=`` (a name, class or object), else the step's
        default, built with ``proposal_kwargs``."""
        kwargs = self._proposal_kwargs
        name = self._proposal_arg
        if name is None:
            name = self._default_proposal()
            if name == "random_walk":
                kwargs.setdefault("max_scale_factor", self.max_scale_factor)
        try:
            return as_proposal(name, **kwargs)
        except TypeError as err:
            if self._proposal_arg is not None or not kwargs:
                raise
            raise InvalidParameterError(
                f"proposal_kwargs {sorted(kwargs)} do not fit the default proposal "
                f"{name!r} of {type(self).__name__} here ({err}). Name the proposal they "
                "are for with proposal=."
            ) from err

    def _check_scaling(self, scaling):
        arr = np.asarray(scaling, dtype=np.float64)
        if arr.ndim > 1 or (arr.ndim == 1 and arr.size != self.ndim):
            raise InvalidParameterError(
                f"scaling must be a scalar or have one value per dimension of the step's "
                f"unconstrained space ({self.ndim}), got shape {arr.shape}."
            )
        if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
            raise InvalidParameterError(f"scaling must be positive and finite, got {scaling!r}.")
        return arr if arr.ndim else float(arr)

    def default_scaling(self, n_rows_probe: int = 2000):
        """Start value of the random-walk scaling: ``2.38 / sqrt(d)`` times the posterior sd
        from the curvature of the log posterior at the initial point.

        The Hessian of the log-likelihood is estimated on a random subset of at most
        ``n_rows_probe`` rows (fixed seed: a set-up computation, not sampling) and scaled by
        ``N / n``. Dimensions where the estimate is not concave fall back to 0.1.
        """
        eng = self.engine
        q0 = eng.initial_q()
        n = min(eng.n_rows, n_rows_probe)
        rows = np.sort(np.random.default_rng(0).choice(eng.n_rows, size=n, replace=False))
        try:
            _, _, h_ll = eng.loglik_hessian(q0, rows)
            _, _, h_pr = eng.prior_hessian(q0)
            diag = -(np.diag(h_pr) + np.diag(h_ll) * (eng.n_rows / n) * self.loglik_weight)
        except Exception:  # pragma: no cover - defensive: fall back to a fixed start
            diag = np.full(eng.ndim, np.nan)
        sd = np.where(np.isfinite(diag) & (diag > 0), 1.0 / np.sqrt(np.abs(diag)), 0.1)
        return 2.38 / np.sqrt(eng.ndim) * sd

    def _setup_proposal(self, fit):
        """Set the proposal up: with the Laplace approximation at the centre (``fit``),
        or from the curvature at the initial point."""
        prop, scaling = self.proposal, self.user_scaling
        if fit is None:
            if scaling is None:
                scaling = self.default_scaling()
                # the marginal sds behind the random-walk default (its 2.38 / sqrt(d)
                # factor undone), for proposals that start from a scaling of their own
                own = prop.scaling_from_sd(scaling * np.sqrt(self.ndim) / 2.38)
                scaling = scaling if own is None else own
            prop.setup(self.ndim, scaling=scaling, grad_fn=self._proposal_grad_fn(),
                       n_total=self.n_rows)
            return
        theta, (mean, cov) = fit
        if self._laplace_mean is not mean:  # a set-up that needed it has stored it
            self._set_laplace(mean, cov)
        if scaling is None and self.SCALING_FROM_LAPLACE:
            scaling = prop.scaling_from_sd(np.sqrt(np.diag(cov)))
        prop.setup(self.ndim, scaling=scaling, grad_fn=self._proposal_grad_fn(),
                   n_total=self.n_rows,
                   mode=mean if prop.reference_point == "gaussian_mean" else theta, cov=cov)

    def _proposal_grad_fn(self):
        """The gradient the proposal declares it needs (``Proposal.gradient``): the
        data-free surrogate's, or an unbiased minibatch estimate of the log posterior's,
        from the gradient estimator the proposal names (``estimator_name``) or plain."""
        prop = self.proposal
        if prop.gradient == "surrogate":
            return self._surrogate_grad
        if prop.estimator_name is not None:
            self._oracle = gradient_oracle(
                self.engine, prop.estimator_name, prop.batch_size, center=self.center,
                chol=self._laplace_chol, loglik_weight=self.loglik_weight,
                owner=type(self).__name__)
            return self._oracle
        return self._minibatch_grad

    def _minibatch_grad(self, q, rows):
        """Unbiased estimate of the log-posterior gradient from ``rows`` (Langevin proposals)."""
        _, g_prior = self.engine.prior_and_grad(q)
        _, g_ll = self.engine.loglik_sum_grad(q, rows)
        return g_prior + (self.n_rows / len(rows)) * g_ll

    def _surrogate_grad(self, q):
        """Gradient of the data-free surrogate ``log prior + w sum_i lhat_i`` (the
        target of :class:`~pymc_subsample.proposals.SurrogateHMC`)."""
        _, g_prior = self.engine.prior_and_grad(q)
        return g_prior + self.loglik_weight * self.control.grad(q)

    # ------------------------------------------------------------------ the transition
    def _start_draw(self):
        # the log prior of the current state, reused by the draw's transitions; kept
        # across draws only when it is a function of q alone (no other step's variables
        # enter through shared variables: those may change between draws)
        if self.engine.shared:
            self._prior_now = None

    def _transition(self, q):
        """One Markov transition from ``q``: a step of the kernel. Returns the new state
        and the transition's stats (``accepted`` 0.0 or 1.0)."""
        return self.kernel.step(q, self.rng, self.tune and self.adapt)

    def _test(self, q, q_prop, log_qratio) -> Decision:
        """The prior ratio, then the step's decision (a proposal outside the prior's
        support is rejected without reading data)."""
        if self._prior_now is None or not (
                self._prior_now[0] is q or np.array_equal(self._prior_now[0], q)):
            self._prior_now = (np.array(q, dtype=np.float64), self.engine.prior(q))
        prior_p = self.engine.prior(q_prop)
        log_prior_ratio = prior_p - self._prior_now[1]
        if np.isnan(log_prior_ratio) or prior_p == -np.inf:
            return REJECTED
        decision = self._decide(q, q_prop, log_prior_ratio, log_qratio)
        if decision.accepted:
            self._prior_now = (np.array(q_prop, dtype=np.float64), prior_p)
        return decision

    #: ``(q, log prior at q)`` of the current state, reused within a draw (see astep)
    _prior_now = None

    def _tune_signal(self, decision: Decision):
        """What the proposal's tuning sees after a transition: whether it accepted, or for
        :class:`~pymc_subsample.proposals.SurrogateHMC` on order-2 control variates the
        data-free factor's acceptance probability (the Hamiltonian error on the
        surrogate, as HMC tunes)."""
        if self.proposal.tune_signal == "first_factor" and self.control.taylor_order == 2:
            return decision.first_factor
        return bool(decision.accepted)

    @abstractmethod
    def _decide(self, q, q_prop, log_prior_ratio, log_qratio) -> Decision:
        """One accept/reject decision."""
