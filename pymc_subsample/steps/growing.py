"""The minibatch-test layer shared by AustereMH and BarkerMinibatch.

:class:`GrowingBatchStep` decides each proposal on a minibatch of rows that grows until
the step's test is confident. It adds to :class:`~pymc_subsample.steps.mh.MHStep` the
batch sizes, a row sampler per chain, and one control variate
(:class:`~pymc_subsample.kernels.variance.control_variates.ControlVariate`: Taylor proxies about
the posterior mode, in ``q`` or in predictor coordinates, SAGA's stored per-row
gradients, or none), with the running checks of :mod:`pymc_subsample.steps.checks` and
re-centring. A subclass only runs its acceptance kernel (:meth:`GrowingBatchStep._run_test`).
"""

from __future__ import annotations

import math
import warnings
from abc import abstractmethod
from dataclasses import dataclass

import numpy as np
from pymc.stats.convergence import WarningType

from ..engine.predictor import curved_predictor_map
from ..kernels._validation import (
    InvalidParameterError, check_batch_size, check_choice, check_share)
from ..kernels.sampling.alias import AliasTable
from ..kernels.variance.control_variates import (
    DEFAULT_CONTROL_VARIATE, USER_CONTROL_VARIATE, ControlVariate, NoControlVariate,
    control_variate_kind)
from ..kernels.sampling.rows import ImportanceSampler, RowSampler
from . import setup
from .checks import CLTPool, CVChecks, TuningMean
from .mh import Decision, MHStep
from .state import BASE_STATS, ChainVars

__all__ = ["GrowingBatchStep", "GROWING_STATS"]

#: stats of the steps that decide on growing minibatches with control variates
GROWING_STATS = {
    **BASE_STATS,
    "exact": (bool, []),
    "cv_active": (bool, []),
    # 1.0 / 0.0: the audited decision agreed / disagreed with the exact full-data
    # decision for the same proposal and randomness; NaN: not audited
    "audit": (np.float64, []),
}


@dataclass
class GrowingChain(ChainVars):
    """What a chain of a growing-minibatch step changes: the variance check of the
    control variates, the tuning mean (with a centre) and the normal-approximation pool."""

    cv: CVChecks = None
    tuning: TuningMean | None = None
    clt: CLTPool = None


class GrowingBatchStep(MHStep):
    """Base of the steps that decide on a minibatch grown until a test is confident
    (AustereMH, BarkerMinibatch).

    It holds what both share: validated ``batch_size`` / ``batch_increment``, a
    without-replacement :class:`~pymc_subsample.kernels.sampling.rows.RowSampler` per chain (or
    i.i.d. importance-sampled rows), and one control variate. With control variates (the
    default) the step finds the posterior mode once
    (:func:`pymc_subsample.center.find_center`), the closed-form sum of the control
    variate enters the test's data-free part exactly and the minibatch estimates only
    the residual sum; the default proposal is then preconditioned by the Laplace
    approximation there. For a one-parameter GLM whose linear predictor is affine in
    data-free parameter expressions but not in the sampled variables (a non-centred
    hierarchical model), the proxy is taken in those predictor coordinates
    (:mod:`pymc_subsample.engine.predictor`) and the default proposal is
    :class:`~pymc_subsample.proposals.SurrogateHMC`.

    Subclasses implement :meth:`_run_test` (the acceptance kernel on a row function and a
    data-free log ratio) and :meth:`_exact_decision` (for the audit).
    """

    #: the proposal used when ``proposal=None``, by control variate (the entries of
    #: :data:`~pymc_subsample.kernels.variance.control_variates.CONTROL_VARIATES`; any other:
    #: ``"preconditioned"``)
    DEFAULT_PROPOSALS = {"none": "random_walk", "taylor1": "preconditioned", "taylor2": "pcn"}
    SETTINGS = MHStep.SETTINGS + ("batch_size", "batch_increment", "control_variate")
    _chain_class = GrowingChain
    #: kept transitions before the first verdict of the pooled normal-approximation check
    CLT_MIN_TRANSITIONS = 50
    #: consecutive failing variance-check windows at the end of tuning that turn the
    #: control variates off (fewer when tuning had fewer windows)
    CV_FAIL_WINDOWS = 2
    #: warn when the tuning mean lies more than this many Laplace sds from its mean
    LAPLACE_WARN_SD = 3.0
    #: largest memory, in bytes, for SAGA's stored per-row gradients (None: half the
    #: memory available, at most 4 GiB)
    SAGA_MEMORY = None

    def __init__(self, vars=None, *, batch_size, batch_increment=None, control_variate=None,
                 center=None, recenter=False, audit=0.0, sampling="uniform", **kwargs):
        self._cv_arg = control_variate
        #: the control variate asked for: an entry of :data:`~pymc_subsample.kernels.
        #: control_variates.CONTROL_VARIATES`, or ``USER_CONTROL_VARIATE`` for an instance
        self.cv = (USER_CONTROL_VARIATE if isinstance(control_variate, ControlVariate)
                   else control_variate_kind(DEFAULT_CONTROL_VARIATE if control_variate is None
                                             else control_variate))
        if self.cv.name == "none" and center is not None:
            raise InvalidParameterError(
                "center= is the centre of the control variates: it needs "
                "control_variate=1 or 2 ('taylor1' or 'taylor2') or 'saga'.")
        self._center_arg = center
        self.recenter = bool(recenter)
        self.audit = check_share(
            "audit", audit, strict=True, what="the share of steps, in [0, 1], on which the "
            "exact full-data decision is also taken (e.g. 0.01)")
        self.sampling = check_choice("sampling", sampling, ("uniform", "importance"))
        self._batch_args = (batch_size, batch_increment)
        super().__init__(vars, **kwargs)

    @property
    def keeps_data_sums(self) -> bool:
        """A centre (control variates, stored gradients or importance weights) and the
        Laplace fit come from the data; without them the test reads the live data."""
        return self.center is not None

    def settings(self) -> dict:
        """The batch sizes (``batch_increment`` resolved: ``batch_size`` when None) and
        the control variate in effect (0, 1, 2, or -1 for ``"saga"``; 0 when it was
        turned off because another step samples a variable of the likelihood)."""
        return {
            **super().settings(),
            "batch_size": self.batch_size,
            "batch_increment": (self.batch_size if self.batch_increment is None
                                else self.batch_increment),
            "control_variate": self.control.setting,
        }

    # ------------------------------------------------------------------ set-up
    def _setup_settings(self):
        """The batch sizes (whatever the kernel: :meth:`settings` records them)."""
        batch_size, batch_increment = self._batch_args
        self.batch_size = check_batch_size(batch_size, "batch_size", self.n_rows)
        self.batch_increment = check_batch_size(
            batch_increment, "batch_increment", self.n_rows, allow_none=True)
        self.is_table = self._is_scale = self._curved = None
        self._plain = NoControlVariate(self.engine)

    def _setup_target(self):
        """The centre and the control variate: Taylor proxies (in predictor coordinates
        for a curved predictor), SAGA's store, or none; the importance weights. Returns
        the centre and the Laplace fit, or None."""
        self._check_other_steps()
        if self.cv.name == "none" and self.sampling == "uniform":
            self.control = self._plain
            return None
        eng = self.engine
        self.center, self._setup_warning = setup.locate_center(
            setup.mode_likelihood(eng), eng, self._center_arg, "the control variates' centre",
            "the control variates may not reduce the variance. Pass center= (e.g. from "
            "pm.find_MAP) or set recenter=True.")
        mean, cov = self.center.laplace(self.loglik_weight)
        self._set_laplace(mean, cov)
        if self.cv.name == "saga":
            setup.check_store_memory(
                self.n_rows, self.ndim, self.SAGA_MEMORY, what=f"{type(self).__name__}("
                "control_variate='saga')", advice="Use control_variate=2 ('taylor2').")
        grads = (setup.row_gradients(eng, self.center.theta)
                 if self.cv.name == "saga" or self.sampling == "importance" else None)
        self.control = self._make_control(grads)
        if self.sampling == "importance":
            w = setup.importance_weights_at(eng, self.center.theta, self._laplace_chol, grads)
            self.is_table = AliasTable(w)
            self._is_scale = self.n_rows * self.is_table.probabilities()  # N p_i, once
        return self.center.theta, (mean, cov)

    def _check_other_steps(self):
        """Control variates need every variable of the likelihood in this step: refuse
        an explicit ``control_variate=``, or turn the default off with a warning."""
        msg = self.cv.name != "none" and self._other_steps_message(
            f"control_variate={self._cv_arg!r}", "Add them to vars=, or pass "
            "control_variate='none'.")
        if not msg:
            return
        if self._cv_arg is not None:
            raise InvalidParameterError(msg)
        warnings.warn(
            f"{type(self).__name__}: the Taylor control variates are off (plain "
            f"differences, which read more rows per step): {msg}", UserWarning, stacklevel=8)
        self.cv = control_variate_kind("none")

    def _make_control(self, grads):
        """The control variate at the centre (:func:`~pymc_subsample.steps.setup.
        control_variate`; ``grads``: the per-row gradients there, SAGA's store)."""
        eng, cv = self.engine, self.cv
        if cv is USER_CONTROL_VARIATE:  # a user's control variate
            self._cv_arg.setup(eng, self.center)
            return self._cv_arg
        if cv.taylor_order and self.sampling == "uniform":
            # a curved predictor (non-centred hierarchical): control variates in the
            # predictor coordinates, where the rows are an ordinary GLM
            vmap = curved_predictor_map(eng, self.center.theta)
            if vmap is not None:
                self._curved = True
                return setup.control_variate(
                    cv, eng, vmap=vmap,
                    proxy=vmap.proxy(vmap.v(self.center.theta), cv.taylor_order))
        return setup.control_variate(cv, eng, self.center, grads=grads)

    def _default_proposal(self) -> str:
        if self.user_scaling is not None:
            return "random_walk"  # scaling= is documented as the random walk's sd
        if self._curved:
            return "surrogate_hmc"
        return self.DEFAULT_PROPOSALS.get(self.cv.name, "preconditioned")

    def _compile(self):
        if self.control is self._plain or not self.control.taylor_order:
            self.engine.compile("ll_diff")
        elif self.cv.taylor_order and not self._curved:
            self.engine.compile(f"cv{self.cv.taylor_order}")

    def _new_chain(self) -> GrowingChain:
        tuning = None if self.center is None else TuningMean(np.zeros(self.ndim))
        return GrowingChain(cv=CVChecks(active=self.cv.name != "none"), tuning=tuning,
                            clt=CLTPool())

    def _reset_chain(self):
        super()._reset_chain()
        if self.is_table is not None:
            self._sampler = ImportanceSampler(self.is_table, self.rng)
        else:
            self._sampler = RowSampler(self.n_rows, self.rng)

    @property
    def cv_active(self) -> bool:
        """Whether this chain still uses its control variate."""
        return self.chain.cv.active

    def stop_tuning(self):
        super().stop_tuning()
        chain = self.chain
        tuning = chain.tuning
        if tuning is not None and tuning.n >= 50:
            for key, msg in (
                ("cv_rows", tuning.rows_warning(chain.cv.active, self.batch_size, self.n_rows)),
                ("laplace", tuning.laplace_warning(self._laplace_mean, self._laplace_chol,
                                                   self.LAPLACE_WARN_SD)),
            ):
                if msg:
                    self.warn_once(key, msg, kind=WarningType.CONVERGENCE)
        msg = chain.cv.turn_off(self.CV_FAIL_WINDOWS)
        if msg:
            self.warn_once("cv_off", msg)
        if (self.recenter and chain.cv.active and self.control.taylor_order
                and tuning is not None and tuning.n > 0):
            self.control.recenter_at(tuning.q)  # one more pass over the data

    # ------------------------------------------------------------------ the step
    def _terms_fn(self, control, q, q_prop):
        """``rows -> terms`` for the kernel: the control variate's residuals, divided by
        ``N p_i`` for importance-sampled rows. The first call of a transition feeds the
        variance check when it wants one."""
        checks = self.chain.cv
        first = [checks.wants_batch(self.tune)]
        scale = self._is_scale

        def terms(rows):
            plain, r = control.terms(q, q_prop, rows)
            if first[0]:
                first[0] = False
                checks.check.add(plain, r)
            return r if scale is None else r / scale[rows]

        return terms

    def _decide(self, q, q_prop, log_prior_ratio, log_qratio) -> Decision:
        control = self.control if self.chain.cv.active else self._plain
        o1 = log_prior_ratio + log_qratio
        # the control variate's exact sum over all N rows enters the data-free part
        cv_sum = control.sum_diff(q, q_prop)
        o1 += self.loglik_weight * cv_sum
        first_factor = math.exp(min(0.0, o1)) if o1 == o1 else 0.0

        def exact_sum():  # sum_i of the terms over all rows (i.i.d. draws reached N)
            return control.full_diff(q, q_prop) - cv_sum

        audited = self.audit > 0 and self.rng.random() < self.audit
        res, stats = self._run_test(self._terms_fn(control, q, q_prop), o1, exact_sum)
        accept = bool(res.accept)
        stats["cv_active"] = self.chain.cv.active
        stats["audit"] = np.nan
        if audited:
            full = log_prior_ratio + log_qratio + self.loglik_weight * control.full_diff(
                q, q_prop)
            stats["audit"] = float(self._exact_decision(res, full) == accept)
        q_now = q_prop if accept else q
        if control.stateful and res.data_used < self.n_rows:
            rows = np.unique(self._sampler.drawn())
            if rows.size:
                control.update(q_now, rows)
        self._after_step(q_now, res.data_used)
        return Decision(accept, accept=stats.pop("accept"), data_used=stats.pop("data_used"),
                        n_batches=stats.pop("n_batches"), first_factor=first_factor,
                        extras=stats)

    def _after_step(self, q_now, data_used):
        """The chain's running mean and rows read over tuning, the variance check."""
        chain = self.chain
        if chain.tuning is not None and self.tune:
            chain.tuning.add(q_now, data_used)
        msg = chain.cv.after_step(self.tune)
        if msg:
            self.warn_once("cv_poor", msg)

    def _clt_pool(self, first_batch, weight: float, knob: float, name: str,
                  advice: str) -> float:
        """Pool the normal-approximation error over the kept transitions
        (:class:`~pymc_subsample.steps.checks.CLTPool`); warn once per chain when the
        pooled estimate exceeds the step's knob. Returns this transition's estimate
        (NaN while tuning)."""
        if self.tune:
            return math.nan
        est, msg = self.chain.clt.add(first_batch, weight, knob, name, advice,
                                      self.CLT_MIN_TRANSITIONS)
        if msg:
            self.warn_once("clt", msg)
        return est

    def _report_test(self, res):
        """Warn once per chain about non-finite terms (the test rejected)."""
        if res.nonfinite:
            self.warn_once(
                "nonfinite",
                "a NaN or +inf log-likelihood difference was met and the proposal rejected; "
                "check the model at the current and proposed values.",
            )

    @abstractmethod
    def _run_test(self, terms_fn, log_ratio_o1, exact_sum):
        """Run the acceptance kernel; return ``(result, stats)``. ``exact_sum()`` gives the
        terms' sum over all rows (for i.i.d. importance-sampled rows)."""

    @abstractmethod
    def _exact_decision(self, result, full_log_ratio) -> bool:
        """The exact full-data decision for the randomness ``result`` used (audit)."""
