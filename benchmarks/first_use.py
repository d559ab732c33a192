"""First use of every step at N = 10^6 against the first use of the NUTS samplers.

On first use (a fresh Python process with an empty PyTensor compile cache), building a
step and running its first 3,000 iterations should take no longer than numpyro's NUTS
takes to compile (JAX's JIT) and warm up on the same model (issue "Fast against the
NUTS users would really pick"); the older goal, at most twice PyMC's NUTS's compile and
initialisation, is printed too.

Model: the 10-feature logistic regression of ``benchmarks/models.py`` at N = 10^6.
Each measurement runs in its own Python process with its own empty PyTensor compile
directory (``PYTENSOR_FLAGS=base_compiledir=...``: the C cache and, on PyTensor 3, the
Numba cache, which lives in ``base_compiledir/numba``), so nothing is cached:

* a step (``ScalableMH``, ``AustereMH``, ``BarkerMinibatch``, ``SGLD``): model build
  excluded; ``pms.<Step>()`` then ``pm.sample(tune=1000, draws=2000, chains=1)``, timed
  together;
* ``numpyro``: ``pm.sample(nuts_sampler="numpyro", tune=1000, draws=1, chains=1)``: the
  JAX translation and JIT compile, then its 1,000 warm-up iterations (about 10 full-data
  gradients each) and one draw;
* ``nuts``: PyMC's ``pm.sample(tune=0, draws=1, chains=1)`` (compilation of the logp and
  gradient, jitter+adapt_diag initialisation, one draw). On PyMC 6 with nutpie installed
  this is nutpie (PyMC 6's default NUTS); ``nuts_pymc`` is PyMC's own NUTS there;
* ``nutpie``: ``nutpie.compile_pymc_model(model)`` alone (its default back end: Numba),
  the "first compilation" that issue 45 sets as the goal for a step's whole first use.

Also printed: the same timings again in the same processes (a warm cache; for the steps,
a second construction reuses the compiled functions).

Run: OPENBLAS_NUM_THREADS=1 python benchmarks/first_use.py [--n N] [--methods ...]
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
which = {which!r}
out = []
for _ in range(2):
    with model:
        t0 = time.perf_counter()
        if which == "numpyro":
            pm.sample(tune=1000, draws=1, chains=1, nuts_sampler="numpyro", progressbar=False,
                      compute_convergence_checks=False, random_seed=1)
        elif which in ("nuts", "nuts_pymc"):
            kw = dict(nuts_sampler="pymc") if which == "nuts_pymc" else dict()
            pm.sample(tune=0, draws=1, chains=1, progressbar=False,
                      compute_convergence_checks=False, random_seed=1, **kw)
        elif which == "nutpie":
            import nutpie
            nutpie.compile_pymc_model(model)
        else:
            step = getattr(pms, which)()
            pm.sample(tune=1000, draws=2000, chains=1, step=step, progressbar=False,
                      compute_convergence_checks=False, random_seed=1)
        out.append(time.perf_counter() - t0)
print("RESULT", json.dumps(out))
"""


def measure(which, n):
    with tempfile.TemporaryDirectory() as d:
        # base_compiledir, not compiledir: PyTensor 3 keeps its Numba cache in
        # base_compiledir/numba, which a new compiledir alone leaves warm
        env = dict(os.environ, PYTENSOR_FLAGS=f"base_compiledir={d}", OPENBLAS_NUM_THREADS="1")
        proc = subprocess.run([sys.executable, "-c", CHILD.format(here=str(HERE), n=n,
                                                                   which=which)],
                              env=env, capture_output=True, text=True, check=True)
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1]
    return json.loads(line.split(" ", 1)[1])


def main():
    import importlib.util

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10**6)
    ap.add_argument("--methods", nargs="+", default=[
        "numpyro", "nutpie", "nuts", "nuts_pymc", "ScalableMH", "AustereMH", "BarkerMinibatch",
        "SGLD"])
    args = ap.parse_args()
    import pymc

    for name in ("numpyro", "nutpie"):
        if name in args.methods and importlib.util.find_spec(name) is None:
            print(f"{name} is not installed (pip install 'pymc-subsample[bench]'): skipped")
            args.methods.remove(name)
    pymc6 = int(pymc.__version__.split(".")[0]) >= 6
    if "nuts_pymc" in args.methods and not pymc6:
        args.methods.remove("nuts_pymc")        # PyMC 5's default NUTS is PyMC's own
    times = {m: measure(m, args.n) for m in args.methods}
    print(f"N = {args.n:,}, logistic regression, d = 10, empty compile cache per process, "
          f"PyMC {pymc.__version__}")
    default = ("nutpie: PyMC 6 default" if pymc6 and importlib.util.find_spec("nutpie")
               else "PyMC's own")
    labels = {"numpyro": "numpyro NUTS JIT + 1,000 warm-up (+1 draw)",
              "nuts": f"pm.sample() NUTS ({default}) compile + init (+1 draw)",
              "nuts_pymc": "PyMC's own NUTS compile + initialise (+1 draw)",
              "nutpie": "nutpie compile_pymc_model (Numba)"}
    for m, (first, warm) in times.items():
        label = labels.get(m, f"{m} build + 3,000 iterations")
        print(f"  {label:<60} first {first:6.1f} s, warm {warm:6.1f} s")
    for m, (first, _) in times.items():
        if m in labels:
            continue
        if "nutpie" in times:
            ref = times["nutpie"][0]
            print(f"  {m}: first use / nutpie's first compilation = {first / ref:.2f} "
                  f"(goal <= 1): {'met' if first <= ref else 'NOT met'}")
        if m == "ScalableMH":
            print(f"  {m}: first use {first:.1f} s (goal <= 10 s): "
                  f"{'met' if first <= 10 else 'NOT met'}")
        if "numpyro" in times:
            ref = times["numpyro"][0]
            print(f"  {m}: first use / numpyro's first use = {first / ref:.2f} (goal <= 1): "
                  f"{'met' if first <= ref else 'NOT met'}")
        if "nuts" in times:
            ref = times["nuts"][0]
            print(f"  {m}: first use / pm.sample() NUTS's compile + initialise = "
                  f"{first / ref:.2f} (goal <= 2): {'met' if first <= 2 * ref else 'NOT met'}")


if __name__ == "__main__":
    main()
