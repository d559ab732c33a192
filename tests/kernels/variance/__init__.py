"""Tests of ``pymc_subsample.kernels.variance``."""
