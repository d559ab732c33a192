"""Statistics helpers for checking samplers: shared by the package's tests and benchmarks.

Not part of the sampling API (nothing in the package imports it). Everything works with
ArviZ 0.x (PyMC 5: ``pm.sample`` returns ``arviz.InferenceData``) and ArviZ 1.x (PyMC 6:
an xarray ``DataTree``); ArviZ is imported when a function needs it.

Groups of a sampling result
    :func:`group`, :func:`posterior`, :func:`sample_stats` (a group as an
    ``xarray.Dataset``), :func:`flat_draws` (every scalar component's draws by label),
    :func:`from_dict` (a result from arrays), :func:`from_datasets` (a result from
    Datasets).

Effective sample size and Monte Carlo standard errors (ArviZ's estimators)
    :func:`ess` (ArviZ's ``ess``, ``method="mean"`` by default), :func:`ess_mean` (the same
    with NaN for chains too short or not finite), :func:`mcse_mean` and :func:`mcse_sd`
    (the standard errors of the mean and of the sd, about the population sd, ``ddof=0``),
    :func:`mcse_mean_sd` (both, about the sample sd, ``ddof=1``, as the reference
    posteriors of ``benchmarks/models.py`` are summarised).

Batch means (no ArviZ)
    :func:`batch_means_se`, :func:`batch_means_ess`.

Draws are NumPy arrays ``(chains, draws)`` or ``(draws,)`` (one chain).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "arviz_major",
    "group",
    "posterior",
    "sample_stats",
    "flat_draws",
    "from_dict",
    "from_datasets",
    "ess",
    "ess_mean",
    "mcse_mean",
    "mcse_sd",
    "mcse_mean_sd",
    "batch_means_se",
    "batch_means_ess",
]


# ---------------------------------------------------------------------- groups


def arviz_major() -> int:
    """The major version of the installed ArviZ (0: ``InferenceData``; 1: ``DataTree``)."""
    import arviz as az

    return int(az.__version__.split(".")[0])


def group(idata, name):
    """The group ``name`` of an ``arviz.InferenceData`` or an xarray ``DataTree`` as a
    Dataset (ArviZ's ``convert_to_dataset``)."""
    import arviz as az

    return az.convert_to_dataset(idata, group=name)


def posterior(idata):
    """The ``posterior`` group as a Dataset."""
    return group(idata, "posterior")


def sample_stats(idata):
    """The ``sample_stats`` group as a Dataset."""
    return group(idata, "sample_stats")


def flat_draws(idata, name="posterior"):
    """``label -> (chains, draws)`` float arrays for every scalar component of the group's
    variables: ``beta[0]``, ``beta[1]``, ... (flat C-order index) and ``sigma``."""
    ds = group(idata, name)
    out = {}
    for var in ds.data_vars:
        vals = np.asarray(ds[var].values, dtype=float)
        if vals.ndim == 2:
            out[var] = vals
        else:
            flat = vals.reshape(vals.shape[0], vals.shape[1], -1)
            for j in range(flat.shape[2]):
                out[f"{var}[{j}]"] = flat[:, :, j]
    return out


def from_dict(**groups):
    """``arviz.from_dict`` on ArviZ 0.x (keyword groups) and 1.x (one dict of groups):
    ``from_dict(posterior={"x": array (chains, draws)}, sample_stats={...})``."""
    import arviz as az

    if arviz_major() >= 1:
        return az.from_dict(groups)
    return az.from_dict(**groups)


def from_datasets(**groups):
    """What ``pm.sample`` returns, from ``xarray.Dataset`` groups: an ``InferenceData``
    (ArviZ 0.x) or a ``DataTree`` (ArviZ 1.x), e.g. ``from_datasets(sample_stats=ds)``."""
    if arviz_major() >= 1:
        import xarray as xr

        return xr.DataTree.from_dict({f"/{name}": ds for name, ds in groups.items()})
    import arviz as az

    return az.InferenceData(**groups)


# ---------------------------------------------------------------------- ESS and MCSE (ArviZ)


def _as_chains(x):
    """``x`` as a float array with a chain axis first (a 1-D ``x`` is one chain)."""
    x = np.asarray(x, dtype=float)
    return x[None] if x.ndim == 1 else x


def ess(x, *, method="mean", constant=None) -> float:
    """Effective sample size of draws ``(chains, draws, ...)`` or ``(draws,)``: ArviZ's
    ``ess(method=method)`` (``"mean"``: for the mean, without rank normalisation;
    ``"bulk"``: rank-normalised), the same number under ArviZ 0.x and 1.x. Trailing axes
    are flattened into the draws. ``constant``: the value returned for a constant chain
    (by default ArviZ's)."""
    import arviz as az

    x = np.asarray(x, dtype=float)
    x = x[None] if x.ndim == 1 else x.reshape(x.shape[0], -1)
    if constant is not None and np.ptp(x) == 0:
        return float(constant)
    return float(az.ess(x, method=method))


def ess_mean(x) -> float:
    """:func:`ess` for the mean of ``(chains, draws)`` or ``(draws,)``, NaN for fewer than
    4 draws per chain or non-finite draws (the multi-chain estimator of Vehtari, Gelman,
    Simpson, Carpenter & Buerkner 2021, without rank normalisation)."""
    x = _as_chains(x)
    if x.shape[1] < 4 or not np.all(np.isfinite(x)):
        return float("nan")
    return ess(x)


def mcse_mean(x) -> float:
    """Monte Carlo standard error of the mean of ``x`` (``(chains, draws)`` or
    ``(draws,)``): the population sd (``ddof=0``) over ``sqrt(ess(x))``."""
    x = np.asarray(x, dtype=float)
    return float(x.std() / np.sqrt(ess(x)))


def mcse_sd(x) -> float:
    """Monte Carlo standard error of the (population) standard deviation of ``x``: the
    delta method on the variance, with the ESS of the squared deviations,
    ``mcse((x - m)^2) / (2 sd)``."""
    x = _as_chains(x)
    sq = (x - x.mean()) ** 2
    sd = float(np.sqrt(sq.mean()))
    return float(sq.std() / np.sqrt(ess(sq)) / (2.0 * sd))


def mcse_mean_sd(x):
    """Monte Carlo standard errors ``(of the mean, of the sd)`` of ``x`` about the sample
    sd (``ddof=1``), from :func:`ess_mean` (NaN where it is NaN, and for the sd of a
    constant chain). The sd's error is the delta method on the variance,
    ``Var = E[(x - m)^2]``: ``mcse_sd = mcse((x - m)^2) / (2 sd)``."""
    x = _as_chains(x)
    sd = float(x.std(ddof=1))
    mcse_m = sd / np.sqrt(ess_mean(x))
    z = (x - x.mean()) ** 2
    mcse_var = float(z.std(ddof=1)) / np.sqrt(ess_mean(z))
    mcse_s = mcse_var / (2.0 * sd) if sd > 0 else float("nan")
    return float(mcse_m), float(mcse_s)


# ---------------------------------------------------------------------- batch means


def batch_means_se(x, n_batches=20) -> float:
    """Monte Carlo standard error of the mean of ``x`` by batch means within chains:
    ``x`` is ``(chains, draws)`` or ``(draws,)``; each chain is cut into ``n_batches``
    batches of equal length (the last draws that do not fill a batch are left out); the
    error is the sd of all batch means over the square root of their number."""
    x = _as_chains(x)
    b = x.shape[1] // n_batches
    means = x[:, : b * n_batches].reshape(x.shape[0], n_batches, b).mean(axis=2).ravel()
    return float(means.std(ddof=1) / np.sqrt(means.size))


def batch_means_ess(x, n_batches=10) -> float:
    """Effective sample size of the mean of ``x`` from :func:`batch_means_se`:
    ``var(x) / se^2`` (``x.size`` when the batch means are all equal)."""
    x = np.asarray(x, dtype=float)
    se = batch_means_se(x, n_batches)
    return float(x.var() / se**2) if se > 0 else float(x.size)
