"""ScalableMH with no arguments on a non-centred hierarchical logistic regression, against
NUTS.

Model (N = 10^5 rows in 20 groups with integer indices ``g``, three standard-normal
covariates): ``logit p = mu + tau * z[g] + X b`` with ``z ~ Normal(0, 1)``, ``mu ~
Normal(0, 2)``, ``tau ~ HalfNormal(1)``, ``b ~ Normal(0, 1)``. The linear predictor is not
affine in the sampled variables (``tau`` is sampled on the log scale and multiplies
``z``), so ScalableMH takes its control variates and bounds in the predictor coordinates
``(b, mu + tau * z)`` and proposes by a Hamiltonian trajectory on the data-free surrogate
(``pymc_subsample.engine.predictor``, ``pymc_subsample.proposals.SurrogateHMC``).

Since the blocked hierarchical sweep (``pymc_subsample.steps.hierarchical``), the
logistic model runs that sweep by default; the predictor-coordinate machinery described
here is the joint move of ``hierarchical="off"`` (and of the Normal likelihood, whose
sampled scale the sweep does not cover). ``benchmarks/hierarchical.py`` measures the
sweep on many groups of unequal size.

``pms.ScalableMH()`` (2 chains x (1,000 tune + 3,000 draws)) and ``pm.sample()`` (NUTS,
2 chains x (500 + 500)), both ``cores=1``, the step built inside the timed call. Printed:
rows read per step, acceptance, the fraction of exact full-data fallback steps, minimum
bulk ESS per draw, the largest mean difference in combined MCSEs (``z``), the largest
relative sd difference and its ``z``, wall times, and the ratio of ESS per second (minimum
bulk ESS over ``mu``, ``tau``, ``z``, ``b``, set-up included). The ScalableMH issue asks
for <= 1,000 rows per step here and means and sds within MCSE-derived tolerances of NUTS.

``--likelihood normal``: the same predictor with ``y ~ Normal(eta, sigma)``,
``sigma ~ HalfNormal(2)`` sampled (true sigma 1.3): ``log sigma`` joins the predictor
coordinates and the rows take path bounds in ``(eta, log sigma)``. The issue asks for
<= 100 rows per step for unknown-scale families and <= 1,000 for the hierarchical model.

Run: OPENBLAS_NUM_THREADS=1 python benchmarks/smh_hierarchical.py [--quick] [--smh-only]
     [--likelihood {bernoulli,normal}]     (--quick: N = 10^4)
"""

from __future__ import annotations

import argparse
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from smh_families import _sample, _summary, compare  # noqa: E402

GROUPS, K = 20, 3
NAMES = ("mu", "tau", "z", "b")


def non_centred_model(n, seed=2, likelihood="bernoulli"):
    import pymc as pm

    rng = np.random.default_rng(seed)
    g = rng.integers(0, GROUPS, n)
    X = rng.standard_normal((n, K))
    a = rng.normal(-0.5, 0.7, GROUPS)
    b = rng.normal(0.0, 0.5, K)
    if likelihood == "normal":
        y = a[g] + X @ b + 1.3 * rng.standard_normal(n)
    else:
        y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(a[g] + X @ b)))).astype(np.int64)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 2.0)
        tau = pm.HalfNormal("tau", 1.0)
        z = pm.Normal("z", 0.0, 1.0, shape=GROUPS)
        beta = pm.Normal("b", 0.0, 1.0, shape=K)
        eta = mu + tau * z[g] + pm.math.dot(X, beta)
        if likelihood == "normal":
            pm.Normal("y", eta, pm.HalfNormal("sigma", 2.0), observed=y)
        else:
            pm.Bernoulli("y", logit_p=eta, observed=y)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--smh-only", action="store_true", help="skip NUTS (minutes at 10^5)")
    ap.add_argument("--likelihood", choices=("bernoulli", "normal"), default="bernoulli")
    args = ap.parse_args()
    names = NAMES + (("sigma",) if args.likelihood == "normal" else ())
    import logging

    import pymc_subsample as pms
    from pymc_subsample.diagnostics import get_group

    logging.getLogger("pymc").setLevel(logging.ERROR)
    n = 10**4 if args.quick else 10**5
    tune, draws = 1000, 3000
    model = non_centred_model(n, likelihood=args.likelihood)
    smh, t_smh = _sample(model, lambda: pms.ScalableMH(), tune=tune, draws=draws, seed=1)
    ss = get_group(smh, "sample_stats")
    summ = _summary(smh, names)
    ess_a = min(float(np.min(v[3])) for v in summ.values())
    print(f"N = {n:,}, {GROUPS} groups, {K} covariates, non-centred, {args.likelihood} "
          "likelihood; 2 chains, cores=1")
    # the blocked sweep (the default here) declares no fallback stat: it has none
    fallback = (f"{float(np.mean(ss['fallback'].values)):.4f}" if "fallback" in ss else "-")
    print(f"ScalableMH: rows/step {float(np.mean(ss['data_used'].values)):.2f}, acceptance "
          f"{float(np.mean(ss['accepted'].values)):.3f}, fallback "
          f"{fallback}, ESS/draw {ess_a / (2 * draws):.3f}, "
          f"{t_smh:.1f} s", flush=True)
    if args.smh_only:
        return
    nuts, t_nuts = _sample(model, lambda: None, tune=500, draws=500, seed=2)
    z, sd_err, sd_z, ess_a, ess_b = compare(summ, _summary(nuts, names))
    nss = get_group(nuts, "sample_stats")
    print(f"NUTS: ESS/draw {ess_b / 1000:.3f}, leapfrog steps/draw "
          f"{float(np.mean(nss['n_steps'].values)):.1f}, divergences "
          f"{int(np.sum(nss['diverging'].values))}, {t_nuts:.1f} s")
    print(f"agreement: z max {z:.2f}, sd err max {sd_err:.3f}, sd z max {sd_z:.2f}")
    print(f"ESS/s ratio ScalableMH / NUTS: {(ess_a / t_smh) / (ess_b / t_nuts):.1f}")


if __name__ == "__main__":
    main()
