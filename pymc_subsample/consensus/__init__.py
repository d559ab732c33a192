"""Divide-and-conquer (consensus) Monte Carlo.

:mod:`~pymc_subsample.consensus.combine` (NumPy/SciPy only, imported here) holds the
combiners of shard draws; :func:`consensus_sample` (PyMC + Dask, in
:mod:`~pymc_subsample.consensus.run`, imported on first use) samples the shards as Dask
tasks and combines them. See ``docs/consensus.md``.
"""

from importlib import import_module

from .combine import (
    COMBINERS,
    consensus_weighting,
    gaussian_product,
    nonparametric_product,
    semiparametric_product,
)

__all__ = [
    "COMBINERS",
    "consensus_weighting",
    "gaussian_product",
    "semiparametric_product",
    "nonparametric_product",
    "consensus_sample",
    "add_prior_power",
]


def __getattr__(name):
    if name in ("consensus_sample", "add_prior_power", "BIAS_STATEMENT"):
        value = getattr(import_module("pymc_subsample.consensus.run"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pymc_subsample.consensus' has no attribute '{name}'")
