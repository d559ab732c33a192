"""Tests of ``pymc_subsample.consensus``."""
