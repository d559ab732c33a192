"""Tests of pymc_subsample.proposals (pure NumPy/SciPy; no PyMC needed).

Statistical checks run a plain NumPy Metropolis-Hastings chain with the exact log target
plus the proposal's ``log_ratio`` on a correlated 3-d Gaussian and compare the sample
mean and variance with the truth, within ``Z`` Monte Carlo standard errors estimated by
batch means. All seeds are fixed.
"""

from __future__ import annotations

import ast
import copy
import math
import pickle
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from pymc_subsample.proposals import (
    PCN,
    PROPOSAL_NAMES,
    Langevin,
    PreconditionedRandomWalk,
    Proposal,
    RandomWalk,
    ReversibleRandomWalk,
    UserProposal,
    as_proposal,
    make_proposal,
)
from pymc_subsample.testing import ess
from tests.conftest import REPO

PACKAGE_PATH = REPO / "pymc_subsample" / "proposals"

Z = 4.5  # allowed deviation in Monte Carlo standard errors

# ------------------------------------------------------------------------------------
# target: correlated 3-d Gaussian
# ------------------------------------------------------------------------------------

MU = np.array([1.0, -2.0, 0.5])
SD = np.array([1.0, 0.5, 2.0])
CORR = np.array([[1.0, 0.7, 0.3], [0.7, 1.0, 0.5], [0.3, 0.5, 1.0]])
SIGMA = CORR * np.outer(SD, SD)
PREC = np.linalg.inv(SIGMA)
D = 3


def logp(q):
    r = q - MU
    return -0.5 * float(r @ PREC @ r)


class GaussGrad:
    """Minibatch gradient of a Gaussian-likelihood posterior equal to N(MU, SIGMA).

    Rows x_i (i < N) have mean exactly MU; with per-row precision PREC / N and a flat
    prior, the posterior is N(MU, SIGMA) and
    grad_fn(q, rows) = (N / m) sum_{i in rows} (PREC / N)(x_i - q) = PREC (mean(x_rows) - q).
    """

    def __init__(self, n_total=500, spread=2.0, seed=7):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((n_total, D)) @ (spread * np.linalg.cholesky(SIGMA)).T
        self.x = x - x.mean(0) + MU
        self.n_total = n_total
        self.calls = []
        self.record = False

    def __call__(self, q, rows):
        if self.record:
            self.calls.append((np.array(q), np.array(rows)))
        return PREC @ (self.x[rows].mean(0) - q)


def mh_chain(prop, q0, n, rng, n_tune=0, log_target=logp):
    """Plain MH with exact log target; tunes for n_tune steps, then samples n."""
    q = np.array(q0, dtype=float)
    lp = log_target(q)
    out = np.empty((n, q.size))
    n_acc = 0
    for i in range(n_tune + n):
        q_new, log_ratio = prop.draw(q, rng)
        lp_new = log_target(q_new) if log_ratio > -math.inf else -math.inf
        accepted = bool(math.log(rng.uniform()) < lp_new - lp + log_ratio)
        if accepted:
            q, lp = q_new, lp_new
        if i < n_tune:
            prop.tune(accepted, q=q)
            if i == n_tune - 1:
                prop.stop_tuning()
        else:
            out[i - n_tune] = q
            n_acc += accepted
    return out, n_acc / max(n, 1)


def moment_errors(draws, mu=MU, var=np.diag(SIGMA), n_batches=40):
    """|estimate - truth| / MCSE (batch means) for the mean and the variance."""
    n = len(draws) // n_batches * n_batches
    x = draws[:n]
    res = []
    for f, truth in ((x, mu), ((x - mu) ** 2, var)):
        bm = f.reshape(n_batches, -1, f.shape[1]).mean(1)
        mcse = bm.std(0, ddof=1) / math.sqrt(n_batches)
        res.append((np.abs(bm.mean(0) - truth) / mcse, mcse))
    return res


def assert_moments(draws, mu=MU, var=np.diag(SIGMA)):
    (zm, se_m), (zv, se_v) = moment_errors(draws, mu, var)
    # the check must be informative: MCSE small compared with the posterior scale
    assert np.all(se_m < 0.1 * np.sqrt(var)), se_m
    assert np.all(se_v < 0.2 * var), se_v
    assert np.all(zm < Z), f"mean off by {zm} MCSE"
    assert np.all(zv < Z), f"variance off by {zv} MCSE"


# ------------------------------------------------------------------------------------
# module hygiene
# ------------------------------------------------------------------------------------


def test_module_imports_neither_pymc_nor_pytensor():
    names = set()
    for path in sorted(PACKAGE_PATH.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
    assert names <= {"__future__", "abc", "copy", "difflib", "inspect", "math", "warnings", "typing", "numpy", "scipy"}, names
    # import the package with pymc_subsample's __init__ (which imports the steps, and so
    # PyMC) replaced by an empty package, and inspect sys.modules: the proposals and the
    # kernels they use load without PyMC or PyTensor
    code = (
        "import sys, types\n"
        "top = types.ModuleType('pymc_subsample')\n"
        f"top.__path__ = [{str(PACKAGE_PATH.parent)!r}]\n"
        "sys.modules['pymc_subsample'] = top\n"
        "import pymc_subsample.proposals\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pymc', 'pytensor')]\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr


# ------------------------------------------------------------------------------------
# MH chains recover the target
# ------------------------------------------------------------------------------------


class ShiftedWalk:
    """An asymmetric user proposal: q' = q + b + s eps (a drifting random walk)."""

    def __init__(self, b, s):
        self.b = np.asarray(b, float)
        self.s = float(s)

    def draw(self, q, rng):
        q_new = q + self.b + self.s * rng.standard_normal(q.size)
        fwd = q_new - q - self.b
        rev = q - q_new - self.b
        return q_new, 0.5 * float(fwd @ fwd - rev @ rev) / self.s**2


REF_MODE = MU + np.array([0.3, -0.2, 0.5])
REF_COV = 1.4 * (np.array([[1.0, 0.5, 0.2], [0.5, 1.0, 0.6], [0.2, 0.6, 1.0]]) * np.outer(SD, SD))


def _make(name):
    """(proposal set up for the target, n_tune, n_draws)."""
    if name == "random_walk":
        return RandomWalk().setup(D), 1000, 40000
    if name == "random_walk_perdim":
        return RandomWalk(scaling=SD).setup(D), 1000, 40000
    if name == "random_walk_adaptcov":
        return RandomWalk(adapt_covariance=True, cov_start=200).setup(D), 2000, 40000
    if name == "preconditioned":
        return PreconditionedRandomWalk().setup(D, cov=REF_COV), 1000, 40000
    if name == "preconditioned_diag":
        return PreconditionedRandomWalk(1.5, adapt=False).setup(D, cov=np.diag(REF_COV)), 0, 40000
    if name == "pcn_fixed":
        return PCN(rho=0.5).setup(D, mode=REF_MODE, cov=REF_COV), 0, 30000
    if name == "pcn_independent":
        return PCN(rho=0.0).setup(D, mode=REF_MODE, cov=REF_COV), 0, 30000
    if name == "pcn_tuned":
        return PCN().setup(D, mode=REF_MODE, cov=6.0 * REF_COV), 1000, 30000
    if name == "langevin":
        g = GaussGrad()
        return Langevin(batch_size=20).setup(D, grad_fn=g, n_total=g.n_total), 1000, 40000
    if name == "langevin_precond":
        g = GaussGrad()
        return Langevin(batch_size=20, precondition=True).setup(D, grad_fn=g, n_total=g.n_total, cov=REF_COV), 1000, 20000
    if name == "user":
        return as_proposal(ShiftedWalk([0.1, -0.05, 0.2], 0.6)).setup(D), 0, 40000
    raise KeyError(name)


CHAIN_CASES = [
    "random_walk",
    "random_walk_perdim",
    "random_walk_adaptcov",
    "preconditioned",
    "preconditioned_diag",
    "pcn_fixed",
    "pcn_independent",
    "pcn_tuned",
    "langevin",
    "langevin_precond",
    "user",
]


SLOW_CHAINS = {"langevin", "langevin_precond"}  # two gradient calls per step


@pytest.mark.parametrize(
    "name", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_CHAINS else c for c in CHAIN_CASES]
)
def test_mh_chain_recovers_gaussian(name):
    prop, n_tune, n = _make(name)
    rng = np.random.default_rng(CHAIN_CASES.index(name) + 100)
    draws, acc = mh_chain(prop, MU + 3 * SD, n, rng, n_tune=n_tune)
    assert 0.05 < acc <= 1.0
    assert_moments(draws)


def test_moment_check_has_power():
    """A pCN chain with the sign of log_ratio flipped must fail the moment check."""
    prop = PCN(rho=0.5).setup(D, mode=REF_MODE, cov=REF_COV)

    class Flipped:
        def draw(self, q, rng):
            q_new, lr = prop.draw(q, rng)
            return q_new, -lr

    draws, _ = mh_chain(as_proposal(Flipped()).setup(D), MU, 30000, np.random.default_rng(5))
    (zm, _), (zv, _) = moment_errors(draws)
    assert max(zm.max(), zv.max()) > 2 * Z


# ------------------------------------------------------------------------------------
# log_ratio: detailed balance and independent density computations
# ------------------------------------------------------------------------------------


@pytest.mark.parametrize("rho", [0.0, 0.3, 0.95])
@pytest.mark.parametrize("diag", [False, True])
def test_pcn_detailed_balance(rho, diag):
    cov = np.diag(np.diag(REF_COV)) if diag else REF_COV
    prop = PCN(rho=rho).setup(D, mode=REF_MODE, cov=np.diag(cov) if diag else cov)
    pi0 = stats.multivariate_normal(REF_MODE, cov)
    rng = np.random.default_rng(11)
    a, b2 = math.sqrt(rho), 1.0 - rho
    for _ in range(20):
        x = MU + rng.standard_normal(D) * 2 * SD
        y, lr = prop.draw(x, rng)
        log_fwd = stats.multivariate_normal(REF_MODE + a * (x - REF_MODE), b2 * cov).logpdf(y)
        log_rev = stats.multivariate_normal(REF_MODE + a * (y - REF_MODE), b2 * cov).logpdf(x)
        # pi0-reversibility of the kernel
        assert pi0.logpdf(x) + log_fwd == pytest.approx(pi0.logpdf(y) + log_rev, abs=1e-8)
        # the returned ratio is the proposal density ratio
        assert lr == pytest.approx(log_rev - log_fwd, abs=1e-8)


@pytest.mark.parametrize("diag", [False, True])
def test_reversible_random_walk_detailed_balance_and_drift(diag):
    """Cornish et al. (2019) eq. 17: reversible with respect to the tangent
    ``exp(g . theta)``, the returned ratio is the proposal density ratio, and the steps'
    mean is the drift ``(c^2 / 2) C g``."""
    cov = np.diag(np.diag(REF_COV)) if diag else REF_COV
    g = np.array([3.0, -1.5, 0.7])
    l = 1.3
    prop = ReversibleRandomWalk(l, adapt=False).setup(
        D, mode=REF_MODE, cov=np.diag(cov) if diag else cov, grad_fn=lambda q: g)
    c2 = l * l / D
    drift = 0.5 * c2 * cov @ g
    rng = np.random.default_rng(12)
    for _ in range(20):
        x = MU + rng.standard_normal(D) * 2 * SD
        y, lr = prop.draw(x, rng)
        log_fwd = stats.multivariate_normal(x + drift, c2 * cov).logpdf(y)
        log_rev = stats.multivariate_normal(y + drift, c2 * cov).logpdf(x)
        assert g @ x + log_fwd == pytest.approx(g @ y + log_rev, abs=1e-8)
        assert lr == pytest.approx(log_rev - log_fwd, abs=1e-8)
    steps = np.array([prop.draw(MU, rng)[0] - MU for _ in range(20000)])
    se = np.sqrt(np.diag(c2 * cov) / len(steps))
    assert np.all(np.abs(steps.mean(0) - drift) < Z * se)
    assert np.linalg.norm(drift) > 10 * np.max(se)  # the drift is visible at this size
    assert "reversible" in PROPOSAL_NAMES and prop.gradient == "surrogate"
    with pytest.raises(ValueError, match="grad_fn"):
        ReversibleRandomWalk().setup(D, mode=REF_MODE, cov=REF_COV)


@pytest.mark.parametrize("rho", [0.0, 0.6])
def test_pcn_draw_distribution(rho):
    prop = PCN(rho=rho).setup(D, mode=REF_MODE, cov=REF_COV)
    rng = np.random.default_rng(3)
    x = np.array([0.0, 1.0, -1.0])
    ys = np.array([prop.draw(x, rng)[0] for _ in range(20000)])
    mean = REF_MODE + math.sqrt(rho) * (x - REF_MODE)
    cov = (1 - rho) * REF_COV
    se = np.sqrt(np.diag(cov) / len(ys))
    assert np.all(np.abs(ys.mean(0) - mean) < Z * se)
    np.testing.assert_allclose(np.cov(ys.T), cov, atol=0.05 * np.max(np.diag(cov)))


@pytest.mark.parametrize("precondition", [False, "diag", True, "array"])
def test_langevin_log_ratio_matches_gaussian_densities(precondition):
    g = GaussGrad(n_total=300)
    pre_arg = REF_COV if precondition == "array" else precondition
    prop = Langevin(step_size=0.3, batch_size=25, precondition=pre_arg)
    prop.setup(D, grad_fn=g, n_total=g.n_total, cov=REF_COV)
    if precondition is False:
        M = np.eye(D)
    elif precondition == "diag":
        M = np.diag(np.diag(REF_COV))
    else:
        M = REF_COV
    h = 0.3
    rng = np.random.default_rng(21)
    g.record = True
    for _ in range(15):
        g.calls.clear()
        x = MU + rng.standard_normal(D) * SD
        y, lr = prop.draw(x, rng)
        assert len(g.calls) == 2
        (q1, rows1), (q2, rows2) = g.calls
        np.testing.assert_array_equal(rows1, rows2)  # same auxiliary minibatch both ways
        assert rows1.size == 25 and np.unique(rows1).size == 25
        np.testing.assert_array_equal(q1, x)
        np.testing.assert_array_equal(q2, y)
        gx = PREC @ (g.x[rows1].mean(0) - x)
        gy = PREC @ (g.x[rows1].mean(0) - y)
        log_fwd = stats.multivariate_normal(x + 0.5 * h * M @ gx, h * M).logpdf(y)
        log_rev = stats.multivariate_normal(y + 0.5 * h * M @ gy, h * M).logpdf(x)
        assert lr == pytest.approx(log_rev - log_fwd, rel=1e-9, abs=1e-9)


@pytest.mark.slow
def test_langevin_full_batch_draw_distribution():
    g = GaussGrad(n_total=50)
    prop = Langevin(step_size=0.2, batch_size=1000, precondition=True)
    prop.setup(D, grad_fn=g, n_total=g.n_total, cov=REF_COV)
    rng = np.random.default_rng(4)
    x = np.array([0.0, 0.0, 0.0])
    ys = np.array([prop.draw(x, rng)[0] for _ in range(20000)])
    mean = x + 0.1 * REF_COV @ (PREC @ (MU - x))
    se = np.sqrt(np.diag(0.2 * REF_COV) / len(ys))
    assert np.all(np.abs(ys.mean(0) - mean) < Z * se)
    np.testing.assert_allclose(np.cov(ys.T), 0.2 * REF_COV, atol=0.05 * 0.2 * REF_COV.max())


def test_langevin_nonfinite_gradient_rejects():
    class BadGrad:
        def __call__(self, q, rows):
            return np.full(q.size, np.nan) if q[0] > 0.5 else -q

    prop = Langevin(step_size=1.0, batch_size=5).setup(2, grad_fn=BadGrad(), n_total=10)
    q = np.array([1.0, 0.0])
    q_new, lr = prop.draw(q, np.random.default_rng(0))
    assert lr == -math.inf
    np.testing.assert_array_equal(q_new, q)


def test_langevin_grad_shape_error():
    prop = Langevin(batch_size=5).setup(2, grad_fn=lambda q, rows: np.zeros(3), n_total=10)
    with pytest.raises(ValueError, match="grad_fn"):
        prop.draw(np.zeros(2), np.random.default_rng(0))


@pytest.mark.parametrize("make", [
    lambda: RandomWalk(0.5).setup(D),
    lambda: RandomWalk(adapt_covariance=True).setup(D),
    lambda: PreconditionedRandomWalk().setup(D, cov=REF_COV),
])
def test_symmetric_proposals_log_ratio_zero(make):
    prop = make()
    rng = np.random.default_rng(0)
    assert all(prop.draw(MU, rng)[1] == 0.0 for _ in range(10))


def test_preconditioned_draw_covariance():
    prop = PreconditionedRandomWalk(1.7, adapt=False).setup(D, cov=REF_COV)
    rng = np.random.default_rng(8)
    steps = np.array([prop.draw(MU, rng)[0] - MU for _ in range(20000)])
    np.testing.assert_allclose(np.cov(steps.T), 1.7**2 / D * REF_COV, atol=0.05 * REF_COV.max())
    assert prop.scaling == 1.7


# ------------------------------------------------------------------------------------
# tuning
# ------------------------------------------------------------------------------------


def _tune_case(name, start):
    """Proposal whose start is off by a factor ~100 (start = 'small' or 'large')."""
    f = 0.01 if start == "small" else 100.0
    if name == "random_walk":
        return RandomWalk(scaling=f * SD).setup(D)
    if name == "preconditioned":
        return PreconditionedRandomWalk(f * 2.38).setup(D, cov=SIGMA)
    if name == "langevin":
        g = GaussGrad()
        return Langevin(step_size=f * f * 0.5, batch_size=20).setup(D, grad_fn=g, n_total=g.n_total)
    if name == "pcn":
        # an over-dispersed, shifted reference: acceptance falls smoothly from 1 (beta -> 0)
        # to ~0.09 (beta = 1), so the target rate is reached at an interior rho
        prop = PCN().setup(D, mode=MU + 0.5 * SD, cov=10.0 * SIGMA, scaling=1e-4 if start == "small" else 1.0)
        return prop
    raise KeyError(name)


@pytest.mark.parametrize("start", ["small", "large"])
@pytest.mark.parametrize("name", ["random_walk", "preconditioned", "langevin", "pcn"])
def test_tuning_reaches_target_and_stops(name, start):
    prop = _tune_case(name, start)
    rng = np.random.default_rng(31)
    # acceptance before tuning is far from the target
    _, acc0 = mh_chain(copy.deepcopy(prop), MU, 300, np.random.default_rng(1))
    _, acc = mh_chain(prop, MU, 4000, rng, n_tune=2000)
    assert not prop.tuning
    target = prop.target_accept
    assert abs(acc - target) < 0.07, (acc0, acc, target)
    assert abs(acc - target) < abs(acc0 - target)
    # after stop_tuning, tune() is a no-op
    s = prop.scaling
    frozen = copy.deepcopy(prop)
    for k in range(200):
        prop.tune(k % 2 == 0, q=MU)
    assert prop.scaling == s
    r1, r2 = np.random.default_rng(2), np.random.default_rng(2)
    for _ in range(5):
        a, b = prop.draw(MU, r1), frozen.draw(MU, r2)
        np.testing.assert_array_equal(a[0], b[0])
        assert a[1] == b[1]


def test_pcn_tuning_clips_at_independent_proposal():
    """When even rho = 0 accepts above the target, beta = sqrt(1 - rho) stays at 1."""
    prop = PCN().setup(D, mode=MU, cov=SIGMA)  # reference == target: acceptance 1
    mh_chain(prop, MU, 10, np.random.default_rng(0), n_tune=300)
    assert prop.scaling == 1.0 and prop.rho == 0.0


def test_fixed_parameters_do_not_tune():
    props = [
        PCN(rho=0.4).setup(D, mode=MU, cov=SIGMA),
        RandomWalk(0.3, adapt=False).setup(D),
        PreconditionedRandomWalk(1.0, adapt=False).setup(D, cov=SIGMA),
        Langevin(0.1, adapt=False).setup(D, grad_fn=GaussGrad(), n_total=500),
    ]
    for p in props:
        s = p.scaling
        for k in range(100):
            p.tune(False, q=MU)
        p.stop_tuning()
        assert p.scaling == s
    assert props[0].rho == pytest.approx(0.4)


def test_adapt_covariance_improves_mixing_on_correlated_target():
    sd = np.array([1.0, 10.0, 0.1])
    corr = np.array([[1.0, 0.99, 0.98], [0.99, 1.0, 0.99], [0.98, 0.99, 1.0]])
    sigma = corr * np.outer(sd, sd)
    prec = np.linalg.inv(sigma)

    def lt(q):
        return -0.5 * float(q @ prec @ q)

    results = {}
    for adapt_cov in (False, True):
        prop = RandomWalk(scaling=0.1 * sd, adapt_covariance=adapt_cov).setup(3)
        draws, acc = mh_chain(prop, np.zeros(3), 10000, np.random.default_rng(9), n_tune=3000, log_target=lt)
        results[adapt_cov] = (min(ess(draws[:, j]) for j in range(3)), acc, prop)
    ess_plain, acc_plain, _ = results[False]
    ess_cov, acc_cov, prop = results[True]
    assert ess_cov > 4 * ess_plain, (ess_plain, ess_cov)
    assert abs(acc_cov - 0.234) < 0.07
    # the learned proposal covariance is close to (2.38^2 / d) * sigma up to the tuned scale
    pc = prop.proposal_cov
    corr_est = pc / np.sqrt(np.outer(np.diag(pc), np.diag(pc)))
    np.testing.assert_allclose(corr_est, corr, atol=0.02)


def test_adapt_covariance_warns_without_q():
    prop = RandomWalk(adapt_covariance=True).setup(2)
    with pytest.warns(RuntimeWarning, match="without q"):
        prop.tune(True)


def test_scaling_start_values_from_setup():
    p = RandomWalk().setup(2, scaling=[0.1, 0.3])
    assert p.scaling == pytest.approx(0.2)
    p = RandomWalk().setup(4)
    assert p.scaling == pytest.approx(0.1 * 2.38 / 2)
    p = RandomWalk(0.5).setup(2, scaling=[0.1, 0.3])  # user value wins
    assert p.scaling == pytest.approx(0.5)
    assert PreconditionedRandomWalk().setup(2, cov=np.eye(2)).scaling == 2.38
    assert PreconditionedRandomWalk().setup(2, cov=np.eye(2), scaling=1.2).scaling == 1.2
    assert PCN().setup(16, mode=np.zeros(16), cov=np.eye(16)).scaling == pytest.approx(2.38 / 4)
    assert PCN().setup(2, mode=np.zeros(2), cov=np.eye(2)).scaling == 1.0
    assert PCN(rho=0.75).setup(2, mode=np.zeros(2), cov=np.eye(2)).scaling == pytest.approx(0.5)
    g = GaussGrad()
    assert Langevin().setup(D, grad_fn=g, n_total=500, scaling=0.01).scaling == 0.01
    assert Langevin(precondition=True).setup(8, grad_fn=g, n_total=500, cov=np.eye(8)).scaling == pytest.approx(1.65**2 / 2)


# ------------------------------------------------------------------------------------
# reset and pickling
# ------------------------------------------------------------------------------------


def _reset_cases():
    g = GaussGrad()
    return {
        "random_walk": lambda: RandomWalk().setup(D),
        "random_walk_adaptcov": lambda: RandomWalk(adapt_covariance=True, cov_start=40, cov_update_interval=10).setup(D),
        "preconditioned": lambda: PreconditionedRandomWalk().setup(D, cov=REF_COV),
        "pcn": lambda: PCN().setup(D, scaling=0.3, mode=REF_MODE, cov=REF_COV),
        "langevin": lambda: Langevin(batch_size=10, precondition="diag").setup(D, grad_fn=g, n_total=g.n_total, cov=REF_COV),
        "user": lambda: as_proposal(ShiftedWalk([0.1, 0.0, 0.0], 0.5)).setup(D),
    }


@pytest.mark.parametrize("name", list(_reset_cases()))
def test_reset_restores_initial_state(name):
    prop = _reset_cases()[name]()
    s0 = prop.scaling
    first, acc1 = mh_chain(prop, MU + 1.0, 150, np.random.default_rng(42), n_tune=300)
    if name == "random_walk_adaptcov":
        assert prop._cov_L is not None  # the covariance form was switched on
    if name != "user":
        assert prop.scaling != s0
    prop.reset()
    assert prop.tuning
    assert prop.scaling == s0 or (math.isnan(s0) and math.isnan(prop.scaling))
    second, acc2 = mh_chain(prop, MU + 1.0, 150, np.random.default_rng(42), n_tune=300)
    np.testing.assert_array_equal(first, second)
    # same as a freshly set up object
    fresh = _reset_cases()[name]()
    third, _ = mh_chain(fresh, MU + 1.0, 150, np.random.default_rng(42), n_tune=300)
    np.testing.assert_array_equal(first, third)


@pytest.mark.parametrize("name", list(_reset_cases()))
def test_pickle_round_trip(name):
    prop = _reset_cases()[name]()
    mh_chain(prop, MU, 0, np.random.default_rng(0), n_tune=120)  # mid-tuning state
    clone = pickle.loads(pickle.dumps(prop))
    deep = copy.deepcopy(prop)
    assert type(clone) is type(prop)
    assert clone.scaling == prop.scaling or math.isnan(prop.scaling) and math.isnan(clone.scaling)
    outs = [mh_chain(p, MU, 100, np.random.default_rng(5), n_tune=100)[0] for p in (prop, clone, deep)]
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


def test_cloudpickle_round_trip_with_closure_grad():
    cloudpickle = pytest.importorskip("cloudpickle")
    g = GaussGrad()
    prop = Langevin(batch_size=10).setup(D, grad_fn=lambda q, rows: g(q, rows), n_total=g.n_total)
    clone = cloudpickle.loads(cloudpickle.dumps(prop))
    a = prop.draw(MU, np.random.default_rng(1))
    b = clone.draw(MU, np.random.default_rng(1))
    np.testing.assert_array_equal(a[0], b[0])
    assert a[1] == b[1]


# ------------------------------------------------------------------------------------
# user proposals, names, and errors
# ------------------------------------------------------------------------------------


class _Ret:
    def __init__(self, value):
        self.value = value

    def draw(self, q, rng):
        return self.value


@pytest.mark.parametrize("value, exc, match", [
    (np.zeros(D), TypeError, "not a pair"),
    ((np.zeros(D), 0.0, 1), TypeError, "not a pair"),
    ((np.zeros(D + 1), 0.0), ValueError, "length 4; expected ndim=3"),
    ((np.zeros((1, D)), 0.0), ValueError, r"shape \(1, 3\)"),
    ((np.array(["a", "b", "c"]), 0.0), TypeError, "dtype"),
    ((np.array([0.0, np.nan, 0.0]), 0.0), ValueError, "non-finite q_new"),
    ((np.zeros(D), np.nan), ValueError, "finite or -inf"),
    ((np.zeros(D), np.inf), ValueError, "finite or -inf"),
    ((np.zeros(D), np.zeros(2)), TypeError, "scalar float"),
    ((np.zeros(D), "0"), TypeError, "scalar float"),
    ((np.zeros(D), None), TypeError, "not a number"),
])
def test_user_proposal_first_draw_validation(value, exc, match):
    prop = as_proposal(_Ret(value)).setup(D)
    with pytest.raises(exc, match=match) as info:
        prop.draw(np.zeros(D), np.random.default_rng(0))
    assert "draw" in str(info.value) and "log_ratio" in str(info.value)


def test_user_proposal_accepts_good_values_and_minus_inf():
    for lr in (0.0, -3.5, -np.inf, np.float32(1.5), 2):
        prop = as_proposal(_Ret(([1, 2, 3], lr))).setup(D)
        q_new, out = prop.draw(np.zeros(D), np.random.default_rng(0))
        assert q_new.dtype == np.float64 and q_new.shape == (D,)
        assert isinstance(out, float) and out == float(lr)


def test_user_proposal_without_setup_uses_len_q():
    prop = as_proposal(_Ret((np.zeros(2), 0.0)))
    with pytest.raises(ValueError, match="expected ndim=3"):
        prop.draw(np.zeros(3), np.random.default_rng(0))


def test_user_proposal_nan_after_first_draw():
    class Later:
        n = 0

        def draw(self, q, rng):
            self.n += 1
            return q, (0.0 if self.n == 1 else float("nan"))

    prop = as_proposal(Later()).setup(D)
    prop.draw(np.zeros(D), None)
    with pytest.raises(ValueError, match="nan"):
        prop.draw(np.zeros(D), None)


def test_user_proposal_wrap_time_errors():
    with pytest.raises(TypeError, match="no 'draw'"):
        as_proposal(object())
    class NotCallable:
        draw = 3
    with pytest.raises(TypeError, match="not callable"):
        as_proposal(NotCallable())
    with pytest.raises(TypeError, match="not an instance"):
        as_proposal(ShiftedWalk)
    with pytest.raises(TypeError, match="No proposal given"):
        as_proposal(None)
    with pytest.raises(TypeError, match="Keyword arguments"):
        as_proposal(ShiftedWalk(0.0, 1.0), rho=0.5)
    with pytest.raises(TypeError, match="Keyword arguments"):
        as_proposal(RandomWalk(), scaling=0.5)


def test_user_proposal_function_and_hooks():
    def f(q, rng):
        return q + rng.standard_normal(q.size), 0.0

    p = as_proposal(f).setup(2)
    assert isinstance(p, UserProposal) and math.isnan(p.scaling)
    assert p.draw(np.zeros(2), np.random.default_rng(0))[0].shape == (2,)

    class WithHooks:
        def __init__(self):
            self.log = []
            self.scaling = 0.7

        def setup(self, ndim, *, cov=None):
            self.log.append(("setup", ndim, cov))

        def reset(self):
            self.log.append("reset")

        def tune(self, accepted, q=None):
            self.log.append(("tune", accepted, q is not None))

        def stop_tuning(self):
            self.log.append("stop")

        def draw(self, q, rng):
            return q.copy(), 0.0

    obj = WithHooks()
    p = as_proposal(obj).setup(2, cov="C", grad_fn=None)
    p.tune(True, q=np.zeros(2))
    p.stop_tuning()
    p.tune(True)  # ignored after stop_tuning
    assert obj.log == [("setup", 2, "C"), "reset", ("tune", True, True), "stop"]
    assert p.scaling == 0.7


def test_make_proposal_names():
    assert PROPOSAL_NAMES == ("random_walk", "langevin", "preconditioned", "reversible", "pcn",
                              "surrogate_hmc")
    assert isinstance(make_proposal("random_walk"), RandomWalk)
    assert isinstance(make_proposal("Random-Walk"), RandomWalk)
    assert isinstance(make_proposal("langevin", batch_size=7), Langevin)
    assert make_proposal("langevin", batch_size=7).batch_size == 7
    assert isinstance(make_proposal("preconditioned"), PreconditionedRandomWalk)
    assert isinstance(make_proposal("reversible"), ReversibleRandomWalk)
    p = as_proposal("pcn", rho=0.5)
    assert isinstance(p, PCN) and p.setup(2, mode=np.zeros(2), cov=np.eye(2)).rho == pytest.approx(0.5)
    assert isinstance(as_proposal(RandomWalk), RandomWalk)
    inst = RandomWalk()
    assert as_proposal(inst) is inst
    with pytest.raises(ValueError) as info:
        make_proposal("hmc")
    for n in PROPOSAL_NAMES:
        assert repr(n) in str(info.value)
    with pytest.raises(ValueError, match="Did you mean 'pcn'"):
        as_proposal("pnc")
    with pytest.raises(TypeError, match="unexpected keyword"):
        make_proposal("pcn", step_size=1.0)


def test_setup_and_argument_errors():
    with pytest.raises(ValueError, match="cov"):
        PreconditionedRandomWalk().setup(2)
    with pytest.raises(ValueError, match="mode=m, cov=C"):
        PCN().setup(2, cov=np.eye(2))
    with pytest.raises(ValueError, match="mode must be"):
        PCN().setup(2, mode=np.zeros(3), cov=np.eye(2))
    with pytest.raises(ValueError, match="grad_fn"):
        Langevin().setup(2, n_total=10)
    with pytest.raises(ValueError, match="n_total"):
        Langevin().setup(2, grad_fn=lambda q, r: q)
    with pytest.raises(ValueError, match="needs setup"):
        Langevin(precondition=True).setup(2, grad_fn=lambda q, r: q, n_total=10)
    with pytest.raises(ValueError, match="positive definite"):
        PCN().setup(2, mode=np.zeros(2), cov=np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="symmetric"):
        PreconditionedRandomWalk().setup(2, cov=np.array([[1.0, 0.5], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="rho"):
        PCN(rho=1.0)
    with pytest.raises(ValueError, match="target_accept"):
        RandomWalk(target_accept=1.5)
    with pytest.raises(ValueError, match="positive"):
        RandomWalk(scaling=-1.0)
    with pytest.raises(ValueError, match="ndim=3"):
        RandomWalk(scaling=[1.0, 2.0]).setup(3)
    with pytest.raises(RuntimeError, match="setup"):
        RandomWalk().draw(np.zeros(2), np.random.default_rng(0))
    with pytest.raises(ValueError, match="length ndim=2"):
        RandomWalk().setup(2).draw(np.zeros(3), np.random.default_rng(0))
    with pytest.raises(ValueError, match="ndim"):
        RandomWalk().setup(0)


def test_draws_use_only_the_given_rng():
    """Global NumPy state is untouched and equal generators give equal draws."""
    g = GaussGrad()
    props = [
        RandomWalk().setup(D),
        PreconditionedRandomWalk().setup(D, cov=REF_COV),
        PCN().setup(D, mode=REF_MODE, cov=REF_COV),
        Langevin(batch_size=10).setup(D, grad_fn=g, n_total=g.n_total),
    ]
    np.random.seed(0)
    before = np.random.get_state()[1].copy()
    for p in props:
        a = p.draw(MU, np.random.default_rng(3))
        b = p.draw(MU, np.random.default_rng(3))
        np.testing.assert_array_equal(a[0], b[0])
        assert a[1] == b[1]
    np.testing.assert_array_equal(np.random.get_state()[1], before)


def test_base_class_is_abstract_and_interface_present():
    for cls in (RandomWalk, Langevin, PreconditionedRandomWalk, PCN, UserProposal):
        assert issubclass(cls, Proposal)
        for name in ("setup", "draw", "tune", "stop_tuning", "reset"):
            assert callable(getattr(cls, name))
        assert isinstance(cls.scaling, property)


def test_pcn_tuning_reaches_the_independent_proposal():
    """When even the independent proposal (beta = 1) accepts above the target, tuning must
    end at beta = 1, not at the clipped recursion's average just below it (it ended at
    about 0.98, rho about 0.04, before the iterate could pass log 1)."""
    prop = PCN().setup(D, scaling=0.5, mode=REF_MODE, cov=REF_COV)
    rng = np.random.default_rng(3)
    for _ in range(1000):
        prop.tune(float(rng.random() < 0.6))  # accepts far above 0.234 at any beta
    prop.stop_tuning()
    assert prop.scaling == 1.0 and prop.rho == 0.0
    # and a proposal that accepts below the target still shrinks
    prop = PCN().setup(D, scaling=0.5, mode=REF_MODE, cov=REF_COV)
    for _ in range(1000):
        prop.tune(float(rng.random() < 0.05))
    prop.stop_tuning()
    assert prop.scaling < 0.1
