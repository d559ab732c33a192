"""The steps' set-up in a few passes over the data (issue "Fast against the NUTS users
would really pick"): passes counted, not timed (timings are in
``benchmarks/setup_passes.py``); the warm start's subsamples; the bound constants riding
on the mode search's last pass; compiled functions reused between constructions, and
reused correctly when another step's variables enter through new shared variables."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.center import find_center, random_subset, warm_sizes
from pymc_subsample.engine import evaluate
from pymc_subsample.engine.glm import detect_glm
from pymc_subsample.engine.predictor import affine_likelihood
from pymc_subsample.steps import REGISTRY as STEP_REGISTRY
from pymc_subsample.steps.scalable_bounds import BoundsRider, predictor_bounds
from pymc_subsample.steps.setup import CENTER_TOL

STEPS = tuple(STEP_REGISTRY)


def _logistic(n, d=4, seed=3, intercept=True):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    coef = rng.normal(0.0, 0.7, d)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(X @ coef + 0.2)))).astype(np.int64)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 2.0, shape=d)
        lin = pm.math.dot(X, b)
        if intercept:
            lin = pm.Normal("a", 0.0, 2.0) + lin
        pm.Bernoulli("y", logit_p=lin, observed=y)
    return model


@pytest.fixture(scope="module")
def tall():
    """Tall enough for both warm-start subsamples (20,000 and 60,000 rows), after which
    one full Newton step lands within the centre's tolerance (at 200,000 rows, with
    one subsample of a tenth, it takes a second: correct, one pass dearer)."""
    return _logistic(600_000)


class PassCounter:
    """Counts the passes over all rows (every one goes through ``map_rows``)."""

    def __init__(self, monkeypatch):
        self.count = 0
        original = evaluate.BatchFunctions.map_rows

        def counted(engine, fn, consume, chunk=65536):
            self.count += 1
            return original(engine, fn, consume, chunk)

        monkeypatch.setattr(evaluate.BatchFunctions, "map_rows", counted)


@pytest.mark.parametrize("name", STEPS)
def test_every_step_is_set_up_in_three_passes_over_the_data(tall, name, monkeypatch):
    """On an ordinary GLM a step reads all rows three times when it is built: the data
    check, the Newton pass at the warm start, and the pass at the centre (which also
    gives the control variates' sums and, for ScalableMH, the bound constants).
    ScalableMH reads them twice: its data check rides on the first of the mode search's
    passes (``DeferredRowCheck``). A second construction on the same model compiles
    nothing."""
    cls = getattr(pms, name)
    with tall, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cls()  # compiles
        passes = PassCounter(monkeypatch)
        made = []
        original = evaluate.BatchFunctions.function
        monkeypatch.setattr(evaluate.BatchFunctions, "function",
                            lambda self, *a, **k: made.append(a) or original(self, *a, **k))
        step = cls()
    assert passes.count == (2 if name == "ScalableMH" else 3), passes.count
    assert step.center.converged and step.center.n_passes == 2
    assert made == []


def test_the_pass_count_test_catches_an_extra_pass(tall, monkeypatch):
    """The counter sees a separate bound pass (ScalableMH built without the rider)."""
    import pymc_subsample.steps.scalable_setup as scalable_setup

    monkeypatch.setattr(scalable_setup, "BoundsRider", lambda *a, **k: None)
    with tall, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        passes = PassCounter(monkeypatch)
        pms.ScalableMH()
    assert passes.count == 3


def test_centre_within_its_tolerance_of_the_mode(tall):
    """The steps' centre (tolerance CENTER_TOL) lies within about sqrt(2 CENTER_TOL)
    Laplace sds of the mode found to 1e-10, in the whitened norm."""
    with tall, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pms.AustereMH()
    lik = affine_likelihood(step.engine, detect_glm(tall), step.engine.initial_q())[1]
    exact = find_center(lik, tol=1e-10)
    mean, cov = exact.laplace()
    diff = np.linalg.solve(np.linalg.cholesky(cov), step.center.theta - exact.theta)
    assert np.linalg.norm(diff) < 1.5 * np.sqrt(2 * CENTER_TOL)
    # and the Laplace means agree far closer (one more Newton step from the centre)
    assert np.linalg.norm(np.linalg.solve(np.linalg.cholesky(cov),
                                          step._laplace_mean - mean)) < 0.01


def test_warm_sizes_and_random_subsets():
    assert warm_sizes(40_000, 20_000) == []
    assert warm_sizes(100_000, 20_000) == [20_000]
    assert warm_sizes(10**6, 20_000) == [20_000, 100_000]
    sizes = warm_sizes(10**9, 20_000)
    assert sizes[-1] == 1 << 21 and all(b <= 8 * a for a, b in zip(sizes, sizes[1:]))
    rng = np.random.default_rng(1)
    for n, m in ((10**7, 200_000), (1000, 300), (10**6, 60_000)):
        rows = random_subset(rng, n, m)
        assert rows.size == m and np.unique(rows).size == m
        assert rows.min() >= 0 and rows.max() < n
    # uniform: each row's inclusion frequency over repeated subsets (and of a prefix)
    hits = np.zeros(200_000)
    first = np.zeros(200_000)
    for seed in range(40):
        rows = random_subset(np.random.default_rng(seed), 200_000, 50_001)
        hits[rows] += 1
        first[rows[:10_000]] += 1
    p, k = 50_001 / 200_000, 40
    for counts, prob in ((hits, p), (first, 10_000 / 200_000)):
        blocks = counts.reshape(100, -1).sum(axis=1)  # 2,000 rows per block
        expect = 2_000 * k * prob
        assert np.all(np.abs(blocks - expect) < 5 * np.sqrt(expect))


@pytest.mark.parametrize("region", ["auto", None])
def test_bound_rider_gives_the_bounds_of_a_separate_pass(tall, region):
    """Riding on a Hessian pass at the centre, the rider's bound constants and sums equal
    those of :func:`predictor_bounds`' own pass with the same whitening; and a
    deliberately different whitening gives different constants (the comparison can
    fail)."""
    with tall, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eng = pms.LikelihoodEngine()
    spec = detect_glm(tall)
    vmap, lik = affine_likelihood(eng, spec, eng.initial_q())
    centre = find_center(lik, tol=1e-8)
    cov = centre.laplace()[1]
    rider = BoundsRider(vmap, spec, 2, centre.theta, cov, region)
    lik.full_loglik_hessian(centre.theta, rider=rider)
    proxy, bounds = rider.finish()
    proxy_ref, bounds_ref = predictor_bounds(vmap, spec, 2, centre.theta, cov, region)
    np.testing.assert_array_equal(bounds.psi, bounds_ref.psi)
    np.testing.assert_allclose(proxy.grad(proxy_ref.center), proxy_ref.grad(proxy_ref.center),
                               rtol=1e-10, atol=1e-8)
    other = predictor_bounds(vmap, spec, 2, centre.theta, 2.0 * cov, region)[1]
    assert not np.allclose(other.psi, bounds.psi)


def test_second_construction_reuses_compiled_functions(tall):
    """The engine of a second step holds the very functions of the first (same model
    graph, no other step's variables)."""
    with tall, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one, two = pms.AustereMH(), pms.AustereMH()
    shared = set(one.engine._compiled) & set(two.engine._compiled)
    assert shared and all(one.engine._compiled[k] is two.engine._compiled[k] for k in shared)


def test_reused_functions_read_each_steps_own_shared_variables():
    """In a CompoundStep another step's variable enters through the step's own shared
    variable. A function reused from an earlier step must read the new step's, not the
    old one's (it is copied with the shared variables swapped): the log-likelihood of
    the second engine follows its own shared value."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(500)
    with pm.Model() as model:
        k = pm.Bernoulli("k", 0.5)
        b = pm.Normal("b", 0.0, 1.0)
        pm.Normal("y", b * x + 3.0 * k, 1.0, observed=x + rng.standard_normal(500))
    with model:
        e1 = pms.LikelihoodEngine(vars=[b])
        e2 = pms.LikelihoodEngine(vars=[b])
    (s1,), (s2,) = e1.shared.values(), e2.shared.values()
    assert s1 is not s2
    q, rows = np.array([0.3]), np.arange(10)
    s1.set_value(np.array(0, dtype=s1.get_value().dtype))
    s2.set_value(np.array(1, dtype=s2.get_value().dtype))
    l1, l2 = e1.loglik(q, rows), e2.loglik(q, rows)
    assert not np.allclose(l1, l2)
    s2.set_value(np.array(0, dtype=s2.get_value().dtype))
    np.testing.assert_allclose(e2.loglik(q, rows), l1)
