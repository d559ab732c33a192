"""Tests of ``pymc_subsample.kernels.sampling``."""
