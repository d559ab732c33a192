"""The demo (``examples/demo.py``) never shows a NUTS run that has not converged as a
speed figure: its decision and its ratio text, without running any sampler."""

from __future__ import annotations

import importlib.util
import math

import pytest

from tests.conftest import REPO


def _demo():
    spec = importlib.util.spec_from_file_location("pms_example_demo", REPO / "examples" / "demo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


DEMO = _demo()
PYMC, NUMPYRO, NUTPIE = (DEMO.NUTS_SAMPLERS[k] for k in ("pymc", "numpyro", "nutpie"))
#: the projection's (ESS/s, gradients per ESS, seconds per gradient)
PROJECTION = (3.0, 5.0, 0.0667)


def test_a_converged_run_passes():
    # ESS 2,000 of 2 chains, R-hat 1.002, means 0.05 sd off (4 MCSE = 0.089)
    assert DEMO.not_converged(2000.0, 1.002, 0.05, chains=2, ref_error=0.001) is None


@pytest.mark.parametrize("ess, rhat, dev, says", [
    (3000.0, 3.1, 323.0, "R-hat 3.100"),        # the nutpie run (R-hat 3.1, 323 sd off)
    (3000.0, 1.011, 0.01, "R-hat 1.011"),       # R-hat just above 1.01
    (124.0, 1.005, 0.01, "ESS 124 < 200"),      # tiny ESS (100 per chain)
    (2000.0, 1.002, 0.5, "max |dmean|/sd 0.5"),  # mean far from the reference
    (2000.0, math.nan, 0.01, "R-hat nan"),      # a NaN fails its criterion
])
def test_a_failed_criterion_is_named(ess, rhat, dev, says):
    why = DEMO.not_converged(ess, rhat, dev, chains=2, ref_error=0.001)
    assert why is not None and says in why


def test_the_mean_limit_is_four_mcse_plus_the_reference_error():
    ess = 1600.0  # 4 / sqrt(1600) = 0.1
    assert DEMO.not_converged(ess, 1.0, 0.1 + 0.002, chains=2, ref_error=0.003) is None
    assert DEMO.not_converged(ess, 1.0, 0.1 + 0.004, chains=2, ref_error=0.003) is not None


def test_baselines_skip_runs_that_have_not_converged():
    rates = {PYMC: 1.08, NUMPYRO: 1.13, NUTPIE: 1.21}
    # the fastest run has not converged: the fastest converged one is the denominator
    failures = {PYMC: None, NUMPYRO: None, NUTPIE: "R-hat 3.100 > 1.01"}
    assert DEMO.speedup_baselines(rates, failures, 3.0, pymc_name=PYMC) == [
        (NUMPYRO, 1.13), (PYMC, 1.08), ("PyMC's NUTS projected", 3.0)]
    # PyMC's NUTS the fastest converged: named once
    failures = {PYMC: None, NUMPYRO: "ESS 124 < 200", NUTPIE: "R-hat 3.100 > 1.01"}
    assert DEMO.speedup_baselines(rates, failures, 3.0, pymc_name=PYMC) == [
        (PYMC, 1.08), ("PyMC's NUTS projected", 3.0)]
    # none converged (or unchecked): the projection alone
    assert DEMO.speedup_baselines(rates, {NUTPIE: None}, 3.0, pymc_name=PYMC) == [
        (NUTPIE, 1.21), ("PyMC's NUTS projected", 3.0)]
    assert DEMO.speedup_baselines(rates, {}, 3.0, pymc_name=PYMC) == [
        ("PyMC's NUTS projected", 3.0)]


def test_the_text_never_divides_by_a_run_that_has_not_converged():
    steps = {"ScalableMH": 726.86, "AustereMH": 533.56}
    nuts = {PYMC: 1.077, NUMPYRO: 1.131, NUTPIE: 1.215}
    failures = {PYMC: "R-hat 1.105 > 1.01", NUMPYRO: "R-hat 1.065 > 1.01", NUTPIE: None}
    text = DEMO.speedup_text(steps, nuts, failures, PROJECTION, rows=10**6)
    assert f"{PYMC} not converged (R-hat 1.105 > 1.01)" in text
    assert f"{NUMPYRO} not converged" in text
    assert "1.077" not in text and "1.131" not in text  # no ESS/s of theirs
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("ScalableMH"))
    assert f"{726.86 / 1.215:,.0f}x {NUTPIE}" in line
    assert f"{726.86 / 3.0:,.0f}x PyMC's NUTS projected" in line
    assert PYMC not in line and NUMPYRO not in line
    # none converged: the projection is the only denominator
    failures[NUTPIE] = "max |dmean|/sd 323 > 0.09"
    text = DEMO.speedup_text(steps, nuts, failures, PROJECTION, rows=10**6)
    for ln in text.splitlines()[3:]:
        assert ln.count("x ") == 1 and ln.rstrip().endswith("PyMC's NUTS projected")
    assert "1.215" not in text
