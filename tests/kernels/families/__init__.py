"""Tests of ``pymc_subsample.kernels.families``."""
