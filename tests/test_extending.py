"""docs/architecture.md says a new step method is one module (an MHStep subclass with
its ``_decide``) plus one line in ``steps.REGISTRY``, a new proposal one module (a
Proposal subclass) plus one line in ``proposals.REGISTRY``, a new control variate a
ControlVariate subclass of a few lines handed to ``control_variate=``, and a GLM family
for ScalableMH's bounds one module (a GLMFamily subclass) plus one registry line. This
checks all four (the first three on a conjugate model whose posterior is known exactly;
the family on an Exponential regression against quadrature): the draws must match, and
the same check catches a step that accepts every proposal and a control variate whose sum
is wrong. A registered step passes ``check_step`` through the common test with no edit to
it, and ``check_step`` fails a step with one of three plausible bugs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pymc_subsample.proposals.base import Proposal
from pymc_subsample.testing import mcse_mean, mcse_sd, posterior, sample_stats
from tests.conftest import normal_mean_model, run_sample

N, SIGMA, PRIOR_SD = 400, 2.0, 3.0


@pytest.fixture(scope="module")
def conjugate():
    y = np.random.default_rng(31).normal(1.5, SIGMA, N)
    model = normal_mean_model(y, prior_sd=PRIOR_SD, sigma=SIGMA)
    prec = 1.0 / PRIOR_SD**2 + N / SIGMA**2
    return model, y.sum() / SIGMA**2 / prec, math.sqrt(1.0 / prec)


def _exact_mh_step(broken=False):
    """The "one new module": an exact full-data MH step on the package's plumbing."""
    from pymc_subsample.steps.mh import Decision, MHStep

    class FullDataMH(MHStep):
        name = "full_data_mh"
        keeps_data_sums = False

        def _decide(self, q, q_prop, log_prior_ratio, log_qratio):
            log_r = log_prior_ratio + log_qratio + self.engine.full_loglik_diff(q, q_prop)
            accept = broken or math.log(self.rng.random()) < log_r
            return Decision(accept, data_used=self.n_rows, n_batches=1)

    return FullDataMH


def _broken_steps():
    """Three plausible bugs in a new step, each caught by one check of check_step: a
    stat declared but never emitted; a generator of its own, outside PyMC's
    ``sampling_state`` (the restored chain then draws differently); a refusal with a
    plain ``ValueError``."""
    from pymc_subsample.steps.mh import Decision

    FullDataMH = _exact_mh_step()

    class DeclaresTooMuch(FullDataMH):
        stats_dtypes_shapes = {**FullDataMH.stats_dtypes_shapes, "rows_seen": (np.int64, [])}

    class OwnGenerator(FullDataMH):
        def _decide(self, q, q_prop, log_prior_ratio, log_qratio):
            if not hasattr(self, "_own"):  # (a Barker-like coin, drawn from its own stream)
                self._own = np.random.default_rng(0)
            log_r = log_prior_ratio + log_qratio + self.engine.full_loglik_diff(q, q_prop)
            accepted = self._own.random() < 1.0 / (1.0 + math.exp(-log_r))
            return Decision(accepted, data_used=self.n_rows, n_batches=1)

    class PlainRefusal(FullDataMH):
        def __init__(self, *args, tol=1.0, **kwargs):
            if tol <= 0:
                raise ValueError(f"tol must be positive, got {tol!r}.")
            super().__init__(*args, **kwargs)

    return {"DeclaresTooMuch": (DeclaresTooMuch, "does not emit declared stats", {}),
            "OwnGenerator": (OwnGenerator, "after sampling_state was set back", {}),
            "PlainRefusal": (PlainRefusal, "raised ValueError, not the public", {"tol": 0.0})}


class ReflectedWalk(Proposal):
    """The "one new module" of a proposal: a random walk whose step is reflected about
    the current point with probability 1/2 (symmetric, log ratio 0; no adaptation)."""

    def _setup(self, ndim, *, scaling, grad_fn, n_total, mode, cov):
        self._s = np.sqrt(np.diag(cov)) if cov is not None else np.ones(ndim)

    def draw(self, q, rng):
        step = 2.4 * self._s * rng.standard_normal(q.size)
        return q + (step if rng.random() < 0.5 else -step), 0.0


@pytest.mark.parametrize("broken", [False, True])
def test_a_fourth_step_method_is_one_module(conjugate, broken):
    model, mean, sd = conjugate
    with model:
        step = _exact_mh_step(broken)(proposal="random_walk")
    idata = run_sample(model, step, draws=3000, tune=500, chains=2, seed=7)
    mu = posterior(idata)["mu"].values
    z_mean = abs(mu.mean() - mean) / mcse_mean(mu)
    z_sd = abs(mu.std() - sd) / mcse_sd(mu)
    assert (z_mean < 4 and z_sd < 4) != broken, (z_mean, z_sd)
    st = sample_stats(idata)  # no accept from _decide: the decision is reported
    np.testing.assert_array_equal(st["accept"].values, st["accepted"].values)


def test_a_new_proposal_is_one_module_plus_a_registry_line(conjugate, monkeypatch):
    import pymc_subsample as pms
    from pymc_subsample import proposals

    monkeypatch.setitem(proposals.REGISTRY, "reflected", ReflectedWalk)
    model, mean, sd = conjugate
    with model:
        step = pms.AustereMH(proposal="reflected", control_variate=2)
    assert type(step.proposal).__name__ == "ReflectedWalk"
    idata = run_sample(model, step, draws=3000, tune=500, chains=2, seed=8)
    mu = posterior(idata)["mu"].values
    assert abs(mu.mean() - mean) < 4 * mcse_mean(mu) + 0.02 * sd
    assert abs(mu.std() - sd) < 4 * mcse_sd(mu) + 0.02 * sd


def _first_order_taylor(wrong_sum=False):
    """The "few lines" of a control variate: first-order Taylor terms about the centre,
    ``c_i = g_i(c) . (q' - q)``, whose sum over all rows is ``G . (q' - q)``
    (``wrong_sum``: ``G`` summed over half the rows, a plausible bug, so the chain
    targets a tilted posterior; at the mode the full ``G`` is nearly 0, the half sum not)."""
    from pymc_subsample.kernels.variance.control_variates import ControlVariate

    class FirstOrderTaylor(ControlVariate):
        def setup(self, lik, center):
            self.lik, self.c, self.g_sum = lik, center.theta, center.loglik_grad
            if wrong_sum:
                half = np.arange(lik.n_rows // 2)
                self.g_sum = lik.loglik_rows_grad(self.c, half)[1].sum(axis=0)

        def sum_diff(self, q, q_new):
            return float(self.g_sum @ (q_new - q))

        def terms(self, q, q_new, rows):
            plain = self.lik.loglik_diff(q, q_new, rows)
            return plain, plain - self.lik.loglik_rows_grad(self.c, rows)[1] @ (q_new - q)

    return FirstOrderTaylor()


@pytest.mark.parametrize("wrong_sum", [False, True])
def test_a_new_control_variate_is_a_few_lines(conjugate, wrong_sum):
    import pymc_subsample as pms

    model, mean, sd = conjugate
    with model:
        # epsilon=0: the exact MH test on the control variate's sum plus all N residuals
        step = pms.AustereMH(control_variate=_first_order_taylor(wrong_sum), epsilon=0.0)
    assert type(step.control).__name__ == "FirstOrderTaylor"
    idata = run_sample(model, step, draws=2000, tune=500, chains=2, seed=9)
    mu = posterior(idata)["mu"].values
    z_mean = abs(mu.mean() - mean) / mcse_mean(mu)
    z_sd = abs(mu.std() - sd) / mcse_sd(mu)
    assert (z_mean < 4 and z_sd < 4) != wrong_sum, (z_mean, z_sd)
    settings = sample_stats(idata)["setting_control_variate"].values
    assert np.all(settings == -2)  # a control variate of the user's


def test_a_new_control_variate_reduces_the_rows_read(conjugate):
    """With the approximate test, the user's control variate makes the t-test decide on
    fewer rows than the plain differences (it does what a control variate is for)."""
    import pymc_subsample as pms

    model, _, _ = conjugate
    used = {}
    for name, cv in (("plain", 0), ("user", _first_order_taylor())):
        with model:
            step = pms.AustereMH(control_variate=cv, batch_size=50, scaling=0.3)
        idata = run_sample(model, step, draws=300, tune=200, chains=1, seed=10)
        used[name] = float(sample_stats(idata)["data_used"].values.mean())
    assert used["user"] < 0.5 * used["plain"], used


def test_a_new_step_in_the_registry_passes_the_common_check_step_test(monkeypatch):
    """One registry line and the common, parametrised test runs on the new step as it
    is (no edit to it); the step is then tried by pms.advise too (tests/test_advise.py)."""
    from pymc_subsample.steps import REGISTRY, StepEntry
    from tests.test_step_checks import test_every_registered_step_passes_check_step

    entry = StepEntry("FullDataMH", _exact_mh_step(), check_kwargs={"proposal": "random_walk"},
                      refusals=({"steps_per_draw": 0},))
    monkeypatch.setitem(REGISTRY, "FullDataMH", entry)
    test_every_registered_step_passes_check_step("FullDataMH")


@pytest.mark.parametrize("name", ["DeclaresTooMuch", "OwnGenerator", "PlainRefusal"])
def test_check_step_fails_a_broken_step(name):
    from pymc_subsample.step_checks import check_step
    from pymc_subsample.steps import StepEntry

    cls, finding, refusal = _broken_steps()[name]
    entry = StepEntry(name, cls, check_kwargs={"proposal": "random_walk"},
                      refusals=(refusal or {"steps_per_draw": 0},))
    with pytest.raises(AssertionError, match=finding):
        check_step(entry)


_FAMILY_MODULE = '''"""A new GLM family: y ~ Exponential(mean = exp(eta)), region bounds only."""
import numpy as np

from pymc_subsample.kernels.families.base import GLMFamily


class ExponentialMean(GLMFamily):
    name, label = "exponential_mean", "Exponential"
    description = "pm.Exponential(scale=pm.math.exp(eta))"
    distribution, dist_params = "ExponentialRV", ("scale",)
    link, link_param = "log", "scale"
    needs_y = True

    def local_sup(self, m, lo, hi, *, y=None, **params):
        return y * np.exp(-lo)  # both derivatives: y e^-eta, decreasing

    def row_loglik(self, eta, y, params, derivatives=2):
        w = y * np.exp(-eta)
        return (-eta - w, w - 1.0, -w)
'''


def test_the_built_in_families_are_one_module_and_one_registry_line_each():
    """Every built-in family is a class in a module of ``kernels/families/`` and one line
    of ``_BUILTIN`` in its ``__init__``; no other module registers (or reorders) the
    registry, so that adding one is a module and a line."""
    import ast
    from pathlib import Path

    from pymc_subsample.kernels import families

    root = Path(families.__file__).parent
    tree = ast.parse((root / "__init__.py").read_text())
    builtin = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                   and getattr(n.targets[0], "id", "") == "_BUILTIN")
    listed = [e.id for e in builtin.elts]
    assert len(listed) == len(set(listed))
    assert [type(f).__name__ for f in families.FAMILIES.values()] == listed
    for cls in families._BUILTIN:
        assert cls.__module__.startswith("pymc_subsample.kernels.families.")
    for path in root.glob("*.py"):
        if path.name == "__init__.py":
            continue
        calls = {n.func.id for n in ast.walk(ast.parse(path.read_text()))
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert not calls & {"register", "unregister"}, path.name


def test_a_new_glm_family_is_one_module_plus_a_registry_line(tmp_path, monkeypatch):
    """The "one new module" of a family, written to a file and imported, plus the one
    registry line: ScalableMH's ``bounds='auto'`` then recognises the model by that
    family alone and samples its posterior (quadrature reference)."""
    import importlib.util

    import pymc_subsample as pms
    from pymc_subsample.engine import glm
    from pymc_subsample.kernels import families
    from tests.kernels.families.test_families import Problem, _assert_exact

    path = tmp_path / "exponential_mean.py"
    path.write_text(_FAMILY_MODULE)
    spec = importlib.util.spec_from_file_location("exponential_mean", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(families, "FAMILIES", dict(families.FAMILIES))  # restored after
    monkeypatch.setattr(glm, "FAMILIES", families.FAMILIES)
    monkeypatch.setattr(families, "_ALIASES", dict(families._ALIASES))

    families.register(module.ExponentialMean)  # the registry line

    problem = Problem()
    assert glm.detect_glm(problem.model).family == "exponential_mean"
    assert "exponential_mean: pm.Exponential" in glm.SUPPORTED_TEXT
    with problem.model:
        step = pms.ScalableMH()
    _assert_exact(problem, step, draws=1500)
