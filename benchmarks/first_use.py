"""First use of ScalableMH at N = 10^6 against NUTS's compile-and-initialise time.

The ScalableMH issue asks: on first use (an empty PyTensor compile cache), building
``pms.ScalableMH()`` and running its first 3,000 iterations should take at most twice
the time PyMC's NUTS needs to compile and initialise on the same model.

Model: the 10-feature logistic regression of ``benchmarks/models.py`` at N = 10^6.
Each measurement runs in its own Python process with its own empty PyTensor compile
directory (``PYTENSOR_FLAGS=compiledir=...``), so nothing is cached:

* ScalableMH: model build excluded; ``pms.ScalableMH()`` then ``pm.sample(tune=1000,
  draws=2000, chains=1)``, timed together;
* NUTS: ``pm.sample(tune=0, draws=1, chains=1)`` (compilation of the logp and gradient,
  jitter+adapt_diag initialisation, one draw), timed.

Also printed: the same two timings again in the same processes (a warm cache).

Run: OPENBLAS_NUM_THREADS=1 python benchmarks/first_use.py [--n N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, sys, time, warnings, logging
sys.path.insert(0, {here!r})
import numpy as np, pymc as pm
import pymc_subsample as pms
import models as M
logging.getLogger("pymc").setLevel(logging.ERROR)
warnings.simplefilter("ignore")
model, _, _ = M.logistic_model({n})
out = []
for _ in range(2):
    with model:
        t0 = time.perf_counter()
        if {which!r} == "smh":
            step = pms.ScalableMH()
            pm.sample(tune=1000, draws=2000, chains=1, step=step, progressbar=False,
                      compute_convergence_checks=False, random_seed=1)
        else:
            pm.sample(tune=0, draws=1, chains=1, progressbar=False,
                      compute_convergence_checks=False, random_seed=1)
        out.append(time.perf_counter() - t0)
print("RESULT", json.dumps(out))
"""


def measure(which, n):
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, PYTENSOR_FLAGS=f"compiledir={d}", OPENBLAS_NUM_THREADS="1")
        proc = subprocess.run([sys.executable, "-c", CHILD.format(here=str(HERE), n=n,
                                                                   which=which)],
                              env=env, capture_output=True, text=True, check=True)
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1]
    return json.loads(line.split(" ", 1)[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10**6)
    args = ap.parse_args()
    nuts = measure("nuts", args.n)
    smh = measure("smh", args.n)
    print(f"N = {args.n:,}, logistic regression, d = 10, empty compile cache per process")
    print(f"  NUTS compile + initialise (+1 draw): first {nuts[0]:.1f} s, warm {nuts[1]:.1f} s")
    print(f"  ScalableMH build + 3,000 iterations: first {smh[0]:.1f} s, warm {smh[1]:.1f} s")
    print(f"  first-use ratio ScalableMH / NUTS: {smh[0] / nuts[0]:.2f} (goal <= 2): "
          f"{'met' if smh[0] <= 2 * nuts[0] else 'NOT met'}")


if __name__ == "__main__":
    main()
