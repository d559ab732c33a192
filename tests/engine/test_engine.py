"""Tests of the likelihood engine (``pymc_subsample.engine.LikelihoodEngine``).

Every check compares the engine with PyMC's own graphs of the same model:

* per-row log-likelihood: ``model.logp(vars=model.observed_RVs, sum=False)`` compiled on the
  model, summed over the observed variables and over trailing (non-row) axes;
* ``engine.prior(q) + engine.full_loglik(q)`` against ``model.compile_logp()``;
* gradients against ``model.compile_dlogp`` (prior + likelihood) and finite differences.

Points ``q`` live in the engine's raveled unconstrained space; they are mapped to model
points with ``pymc.blocking.DictToArrayBijection`` (as in the engine), the variables the
engine does not sample being read from its ``shared`` variables.

All randomness uses fixed seeds. Models are small (N = 120 rows) and built once per module
(``_case`` is cached), because PyTensor compilation dominates the run time.
"""

from __future__ import annotations

import functools
import tracemalloc
import warnings

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pymc.blocking import DictToArrayBijection, RaveledVars
from pymc.pytensorf import make_shared_replacements
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.basic import Constant

from pymc_subsample.engine import LikelihoodEngine, ModelNotSupportedError
from tests.conftest import logistic_data, logistic_model

N_ZOO = 120
RTOL = 1e-9  # engine vs model, same arithmetic up to summation order
FD_STEP = 1e-6
FD_RTOL = 1e-5


# ====================================================================== model zoo
# Each builder takes a seeded Generator and returns a dict with the model and, optionally,
# the engine's ``vars``/``shared`` and a ``setup(engine)`` hook run after the build.


def _glm_data(rng, n=N_ZOO, k=3):
    X = rng.normal(size=(n, k))
    beta = rng.normal(0, 0.5, size=k)
    return X, X @ beta


def zoo_logistic(rng):
    X, eta = _glm_data(rng)
    y = (rng.random(N_ZOO) < 1 / (1 + np.exp(-eta))).astype(np.int64)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 1, shape=3)
        pm.Bernoulli("y", logit_p=a + X @ b, observed=y)
    return {"model": model}


def zoo_probit(rng):
    X, eta = _glm_data(rng)
    y = (rng.random(N_ZOO) < 0.5 * (1 + np.tanh(eta))).astype(np.int64)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=3)
        pm.Bernoulli("y", p=pm.math.invprobit(X @ b), observed=y)
    return {"model": model}


def zoo_poisson_log(rng):
    X, eta = _glm_data(rng)
    y = rng.poisson(np.exp(0.5 + eta))
    with pm.Model() as model:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 1, shape=3)
        pm.Poisson("y", mu=pm.math.exp(a + X @ b), observed=y)
    return {"model": model}


def zoo_normal_identity(rng):
    X, eta = _glm_data(rng)
    y = 1.0 + eta + rng.normal(0, 0.7, N_ZOO)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 1, shape=3)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y", mu=a + X @ b, sigma=sigma, observed=y)
    return {"model": model}


def zoo_student_t(rng):
    X, eta = _glm_data(rng, k=2)
    y = eta + rng.standard_t(4, N_ZOO)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        sigma = pm.HalfNormal("sigma", 2)
        nu = pm.Gamma("nu", 2, 0.1)
        pm.StudentT("y", nu=nu, mu=X @ b, sigma=sigma, observed=y)
    return {"model": model}


def zoo_hierarchical(rng):
    n_groups = 5
    group_idx = rng.integers(0, n_groups, N_ZOO)
    x = rng.normal(size=N_ZOO)
    y = rng.normal(size=n_groups)[group_idx] + 0.5 * x + rng.normal(0, 0.5, N_ZOO)
    with pm.Model(coords={"group": np.arange(n_groups)}) as model:
        mu_a = pm.Normal("mu_a", 0, 2)
        sigma_a = pm.HalfNormal("sigma_a", 1)
        a = pm.Normal("a", mu_a, sigma_a, dims="group")
        b = pm.Normal("b", 0, 1)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", mu=a[group_idx] + b * x, sigma=sigma, observed=y)
    return {"model": model}


def zoo_dims_data(rng):
    X = rng.normal(size=(N_ZOO, 2))
    y = X @ np.array([0.5, -1.0]) + rng.normal(0, 0.5, N_ZOO)
    coords = {"obs": np.arange(N_ZOO), "feature": ["f0", "f1"]}
    with pm.Model(coords=coords) as model:
        Xd = pm.Data("X", X, dims=("obs", "feature"))
        yd = pm.Data("y_data", y, dims="obs")
        b = pm.Normal("b", 0, 1, dims="feature")
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", mu=pt.dot(Xd, b), sigma=sigma, observed=yd, dims="obs")
    return {"model": model}


def zoo_data_no_dims(rng):
    # pm.Data without dims, next to a plain NumPy covariate and a plain NumPy observed.
    x = rng.normal(size=N_ZOO)
    z = rng.normal(size=N_ZOO)
    y = 0.3 + 0.8 * x - 0.4 * z + rng.normal(0, 0.5, N_ZOO)
    with pm.Model() as model:
        xd = pm.Data("x", x)
        c = pm.Normal("c", 0, 1, shape=3)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", mu=c[0] + c[1] * xd + c[2] * z, sigma=sigma, observed=y)
    return {"model": model}


def zoo_two_observed(rng):
    x = rng.normal(size=N_ZOO)
    y = 0.5 * x + rng.normal(0, 0.5, N_ZOO)
    counts = rng.poisson(np.exp(0.2 + 0.3 * x))
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        sigma = pm.HalfNormal("sigma", 1)
        pm.Normal("y", mu=b[0] * x, sigma=sigma, observed=y)
        pm.Poisson("counts", mu=pm.math.exp(b[1] + b[0] * x), observed=counts)
    return {"model": model}


def zoo_mvnormal_rows(rng):
    k = 2
    x = rng.normal(size=N_ZOO)
    Y = np.column_stack([x, -x]) * 0.5 + rng.multivariate_normal(
        np.zeros(k), [[1.0, 0.3], [0.3, 0.5]], size=N_ZOO
    )
    with pm.Model() as model:
        chol, _, _ = pm.LKJCholeskyCov(
            "chol", n=k, eta=2.0, sd_dist=pm.Exponential.dist(1.0, size=k), compute_corr=True
        )
        mu0 = pm.Normal("mu0", 0, 1, shape=k)
        slope = pm.Normal("slope", 0, 1, shape=k)
        mu = mu0 + x[:, None] * slope  # (N, k): one mean per row
        pm.MvNormal("Y", mu=mu, chol=chol, observed=Y)
    return {"model": model}


def zoo_bounded(rng):
    x = rng.normal(size=N_ZOO)
    y = 0.5 + 0.6 * x + rng.normal(0, 0.4, N_ZOO)
    trials = np.full(N_ZOO, 8)
    successes = rng.binomial(trials, 0.3)
    with pm.Model() as model:
        u = pm.Uniform("u", -3, 3)
        w = pm.Beta("w", 2, 2)
        sigma = pm.HalfNormal("sigma", 1)
        scale = pm.LogNormal("scale", 0, 0.5)
        p = pm.Beta("p", 1, 3)
        pm.Normal("y", mu=u + w * x, sigma=sigma * scale, observed=y)
        pm.Binomial("successes", n=trials, p=p, observed=successes)
    return {"model": model}


def zoo_gamma_log(rng):
    X, eta = _glm_data(rng, k=2)
    y = rng.gamma(3.0, np.exp(eta) / 3.0)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        alpha = pm.Exponential("alpha", 0.5)
        pm.Gamma("y", alpha=alpha, beta=alpha / pm.math.exp(X @ b), observed=y)
    return {"model": model}


def zoo_normal_mixture(rng):
    """A mixture likelihood: PyTensor 3 computes its logsumexp in an OpFromGraph whose inner
    graph pins the row count (the engine inlines it)."""
    y = np.r_[rng.normal(-1.0, 1.0, N_ZOO // 2), rng.normal(2.0, 1.0, N_ZOO - N_ZOO // 2)]
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 3, shape=2)
        sigma = pm.HalfNormal("sigma", 2)
        pm.NormalMixture("y", w=[0.4, 0.6], mu=mu, sigma=sigma, observed=y)
    return {"model": model}


def zoo_subset(rng):
    """Step over ``b`` only; ``a`` and ``sigma`` enter through shared variables, which are
    set to values away from the initial point (so a stale initial value would show)."""
    X, eta = _glm_data(rng)
    y = 1.0 + eta + rng.normal(0, 0.7, N_ZOO)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 1, shape=3)
        sigma = pm.HalfNormal("sigma", 2)
        # a model expression over the rows, for test_compile_batch_uses_rows_and_shared
        eta = pm.Deterministic("eta", a + X @ b)
        pm.Normal("y", mu=eta, sigma=sigma, observed=y)
        # A data-free Potential on a shared variable is part of the prior.
        pm.Potential("soft", -0.5 * (a - 1.0) ** 2)
    vars_ = [model.rvs_to_values[b]]
    shared = make_shared_replacements(model.initial_point(), vars_, model)
    model.linpred = (eta, X)

    def setup(engine):
        for var, sh in engine.shared.items():
            sh.set_value(np.asarray(sh.get_value() + 0.7, dtype=sh.dtype))

    return {"model": model, "vars": [b], "shared": shared, "setup": setup}


def zoo_data_mean_folded(rng):
    """``x - mean(x)`` of a NumPy constant: PyMC's logp rewrites constant-fold the mean,
    so the likelihood is row-factorising and must be accepted (and exact)."""
    x = rng.normal(2.0, 1.0, size=N_ZOO)
    y = 0.7 * (x - x.mean()) + rng.normal(0, 0.5, N_ZOO)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        xt = pt.as_tensor(x)
        pm.Normal("y", mu=b * (xt - xt.mean()), sigma=0.5, observed=y)
    return {"model": model}


ZOO = {
    "logistic": zoo_logistic,
    "probit": zoo_probit,
    "poisson_log": zoo_poisson_log,
    "normal_identity": zoo_normal_identity,
    "student_t": zoo_student_t,
    "hierarchical": zoo_hierarchical,
    "dims_data": zoo_dims_data,
    "data_no_dims": zoo_data_no_dims,
    "two_observed": zoo_two_observed,
    "mvnormal_rows": zoo_mvnormal_rows,
    "bounded": zoo_bounded,
    "gamma_log": zoo_gamma_log,
    "normal_mixture": zoo_normal_mixture,
    "subset": zoo_subset,
    "data_mean_folded": zoo_data_mean_folded,
}


# ====================================================================== reference helpers
class Case:
    """A zoo model, its engine, a random point and PyMC reference functions."""

    def __init__(self, name, seed):
        rng = np.random.default_rng(seed)
        spec = ZOO[name](rng)
        self.name = name
        self.model = model = spec["model"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.engine = LikelihoodEngine(model, vars=spec.get("vars"), shared=spec.get("shared"))
        if "setup" in spec:
            spec["setup"](self.engine)
        eng = self.engine
        self.n = eng.n_rows
        self.rng = rng
        self.q = eng.initial_q() + rng.normal(0, 0.3, eng.ndim)
        self.q2 = self.q + rng.normal(0, 0.2, eng.ndim)
        self.rows = rng.choice(self.n, size=17, replace=False).astype(np.int64)

        init = model.initial_point()
        self._info = DictToArrayBijection.map({v.name: init[v.name] for v in eng.vars}).point_map_info
        terms = model.logp(vars=model.observed_RVs, sum=False)
        total = None
        for t in terms:
            if t.ndim > 1:
                t = t.sum(axis=tuple(range(1, t.ndim)))
            total = t if total is None else total + t
        self._ref_ll = model.compile_fn(total, inputs=model.value_vars, on_unused_input="ignore")
        self._ref_logp = model.compile_logp()
        self._ref_dlogp = model.compile_dlogp(vars=[model.values_to_rvs[v] for v in eng.vars])

    def point(self, q, shared_values=None):
        """Model point (all value variables) of the step point ``q``."""
        p = DictToArrayBijection.rmap(RaveledVars(np.asarray(q, dtype=np.float64), self._info))
        for var, sh in self.engine.shared.items():
            p[var.name] = sh.get_value() if shared_values is None else shared_values[var.name]
        return p

    def ref_loglik(self, q, **kw):
        return np.asarray(self._ref_ll(self.point(q, **kw)))

    def ref_logp(self, q):
        return float(self._ref_logp(self.point(q)))

    def ref_dlogp(self, q):
        return np.asarray(self._ref_dlogp(self.point(q)))


@functools.lru_cache(maxsize=None)
def _case(name) -> Case:
    return Case(name, seed=1000 + sorted(ZOO).index(name))


@pytest.fixture(scope="module", params=list(ZOO))
def case(request):
    return _case(request.param)


def assert_close(actual, desired, rtol=RTOL, what=""):
    actual = np.asarray(actual, dtype=np.float64)
    desired = np.asarray(desired, dtype=np.float64)
    assert actual.shape == desired.shape, (what, actual.shape, desired.shape)
    scale = max(1.0, float(np.max(np.abs(desired)))) if desired.size else 1.0
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=rtol * scale * 1e-3, err_msg=what)


def fd_grad(f, q, h=FD_STEP):
    """Central finite-difference gradient of a scalar function."""
    g = np.empty_like(q)
    for i in range(q.size):
        e = np.zeros_like(q)
        e[i] = h
        g[i] = (f(q + e) - f(q - e)) / (2 * h)
    return g


def fd_jacobian(f, q, h):
    """Central finite differences of a function from R^d to R^d: column ``i`` is the
    derivative in ``q_i`` (a Hessian, for ``f`` a gradient)."""
    d = q.size
    fd = np.empty((d, d))
    for i in range(d):
        e = np.zeros(d)
        e[i] = h
        fd[:, i] = (f(q + e) - f(q - e)) / (2 * h)
    return fd


# ====================================================================== zoo: values
def test_zoo_size():
    assert len(ZOO) >= 10


def test_loglik_matches_model_rows(case):
    eng, q = case.engine, case.q
    ref = case.ref_loglik(q)
    assert ref.shape == (case.n,)
    got = eng.loglik(q, case.rows)
    assert got.shape == (case.rows.size,)
    assert_close(got, ref[case.rows], what="loglik")
    # order of the rows and a single row
    assert_close(eng.loglik(q, case.rows[::-1]), ref[case.rows[::-1]], what="reversed rows")
    assert_close(eng.loglik(q, case.rows[:1]), ref[case.rows[:1]], what="one row")
    # a list of Python ints, first and last rows
    edge = [0, case.n - 1]
    assert_close(eng.loglik(q, edge), ref[edge], what="edge rows")
    # all rows in one batch
    assert_close(eng.loglik(q, np.arange(case.n)), ref, what="all rows")


def test_prior_plus_full_loglik_matches_model_logp(case):
    eng = case.engine
    for q in (case.q, case.q2):
        ref = case.ref_logp(q)
        assert_close(eng.prior(q) + eng.full_loglik(q), ref, what="prior + full_loglik")
        assert_close(eng.logp(q), ref, what="engine.logp")
        assert_close(eng.full_loglik(q), case.ref_loglik(q).sum(), what="full_loglik")


def test_pair_and_diff_agree_with_two_loglik_calls(case):
    eng, q, q2, rows = case.engine, case.q, case.q2, case.rows
    a, b = eng.loglik(q, rows), eng.loglik(q2, rows)
    pair = eng.loglik_pair(q, q2, rows)
    assert pair.shape == (2, rows.size)
    assert_close(pair[0], a, what="pair[0]")
    assert_close(pair[1], b, what="pair[1]")
    assert_close(eng.loglik_diff(q, q2, rows), b - a, rtol=1e-8, what="diff")
    assert_close(
        eng.full_loglik_diff(q, q2), eng.full_loglik(q2) - eng.full_loglik(q), rtol=1e-8,
        what="full diff",
    )


# ====================================================================== zoo: derivatives
def test_loglik_sum_grad_matches_finite_differences(case):
    eng, q, rows = case.engine, case.q, case.rows
    v, g = eng.loglik_sum_grad(q, rows)
    assert_close(v, eng.loglik(q, rows).sum(), what="value")
    assert g.shape == (eng.ndim,)
    fd = fd_grad(lambda x: eng.loglik(x, rows).sum(), q)
    assert_close(g, fd, rtol=FD_RTOL, what="grad vs FD")


def test_full_gradient_matches_model_dlogp(case):
    eng, q = case.engine, case.q
    lp, lg = eng.full_loglik_grad(q)
    pv, pg = eng.prior_and_grad(q)
    assert_close(lp, eng.full_loglik(q), what="full_loglik_grad value")
    assert_close(pv, eng.prior(q), what="prior_and_grad value")
    # compile_dlogp differentiates the whole model: prior (with Jacobian) + likelihood
    assert_close(pg + lg, case.ref_dlogp(q), what="prior grad + full loglik grad vs dlogp")
    # and the split between the two parts is right
    assert_close(pg, fd_grad(eng.prior, q), rtol=FD_RTOL, what="prior grad vs FD")


def test_rows_grad_sums_to_batch_grad(case):
    eng, q, rows = case.engine, case.q, case.rows
    vals, grads = eng.loglik_rows_grad(q, rows, chunk=8)  # 17 rows: chunks of 8, 8 and 1
    assert vals.shape == (rows.size,)
    assert grads.shape == (rows.size, eng.ndim)
    assert_close(vals, eng.loglik(q, rows), what="row values")
    assert_close(grads.sum(axis=0), eng.loglik_sum_grad(q, rows)[1], what="sum of row grads")
    # one row's gradient is the batch gradient of that row alone
    assert_close(grads[3], eng.loglik_sum_grad(q, rows[3:4])[1], what="single row grad")
    v1, g1 = eng.loglik_rows_grad(q, rows[3:4])  # a batch of one row
    assert_close(v1, vals[3:4], what="one-row batch value")
    assert_close(g1, grads[3:4], what="one-row batch grad")


# Per-row Hessians (one reverse-mode Hessian of a one-row batch per row) take tens of
# seconds to build for an MvNormal per row and for bounded transforms: those two run with
# the slow tests.
_SLOW_ROW_HESSIAN = {"mvnormal_rows", "bounded"}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW_ROW_HESSIAN else n for n in ZOO],
)
def test_rows_hessian_sums_to_full_hessian(name):
    case = _case(name)
    eng, q = case.engine, case.q
    all_rows = np.arange(case.n)
    vals, grads, hess = eng.loglik_rows_hessian(q, all_rows, chunk=50)
    d = eng.ndim
    assert hess.shape == (case.n, d, d)
    tot, g, H = eng.full_loglik_hessian(q)
    assert_close(vals, eng.loglik(q, all_rows), what="row values")
    assert_close(grads.sum(axis=0), g, what="sum of row grads")
    assert_close(hess.sum(axis=0), H, rtol=1e-8, what="sum of row Hessians")
    assert_close(tot, eng.full_loglik(q), what="value")
    np.testing.assert_allclose(hess, np.swapaxes(hess, 1, 2), rtol=1e-8, atol=1e-10)
    # the Hessian is the derivative of the gradient
    fd = fd_jacobian(lambda x: eng.full_loglik_grad(x)[1], q, h=1e-5)
    assert_close(H, fd, rtol=FD_RTOL, what="Hessian vs FD")
    # batches of one row, and the batch Hessian of a subset of rows
    rows = case.rows
    v1, g1, h1 = eng.loglik_rows_hessian(q, rows[:1])
    assert_close(h1, hess[rows[:1]], rtol=1e-8, what="one-row batch Hessian")
    bv, bg, bh = eng.loglik_hessian(q, rows)
    assert_close(bv, vals[rows].sum(), what="loglik_hessian value")
    assert_close(bg, grads[rows].sum(axis=0), what="loglik_hessian grad")
    assert_close(bh, hess[rows].sum(axis=0), rtol=1e-8, what="loglik_hessian")
    assert_close(eng.loglik_hessian(q, rows[:1])[2], hess[rows[0]], rtol=1e-8, what="one row")


def test_prior_hessian_matches_finite_differences(case):
    eng, q = case.engine, case.q
    v, g, H = eng.prior_hessian(q)
    assert_close(v, eng.prior(q), what="value")
    assert_close(g, eng.prior_and_grad(q)[1], what="grad")
    fd = fd_jacobian(lambda x: eng.prior_and_grad(x)[1], q, h=1e-5)
    assert_close(H, fd, rtol=FD_RTOL, what="prior Hessian vs FD")


# ====================================================================== zoo: chunking
def test_chunked_full_sums_do_not_depend_on_chunk_size(case):
    eng, q, q2 = case.engine, case.q, case.q2
    ref_v = eng.full_loglik(q, chunk=case.n)
    ref_d = eng.full_loglik_diff(q, q2, chunk=case.n)
    ref_gv, ref_g = eng.full_loglik_grad(q, chunk=case.n)
    for chunk in (1, 7, case.n - 1, 10 * case.n):
        assert_close(eng.full_loglik(q, chunk=chunk), ref_v, what=f"full_loglik chunk={chunk}")
        assert_close(eng.full_loglik_diff(q, q2, chunk=chunk), ref_d, rtol=1e-8, what="diff")
        gv, g = eng.full_loglik_grad(q, chunk=chunk)
        assert_close(gv, ref_gv, what="grad value")
        assert_close(g, ref_g, what=f"full_loglik_grad chunk={chunk}")
        assert_close(eng.logp(q, chunk=chunk), case.ref_logp(q), what="logp")
    _, _, H = eng.full_loglik_hessian(q, chunk=case.n)
    _, _, H7 = eng.full_loglik_hessian(q, chunk=7)
    assert_close(H7, H, rtol=1e-8, what="full_loglik_hessian chunk=7")
    with pytest.raises(ValueError):
        eng.full_loglik(q, chunk=0)


def test_empty_batch(case):
    eng, q = case.engine, case.q
    rows = np.array([], dtype=np.int64)
    assert eng.loglik(q, rows).shape == (0,)
    assert eng.loglik_diff(q, case.q2, rows).shape == (0,)
    v, g = eng.loglik_sum_grad(q, rows)
    assert v == 0.0
    np.testing.assert_array_equal(g, np.zeros(eng.ndim))
    vals, grads = eng.loglik_rows_grad(q, rows)
    assert vals.shape == (0,) and grads.shape == (0, eng.ndim)


def test_gather_returns_one_array_per_row_data(case):
    eng = case.engine
    data = eng.gather(case.rows)
    assert len(data) == len(eng.rows) >= 1
    for r, arr in zip(eng.rows, data):
        full = r.array()
        assert arr.shape == (case.rows.size,) + full.shape[1:]
        np.testing.assert_array_equal(arr, np.asarray(full)[case.rows])


# ====================================================================== specific models
def test_subset_step_uses_shared_values():
    c = _case("subset")
    eng = c.engine
    assert [v.name for v in eng.vars] == ["b"]
    assert eng.ndim == 3
    assert {v.name for v in eng.shared} == {"a", "sigma_log__"}
    init = c.model.initial_point()
    current = {v.name: sh.get_value() for v, sh in eng.shared.items()}
    for name, val in current.items():  # the setup moved them away from the initial point
        assert not np.allclose(val, init[name])
    stale = {name: init[name] for name in current}
    got = eng.loglik(c.q, c.rows)
    assert_close(got, c.ref_loglik(c.q)[c.rows], what="current shared values")
    assert not np.allclose(got, c.ref_loglik(c.q, shared_values=stale)[c.rows])
    # a later set_value (what ArrayStepShared.step does before every step) is picked up
    sh_a = next(sh for v, sh in eng.shared.items() if v.name == "a")
    old = sh_a.get_value()
    try:
        sh_a.set_value(np.asarray(-1.3))
        assert_close(eng.loglik(c.q, c.rows), c.ref_loglik(c.q)[c.rows], what="after set_value")
        assert_close(eng.logp(c.q), c.ref_logp(c.q), what="logp after set_value")
    finally:
        sh_a.set_value(old)


def test_compile_batch_uses_rows_and_shared():
    c = _case("subset")
    eng = c.engine
    expr, X = c.model.linpred
    f = eng.compile_batch([expr])
    p = c.point(c.q)
    (got,) = f(c.q, *eng.gather(c.rows))
    assert_close(got, p["a"] + X[c.rows] @ p["b"], what="compile_batch")


def test_dims_data_follows_set_data():
    c = _case("dims_data")
    eng, model = c.engine, c.model
    old = {k: model[k].get_value() for k in ("X", "y_data")}
    rng = np.random.default_rng(7)
    try:
        with model:
            pm.set_data({"X": rng.normal(size=old["X"].shape), "y_data": rng.normal(size=c.n)})
        assert_close(eng.loglik(c.q, c.rows), c.ref_loglik(c.q)[c.rows], what="after set_data")
        assert_close(eng.logp(c.q), c.ref_logp(c.q), what="logp after set_data")
        with model:
            pm.set_data(
                {"X": old["X"][:50], "y_data": old["y_data"][:50]}, coords={"obs": np.arange(50)}
            )
        with pytest.raises(ValueError, match="rows"):
            eng.loglik(c.q, c.rows[:3])
    finally:
        with model:
            pm.set_data(old, coords={"obs": np.arange(c.n)})
    assert_close(eng.loglik(c.q, c.rows), c.ref_loglik(c.q)[c.rows], what="restored")


def test_memmap_covariates(tmp_path):
    rng = np.random.default_rng(11)
    n, k = 300, 3
    X = rng.normal(size=(n, k))
    Z = rng.normal(size=(n, 2))
    y = rng.normal(size=n)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "Z.npy", Z)
    Xm = np.load(tmp_path / "X.npy", mmap_mode="r")
    Zm = np.load(tmp_path / "Z.npy", mmap_mode="r")
    assert isinstance(Xm, np.memmap)

    def build(Xc, Zc):
        with pm.Model() as model:
            Zd = pm.Data("Z", Zc)
            b = pm.Normal("b", 0, 1, shape=k)
            c = pm.Normal("c", 0, 1, shape=2)
            sigma = pm.HalfNormal("sigma", 1)
            pm.Normal("y", mu=pt.dot(Xc, b) + pt.dot(Zd, c), sigma=sigma, observed=y)
        return model

    mm_model, mem_model = build(Xm, Zm), build(X, Z)
    eng = LikelihoodEngine(mm_model)
    ref = LikelihoodEngine(mem_model)
    # the constant covariate is still backed by the file (only gathered rows are read)
    assert any(isinstance(r.array(), np.memmap) for r in eng.rows)
    q = eng.initial_q() + rng.normal(0, 0.3, eng.ndim)
    rows = rng.choice(n, size=25, replace=False)
    assert_close(eng.loglik(q, rows), ref.loglik(q, rows), what="memmap loglik")
    assert_close(eng.full_loglik(q, chunk=64), ref.full_loglik(q), what="memmap full")
    assert_close(eng.logp(q), float(mm_model.compile_logp()(_model_point(mm_model, eng, q))))
    _, g = eng.loglik_sum_grad(q, rows)
    assert_close(g, ref.loglik_sum_grad(q, rows)[1], what="memmap grad")


def _model_point(model, eng, q):
    init = model.initial_point()
    info = DictToArrayBijection.map({v.name: init[v.name] for v in eng.vars}).point_map_info
    p = DictToArrayBijection.rmap(RaveledVars(q, info))
    for var, sh in eng.shared.items():
        p[var.name] = sh.get_value()
    return p


def test_transposed_numpy_constant_is_exact_or_refused():
    """``b @ Xt`` with a NumPy ``Xt`` of shape (k, N): PyMC's logp rewrites may fold the
    transpose into an (N, k) constant, which is then ordinary row data. Either way the
    engine must never return wrong values."""
    rng = np.random.default_rng(21)
    n = 80
    Xt = rng.normal(size=(3, n))
    y = rng.normal(size=n)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=3)
        pm.Normal("yobs", b @ Xt, 1, observed=y)
    try:
        eng = LikelihoodEngine(model)
    except ModelNotSupportedError as err:
        assert "yobs" in str(err) or "shape (3, 80)" in str(err)
        return
    q = rng.normal(size=3)
    ref = model.compile_fn(
        model.logp(vars=model.observed_RVs, sum=False)[0], inputs=model.value_vars
    )({"b": q})
    rows = rng.choice(n, size=10, replace=False)
    assert_close(eng.loglik(q, rows), ref[rows], what="transposed constant")


# ====================================================================== cost (not timing)
N_BIG = 200_000
BATCH = 100


@pytest.fixture(scope="module")
def big():
    rng = np.random.default_rng(31)
    X, y = logistic_data(rng, N_BIG, np.full(5, 0.3))
    eng = LikelihoodEngine(logistic_model(X, y, prior_sd=1, matmul=True))
    q = eng.initial_q() + rng.normal(0, 0.3, eng.ndim)
    rows = rng.choice(N_BIG, size=BATCH, replace=False).astype(np.int64)
    return eng, q, rows


class _RecordingArray(np.ndarray):
    """A view that records every row index read through ``take`` / ``__getitem__``."""

    log: list

    def take(self, indices, axis=None, out=None, mode="raise"):
        self.log.append(("take", axis, np.array(indices, copy=True)))
        return np.asarray(self).take(indices, axis=axis, out=out, mode=mode)

    def __getitem__(self, item):
        self.log.append(("getitem", item))
        return np.asarray(self)[item]


def test_gather_returns_only_requested_rows(big):
    eng, q, rows = big
    data = eng.gather(rows)
    assert len(data) == len(eng.rows) == 2
    for r, arr in zip(eng.rows, data):
        assert arr.shape[0] == BATCH
        assert r.array().shape[0] == N_BIG


def test_batch_evaluation_touches_only_requested_rows(big, monkeypatch):
    eng, q, rows = big
    log = []
    for r in eng.rows:
        rec = np.asarray(r.array()).view(_RecordingArray)
        rec.log = log
        monkeypatch.setattr(r, "array", lambda rec=rec: rec)
    shapes = []
    real_gather = eng.gather

    def gather(rws):
        out = real_gather(rws)
        shapes.extend(a.shape for a in out)
        return out

    monkeypatch.setattr(eng, "gather", gather)
    eng.loglik(q, rows)
    eng.loglik_pair(q, q + 0.1, rows)
    eng.loglik_diff(q, q + 0.1, rows)
    eng.loglik_sum_grad(q, rows)
    eng.loglik_rows_grad(q, rows)
    assert shapes and all(s[0] == BATCH for s in shapes), shapes
    assert log, "gather did not read the row data"
    for entry in log:
        assert entry[0] == "take" and entry[1] == 0, entry[:2]
        np.testing.assert_array_equal(np.sort(entry[2]), np.sort(rows))


def test_compiled_functions_hold_no_full_size_data(big):
    """No compiled batch function has N-row data baked in (constants or shared inputs):
    the row data reach them only through the gathered batch inputs."""
    eng, q, rows = big
    eng.loglik_rows_grad(q, rows)  # build a lazy one as well
    fns = []
    for attr in vars(eng).values():  # compiled functions, directly or in a cache dict
        items = attr.values() if isinstance(attr, dict) else [attr]
        fns += [f for f in items if hasattr(getattr(f, "maker", None), "fgraph")]
    assert len(fns) >= 5
    for f in fns:
        for var in f.maker.fgraph.variables:
            if isinstance(var, Constant):
                size = np.size(var.data)
            elif isinstance(var, SharedVariable) and isinstance(var.type, pt.TensorType):
                size = np.size(var.get_value(borrow=True))
            else:
                continue
            assert size < N_BIG, (f, var, size)


def test_batch_evaluation_memory_is_o_batch(big):
    eng, q, rows = big
    q2 = q + 0.1
    eng.loglik_diff(q, q2, rows)  # warm up: both functions compiled before tracing
    eng.loglik_sum_grad(q, rows)
    tracemalloc.start()
    try:
        for _ in range(3):
            eng.loglik_diff(q, q2, rows)
            eng.loglik_sum_grad(q, rows)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    one_column = N_BIG * 8  # bytes of one float64 column of the data
    assert peak < one_column // 4, peak


def _peak_bytes(fn):
    fn()  # warm up (compiles, caches)
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_rows_grad_memory_is_linear_in_batch(big):
    """Per-row gradients of n rows need O(n * ndim) memory, not O(n^2) (a Jacobian of the
    n-vector of row terms by reverse mode builds n x n intermediates)."""
    eng, q, _ = big
    n = 2000
    rows = np.arange(n, dtype=np.int64) * 97
    out_bytes = n * eng.ndim * 8
    peak = _peak_bytes(lambda: eng.loglik_rows_grad(q, rows, chunk=n))
    assert peak < 20 * out_bytes + 2**18, (peak, out_bytes)


def test_rows_hessian_memory_is_linear_in_batch(big):
    eng, q, _ = big
    n = 128
    rows = np.arange(n, dtype=np.int64) * 1013
    out_bytes = n * eng.ndim * eng.ndim * 8
    peak = _peak_bytes(lambda: eng.loglik_rows_hessian(q, rows, chunk=n))
    assert peak < 20 * out_bytes + 2**18, (peak, out_bytes)


# ====================================================================== refusals
def _refuse_grw(rng):
    with pm.Model() as model:
        s = pm.HalfNormal("s", 1)
        pm.GaussianRandomWalk(
            "walk", sigma=s, init_dist=pm.Normal.dist(0, 10), observed=np.cumsum(rng.normal(size=60))
        )
    return model


def _refuse_ar(rng):
    with pm.Model() as model:
        rho = pm.Normal("rho", 0, 0.5, shape=1)
        pm.AR("series", rho=rho, sigma=1.0, init_dist=pm.Normal.dist(0, 10), observed=rng.normal(size=60))
    return model


def _refuse_mvnormal_all_rows(rng):
    n = 40
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        pm.MvNormal("joint", mu=mu * np.ones(n), cov=np.eye(n) + 0.5, observed=rng.normal(size=n))
    return model


def _refuse_potential_rows(rng):
    x = rng.normal(size=60)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("yobs", mu, 1, observed=rng.normal(size=60))
        pm.Potential("penalty", -pt.sum((pt.as_tensor(x) - mu) ** 2))
    return model


def _refuse_potential_data_rows(rng):
    with pm.Model() as model:
        xd = pm.Data("xd", rng.normal(size=60))
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("yobs", mu + xd, 1, observed=rng.normal(size=60))
        pm.Potential("penalty", -pt.sum((xd - mu) ** 2))
    return model


def _refuse_nan(rng):
    y = rng.normal(size=60)
    y[[3, 17]] = np.nan
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("yobs", mu, 1, observed=y)
    return model


def _refuse_masked(rng):
    y = np.ma.masked_array(rng.normal(size=60), mask=np.arange(60) % 13 == 5)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("yobs", mu, 1, observed=y)
    return model


def _refuse_no_observed(rng):
    with pm.Model() as model:
        pm.Normal("mu", 0, 1)
    return model


def _refuse_row_counts(rng):
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("ya", mu, 1, observed=rng.normal(size=60))
        pm.Normal("yb", mu, 1, observed=rng.normal(size=40))
    return model


def _refuse_cumsum(rng):
    x = rng.normal(size=60)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1)
        pm.Normal("yobs", pt.cumsum(pt.as_tensor(x) * b), 1, observed=rng.normal(size=60))
    return model


def _refuse_data_mean(rng):
    # the mean of a pm.Data container is not constant-folded: it is a sum over the rows
    with pm.Model() as model:
        xd = pm.Data("xd", rng.normal(2.0, 1.0, size=60))
        b = pm.Normal("b", 0, 1)
        pm.Normal("yobs", b * (xd - xd.mean()), 1, observed=rng.normal(size=60))
    return model


def _refuse_transposed_data(rng):
    n = 60
    with pm.Model() as model:
        Xc = pm.Data("Xcols", rng.normal(size=(3, n)))
        b = pm.Normal("b", 0, 1, shape=3)
        pm.Normal("yobs", b @ Xc, 1, observed=rng.normal(size=n))
    return model


def _refuse_row_latent(rng):
    with pm.Model() as model:
        z = pm.Normal("z", 0, 1, shape=60)
        pm.Normal("yobs", z, 1, observed=rng.normal(size=60))
    return model


def _refuse_scalar_observed(rng):
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 1)
        pm.Normal("yscalar", mu, 1, observed=0.3)
    return model


REFUSALS = {
    "gaussian_random_walk": (_refuse_grw, ["'walk'"]),
    "ar": (_refuse_ar, ["'series'"]),
    "mvnormal_across_rows": (_refuse_mvnormal_all_rows, ["'joint'"]),
    "potential_on_rows": (_refuse_potential_rows, ["'penalty'"]),
    "potential_on_data_rows": (_refuse_potential_data_rows, ["'penalty'", "xd"]),
    "missing_nan": (_refuse_nan, ["'yobs'", "missing"]),
    "missing_masked": (_refuse_masked, ["'yobs'", "missing"]),
    "no_observed": (_refuse_no_observed, ["no observed"]),
    "different_row_counts": (_refuse_row_counts, ["'ya'", "'yb'"]),
    "cumsum_over_rows": (_refuse_cumsum, ["yobs", "factorise"]),
    "mean_of_data_container": (_refuse_data_mean, ["yobs", "factorise"]),
    "transposed_data": (_refuse_transposed_data, ["Xcols"]),
    "per_row_latent": (_refuse_row_latent, ["'z'"]),
    "scalar_observed": (_refuse_scalar_observed, ["'yscalar'"]),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_refusal(name):
    build, needles = REFUSALS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ImputationWarning
        model = build(np.random.default_rng(sorted(REFUSALS).index(name)))
        with pytest.raises(ModelNotSupportedError) as info:
            LikelihoodEngine(model)
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, (needle, msg)


@pytest.mark.parametrize("form", ["pm.Minibatch", "total_size only"])
def test_pymc_minibatch_models_are_refused_with_what_to_do(form):
    """A model written for PyMC's variational minibatching names the variable and says to
    build the model on all rows (it was refused as 'no row-indexed data' or 'does not
    factorise')."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, 3))
    y = (X @ np.ones(3) + rng.normal(size=1000) > 0).astype("float64")
    if form == "pm.Minibatch":
        X, y = pm.Minibatch(X, y, batch_size=100)
    with pm.Model():
        b = pm.Normal("b", 0, 1, shape=3)
        pm.Bernoulli("y_obs", logit_p=X @ b, observed=y, total_size=1000)
        with pytest.raises(ModelNotSupportedError,
                           match="'y_obs' uses pm.Minibatch or total_size=.*all N rows"):
            LikelihoodEngine()


def test_full_loglik_diff_is_minus_inf_outside_the_support():
    """A far proposal whose scale underflows to 0 gives a log ratio of -inf (rejected) on
    both PyMC versions: PyMC 6's compiled parameter checks raise where PyMC 5's return
    -inf (the broken-sampler check met this in the full-data fallback)."""
    import pymc as pm

    rng = np.random.default_rng(3)
    with pm.Model():
        mu = pm.Normal("mu", 0.0, 1.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("y", mu, sigma, observed=rng.normal(size=50))
        eng = LikelihoodEngine()
    q = eng.initial_q()
    far = q.copy()
    far[[v.name for v in eng.vars].index("sigma_log__")] = -800.0  # exp(-800) == 0.0
    assert eng.full_loglik_diff(q, far) == -np.inf
    assert np.isfinite(eng.full_loglik_diff(q, q + 0.1))


def test_large_constant_signatures_are_made_once_while_pymc_derives_a_log_density():
    """PyTensor hashes a constant by a NaN-masked sum of all its values, anew at each
    call; during ``model_logp`` a large constant's signature is made once and hashed from
    a sample. Equality is unchanged: equal data are equal (and hash alike), any changed
    value makes them differ, and NaN data still compare as PyTensor compares them."""
    import pytensor.tensor as pt
    from pytensor.tensor.variable import TensorConstantSignature

    from pymc_subsample.engine.analysis import _BIG_CONSTANT, _constant_signatures_once

    a = np.linspace(0.0, 1.0, 3 * _BIG_CONSTANT + 7)
    b = a.copy()
    b[5] += 1.0  # not in the hashed sample (stride 3): equal hashes, unequal data
    nan = a.copy()
    nan[10] = np.nan
    c_a, c_same, c_b = pt.constant(a), pt.constant(a.copy()), pt.constant(b)
    c_nan, c_nan2 = pt.constant(nan), pt.constant(nan.copy())
    small = pt.constant(np.arange(3.0))
    with _constant_signatures_once():
        sig = c_a.signature()
        assert c_a.signature() is sig  # made once
        assert sig == c_same.signature() and hash(sig) == hash(c_same.signature())
        assert c_a.equals(c_same) and not c_a.equals(c_b)
        assert c_nan.equals(c_nan2) and not c_nan.equals(c_a)
        assert small.signature() is not small.signature()  # small constants: PyTensor's
    # after the context: the constants hashed inside keep their signature (PyMC's later
    # derivations on the model hash them as cheaply); others get PyTensor's own again
    assert c_a.signature() is sig and c_a.equals(c_same) and not c_a.equals(c_b)
    fresh = pt.constant(a.copy())
    assert fresh.signature() is not fresh.signature()
    assert type(fresh.signature()) is TensorConstantSignature


def test_pymc_s_own_log_density_after_a_step_reuses_the_data_s_signature():
    """``pm.sample`` derives the model's log density again (``assign_step_methods``):
    after a step's analysis the observed data's constant keeps the signature made once,
    and PyMC's own derivation gives the same log density as on a model never analysed."""
    from pytensor.tensor.variable import TensorConstantSignature

    from pymc_subsample.engine.analysis import _BIG_CONSTANT, model_logp

    rng = np.random.default_rng(1)
    n = _BIG_CONSTANT + 10
    X = rng.normal(size=(n, 2))
    y = (rng.random(n) < 0.5).astype(int)
    models = []
    for _ in range(2):
        with pm.Model() as model:
            b = pm.Normal("b", 0, 1, shape=2)
            pm.Bernoulli("y", logit_p=pm.math.dot(X, b), observed=y)
        models.append(model)
    model_logp(models[0], models[0].observed_RVs, sum=False)
    const = models[0].rvs_to_values[models[0].observed_RVs[0]]
    sig = const.signature()
    assert isinstance(sig, TensorConstantSignature) and const.signature() is sig
    point = {"b": np.array([0.3, -0.2])}
    values = [m.compile_fn(m.logp(), inputs=m.value_vars)(point) for m in models]
    np.testing.assert_allclose(values[0], values[1], rtol=1e-12)


def test_the_log_density_of_a_model_with_large_data_is_the_same_inside_the_context():
    """The model's log density derived with the cached signatures evaluates as PyMC's."""
    from pymc_subsample.engine.analysis import _BIG_CONSTANT, model_logp

    rng = np.random.default_rng(0)
    n = _BIG_CONSTANT + 100
    X = rng.normal(size=(n, 2))
    y = (rng.random(n) < 0.5).astype(int)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, b), observed=y)
    point = {"b": np.array([0.3, -0.2])}
    ours = model.compile_fn(model_logp(model, model.observed_RVs, sum=True),
                            inputs=model.value_vars)(point)
    theirs = model.compile_fn(model.logp(vars=model.observed_RVs),
                              inputs=model.value_vars)(point)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
