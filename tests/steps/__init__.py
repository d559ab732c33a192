"""Tests of ``pymc_subsample.steps``."""
