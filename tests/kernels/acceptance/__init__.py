"""Tests of ``pymc_subsample.kernels.acceptance``."""
