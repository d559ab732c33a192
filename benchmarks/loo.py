"""Time and memory of ``pms.loo`` on a logistic regression with its rows on disk.

A logistic regression with N rows (default 10^7) and 10 float32 features is written by
``pms.datasets.write_logistic`` into ``.npy`` files and opened as memory maps
(``pms.out_of_core.rows``). ScalableMH samples it (2 chains x ``--draws`` draws after 500
tuning steps); then ``pms.loo(idata, observations=1000)`` runs. Measured:

- the wall time of ``pms.loo`` and of its parts (the ``plpd`` pass over all rows, the
  subsample's log-likelihood at every draw, everything else: set-up, PSIS, estimator);
- the process's anonymous memory (``RssAnon``, sampled every 50 ms by the ``Memory``
  recorder of ``benchmarks/out_of_core.py``): the peak during ``pms.loo`` against the
  peak of the sampling phase (step set-up + ``pm.sample``). Goal: at most 0.5 GB above
  the sampling's peak, and under a minute on 2 cores at N = 10^7.
- the estimate's subsampling SE and the Pareto k of the subsample (no exact reference
  at this size: tests/workflow/test_loo.py checks the estimator against exact PSIS-LOO).

With ``--compare``, three nested models (the true one with all 10 features, and the
first 5 and first 2 features only) are sampled on the same rows (default N = 10^6) and
ranked by ``az.compare`` of their ``pms.loo`` results (same seed, so the same rows).

Usage: ``python benchmarks/loo.py [--rows 1e7] [--quick] [--compare] [--dir DIR]
[--draws 1000]`` (``--quick``: N = 10^5, under a minute).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from out_of_core import Memory  # noqa: E402  (the RssAnon recorder of that benchmark)

D = 10
GB = 1e9


def _report(lines, name, scratch):
    """Print the report, write it to ``output/<name>.md`` and remove the scratch data
    directory (``scratch``: False when the user chose the directory)."""
    text = "\n".join(lines)
    print(text)
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "output")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, name.replace("+", "") + ".md"), "w") as fh:
        fh.write(text + "\n")
    if scratch:
        shutil.rmtree(scratch)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=float, default=1e7)
    ap.add_argument("--quick", action="store_true", help="10^5 rows")
    ap.add_argument("--dir", default=None, help="where to write the data (default: a temp dir)")
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--observations", type=int, default=1000)
    ap.add_argument("--compare", action="store_true",
                    help="rank three nested models with az.compare (N = 10^6 by default)")
    args = ap.parse_args(argv)
    if args.compare:
        return compare(int(1e5 if args.quick else (args.rows if "--rows" in (argv or sys.argv)
                                                    else 1e6)), args)
    n = int(1e5 if args.quick else args.rows)

    mem = Memory()
    import pymc as pm

    import pymc_subsample as pms
    from pymc_subsample.workflow.loglik import PosteriorLoglik

    directory = args.dir or tempfile.mkdtemp(prefix="pms-loo-")
    os.makedirs(directory, exist_ok=True)
    mem.mark("write data")
    t0 = time.perf_counter()
    x_path, y_path, _ = pms.datasets.write_logistic(directory, n, D, dtype="float32")
    t_write = time.perf_counter() - t0

    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Bernoulli("y", logit_p=pm.math.dot(pms.out_of_core.rows(x_path), beta),
                     observed=pms.out_of_core.rows(y_path, dtype="int64"))

    gc.collect()
    mem.mark("sampling (set-up + pm.sample)")
    t0 = time.perf_counter()
    with model:
        step = pms.ScalableMH(progressbar=False)
        idata = pm.sample(draws=args.draws, tune=500, chains=2, cores=1, step=step,
                          random_seed=2026, progressbar=False, compute_convergence_checks=False)
    t_sample = time.perf_counter() - t0
    del step
    gc.collect()

    # time the parts of pms.loo (wrappers that only time the calls)
    spent = {"at_point_all_rows": 0.0, "at_rows": 0.0}
    originals = {k: getattr(PosteriorLoglik, k) for k in spent}

    def timing(key):
        fn = originals[key]

        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[key] += time.perf_counter() - t
        return wrapper

    for key in spent:
        setattr(PosteriorLoglik, key, timing(key))
    mem.mark("pms.loo")
    t0 = time.perf_counter()
    res = pms.loo(idata, model, observations=args.observations, seed=1)
    t_loo = time.perf_counter() - t0
    mem.mark("end")
    mem.stop()
    for key, fn in originals.items():
        setattr(PosteriorLoglik, key, fn)

    sampling_peak = mem.peaks["sampling (set-up + pm.sample)"]["RssAnon"]
    loo_peak = mem.peaks["pms.loo"]["RssAnon"]
    over = loo_peak - sampling_peak
    loo_start = mem.start_of["pms.loo"]["RssAnon"]
    elpd = float(res["elpd_loo"] if hasattr(res, "index") else res.elpd)  # ArviZ 0.x / 1.x
    k = np.asarray(res["pareto_k"])
    lines = [f"# pms.loo on N = {n:,} memory-mapped rows (10 float32 features, logistic)", "",
             f"- data written in {t_write:.0f} s; sampling (ScalableMH set-up + 2 x "
             f"{args.draws} draws + 500 tuning) {t_sample:.1f} s",
             f"- pms.loo(observations={args.observations}): {t_loo:.1f} s, of which the plpd "
             f"pass over all rows {spent['at_point_all_rows']:.1f} s, the subsample at "
             f"{2 * args.draws} draws {spent['at_rows']:.1f} s, the rest (set-up, compile, "
             f"PSIS, estimator, result) "
             f"{t_loo - spent['at_point_all_rows'] - spent['at_rows']:.1f} s",
             f"- peak RssAnon: sampling {sampling_peak / GB:.3f} GB, pms.loo "
             f"{loo_peak / GB:.3f} GB: {over / GB:+.3f} GB over the sampling's peak "
             f"(goal <= 0.5 GB: {'met' if over <= 0.5 * GB else 'NOT met'})",
             f"- RssAnon when pms.loo started {loo_start / GB:.3f} GB: its own growth "
             f"{(loo_peak - loo_start) / GB:+.3f} GB (the ScalableMH step's per-row arrays, "
             "part of the sampling's peak, were released before it)",
             f"- time goal (< 60 s at 10^7): {'met' if t_loo < 60 else 'NOT met'}",
             f"- elpd_loo {elpd:.1f}, se {float(res['se']):.1f}, subsampling SE "
             f"{float(res['subsampling_se']):.2f}; Pareto k of the subsample: max "
             f"{k.max():.3f}", "",
             "| phase | peak RssAnon GB | peak RssFile GB |", "|---|---|---|"]
    for phase, peak in mem.peaks.items():
        if phase == "start":
            continue
        lines.append(f"| {phase} | {peak['RssAnon'] / GB:.3f} | {peak['RssFile'] / GB:.3f} |")
    _report(lines, f"loo-{n:.0e}", args.dir is None and directory)
    return 0 if over <= 0.5 * GB else 1


def compare(n, args):
    """Three nested models on the same memory-mapped rows, ranked by ``az.compare``."""
    import warnings

    import arviz as az
    import pymc as pm

    import pymc_subsample as pms

    directory = args.dir or tempfile.mkdtemp(prefix="pms-loo-")
    os.makedirs(directory, exist_ok=True)
    x_path, y_path, beta = pms.datasets.write_logistic(directory, n, D, dtype="float32")
    y = pms.out_of_core.rows(y_path, dtype="int64")
    x_mapped = np.load(x_path, mmap_mode="r")
    results, lines = {}, [f"# az.compare of three nested models, N = {n:,} rows on disk", "",
                          f"true coefficients: {np.round(beta, 2).tolist()}", ""]
    for k in (D, 5, 2):
        with pm.Model() as model:
            b = pm.Normal("beta", 0.0, 1.0, shape=k)
            # the first k columns as their own rows constant (a column slice of the
            # model's X, X[:, :k], trips ScalableMH's predictor analysis)
            X = pms.out_of_core.rows(x_mapped if k == D else
                                     np.ascontiguousarray(x_mapped[:, :k]))
            pm.Bernoulli("y", logit_p=pm.math.dot(X, b), observed=y)
            t0 = time.perf_counter()
            idata = pm.sample(draws=args.draws, tune=500, chains=2, cores=1,
                              step=pms.ScalableMH(progressbar=False), random_seed=2026,
                              progressbar=False, compute_convergence_checks=False)
            t_sample = time.perf_counter() - t0
        t0 = time.perf_counter()
        results[f"{k} features"] = res = pms.loo(idata, model,
                                                 observations=args.observations, seed=1)
        lines.append(f"- {k} features: sampled in {t_sample:.1f} s, pms.loo "
                     f"{time.perf_counter() - t0:.1f} s, subsampling SE "
                     f"{float(res['subsampling_se']):.2f}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = az.compare(results)
    first = table.index[0]
    lines += ["", table.to_string(), "",
              f"- ranked first: {first} "
              f"({'the true model' if first == f'{D} features' else 'NOT the true model'})"]
    _report(lines, f"loo-compare-{n:.0e}", args.dir is None and directory)
    return 0 if first == f"{D} features" else 1


if __name__ == "__main__":
    sys.exit(main())
