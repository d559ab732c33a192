"""SGLD's cost per draw on a wide logistic regression: the noise check's share.

Model: logistic regression with ``d`` standardised features (``x_i ~ N(0, I_d / d)``,
``beta_j ~ Normal(0, 1)``), N = 20,000 rows, d = 2,000 (``--quick``: d = 600).

SGLD's ``noise_ratio`` (Welling & Teh 2011, "Bayesian learning via stochastic gradient
Langevin dynamics", Sec. 4: ``alpha = (h / 4) lambda_max``) needs the largest eigenvalue
of a ``(d, d)`` average. Up to ``NoiseAverage.EXACT_DIM`` (256) parameters it is an exact
``eigvalsh`` every transition; beyond, the eigenvalue is followed by warm-started power
iteration, and once 200 estimates are in (20 draws) one is folded in every
``ceil(d / 256)`` transitions. This script times the same chain (same seed: the draws
are identical, only the stat's computation differs) both ways in one run and prints the
per-draw seconds, their ratio, the power iteration's error against ``eigvalsh`` of the
same average at the end, and the ``noise_ratio`` stats' chain means.

Run: OPENBLAS_NUM_THREADS=1 python benchmarks/sgld_wide.py [--quick]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pymc as pm

import pymc_subsample as pms
from pymc_subsample.kernels import sgld as sgld_kernel


def run(X, y, draws, exact):
    old = sgld_kernel.NoiseAverage.EXACT_DIM
    if exact:
        sgld_kernel.NoiseAverage.EXACT_DIM = 10**9
    try:
        with pm.Model():
            b = pm.Normal("b", 0, 1, shape=X.shape[1])
            pm.Bernoulli("y", logit_p=pm.math.dot(X, b), observed=y)
            step = pms.SGLD()
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                idata = pm.sample(draws=draws, tune=0, step=step, chains=1, cores=1,
                                  random_seed=7, progressbar=False,
                                  compute_convergence_checks=False)
            secs = time.perf_counter() - t0
            avg = step.chain.noise
            exact_top = float(np.linalg.eigvalsh(avg.cov)[-1])
            top_err = abs(avg.top / exact_top - 1)
            n_est = avg.n
    finally:
        sgld_kernel.NoiseAverage.EXACT_DIM = old
    post = np.asarray(idata.posterior["b"]).reshape(draws, -1)
    noise = float(np.mean(np.asarray(idata.sample_stats["noise_ratio"])))
    return secs / draws, post, noise, top_err, n_est


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    d = 600 if args.quick else 2000
    draws = 30 if args.quick else 40  # the window (200 estimates) fills in 20 draws
    rng = np.random.default_rng(0)
    n = 20_000
    X = rng.standard_normal((n, d)) / np.sqrt(d)
    beta = 0.5 * rng.standard_normal(d)
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ beta))).astype(float)
    fast, post_f, noise_f, err, n_f = run(X, y, draws, exact=False)
    slow, post_s, noise_s, _, n_s = run(X, y, draws, exact=True)
    print(f"SGLD, logistic regression, N = {n:,}, d = {d:,}, {draws} draws "
          f"(10 transitions each), PyMC {pm.__version__}")
    print(f"  per draw, noise check by power iteration: {fast:8.3f} s")
    print(f"  per draw, eigvalsh every transition:      {slow:8.3f} s")
    print(f"  ratio (exact / tracked):                  {slow / fast:8.1f}x")
    print(f"  draws identical: {np.array_equal(post_f, post_s)}")
    print(f"  power iteration vs eigvalsh of the same average at the end: "
          f"{err:.2e} relative")
    print(f"  mean noise_ratio {noise_f:.4g} (tracked, {n_f} estimates folded in) vs "
          f"{noise_s:.4g} (exact, {n_s}): the top eigenvalue of an average of fewer "
          f"noisy estimates is biased upwards; both windows hold "
          f"{sgld_kernel.NoiseAverage().window} estimates once the run is long enough")


if __name__ == "__main__":
    main()
