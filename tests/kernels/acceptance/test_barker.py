"""Tests for the minibatch Barker test (Seita et al. 2017) and its correction table.

Statistical checks use fixed seeds; tolerances are ``4`` Monte Carlo standard errors
(two-sided ~6e-5 per check) plus the approximation error the method allows.
"""

from __future__ import annotations

import ast
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy import special, stats
from scipy.special import expit

from pymc_subsample.kernels.acceptance.barker import BarkerResult, barker_test, clt_error_bound
from pymc_subsample.kernels.acceptance.barker_correction import (
    DEFAULT_BUILD_SETTINGS,
    DEFAULT_TABLE_PATH,
    CorrectionDistribution,
    build_correction,
    default_correction,
)
from pymc_subsample.kernels.sampling.rows import RowSampler
from tests.conftest import REPO as ROOT

#: pure NumPy numerics: CI runs them on Python 3.11 only (see pyproject's markers)
pytestmark = pytest.mark.numerics

PAPER_CDF_ERROR = 8.9e-4  # Seita et al. 2017, Table 3, N=4000, sigma=1, lambda=10
# What the shipped minimax table achieves (5.02e-6), with a 10% margin.
SHIPPED_CDF_ERROR_MAX = 5.6e-6
LOGISTIC_VAR = math.pi**2 / 3


# --------------------------------------------------------------------- correction
@pytest.fixture(scope="module")
def corr():
    return default_correction()


def test_table_file_small_and_cached(corr):
    assert DEFAULT_TABLE_PATH.exists()
    assert DEFAULT_TABLE_PATH.stat().st_size < 200 * 1024
    assert default_correction() is corr
    assert CorrectionDistribution.load() is corr


def test_table_is_normalised_nonnegative_symmetric(corr):
    p = corr.probs
    assert p.shape == (DEFAULT_BUILD_SETTINGS["n_points"],)
    assert np.all(p >= 0)
    assert p.sum() == pytest.approx(1.0, abs=1e-15)
    assert math.fsum(p) == pytest.approx(1.0, abs=1e-15)
    np.testing.assert_array_equal(p, p[::-1])
    assert corr.grid[0] == pytest.approx(-20.0) and corr.grid[-1] == pytest.approx(20.0)
    assert corr.sigma == 1.0
    assert abs(corr.mean) < 1e-12
    # N(0,1) + X_corr ~ logistic  =>  Var X_corr = pi^2/3 - 1 (= 2.28987)
    assert corr.var == pytest.approx(LOGISTIC_VAR - 1.0, abs=1e-3)


def test_table_cdf_error(corr):
    assert corr.cdf_error < SHIPPED_CDF_ERROR_MAX
    assert corr.cdf_error < PAPER_CDF_ERROR / 100
    # the stored value is what the table actually achieves
    assert corr.compute_cdf_error() == pytest.approx(corr.cdf_error, rel=1e-6)
    # ...also at arbitrary off-lattice points and far in the tails
    x = np.concatenate([np.random.default_rng(0).uniform(-30, 30, 1000), [-60.0, 45.0]])
    err = np.abs(corr.convolved_cdf(x) - expit(x))
    assert err.max() <= corr.cdf_error + 1e-9


def test_correction_samples_make_logistic(corr):
    rng = np.random.default_rng(20170811)
    n = 200_000
    z = rng.standard_normal(n) + corr.sample(rng, n)
    ks = stats.kstest(z, "logistic")
    # 1.95 / sqrt(n) is the KS critical value at level ~0.001
    assert ks.statistic < corr.cdf_error + 1.95 / math.sqrt(n)
    assert ks.pvalue > 1e-3
    # X_corr alone: mean 0, variance pi^2/3 - 1 (4 standard errors)
    xc = corr.sample(rng, n)
    assert abs(xc.mean()) < 4 * math.sqrt(corr.var / n)
    se_var = math.sqrt((np.mean((xc - xc.mean()) ** 4) - xc.var() ** 2) / n)
    assert xc.var() == pytest.approx(corr.var, abs=4 * se_var)


def test_correction_sampling_api(corr):
    a = corr.sample(np.random.default_rng(5))
    b = corr.sample(np.random.default_rng(5))
    assert isinstance(a, float) and a == b
    arr = corr.sample(np.random.default_rng(5), (3, 4))
    assert arr.shape == (3, 4)
    assert arr[0, 0] == a  # one uniform per draw, inverse CDF
    q = np.linspace(0, 1, 1001)
    np.testing.assert_allclose(corr.cdf(corr.ppf(q)), q, atol=1e-12)
    x = np.linspace(-25, 25, 2001)
    assert np.all(np.diff(corr.cdf(x)) >= 0)
    # pdf integrates to 1 (piecewise constant, exact on a fine midpoint rule)
    xs = np.arange(-20.5, 20.5, corr.h / 4) + corr.h / 8
    assert np.sum(corr.pdf(xs)) * corr.h / 4 == pytest.approx(1.0, abs=1e-12)


def test_save_load_roundtrip(corr, tmp_path):
    path = tmp_path / "c.npz"
    corr.save(path)
    back = CorrectionDistribution.load(path)
    np.testing.assert_array_equal(back.probs, corr.probs)
    assert back.cdf_error == corr.cdf_error
    assert back.settings == corr.settings == DEFAULT_BUILD_SETTINGS


def test_rebuild_fast_check(corr):
    # The shipped settings on a coarser grid (h = 0.1): same method, same tolerance,
    # and the same distribution as the shipped table up to the grid resolution.
    settings = dict(DEFAULT_BUILD_SETTINGS, n_points=401)
    small = build_correction(**settings)
    assert small.cdf_error <= 1.01 * settings["tol"]
    assert small.probs.sum() == pytest.approx(1.0, abs=1e-15)
    x = np.linspace(-20, 20, 4001)
    assert np.abs(small.cdf(x) - corr.cdf(x)).max() < 2e-3


@pytest.mark.slow
def test_rebuild_reproduces_shipped_file(corr):
    rebuilt = build_correction(**DEFAULT_BUILD_SETTINGS)
    np.testing.assert_allclose(rebuilt.probs, corr.probs, rtol=0, atol=1e-9)
    assert rebuilt.cdf_error == pytest.approx(corr.cdf_error, rel=1e-3)


def test_paper_least_squares_construction():
    # Equation (15) with the paper's sigma=1, lambda=10 on a 2001-point grid: errors of
    # the order the paper's Table 3 reports (1.3e-3 for its N=2000 grid).
    c = build_correction("lstsq", n_points=2001, lam=10.0)
    assert np.all(c.probs >= 0)
    assert c.probs.sum() == pytest.approx(1.0, abs=1e-15)
    assert 5e-4 < c.cdf_error < 5e-3


def test_build_script_runs(tmp_path):
    out = tmp_path / "t.npz"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for cmd in ([sys.executable, str(ROOT / "benchmarks/build_barker_correction.py")],):
        r = subprocess.run(
            cmd + ["--n-points", "201", "--tol", "1e-5", "--output", str(out)],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )
        assert r.returncode == 0, r.stderr
        c = CorrectionDistribution.load(out)
        assert c.probs.size == 201 and c.cdf_error < 1.1e-5
        out.unlink()


def test_build_argument_errors():
    with pytest.raises(ValueError, match="method"):
        build_correction("nnls")
    with pytest.raises(ValueError, match="n_points"):
        build_correction(n_points=400)
    with pytest.raises(ValueError, match="sigma"):
        build_correction(sigma=2.0)


# --------------------------------------------------------------------- the test
N = 5000


@pytest.fixture(scope="module")
def gauss_terms():
    """l_i for a N(theta, 1) mean model at fixed theta, theta' (N = 5000 rows)."""
    x = np.random.default_rng(1).normal(0.3, 1.0, N)
    theta, theta_p = 0.3, 0.304
    return (theta_p - theta) * (x - 0.5 * (theta + theta_p))


def _freq(rng, l, reps, **kw):
    o1 = kw.pop("log_ratio_o1", 0.0)
    res = [barker_test(rng, lambda rows: l[rows], l.size, o1, **kw) for _ in range(reps)]
    acc = np.mean([r.accept for r in res])
    return acc, res


@pytest.mark.parametrize(
    "batch_size, batch_increment, delta, temperature, o1",
    [
        (100, None, 0.6, 1.0, 0.0),  # grows from 100 to ~400-500 rows
        (500, None, 0.6, 1.0, 0.5),  # decides on the first batch
        (50, 25, math.inf, 2.0, -0.3),  # variance rule only, tempered likelihood
    ],
)
def test_acceptance_matches_exact_barker(gauss_terms, batch_size, batch_increment, delta, temperature, o1):
    l = gauss_terms
    exact_delta = l.sum() / temperature + o1  # prior/proposal part is not tempered
    p_exact = expit(exact_delta)
    reps = 12_000
    rng = np.random.default_rng(batch_size)
    acc, res = _freq(
        rng, l, reps, batch_size=batch_size, batch_increment=batch_increment,
        delta=delta, temperature=temperature, log_ratio_o1=o1,
    )
    mc = 4 * math.sqrt(p_exact * (1 - p_exact) / reps)
    corr_err = default_correction().cdf_error
    # Corollary 2: |P(accept) - S(Delta)| <= eps (<= delta) + table error
    assert abs(acc - p_exact) <= min(delta, 1.0) + corr_err + mc
    # For these near-Gaussian terms the actual error is far below the Berry-Esseen
    # bound: the frequency matches the exact Barker test to Monte Carlo precision.
    assert abs(acc - p_exact) <= mc + 0.005
    used = np.array([r.data_used for r in res])
    inc = batch_size if batch_increment is None else batch_increment
    assert np.all((used - batch_size) % inc == 0)
    assert used.max() < N and not any(r.exact for r in res)
    assert all(r.delta_var < 1.0 and r.clt_error <= delta for r in res)
    nb = np.array([r.n_batches for r in res])
    np.testing.assert_array_equal(used, batch_size + (nb - 1) * inc)


def test_skewed_terms_reasonable(gauss_terms):
    # Exponential data -> skewed l_i; the variance rule alone still gives a frequency
    # close to the exact Barker test (looser practical tolerance).
    x = np.random.default_rng(7).exponential(1.0, N)
    l = 0.005 * (x - 1.0) + 0.0001
    p_exact = expit(l.sum())
    reps = 8000
    acc, res = _freq(np.random.default_rng(8), l, reps, batch_size=200, delta=math.inf)
    mc = 4 * math.sqrt(p_exact * (1 - p_exact) / reps)
    assert abs(acc - p_exact) <= mc + 0.01
    assert all(math.isfinite(r.clt_error) for r in res)


def test_full_data_is_exact_barker(gauss_terms):
    l = gauss_terms
    o1 = 0.2
    p_exact = expit(l.sum() + o1)
    # (a) batch_size = N: one batch, exact; (b) delta = 0.01 with N = 5000 rows and the
    # Lemma 3 bound: it is >= 6.4/sqrt(n), can never reach 0.01, so the batch grows to N.
    for kw, nb, reps in (
        (dict(batch_size=N), 1, 8000),
        (dict(batch_size=500, delta=0.01, error="lemma3"), 10, 1500),
    ):
        acc, res = _freq(np.random.default_rng(11), l, reps, log_ratio_o1=o1, **kw)
        assert all(r.exact and r.data_used == N and r.n_batches == nb for r in res)
        assert all(r.clt_error == 0.0 and r.delta_var == 0.0 for r in res)
        assert res[0].delta_star == pytest.approx(l.sum() + o1, abs=1e-10)
        assert abs(acc - p_exact) <= 4 * math.sqrt(p_exact * (1 - p_exact) / reps)


def test_exact_path_uses_logistic_draw(gauss_terms):
    # With all rows in one batch the decision is Delta + X_log > 0, with X_log the
    # standard logistic drawn right after the rows.
    l = gauss_terms
    rng = np.random.default_rng(3)
    r = barker_test(rng, lambda rows: l[rows], N, 0.0, batch_size=N)
    rng2 = np.random.default_rng(3)
    RowSampler(N, rng2).draw(N)
    assert r.accept == (l.sum() + rng2.logistic() > 0)


def test_reproducible_and_result_type(gauss_terms):
    l = gauss_terms
    f = lambda rows: l[rows]  # noqa: E731
    a = barker_test(np.random.default_rng(9), f, N, 0.0, batch_size=500, delta=0.6)
    b = barker_test(np.random.default_rng(9), f, N, 0.0, batch_size=500, delta=0.6)
    assert isinstance(a, BarkerResult) and a == b
    assert isinstance(a.accept, bool) and isinstance(a.exact, bool)
    assert isinstance(a.data_used, int)


def test_estimates_formulas(gauss_terms):
    # delta_star, delta_var (with finite-population correction) and clt_error for the
    # rows actually drawn, recomputed by hand.
    l = gauss_terms
    T, o1, b = 1.5, 0.25, 700
    rng = np.random.default_rng(4)
    sampler = RowSampler(N, np.random.default_rng(44))
    r = barker_test(rng, lambda rows: l[rows], N, o1, batch_size=b, delta=0.7,
                    temperature=T, sampler=sampler, error="lemma3")
    assert r.data_used == b and not r.exact
    lt = l[sampler.drawn()] / T
    assert r.delta_star == pytest.approx(N * lt.mean() + o1, rel=1e-12)
    s2 = N**2 * (1 - b / N) * lt.var(ddof=1) / b
    assert r.delta_var == pytest.approx(s2, rel=1e-9)
    z = np.abs(lt - lt.mean()) / lt.std(ddof=1)
    eps = (6.4 * np.mean(z**3) + 2 * np.mean(z)) / math.sqrt(b)
    assert r.clt_error == pytest.approx(eps, rel=1e-9)
    assert clt_error_bound(lt) == pytest.approx(eps, rel=1e-9)
    # scale invariance of the standardised bound
    assert clt_error_bound(1e-3 * lt) == pytest.approx(eps, rel=1e-9)
    assert clt_error_bound(lt[:1]) == math.inf
    assert clt_error_bound(np.ones(10)) == math.inf


# ------------------------------------------------ error="acceptance" (the default)
def _r_max(corr):
    """Largest density of X_corr (piecewise constant p_j / h): the Lipschitz constant."""
    return float(np.max(corr.probs)) / corr.h


def _psi(t):
    # integral of the standard normal cdf: psi' = Phi
    return t * special.ndtr(t) + np.exp(-0.5 * t * t) / math.sqrt(2.0 * math.pi)


def _accept_prob_given(delta_star, delta_var, corr, chunk=256):
    """``P(Delta* + X_nc + X_corr > 0 | Delta*, s^2)`` computed exactly for the table.

    ``X_nc ~ N(0, sigma^2 - s^2)`` and ``X_corr`` uniform within the table's cells, so
    ``P(X_nc + X_corr <= z) = sum_j p_j (sd / h) [psi((z - c_j + h/2) / sd) -
    psi((z - c_j - h/2) / sd)]``. Averaging this over the test's draws of ``Delta*``
    estimates ``P(accept)`` with far less noise than the 0/1 decisions (Rao-Blackwell).
    """
    keep = corr.probs > 1e-14
    p, c, h = corr.probs[keep], corr.grid[keep], corr.h
    d = np.asarray(delta_star, dtype=float)
    s2 = np.asarray(delta_var, dtype=float)
    out = np.empty(d.size)
    for i in range(0, d.size, chunk):
        sd = np.sqrt(corr.sigma**2 - s2[i : i + chunk, None])
        z = -d[i : i + chunk, None] - c[None, :]
        cdf = sd / h * (_psi((z + 0.5 * h) / sd) - _psi((z - 0.5 * h) / sd))
        out[i : i + chunk] = 1.0 - cdf @ p
    return out


def test_default_error_mode_is_acceptance(gauss_terms):
    l = gauss_terms
    f = lambda rows: l[rows]  # noqa: E731
    a = barker_test(np.random.default_rng(2), f, N, 0.1, batch_size=100)
    b = barker_test(np.random.default_rng(2), f, N, 0.1, batch_size=100, error="acceptance")
    c = barker_test(np.random.default_rng(2), f, N, 0.1, batch_size=100, error="lemma3")
    assert a == b
    # delta = 0.01 with N = 5000: the Lemma 3 bound forces the full data, the
    # acceptance-probability bound stops after about a quarter of the rows.
    assert c.exact and not a.exact and a.data_used < N // 2


def test_acceptance_error_formula(gauss_terms):
    # eps = r_max * s * m3 / sqrt(n): r_max the largest density of the correction table,
    # s = sqrt(delta_var) (with the finite-population correction), m3 the standardised
    # third absolute moment of the batch (n - 1 divisor for the sd, n for the mean).
    corr = default_correction()
    l = gauss_terms
    T, o1, b = 1.5, 0.25, 700
    sampler = RowSampler(N, np.random.default_rng(44))
    r = barker_test(np.random.default_rng(4), lambda rows: l[rows], N, o1, batch_size=b,
                    delta=0.5, temperature=T, sampler=sampler)
    assert r.data_used == b and r.n_batches == 1 and not r.exact
    lt = l[sampler.drawn()] / T
    s2 = N**2 * (1 - b / N) * lt.var(ddof=1) / b
    assert r.delta_var == pytest.approx(s2, rel=1e-9)
    m3 = np.mean((np.abs(lt - lt.mean()) / lt.std(ddof=1)) ** 3)
    eps = _r_max(corr) * math.sqrt(s2) * m3 / math.sqrt(b)
    assert r.clt_error == pytest.approx(eps, rel=1e-9)
    assert 0.3 < _r_max(corr) < 0.6  # the Lipschitz constant in use (0.4695 for C_1)
    # with s < 1 and r_max < 1 it is far below the Lemma 3 value on the same rows
    assert r.clt_error < 0.1 * clt_error_bound(lt)


def _skewed_terms():
    # centred exponential data: skewness 2, E|Z|^3 = 12/e - 2 ~ 2.41 for the terms
    x = np.random.default_rng(7).exponential(1.0, N)
    return 0.004 * (x - 1.0) + 0.00005


@pytest.mark.parametrize(
    "kind, batch_size, o1",
    [
        ("gauss", 100, 0.5),
        ("gauss", 500, -0.4),
        ("gauss", 1000, 0.5),  # first batch too small for eps <= delta: stops at 2000
        ("skewed", 200, 0.2),
    ],
)
def test_acceptance_mode_matches_exact_barker(gauss_terms, kind, batch_size, o1):
    # (a) delta = 0.01 with the default error="acceptance": the test stops well before
    # N and its acceptance probability is within delta (+ the table's cdf_error) of the
    # exact Barker test's S(Delta), Delta = sum(l) / T + o1.
    corr = default_correction()
    delta = 0.01
    l = gauss_terms if kind == "gauss" else _skewed_terms()
    p_exact = expit(l.sum() + o1)
    reps = 5000
    acc, res = _freq(np.random.default_rng(1000 + batch_size), l, reps, batch_size=batch_size,
                     delta=delta, log_ratio_o1=o1)
    used = np.array([r.data_used for r in res])
    # the test actually stops early, always, and on the grid batch_size + k * batch_size
    assert not any(r.exact for r in res)
    assert used.max() < N and used.mean() < 0.5 * N
    assert np.all(used % batch_size == 0)
    assert all(0.0 < r.clt_error <= delta and 0.0 < r.delta_var < 1.0 for r in res)
    # (1) the 0/1 decisions: within delta + cdf_error + 4 Monte Carlo standard errors
    mc = math.sqrt(p_exact * (1 - p_exact) / reps)
    assert abs(acc - p_exact) <= delta + corr.cdf_error + 4 * mc
    # (2) the exact conditional acceptance probability given (Delta*, s^2), averaged over
    # the same draws: an unbiased estimate of P(accept) with ~3x less noise, so the
    # Monte Carlo allowance is below delta and the check is meaningful at that level.
    g = _accept_prob_given([r.delta_star for r in res], [r.delta_var for r in res], corr)
    se_rb = g.std(ddof=1) / math.sqrt(reps)
    assert 4 * se_rb < delta
    assert abs(g.mean() - p_exact) <= delta + corr.cdf_error + 4 * se_rb
    # (3) the decisions use X_nc ~ N(0, 1 - s^2) and X_corr as the conditional says
    assert abs(acc - g.mean()) <= 4 * math.sqrt(np.mean(g * (1 - g)) / reps)


def test_acceptance_mode_clt_error_below_delta_sweep():
    # (b) over a sweep of term distributions, scales, batch sizes, deltas and
    # temperatures: a decision that is not exact has 0 < clt_error <= delta and
    # 0 < s^2 < 1; an exact one used all N rows and reports clt_error = delta_var = 0.
    rng = np.random.default_rng(123)
    n_total = 4000
    base = {
        "gauss": rng.standard_normal(n_total),
        "exponential": rng.exponential(1.0, n_total) - 1.0,
        "student_t3": rng.standard_t(3, n_total),
        "uniform": rng.uniform(-1.0, 1.0, n_total),
    }
    n_early = n_exact = 0
    for name, z in base.items():
        for scale in (0.0005, 0.005, 0.05):  # N * sd(l) ~ 2, 20, 200
            l = scale * z
            for batch_size in (20, 300):
                for delta in (0.003, 0.01, 0.05):
                    for T in (1.0, 4.0):
                        r = barker_test(rng, lambda rows: l[rows], n_total, 0.1, batch_size=batch_size,
                                        delta=delta, temperature=T)
                        if r.exact:
                            n_exact += 1
                            assert r.data_used == n_total and r.clt_error == 0.0 and r.delta_var == 0.0
                            assert r.delta_star == pytest.approx(l.sum() / T + 0.1, abs=1e-9)
                        else:
                            n_early += 1
                            assert 0.0 < r.clt_error <= delta, (name, scale, batch_size, delta, T)
                            assert 0.0 < r.delta_var < 1.0
                            assert r.data_used < n_total
    assert n_early > 100 and n_exact >= 5  # both branches were exercised


@pytest.mark.parametrize("bad", ["", "Acceptance", "lemma_3", "wasserstein", None, 1, ["lemma3"]])
def test_invalid_error_mode(bad):
    # (c) anything but the two names raises, before any data is read or the proposal
    # ratio is looked at.
    def loglik_diff(rows):  # pragma: no cover - must not be called
        raise AssertionError("data read before the argument check")

    for o1 in (0.0, -np.inf):
        with pytest.raises(ValueError, match="'error' parameter .*'acceptance' or 'lemma3'"):
            barker_test(np.random.default_rng(0), loglik_diff, 100, o1, batch_size=10, error=bad)


@pytest.mark.xfail(
    strict=True,
    reason="known limitation (reported): the batch moments are plug-in estimates. When a "
    "few rows carry large l_i, a batch that misses them sees a tiny variance, and the "
    "acceptance-mode bound (proportional to s) accepts it at once; the Lemma 3 bound's "
    "floor n >= (6.4/delta)^2 reads every row here.",
)
def test_acceptance_mode_rare_large_terms():
    # 5 rows of 5000 carry l_i = 0.5, the rest balance them: Delta = 0, S(Delta) = 1/2.
    # A first batch of 100 rows usually contains none of them (P = 0.9), so it reports
    # Delta* = -2.5 with s^2 ~ 3e-7 and stops: P(accept) ~ 0.12 instead of 0.5.
    rng = np.random.default_rng(5)
    l = np.full(N, -5 * 0.5 / N) + 1e-6 * rng.standard_normal(N)
    l[:5] += 0.5
    l -= l.mean()
    reps = 400
    acc, res = _freq(np.random.default_rng(6), l, reps, batch_size=100, delta=0.01)
    assert abs(acc - expit(l.sum())) <= 0.01 + 4 * math.sqrt(0.25 / reps)


def test_nonfinite_terms():
    f_ok = lambda rows: np.zeros(rows.size)  # noqa: E731
    rng = np.random.default_rng(0)
    r = barker_test(rng, f_ok, 100, -np.inf, batch_size=10)
    assert not r.accept and r.data_used == 0 and r.n_batches == 0
    assert r.exact and not r.nonfinite
    r = barker_test(rng, f_ok, 100, np.nan, batch_size=10)
    assert not r.accept and r.nonfinite
    # +inf cannot be decided (zero density at the current state): reject, never accept
    r = barker_test(rng, f_ok, 100, np.inf, batch_size=10)
    assert not r.accept and r.nonfinite and r.data_used == 0
    r = barker_test(rng, lambda rows: np.full(rows.size, -np.inf), 100, 0.0, batch_size=10)
    assert not r.accept and r.data_used == 10 and r.exact and not r.nonfinite
    r = barker_test(rng, lambda rows: np.full(rows.size, np.nan), 100, 0.0, batch_size=10)
    assert not r.accept and r.nonfinite
    r = barker_test(rng, lambda rows: np.full(rows.size, np.inf), 100, 0.0, batch_size=10)
    assert not r.accept and r.nonfinite
    # one +inf among finite terms also rejects
    def one_inf(rows):
        out = np.zeros(rows.size)
        out[0] = np.inf
        return out
    r = barker_test(rng, one_inf, 100, 5.0, batch_size=10)
    assert not r.accept and r.nonfinite


def test_reports_lemma3_bound_and_noise():
    """The paper's Lemma 3 bound is reported beside the acceptance-error estimate, and the
    returned noise reproduces the decision: accept iff Delta* + noise > 0."""
    rng = np.random.default_rng(3)
    l = rng.normal(0.0, 1e-4, 50_000)
    for seed in range(20):
        r = barker_test(np.random.default_rng(seed), lambda rows: l[rows], l.size, 0.3,
                        batch_size=500, delta=0.01)
        assert not r.exact
        assert r.clt_error <= 0.01
        assert r.lemma3_error >= 6.4 / math.sqrt(r.data_used) * 0.9  # Lemma 3's floor
        assert r.accept == (r.delta_star + r.noise > 0)
    r = barker_test(np.random.default_rng(0), lambda rows: l[rows][: rows.size], 300, 0.0,
                    batch_size=300)
    assert r.exact and r.accept == (r.delta_star + r.noise > 0)


def test_constant_terms_grow_to_exact():
    # No variability in any minibatch: the CLT bound is undefined, the test ends exact.
    r = barker_test(np.random.default_rng(0), lambda rows: np.zeros(rows.size), 300, 0.0,
                    batch_size=100, delta=math.inf)
    assert r.exact and r.data_used == 300 and r.n_batches == 3


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(n_total=0), "'n_total' parameter"),
        (dict(n_total=10.0), "'n_total' parameter"),
        (dict(batch_size=0), "'batch_size' parameter"),
        (dict(batch_size=101), r"'batch_size' parameter .*n_total=100"),
        (dict(batch_size=2.5), "'batch_size' parameter"),
        (dict(batch_size=True), "'batch_size' parameter"),
        (dict(batch_increment=0), "'batch_increment' parameter"),
        (dict(delta=0.0), "'delta' parameter"),
        (dict(delta=-1.0), "'delta' parameter"),
        (dict(delta=float("nan")), "'delta' parameter"),
        (dict(temperature=0.0), "'temperature' parameter"),
        (dict(temperature=math.inf), "'temperature' parameter"),
    ],
)
def test_argument_validation(kw, match):
    args = dict(n_total=100, batch_size=10)
    args.update(kw)
    n_total = args.pop("n_total")
    with pytest.raises(ValueError, match=match):
        barker_test(np.random.default_rng(0), lambda rows: np.zeros(rows.size), n_total, 0.0, **args)


def test_bad_loglik_and_sampler():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="one value per row"):
        barker_test(rng, lambda rows: np.zeros(3), 100, 0.0, batch_size=10)
    used = RowSampler(100, rng)
    used.draw(5)
    with pytest.raises(ValueError, match="'sampler' parameter"):
        barker_test(rng, lambda rows: np.zeros(rows.size), 100, 0.0, batch_size=10, sampler=used)
    with pytest.raises(ValueError, match="'sampler' parameter"):
        barker_test(rng, lambda rows: np.zeros(rows.size), 100, 0.0, batch_size=10,
                    sampler=RowSampler(50, rng))


# --------------------------------------------------------------------- layering
KERNEL_FILES = ["barker.py", "barker_correction.py"]


@pytest.mark.parametrize("name", KERNEL_FILES)
def test_kernel_source_has_no_pymc_import(name):
    tree = ast.parse((ROOT / "pymc_subsample/kernels/acceptance" / name).read_text())
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mods.add(node.module.split(".")[0])
    assert not mods & {"pymc", "pytensor", "arviz"}


def test_kernel_import_does_not_load_pymc():
    # Register pymc_subsample as a bare package so that whatever its __init__ may
    # import later does not mask what the kernel modules themselves import.
    code = (
        "import sys, types\n"
        f"pkg = types.ModuleType('pymc_subsample'); pkg.__path__ = [{str(ROOT / 'pymc_subsample')!r}]\n"
        "sys.modules['pymc_subsample'] = pkg\n"
        "import pymc_subsample.kernels.acceptance.barker, pymc_subsample.kernels.acceptance.barker_correction\n"
        "pymc_subsample.kernels.acceptance.barker_correction.default_correction()\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pymc', 'pytensor'))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
