"""Shared test helpers: read groups from PyMC 5 (InferenceData) or PyMC 6 (DataTree)."""

from __future__ import annotations

import numpy as np


def group(idata, name):
    """The group ``name`` of an ``arviz.InferenceData`` or an xarray ``DataTree`` as a Dataset."""
    if hasattr(idata, "to_dataset") or not hasattr(idata, name):
        node = idata[name]
        return node.to_dataset() if hasattr(node, "to_dataset") else node
    return getattr(idata, name)


def posterior(idata):
    return group(idata, "posterior")


def sample_stats(idata):
    return group(idata, "sample_stats")


def batch_means_se(x, n_batches=20):
    """Monte Carlo standard error of the mean of a 1-D chain by batch means."""
    x = np.asarray(x, dtype=float).ravel()
    b = len(x) // n_batches
    means = x[: b * n_batches].reshape(n_batches, b).mean(axis=1)
    return float(means.std(ddof=1) / np.sqrt(n_batches))
