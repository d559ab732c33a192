"""ScalableMH with ``bounds="auto"`` on GLMs with an unknown scale or shape, against NUTS.

Models (N = 10^5 rows; an intercept ``a`` and five standard-normal covariates with
coefficients ``b``, ``eta = a + X b``, ``a, b ~ Normal(0, 2)``, scale or shape
``s ~ HalfNormal(5)``):

* ``normal``: ``y ~ Normal(eta, s)``;
* ``student_t``: ``y ~ StudentT(nu=4, eta, s)``; ``student_t_nu``: the same data with
  ``nu ~ Gamma(2, 0.1)`` sampled too;
* ``gamma``: ``y ~ Gamma(alpha=s, beta=s / exp(eta))`` (mean ``exp(eta)``, shape ``s``);
* ``negbinomial``: ``y ~ NegativeBinomial(mu=exp(eta), alpha=s)``;
* ``poisson``: ``y ~ Poisson(exp(eta))`` (no scale; for comparison);
* ``probit``: ``y ~ Bernoulli(p=pm.math.invprobit(eta))`` (no scale);
* ``multiobs``: two observed variables on the same rows, ``y ~ Normal(eta, s)`` and
  ``y2 ~ Bernoulli(logit_p = X b + c)`` (shared ``b``, ``c ~ Normal(0, 2)``);
* ``zip``: ``y ~ ZeroInflatedPoisson(psi, mu=exp(eta))``, ``psi ~ Beta(2, 2)`` (sampled on
  the logit scale; data with ``psi = 0.7``); ``zip_fixed``: the same with ``psi = 0.7`` fixed;
* ``zinb``: ``y ~ ZeroInflatedNegativeBinomial(psi=0.7, mu=exp(eta), alpha=2)`` (both
  fixed; data with ``alpha = 2``); ``zinb_alpha``: the same with ``alpha = s`` sampled (the
  ``zeroinflated_negbinomial_alpha`` family, rows of ``(eta, log alpha)``); ``zinb_both``:
  ``psi ~ Beta(2, 2)`` and ``alpha = s`` both sampled (``zeroinflated_negbinomial_both``,
  rows of ``(eta, logit psi, log alpha)``);
* ``censored``: ``y ~ Censored(Normal(eta, s), lower=-0.5, upper=1.5)`` (about 28% of rows
  censored below, 19% above); ``censored_fixed``: the same with ``s = 1.2`` fixed.

Each model is sampled by ``pms.ScalableMH()`` (order 2, defaults: 2 chains x (1,000 tune +
2,000 draws), the step built inside the timed call) and by ``pm.sample()`` (NUTS, 2
chains x (1,000 + 1,000)), both with ``cores=1`` so that the wall times compare. Printed
per model: ScalableMH's rows read per step, acceptance, minimum bulk ESS per draw; the
largest ``|mean_SMH - mean_NUTS|`` over the variables in units of the combined Monte Carlo
standard error (``z``, ArviZ's ``mcse``), the largest ``|sd_SMH / sd_NUTS - 1|`` and
the same difference in units of its standard error (``sd z``, ``sd / sqrt(2 ESS)`` each);
and the ratio of ESS per second (minimum bulk ESS / wall time of the whole call,
set-up included). The ScalableMH issue asks for <= 100 rows per step at N = 10^5 and
means and sds within MCSE-derived tolerances of NUTS (here: ``z < 4`` and ``sd z < 4``).

Run: OPENBLAS_NUM_THREADS=1 python benchmarks/smh_families.py [--quick] [--only NAME ...]
     (--quick: N = 10^4 and shorter runs)
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

FAMILIES = ("normal", "student_t", "gamma", "negbinomial", "poisson", "probit", "multiobs",
            "zip", "zip_fixed", "zinb", "zinb_alpha", "zinb_both", "censored", "censored_fixed", "softmax", "student_t_nu",
            "ordered_logistic", "ordered_probit")
D = 5


def _softmax_model(X, rng, k=3):
    """``softmax``: ``y ~ Categorical(p=softmax(eta))``, ``eta = [0, a + X b]`` (K = 3
    classes, class 0 the reference with a zero predictor), ``a`` (K - 1) and ``b``
    (D x (K - 1)) ``~ Normal(0, 2)``. (With all K classes free, the common shift is
    identified by the prior alone and NUTS had not finished 2 x 2,000 iterations in 45
    minutes at N = 10^5.)"""
    import pymc as pm
    import pytensor.tensor as pt

    n = X.shape[0]
    eta = np.column_stack([np.zeros(n), X @ rng.normal(0.0, 0.5, (X.shape[1], k - 1))
                           + np.array([0.3, -0.2, 0.1][:k - 1])])
    y = np.argmax(eta + rng.gumbel(size=eta.shape), axis=1)  # Gumbel-max: softmax draws
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 2.0, shape=k - 1)
        b = pm.Normal("b", 0.0, 2.0, shape=(X.shape[1], k - 1))
        e = pt.concatenate([pt.zeros((n, 1)), a + pm.math.dot(X, b)], axis=1)
        pm.Categorical("y", p=pm.math.softmax(e, axis=-1), observed=y)
    return model


def _ordered_model(X, rng, family, k=4):
    """``ordered_logistic``: ``y ~ OrderedLogistic(eta=X b, cutpoints=c)`` (K = 4),
    ``b ~ Normal(0, 2)``, ``c ~ Normal(0, 5)`` under the ordered transform; data with
    cutpoints ``(-1, 0.2, 1.3)``. ``ordered_probit``: ``OrderedProbit`` with ``sigma=1``."""
    import pymc as pm

    probit = family == "ordered_probit"
    noise = rng.standard_normal(X.shape[0]) if probit else rng.logistic(size=X.shape[0])
    u = X @ np.linspace(-0.4, 0.4, X.shape[1]) + noise
    y = np.searchsorted(np.array([-1.0, 0.2, 1.3]), u)
    with pm.Model() as model:
        c = pm.Normal("c", 0.0, 5.0, shape=k - 1, transform=pm.distributions.transforms.ordered,
                      initval=np.linspace(-1.0, 1.0, k - 1))
        b = pm.Normal("b", 0.0, 2.0, shape=X.shape[1])
        dist = pm.OrderedProbit if probit else pm.OrderedLogistic
        dist("y", eta=pm.math.dot(X, b), cutpoints=c, observed=y, compute_p=False)
    return model


def family_model(family, n, seed=0):
    import pymc as pm

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, D))
    if family == "softmax":
        return _softmax_model(X, rng)
    if family.startswith("ordered"):
        return _ordered_model(X, rng, family)
    eta = 0.3 + X @ np.linspace(-0.4, 0.4, D)
    if family in ("normal", "multiobs"):
        y = eta + 1.2 * rng.standard_normal(n)
    elif family in ("student_t", "student_t_nu"):
        y = eta + 1.2 * rng.standard_t(4.0, n)
    elif family == "gamma":
        y = rng.gamma(3.0, np.exp(eta) / 3.0)
    elif family == "negbinomial":
        y = rng.poisson(np.exp(eta) * rng.gamma(2.0, 0.5, n))
    elif family == "probit":
        y = (rng.standard_normal(n) < eta).astype(np.int64)
    elif family.startswith("zip"):
        y = np.where(rng.random(n) < 0.7, rng.poisson(np.exp(eta)), 0)
    elif family.startswith("zinb"):
        y = np.where(rng.random(n) < 0.7, rng.poisson(np.exp(eta) * rng.gamma(2.0, 0.5, n)), 0)
    elif family.startswith("censored"):
        y = np.clip(eta + 1.2 * rng.standard_normal(n), -0.5, 1.5)
    else:
        y = rng.poisson(np.exp(eta))
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 2.0)
        b = pm.Normal("b", 0.0, 2.0, shape=D)
        e = a + pm.math.dot(X, b)
        if family not in ("poisson", "probit", "zip", "zip_fixed", "zinb",
                          "censored_fixed"):
            s = pm.HalfNormal("s", 5.0)
        if family == "normal":
            pm.Normal("y", mu=e, sigma=s, observed=y)
        elif family == "student_t":
            pm.StudentT("y", nu=4.0, mu=e, sigma=s, observed=y)
        elif family == "student_t_nu":
            pm.StudentT("y", nu=pm.Gamma("nu", 2.0, 0.1), mu=e, sigma=s, observed=y)
        elif family == "gamma":
            pm.Gamma("y", alpha=s, beta=s / pm.math.exp(e), observed=y)
        elif family == "negbinomial":
            pm.NegativeBinomial("y", mu=pm.math.exp(e), alpha=s, observed=y)
        elif family == "probit":
            pm.Bernoulli("y", p=pm.math.invprobit(e), observed=y)
        elif family == "multiobs":
            pm.Normal("y", mu=e, sigma=s, observed=y)
            y2 = (rng.random(n) < 1.0 / (1.0 + np.exp(0.3 - eta))).astype(np.int64)
            c = pm.Normal("c", 0.0, 2.0)
            pm.Bernoulli("y2", logit_p=pm.math.dot(X, b) + c, observed=y2)
        elif family.startswith("zip"):
            psi = pm.Beta("psi", 2.0, 2.0) if family == "zip" else 0.7
            pm.ZeroInflatedPoisson("y", psi=psi, mu=pm.math.exp(e), observed=y)
        elif family.startswith("zinb"):
            alpha = s if family in ("zinb_alpha", "zinb_both") else 2.0
            psi = pm.Beta("psi", 2.0, 2.0) if family == "zinb_both" else 0.7
            pm.ZeroInflatedNegativeBinomial("y", psi=psi, mu=pm.math.exp(e), alpha=alpha,
                                            observed=y)
        elif family.startswith("censored"):
            sigma = s if family == "censored" else 1.2
            pm.Censored("y", pm.Normal.dist(mu=e, sigma=sigma), lower=-0.5, upper=1.5,
                        observed=y)
        else:
            pm.Poisson("y", mu=pm.math.exp(e), observed=y)
    return model


def _sample(model, make_step, *, tune, draws, seed):
    import pymc as pm

    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        step = make_step()
        idata = pm.sample(draws=draws, tune=tune, step=step, chains=2, cores=1,
                          random_seed=seed, progressbar=False,
                          compute_convergence_checks=False)
        wall = time.perf_counter() - t0
    return idata, wall


def _summary(idata, names=("a", "b", "s", "c", "psi", "nu")):
    """``name -> (mean, sd, mcse, bulk ESS)`` per component of the named variables."""
    import arviz as az

    from pymc_subsample.diagnostics import get_group

    post = get_group(idata, "posterior")
    names = [v for v in names if v in post]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = post[names]
        ess = az.ess(ds, method="bulk")
        mcse = az.mcse(ds)
    out = {}
    for v in names:
        x = np.asarray(post[v].values, dtype=float)
        x = x.reshape(x.shape[0] * x.shape[1], -1)
        out[v] = (x.mean(0), x.std(0), np.ravel(np.asarray(mcse[v].values)),
                  np.ravel(np.asarray(ess[v].values)))
    return out


def compare(a, b):
    """``(z max, sd err max, sd z max, min ESS a, min ESS b)`` of two :func:`_summary`
    results: mean differences in combined MCSEs, relative sd differences, and those in
    units of their standard error (about ``sd / sqrt(2 ESS)`` each)."""
    z = max(float(np.max(np.abs(a[v][0] - b[v][0]) / np.hypot(a[v][2], b[v][2]))) for v in a)
    sd_err = max(float(np.max(np.abs(a[v][1] / b[v][1] - 1.0))) for v in a)
    sd_z = max(float(np.max(np.abs(a[v][1] - b[v][1]) / np.hypot(
        a[v][1] / np.sqrt(2 * a[v][3]), b[v][1] / np.sqrt(2 * b[v][3])))) for v in a)
    ess_a = min(float(np.min(a[v][3])) for v in a)
    ess_b = min(float(np.min(b[v][3])) for v in b)
    return z, sd_err, sd_z, ess_a, ess_b


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", choices=FAMILIES)
    args = ap.parse_args()
    import logging

    import pymc_subsample as pms
    from pymc_subsample.diagnostics import get_group

    logging.getLogger("pymc").setLevel(logging.ERROR)
    n = 10**4 if args.quick else 10**5
    tune, draws = (500, 1000) if args.quick else (1000, 2000)
    nuts_tune, nuts_draws = (500, 500) if args.quick else (1000, 1000)
    print(f"N = {n:,}, {D} covariates + intercept (+ scale or shape); 2 chains, cores=1")
    print(f"{'family':<12} {'rows/step':>9} {'acc':>5} {'ESS/draw':>8} {'z max':>6} "
          f"{'sd err':>7} {'sd z':>5} {'SMH s':>7} {'NUTS s':>7} {'ESS/s ratio':>11}",
          flush=True)
    for k, family in enumerate(args.only or FAMILIES):
        model = family_model(family, n, seed=k)
        smh, t_smh = _sample(model, lambda: pms.ScalableMH(), tune=tune, draws=draws, seed=k)
        nuts, t_nuts = _sample(model, lambda: None, tune=nuts_tune, draws=nuts_draws,
                               seed=100 + k)
        ss = get_group(smh, "sample_stats")
        z, sd_err, sd_z, ess_a, ess_b = compare(_summary(smh), _summary(nuts))
        ratio = (ess_a / t_smh) / (ess_b / t_nuts)
        print(f"{family:<12} {float(np.mean(ss['data_used'].values)):>9.2f} "
              f"{float(np.mean(ss['accepted'].values)):>5.2f} {ess_a / (2 * draws):>8.2f} "
              f"{z:>6.2f} {sd_err:>7.3f} {sd_z:>5.2f} {t_smh:>7.1f} {t_nuts:>7.1f} {ratio:>11.1f}",
              flush=True)


if __name__ == "__main__":
    main()
