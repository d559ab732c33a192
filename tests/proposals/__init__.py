"""Tests of ``pymc_subsample.proposals``."""
