"""Set-up passes of models outside the GLM predictor shortcuts, on 1 and 2 threads.

The set-up passes of logistic-type GLMs run in NumPy (``benchmarks/out_of_core.py``
measures them). Other models' passes call the engine's compiled PyTensor functions on
chunks of rows, each worker thread through its own copy of the function; a function
whose graph holds a ``Scan`` (PyTensor's Hessian by rows) is called by one thread at a
time, because copies share the Scan's inner function. Measured here, in one run, with
``pms.passes.configure(num_workers=1)`` and ``num_workers=2``:

- a curved regression ``y ~ Normal(a exp(b x), 0.5)`` (not a GLM): one full-data
  gradient pass and one Hessian pass of the engine (the mode search's passes);
- a Gamma regression with unknown shape: the whole ScalableMH set-up (mode search,
  control-variate sums, bound constants by region; the alias table is serial).

Each timing is the best of ``--repeat`` runs, alternating 1 and 2 threads, after a
warm-up that compiles everything. Printed: the times and the ratio 1 thread / 2 threads.

Run: ``python benchmarks/compiled_passes.py [--rows 2e6] [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402


def models(n, seed=4):
    import pymc as pm

    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    with pm.Model() as curved:
        a = pm.Normal("a", 0.0, 2.0)
        b = pm.Normal("b", 0.0, 1.0)
        pm.Normal("y", a * pm.math.exp(b * x), 0.5,
                  observed=0.5 * np.exp(0.3 * x) + rng.normal(0.0, 0.5, n))
    X = rng.normal(size=(n, 2))
    eta = X @ np.array([0.3, -0.5])
    with pm.Model() as gamma:
        beta = pm.Normal("beta", 0.0, 1.0, shape=2)
        shape = pm.HalfNormal("shape", 3.0)
        pm.Gamma("y", alpha=shape, beta=shape / pm.math.exp(pm.math.dot(X, beta)),
                 observed=rng.gamma(2.5, np.exp(eta) / 2.5))
    return curved, gamma


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=float, default=2e6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="2 x 10^5 rows, 2 repeats")
    args = ap.parse_args()
    n = 200_000 if args.quick else int(args.rows)
    repeat = 2 if args.quick else args.repeat
    import pymc as pm

    import pymc_subsample as pms

    curved, gamma = models(n)
    eng = pms.LikelihoodEngine(curved)
    q = eng.initial_q()
    tasks = {
        "curved: gradient pass": lambda: eng.full_loglik_grad(q),
        "curved: Hessian pass (Scan: one thread at a time)": lambda: eng.full_loglik_hessian(q),
        "Gamma: ScalableMH set-up": lambda: pms.ScalableMH(model=gamma, progressbar=False),
    }
    for fn in tasks.values():  # warm-up: compiles (and caches) every function
        fn()
    best = {(name, k): np.inf for name in tasks for k in (1, 2)}
    for r in range(repeat):
        for k in ((1, 2) if r % 2 == 0 else (2, 1)):
            with pms.passes.configure(num_workers=k):
                for name, fn in tasks.items():
                    t0 = time.perf_counter()
                    fn()
                    best[name, k] = min(best[name, k], time.perf_counter() - t0)
    print(f"pymc {pm.__version__}; N = {n:,} rows; best of {repeat} runs\n")
    print("| pass | 1 thread | 2 threads | ratio |")
    print("|---|---|---|---|")
    for name in tasks:
        t1, t2 = best[name, 1], best[name, 2]
        print(f"| {name} | {t1:.2f} s | {t2:.2f} s | {t1 / t2:.2f} |")


if __name__ == "__main__":
    main()
