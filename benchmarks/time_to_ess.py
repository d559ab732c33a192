"""Time to 1,000 effective draws at N = 10^6: ScalableMH against PyMC's NUTS.

The ScalableMH issue's measure (warm compile cache, set-up included):

* ScalableMH: one chain of ``pms.ScalableMH()`` (order 2, defaults) on the 10-feature
  logistic regression of ``benchmarks/models.py`` at N = 10^6, 1,000 tuning + 2,000
  kept draws. Time to 1,000 ESS = construction + tuning + the kept draws' time scaled
  to 1,000 ESS (``sampling time x 1000 / min bulk ESS``, ArviZ). A first construction
  warms the compile cache and is not counted.
* NUTS at N = 10^6 would take hours, so it is priced: its gradient evaluations per ESS
  are counted where it is cheap (the same model at N = 10^4, one chain of 1,000 tuning
  + 2,000 draws: ``n_steps`` summed over tuning, and over the kept draws divided by
  their min bulk ESS), and each is priced at the measured time of one full-data logp
  and gradient at N = 10^6 (PyMC's compiled ``logp_dlogp_function``, median of 10). NUTS's
  time to 1,000 ESS = (tuning steps + 1000 x steps per ESS) x that time; its compile and
  initialisation are left out, which favours NUTS.

Printed: both times and their ratio (goal: >= 300).

Run: OPENBLAS_NUM_THREADS=1 python benchmarks/time_to_ess.py
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import models as M  # noqa: E402


def _min_ess(idata):
    import arviz as az

    from pymc_subsample.diagnostics import get_group

    beta = get_group(idata, "posterior")[["beta"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(az.ess(beta, method="bulk")["beta"].min())


def grad_time(model, reps=10):
    """Median wall time of one full-data logp + gradient (one compiled PyMC function)."""
    f = model.compile_fn([model.logp(), model.dlogp()], point_fn=True)
    point = model.initial_point()
    f(point)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f(point)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def main():
    import logging

    import pymc as pm

    import pymc_subsample as pms
    from pymc_subsample.diagnostics import get_group

    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    big, _, _ = M.logistic_model(10**6)
    with big:
        pms.ScalableMH()  # warm the compile cache
        t0 = time.perf_counter()
        step = pms.ScalableMH()
        setup = time.perf_counter() - t0
        idata = pm.sample(tune=1000, draws=2000, chains=1, step=step, progressbar=False,
                          compute_convergence_checks=False, random_seed=1,
                          discard_tuned_samples=False)
    ss = get_group(idata, "sample_stats")
    total = float(ss.attrs.get("sampling_time", np.nan))
    # tuning and draws cost the same per step for ScalableMH: split the time by steps
    draw_time = total * 2000 / 3000
    tune_time = total - draw_time
    ess = _min_ess(idata)
    t_smh = setup + tune_time + draw_time * 1000.0 / ess
    print(f"ScalableMH at N = 10^6: set-up {setup:.1f} s, sampling {total:.1f} s for 3,000 "
          f"steps, min bulk ESS {ess:.0f} from 2,000 draws -> {t_smh:.1f} s to 1,000 ESS",
          flush=True)

    small, _, _ = M.logistic_model(10**4)
    with small:
        nuts = pm.sample(tune=1000, draws=2000, chains=1, progressbar=False,
                         compute_convergence_checks=False, random_seed=2,
                         discard_tuned_samples=False)
    ws = get_group(nuts, "warmup_sample_stats")
    ns = get_group(nuts, "sample_stats")
    tune_steps = float(np.asarray(ws["n_steps"].values).sum())
    draw_steps = float(np.asarray(ns["n_steps"].values).sum())
    nuts_ess = _min_ess(nuts)
    per_ess = draw_steps / nuts_ess
    g = grad_time(big)
    t_nuts = (tune_steps + 1000.0 * per_ess) * g
    print(f"NUTS (counted at N = 10^4): {tune_steps:.0f} tuning gradient steps, "
          f"{per_ess:.1f} steps per ESS; logp+gradient at N = 10^6: {1e3 * g:.1f} ms "
          f"-> {t_nuts:.0f} s to 1,000 ESS")
    print(f"time-to-1,000-ESS ratio NUTS / ScalableMH: {t_nuts / t_smh:.0f}x (goal >= 300): "
          f"{'met' if t_nuts / t_smh >= 300 else 'NOT met'}")


if __name__ == "__main__":
    main()
