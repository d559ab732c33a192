"""Shared test helpers: read groups from PyMC 5 (InferenceData) or PyMC 6 (DataTree)."""

from __future__ import annotations

import numpy as np


def group(idata, name):
    """The group ``name`` of an ``arviz.InferenceData`` or an xarray ``DataTree`` as a Dataset."""
    import arviz as az

    return az.convert_to_dataset(idata, group=name)


def from_dict(**groups):
    """``arviz.from_dict`` on ArviZ 0.x (keyword groups) and 1.x (one dict of groups)."""
    import arviz as az

    if int(az.__version__.split(".")[0]) >= 1:
        return az.from_dict(groups)
    return az.from_dict(**groups)


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


def ess(x):
    """Effective sample size for the mean of draws ``(chains, draws, ...)`` or ``(draws,)``
    (ArviZ's ``ess(method="mean")``; trailing axes are flattened into draws)."""
    import arviz as az

    x = np.asarray(x, dtype=float)
    x = x[None] if x.ndim == 1 else x.reshape(x.shape[0], -1)
    return float(az.ess(x, method="mean"))


def mcse_mean(x):
    """Monte Carlo standard error of the mean of ``x`` (``(chains, draws)``), from :func:`ess`."""
    x = np.asarray(x, dtype=float)
    return float(x.std() / np.sqrt(ess(x)))


def mcse_sd(x):
    """Monte Carlo standard error of the standard deviation of ``x`` (delta method on the
    variance, with the ESS of the squared deviations)."""
    x = np.asarray(x, dtype=float)
    if x.ndim == 1:
        x = x[None]
    sq = (x - x.mean()) ** 2
    sd = float(np.sqrt(sq.mean()))
    return float(sq.std() / np.sqrt(ess(sq)) / (2.0 * sd))


def run_sample(model, step, *, draws, tune, chains, seed, cores=1, **kw):
    """``pm.sample`` as the step tests call it: no progress bar, no convergence checks."""
    import pymc as pm

    with model:
        return pm.sample(
            draws=draws,
            tune=tune,
            step=step,
            chains=chains,
            cores=cores,
            random_seed=seed,
            progressbar=kw.pop("progressbar", False),
            compute_convergence_checks=False,
            **kw,
        )


def sampler_warnings(idata, match=""):
    """Messages of the ``SamplerWarning``s a step put in its ``warning`` stat, per chain
    (sample with ``keep_warning_stat=True``)."""
    stat = sample_stats(idata)["warning"].values
    out = []
    for chain in stat:
        out.append([w.message for w in chain.ravel() if w is not None and match in w.message])
    return out


def hierarchical_logistic(y, g, x, groups, *, centred=False):
    """Hierarchical logistic regression with integer group indices ``g``, ``mu ~
    Normal(0, 2)``, ``tau ~ HalfNormal(1)``, ``b ~ Normal(0, 2)``.

    Non-centred (default): ``logit p = mu + tau * z[g] + b * x``, ``z ~ Normal(0, 1)``.
    ``centred=True``: ``logit p = a[g] + b * x``, ``a ~ Normal(mu, tau)`` (the same
    posterior; the better form when every group holds many rows)."""
    import pymc as pm

    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 2.0)
        tau = pm.HalfNormal("tau", 1.0)
        if centred:
            a = pm.Normal("a", mu, tau, shape=groups)
        else:
            z = pm.Normal("z", 0.0, 1.0, shape=groups)
        b = pm.Normal("b", 0.0, 2.0)
        eta = (a[g] if centred else mu + tau * z[g]) + b * x
        pm.Bernoulli("y", logit_p=eta, observed=y)
    return model


def steps_per_draw(method) -> int:
    """Markov transitions per draw of a step (an instance, or a class or its name at its
    defaults): the draw's ``data_used`` can reach this many times ``N``."""
    import inspect

    import pymc_subsample as pms

    if not isinstance(method, (str, type)):
        return int(method.steps_per_draw)
    cls = getattr(pms, method) if isinstance(method, str) else method
    param = inspect.signature(cls).parameters.get("steps_per_draw")
    return 1 if param is None else int(param.default)


def scalable_mh_accepting_every_proposal():
    """ScalableMH that accepts every proposal (a deliberately broken sampler: the
    correctness tests must catch it)."""
    from pymc_subsample import ScalableMH

    class AcceptsEveryProposal(ScalableMH):
        def _decide(self, q, q_prop, log_prior_ratio, log_qratio):
            _, stats = super()._decide(q, q_prop, log_prior_ratio, log_qratio)
            return True, stats

    return AcceptsEveryProposal
