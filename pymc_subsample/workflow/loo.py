"""PSIS-LOO for tall data from the log-likelihood of a random subsample of rows.

The estimator is the *difference estimator* under simple random sampling without
replacement of Magnusson, Andersen, Jonasson and Vehtari, "Bayesian leave-one-out
cross-validation for large data" (ICML 2019), with the variance estimators of their
follow-up "Leave-one-out cross-validation for Bayesian model comparison in large data"
(AISTATS 2020): the difference estimator of the total, its variance under simple random
sampling without replacement, and the estimator of ``sigma^2_loo`` (the variance behind
PSIS-LOO's ``se``), written out below.

Notation: ``N`` rows, ``m`` of them drawn at random without
replacement (the set ``S``), ``y_i = elpd_loo,i`` the PSIS-LOO value of row ``i`` and
``pi_i`` a cheap approximation of it known for every row. With ``e_j = y_j - pi_j`` on the
subsample,

- elpd: ``elpd_hat = sum_{i<=N} pi_i + N * mean_S(e)`` (the difference estimator);
- its subsampling variance: ``V_hat = N^2 (1 - m/N) s_e^2 / m``, ``s_e^2`` the sample
  variance of ``e`` (``subsampling_se = sqrt(V_hat)``);
- the variance of the pointwise elpd, scaled to the total (``se^2`` of PSIS-LOO):
  ``sigma2_hat = [sum_{i<=N} pi_i^2 + N * mean_S(y^2 - pi^2)] - (elpd_hat^2 - V_hat) / N``,
  a difference estimator of ``sum y_i^2`` minus an unbiased estimator of
  ``(sum y_i)^2 / N``; ``se = sqrt(sigma2_hat)`` (ArviZ's ``se``, which does not include
  the subsampling part);
- ``p_loo``: ``N * mean_S(lpd_j - y_j)``, the plain SRS estimator of
  ``sum (lpd_i - elpd_loo,i)``.

The approximation ``plpd`` is ``pi_i = log p(y_i | theta_bar)``, the log predictive
density at the posterior mean of the (constrained) parameters: one chunked pass over the
rows. ``lpd`` is ``pi_i = log mean_s p(y_i | theta_s)`` (the papers' "lpd"), one pass
that evaluates every row at every draw. PSIS is ArviZ's (``az.psislw`` on ArviZ 0.x,
``arviz_stats``'s on ArviZ 1.x).

The log-likelihood is **per row and unscaled** (:mod:`pymc_subsample.workflow.loglik`).

Why not ``arviz_stats.loo_subsample`` on ArviZ 1.x: even with its ``log_lik_fn`` or
``model=`` hook it first reads the whole ``log_likelihood`` group (``N x draws``) and
selects the subsample from it; on a result without that group it raises "log likelihood
not found in inference data object" (checked with arviz_stats 1.3). Here only the
subsample's log-likelihood is ever computed, and the result is arviz_stats's own
``ELPDDataLOOSubsample``, so ``az.compare`` treats it as its own.
"""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
from scipy.special import logsumexp

from ..kernels._validation import InvalidParameterError, check_choice, check_int
from .loglik import PosteriorLoglik, check_observed_data, check_rows, choose_observed

__all__ = ["loo", "loo_update", "APPROXIMATIONS"]

#: the approximations of every row's elpd that :func:`loo` offers
APPROXIMATIONS = ("plpd", "lpd")


# ---------------------------------------------------------------------- ArviZ's pieces
def _arviz_major() -> int:
    import arviz as az

    return int(az.__version__.split(".")[0])


def _psis_elpd(ll, reff):
    """PSIS-LOO of rows from their log-likelihood ``ll`` of shape ``(rows, draws)`` with
    ArviZ's Pareto smoothing: ``(elpd_loo_i, pareto_k)``."""
    if _arviz_major() >= 1:
        from arviz_stats.base import array_stats

        # arviz_stats smooths the ratios 1 / p(y_i | theta) of the log-likelihood it gets
        lw, k = array_stats.psislw(ll, r_eff=reff, axis=-1)
    else:
        import arviz as az

        lw, k = az.psislw(-ll, reff)
    lw = np.asarray(lw, dtype=np.float64)
    # normalised whether or not the implementation normalises
    elpd = logsumexp(lw + ll, axis=-1) - logsumexp(lw, axis=-1)
    return elpd, np.asarray(k, dtype=np.float64)


def _reff(idata, n_samples) -> float:
    """Relative efficiency as ArviZ's ``loo`` computes it: the mean over the posterior's
    variables of their ESS of the mean, over the number of draws (1 for one chain)."""
    import arviz as az

    from ..diagnostics import get_group

    post = get_group(idata, "posterior")
    if int(post.sizes["chain"]) == 1:
        return 1.0
    ess = az.ess(post, method="mean")
    if not hasattr(ess, "data_vars"):
        ess = get_group(ess, "posterior")
    vals = np.hstack([np.ravel(ess[v].values) for v in ess.data_vars])
    return float(np.mean(vals) / n_samples)


def _good_k(n_samples) -> float:
    """ArviZ's threshold of a reliable Pareto k for ``S`` draws."""
    return min(1.0 - 1.0 / np.log10(n_samples), 0.7) if n_samples > 1 else 0.7


def _warn_k(k, good_k) -> bool:
    if np.any(k > good_k):
        warnings.warn(
            f"Estimated shape parameter of Pareto distribution is greater than {good_k:.2f} "
            "for one or more samples. The rows with such k are in the subsample used by "
            "pms.loo (their importance sampling is unreliable, so their elpd_loo, and the "
            "estimate from them, may be biased): a more robust model, or exact LOO for those "
            "rows, would fix this.", UserWarning, stacklevel=3)
        return True
    return False


# ---------------------------------------------------------------------- the estimator
def difference_estimate(y, pi_sample, pi_all_sum, pi_all_sq_sum, n_rows):
    """The difference estimator and its variances (see the module docstring).

    Parameters
    ----------
    y : ndarray, shape (m,)
        The exact pointwise values on the subsample (``elpd_loo,j``).
    pi_sample : ndarray, shape (m,)
        The approximation on the same rows.
    pi_all_sum, pi_all_sq_sum : float
        ``sum pi_i`` and ``sum pi_i^2`` over all ``N`` rows.
    n_rows : int
        ``N``.

    Returns
    -------
    estimate, subsampling_se, se : float
    """
    m = y.size
    e = y - pi_sample
    estimate = pi_all_sum + n_rows * e.mean()
    if m < 2:
        return estimate, np.inf, np.inf
    v_sub = n_rows**2 * (1.0 - m / n_rows) * e.var(ddof=1) / m
    sum_sq = pi_all_sq_sum + n_rows * np.mean(e * (y + pi_sample))
    sigma2 = sum_sq - (estimate**2 - v_sub) / n_rows
    return float(estimate), float(np.sqrt(max(v_sub, 0.0))), float(np.sqrt(max(sigma2, 0.0)))


def _draw_rows(rng, n_rows, m, taken=None) -> np.ndarray:
    """``m`` distinct rows drawn uniformly from those of ``range(N)`` not in ``taken``
    (simple random sampling without replacement; O(m) memory for m << N)."""
    if taken is None or taken.size == 0:
        if m > n_rows // 4:
            return rng.permutation(n_rows)[:m].astype(np.int64)
        taken = np.empty(0, dtype=np.int64)
    free = n_rows - taken.size
    if m > free // 4:
        mask = np.ones(n_rows, dtype=bool)
        mask[taken] = False
        pool = np.flatnonzero(mask)
        return pool[rng.permutation(pool.size)[:m]].astype(np.int64)
    chosen = np.empty(0, dtype=np.int64)
    while chosen.size < m:
        cand = rng.integers(0, n_rows, size=2 * (m - chosen.size) + 16)
        cand = cand[~np.isin(cand, taken) & ~np.isin(cand, chosen)]
        # keep the order of the draws (first occurrences) so the sample is uniform
        _, first = np.unique(cand, return_index=True)
        chosen = np.concatenate([chosen, cand[np.sort(first)]])
    return chosen[:m]


class _Subsample:
    """What a subsampled LOO holds: the rows used and their values."""

    def __init__(self, rows, elpd_i, lpd_i, k):
        self.rows, self.elpd_i, self.lpd_i, self.k = rows, elpd_i, lpd_i, k

    def extended(self, other):
        return _Subsample(*(np.concatenate([a, b]) for a, b in
                            zip((self.rows, self.elpd_i, self.lpd_i, self.k),
                                (other.rows, other.elpd_i, other.lpd_i, other.k))))


def _evaluate_rows(ev: PosteriorLoglik, rows, reff) -> _Subsample:
    (ll,) = ev.at_rows(rows)
    elpd_i, k = _psis_elpd(ll, reff)
    lpd_i = logsumexp(ll, axis=-1) - np.log(ll.shape[-1])
    return _Subsample(rows, elpd_i, lpd_i, k)


def _result(sub: _Subsample, approx, *, n_rows, n_samples, var_name, row_dim, approximation,
            reff):
    """ArviZ's own ELPD object for a subsampled LOO.

    Both versions get the pointwise vector ``compare`` reads (``loo_i`` on 0.x, ``elpd_i``
    on 1.x), of length ``N``: the exact value on the subsample, ``pi_i + mean_S(e)``
    elsewhere, so that it sums to the estimate and differences of two models on the same
    rows sum to the difference estimator of their difference.
    """
    import xarray as xr

    est, sub_se, se = difference_estimate(sub.elpd_i, approx[sub.rows], float(approx.sum()),
                                          float(np.dot(approx, approx)), n_rows)
    p_i = sub.lpd_i - sub.elpd_i
    p_loo = float(n_rows * p_i.mean())
    good_k = _good_k(n_samples)
    warn = _warn_k(sub.k, good_k)
    pointwise = approx + (sub.elpd_i - approx[sub.rows]).mean()
    pointwise[sub.rows] = sub.elpd_i
    elpd_i = xr.DataArray(pointwise, dims=(row_dim,), name="loo_i")
    approx_da = xr.DataArray(approx, dims=(row_dim,), name="elpd_loo_approx")
    k_da = xr.DataArray(sub.k, dims=(row_dim,), coords={row_dim: sub.rows}, name="pareto_k")
    p_da = xr.DataArray(p_i, dims=(row_dim,), coords={row_dim: sub.rows}, name="p_loo_i")
    extra = {"subsampling_se": sub_se, "subsample_size": int(sub.rows.size),
             "loo_subsample_observations": sub.rows, "elpd_loo_approx": approx_da,
             "p_loo_i": p_da}
    own = {"var_name": var_name, "approximation": approximation, "reff": reff,
           "lpd_i": sub.lpd_i}
    if _arviz_major() >= 1:
        from arviz_stats.utils import ELPDDataLOOSubsample

        out = ELPDDataLOOSubsample(
            elpd=est, se=se, p=p_loo, n_samples=n_samples, n_data_points=n_rows,
            scale="log", warning=warn, good_k=good_k, elpd_i=elpd_i.rename("elpd_i"),
            pareto_k=k_da, **extra)
        for key, value in own.items():
            setattr(out, key, value)
        return out
    from arviz.stats.stats_utils import ELPDData

    data = {"elpd_loo": est, "se": se, "p_loo": p_loo, "n_samples": n_samples,
            "n_data_points": n_rows, "warning": warn, "loo_i": elpd_i, "pareto_k": k_da,
            "scale": "log", "good_k": good_k, **extra, **own}
    return ELPDData(data=list(data.values()), index=list(data.keys()))


def _check_observations(observations, n_available, *, owner, what):
    if isinstance(observations, (bool, np.bool_)):
        raise InvalidParameterError(f"{owner}: observations must be a number of rows, got "
                                    f"{observations!r}.")
    m = check_int("observations", observations, 2, owner=None, label=f"{owner}: observations",
                  what="an integer number of rows >= 2")
    if m > n_available:
        raise InvalidParameterError(
            f"{owner}: observations={m} is more than the {n_available} {what}; pass at most "
            f"{n_available}.")
    return m


def _approximation(ev: PosteriorLoglik, approximation: str) -> np.ndarray:
    """Every row's approximate elpd: ``plpd`` (one pass at the posterior mean) or ``lpd``
    (one pass at every draw)."""
    if approximation == "lpd":
        return ev.lpd_all_rows()
    (approx,) = ev.at_point_all_rows(ev.plpd_point())
    return approx


def loo(idata, model=None, *, observations=1000, approximation="plpd", var_name=None,
        seed=None):
    """PSIS-LOO cross-validation for tall data from a random subsample of rows.

    The pointwise log-likelihood of ``observations`` rows drawn at random without
    replacement is computed over all posterior draws through the likelihood engine (data
    in RAM, ``numpy.memmap`` or Zarr, chunk by chunk), their PSIS-LOO values through
    ArviZ, and every row's elpd is approximated by the log predictive density at the
    posterior mean (``plpd``, one chunked pass over all rows). The difference estimator
    of Magnusson et al. (ICML 2019; AISTATS 2020) combines them; see
    :mod:`pymc_subsample.workflow.loo` for the formulas. No ``N x draws`` array is built:
    memory is ``O(N + m x draws)``.

    The log-likelihood is **per row and unscaled**: ``log p(y_i | theta)`` of the model as
    written on all ``N`` rows, never multiplied by a ``total_size`` factor.

    Draws from the approximate steps (AustereMH, BarkerMinibatch, SGLD) carry the
    step's small bias into every log-likelihood value and so into ``elpd_loo``; compare
    models sampled with the same step and settings, or with ScalableMH (exact).

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.DataTree
        The result of ``pm.sample`` on ``model`` (its ``posterior`` group).
    model : pymc.Model, optional
        Default: the model on the context stack.
    observations : int or array of int, default 1000
        Size ``m`` of the subsample (at least 2, at most ``N``), or the row indices to use.
    approximation : {"plpd", "lpd"}
        The approximation ``pi_i`` of every row's elpd:

        - ``plpd`` (default): ``log p(y_i | E[theta])``, the density at the posterior mean
          of the constrained parameters; one pass over the rows, ``O(N)`` time. It is good
          when the posterior mean is a good plug-in for every row's predictor. In a
          *non-centred* hierarchical model (``a_g = mu + tau * z_g``) the means of ``tau``
          and ``z_g`` do not multiply to the mean of ``a_g`` (they are strongly
          correlated): the subsampling SE was 7x larger there than for the centred form
          of the same model (2.9 against 0.4 at N = 20,000, m = 1,000). Write the model
          centred, use ``lpd``, or draw more rows (:func:`loo_update`).
        - ``lpd``: ``log mean_s p(y_i | theta_s)``, the log predictive density over all
          draws; ``O(N x draws)`` time (memory stays ``O(N)``), so for moderate ``N``.
    var_name : str, optional
        The observed variable (needed when the model has several).
    seed : int or numpy.random.Generator, optional
        For the subsample (``numpy.random.default_rng(seed)``). Use the same seed for
        models compared with ``az.compare``: the same rows then enter every model, and
        ArviZ 1.x's ``compare`` uses a paired difference estimator on them.

    Returns
    -------
    ELPDData
        ArviZ's own object: ``arviz.ELPDData`` on ArviZ 0.x (``elpd_loo``, ``se``,
        ``p_loo``, ``loo_i``, ``pareto_k``, ``subsampling_se``, ...), arviz_stats's
        ``ELPDDataLOOSubsample`` on ArviZ 1.x (``elpd``, ``se``, ``p``, ``elpd_i``,
        ``pareto_k``, ``subsampling_se``, ``loo_subsample_observations``,
        ``elpd_loo_approx``), as their ``loo_subsample`` returns. ``az.compare`` accepts
        it. ``pareto_k`` holds the subsample's rows only, with their indices as coordinate;
        the pointwise vector (``loo_i`` / ``elpd_i``) has ``N`` entries, exact on the
        subsample and ``pi_i + mean(e)`` elsewhere. Keys work on both versions:
        ``result["subsampling_se"]``, ``result["se"]``.

    Raises
    ------
    ValueError
        Unknown or ambiguous ``var_name`` (naming the observed variables); a posterior
        without the model's free variables.
    InvalidParameterError
        ``observations`` below 2 or above ``N``; an unknown ``approximation``.
    DataMismatchError
        The model's observed data are not ``idata``'s ``observed_data`` (another number of
        rows, or other values): the ELPD would be of other data.

    Warns
    -----
    UserWarning
        When a subsample row's Pareto k exceeds ArviZ's threshold
        ``min(1 - 1/log10(S), 0.7)``.

    See Also
    --------
    loo_update : add rows to lower the subsampling SE.
    """
    owner = "loo"
    model = pm.modelcontext(model)
    check_choice("approximation", approximation, APPROXIMATIONS, owner=None,
                 label=f"{owner}: approximation")
    var_name = choose_observed(model, var_name, owner=owner)
    check_observed_data(idata, model, [var_name], owner=owner)
    ev = PosteriorLoglik(idata, model, [var_name])
    n = ev.n_rows
    if np.ndim(observations) == 0:
        m = _check_observations(observations, n, owner=owner, what="rows of the data")
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        rows = _draw_rows(rng, n, m)
    else:
        rows = check_rows(observations, n, owner=owner, name="observations")
        if rows.size < 2:
            raise InvalidParameterError(f"{owner}: observations must hold at least 2 rows.")
    approx = _approximation(ev, approximation)
    reff = _reff(idata, ev.n_samples)
    sub = _evaluate_rows(ev, rows, reff)
    return _result(sub, approx, n_rows=n, n_samples=ev.n_samples, var_name=var_name,
                   row_dim=_row_dim_name(ev, var_name), approximation=approximation,
                   reff=reff)


def _row_dim_name(ev, var_name):
    from .loglik import _row_dim

    return _row_dim(ev.engine, var_name, ev.model)


def loo_update(elpd, idata, model=None, *, observations=1000, seed=None):
    """Add rows to a subsampled LOO from :func:`loo`, reusing the rows already computed.

    ``observations`` new rows are drawn at random from those not yet used; the union is a
    simple random sample without replacement of the combined size, so the estimator is the
    same as :func:`loo` with that size, at the cost of the new rows only (the
    approximation of every row is reused too). The subsampling SE falls roughly as
    ``1 / sqrt(m)``.

    Parameters
    ----------
    elpd : ELPDData
        A result of :func:`loo` (or of an earlier :func:`loo_update`) on this model and
        ``idata``.
    idata, model
        As for :func:`loo`.
    observations : int or array of int, default 1000
        How many rows to add, or which (row indices not yet in the subsample).
    seed : int or numpy.random.Generator, optional
        For the new rows.

    Returns
    -------
    ELPDData
        A new result, as :func:`loo` returns.
    """
    owner = "loo_update"
    try:
        used = np.asarray(elpd["loo_subsample_observations"], dtype=np.int64)
        var_name = elpd["var_name"]
        approx = np.asarray(elpd["elpd_loo_approx"], dtype=np.float64)
        pareto_k = np.asarray(elpd["pareto_k"], dtype=np.float64)
        p_i = np.asarray(elpd["p_loo_i"], dtype=np.float64)
        approximation, reff = elpd["approximation"], float(elpd["reff"])
    except (KeyError, AttributeError, TypeError) as err:
        raise TypeError(f"{owner}: elpd must be a result of pms.loo (or pms.loo_update); "
                        f"got {type(elpd).__name__} without its subsample.") from err
    pointwise = elpd["loo_i"] if "loo_i" in getattr(elpd, "index", ()) else elpd["elpd_i"]
    elpd_used = np.asarray(pointwise, dtype=np.float64)[used]
    old = _Subsample(used, elpd_used, p_i + elpd_used, pareto_k)
    model = pm.modelcontext(model)
    var_name = choose_observed(model, var_name, owner=owner)
    check_observed_data(idata, model, [var_name], owner=owner)
    ev = PosteriorLoglik(idata, model, [var_name])
    n = ev.n_rows
    if approx.size != n:
        raise ValueError(f"{owner}: elpd was computed on {approx.size} rows but the model "
                         f"now has {n}; run pms.loo again.")
    if ev.n_samples != int(elpd["n_samples"]):
        raise ValueError(f"{owner}: elpd was computed from {int(elpd['n_samples'])} draws "
                         f"but idata has {ev.n_samples}: pass the same sampling result.")
    if np.ndim(observations) == 0:
        m = _check_observations(observations, n - used.size, owner=owner,
                                what="rows not yet in the subsample")
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        rows = _draw_rows(rng, n, m, taken=used)
    else:
        rows = check_rows(observations, n, owner=owner, name="observations")
        again = np.intersect1d(rows, used)
        if again.size:
            raise InvalidParameterError(
                f"{owner}: observations holds rows already in the subsample: "
                f"{', '.join(map(str, again[:5]))}.")
    new = _evaluate_rows(ev, rows, reff)
    return _result(old.extended(new), approx, n_rows=n, n_samples=ev.n_samples,
                   var_name=var_name, row_dim=_row_dim_name(ev, var_name),
                   approximation=approximation, reff=reff)
