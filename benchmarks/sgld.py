"""SGLD's defaults on the 10-feature logistic regression, against exact references.

Model: the logistic regression of ``benchmarks/models.py`` (``x_i ~ N(0, I_10)``,
``beta_j ~ Normal(0, 1)``) at N = 10^5 and 10^6, with its exact reference (self-normalised
importance sampling from a multivariate t at the mode, with Monte Carlo errors; cached).

Runs, each 2 chains of 500 tuning + 2,000 kept draws (``steps_per_draw`` 10 by default, so
20,000 transitions per chain), from the step's default start (a Laplace draw):

* ``pms.SGLD()`` (Taylor control variates, batch 100, h = 0.2 in the Laplace
  covariance's units) at both N;
* at N = 10^5 also each other estimator with the same defaults: ``saga``, ``is_saga``,
  ``is`` and ``minibatch`` (the last two show El hanchi's failure of plain SGLD: their
  noise ratio is far above 1 and the spread far too wide);
* ``mh-cv`` at both N: the MH-corrected variant, ``AustereMH(proposal=Langevin(
  gradient="cv", precondition=True))`` (one draw per transition; exact up to the
  Austerity test's error), to show what the correction costs.

Printed per run: largest |mean error| in reference sds and the smallest and largest sd
ratio (draws / reference), the stated bias (sd ratio ``sqrt(1 / (1 - h/4))`` from the
discretisation alone), the mean ``noise_ratio`` (Welling & Teh's alpha), rows per
transition and per draw, set-up and sampling seconds, minimum bulk ESS and ESS/s. The
goals of the SGLD issue: max |mean error| <= 0.1 sd, sd within 10%, <= 1,000 rows per step.
ESS/s beside ScalableMH and NUTS on the same model: ``benchmarks/compare.py
logistic-1e6 --methods SGLD,ScalableMH,NUTS``.

Run: OPENBLAS_NUM_THREADS=1 python benchmarks/sgld.py [--quick]
     (--quick: N = 10^5 only, the control-variate default and plain minibatch)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
if str(HERE.parent) not in sys.path:
    sys.path.insert(1, str(HERE.parent))

import models as M  # noqa: E402


def make_step(gradient):
    """``pms.SGLD(gradient=...)``; ``"mh-<estimator>"``: the MH-corrected variant,
    AustereMH with a preconditioned ``Langevin(gradient=<estimator>)`` proposal."""
    import pymc_subsample as pms

    if gradient.startswith("mh-"):
        return pms.AustereMH(proposal=pms.proposals.Langevin(gradient=gradient[3:],
                                                              precondition=True))
    return pms.SGLD(gradient=gradient)


def run(name, gradient, *, tune, draws, seed=1):
    import pymc as pm

    from pymc_subsample.diagnostics import convergence, get_group, posterior_moments

    model, ref = M.build(name)
    t0 = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = make_step(gradient)
    setup = time.perf_counter() - t0
    t1 = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(draws=draws, tune=tune, chains=2, cores=1, step=step,
                          random_seed=seed, progressbar=False, compute_convergence_checks=False)
    wall = time.perf_counter() - t1
    ess, rhat = convergence(idata)
    mean, sd, labels = posterior_moments(idata)
    idx = ref.index(labels)
    err = np.abs(mean - ref.mean[idx]) / ref.sd[idx]
    ratio = sd / ref.sd[idx]
    stats = get_group(idata, "sample_stats")
    rows_draw = float(stats["data_used"].mean())
    sgld = not gradient.startswith("mh-")
    return {
        "model": name, "gradient": gradient, "N": ref.n_rows,
        "stated sd ratio": math.sqrt(step.variance_inflation()) if sgld else 1.0,
        "max err/sd": float(err.max()), "sd ratio min": float(ratio.min()),
        "sd ratio max": float(ratio.max()),
        "noise": float(stats["noise_ratio"].mean()) if sgld else math.nan,
        "rows/transition": rows_draw / step.steps_per_draw, "rows/draw": rows_draw,
        "setup s": setup, "sample s": wall, "ESS": ess, "ESS/s": ess / wall, "R-hat": rhat,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    tune, draws = (200, 800) if args.quick else (500, 2000)
    if args.quick:
        plan = [("logistic-1e5", g) for g in ("cv", "minibatch")]
    else:
        plan = ([("logistic-1e5", g) for g in ("cv", "saga", "is_saga", "is", "minibatch",
                                                "mh-cv")]
                + [("logistic-1e6", "cv"), ("logistic-1e6", "mh-cv")])
    t_all = time.perf_counter()
    rows = []
    for name, gradient in plan:
        r = run(name, gradient, tune=tune, draws=draws)
        rows.append(r)
        print(f"{name:<13} {gradient:<9} err {r['max err/sd']:.3f} sd "
              f"[{r['sd ratio min']:.3f}, {r['sd ratio max']:.3f}] (stated "
              f"{r['stated sd ratio']:.3f}) noise {r['noise']:.3g} rows/transition "
              f"{r['rows/transition']:.0f} rows/draw {r['rows/draw']:.0f} setup "
              f"{r['setup s']:.1f} s sample {r['sample s']:.1f} s ESS {r['ESS']:.0f} "
              f"ESS/s {r['ESS/s']:.1f} R-hat {r['R-hat']:.3f}", flush=True)
    print("\n| model | gradient | max err/sd | sd ratio (min, max) | stated sd ratio | noise "
          "ratio | rows/transition | rows/draw | set-up s | sample s | ESS | ESS/s | R-hat |")
    print("|" + "---|" * 13)
    for r in rows:
        print(f"| {r['model']} | {r['gradient']} | {r['max err/sd']:.3f} | "
              f"{r['sd ratio min']:.3f}, {r['sd ratio max']:.3f} | {r['stated sd ratio']:.3f} "
              f"| {r['noise']:.3g} | {r['rows/transition']:.0f} | {r['rows/draw']:.0f} | "
              f"{r['setup s']:.1f} | {r['sample s']:.1f} | {r['ESS']:.0f} | {r['ESS/s']:.1f} "
              f"| {r['R-hat']:.3f} |")
    print("\nGoals (defaults, gradient='cv'): max |mean error| <= 0.1 sd, sd within 10%, "
          "<= 1,000 rows per step")
    for r in rows:
        if r["gradient"] != "cv":
            continue
        ok = (r["max err/sd"] <= 0.1 and 0.9 <= r["sd ratio min"] and r["sd ratio max"] <= 1.1
              and r["rows/draw"] <= 1000)
        print(f"  {r['model']}: {'met' if ok else 'NOT met'}")
    print(f"wall time {time.perf_counter() - t_all:.0f} s")


if __name__ == "__main__":
    main()
