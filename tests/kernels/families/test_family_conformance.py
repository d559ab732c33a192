"""One conformance suite over every registered GLM family.

For each family of :data:`pymc_subsample.kernels.families.FAMILIES` (the list is read
when the tests are collected, so a family registered in the package is checked without
an edit here, once it has an example model below):

* its example model is recognised by exactly that family (no other family's
  requirements and readers match it), whatever the order of the registry;
* its row log-likelihood in NumPy (:meth:`GLMFamily.row_loglik`, or
  :meth:`GLMFamily.standard_logpdf` for a location-scale row) agrees with finite
  differences of itself;
* its bounds enclose the partials at points drawn inside the interval or box they are
  taken over (one coordinate: ``|l''|`` and a finite-difference ``|l'''|`` against
  :meth:`GLMFamily.local_sup` and the global :meth:`GLMFamily.sup_derivative`; several:
  the point enclosures of :func:`~pymc_subsample.kernels.scalable.region.local_supd` against its
  box suprema; rows of another structure, whose constants come from what the engine's
  reader of that structure computes (:attr:`GLMFamily.structure_bound`: the Categorical
  families): the model's own rows' directional derivatives, by finite differences, at
  points drawn in the region, against the constants of
  :func:`~pymc_subsample.engine.glm.glm_psi`);
* it has its row in docs/families.md.

Each check runs on the families with the capability it concerns (a family without NumPy
row terms, :attr:`GLMFamily.predictor_coordinates`, has none to check).

The per-family tests (``test_family_*.py``) check the closed forms against autodiff.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

from pymc_subsample.engine import glm
from pymc_subsample.kernels import families
from pymc_subsample.kernels.scalable.region import local_supd

N = 24
_RNG = np.random.default_rng(20)
X = _RNG.normal(size=N)
Y_REAL = 0.4 + 0.8 * X + _RNG.normal(size=N)
Y_BIN = (Y_REAL > 0.3).astype(float)
Y_COUNT = np.where(_RNG.random(N) < 0.3, 0, _RNG.poisson(2.0, N)).astype(float)
Y_POS = np.exp(0.2 * X + 0.3 * _RNG.normal(size=N))
Y_CENS = np.maximum(Y_REAL, 0.0)
_CAT_RNG = np.random.default_rng(21)  # the Categorical rows' own draws
Y_CAT = _CAT_RNG.integers(0, 3, N)
Y_ORD = np.searchsorted([-0.8, 0.2, 1.1], 0.4 + 0.8 * X + _CAT_RNG.logistic(size=N))


def _free(kind):
    """A free variable of the kind a parameter needs."""
    return {"scale": lambda: pm.HalfNormal("s", 1.0),
            "psi": lambda: pm.Beta("psi", 2.0, 2.0),
            "alpha": lambda: pm.Gamma("alpha", 2.0, 1.0),
            "nu": lambda: pm.Gamma("nu", 2.0, 0.1),
            "cut": lambda: pm.Normal("cut", 0.0, 5.0, shape=3,
                                     transform=pm.distributions.transforms.ordered,
                                     initval=np.array([-0.8, 0.2, 1.1]))}[kind]()


#: an example model per family: ``name -> likelihood(eta)`` (inside the model context)
EXAMPLES = {
    "bernoulli_logit": lambda eta: pm.Bernoulli("y", logit_p=eta, observed=Y_BIN),
    "bernoulli_probit": lambda eta: pm.Bernoulli("y", p=pm.math.invprobit(eta),
                                                 observed=Y_BIN),
    "student_t": lambda eta: pm.StudentT("y", nu=4.0, mu=eta, sigma=1.5, observed=Y_REAL),
    "normal": lambda eta: pm.Normal("y", mu=eta, sigma=1.5, observed=Y_REAL),
    "poisson_log": lambda eta: pm.Poisson("y", mu=pm.math.exp(eta), observed=Y_COUNT),
    "normal_scale": lambda eta: pm.Normal("y", mu=eta, sigma=_free("scale"),
                                          observed=Y_REAL),
    "student_t_scale": lambda eta: pm.StudentT("y", nu=4.0, mu=eta, sigma=_free("scale"),
                                               observed=Y_REAL),
    "gamma_log": lambda eta: pm.Gamma("y", alpha=2.0, beta=2.0 / pm.math.exp(eta),
                                      observed=Y_POS),
    "negbinomial_log": lambda eta: pm.NegativeBinomial(
        "y", mu=pm.math.exp(eta), alpha=_free("alpha"), observed=Y_COUNT),
    "zeroinflated_poisson_log": lambda eta: pm.ZeroInflatedPoisson(
        "y", psi=0.7, mu=pm.math.exp(eta), observed=Y_COUNT),
    "zeroinflated_poisson_logit": lambda eta: pm.ZeroInflatedPoisson(
        "y", psi=_free("psi"), mu=pm.math.exp(eta), observed=Y_COUNT),
    "censored_normal": lambda eta: pm.Censored(
        "y", pm.Normal.dist(mu=eta, sigma=1.5), lower=0.0, upper=None, observed=Y_CENS),
    "censored_normal_scale": lambda eta: pm.Censored(
        "y", pm.Normal.dist(mu=eta, sigma=_free("scale")), lower=0.0, upper=None,
        observed=Y_CENS),
    "zeroinflated_negbinomial_logit": lambda eta: pm.ZeroInflatedNegativeBinomial(
        "y", psi=_free("psi"), mu=pm.math.exp(eta), alpha=2.0, observed=Y_COUNT),
    "zeroinflated_negbinomial_alpha": lambda eta: pm.ZeroInflatedNegativeBinomial(
        "y", psi=0.7, mu=pm.math.exp(eta), alpha=_free("alpha"), observed=Y_COUNT),
    "zeroinflated_negbinomial_log": lambda eta: pm.ZeroInflatedNegativeBinomial(
        "y", psi=0.7, mu=pm.math.exp(eta), alpha=2.0, observed=Y_COUNT),
    "zeroinflated_negbinomial_both": lambda eta: pm.ZeroInflatedNegativeBinomial(
        "y", psi=_free("psi"), mu=pm.math.exp(eta), alpha=_free("alpha"), observed=Y_COUNT),
    "student_t_nu": lambda eta: pm.StudentT("y", nu=_free("nu"), mu=eta,
                                            sigma=_free("scale"), observed=Y_REAL),
    "student_t_nu_fixed_scale": lambda eta: pm.StudentT("y", nu=_free("nu"), mu=eta,
                                                        sigma=1.5, observed=Y_REAL),
    "categorical_softmax": lambda eta: pm.Categorical(
        "y", p=pm.math.softmax(pt.stack([pt.zeros_like(eta), eta, 0.5 - eta], axis=-1),
                               axis=-1), observed=Y_CAT),
    "ordered_logistic": lambda eta: pm.OrderedLogistic(
        "y", eta=eta, cutpoints=_free("cut"), observed=Y_ORD),
    "ordered_probit": lambda eta: pm.OrderedProbit(
        "y", eta=eta, cutpoints=_free("cut"), sigma=1.5, observed=Y_ORD),
}

NAMES = [n for n, f in families.FAMILIES.items() if f.distribution is not None]


def example_model(name):
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 1.0)
        b = pm.Normal("b", 0.0, 1.0)
        EXAMPLES[name](a + b * X)
    return model


@pytest.fixture(scope="module")
def specs():
    """``name -> (model, GLMSpec)`` of every example, built once."""
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in NAMES:
            if name in EXAMPLES:
                model = example_model(name)
                out[name] = (model, glm.detect_glm(model))
    return out


def _matching(model):
    rv = model.observed_RVs[0]
    op = rv.owner.op
    cands = glm._candidates(model, rv, op.dist_params(rv.owner))
    return [c[0].name for c in cands if not c[2] and c[3] is not None]


@pytest.mark.parametrize("name", NAMES)
def test_the_example_is_recognised_by_exactly_this_family(name, specs, monkeypatch):
    assert name in EXAMPLES, f"family {name!r} has no example model in this suite"
    model, spec = specs[name]
    assert spec.family == name
    assert _matching(model) == [name]
    # no order semantics: the registry reversed recognises the same family
    monkeypatch.setattr(families, "FAMILIES", dict(reversed(families.FAMILIES.items())))
    monkeypatch.setattr(glm, "FAMILIES", families.FAMILIES)
    assert glm.detect_glm(model).family == name


@pytest.mark.parametrize("name", NAMES)
def test_the_family_has_its_row_in_the_docs(name):
    page = (Path(__file__).resolve().parents[3] / "docs" / "families.md").read_text()
    assert f"| `{name}` |" in page, f"docs/families.md has no row for the family {name!r}"


def _observed(spec):
    return {"bernoulli": Y_BIN, "poisson": Y_COUNT, "negbinomial": Y_COUNT,
            "zeroinflated": Y_COUNT, "gamma": Y_POS, "censored": Y_CENS}.get(
        spec.family.split("_")[0], Y_REAL)


def _scalars(params):
    """One-element parameters as numbers (as the engine hands a fixed ``nu`` over)."""
    return {k: float(np.ravel(v)[0]) if np.size(v) == 1 else v for k, v in params.items()}


def _fd(f, x, h):
    return (f(x + h) - f(x - h)) / (2.0 * h)


ONE_COORD = [n for n in NAMES if families.FAMILIES[n].interval_bound]
ROW_TERMS = [n for n in NAMES if families.FAMILIES[n].predictor_coordinates]


@pytest.mark.parametrize("name", ROW_TERMS)
def test_row_loglik_agrees_with_finite_differences(name, specs):
    fam = families.FAMILIES[name]
    _, spec = specs[name]
    y, params = _observed(spec), dict(spec.params)
    t = np.linspace(-2.0, 2.0, N) + 0.013
    h = 1e-5
    if fam.two_param:  # a location-scale row: H(t) and its derivatives
        H = lambda u: fam.standard_logpdf(u, params)  # noqa: E731
        parts = H(t)
        np.testing.assert_allclose(parts[1], _fd(lambda u: H(u)[0], t, h), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(parts[2], _fd(lambda u: H(u)[1], t, h), rtol=1e-6, atol=1e-8)
        return
    L = lambda e: fam.row_loglik(e, y, params)  # noqa: E731
    parts = L(t)
    np.testing.assert_allclose(parts[1], _fd(lambda e: L(e)[0], t, h), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(parts[2], _fd(lambda e: L(e)[1], t, h), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(fam.row_loglik(t, y, params, derivatives=0)[0], parts[0])


@pytest.mark.parametrize("name", ONE_COORD)
def test_one_coordinate_bounds_enclose_sampled_partials(name, specs):
    """``|l''|`` and ``|l'''|`` (finite differences of ``l''``) at points drawn in
    ``[lo, hi]`` lie below :meth:`local_sup` there and below the global bound."""
    fam = families.FAMILIES[name]
    _, spec = specs[name]
    y, params = _observed(spec), dict(spec.params)
    rng = np.random.default_rng(5)
    lo = rng.normal(0.0, 1.5, N)
    hi = lo + rng.uniform(0.05, 1.0, N)
    h = 1e-4
    for _ in range(8):
        eta = lo + (hi - lo) * rng.random(N)
        d2 = np.abs(fam.row_loglik(eta, y, params)[2])
        d3 = np.abs(_fd(lambda e: fam.row_loglik(e, y, params)[2], eta, h))
        for m, d in ((2, d2), (3, d3)):
            bound = fam.local_sup(m, lo, hi, y=y, **params)
            assert np.all(d <= bound * (1 + 1e-6) + 1e-7), (m, (d - bound).max())
            if fam.global_bound:
                scale, sup_params = fam.global_sup_args(params)
                sup_params = _scalars(sup_params)
                factor = 1.0 if scale is None else np.abs(scale) ** m
                glob = fam.sup_derivative(m, **sup_params) * factor
                assert np.all(d <= glob * (1 + 1e-6) + 1e-7), (m, (d - glob).max())


SEVERAL = [n for n in NAMES if families.FAMILIES[n].box_bound]


@pytest.mark.parametrize("name", SEVERAL)
def test_box_bounds_enclose_the_partials_at_sampled_points(name, specs):
    """:func:`local_supd` over a box is at least its value at points drawn in the box
    (point enclosures are the partials up to rounding: the per-family tests check them
    against autodiff)."""
    fam = families.FAMILIES[name]
    _, spec = specs[name]
    y, params = _observed(spec), _scalars(spec.params)
    rng = np.random.default_rng(6)
    d = fam.n_coords
    centre = {2: [0.3, 0.2], 3: [0.3, 0.2, 0.5]}[d]
    lows = [c + rng.normal(0.0, 0.5, N) for c in centre]
    highs = [lo + rng.uniform(0.02, 0.4, N) for lo in lows]
    for m in (2, 3):
        box = local_supd(name, m, lows, highs, y=y, **params)
        for _ in range(4):
            point = [lo + (hi - lo) * rng.random(N) for lo, hi in zip(lows, highs)]
            at = local_supd(name, m, point, point, y=y, **params)
            assert np.all(np.isfinite(box)) and box.shape == at.shape
            assert np.all(at <= box * (1 + 1e-9) + 1e-12), (m, (at - box).max())


STRUCTURED = [n for n in NAMES if families.FAMILIES[n].structure_bound]


def _directional(f, m, h):
    """The m-th derivative of ``f`` at 0 by central differences (``m`` 2 or 3)."""
    if m == 2:
        return (f(h) - 2.0 * f(0.0) + f(-h)) / h**2
    return (f(2 * h) - 2.0 * f(h) + 2.0 * f(-h) - f(-2 * h)) / (2.0 * h**3)


@pytest.mark.parametrize("name", STRUCTURED)
def test_row_constants_enclose_the_rows_partials_at_sampled_points(name, specs):
    """Rows of another structure: the whitened region constants of
    :func:`~pymc_subsample.engine.glm.glm_psi` (the family's ``row_constants`` from what
    its structure's reader computes) bound ``|d^(k+1)/dt^(k+1) l_i(q_hat + L (z + t u))|``,
    the model's own row log-likelihoods by finite differences, at whitened points ``z``
    drawn in the ball and unit directions ``u``, for ``k = 1, 2``."""
    from pymc_subsample.engine import LikelihoodEngine

    model, spec = specs[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = LikelihoodEngine(model)
    q_hat = engine.initial_q()
    d, radius = q_hat.size, 1.5
    L = 0.3 * np.eye(d)
    rows = np.arange(N)
    rng = np.random.default_rng(7)
    for order, h in ((1, 1e-3), (2, 1e-2)):
        psi = glm.glm_psi(engine, spec, order, q_hat, whiten=L, radius=radius)
        assert psi.shape == (N,) and np.all(np.isfinite(psi)) and np.all(psi > 0)
        for _ in range(6):
            z = rng.standard_normal(d)
            z *= (radius - 0.05) * rng.random() / np.linalg.norm(z)
            u = rng.standard_normal(d)
            u /= np.linalg.norm(u)
            at = np.abs(_directional(
                lambda t: engine.loglik(q_hat + L @ (z + t * u), rows), order + 1, h))
            assert np.all(at <= psi * (1 + 1e-6) + 1e-5), (order, (at - psi).max())
