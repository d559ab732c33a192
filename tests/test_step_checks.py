"""The registries and the conformance suite: every registered step passes
:func:`pymc_subsample.check_step`; the control variates are chosen by name, their integer
aliases giving the same chain bit for bit; the public validation and error modules."""

from __future__ import annotations

import numpy as np
import pytest

import pymc_subsample as pms
from pymc_subsample.kernels.variance.control_variates import (
    CONTROL_VARIATE_ALIASES,
    CONTROL_VARIATES,
    USER_CONTROL_VARIATE,
    ControlVariate,
    NoControlVariate,
    SagaControlVariate,
    control_variate_kind,
    control_variate_label,
)
from pymc_subsample.step_checks import check_step, small_model
from pymc_subsample.steps import REGISTRY, STEP_NAMES, StepEntry, step_entry
from pymc_subsample.testing import posterior, sample_stats
from tests.conftest import run_sample


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_registered_step_passes_check_step(name):
    check_step(name)


def test_every_entry_declares_its_exactness_and_refusals():
    assert STEP_NAMES == ("ScalableMH", "AustereMH", "BarkerMinibatch", "SGLD")
    for name, entry in REGISTRY.items():
        cls = entry.load()
        assert cls.__name__ == name and getattr(pms, name) is cls
        assert entry.refusals, f"{name} declares no refusals for check_step"
        if entry.knob is not None:  # the knob is a constructor argument of the step
            assert entry.knob in cls.__init__.__code__.co_varnames, (name, entry.knob)
    assert [REGISTRY[n].exactness for n in STEP_NAMES] == [
        "exact", "approx. (epsilon)", "approx. (delta)", "approx. (step size)"]
    assert step_entry("SGLD") is REGISTRY["SGLD"]
    with pytest.raises(pms.InvalidParameterError, match="registered"):
        step_entry("NUTS")
    assert StepEntry("X", dict).load() is dict


def test_control_variates_by_name_and_alias():
    assert list(CONTROL_VARIATES) == ["none", "taylor1", "taylor2", "saga"]
    assert CONTROL_VARIATE_ALIASES == {0: "none", 1: "taylor1", 2: "taylor2"}
    for alias, name in CONTROL_VARIATE_ALIASES.items():
        assert control_variate_kind(alias) is control_variate_kind(name)
        assert control_variate_kind(np.int64(alias)) is CONTROL_VARIATES[name]
    assert control_variate_kind("Taylor-2") is CONTROL_VARIATES["taylor2"]
    # the recorded codes users read: unchanged
    assert {k: v.code for k, v in CONTROL_VARIATES.items()} == {
        "none": 0, "taylor1": 1, "taylor2": 2, "saga": -1}
    assert USER_CONTROL_VARIATE.code == ControlVariate.setting == -2
    assert NoControlVariate.setting == 0 and SagaControlVariate.setting == -1
    assert [control_variate_label(c) for c in (0, 1, 2, -1, -2)] == [0, 1, 2, "saga", -2]
    for bad in (3, True, 2.0, "taylor3", None, "user"):
        with pytest.raises(pms.InvalidParameterError, match="control_variate must be one of"):
            control_variate_kind(bad)


@pytest.mark.parametrize("step, name, alias", [
    ("AustereMH", "taylor2", 2), ("AustereMH", "none", 0), ("BarkerMinibatch", "taylor1", 1)])
def test_a_control_variate_name_samples_as_its_alias(step, name, alias):
    model = small_model(300)
    runs = []
    for cv in (name, alias):
        with model:
            s = getattr(pms, step)(control_variate=cv, batch_size=50)
        assert s.cv is CONTROL_VARIATES[name]
        idata = run_sample(model, s, draws=40, tune=40, chains=1, seed=5)
        runs.append((posterior(idata)["b"].values, sample_stats(idata)))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    for key in ("data_used", "setting_control_variate"):
        np.testing.assert_array_equal(runs[0][1][key].values, runs[1][1][key].values)
    assert np.all(runs[0][1]["setting_control_variate"].values == CONTROL_VARIATES[name].code)


def test_validation_and_errors_are_public():
    from pymc_subsample import errors, validation
    from pymc_subsample.kernels import _validation

    assert pms.validation is validation and pms.errors is errors
    assert validation.InvalidParameterError is _validation.InvalidParameterError
    assert set(_validation.__all__) <= set(validation.__all__)
    for name in errors.__all__:
        err = getattr(errors, name)
        assert getattr(pms, name) is err and issubclass(err, Exception)
    # a subclass of ValueError (and TypeError): existing handlers keep catching it
    assert issubclass(pms.InvalidParameterError, ValueError)
    assert issubclass(pms.InvalidParameterError, TypeError)
    with pytest.raises(ValueError, match="batch_size"):
        validation.check_batch_size(0, "batch_size", 100)


@pytest.mark.parametrize("scaling, match", [(-1.0, "positive and finite"),
                                             ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], "one value per"),
                                             (np.nan, "positive and finite")])
def test_bad_scaling_raises_the_public_error(scaling, match):
    """The MH steps' ``scaling`` refusals are the public error type, naming the argument."""
    with small_model():
        with pytest.raises(pms.InvalidParameterError, match=f"scaling.*{match}"):
            pms.AustereMH(scaling=scaling)
