"""Tests of ``pymc_subsample.engine``."""
