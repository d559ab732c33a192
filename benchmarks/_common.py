"""Helpers shared by the benchmark scripts, built on ArviZ."""

from __future__ import annotations

import numpy as np


def group(idata, name):
    """Group ``name`` of an ``arviz.InferenceData`` (PyMC 5) or ``DataTree`` (PyMC 6) as a
    Dataset (ArviZ's ``convert_to_dataset``)."""
    import arviz as az

    return az.convert_to_dataset(idata, group=name)


def ess(x, *, constant=None) -> float:
    """ESS for the mean of draws ``(chains, draws)`` or ``(draws,)`` (ArviZ's
    ``ess(method="mean")``); ``constant`` (if given) for a constant chain."""
    import arviz as az

    x = np.asarray(x, dtype=float)
    x = x[None] if x.ndim == 1 else x.reshape(x.shape[0], -1)
    if constant is not None and np.ptp(x) == 0:
        return float(constant)
    return float(az.ess(x, method="mean"))

