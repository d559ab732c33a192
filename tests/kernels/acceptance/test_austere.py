"""Tests for the Austerity MH kernel (Korattikara et al. 2014, Algorithm 1, eqs 2-5).

Statistical tolerances are a fixed number of Monte Carlo standard errors (4 se, two-sided
false-alarm rate ~6e-5 per check) plus, where a model is compared with the kernel, a small
allowance for the model's approximations (t vs z statistic, Gaussian walk).
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import special

from pymc_subsample.kernels.acceptance.austere_dp import sequential_test_dp
from pymc_subsample.kernels.acceptance.austere import AustereResult, austere_test
from pymc_subsample.kernels.sampling.rows import RowSampler
from tests.conftest import REPO as ROOT
from tests.conftest import PermutationSampler

#: pure NumPy numerics: CI runs them on Python 3.11 only (see pyproject's markers)
pytestmark = pytest.mark.numerics


def gaussian_mean_population(n, seed, step=0.01):
    """l_i for a Gaussian-mean model x_i ~ N(0.3, 1), theta = x_bar, theta' = theta + step."""
    x = np.random.default_rng(seed).normal(0.3, 1.0, n)
    th = x.mean()
    thp = th + step
    return (thp - th) * (x - 0.5 * (th + thp))  # log N(x|thp,1) - log N(x|th,1)


def exact_accept(log_u, o1, lvals):
    return log_u < o1 + lvals.sum()


# --------------------------------------------------------------------------------------
# acceptance probability vs exact MH
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "epsilon, use_rowsampler", [(0.01, False), (0.05, True), (0.2, False)]
)
def test_acceptance_frequency_matches_exact_within_designed_error(epsilon, use_rowsampler):
    n, m, reps = 20000, 500, 2500
    lvals = gaussian_mean_population(n, seed=5)
    o1 = 0.3
    f = lambda rows: lvals[rows]  # noqa: E731
    rng = np.random.default_rng(11)
    diffs = np.empty(reps)
    for r in range(reps):
        log_u = math.log1p(-rng.random())
        sampler = None if use_rowsampler else PermutationSampler(n, rng)
        res = austere_test(
            rng, f, n, o1, epsilon=epsilon, batch_size=m, log_u=log_u, sampler=sampler
        )
        diffs[r] = float(res.accept) - float(exact_accept(log_u, o1, lvals))
    # Common u for approximate and exact decisions: the estimate of Delta (eq. 6)
    # has standard error sd(diffs)/sqrt(reps).
    delta_hat = diffs.mean()
    se = max(diffs.std(ddof=1), 0.05) / math.sqrt(reps)
    dp = sequential_test_dp(n, m, epsilon)
    delta_dp, _ = dp.acceptance_error(lvals.mean(), lvals.std(), o1)
    # The acceptance probability is off by no more than the designed error ...
    assert abs(delta_hat) <= abs(float(delta_dp)) + 4 * se
    # ... and the DP predicts that error (Sec. 5.1) up to MC error and model error.
    assert abs(delta_hat - float(delta_dp)) <= 4 * se + 0.005
    # The worst-case error E(0) bounds it too.
    assert abs(delta_hat) <= float(dp.error(0.0)) + 4 * se


def test_data_used_decreases_as_epsilon_grows():
    n, m, reps = 20000, 500, 600
    lvals = gaussian_mean_population(n, seed=6)
    f = lambda rows: lvals[rows]  # noqa: E731
    log_us = np.log1p(-np.random.default_rng(3).random(reps))
    means = []
    for eps in (0.0, 0.01, 0.05, 0.1, 0.3):
        rng = np.random.default_rng(21)  # common random numbers across epsilons
        used = [
            austere_test(
                rng, f, n, 0.0, epsilon=eps, batch_size=m, log_u=lu,
                sampler=PermutationSampler(n, rng),
            ).data_used
            for lu in log_us
        ]
        means.append(np.mean(used))
    assert means[0] == n
    assert all(a > b for a, b in zip(means, means[1:])), means


# --------------------------------------------------------------------------------------
# epsilon = 0 is exact MH
# --------------------------------------------------------------------------------------
def test_epsilon_zero_is_exact_mh_draw_for_draw():
    rng_pop = np.random.default_rng(8)
    n_agree = 0
    for trial in range(40):
        n = int(rng_pop.integers(1, 3000))
        lvals = rng_pop.normal(rng_pop.normal(0, 1e-3), rng_pop.uniform(1e-4, 1e-1), n)
        o1 = float(rng_pop.normal(0, 1))
        total = o1 + lvals.sum()
        f = lambda rows, lv=lvals: lv[rows]  # noqa: E731
        # u near the exact threshold as well as uniform draws
        log_us = list(np.log1p(-rng_pop.random(20)))
        if total < 0:
            log_us += [total - 1e-9, total + 1e-9]
        for lu in log_us:
            res = austere_test(rng_pop, f, n, o1, epsilon=0.0, batch_size=97, log_u=lu)
            assert res.accept == bool(lu < total)
            assert res.exact and res.data_used == n
            n_agree += 1
        # drawn u: the first draw of rng is u, exactly as an exact MH step would use it
        seed = int(rng_pop.integers(2**32))
        res = austere_test(np.random.default_rng(seed), f, n, o1, epsilon=0.0, batch_size=50)
        lu = math.log1p(-np.random.default_rng(seed).random())
        assert res.log_u == lu and res.accept == bool(lu < total)
        # with a RowSampler the rows come in random order; the decision is the same
        rng_s = np.random.default_rng(seed)
        res2 = austere_test(
            rng_s, f, n, o1, epsilon=0.0, batch_size=50, log_u=lu,
            sampler=RowSampler(n, np.random.default_rng(seed + 1)),
        )
        assert res2.accept == res.accept
    assert n_agree > 800


def test_full_data_decision_is_exact_for_positive_epsilon():
    # batch_size >= N: the first stage already holds all rows, so no t-test is done
    lvals = gaussian_mean_population(300, seed=1)
    f = lambda rows: lvals[rows]  # noqa: E731
    rng = np.random.default_rng(0)
    for _ in range(50):
        lu = math.log1p(-rng.random())
        res = austere_test(rng, f, 300, 0.1, epsilon=0.3, batch_size=400, log_u=lu)
        assert res.exact and res.data_used == 300 and res.n_batches == 1
        assert res.accept == exact_accept(lu, 0.1, lvals)


# --------------------------------------------------------------------------------------
# non-finite inputs
# --------------------------------------------------------------------------------------
def _no_data(rows):
    raise AssertionError("data must not be touched")


@pytest.mark.parametrize(
    "o1, exact, nonfinite",
    [(-math.inf, True, False), (math.nan, False, True), (math.inf, False, True)],
)
def test_nonfinite_log_ratio_uses_no_data(o1, exact, nonfinite):
    res = austere_test(np.random.default_rng(0), _no_data, 10_000, o1, epsilon=0.05)
    assert res.accept is False
    assert res.data_used == 0 and res.n_batches == 0
    assert res.exact is exact and res.nonfinite is nonfinite
    # also with epsilon = 0 and a given u
    res = austere_test(np.random.default_rng(0), _no_data, 10, o1, epsilon=0.0, log_u=-0.5)
    assert res.accept is False and res.data_used == 0


def test_nonfinite_rows():
    n = 1000
    base = np.random.default_rng(2).normal(0, 0.01, n)
    rng = np.random.default_rng(3)
    for bad, exact in [(-np.inf, True), (np.nan, False), (np.inf, False)]:
        lv = base.copy()
        lv[::2] = bad  # every batch contains one
        res = austere_test(rng, lambda r, lv=lv: lv[r], n, 0.0, epsilon=0.05, batch_size=100)
        assert res.accept is False and res.n_batches == 1 and res.data_used == 100
        assert res.exact is exact and res.nonfinite is (not exact)


def test_log_u_minus_inf_accepts():
    lv = np.random.default_rng(2).normal(0, 0.01, 1000)
    f = lambda r: lv[r]  # noqa: E731
    res = austere_test(np.random.default_rng(0), f, 1000, 0.0, epsilon=0.05, batch_size=100, log_u=-math.inf)
    assert res.accept and res.data_used == 100
    res = austere_test(np.random.default_rng(0), f, 1000, 0.0, epsilon=0.0, log_u=-math.inf)
    assert res.accept and res.exact


# --------------------------------------------------------------------------------------
# mechanics
# --------------------------------------------------------------------------------------
def test_batches_are_without_replacement_and_grow_by_increment():
    n = 5003
    lv = np.random.default_rng(4).normal(0, 1.0, n)  # noisy: runs to the end
    seen = []

    def f(rows):
        seen.append(rows.copy())
        return lv[rows]

    res = austere_test(
        np.random.default_rng(9), f, n, 0.0, epsilon=1e-12, batch_size=700,
        batch_increment=450, log_u=math.log(0.5),
    )
    sizes = [s.size for s in seen]
    assert sizes[0] == 700 and all(s == 450 for s in sizes[1:-1]) and sum(sizes) == n
    allrows = np.concatenate(seen)
    assert np.unique(allrows).size == n and allrows.dtype == np.int64
    assert res.exact and res.n_batches == len(seen) and res.data_used == n


def test_statistics_reported_follow_eqs_4_5():
    n, m = 50_000, 500
    lv = gaussian_mean_population(n, seed=2)
    rows_seen = []

    def f(rows):
        rows_seen.append(rows)
        return lv[rows]

    res = austere_test(np.random.default_rng(1), f, n, 0.0, epsilon=0.2, batch_size=m, log_u=-2.0)
    assert not res.exact
    x = lv[np.concatenate(rows_seen)]
    k = x.size
    assert k == res.data_used
    s = x.std(ddof=1) / math.sqrt(k) * math.sqrt(1 - (k - 1) / (n - 1))  # eq. 4
    mu0 = -2.0 / n
    assert res.mu_0 == pytest.approx(mu0)
    assert res.mean == pytest.approx(x.mean(), rel=1e-12, abs=1e-15)
    assert res.sd == pytest.approx(s, rel=1e-9)
    assert res.t == pytest.approx((x.mean() - mu0) / s, rel=1e-9)  # eq. 5
    assert res.delta == pytest.approx(special.stdtr(k - 1, -abs(res.t)))
    assert res.delta < 0.2 and res.accept == (res.mean > mu0)


def test_zero_spread_population_decides_at_first_batch():
    lv = np.full(10_000, 2e-4)
    res = austere_test(np.random.default_rng(0), lambda r: lv[r], 10_000, 0.0, epsilon=0.05,
                       batch_size=200, log_u=math.log(0.5))
    assert res.accept and res.data_used == 200  # mean 2e-4 > mu_0 = log(0.5)/N


def test_reproducible_and_rng_only():
    lv = gaussian_mean_population(20_000, seed=3)
    f = lambda r: lv[r]  # noqa: E731
    a = [austere_test(np.random.default_rng(5), f, 20_000, 0.0, epsilon=0.05) for _ in range(3)]
    assert len({(r.accept, r.data_used, r.log_u) for r in a}) == 1
    np.random.seed(0)
    state = np.random.get_state()[1].copy()
    austere_test(np.random.default_rng(5), f, 20_000, 0.0, epsilon=0.05)
    assert np.array_equal(state, np.random.get_state()[1])


def test_return_first_batch():
    lv = gaussian_mean_population(5000, seed=3)
    res = austere_test(np.random.default_rng(5), lambda r: lv[r], 5000, 0.0, epsilon=0.05,
                       batch_size=300, return_first_batch=True)
    assert isinstance(res, AustereResult)
    assert res.first_batch.shape == (300,) and np.all(np.isin(res.first_batch, lv))


# --------------------------------------------------------------------------------------
# argument validation
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"epsilon": -0.1}, "epsilon"),
        ({"epsilon": 0.5}, "epsilon"),
        ({"epsilon": math.nan}, "epsilon"),
        ({"epsilon": "a"}, "epsilon"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 2.5}, "batch_size"),
        ({"batch_size": True}, "batch_size"),
        ({"batch_increment": 0}, "batch_increment"),
        ({"n_total": 0}, "n_total"),
        ({"log_u": 0.1}, "log_u"),
        ({"log_u": math.nan}, "log_u"),
        ({"log_ratio_o1": "x"}, "log_ratio_o1"),
        ({"loglik_diff": 3}, "loglik_diff"),
        ({"sampler": "wrong-n"}, "sampler"),
        ({"sampler": "used"}, "sampler"),
        ({"loglik_diff": "bad-shape"}, "loglik_diff"),
    ],
)
def test_argument_validation(kwargs, name):
    lv = np.zeros(100)
    args = {
        "rng": np.random.default_rng(0), "loglik_diff": lambda r: lv[r], "n_total": 100,
        "log_ratio_o1": 0.0,
    }
    args.update(kwargs)
    if args.get("sampler") == "wrong-n":
        args["sampler"] = RowSampler(99, np.random.default_rng(0))
    elif args.get("sampler") == "used":
        args["sampler"] = RowSampler(100, np.random.default_rng(0))
        args["sampler"].draw(3)
    if args["loglik_diff"] == "bad-shape":
        args["loglik_diff"] = lambda r: np.zeros(r.size + 1)
    rng, f, n, o1 = (args.pop(k) for k in ("rng", "loglik_diff", "n_total", "log_ratio_o1"))
    with pytest.raises(ValueError, match=name):
        austere_test(rng, f, n, o1, **args)


# --------------------------------------------------------------------------------------
# layering
# --------------------------------------------------------------------------------------
def test_kernels_do_not_import_pymc_or_pytensor():
    code = (
        "import sys\n"
        "import pymc_subsample.kernels.acceptance.austere, pymc_subsample.kernels.acceptance.austere_design\n"
        "bad = [m for m in sys.modules if m in ('pymc', 'pytensor', 'arviz') "
        "or m.startswith(('pymc.', 'pytensor.', 'arviz.'))]\n"
        "assert not bad, bad\n"
    )
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env)
    for path in ("pymc_subsample/kernels/acceptance/austere.py",
                 "pymc_subsample/kernels/acceptance/austere_design.py",
                 "pymc_subsample/kernels/acceptance/austere_dp.py",
                 "pymc_subsample/kernels/acceptance/austere_error.py"):
        src = (ROOT / path).read_text()
        for line in src.splitlines():
            s = line.strip()
            if s.startswith(("import ", "from ")):
                assert "pymc" not in s.replace("pymc_subsample", "") and "pytensor" not in s, s
