"""Hostile cases (issue 25): wrong models and data are refused with a message that names
the variable and says what to do; the common right ones sample.

Each refusal test asserts the exception type and the words of its message. The files on
disk that change under a step are in ``test_hostile_files.py``; the normal-approximation
warnings in ``kernels/test_clt_error.py``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_subsample as pms
from pymc_subsample.steps import REGISTRY as STEP_REGISTRY
from pymc_subsample.engine.analysis import check_factorises
from pymc_subsample.testing import mcse_mean, mcse_sd, posterior, sample_stats
from tests.conftest import logistic_model, run_sample, sampler_warnings

STEPS = [entry.load() for entry in STEP_REGISTRY.values()]
STEP_IDS = [s.__name__ for s in STEPS]


def _data(n=3000, d=3, seed=1):
    X, y, _ = pms.datasets.make_logistic(n, d, seed=seed)
    return X, y


def _logistic(X, y, *, link=None):
    return logistic_model(X, y, matmul=True, link=link)


# ---------------------------------------------------------------- rows coupled together
def _normaliser(eta, n):
    # the example: a softmax over ALL rows, clipped into (0, 1)
    return pt.clip(pt.exp(eta - pm.math.logsumexp(eta)) * n * 0.5, 1e-6, 1 - 1e-6)


COUPLINGS = {
    "logsumexp_normaliser": lambda eta, n: _normaliser(eta, n),
    "centred_by_row_mean": lambda eta, n: pm.math.invlogit(eta - eta.mean()),
    "cumulative_sum": lambda eta, n: pm.math.invlogit(eta + 0.01 * pt.cumsum(eta)),
    "sorted": lambda eta, n: pm.math.invlogit(pt.sort(eta)),
}


@pytest.mark.parametrize("coupling", sorted(COUPLINGS))
@pytest.mark.parametrize("step", STEPS, ids=STEP_IDS)
def test_rows_coupled_through_the_data_are_refused(step, coupling):
    X, y = _data()
    model = _logistic(X, y, link=lambda eta: COUPLINGS[coupling](eta, len(y)))
    with model, pytest.raises(pms.ModelNotSupportedError, match=r"'?y'? does not factorise"):
        step()


def test_check_factorises_catches_a_normaliser_only_away_from_the_initial_point():
    """At the initial point (all coefficients 0) the clipped normaliser is saturated in
    every small batch; the check's larger moves bring it out (the old check, with one
    move of sd 0.3, passed this model)."""
    X, y = _data(n=200_000, d=3)
    n = len(y)

    def loglik(q, rows):
        eta = X[rows] @ q
        lse = np.logaddexp.reduce(eta)
        p = np.clip(np.exp(eta - lse) * n * 0.5, 1e-6, 1 - 1e-6)
        return np.where(y[rows] == 1, np.log(p), np.log1p(-p))

    with pytest.raises(pms.ModelNotSupportedError, match="does not factorise"):
        check_factorises(loglik, n, np.zeros(3), ["y"])


def test_rows_not_finite_at_a_far_point_do_not_count_as_dependence():
    """A row whose term is -inf in one batch and NaN in another at a far point (as
    Bambi's NegativeBinomial, ``p = alpha / (mu + alpha)``, gives) is not evidence that
    rows depend on each other; finite terms that differ, or a term finite in one batch
    only, still are."""
    from pymc_subsample.engine.analysis import _same_terms

    assert _same_terms([-np.inf, np.nan, 1.0], [np.nan, -np.inf, 1.0])
    assert not _same_terms([-np.inf, 1.0], [0.0, 1.0])
    assert not _same_terms([1.0, 2.0], [1.0, 2.0 + 1e-6])
    n = 300

    def loglik(q, rows):  # odd rows are -inf alone and NaN in a batch
        out = -np.abs(q[0]) * np.ones(len(rows))
        out[rows % 2 == 1] = -np.inf if len(rows) == 1 else np.nan
        return out

    check_factorises(loglik, n, np.zeros(1), ["y"])


def test_the_pass_over_all_rows_catches_a_normaliser_saturated_in_every_small_batch():
    """A term that depends on the batch only once the batch has many rows (here: more
    than 1,000) passes every small-batch comparison; the set-up pass compares a few
    rows' terms in its chunk with the same rows alone."""
    n = 5000

    def loglik(q, rows):
        return np.full(len(rows), -1.0 if len(rows) > 1000 else -2.0)

    from pymc_subsample.engine.analysis import RowScan

    check_factorises(loglik, n, np.zeros(2), ["y"])  # fooled: batches of <= 512 rows
    scan = RowScan([], probes=[3, 4000])
    terms = loglik(None, np.arange(n))
    scan.add(scan.scan(0, n, [], terms))
    scan.raise_if_bad(["y"])  # all terms finite
    with pytest.raises(pms.ModelNotSupportedError, match="'?y'? does not factorise"):
        scan.check_probes(loglik, None, ["y"])


def test_a_row_factorising_likelihood_passes_the_checks():
    X, y = _data()
    with _logistic(X, y, link=pm.math.invlogit):
        pms.AustereMH()


# ---------------------------------------------------------------- observations outside the support
def _bad_bernoulli():
    X, y = _data()
    y = y.copy()
    y[[7, 1234]] = 2
    return _logistic(X, y)


def _bad_poisson():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(3000, 2))
    y = rng.poisson(np.exp(0.3 * X[:, 0]))
    y[42] = -1
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0, shape=2)
        pm.Poisson("y", mu=pm.math.exp(pt.as_tensor(X) @ b), observed=y)
    return model


@pytest.mark.parametrize("step", STEPS, ids=STEP_IDS)
def test_bernoulli_observation_of_2_is_refused_naming_the_rows(step):
    with _bad_bernoulli(), pytest.raises(pms.InvalidDataError) as err:
        step()
    msg = str(err.value)
    assert "not finite at the initial point in row(s) 7, 1234" in msg
    assert "observed 'y' = 2, 2" in msg
    assert "NUTS refuses" in msg


@pytest.mark.parametrize("step", STEPS, ids=STEP_IDS)
def test_poisson_observation_of_minus_1_is_refused(step):
    with _bad_poisson(), pytest.raises(pms.InvalidDataError,
                                       match=r"row\(s\) 42 .*observed 'y' = -1"):
        step()


def _spy_check_terms(monkeypatch):
    """Record what ``PredictorMap.check_terms`` hands the row check (ScalableMH's NumPy
    pass over all rows on a recognised GLM)."""
    from pymc_subsample.engine.predictor import PredictorMap

    made, original = [], PredictorMap.check_terms

    def spy(self, v):
        made.append(original(self, v))
        return made[-1]

    monkeypatch.setattr(PredictorMap, "check_terms", spy)
    return made


@pytest.mark.parametrize("model", [_bad_bernoulli, _bad_poisson], ids=["bernoulli", "poisson"])
def test_scalable_checks_a_recognised_glm_on_numpy_terms_with_the_same_refusal(
        model, monkeypatch):
    """ScalableMH's row check runs on the family's NumPy terms (in parallel) on a
    recognised GLM: the terms are finite exactly where the model's compiled ones are,
    so the refusal names the same rows and values as the compiled pass's."""
    made = _spy_check_terms(monkeypatch)
    with model(), pytest.raises(pms.InvalidDataError) as fast:
        pms.ScalableMH()
    assert made and made[0] is not None  # the NumPy pass ran
    monkeypatch.undo()
    from pymc_subsample.engine.likelihood import LikelihoodEngine

    with model(), pytest.raises(pms.InvalidDataError) as compiled:
        LikelihoodEngine()  # the compiled pass
    assert str(fast.value) == str(compiled.value)


@pytest.mark.parametrize("defer", [False, True], ids=["own-pass", "deferred"])
def test_scalable_numpy_row_check_still_compares_probe_rows_with_the_model_graph(
        monkeypatch, defer):
    """The NumPy pass cannot see a coupling of the rows (its terms are per row by
    construction): the probe rows' chunks are evaluated by the compiled graph and
    compared with the rows alone. A graph whose terms depend on the batch size only
    above 1,000 rows is caught there, also when the scan of the other rows is deferred
    to the mode search's first pass (ScalableMH)."""
    from pymc_subsample.engine.likelihood import LikelihoodEngine

    X, y = _data(n=5000)
    with _logistic(X, y):
        eng = LikelihoodEngine(check=False)
    # the compiled terms: -1 in batches of more than 1,000 rows, -2 alone
    monkeypatch.setattr(eng, "_fn", lambda name: (
        lambda q, *data: np.full(len(data[0]), -1.0 if len(data[0]) > 1000 else -2.0)))
    monkeypatch.setattr(eng, "loglik", lambda q, rows: np.full(len(rows), -2.0))
    numpy_terms = lambda data: np.full(len(data[0]), -2.0)  # noqa: E731
    with pytest.raises(pms.ModelNotSupportedError, match="'?y'? does not factorise"):
        eng.check_rows(eng.initial_q(), terms=numpy_terms, defer=defer)


def test_scalable_falls_back_to_the_compiled_row_check_without_a_declared_support(
        monkeypatch):
    """A family that declares no support (here the Bernoulli's declaration removed)
    gets the compiled pass, which still refuses the row."""
    from pymc_subsample.kernels.families import get_family

    monkeypatch.setattr(type(get_family("bernoulli_logit")), "support", None)
    made = _spy_check_terms(monkeypatch)
    with _bad_bernoulli(), pytest.raises(pms.InvalidDataError, match=r"row\(s\) 7, 1234"):
        pms.ScalableMH()
    assert made == [None]


# ---------------------------------------------------------------- NaN / inf covariates
@pytest.mark.parametrize("step", STEPS, ids=STEP_IDS)
def test_nan_covariate_in_memory_is_refused_naming_the_data_and_row(step):
    X, y = _data()
    X = X.copy()
    X[11, 1] = np.nan
    with _logistic(X, y), pytest.raises(
            pms.InvalidDataError,
            match=r"constant of shape \(3000, 3\) \(data of the likelihood of y\) has a NaN "
                  r"or infinite value in row 11 \(value \[.* nan .*\]\)"):
        step()


def test_inf_covariate_in_pm_data_is_refused_naming_it():
    X, y = _data()
    X = X.copy()
    X[11, 1] = -np.inf
    with pm.Model():
        Xd = pm.Data("X", X)
        b = pm.Normal("b", 0.0, 1.0, shape=3)
        pm.Bernoulli("y", logit_p=Xd @ b, observed=y)
        with pytest.raises(pms.InvalidDataError,
                           match=r"data 'X' .* NaN or infinite value in row 11"):
            pms.AustereMH()


def test_inf_covariate_in_a_plain_memmap_is_refused(tmp_path):
    X, y = _data()
    X = X.copy()
    X[2999, 0] = np.inf
    path = tmp_path / "X.npy"
    np.save(path, X)
    Xm = np.load(path, mmap_mode="r")  # a plain memmap, not pms.out_of_core.rows
    with _logistic(Xm, y), pytest.raises(pms.InvalidDataError,
                                         match=r"NaN or infinite value in row 2999 .*inf"):
        pms.ScalableMH()


# ---------------------------------------------------------------- empty data
@pytest.mark.parametrize("step", STEPS, ids=STEP_IDS)
def test_zero_rows_are_refused(step):
    X, y = _data()
    with _logistic(X[:0], y[:0]), pytest.raises(pms.ModelNotSupportedError,
                                                match="'y' has 0 rows"):
        step()


@pytest.mark.parametrize("step", STEPS, ids=STEP_IDS)
def test_zero_columns_are_refused(step):
    X, y = _data()
    with _logistic(X[:, :0], y), pytest.raises(ValueError,
                                               match="'b' have no elements .*0 columns"):
        step()


# ---------------------------------------------------------------- integer observations in pm.Data
def _int_data_model(X, y, *, dims):
    coords = {"obs": np.arange(len(y))} if dims else None
    with pm.Model(coords=coords) as model:
        y_obs = pm.Data("y_obs", y.astype("int64"), dims="obs" if dims else None)
        b = pm.Normal("b", 0.0, 1.0, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=pt.as_tensor(X) @ b, observed=y_obs,
                     dims="obs" if dims else None)
    return model


@pytest.mark.parametrize("dims", [True, False], ids=["dims", "no_dims"])
@pytest.mark.parametrize("step", STEPS, ids=STEP_IDS)
def test_integer_observations_in_pm_data_are_accepted(step, dims):
    X, y = _data()
    with _int_data_model(X, y, dims=dims):
        s = step()
    assert s.n_rows == len(y)


@pytest.fixture(scope="module")
def int_data_reference():
    """NUTS on the integer-pm.Data model (the reference), 2 x 1,000 draws."""
    X, y = _data(n=2000, d=2, seed=5)
    model = _int_data_model(X, y, dims=True)
    with model:
        idata = pm.sample(draws=1000, tune=500, chains=2, cores=1, random_seed=11,
                          progressbar=False, compute_convergence_checks=False)
    return model, posterior(idata)["b"].values


def _matches_nuts(draws, ref):
    """The largest z-score of the differences of the means and of the sds."""
    z = []
    for j in range(ref.shape[-1]):
        a, b = draws[..., j], ref[..., j]
        z.append(abs(a.mean() - b.mean()) / np.hypot(mcse_mean(a), mcse_mean(b)))
        z.append(abs(a.std() - b.std()) / np.hypot(mcse_sd(a), mcse_sd(b)))
    return max(z)


@pytest.mark.parametrize("step", [pms.ScalableMH, pms.AustereMH], ids=["ScalableMH", "AustereMH"])
def test_integer_observations_in_pm_data_match_nuts(int_data_reference, step):
    model, ref = int_data_reference
    with model:
        s = step()
    idata = run_sample(model, s, draws=1500, tune=500, chains=2, seed=3)
    assert _matches_nuts(posterior(idata)["b"].values, ref) < 4.5


class _AustereAcceptingEveryProposal(pms.AustereMH):
    """A deliberately broken sampler (with a random walk, which then only diffuses). The
    default proposals are no mutants here: accepted always, they sample the
    Laplace approximation, which this posterior (N = 2,000) is close to."""

    def _decide(self, q, q_prop, log_prior_ratio, log_qratio):
        d = super()._decide(q, q_prop, log_prior_ratio, log_qratio)
        return dataclasses.replace(d, accepted=True)


def test_integer_pm_data_check_catches_a_sampler_that_accepts_every_proposal(
        int_data_reference):
    model, ref = int_data_reference
    with model:
        s = _AustereAcceptingEveryProposal(proposal="random_walk")
    idata = run_sample(model, s, draws=1500, tune=500, chains=2, seed=3)
    assert _matches_nuts(posterior(idata)["b"].values, ref) > 4.5


def test_float_observations_in_pm_data_for_a_bernoulli_are_accepted():
    """Another cast PyMC inserts: float 0/1 data observed by a discrete likelihood."""
    X, y = _data()
    with pm.Model():
        y_obs = pm.Data("y_obs", y.astype("float64"))
        b = pm.Normal("b", 0.0, 1.0, shape=3)
        pm.Bernoulli("y", logit_p=pt.as_tensor(X) @ b, observed=y_obs)
        assert pms.ScalableMH().n_rows == len(y)


# ---------------------------------------------------------------- SGLD that diverges
def test_sgld_that_diverges_says_so_naming_the_step_size():
    """A run-away transition is not made: the draw is flagged ``diverging`` (as NUTS
    flags its divergences) and the chain warns with the step size and the advice."""
    X, y = _data()
    model = _logistic(X, y)
    with model:
        s = pms.SGLD(step_size=1e6, precondition=False)
    idata = run_sample(model, s, draws=50, tune=50, chains=1, seed=1, keep_warning_stat=True)
    assert sample_stats(idata)["diverging"].values.any()
    assert np.all(np.isfinite(posterior(idata)["b"].values))
    found = sampler_warnings(idata, "a transition diverged:")
    assert found[0] and "h = 1e+06" in found[0][0] and "Lower step_size" in found[0][0]


def test_sgld_preconditioned_step_size_above_4_is_refused():
    X, y = _data()
    with _logistic(X, y), pytest.raises(ValueError, match="unstable for h >= 4"):
        pms.SGLD(step_size=4.0)


# ---------------------------------------------------------------- arguments
def test_duplicated_vars_are_refused():
    X, y = _data()
    with _logistic(X, y) as model, pytest.raises(ValueError, match="'b' more than once"):
        pms.ScalableMH(vars=[model["b"], model["b"]])


@pytest.mark.parametrize("delta", [np.inf, 5.0, 0.51])
def test_barker_delta_out_of_range_is_refused(delta):
    X, y = _data()
    with _logistic(X, y), pytest.raises(ValueError, match="delta must be"):
        pms.BarkerMinibatch(delta=delta)


@pytest.mark.parametrize("max_memory", ["x", -1, 0, np.inf])
def test_sgld_max_memory_must_be_a_number_of_bytes(max_memory):
    X, y = _data()
    with _logistic(X, y), pytest.raises(ValueError, match="max_memory must be a positive "
                                                         "number of bytes"):
        pms.SGLD(gradient="saga", max_memory=max_memory)


def test_scalable_deferred_row_check_runs_before_the_hierarchical_sweep():
    """ScalableMH defers its scan of the rows to the mode search's first pass; a model
    that takes the blocked hierarchical sweep instead (no such pass) still has every row
    checked before the sweep reads them: a response outside the support is refused."""
    import pymc as pm

    from pymc_subsample.engine import likelihood

    rng = np.random.default_rng(8)
    n, groups, chunk = 330_000, 8, 65536
    g = rng.integers(0, groups, n)
    x = rng.normal(size=n)
    y = (rng.random(n) < 0.5).astype(np.int64)
    # a bad row in a chunk without probe rows (check_rows's seed): only the deferred
    # scan of all rows can see it
    probes = np.random.default_rng(2468).choice(n, size=4, replace=False)
    free = sorted(set(range(0, n, chunk)) - {int(r) // chunk * chunk for r in probes})
    bad = free[0] + 2777
    y[bad] = 3
    ran = []
    original = likelihood.DeferredRowCheck.run
    with pm.Model():
        mu = pm.Normal("mu", 0, 1)
        tau = pm.HalfNormal("tau", 1)
        a = pm.Normal("a", mu, tau, shape=groups)
        b = pm.Normal("b", 0, 1)
        pm.Bernoulli("y", logit_p=a[g] + b * x, observed=y)
        try:
            likelihood.DeferredRowCheck.run = lambda self: ran.append(1) or original(self)
            with pytest.raises(pms.InvalidDataError, match=rf"row\(s\) {bad} "):
                step = pms.ScalableMH
                step._before_sweep, before = (
                    lambda self: ran.append("sweep") or before(self)), step._before_sweep
                try:
                    step()
                finally:
                    step._before_sweep = before
        finally:
            likelihood.DeferredRowCheck.run = original
    assert ran == ["sweep", 1]  # the sweep was chosen; the deferred check refused the row


@pytest.mark.parametrize("bad", [20, -1], ids=["G", "negative"])
def test_a_group_index_out_of_range_names_the_data_and_the_effects(bad):
    """``g[0] = G`` (or -1) gave PyTensor's IndexError from the batch graph, naming no
    variable; now the set-up refuses it, naming the index data, the row and the
    effects."""
    import pymc_subsample as pms

    rng = np.random.default_rng(0)
    n, G = 800, 20
    g = rng.integers(0, G, n)
    g[5] = bad
    x = rng.standard_normal(n)
    y = (rng.random(n) < 0.5).astype(np.int64)
    with pm.Model():
        gd = pm.Data("group", g)
        a = pm.Normal("a", 0, pm.HalfNormal("tau", 1), shape=G)
        b = pm.Normal("b", 0, 1)
        pm.Bernoulli("y", logit_p=b * x + a[gd], observed=y)
        with pytest.raises(pms.InvalidDataError,
                           match=rf"data 'group' holds values .*\(row 5: {bad}\).*'a' of "
                                 r"length 20.*0\.\.19"):
            pms.AustereMH()
