"""One covariate written as ``pm.math.dot(X, b)`` with ``X`` of shape ``(N, 1)`` and ``b``
of shape ``(1,)`` (issue 44): PyMC's logp rewrites squeeze the constant to ``(N,)``, the
engine's row data, while the model's own linear predictor still reads the ``(N, 1)``
array; the batch graph used to leave that one at all ``N`` rows, and ScalableMH,
AustereMH and SGLD failed with a NumPy broadcasting error. Now the ``(N, 1)`` constant is
the same rows reshaped, and every step samples the posterior, checked against
quadrature."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

N = 3000


def _data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, 1))
    y = (rng.random(N) < 1.0 / (1.0 + np.exp(-(0.7 * X[:, 0])))).astype(np.int64)
    return X, y


def _model(X, y):
    import pymc as pm

    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0, shape=(1,))
        pm.Bernoulli("y", logit_p=pm.math.dot(X, b), observed=y)
    return model


def _quadrature(X, y, scale=1.0):
    """Posterior mean and sd of ``b`` on a fine grid (prior Normal(0, 1)); ``scale``
    multiplies the covariate (the power check's wrong posterior)."""
    from scipy.special import log_expit

    grid = np.linspace(0.2, 1.2, 2001)
    x = X[:, 0] * scale
    lp = -0.5 * grid**2
    for chunk in np.array_split(np.arange(N), 10):
        eta = grid[:, None] * x[None, chunk]
        s = 2.0 * y[chunk] - 1.0
        lp += log_expit(s[None, :] * eta).sum(axis=1)
    p = np.exp(lp - lp.max())
    p /= p.sum()
    mean = float((p * grid).sum())
    return mean, float(np.sqrt((p * (grid - mean) ** 2).sum()))


def _agrees(draws, mean, sd, bias_sd):
    import arviz as az

    ess = float(az.ess(draws[None, :]))
    mcse = draws.std() / np.sqrt(max(ess, 1.0))
    return bool(abs(draws.mean() - mean) <= 4 * mcse + bias_sd * sd
                and 0.75 <= draws.std() / sd <= 1.33)


@pytest.mark.parametrize("method", ["ScalableMH", "AustereMH", "BarkerMinibatch", "SGLD"])
def test_every_step_builds_on_a_one_column_dot(method):
    """The predictor of a batch of 64 rows has 64 entries (it had all N)."""
    import pymc_subsample as pms

    X, y = _data()
    with _model(X, y), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = getattr(pms, method)()
    assert step.engine.n_rows == N


@pytest.mark.slow
@pytest.mark.parametrize("method,bias_sd", [("ScalableMH", 0.0), ("AustereMH", 0.1),
                                            ("BarkerMinibatch", 0.1), ("SGLD", 0.2)])
def test_a_one_column_dot_samples_its_posterior(method, bias_sd):
    import pymc as pm

    import pymc_subsample as pms

    X, y = _data()
    mean, sd = _quadrature(X, y)
    with _model(X, y):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(tune=300, draws=1000, chains=1, step=getattr(pms, method)(),
                              progressbar=False, compute_convergence_checks=False,
                              random_seed=1)
    draws = np.asarray(idata["posterior"]["b"]).reshape(-1)
    assert _agrees(draws, mean, sd, bias_sd), (draws.mean(), draws.std(), mean, sd)
    # the check has power: the posterior with the covariate 1.25 times larger (its mean
    # about 3 sd lower) is outside it
    assert not _agrees(draws, *_quadrature(X, y, scale=1.25), bias_sd)
