"""Adding a GLM family (docs/architecture.md, "Adding a GLM family").

A family registered in a few lines (:class:`ExponentialLog` below: an Exponential
likelihood with mean ``exp(eta)``, which ScalableMH does not know out of the box) is
recognised in a PyMC model, listed in the supported-families text, and sampled exactly
by ``pms.ScalableMH()``: the draws of ``(a, b)`` match the posterior computed by
quadrature within ``Z_TOL`` Monte Carlo standard errors. The same family with bounds
100 times too small is caught (``BoundViolationError``). Plus the registry's errors.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pymc as pm
import pytest
from scipy import optimize

import pymc_subsample as pms
from pymc_subsample.engine import glm
from pymc_subsample.kernels import families
from pymc_subsample.kernels.families import GLMFamily, register, unregister
from pymc_subsample.kernels.scalable.thinning import BoundViolationError

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from helpers import mcse_mean, mcse_sd  # noqa: E402

Z_TOL = 4.5
N_ROWS = 1000


class ExponentialLog(GLMFamily):
    """``y ~ Exponential(mean = exp(eta))``: ``-log p = eta + y e^-eta``, so
    ``f'' = y e^-eta`` and ``f''' = -y e^-eta``, unbounded (no global bound) and
    decreasing in ``eta``: over ``[lo, hi]`` both peak at ``lo``."""

    name = "exponential_log"
    label = "Exponential"
    description = "pm.Exponential(scale=pm.math.exp(eta))"
    distribution, dist_params = "ExponentialRV", ("scale",)
    link, link_param = "log", "scale"
    needs_y = True  # local_sup reads the responses

    def local_sup(self, m, lo, hi, *, y=None, **params):
        return y * np.exp(-lo)

    def row_loglik(self, eta, y, params, derivatives=2):
        w = y * np.exp(-eta)
        return (-eta - w, w - 1.0, -w)


class TooSmall(ExponentialLog):
    """A wrong family: its suprema are 100 times too small."""

    def local_sup(self, m, lo, hi, *, y=None, **params):
        return 0.01 * super().local_sup(m, lo, hi, y=y)


class NoRowTerms(ExponentialLog):
    """The family without NumPy row terms: bounds and control variates stay in ``q``."""

    row_loglik = GLMFamily.row_loglik


@pytest.fixture
def registered():
    """Register a family for one test, and remove it afterwards."""
    names = []

    def add(family):
        register(family, replace=True)
        names.append(family.name)

    yield add
    for name in set(names):
        if name in families.FAMILIES:
            unregister(name)


class Problem:
    """``y_i ~ Exponential(mean = exp(a + b x_i))``, ``a, b ~ Normal(0, 1)``."""

    def __init__(self, n=N_ROWS, seed=3):
        rng = np.random.default_rng(seed)
        self.x = rng.standard_normal(n)
        self.y = rng.exponential(np.exp(0.3 - 0.5 * self.x))
        with pm.Model() as self.model:
            a = pm.Normal("a", 0.0, 1.0)
            b = pm.Normal("b", 0.0, 1.0)
            pm.Exponential("y", scale=pm.math.exp(a + b * self.x), observed=self.y)

    def log_post(self, a, b):
        eta = a[..., None] + b[..., None] * self.x
        return (-eta - self.y * np.exp(-eta)).sum(axis=-1) - 0.5 * (a * a + b * b)

    def reference(self, half_width=0.4, points=241):
        """Posterior means and sds of ``(a, b)`` by quadrature on a grid about the mode
        (about 12 posterior sds either side)."""
        mode = optimize.minimize(lambda t: -self.log_post(t[0], t[1]), np.zeros(2)).x
        A, B = np.meshgrid(*(np.linspace(c - half_width, c + half_width, points) for c in mode),
                           indexing="ij")
        lp = self.log_post(A, B)
        w = np.exp(lp - lp.max())
        w /= w.sum()
        means = np.array([(w * A).sum(), (w * B).sum()])
        sds = np.sqrt([(w * (A - means[0]) ** 2).sum(), (w * (B - means[1]) ** 2).sum()])
        return means, sds


def _sample(model, step, *, draws, tune, chains, seed):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(draws=draws, tune=tune, step=step, chains=chains, cores=1,
                         random_seed=seed, progressbar=False, compute_convergence_checks=False)


def _assert_exact(problem, step, draws):
    idata = _sample(problem.model, step, draws=draws, tune=500, chains=2, seed=5)
    means, sds = problem.reference()
    post = idata["posterior"]
    for j, v in enumerate(("a", "b")):
        x = np.asarray(post[v].values, dtype=float)
        z = (x.mean() - means[j]) / mcse_mean(x)
        zs = (x.std() - sds[j]) / mcse_sd(x)
        assert abs(z) < Z_TOL and abs(zs) < Z_TOL, (v, x.mean(), means[j], z, x.std(), sds[j], zs)
    return idata


def test_a_registered_family_is_recognised_and_sampled_exactly(registered):
    problem = Problem()
    with pytest.raises(ValueError, match="does not know the likelihood.*ExponentialRV"):
        glm.detect_glm(problem.model)
    assert "exponential_log" not in glm.SUPPORTED_TEXT
    registered(ExponentialLog)
    assert glm.detect_glm(problem.model).family == "exponential_log"
    assert "exponential_log: pm.Exponential(scale=pm.math.exp(eta)) [region]" in glm.SUPPORTED_TEXT
    with problem.model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pms.ScalableMH()
    assert step.region is not None  # no global bound: region bounds
    idata = _assert_exact(problem, step, draws=1500)
    stats = idata["sample_stats"]
    assert np.asarray(stats["data_used"].values).mean() < 0.05 * N_ROWS
    # the same family with bounds 100 times too small is caught
    registered(TooSmall)
    with problem.model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bad = pms.ScalableMH(order=1)
    with pytest.raises(BoundViolationError) as err:
        _sample(problem.model, bad, draws=500, tune=200, chains=1, seed=6)
    assert err.value.lam > err.value.bound


@pytest.mark.slow
def test_a_family_without_row_terms_keeps_the_bounds_in_q(registered):
    """No ``row_loglik``: the Taylor proxy comes from the engine's Hessian and the
    region bounds from ``engine.glm.glm_psi`` (which reads ``y`` for ``needs_y``)."""
    registered(NoRowTerms)
    assert not families.get_family("exponential_log").predictor_coordinates
    problem = Problem()
    with problem.model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pms.ScalableMH()
    _assert_exact(problem, step, draws=1500)


def test_supported_text_lists_the_registered_families():
    text = glm.SUPPORTED_TEXT
    for name, family in families.FAMILIES.items():
        assert f"{name}: {family.description}" in text
    for token in ("Bernoulli", "StudentT", "pm.Normal", "bounds=callable"):
        assert token in text


def test_unknown_families_give_clear_errors():
    from pymc_subsample.kernels.scalable.bounds import glm_sup_derivative
    from pymc_subsample.kernels.variance.predictor import row_loglik
    from pymc_subsample.kernels.scalable.region import local_sup

    with pytest.raises(ValueError, match="Unknown GLM family 'gamma_identity'; registered: "
                                         "bernoulli_logit, .*families.register"):
        families.get_family("gamma_identity")
    with pytest.raises(ValueError, match="unknown family 'nope'; supported: .*poisson_log"):
        local_sup("nope", 2, np.zeros(2), np.ones(2))
    with pytest.raises(ValueError, match="predictor coordinates support .*got 'gamma_log'"):
        row_loglik("gamma_log", np.zeros(2), np.ones(2), {})
    with pytest.raises(ValueError, match="No global derivative bound .*unbounded"):
        glm_sup_derivative("poisson", 2)
    assert families.get_family("Logistic") is families.get_family("bernoulli_logit")


def test_register_refuses_clashes_and_families_without_bounds():
    with pytest.raises(ValueError, match="already registered"):
        register(families.BernoulliLogit)

    class Alias(ExponentialLog):
        aliases = ("probit",)

    with pytest.raises(ValueError, match="already registered.*probit"):
        register(Alias)

    class Boundless(GLMFamily):
        name = "boundless"

    with pytest.raises(ValueError, match="provides no bound"):
        register(Boundless)

    class Misnamed(ExponentialLog):
        link_param = "lam"

    with pytest.raises(ValueError, match=r"\['lam'\] are not among its dist_params"):
        register(Misnamed)
    with pytest.raises(TypeError, match="needs a GLMFamily"):
        register(object())
    assert "exponential_log" not in families.FAMILIES and "boundless" not in families.FAMILIES


def test_a_part_a_family_does_not_provide_is_a_clear_error():
    """The numeric parts are optional: asking one a family does not provide names the
    family and the capability flag to check (a ValueError, never a silent number)."""
    from pymc_subsample.kernels.families import FamilyCapabilityError, get_family

    poisson = get_family("poisson_log")
    assert not poisson.global_bound and poisson.interval_bound
    with pytest.raises(FamilyCapabilityError, match="'poisson_log'.*global_bound is False"):
        poisson.sup_derivative(2)
    assert issubclass(FamilyCapabilityError, ValueError)
    logit = get_family("bernoulli_logit")
    with pytest.raises(FamilyCapabilityError, match="box_bound is False"):
        logit.box_partials(2, None, None, None)


def _refusal(make_likelihood, two_observed=False):
    """The message of ScalableMH(bounds='auto')'s refusal of a model whose likelihood
    ``make_likelihood(X, y, b)`` adds (its observed variable is ``y_obs``)."""
    rng = np.random.default_rng(11)
    X = rng.standard_normal((300, 2))
    y = (rng.random(300) < 0.5).astype(float)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 2.0, shape=2)
        make_likelihood(X, y, b)
        if two_observed:  # a second observed variable on the same rows, not a GLM
            pm.Laplace("w_obs", mu=b[0], b=1.0, observed=rng.standard_normal(300))
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError) as err:
            pms.ScalableMH()
    return str(err.value)


def test_auto_bounds_refusals_are_short_and_point_to_the_families_page():
    """Every refusal of ``bounds='auto'`` is at most 300 characters, names the observed
    variable and its distribution (or the parameter at fault), says what to do instead
    (``bounds=``, AustereMH/BarkerMinibatch) and points to docs/families.md, which lists
    every registered family; the long list (``supported_text``) is not appended."""
    logit, dot = pm.math.invlogit, pm.math.dot
    cases = {
        "an unknown distribution": (
            lambda X, y, b: pm.Laplace("y_obs", mu=dot(X, b), b=1.0, observed=y),
            ("LaplaceRV",)),
        "a wrong link": (
            lambda X, y, b: pm.Bernoulli(
                "y_obs", p=1 - pm.math.exp(-pm.math.exp(dot(X, b))), observed=y),
            ("Bernoulli", "logit link")),
        "a non-affine predictor": (
            lambda X, y, b: pm.Bernoulli("y_obs", p=logit(pm.math.exp(dot(X, b))), observed=y),
            ("linear predictor", "affine")),
        "a nu per row": (
            lambda X, y, b: pm.StudentT("y_obs", nu=3.0 + np.arange(300.0), mu=dot(X, b),
                                        sigma=1.0, observed=y),
            ("nu per row",)),
        "a free nu whose log is not affine": (
            lambda X, y, b: pm.StudentT("y_obs", nu=pm.Uniform("nu", 1.0, 30.0), mu=dot(X, b),
                                        sigma=1.0, observed=y),
            ("degrees of freedom nu", "free")),
        "a scale that is not log-affine": (
            lambda X, y, b: pm.Normal("y_obs", mu=dot(X, b),
                                      sigma=pm.Normal("s", 1.0, 0.1) ** 2, observed=y),
            ("log scale", "Normal", "affine")),
    }
    supported = families.supported_text()
    for case, (likelihood, tokens) in cases.items():
        message = _refusal(likelihood)
        assert len(message) <= families.REFUSAL_LIMIT == 300, (case, len(message), message)
        for token in ("y_obs", "docs/families.md", "bounds=", "AustereMH", *tokens):
            assert token in message, (case, token, message)
        assert supported not in message and "Registered families" not in message, case
    message = _refusal(lambda X, y, b: pm.Bernoulli("y_obs", logit_p=dot(X, b), observed=y),
                       two_observed=True)
    assert len(message) <= 300 and "'w_obs' (LaplaceRV)" in message, message
    assert "docs/families.md" in message  # its rows: test_family_conformance.py


def test_the_logistic_row_terms_match_log_expit_to_the_ulp_over_the_whole_line():
    """The logistic's row terms with derivatives take ``log(expit(eta))`` (the set-up's
    passes: ``expit`` is needed anyway), and ``eta`` itself below -700 where ``expit``
    turns subnormal: within a few ulps of ``scipy.special.log_expit`` in absolute
    terms from -800 to 800, as the terms without derivatives, which use it."""
    from scipy.special import expit, log_expit

    fam = families.get_family("bernoulli_logit")
    eta = np.concatenate([np.linspace(-800.0, 800.0, 200_001), [-700.0, -745.5, 36.8]])
    y = (np.arange(eta.size) % 2).astype(np.float64)
    l0, d1, d2 = fam.row_loglik(eta, y, {})
    exact = log_expit(eta) - (1.0 - y) * eta
    assert np.all(np.isfinite(l0))
    # on the scale of log s(eta) and (1 - y) eta, whose difference l0 is
    assert np.max(np.abs(l0 - exact) / np.maximum(1.0, np.abs(eta))) < 4e-16
    np.testing.assert_array_equal(fam.row_loglik(eta, y, {}, derivatives=0)[0], exact)
    s = expit(eta)
    np.testing.assert_allclose(d1, y - s, rtol=0, atol=1e-15)
    np.testing.assert_allclose(d2, -s * (1.0 - s), rtol=0, atol=1e-15)
    # a scalar, and one far in the tail
    assert fam.row_loglik(np.float64(-750.0), 1.0, {})[0] == -750.0
    # the check can fail: log(expit) without the tail's fallback is -inf below -745
    with np.errstate(divide="ignore"):
        assert not np.all(np.isfinite(np.log(expit(eta))))


def test_register_refuses_a_family_that_would_match_the_same_models():
    """No order decides between families: one that reads the same distribution with the
    same link and readers as a registered one, and is not told apart from it by a
    parameter one needs fixed and the other free, is refused."""

    class NormalAgain(families.Normal):
        name, aliases = "normal_again", ()

    with pytest.raises(ValueError, match="'normal_again' would match the same models as "
                                         "'normal'.*fixed_params.*free_params"):
        register(NormalAgain)

    class NormalLooser(families.Normal):  # no requirement at all: overlaps both
        name, aliases, fixed_params = "normal_looser", (), ()

    with pytest.raises(ValueError, match="would match the same models as 'normal'"):
        register(NormalLooser)

    class Contradictory(families.Normal):
        name, aliases, free_params = "normal_contradictory", (), ("sigma",)

    with pytest.raises(ValueError, match=r"\['sigma'\] are required both fixed and free"):
        register(Contradictory)
    assert not {"normal_again", "normal_looser", "normal_contradictory"} & set(families.FAMILIES)


def test_two_families_matching_one_model_are_an_error_of_the_registry(monkeypatch):
    """Families that :func:`register` cannot tell apart statically (here the same link
    under another name) and both match a model: recognition raises, naming both, and
    does not pick the first registered."""
    monkeypatch.setitem(glm.LINKS, "identity_again", glm.LINKS["identity"])

    class NormalAgain(families.Normal):
        name, aliases, link = "normal_again", (), "identity_again"

    monkeypatch.setitem(families.FAMILIES, "normal_again", NormalAgain())
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0)
        pm.Normal("y", mu=b * np.arange(5.0), sigma=1.0, observed=np.zeros(5))
    with pytest.raises(glm.AmbiguousFamilies, match=r"\['normal', 'normal_again'\] all match "
                                                    "observed 'y'"):
        glm.detect_glm(model)
    with pm.Model() as other:  # sigma free: only normal_scale matches
        b = pm.Normal("b", 0.0, 1.0)
        pm.Normal("y", mu=b * np.arange(5.0), sigma=pm.HalfNormal("s", 1.0),
                  observed=np.zeros(5))
    assert glm.detect_glm(other).family == "normal_scale"


def test_a_family_of_another_structure_needs_row_constants_and_a_known_reader(registered):
    """A family whose rows another reader of the engine finds (``structure``) provides its
    bounds by ``row_constants``; without them ``register`` refuses it, and a structure the
    engine has no reader for is a clear error at recognition."""
    from pymc_subsample.kernels.families.categorical import CategoricalSoftmax

    class NoConstants(GLMFamily):
        name, structure = "no_constants", "softmax"

    with pytest.raises(ValueError, match="provides no bound.*row_constants"):
        register(NoConstants)
    softmax = families.get_family("categorical_softmax")
    assert softmax.structure_bound and not (softmax.global_bound or softmax.region_bound)
    assert families.get_family("ordered_probit").structure == "ordered"

    class Unread(CategoricalSoftmax):
        name, aliases, structure, link = "unread", (), "nested_logit", "nested"

    registered(Unread)
    with pm.Model() as model:
        pm.Categorical("y", p=np.ones(3) / 3, observed=np.zeros(5, dtype=int))
    with pytest.raises(ValueError, match="'unread': unknown structure 'nested_logit'"):
        glm.detect_glm(model)
