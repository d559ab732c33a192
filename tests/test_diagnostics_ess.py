"""Tests of ``pymc_subsample.diagnostics.geyer_ess`` (the NumPy-only ESS that tests and
benchmarks use on both PyMC versions)."""

import numpy as np
import pytest

from pymc_subsample.diagnostics import geyer_ess


def _ar1(rng, phi, shape):
    e = rng.normal(size=shape)
    x = np.empty(shape)
    x[..., 0] = e[..., 0] / np.sqrt(1 - phi**2)
    for t in range(1, shape[-1]):
        x[..., t] = phi * x[..., t - 1] + e[..., t]
    return x


@pytest.mark.parametrize("phi", [0.0, 0.5, 0.9])
def test_ar1_matches_its_known_ess(phi):
    # ESS of an AR(1) chain is n (1 - phi) / (1 + phi); 4 chains of 20,000 draws estimate
    # it to within a few per cent (the 15% allowance is several standard errors)
    x = _ar1(np.random.default_rng(7), phi, (4, 20_000))
    expected = x.size * (1 - phi) / (1 + phi)
    assert geyer_ess(x) == pytest.approx(expected, rel=0.15)


def test_one_dimensional_input_is_one_chain():
    x = _ar1(np.random.default_rng(1), 0.5, (5000,))
    assert geyer_ess(x) == geyer_ess(x[None, :])


def test_constant_and_short_chains():
    assert geyer_ess(np.ones((2, 50))) == 100.0
    assert geyer_ess(np.ones(50), constant=0.0) == 0.0
    assert np.isnan(geyer_ess(np.ones((2, 50)), constant=float("nan")))
    assert geyer_ess(np.arange(3.0)) == 3.0
