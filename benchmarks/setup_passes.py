"""Each step's set-up in units of one plain NumPy pass over the log-likelihood.

What a step does once, when it is built (the data checks, the mode search, the control
variates' sums, ScalableMH's bound constants and row table), is counted against the
cheapest thing anyone could do with the data: one pass of plain NumPy over all rows,

    for each chunk of 2^20 rows:  eta = X[chunk] @ beta;  sum(y * eta - logaddexp(0, eta))

in one thread. The issue's goal: set-up / pass <= 10 at N = 10^6, 10^7 and 10^8 for every
step, with a warm compile cache.

Model: the demo's 10-feature logistic regression, the data written by
``pms.datasets.write_logistic`` (X float32, y int64, memory-mapped ``.npy`` files entered
through ``pms.out_of_core.rows``, as a user with tall data would). At each N, in one
process:

- ``pass``: the NumPy pass above, best of 3 (measured before and after the steps; the
  smaller is used);
- ``first``: the step's first construction in this process (PyTensor's on-disk compile
  cache warm, nothing compiled yet in the process: graph rewriting included);
- ``set-up``: the best of ``--repeat`` constructions after that (the compiled functions
  reused, ``BatchFunctions.reused``): the issue's "warm compile cache";
- ``peak``: the largest anonymous memory (``RssAnon``) of the process while the step was
  built, less what it held before (the data's pages are page cache, not counted), and
  the step's own per-row arrays (ScalableMH's ``psi_i`` and row table).

The step's passes run on the threads of ``pms.passes`` (both cores here); the NumPy
pass is one thread, as a user would write it.

Run: ``python benchmarks/setup_passes.py [--rows 1e6 1e7 1e8] [--steps ...] [--quick]``
(10^8 rows: 4.5 GB of disk in ``--dir`` or a temporary directory, about 15 minutes).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from out_of_core import Memory  # noqa: E402

STEPS = ("ScalableMH", "AustereMH", "BarkerMinibatch", "SGLD")
GIB = 2.0**30


def numpy_pass(X, y, beta, chunk=1 << 20) -> float:
    """The plain NumPy log-likelihood pass of the module docstring."""
    total = 0.0
    for s in range(0, X.shape[0], chunk):
        eta = X[s:s + chunk] @ beta
        total += float(np.sum(y[s:s + chunk] * eta - np.logaddexp(0.0, eta)))
    return total


def best_of(fn, repeat):
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def per_row_bytes(step) -> int:
    """The step's own per-row arrays (ScalableMH: psi and the row table)."""
    bounds = getattr(step, "bounds", None)
    if bounds is None:
        return 0
    table = getattr(bounds, "table", None)
    return bounds.psi.nbytes + getattr(getattr(table, "cumulative", None), "nbytes", 0)


def measure(n, steps, repeat, directory, mem):
    import pymc as pm

    import pymc_subsample as pms

    t0 = time.perf_counter()
    x_path, y_path, _ = pms.datasets.write_logistic(directory, n, 10, seed=1)
    X, y = pms.out_of_core.rows(x_path), pms.out_of_core.rows(y_path)
    print(f"N = {n:,}: data written in {time.perf_counter() - t0:.1f} s", flush=True)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 1.0, shape=10)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, beta), observed=y)
    b = np.random.default_rng(0).normal(0.0, 0.3, size=10)
    Xa, ya = np.load(x_path, mmap_mode="r"), np.load(y_path, mmap_mode="r")
    numpy_pass(Xa, ya, b)  # the files' pages into the page cache
    t_pass = best_of(lambda: numpy_pass(Xa, ya, b), 3)
    out = {"n": n, "steps": {}}
    for name in steps:
        cls = getattr(pms, name)
        gc.collect()
        mem.mark(f"{n}-{name}")
        before = mem.read()["RssAnon"]
        t0 = time.perf_counter()
        step = cls(model=model)
        first = time.perf_counter() - t0
        rows_bytes = per_row_bytes(step)
        del step
        gc.collect()
        setup = best_of(lambda: cls(model=model), repeat)
        peak = mem.peaks[f"{n}-{name}"]["RssAnon"] - before
        out["steps"][name] = {"first": first, "setup": setup, "peak": peak,
                              "per_row_arrays": rows_bytes}
        print(f"  {name}: first {first:.2f} s, set-up {setup:.2f} s", flush=True)
    t_pass = min(t_pass, best_of(lambda: numpy_pass(Xa, ya, b), 3))
    out["pass"] = t_pass
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=float, nargs="+", default=[1e6, 1e7, 1e8])
    ap.add_argument("--steps", nargs="+", default=list(STEPS), choices=STEPS)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--dir", default=None, help="where to write the data")
    ap.add_argument("--quick", action="store_true", help="10^5 rows, for a smoke run")
    args = ap.parse_args(argv)
    sizes = [100_000] if args.quick else [int(r) for r in args.rows]
    mem = Memory()
    results = []
    for n in sizes:
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            results.append(measure(n, args.steps, args.repeat, tmp, mem))
    mem.stop()
    print("\nset-up in NumPy passes (goal: <= 10 with a warm compile cache)")
    print(f"{'N':>12} {'pass s':>8} {'step':>16} {'first s':>8} {'set-up s':>9} "
          f"{'first/pass':>10} {'set-up/pass':>11} {'peak GiB':>9} {'per-row GiB':>11}")
    for r in results:
        for name, s in r["steps"].items():
            print(f"{r['n']:>12,} {r['pass']:>8.3f} {name:>16} {s['first']:>8.2f} "
                  f"{s['setup']:>9.2f} {s['first'] / r['pass']:>10.1f} "
                  f"{s['setup'] / r['pass']:>11.1f} {s['peak'] / GIB:>9.2f} "
                  f"{s['per_row_arrays'] / GIB:>11.2f}")
    out = HERE / "output" / "setup_passes.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(f"\nwritten: {out}")


if __name__ == "__main__":
    main()
