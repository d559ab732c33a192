"""Tests of ``pymc_subsample.kernels.scalable``."""
