"""Benchmark of AustereMH (issue: AustereMH step method).

A 10-feature logistic regression (no intercept, ``beta_j ~ Normal(0, 1)``) on N = 10^6
synthetic rows, generated in chunks. Sampled with ``pms.AustereMH(epsilon=eps)`` for
eps in {0, 0.01, 0.05, 0.1, 0.2} (defaults otherwise: batch 500, tuned random walk) and
with ``pm.Metropolis`` on the same model, in the same run, one chain each, through
``pm.sample``. Every run gets the same wall-time budget (``--budget``, default 90 s, counted
from the call to ``pm.sample``; a callback stops the chain): exact MH (eps = 0 and
Metropolis) costs O(N) per step, so a fixed number of draws would not be comparable.

Set-up shared by all runs, so that they differ only in the accept/reject test:

* reference: the posterior mean is taken as the MAP (``pymc_subsample.center.find_center``,
  Newton's method on all rows, on a NumPy log posterior),
  and the posterior sd from the Laplace covariance. For a logistic regression the
  posterior mean differs from the MAP by O(1/N) while the posterior sd is O(N^-1/2), so
  the reference error is ~N^-1/2 = 0.001 posterior sd at N = 10^6, far below the errors
  measured here;
* start: one draw from the Laplace approximation (so there is no burn-in to traverse);
* AustereMH: a random walk on the 10-vector with the fixed sd ``2.38 / sqrt(10) * (Laplace
  sd)`` (optimal for exact MH on a Gaussian target), ``tune=False``, as in the paper's
  experiment (fixed random-walk sd). With ``--adapt`` the step tunes its scale instead
  (``--tune`` steps, default 100, towards acceptance 0.234): under an approximate test the
  acceptance rate no longer falls with the step size as it does under exact MH, so the
  tuned scale grows and the bias with it (measured at N = 10^6: sd of the draws 5.8x the
  posterior sd at epsilon 0.05 and 29x at 0.2, against 2.2x and 5.1x with the fixed scale);
* pm.Metropolis: PyMC updates a vector variable one coordinate at a time (its
  ``elemwise_update``: 10 accept/reject decisions per draw, each a full-data log-density
  difference, i.e. 10 N rows read per draw). It tunes only every 100 steps, which it would
  not reach within the budget at N = 10^6, so it runs untuned (``tune=0``) from the
  optimal one-dimensional random-walk scale, ``2.38 * (Laplace sd)`` per coordinate.

Printed per method (post-tuning draws only): draws, mean rows read per draw
(``data_used``; 10 N for Metropolis), acceptance rate, ESS (mean over the 10 coefficients;
ArviZ's ``ess(method="mean")``), ESS per second, ESS per 10^6 rows read, the ratios of
the last two to Metropolis's, and the final risk.

Risk (the paper's Fig. 2, where it is the risk of the predictive mean): the squared error
of the running posterior-mean estimate, in units of the posterior sd, averaged over the
10 coefficients, ``R(t) = mean_j ((mean of draws up to t)_j - ref_j)^2 / sd_j^2``, against
wall time since the start of ``pm.sample`` (tuning included in the time axis, its draws
excluded from the mean). ``R = bias^2 + variance``: it falls like 1/ESS until the bias
of an approximate test dominates. The figure is saved to ``benchmarks/output/``.

Run: python benchmarks/austere.py [--quick] [--budget SECONDS] [--adapt]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from pymc_subsample.datasets import make_logistic

D = 10
EPSILONS = (0.0, 0.01, 0.05, 0.1, 0.2)
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from pymc_subsample.testing import ess, group  # noqa: E402
from models import posterior_mode  # noqa: E402


def laplace(X, y, prior_sd=1.0, chunk=200_000):
    """MAP and Laplace covariance by the package's mode search
    (:func:`pymc_subsample.center.find_center`, Newton's method), in chunks of rows."""

    def logp_hessian(b):
        lp = -0.5 * b @ b / prior_sd**2
        g = -b / prior_sd**2
        H = -np.eye(D) / prior_sd**2
        for s in range(0, len(y), chunk):
            Xc, yc = X[s : s + chunk], y[s : s + chunk]
            eta = Xc @ b
            p = 1.0 / (1.0 + np.exp(-eta))
            lp += float(np.sum(yc * eta - np.logaddexp(0.0, eta)))
            g += Xc.T @ (yc - p)
            H -= (Xc * (p * (1 - p))[:, None]).T @ Xc
        return lp, g, H

    return posterior_mode(D, logp_hessian)


def run(model, step, *, tune, budget, start, seed, max_draws, min_draws=10):
    """One chain through pm.sample, stopped by a callback after ``budget`` seconds (never
    during tuning, nor before ``min_draws`` draws). Returns draws (n, D), per-draw wall
    times, sample stats, tuning time."""
    import pymc as pm

    times = []
    t0 = time.perf_counter()

    def callback(trace, draw):
        now = time.perf_counter()
        times.append(now)
        if not draw.tuning and now - t0 > budget and len(times) >= tune + min_draws:
            raise KeyboardInterrupt

    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(
            draws=max_draws, tune=tune, step=step, chains=1, cores=1, random_seed=seed,
            initvals={"beta": start}, callback=callback, progressbar=False,
            compute_convergence_checks=False, discard_tuned_samples=True,
        )
    post = group(idata, "posterior")
    st = group(idata, "sample_stats")
    draws = np.asarray(post["beta"].values[0], dtype=float)
    n = draws.shape[0]
    t = np.asarray(times[tune : tune + n]) - t0
    t_tune = (times[tune - 1] - t0) if tune > 0 else 0.0
    return draws, t, st, t_tune


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 10^5, 4 s per method (smoke test)")
    ap.add_argument("--n", type=int, help="number of rows (default 10^6; 10^5 with --quick)")
    ap.add_argument("--budget", type=float, help="wall seconds per method (default 90; 4 with --quick)")
    ap.add_argument("--adapt", action="store_true",
                    help="let AustereMH tune its random-walk scale (default: fixed scale)")
    ap.add_argument("--tune", type=int,
                    help="AustereMH tuning steps with --adapt (default 100; 20 with --quick)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="figure path (default benchmarks/output/austere_risk[_adapt].png)")
    args = ap.parse_args()
    n = args.n or (10**5 if args.quick else 10**6)
    budget = args.budget or (4.0 if args.quick else 90.0)
    if args.adapt:
        tune = args.tune if args.tune is not None else (20 if args.quick else 100)
    else:
        tune = 0

    t_all = time.perf_counter()
    import pymc as pm

    import pymc_subsample as pms

    X, y, _ = make_logistic(n, D, seed=args.seed)
    ref, cov = laplace(X, y)
    ref_sd = np.sqrt(np.diag(cov))
    start = np.random.default_rng(args.seed + 1).multivariate_normal(ref, cov)
    s0 = 2.38 / math.sqrt(D) * ref_sd
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 1.0, shape=D)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, beta), observed=y)
    print(f"AustereMH benchmark: logistic regression, D = {D}, N = {n:,d}, "
          f"{budget:g} s per method, PyMC {pm.__version__}")
    print("AustereMH random walk: " + (f"tuned ({tune} tuning steps)" if args.adapt else
          "fixed sd 2.38/sqrt(D) x Laplace sd (as in the paper)"))
    print(f"posterior sd (Laplace) ~ {ref_sd.mean():.2e}; reference = MAP (Newton)\n")

    methods = [(f"AustereMH eps={eps:g}", eps) for eps in EPSILONS] + [("pm.Metropolis", None)]
    max_draws = int(max(2000, budget * 3000))
    results = {}
    for label, eps in methods:
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if eps is None:
                step = pm.Metropolis([beta], S=ref_sd, scaling=2.38)
                # one full-data evaluation per coordinate update
                updates = len(step.enum_dims) if step.elemwise_update else 1
            else:
                step = pms.AustereMH([beta], epsilon=eps, scaling=s0, tune=args.adapt)
        draws, t, st, t_tune = run(
            model, step, tune=0 if eps is None else tune, budget=budget, start=start,
            seed=args.seed, max_draws=max_draws,
        )
        k = draws.shape[0]
        if eps is None:
            used = np.full(k, n * updates)
        else:
            used = np.asarray(st["data_used"].values[0][:k])
        acc = float(np.mean(np.asarray(st["accepted"].values[0][:k], dtype=float)))
        e = np.array([ess(draws[:, j]) for j in range(D)])
        t_sample = float(t[-1] - t_tune)
        running = np.cumsum(draws, axis=0) / np.arange(1, k + 1)[:, None]
        risk = np.mean(((running - ref) / ref_sd) ** 2, axis=1)
        results[label] = dict(
            eps=eps, draws=k, used=float(used.mean()), acc=acc, ess=float(e.mean()),
            ess_min=float(e.min()), t_sample=t_sample, rows=float(used.sum()),
            ess_s=float(e.mean()) / t_sample, ess_rows=float(e.mean()) / (used.sum() / 1e6),
            t=t, risk=risk, bias=float(np.mean(np.abs(draws.mean(0) - ref) / ref_sd)),
            sd_ratio=float(np.mean(draws.std(0) / ref_sd)),
        )
        r = results[label]
        print(f"  done {label:<18} {k:7d} draws in {t_sample:6.1f} s (+ {t_tune:5.1f} s tuning)",
              flush=True)

    base = results["pm.Metropolis"]
    print()
    head = (f"{'method':<18} {'draws':>7} {'rows/draw':>10} {'accept':>6} {'ESS':>7} "
            f"{'ESS/s':>8} {'ESS/1e6rows':>11} {'x ESS/s':>8} {'x ESS/rows':>10} "
            f"{'|bias|/sd':>9} {'sd ratio':>8} {'risk':>9}")
    print(head)
    print("-" * len(head))
    for label, r in results.items():
        print(f"{label:<18} {r['draws']:7d} {r['used']:10.0f} {r['acc']:6.3f} {r['ess']:7.1f} "
              f"{r['ess_s']:8.3f} {r['ess_rows']:11.3f} {r['ess_s'] / base['ess_s']:8.2f} "
              f"{r['ess_rows'] / base['ess_rows']:10.2f} {r['bias']:9.3f} {r['sd_ratio']:8.2f} "
              f"{r['risk'][-1]:9.2e}")
    print("\nx ESS/s, x ESS/rows: ratio to pm.Metropolis in this run. ESS: mean over the 10 "
          "coefficients (min in the figure's legend).\n|bias|/sd: |mean of draws - MAP| / "
          "posterior sd, averaged over coefficients (includes Monte Carlo error ~ 1/sqrt(ESS)).\n"
          "sd ratio: sd of the draws / Laplace sd. risk: mean_j (running mean - MAP)^2 / sd^2 at "
          "the end.")

    out = Path(args.out or HERE / "output" / f"austere_risk{'_adapt' if args.adapt else ''}.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        print("matplotlib not installed: no figure")
    else:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for label, r in results.items():
            style = "k--" if r["eps"] is None else "-"
            ax.plot(r["t"], r["risk"], style,
                    label=f"{label} (ESS min {r['ess_min']:.0f}, {r['used']:.3g} rows/draw)")
        ax.set_yscale("log")
        ax.set_xlabel("wall-clock time since the start of pm.sample (s)")
        ax.set_ylabel("risk: mean over coefficients of\n(running posterior mean - reference)² / sd²")
        ax.set_title(f"Risk of the posterior mean against wall time, logistic regression, "
                     f"D = {D}, N = {n:,d}\n(cf. Korattikara et al. 2014, Fig. 2; {budget:g} s "
                     f"per method, one chain each; AustereMH scale "
                     f"{'tuned' if args.adapt else 'fixed'})", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out, dpi=120)
        print(f"figure: {os.path.relpath(out)}")
    print(f"total time {time.perf_counter() - t_all:.0f} s")


if __name__ == "__main__":
    main()
