"""Benchmark of divide-and-conquer MCMC (``pms.consensus_sample``) on a Dask LocalCluster.

Logistic regression with d = 10 coefficients (an intercept column and nine
standard-normal covariates) on N = 10^7 rows. X is written chunk by chunk as a float32
``.npy`` file by ``pms.datasets.write_logistic`` in a temporary directory and opened
with ``mmap_mode="r"`` (as in the "beyond memory" tutorial), y as an int64 ``.npy``
opened the same way, so the workers receive references to the files, not the rows.

* Reference: ScalableMH on all N rows in this process (set-up included in its time).
* Consensus: 4 contiguous shards, each sampled by ScalableMH as one Dask task on a
  ``LocalCluster(n_workers=k, threads_per_worker=1, processes=True)``, with k = 1 and
  k = 2 worker processes (the same seed: the same draws), combined by consensus
  weighting (Scott et al. 2016) and the semiparametric and nonparametric density
  products (Neiswanger et al. 2014).

Printed, all measured in this run: for each combiner and coefficient the error of the
posterior mean in reference posterior sds, ``(mean - mean_ref) / sd_ref``, and the sd
ratio ``sd / sd_ref``, with the reference's Monte Carlo standard error of the mean (in
sds) for scale; the wall time of ``consensus_sample`` with 1 and 2 workers (the cluster's
start-up excluded) and their ratio, and the per-shard diagnostics.

Run: python benchmarks/consensus.py [--quick]   (--quick: N = 10^5, fewer draws)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from pymc_subsample.testing import ess, group  # noqa: E402

D = 10
COMBINERS = ("consensus", "semiparametric", "nonparametric")


def model_fn(X, y):
    import pymc as pm

    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 10.0, shape=D)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, beta), observed=y)
    return model


def reference(X, y, *, draws, tune, seed):
    import pymc as pm

    import pymc_subsample as pms

    t0 = time.perf_counter()
    model = model_fn(X, y)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(draws=draws, tune=tune, chains=1, cores=1, step=pms.ScalableMH(),
                          random_seed=seed, progressbar=False,
                          compute_convergence_checks=False)
    wall = time.perf_counter() - t0
    b = np.asarray(group(idata, "posterior")["beta"].values)[0]  # (draws, D)
    return b, wall


def run_consensus(X, y, n_workers, *, draws, tune, seed):
    from dask.distributed import Client, LocalCluster

    import pymc_subsample as pms

    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(n_workers)
        t0 = time.perf_counter()
        res = pms.consensus_sample(model_fn, {"X": X, "y": y}, n_shards=4, draws=draws,
                                   tune=tune, client=client, random_seed=seed,
                                   combiners=COMBINERS)
        wall = time.perf_counter() - t0
    return res, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 10^5 and fewer draws")
    args = ap.parse_args()
    import logging

    import pymc as pm

    import pymc_subsample as pms

    logging.getLogger("pymc").setLevel(logging.ERROR)
    n = 10**5 if args.quick else 10**7
    draws, tune = (500, 200) if args.quick else (2000, 500)
    ref_draws = 1000 if args.quick else 4000
    print(f"pymc {pm.__version__}, python {sys.version.split()[0]}; logistic regression, "
          f"N = {n:.0e}, d = {D}; 4 shards x ScalableMH ({tune} tune + {draws} draws); "
          f"reference: ScalableMH on all rows ({tune} tune + {ref_draws} draws)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        x_path, y_path, _ = pms.datasets.write_logistic(tmp, n, D, intercept=True,
                                                         dtype="float32")
        X, y = np.load(x_path, mmap_mode="r"), np.load(y_path, mmap_mode="r")
        print(f"data written: X {X.dtype} {X.shape} memmap in {time.perf_counter() - t0:.1f} s",
              flush=True)
        ref, ref_wall = reference(X, y, draws=ref_draws, tune=tune, seed=11)
        print(f"reference: {ref_wall:.1f} s wall (set-up included)", flush=True)
        runs = {}
        for k in (1, 2):
            runs[k] = run_consensus(X, y, k, draws=draws, tune=tune, seed=12)
            print(f"consensus_sample with {k} worker(s): {runs[k][1]:.1f} s wall", flush=True)
        del X, y

    res = runs[2][0]
    same = all(np.array_equal(group(runs[1][0], g)["beta"].values,
                              group(res, g)["beta"].values)
               for g in ("posterior", "posterior_semiparametric", "posterior_nonparametric"))
    m_ref, s_ref = ref.mean(axis=0), ref.std(axis=0, ddof=1)
    mcse = np.array([s_ref[j] / np.sqrt(ess(ref[:, j])) for j in range(D)]) / s_ref
    print(f"\nreference MCSE of the mean, in sds: {mcse.min():.3f} .. {mcse.max():.3f}")
    print(f"same draws with 1 and 2 workers: {same}")
    for name in COMBINERS:
        g = "posterior" if name == "consensus" else f"posterior_{name}"
        b = np.asarray(group(res, g)["beta"].values)[0]
        err = (b.mean(axis=0) - m_ref) / s_ref
        ratio = b.std(axis=0, ddof=1) / s_ref
        print(f"\n{name}: (mean - ref mean) / ref sd, and sd / ref sd")
        print("  coef  " + " ".join(f"{j:>6d}" for j in range(D)))
        print("  err   " + " ".join(f"{e:>6.2f}" for e in err))
        print("  ratio " + " ".join(f"{r:>6.2f}" for r in ratio))
        print(f"  max |err| = {np.abs(err).max():.2f}, sd ratio {ratio.min():.2f} .. "
              f"{ratio.max():.2f}")
    diag = group(res, "shard_diagnostics")
    print("\nper shard (2 workers):")
    for s in range(4):
        print(f"  shard {s}: rows {int(diag['n_rows'][s])}, min bulk ESS "
              f"{float(diag['ess_bulk_min'][s]):.0f}, acceptance "
              f"{float(diag['acceptance_rate'][s]):.2f}, rows/draw "
              f"{float(diag['mean_data_used'][s]):.2f}, task {float(diag['wall_time'][s]):.1f} s")
    w1, w2 = runs[1][1], runs[2][1]
    print(f"\nwall time: 1 worker {w1:.1f} s, 2 workers {w2:.1f} s, ratio 1/2 = {w1 / w2:.2f}; "
          f"full-data reference {ref_wall:.1f} s (consensus with 2 workers / reference = "
          f"{w2 / ref_wall:.2f})")


if __name__ == "__main__":
    main()
