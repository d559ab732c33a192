"""Benchmark of the likelihood engine (issue: foundation).

For a 10-feature logistic regression, times a 100-row evaluation at two points (current
and proposed, one call) at N = 10^4, 10^6 and 10^7, and the full-data evaluation at 10^6
(also at two points, i.e. what one exact Metropolis-Hastings step costs), and prints the
ratios. Peak memory at N = 10^7 is measured in a fresh subprocess, relative to the size
of the data arrays.

Run: python benchmarks/batch_loglik.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

from pymc_subsample.datasets import make_logistic

D = 10
ROWS = 100


def build(X, y):
    import pymc as pm

    from pymc_subsample.engine import LikelihoodEngine

    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=D)
        pm.Bernoulli("y", logit_p=X @ beta, observed=y)
    return model, LikelihoodEngine(model)


def best_time(fn, repeat=7, number=None):
    if number is None:
        t0 = time.perf_counter()
        fn()
        one = time.perf_counter() - t0
        number = max(1, int(0.2 / max(one, 1e-7)))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t0) / number)
    return min(times)


def time_batch(n, seed=0):
    X, y, _ = make_logistic(n, D, seed=seed)
    _, eng = build(X, y)
    rng = np.random.default_rng(1)
    q = rng.normal(0, 0.1, eng.ndim)
    q2 = q + rng.normal(0, 0.01, eng.ndim)
    row_sets = [rng.choice(n, ROWS, replace=False) for _ in range(64)]
    k = iter(range(10**9))

    def one():
        eng.loglik_pair(q, q2, row_sets[next(k) % 64])

    return best_time(one), eng, q, q2


def peak_rss_bytes():
    """High-water mark of this process's resident memory (VmHWM; ru_maxrss where absent).

    VmHWM belongs to the address space, so a fresh subprocess starts from zero; ru_maxrss
    is inherited across fork/exec on Linux and would carry the parent's peak.
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def memory_child(n):
    """Run in a subprocess: peak RSS growth over the baseline, relative to the data size."""
    import pymc  # noqa: F401  (imports before the baseline)

    base = peak_rss_bytes()
    X, y, _ = make_logistic(n, D)
    data_bytes = X.nbytes + y.nbytes
    _, eng = build(X, y)
    rng = np.random.default_rng(2)
    q = np.zeros(eng.ndim)
    for _ in range(200):
        eng.loglik_pair(q, q + 0.01, rng.choice(n, ROWS, replace=False))
    peak = peak_rss_bytes()
    print(json.dumps({"data_bytes": data_bytes, "peak_growth": peak - base}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller N (10^4, 10^5, 10^6), for CI")
    ap.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        memory_child(args.memory_child)
        return
    sizes = [10**4, 10**5, 10**6] if args.quick else [10**4, 10**6, 10**7]
    full_n = 10**5 if args.quick else 10**6
    times = {}
    for n in sizes:
        t, eng, q, q2 = time_batch(n)
        times[n] = t
        print(f"N = {n:>10,d}: {ROWS}-row evaluation at 2 points: {t * 1e6:8.1f} us")
        if n == full_n:
            t_full = best_time(lambda: eng.full_loglik_diff(q, q2), repeat=5)
            print(f"N = {n:>10,d}: full-data evaluation at 2 points: {t_full * 1e3:8.2f} ms")
        del eng
    small, big = sizes[0], sizes[-1]
    r_growth = times[big] / times[small]
    r_full = t_full / times[full_n]
    print()
    print(f"ratio  {ROWS}-row time at N={big:.0e} / at N={small:.0e}: {r_growth:6.2f}  (goal <= 1.5)")
    print(f"ratio  full-data time / {ROWS}-row time at N={full_n:.0e}: {r_full:8.0f}  (goal >= 1000)")
    out = subprocess.run(
        [sys.executable, __file__, "--memory-child", str(big)],
        capture_output=True, text=True, check=True, env=dict(os.environ),
    )
    mem = json.loads(out.stdout.strip().splitlines()[-1])
    r_mem = mem["peak_growth"] / mem["data_bytes"]
    print(
        f"ratio  peak memory growth / data size at N={big:.0e}: {r_mem:6.2f}  (goal <= 1.5; "
        f"data {mem['data_bytes'] / 2**20:.0f} MiB, growth {mem['peak_growth'] / 2**20:.0f} MiB)"
    )
    ok = r_growth <= 1.5 and r_full >= 1000 and r_mem <= 1.5
    print("all goals met" if ok else "GOAL MISSED")


if __name__ == "__main__":
    main()
