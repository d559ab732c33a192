"""Mixture likelihoods other than the zero-inflated families (issue: a plain
``pm.NormalMixture`` crashed every step with ``KeyError: 'count'``, taken for a
zero-inflated mixture). Zero-inflated families match only a mixture of exactly a point
mass at zero and their count component; every other mixture samples with AustereMH,
BarkerMinibatch and SGLD (checked against quadrature) and is refused clearly by
ScalableMH's ``bounds='auto'``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

N, W, SIGMA = 2000, (0.3, 0.7), 1.0


def _data():
    rng = np.random.default_rng(0)
    first = rng.random(N) < W[0]
    return np.where(first, rng.normal(-2.0, SIGMA, N), rng.normal(2.0, SIGMA, N))


def _model(y):
    import pymc as pm

    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5, shape=2, transform=pm.distributions.transforms.ordered,
                       initval=[-1.0, 1.0])
        pm.NormalMixture("y", w=list(W), mu=mu, sigma=SIGMA, observed=y)
    return model


def _quadrature(y, sigma=SIGMA):
    """Posterior means and sds of ``(mu_1, mu_2)`` on a grid around the mode (the
    likelihood is peaked: sds 0.03-0.05), the prior ``Normal(0, 5)`` on each, ``mu_1 <
    mu_2`` holding on the whole grid."""
    from scipy.special import logsumexp
    from scipy.stats import norm

    g1, g2 = np.linspace(-2.4, -1.6, 161), np.linspace(1.75, 2.3, 161)
    a, b = np.meshgrid(g1, g2, indexing="ij")
    lp = norm.logpdf(a, 0, 5) + norm.logpdf(b, 0, 5)
    for chunk in np.array_split(y, 20):
        la = np.log(W[0]) + norm.logpdf(chunk[None, None, :], a[..., None], sigma)
        lb = np.log(W[1]) + norm.logpdf(chunk[None, None, :], b[..., None], sigma)
        lp += logsumexp(np.stack([la, lb]), axis=0).sum(-1)
    p = np.exp(lp - lp.max())
    p /= p.sum()
    mean = np.array([(p * a).sum(), (p * b).sum()])
    sd = np.sqrt([(p * (a - mean[0]) ** 2).sum(), (p * (b - mean[1]) ** 2).sum()])
    return mean, sd


@pytest.fixture(scope="module")
def problem():
    y = _data()
    return y, _quadrature(y)


def _agrees(draws, mean, sd, bias_sd):
    import arviz as az

    ok = True
    for j in range(2):
        x = draws[:, j]
        ess = float(az.ess(x[None, :]))
        mcse = x.std() / np.sqrt(max(ess, 1.0))
        ok &= abs(x.mean() - mean[j]) <= 4 * mcse + bias_sd * sd[j]
        ok &= 0.75 <= x.std() / sd[j] <= 1.33
    return bool(ok)


@pytest.mark.slow
@pytest.mark.parametrize("method,bias_sd", [("AustereMH", 0.1), ("BarkerMinibatch", 0.1),
                                            ("SGLD", 0.2)])
def test_a_normal_mixture_samples_its_posterior(problem, method, bias_sd):
    import pymc as pm

    import pymc_subsample as pms

    y, (mean, sd) = problem
    with _model(y):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = pm.sample(tune=300, draws=1000, chains=1, step=getattr(pms, method)(),
                              progressbar=False, compute_convergence_checks=False,
                              random_seed=1)
    draws = np.asarray(idata["posterior"]["mu"]).reshape(-1, 2)
    assert _agrees(draws, mean, sd, bias_sd), (draws.mean(0), draws.std(0), mean, sd)
    # the same check has power: the posterior of a model with sigma = 1.1 is far outside it
    wrong_mean, wrong_sd = _quadrature(y, sigma=1.1)
    assert not _agrees(draws, wrong_mean, wrong_sd, bias_sd)


def test_scalable_mh_refuses_a_normal_mixture_naming_the_variable(problem):
    import pymc_subsample as pms

    y, _ = problem
    with _model(y):
        with pytest.raises(ValueError, match=r"'y' \(MixtureRV\).*AustereMH"):
            pms.ScalableMH()


def test_a_mixture_with_a_zero_and_two_counts_is_not_zero_inflated_poisson():
    """A point mass at zero and *two* Poisson components: the zero-inflated family's
    reader used to pair the first two components and drop the third."""
    import pymc as pm

    import pymc_subsample as pms

    rng = np.random.default_rng(1)
    y = rng.poisson(3.0, 500)
    with pm.Model():
        lam = pm.Exponential("lam", 1.0, shape=2)
        comps = [pm.DiracDelta.dist(0), pm.Poisson.dist(lam[0]), pm.Poisson.dist(lam[1])]
        pm.Mixture("y", w=[0.2, 0.4, 0.4], comp_dists=comps, observed=y)
        with pytest.raises(ValueError, match="MixtureRV"):
            pms.ScalableMH()
