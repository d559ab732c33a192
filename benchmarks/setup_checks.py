"""What the construction-time checks of the data add to a step's set-up (issue 25).

Every step checks its data once when it is built: a pass over all rows that refuses NaN
or infinite covariates and rows whose log-likelihood is not finite at the initial point,
and compares a few rows' terms in that pass with the same rows alone (a likelihood that
couples the rows is refused); plus the factorisation check on a few small batches,
whose cost does not grow with N.

Measured here in one run, on the demo's model (a 10-feature logistic regression, data
memory-mapped from ``pms.datasets.write_logistic``, float32), at each N:

- ``pass``: one chunked pass over all rows of the engine's compiled log-likelihood
  (``engine.full_loglik``), the unit the issue counts set-up costs in;
- ``check``: the data check (``engine.check_rows``) and the factorisation check;
- ``set-up``: ``pms.ScalableMH()`` and ``pms.AustereMH()`` built from scratch (engine,
  checks, mode search, control variates, bounds).

Printed: the checks' cost in passes (``check / pass``), the whole time they add to
building an engine, their function's compile included, in passes (``added / pass``:
``LikelihoodEngine(model)`` less ``LikelihoodEngine(model, check=False)``), and that added
time's share of each step's set-up. Each timing is the best of ``--repeat`` runs after a warm-up that
compiles everything.

Run: ``python benchmarks/setup_checks.py [--rows 1e6 1e7] [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402


def best_of(fn, repeat):
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(n, d, repeat, directory):
    import pymc as pm

    import pymc_subsample as pms
    from pymc_subsample.engine.analysis import check_factorises

    x_path, y_path, _ = pms.datasets.write_logistic(directory, n, d, seed=1)
    X, y = pms.out_of_core.rows(x_path), pms.out_of_core.rows(y_path)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 1.0, shape=d)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, beta), observed=y)
    eng = pms.LikelihoodEngine(model)  # compiles the check's function
    q = eng.initial_q()
    names = ["y"]

    def checks():
        eng.check_rows(q)
        check_factorises(eng.loglik, eng.n_rows, q, names)

    eng.full_loglik(q)  # warm-up: compile
    t_pass = best_of(lambda: eng.full_loglik(q), repeat)
    t_check = best_of(checks, repeat)
    # the whole cost the checks add to building an engine (their function's compile,
    # from PyTensor's warm cache, included)
    added = (best_of(lambda: pms.LikelihoodEngine(model), repeat)
             - best_of(lambda: pms.LikelihoodEngine(model, check=False), repeat))
    out = {"n": n, "pass": t_pass, "check": t_check, "added": added}
    for step in (pms.ScalableMH, pms.AustereMH):
        step(model=model, progressbar=False)  # warm-up: the compile cache
        out[step.__name__] = best_of(lambda: step(model=model, progressbar=False), repeat)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=float, nargs="+", default=[1e6, 1e7])
    ap.add_argument("--features", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="10^5 rows, 2 repeats")
    args = ap.parse_args()
    sizes = [100_000] if args.quick else [int(r) for r in args.rows]
    repeat = 2 if args.quick else args.repeat
    print(f"{'N':>12} {'pass s':>8} {'check s':>8} {'check/pass':>10} {'added/pass':>10} "
          f"{'ScalableMH s':>12} {'share':>6} {'AustereMH s':>11} {'share':>6}")
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            r = measure(n, args.features, repeat, tmp)
        print(f"{r['n']:>12,} {r['pass']:>8.3f} {r['check']:>8.3f} "
              f"{r['check'] / r['pass']:>10.2f} {r['added'] / r['pass']:>10.2f} "
              f"{r['ScalableMH']:>12.2f} {r['added'] / r['ScalableMH']:>6.1%} "
              f"{r['AustereMH']:>11.2f} {r['added'] / r['AustereMH']:>6.1%}")


if __name__ == "__main__":
    main()
