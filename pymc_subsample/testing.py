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

Synthetic hierarchical GLM (many groups of very unequal size)
    :func:`hierarchical_data` (the data and the true values), :func:`hierarchical_model`
    (the PyMC model, centred or non-centred; imports PyMC).

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
    "hierarchical_data",
    "hierarchical_model",
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


# ---------------------------------------------------------------------- hierarchical GLM data

#: the true covariate coefficients, in order; longer designs continue with +-0.1
_BETA_HEAD = (0.5, -0.3, 0.2, 0.1)
#: the families of :func:`hierarchical_data` and :func:`hierarchical_model`
_FAMILIES = ("bernoulli", "poisson", "normal")
#: groups forced to 1..10 rows: this fraction of the groups (at least one)
_SMALL_FRACTION, _SMALL_MAX = 0.05, 10


def _true_beta(n_features, family):
    """The true coefficients: ``0.5, -0.3, 0.2, 0.1`` then ``0.1, -0.1, ...``, truncated
    to ``n_features``; for ``"poisson"`` rescaled to Euclidean norm 0.3, so that the
    covariates move ``eta`` by about 0.3 sd whatever ``n_features`` is."""
    beta = np.array([_BETA_HEAD[j] if j < len(_BETA_HEAD) else 0.1 * (-1) ** j
                     for j in range(n_features)], dtype=np.float64)
    if family == "poisson":
        beta *= 0.3 / np.linalg.norm(beta)
    return beta


def _group_sizes(rng, n_rows, n_groups, min_small):
    """Heavy-tailed group sizes summing to ``n_rows``, each at least ``min_small``, with at
    least ``max(1, ceil(5% of n_groups))`` groups (fewer than all) of ``min_small..10``
    rows, one of them exactly ``min_small``; see :func:`hierarchical_data`."""
    n_small = min(max(1, int(np.ceil(_SMALL_FRACTION * n_groups))), n_groups - 1)
    small = rng.integers(min_small, _SMALL_MAX + 1, size=n_small)
    if n_small:
        small[0] = min_small
    n_large = n_groups - n_small
    rest = n_rows - int(small.sum()) - n_large * min_small
    if rest < 0:
        raise ValueError(
            f"n_rows={n_rows} is too small for {n_groups} groups of at least {min_small} "
            f"row(s) with {n_small} of them of {min_small}..{_SMALL_MAX} rows: it needs at "
            f"least {n_rows - rest} rows.")
    # lognormal (sigma 1.5) weights: a few groups hold a large share of the rows, and for
    # many groups (small N / G) a good part of them hold a few rows
    weights = rng.lognormal(0.0, 1.5, size=n_large)
    large = min_small + rng.multinomial(rest, weights / weights.sum())
    sizes = np.concatenate([small, large])
    return sizes[rng.permutation(n_groups)]


def hierarchical_data(n_rows, n_groups, *, family="bernoulli", n_features=4, tau=0.5, mu=-0.5,
                      seed=0, min_small=1, sigma=1.0):
    """Synthetic tall data for a hierarchical GLM with many groups of very unequal size.

    Rows ``i = 0..N-1`` fall in groups ``g[i]`` in ``0..G-1`` with standard-normal
    covariates ``X[i]`` and the linear predictor
    ``eta[i] = mu + tau * z[g[i]] + X[i] @ beta``, ``z ~ Normal(0, 1)`` per group;
    ``y[i] ~ Bernoulli(logit^-1(eta[i]))``, ``Poisson(exp(eta[i]))`` or
    ``Normal(eta[i], sigma)`` (the linear mixed model). This is the data model of
    :func:`hierarchical_model` with ``a = mu + tau * z``.

    Group sizes are heavy-tailed: ``max(1, ceil(0.05 G))`` groups chosen at random (never
    all of them) get ``min_small..10`` rows (uniformly, one of them exactly ``min_small``);
    the others get ``min_small`` rows each and share the remaining rows by a multinomial
    allocation with lognormal (``sigma = 1.5``) weights, so a few groups hold a large
    share of the rows (about 10% for the largest of 200 groups), many more groups are
    small when ``N / G`` is small, and every group holds at least ``min_small``. Rows are
    in random order.

    Parameters
    ----------
    n_rows : int
        Number of rows ``N``.
    n_groups : int
        Number of groups ``G`` (at least 1; every group gets rows).
    family : {"bernoulli", "poisson", "normal"}, default "bernoulli"
        Response distribution: Bernoulli with logit link, Poisson with log link, or
        Normal with identity link and sd ``sigma``.
    n_features : int, default 4
        Number of covariates ``p`` (at least 1).
    tau : float, default 0.5
        True sd of the group effects (non-negative).
    mu : float, default -0.5
        True mean group intercept.
    seed : int or numpy.random.Generator, default 0
        Seed of the generator (NumPy's ``default_rng``).
    min_small : int, default 1
        Smallest group size: every group has at least this many rows, and the forced small
        groups have ``min_small..10`` rows (at most 10).
    sigma : float, default 1.0
        The rows' sd (``family="normal"`` only).

    Returns
    -------
    dict
        ``"X"``: float64 ``(N, p)``; ``"group"``: int32 ``(N,)``, every value in
        ``0..G-1`` used; ``"y"``: int64 ``(N,)`` (0/1 or counts; float64 for
        ``"normal"``, with the true ``"sigma"``); the true values
        ``"mu"``, ``"tau"`` (floats), ``"beta"`` ``(p,)``, ``"z"`` ``(G,)`` and
        ``"a" = mu + tau * z`` ``(G,)``; ``"sizes"``: int64 ``(G,)`` rows per group;
        ``"family"``: the family.

    Notes
    -----
    ``beta`` is ``0.5, -0.3, 0.2, 0.1`` continued with ``0.1, -0.1, ...`` (truncated to
    ``p``). For ``"poisson"`` it is rescaled to norm 0.3 so that with the defaults
    ``exp(eta)`` stays below about 20 even at ``N = 10^6`` (mean rate about 0.7).

    Raises
    ------
    ValueError
        For an unknown family, ``n_groups < 1``, ``n_features < 1``, ``tau < 0``,
        ``min_small`` outside ``1..10``, or too few rows for the group sizes.

    Examples
    --------
    >>> d = hierarchical_data(10_000, 50, seed=1)
    >>> d["X"].shape, int(d["sizes"].min()), int(d["sizes"].sum())
    ((10000, 4), 1, 10000)
    """
    if family not in _FAMILIES:
        raise ValueError(f"family must be one of {_FAMILIES}, got {family!r}.")
    n_rows, n_groups, n_features = int(n_rows), int(n_groups), int(n_features)
    if n_groups < 1 or n_features < 1:
        raise ValueError(f"n_groups and n_features must be at least 1, got {n_groups} and "
                         f"{n_features}.")
    if not 1 <= int(min_small) <= _SMALL_MAX:
        raise ValueError(f"min_small must be in 1..{_SMALL_MAX}, got {min_small!r}.")
    if not tau >= 0:
        raise ValueError(f"tau must be non-negative, got {tau!r}.")
    rng = np.random.default_rng(seed)
    sizes = _group_sizes(rng, n_rows, n_groups, int(min_small)).astype(np.int64)
    group = rng.permutation(np.repeat(np.arange(n_groups, dtype=np.int32), sizes))
    X = rng.standard_normal((n_rows, n_features))
    beta = _true_beta(n_features, family)
    z = rng.standard_normal(n_groups)
    a = mu + tau * z
    eta = a[group] + X @ beta
    if family == "bernoulli":
        y = (rng.random(n_rows) < 1.0 / (1.0 + np.exp(-eta))).astype(np.int64)
    elif family == "poisson":
        y = rng.poisson(np.exp(eta)).astype(np.int64)
    else:
        y = eta + sigma * rng.standard_normal(n_rows)
    out = {"X": X, "group": group, "y": y, "mu": float(mu), "tau": float(tau), "beta": beta,
           "z": z, "a": a, "sizes": sizes, "family": family}
    if family == "normal":
        out["sigma"] = float(sigma)
    return out


def hierarchical_model(data, *, centred=True, family="bernoulli"):
    """The hierarchical GLM of :func:`hierarchical_data` as a PyMC model.

    ``mu ~ Normal(0, 1.5)``, ``tau ~ HalfNormal(1)``, ``beta ~ Normal(0, 1)`` (dims
    ``"feature"``); centred: ``a ~ Normal(mu, tau)`` (dims ``"group"``); non-centred:
    ``z ~ Normal(0, 1)`` and ``a = mu + tau * z`` (a ``Deterministic``), both dims
    ``"group"``. ``eta = a[g] + X @ beta`` with the group index ``g`` and ``X`` as
    ``pm.Data`` (``"g"`` dims ``"obs"``; ``"X"`` dims ``("obs", "feature")``) and the observed
    ``y`` (dims ``"obs"``) ``Bernoulli(logit_p=eta)``, ``Poisson(mu=exp(eta))`` or
    ``Normal(mu=eta, sigma)`` with ``sigma ~ HalfNormal(1)`` (``"normal"``).

    Parameters
    ----------
    data : dict
        ``"X"`` ``(N, p)``, ``"group"`` ``(N,)`` integers in ``0..G-1`` and ``"y"``
        ``(N,)``, as returned by :func:`hierarchical_data`; ``G`` is ``len(data["sizes"])``
        when present, else ``max(group) + 1``.
    centred : bool, default True
        Centred (``a`` sampled) or non-centred (``z`` sampled) parametrisation.
    family : {"bernoulli", "poisson", "normal"}, default "bernoulli"
        Likelihood; must match ``data["family"]`` when the data names one.

    Returns
    -------
    pymc.Model
        With coords ``"group"`` (``0..G-1``), ``"obs"`` (``0..N-1``) and ``"feature"``
        (``0..p-1``); free variables ``mu``, ``tau``, ``beta`` and ``a`` (centred) or
        ``z`` (non-centred, with the deterministic ``a``).

    Raises
    ------
    ValueError
        For an unknown family, or one that differs from ``data["family"]``.
    """
    import pymc as pm

    if family not in _FAMILIES:
        raise ValueError(f"family must be one of {_FAMILIES}, got {family!r}.")
    if data.get("family", family) != family:
        raise ValueError(f"the data were drawn for family={data['family']!r} but the model "
                         f"was asked for family={family!r}.")
    X = np.asarray(data["X"], dtype=np.float64)
    group = np.asarray(data["group"])
    y = np.asarray(data["y"])
    n_groups = len(data["sizes"]) if "sizes" in data else int(group.max()) + 1
    coords = {"group": np.arange(n_groups), "obs": np.arange(X.shape[0]),
              "feature": np.arange(X.shape[1])}
    with pm.Model(coords=coords) as model:
        group_d = pm.Data("g", group, dims="obs")  # "group" is the dim of the effects
        X_d = pm.Data("X", X, dims=("obs", "feature"))
        mu = pm.Normal("mu", 0.0, 1.5)
        tau = pm.HalfNormal("tau", 1.0)
        beta = pm.Normal("beta", 0.0, 1.0, dims="feature")
        if centred:
            a = pm.Normal("a", mu, tau, dims="group")
        else:
            z = pm.Normal("z", 0.0, 1.0, dims="group")
            a = pm.Deterministic("a", mu + tau * z, dims="group")
        eta = a[group_d] + pm.math.dot(X_d, beta)
        if family == "bernoulli":
            pm.Bernoulli("y", logit_p=eta, observed=y, dims="obs")
        elif family == "poisson":
            pm.Poisson("y", mu=pm.math.exp(eta), observed=y, dims="obs")
        else:
            sigma = pm.HalfNormal("sigma", 1.0)
            pm.Normal("y", mu=eta, sigma=sigma, observed=y, dims="obs")
    return model
