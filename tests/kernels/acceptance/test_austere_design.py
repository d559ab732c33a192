"""Tests for the error analysis (Sec. 5.1) and test design (Sec. 5.2) of Austerity MH.

Monte Carlo comparisons use 4 standard errors plus a stated allowance for the DP's model
approximations (z for t, Gaussian random walk) and discretisation.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from scipy import special

from pymc_subsample.kernels.acceptance.austere_design import AusterityDesign, design_austerity_test
from pymc_subsample.kernels.acceptance.austere_dp import sequential_test_dp, sequential_test_error
from pymc_subsample.kernels.acceptance.austere_error import standardized_mean
from pymc_subsample.kernels.acceptance.austere import austere_test
from tests.conftest import PermutationSampler

#: pure NumPy numerics: CI runs them on Python 3.11 only (see pyproject's markers)
pytestmark = pytest.mark.numerics


def simulate(n, m, epsilon, mu_std, reps, seed, sigma=0.01):
    """Run the kernel on a finite Gaussian population with a known mu_std (Fig. 1)."""
    base = np.random.default_rng(seed).standard_normal(n)
    base = (base - base.mean()) / base.std()  # population sd exactly 1 (ddof=0)
    log_u = math.log(0.5)
    mu0 = log_u / n  # log_ratio_o1 = 0
    lv = mu0 + mu_std * sigma / math.sqrt(n - 1) + sigma * base
    if mu_std == 0:
        lv = lv + 1e-13  # mu_std = 0+: the exact decision is accept
    assert standardized_mean(lv.mean(), lv.std(), mu0, n) == pytest.approx(mu_std, abs=1e-6)
    rng = np.random.default_rng(seed + 1)
    wrong = np.empty(reps)
    used = np.empty(reps)
    for r in range(reps):
        res = austere_test(
            rng, lambda rows: lv[rows], n, 0.0, epsilon=epsilon, batch_size=m, log_u=log_u,
            sampler=PermutationSampler(n, rng),
        )
        wrong[r] = not res.accept
        used[r] = res.data_used / n
    return wrong, used


# --------------------------------------------------------------------------------------
# DP vs simulation (Fig. 1 of the paper)
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "n, m, epsilon, mu_std",
    [
        (10_000, 500, 0.05, 0.0),
        (10_000, 500, 0.05, 1.5),
        (10_000, 500, 0.05, 4.0),
        (10_000, 500, 0.05, 8.0),
        (20_000, 300, 0.01, 0.0),
        (20_000, 300, 0.01, 3.0),
        (20_000, 300, 0.2, 2.0),
    ],
)
def test_dp_matches_simulation(n, m, epsilon, mu_std):
    reps = 2000
    wrong, used = simulate(n, m, epsilon, mu_std, reps, seed=int(100 * mu_std) + m)
    err_dp, use_dp = sequential_test_error(mu_std, n, m, epsilon)
    se_e = max(wrong.std(ddof=1), 0.02) / math.sqrt(reps)
    se_u = used.std(ddof=1) / math.sqrt(reps)
    assert abs(wrong.mean() - err_dp) <= 4 * se_e + 0.005
    assert abs(used.mean() - use_dp) <= 4 * se_u + 0.005


# --------------------------------------------------------------------------------------
# DP internal consistency
# --------------------------------------------------------------------------------------
def direct_drift_dp(n, m, epsilon, mu_std, n_grid=1500):
    """Independent brute-force DP: drifted walk on a uniform midpoint grid per stage."""
    ns = np.arange(m, n, m)
    tau = ns / (n - ns)
    c = special.stdtrit(ns - 1.0, 1.0 - epsilon)
    kap = mu_std * np.sqrt(tau)
    err = special.ndtr(-c[0] - kap[0])
    h = 2 * c[0] / n_grid
    x = -c[0] + h * (np.arange(n_grid) + 0.5)
    dens = np.exp(-0.5 * (x - kap[0]) ** 2) / math.sqrt(2 * math.pi)  # t_1 ~ N(kappa_1, 1)
    use = m / n
    for j in range(1, ns.size):
        mass = dens * h
        use += mass.sum() * m / n
        a = math.sqrt(tau[j - 1] / tau[j])
        s = math.sqrt(1 - tau[j - 1] / tau[j])
        b = kap[j] * s * s
        err += (mass * special.ndtr((-c[j] - a * x - b) / s)).sum()
        hj = 2 * c[j] / n_grid
        y = -c[j] + hj * (np.arange(n_grid) + 0.5)
        d = (y[:, None] - a * x[None, :] - b) / s
        dens = np.exp(-0.5 * d * d) @ mass / (s * math.sqrt(2 * math.pi))
        x = y
        h = hj
    use += (dens * h).sum() * (n - ns[-1]) / n
    return err, use


@pytest.mark.parametrize("epsilon", [0.01, 0.1])
def test_girsanov_dp_matches_direct_drift_dp(epsilon):
    n, m = 10_000, 500
    dp = sequential_test_dp(n, m, epsilon)
    for mu in (0.0, 0.7, 2.0, 5.0):
        e_ref, u_ref = direct_drift_dp(n, m, epsilon, mu, n_grid=600)
        e, u = dp.evaluate(mu)
        assert abs(e - e_ref) < 1e-5 and abs(u - u_ref) < 1e-5


def test_merged_stages_match_unmerged_dp():
    # 399 checks: unmerged DP is affordable; merging (BGK correction) must agree closely.
    n, m = 200_000, 500
    mus = np.array([0.0, 0.5, 2.0, 5.0, 20.0])
    for eps in (0.01, 0.05, 0.2):
        e0, u0 = sequential_test_dp(n, m, eps, merge_step=0.0).evaluate(mus)
        dp = sequential_test_dp(n, m, eps)
        assert dp.n_stages < dp.n_checks
        e1, u1 = dp.evaluate(mus)
        assert np.max(np.abs(e1 - e0)) < 1e-3
        assert np.max(np.abs(u1 - u0)) < 2e-3


def test_quadrature_converged():
    dp = sequential_test_dp(10**6, 500, 0.05)
    dp2 = sequential_test_dp(10**6, 500, 0.05, n_nodes=2 * dp.n_nodes)
    mus = np.array([0.0, 1.0, 10.0, 100.0])
    for a, b in zip(dp.evaluate(mus), dp2.evaluate(mus)):
        assert np.max(np.abs(a - b)) < 1e-7


def test_error_and_data_use_properties():
    n, m = 10**6, 500
    mus = np.array([0.0, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 1e3, 1e5])
    prev_e0 = 0.0
    prev_u0 = 1.0
    for eps in (0.001, 0.01, 0.05, 0.2, 0.4):
        dp = sequential_test_dp(n, m, eps)
        e, u = dp.evaluate(mus)
        e_neg, u_neg = dp.evaluate(-mus)
        assert np.allclose(e, e_neg) and np.allclose(u, u_neg)  # even in mu_std
        assert np.all(np.diff(e) <= 1e-12) and np.all(np.diff(u) <= 1e-12)  # E(0) worst
        assert 0 < e[0] <= 0.5 and e[-1] < 1e-12
        assert np.all(u >= m / n - 1e-12) and np.all(u <= 1) and u[-1] == pytest.approx(m / n)
        assert e[0] >= prev_e0 and u[0] <= prev_u0  # more error, less data as eps grows
        prev_e0, prev_u0 = e[0], u[0]
        # mu_std = 0: each decision is a coin flip, so E(0) = (1 - P(reach N)) / 2 >= eps
        assert e[0] >= eps * (1 - 1e-3)
    # exact settings
    assert sequential_test_dp(n, m, 0.0).exact
    e, u = sequential_test_error([0.0, 3.0], 1000, 1000, 0.1)
    assert np.all(e == 0) and np.all(u == 1)


def test_interpolation_table_accurate():
    dp = sequential_test_dp(10**7, 500, 0.05)
    z = np.concatenate([[0.0], np.geomspace(1e-3, 3e4, 200)])
    e, u = dp.evaluate(z)
    ei, ui = dp.interpolate(z)
    assert np.max(np.abs(ei - e)) < 2e-3 and np.max(np.abs(ui - u)) < 2e-3


def test_acceptance_error_matches_u_quadrature():
    """eq. 6 via exact integration against the interpolant vs Gauss quadrature in u."""
    n = 10**6
    dp = sequential_test_dp(n, 500, 0.05)
    rng = np.random.default_rng(3)
    sd = rng.uniform(5e-4, 1e-2, 6)
    mean = rng.normal(0, 1e-5, 6)
    o1 = rng.normal(0, 1, 6)
    delta, use = dp.acceptance_error(mean, sd, o1)
    gx, gw = np.polynomial.legendre.leggauss(200)
    lx, lw = np.polynomial.laguerre.laggauss(80)
    for p in range(6):
        z1 = float(standardized_mean(mean[p], sd[p], -o1[p] / n, n))
        lam = n * sd[p] / math.sqrt(n - 1)
        # mu_std(u) = z1 + w / lam with w = -log u ~ Exp(1); split where mu_std = 0
        w0 = max(-z1 * lam, 0.0)
        pieces = []
        if w0 > 0:
            w = 0.5 * w0 * (gx + 1)
            pieces.append((w, 0.5 * w0 * gw * np.exp(-w)))
        pieces.append((w0 + lx, lw * np.exp(-w0)))
        d_ref = u_ref = 0.0
        for w, wt in pieces:
            z = z1 + w / lam
            e, u = dp.evaluate(z)
            d_ref += np.sum(wt * -np.sign(z) * e)
            u_ref += np.sum(wt * u)
        assert abs(delta[p] - d_ref) < 2e-3
        assert abs(use[p] - u_ref) < 2e-3


def test_standardized_mean():
    z = standardized_mean(0.002, 0.1, 0.001, 10_001)
    assert z == pytest.approx(0.001 * 100 / 0.1)
    z = standardized_mean([0.0, 1.0, -1.0], 0.0, 0.0, 100)
    assert z[0] == 0 and z[1] == np.inf and z[2] == -np.inf
    with pytest.raises(ValueError, match="l_sd"):
        standardized_mean(0.0, -1.0, 0.0, 100)


# --------------------------------------------------------------------------------------
# design
# --------------------------------------------------------------------------------------
def test_worst_case_design_satisfies_bound_and_is_optimal():
    n = 10**6
    d = design_austerity_test(n, max_error=0.4)
    assert isinstance(d, AusterityDesign) and d.feasible and d.criterion == "worst-case"
    assert d.error <= 0.4 and 0 < d.expected_data_use < 1
    assert d.batch_size in d.batch_sizes and d.epsilon in d.epsilons
    # the choice is the cheapest feasible grid point
    feas = d.error_grid <= 0.4
    assert d.expected_data_use == pytest.approx(d.data_use_grid[feas].min())
    # the reported numbers are the DP's E(0) and pi_bar(0)
    e, u = sequential_test_error(0.0, n, d.batch_size, d.epsilon)
    assert d.error == pytest.approx(float(e)) and d.expected_data_use == pytest.approx(float(u))
    # a looser bound cannot cost more data
    d2 = design_austerity_test(n, max_error=0.45)
    assert d2.expected_data_use <= d.expected_data_use
    # infeasible bound -> exact MH
    d3 = design_austerity_test(n, max_error=1e-4)
    assert not d3.feasible and d3.epsilon == 0.0 and d3.expected_data_use == 1.0


def test_designs_compare_and_hash_by_their_choice():
    n = 10_000
    kw = dict(max_error=0.3, batch_sizes=[500, 1000], epsilons=[0.01, 0.05, 0.1])
    d, again = design_austerity_test(n, **kw), design_austerity_test(n, **kw)
    assert d is not again and d == again and hash(d) == hash(again)
    assert d != design_austerity_test(n, max_error=1e-4, batch_sizes=[500], epsilons=[0.1])
    assert "error_grid" not in repr(d)


def test_worst_case_design_bound_holds_in_simulation():
    n = 10_000
    d = design_austerity_test(n, max_error=0.3, batch_sizes=[500, 1000], epsilons=[0.01, 0.05, 0.1])
    wrong, _ = simulate(n, d.batch_size, d.epsilon, 0.0, 1500, seed=77)
    assert wrong.mean() <= 0.3 + 4 * wrong.std(ddof=1) / math.sqrt(wrong.size)


def _trial_pairs(n, n_pairs, seed):
    # Per-pair statistics of l_i as a random-walk trial run of a Gaussian-mean model
    # would give: sd proportional to the step, mean ~ -step^2/2 around the mode.
    rng = np.random.default_rng(seed)
    step = rng.normal(0, 1.0 / math.sqrt(n), n_pairs) * 2.0
    l_sd = np.abs(step) + 1e-12
    l_mean = -0.5 * step**2 + step * rng.normal(0, 1 / math.sqrt(n), n_pairs)
    o1 = np.zeros(n_pairs)
    return l_mean, l_sd, o1


def test_average_designs_use_less_data_than_worst_case():
    n = 10**6
    l_mean, l_sd, o1 = _trial_pairs(n, 100, seed=1)
    bound = 0.02
    ms, eps = [100, 500, 2000], [0.001, 0.002, 0.005, 0.01, 0.05, 0.2]
    worst = design_austerity_test(n, max_error=bound, batch_sizes=ms, epsilons=eps)
    avg = design_austerity_test(n, max_error=bound, pair_stats=(l_mean, l_sd, o1),
                                batch_sizes=ms, epsilons=eps)
    assert avg.criterion == "average-acceptance" and avg.feasible and avg.error <= bound
    assert avg.expected_data_use < worst.expected_data_use
    # check the reported value
    dp = sequential_test_dp(n, avg.batch_size, avg.epsilon)
    delta, use = dp.acceptance_error(l_mean, l_sd, o1)
    assert avg.error == pytest.approx(np.abs(delta).mean())
    assert avg.expected_data_use == pytest.approx(use.mean())
    # samples of mu_std over (theta, theta', u): average decision error
    u = np.random.default_rng(2).random(l_mean.size)
    z = standardized_mean(l_mean, l_sd, (np.log(u) - o1) / n, n)
    avg2 = design_austerity_test(n, max_error=bound, mu_std=z, batch_sizes=ms, epsilons=eps)
    assert avg2.criterion == "average-decision" and avg2.error <= bound
    assert avg2.expected_data_use < worst.expected_data_use


def test_design_fast_for_huge_n():
    t0 = time.perf_counter()
    d = design_austerity_test(10**8, max_error=0.45, batch_sizes=[500, 2000], epsilons=[0.01, 0.05])
    assert time.perf_counter() - t0 < 20
    assert d.feasible and d.error <= 0.45


@pytest.mark.slow
def test_design_full_grid_huge_n_in_seconds():
    t0 = time.perf_counter()
    d = design_austerity_test(10**8, max_error=0.45)
    l_mean, l_sd, o1 = _trial_pairs(10**8, 100, seed=4)
    d2 = design_austerity_test(10**8, max_error=0.01, pair_stats=(l_mean, l_sd, o1))
    assert time.perf_counter() - t0 < 60
    assert d.feasible and d.error <= 0.45
    assert d2.error <= 0.01 and d2.expected_data_use <= 1.0


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"max_error": 0.0}, "max_error"),
        ({"max_error": 1.5}, "max_error"),
        ({"batch_sizes": [1]}, "batch_sizes"),
        ({"batch_sizes": []}, "batch_sizes"),
        ({"epsilons": [0.6]}, "epsilon"),
        ({"epsilons": [0.0]}, "epsilons"),
        ({"mu_std": [np.nan]}, "mu_std"),
        ({"mu_std": [1.0], "pair_stats": ([0.0], [1.0], [0.0])}, "mu_std"),
        ({"pair_stats": (1.0, 2.0)}, "pair_stats"),
    ],
)
def test_design_argument_validation(kwargs, name):
    with pytest.raises(ValueError, match=name):
        design_austerity_test(10_000, **kwargs)


@pytest.mark.parametrize(
    "args, kwargs, name",
    [
        ((1, 10, 0.1), {}, "n_total"),
        ((100, 1, 0.1), {}, "batch_size"),
        ((100, 10, 0.5), {}, "epsilon"),
        ((100, 10, 0.1), {"batch_increment": 0}, "batch_increment"),
        ((100, 10, 0.1), {"merge_step": -1}, "merge_step"),
    ],
)
def test_dp_argument_validation(args, kwargs, name):
    with pytest.raises(ValueError, match=name):
        sequential_test_dp(*args, **kwargs)


def test_batch_increment_in_dp_matches_simulation():
    n, m, inc, eps = 10_000, 600, 300, 0.05
    dp = sequential_test_dp(n, m, eps, batch_increment=inc)
    base = np.random.default_rng(9).standard_normal(n)
    base = (base - base.mean()) / base.std()
    mu_std = 2.0
    log_u = math.log(0.5)
    lv = log_u / n + mu_std * 0.01 / math.sqrt(n - 1) + 0.01 * base
    rng = np.random.default_rng(10)
    reps = 1500
    res = [
        austere_test(rng, lambda r: lv[r], n, 0.0, epsilon=eps, batch_size=m,
                     batch_increment=inc, log_u=log_u, sampler=PermutationSampler(n, rng))
        for _ in range(reps)
    ]
    wrong = np.array([not r.accept for r in res], float)
    used = np.array([r.data_used for r in res]) / n
    e, u = dp.evaluate(mu_std)
    assert abs(wrong.mean() - e) <= 4 * max(wrong.std(), 0.02) / math.sqrt(reps) + 0.005
    assert abs(used.mean() - u) <= 4 * used.std() / math.sqrt(reps) + 0.005
