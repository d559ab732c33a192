"""Time per NUTS gradient (leapfrog step) of numpyro on the hierarchical benchmark model,
for projecting its time to 1,000 ESS to an N where a full run is too long.

The projection (issue "Fast against the NUTS users would really pick"): numpyro's
gradients per ESS measured on a smaller N of the same data-generating model (the full run
of ``benchmarks/hierarchical.py``), times its own time per gradient at the full N measured
here. It assumes that the gradients per ESS do not fall as N grows (the posterior gets
narrower, the funnel of the non-centred form does not go away); it is a projection, and
is printed as one.

Run: python benchmarks/numpyro_gradient_time.py [--n-rows 100000 1000000] [--groups 200]
     [--draws 30]   (one chain, ``draws`` tuning + ``draws`` kept draws per N)
"""

from __future__ import annotations

import argparse
import os
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import numpy as np  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-rows", type=int, nargs="+", default=[10**5, 10**6])
    ap.add_argument("--groups", type=int, default=200)
    ap.add_argument("--draws", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    import pymc as pm

    from pymc_subsample.testing import hierarchical_data, hierarchical_model, sample_stats

    for n in args.n_rows:
        data = hierarchical_data(n, args.groups, seed=args.seed)
        with hierarchical_model(data, centred=False):
            t0 = time.perf_counter()
            idata = pm.sample(draws=args.draws, tune=args.draws, chains=1,
                              nuts_sampler="numpyro", random_seed=1, progressbar=False,
                              nuts_sampler_kwargs={"chain_method": "sequential"})
            wall = time.perf_counter() - t0
        ss = sample_stats(idata)
        sampling = float(ss.attrs.get("sampling_time", wall))
        steps = float(np.sum(ss["n_steps"].values)) * 2  # tuning draws cost as much
        print(f"N = {n:,}: {steps:,.0f} leapfrog steps (kept draws x 2) in {sampling:.1f} s "
              f"of sampling -> {1e3 * sampling / steps:.2f} ms per gradient "
              f"({wall:.1f} s wall with compilation)", flush=True)


if __name__ == "__main__":
    main()
