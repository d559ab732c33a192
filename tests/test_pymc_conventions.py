"""PyMC conventions of the three steps: progress-bar columns, and pm.set_data after a
step was built.

What a PyMC user expects from a step method besides its draws: the progress bar shows
step-specific columns (rows read per draw, acceptance and, for ScalableMH, the share of
exact full-data fallbacks), as ``pm.Metropolis`` shows its scaling and acceptance.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.steps import REGISTRY as STEP_REGISTRY
from pymc_subsample.steps.mh import MHStep
from pymc_subsample.testing import batch_means_se, from_datasets, sample_stats
from tests.conftest import logistic_data, logistic_model, run_sample

#: every registered step, and those with an MH test (SGLD has none: its progress columns
#: differ)
ALL_STEPS = list(STEP_REGISTRY)
METHODS = [name for name in ALL_STEPS if issubclass(STEP_REGISTRY[name].load(), MHStep)]


@pytest.fixture(scope="module")
def model():
    x, y = logistic_data(np.random.default_rng(7), 3000, 0.8, intercept=0.3)
    with logistic_model(x, y, prior_sd=2, intercept_sd=2) as m:
        pm.Normal("c", 0, 1)  # not in the likelihood: for another step of a CompoundStep
    return m


@pytest.mark.parametrize("name", METHODS)
def test_progress_bar_columns_are_running_means_of_the_stats(name, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # a wide console: every column (80: see test_progress_bar)
    cls = getattr(pms, name)
    columns, fields = cls._progressbar_config(n_chains=2)
    headers = [c.get_table_column().header for c in columns]
    assert headers[:2] == ["Rows", "Acc"]
    assert ("Fallbk" in headers) == (name == "ScalableMH")
    assert all(v == ["-", "-"] for v in fields.values()) and len(fields) == len(columns)
    (update,) = cls._make_progressbar_update_functions()
    draws = [{"data_used": 100, "accepted": 1.0, "fallback": False},
             {"data_used": 300, "accepted": 0.0, "fallback": True}]
    out = [update(d) for d in draws][-1]
    assert set(out) == set(fields)
    assert float(out["pms_rows"].replace(",", "")) == 200.0
    assert float(out["pms_accept"]) == 0.5
    if name == "ScalableMH":
        assert float(out["pms_fallback"]) == 0.5
    # a new sampling run starts new means
    (fresh,) = cls._make_progressbar_update_functions()
    assert float(fresh(draws[0])["pms_accept"]) == 1.0


@pytest.mark.parametrize("progressbar", [True, "split+stats"])
@pytest.mark.parametrize("name", ALL_STEPS)
def test_sampling_with_the_progress_bar_on(model, name, progressbar):
    """The hooks run inside ``pm.sample`` on PyMC 5 and 6, alone and in a CompoundStep."""
    with model:
        step = getattr(pms, name)()
    idata = run_sample(model, step, draws=40, tune=20, chains=2, seed=3,
                       progressbar=progressbar)
    assert sample_stats(idata)["data_used"].shape == (2, 40)
    with model:
        compound = [getattr(pms, name)([model["a"], model["b"]]), pm.Metropolis([model["c"]])]
    idata = run_sample(model, compound, draws=20, tune=10, chains=1, seed=4,
                       progressbar=progressbar)
    assert sample_stats(idata)["data_used"].shape[:2] == (1, 20)


@pytest.fixture
def data_model():
    x, y = logistic_data(np.random.default_rng(8), 2000, 0.8, intercept=0.3)
    with pm.Model() as m:
        xd = pm.Data("x", x)
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 2)
        pm.Bernoulli("y", logit_p=a + b * xd, observed=y)
    return m


@pytest.mark.parametrize("name", ALL_STEPS)
def test_set_data_after_construction_is_refused(data_model, name):
    """A step whose sums, bounds and Gaussian fit come from the data refuses to sample
    after ``pm.set_data`` changed it (same N, new values), naming the data; before the
    change it samples. Never silently with stale control-variate sums."""
    with data_model:
        step = getattr(pms, name)()
    idata = run_sample(data_model, step, draws=10, tune=10, chains=1, seed=1)
    assert sample_stats(idata)["data_used"].shape == (1, 10)
    x_old = np.asarray(data_model["x"].get_value())
    with data_model:
        pm.set_data({"x": x_old * 1.5})
    try:
        with pytest.raises(ValueError, match=r"data 'x' changed since this step was built"):
            run_sample(data_model, step, draws=10, tune=10, chains=1, seed=1)
    finally:
        with data_model:
            pm.set_data({"x": x_old})


@pytest.mark.parametrize("name", ALL_STEPS)
@pytest.mark.parametrize("where", ["numpy array", "pm.Data buffer"])
def test_data_changed_in_place_is_refused(name, where):
    """Values written into the arrays a model was built from (``X[:] = X2; y[:] = y2``, or
    a ``pm.Data`` buffer through ``get_value(borrow=True)``) after the step was built are
    refused when a chain starts, naming the data (issue 44: all four steps sampled the
    old data's posterior, 59-112 sd off, without a word)."""
    x, y = logistic_data(np.random.default_rng(8), 2000, 0.8, intercept=0.3)
    with pm.Model() as m:
        xd = pm.Data("x", x) if where == "pm.Data buffer" else x
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 2)
        pm.Bernoulli("y", logit_p=a + b * xd, observed=y)
        step = getattr(pms, name)()
    run_sample(m, step, draws=5, tune=5, chains=1, seed=1)  # unchanged: it samples
    x2, y2 = logistic_data(np.random.default_rng(9), 2000, -0.8, intercept=0.3)
    buf = m["x"].get_value(borrow=True) if where == "pm.Data buffer" else x
    buf[:] = x2
    y[:] = y2  # the observed array too
    with pytest.raises(ValueError, match=r"changed since this step was built \(pm\.set_data, "
                       r"or values written into the array\)"):
        run_sample(m, step, draws=5, tune=5, chains=1, seed=1)


def test_steps_without_data_sums_follow_set_data(data_model):
    """Without control variates the test reads the live data: set_data is followed."""
    with data_model:
        step = pms.AustereMH(control_variate=0)
        pm.set_data({"x": np.asarray(data_model["x"].get_value()) * 1.5})
    idata = run_sample(data_model, step, draws=10, tune=10, chains=1, seed=1)
    assert sample_stats(idata)["data_used"].shape == (1, 10)


def test_an_unpickled_step_compares_the_data_digest(data_model):
    """Under mp_ctx="spawn" / "forkserver" PyMC pickles the step: the worker's copy has
    no object identities to compare, and checks a digest of the data instead."""
    import cloudpickle

    with data_model:
        step = pms.BarkerMinibatch()
    copy = cloudpickle.loads(cloudpickle.dumps(step))
    copy.set_rng(np.random.default_rng(0))  # unchanged data: fine
    model = copy.engine.model
    with model:
        pm.set_data({"x": np.asarray(model["x"].get_value()) * 1.5})
    with pytest.raises(ValueError, match="pm.set_data"):
        copy.set_rng(np.random.default_rng(0))
    # data replaced in the parent before the step is pickled: the digest is taken at
    # pickling, so the worker must learn of the change from the parent
    with data_model:
        step = pms.BarkerMinibatch()
        pm.set_data({"x": np.asarray(data_model["x"].get_value()) * 1.5})
    late = cloudpickle.loads(cloudpickle.dumps(step))
    with pytest.raises(ValueError, match="'x' changed since"):
        late.set_rng(np.random.default_rng(0))


def test_set_up_passes_show_a_progress_bar_on_request(model):
    """``progressbar=True`` shows one bar per pass over the data during set-up (by default
    only from 5,000,000 rows); the passes' chunks still cover every row once."""
    with model:
        step = pms.AustereMH(progressbar=True)
    eng = step.engine
    assert eng._bar is None  # removed with the set-up
    with eng.showing_progress(True, label="test"):
        ranges = list(eng.row_ranges(700))
        list(eng.row_ranges(5000))
        assert eng._bar_passes == 2
    assert ranges[0][0] == 0 and ranges[-1][1] == eng.n_rows
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    with eng.showing_progress(None):  # 3,000 rows: below the default threshold
        assert eng._bar is None


def _chain(step, point, k=80, stop_at=40):
    draws = []
    for i in range(k):
        if i == stop_at:
            step.stop_tuning()
        point, _ = step.step(point)
        draws.append(np.concatenate([np.ravel(point[v.name]) for v in step.vars]))
    return np.array(draws)


@pytest.mark.parametrize("name", ALL_STEPS)
def test_sampling_state_carries_the_tuning_state(model, name):
    """PyMC's ``sampling_state`` holds the step's whole chain state: a freshly built step
    given the state of one tuned for 150 steps continues that chain draw for draw (through
    more tuning and its end); a fresh step without it does not. The state is a
    ``SubsampleStepState`` with the kernel's tuned values (the proposal's)."""
    cls = getattr(pms, name)
    with model:
        step = cls(vars=[model["a"], model["b"]])
    step.set_rng(np.random.default_rng(1))
    point = model.initial_point()
    for _ in range(150):
        point, _ = step.step(point)
    state = step.sampling_state
    assert type(state).__name__ == "SubsampleStepState"
    assert state.kernel_state or state.chain.noise_n > 0  # SGLD: its noise check
    expected = _chain(step, dict(point))
    with model:
        fresh = cls(vars=[model["a"], model["b"]])
        other = cls(vars=[model["a"], model["b"]])
    fresh.set_rng(np.random.default_rng(5))
    fresh.sampling_state = state
    np.testing.assert_array_equal(_chain(fresh, dict(point)), expected)
    other.set_rng(np.random.default_rng(5))
    rng_only = other.sampling_state
    rng_only.rng = state.rng  # the same randomness, but the untuned proposal
    other.sampling_state = rng_only
    assert not np.array_equal(_chain(other, dict(point)), expected)


EXPECTED_SETTINGS = {
    "AustereMH": ({"epsilon": 0.1, "batch_size": 200},
                  {"epsilon": 0.1, "batch_size": 200, "batch_increment": 200,
                   "control_variate": 2, "steps_per_draw": 1}),
    "BarkerMinibatch": ({"delta": 0.02, "batch_size": 150, "batch_increment": 50},
                        {"delta": 0.02, "temperature": 1.0, "batch_size": 150,
                         "batch_increment": 50, "control_variate": 2, "steps_per_draw": 3}),
    "ScalableMH": ({"order": 1, "truncation": 500.0},
                   {"order": 1, "truncation": 500.0, "steps_per_draw": 1}),
    "SGLD": ({"step_size": 0.1, "batch_size": 50},
             {"step_size": 0.1, "batch_size": 50, "steps_per_draw": 1}),
}


@pytest.mark.parametrize("name", ALL_STEPS)
def test_settings_are_recorded_with_the_draws(model, name):
    """``idata = pm.sample(step=...)`` keeps the step's settings: constant ``setting_*``
    sample stats (PyMC gives steps no hook into ``sample_stats.attrs``), read back by
    ``diagnostics.step_settings``, on PyMC 5 (InferenceData) and 6 (DataTree)."""
    from pymc_subsample.diagnostics import step_settings

    kwargs, expected = EXPECTED_SETTINGS[name]
    with model:
        step = getattr(pms, name)(vars=[model["a"], model["b"]], **kwargs)
    idata = run_sample(model, step, draws=10, tune=10, chains=1, seed=3)
    got = step_settings(idata)
    for key, value in expected.items():
        assert got[key] == value, (key, got)
    if name == "ScalableMH":
        assert got["region"] == pytest.approx(np.sqrt(2) + 4)  # "auto": sqrt(d) + 4
    assert sample_stats(idata)["setting_steps_per_draw"].shape == (1, 10)


def test_settings_are_recorded_in_a_compound_step(model):
    """With a ``CompoundStep`` (here with NUTS on a variable outside the likelihood) the
    settings are still there, and a ``max_error`` design's values are the ones recorded."""
    from pymc_subsample.diagnostics import step_settings

    with model:
        step = [pms.AustereMH(vars=[model["a"], model["b"]], max_error=0.05),
                pm.NUTS([model["c"]])]
    design = step[0].design
    idata = run_sample(model, step, draws=10, tune=10, chains=2, seed=4)
    got = step_settings(idata)
    assert got["epsilon"] == design.epsilon and got["batch_size"] == design.batch_size
    assert got["batch_increment"] == design.batch_size and got["control_variate"] == 2
    assert sample_stats(idata)["setting_epsilon"].shape == (2, 10)


def test_step_settings_of_two_subsampling_steps_and_without_any(model):
    """Two subsampling steps recording the same setting give one value per step; draws
    without recorded settings give an empty dict."""
    import xarray as xr

    from pymc_subsample.diagnostics import step_settings

    ds = xr.Dataset({
        "setting_batch_size": (("chain", "draw", "sampler"), np.tile([100, 50], (2, 5, 1))),
        "setting_control_variate": (("chain", "draw"), np.full((2, 5), -1)),
        "data_used": (("chain", "draw"), np.zeros((2, 5))),
    })
    idata = from_datasets(sample_stats=ds)  # what pm.sample returns (InferenceData or DataTree)
    assert step_settings(idata) == {"batch_size": (100, 50), "control_variate": "saga"}
    del ds["setting_batch_size"], ds["setting_control_variate"]
    idata = from_datasets(sample_stats=ds)
    assert step_settings(idata) == {}


@pytest.mark.parametrize("name, kwargs", [
    ("AustereMH", {}),
    ("BarkerMinibatch", {"steps_per_draw": 1}),
    ("ScalableMH", {}),
    ("ScalableMH", {"truncation": 1e-12}),  # every decision by the full-data test
])
def test_accept_is_the_acceptance_probability_the_test_saw(model, name, kwargs):
    """``accept`` (as pm.Metropolis reports it) is the acceptance probability of each
    transition, estimated where the test is approximate or reads a few rows: its mean
    over a chain matches the acceptance rate (``accepted``) within Monte Carlo error,
    and each value lies in [0, 1]."""
    with model:
        step = getattr(pms, name)(proposal="random_walk", **kwargs)
    st = sample_stats(run_sample(model, step, draws=2000, tune=500, chains=1, seed=4))
    acc, prob = st["accepted"].values.ravel(), st["accept"].values.ravel()
    assert st["accept"].dtype == np.float64 and np.all((prob >= 0) & (prob <= 1))
    assert 0.05 < acc.mean() < 0.95  # a random walk: both outcomes seen
    diff = acc - prob
    assert abs(diff.mean()) < 4 * batch_means_se(diff) + 0.01, (acc.mean(), prob.mean())
    if "truncation" in kwargs:
        assert np.all(st["fallback"].values)


@pytest.mark.parametrize("name", ["AustereMH", "BarkerMinibatch"])
@pytest.mark.parametrize("o1, term", [(0.5, -np.inf), (np.inf, 0.0)])
def test_accept_is_zero_when_the_test_rejects_outright(model, name, o1, term):
    """A row outside the likelihood's support (a -inf term) or a +inf data-free ratio
    rejects the proposal outright: its ``accept`` is 0, not the data-free part's
    probability."""
    with model:
        step = getattr(pms, name)([model["a"], model["b"]], control_variate=0)
    res, stats = step._run_test(lambda rows: np.full(rows.size, term), o1, None)
    assert not res.accept
    assert stats["accept"] == 0.0


def test_initial_point_reaches_the_engine(model):
    """A step's ``initial_point=`` (PyMC's step convention) is where the engine's
    ``initial_q`` starts (the data check, the default scaling): it used to be ignored."""
    start = {**model.initial_point(), "a": np.array(0.25), "b": np.array(-0.5)}
    with model:
        step = pms.AustereMH(vars=[model["a"], model["b"]], control_variate=0,
                             initial_point=start)
    np.testing.assert_array_equal(step.engine.initial_q(), [0.25, -0.5])
