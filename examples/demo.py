"""pymc-subsample demo: a logistic regression on 10^6 rows, sampled with the three
subsampling steps and with PyMC's NUTS, side by side.

Prints, per method: wall time, bulk ESS (min over parameters) per second, mean rows read
per step, R-hat, and the largest posterior-mean difference from ScalableMH (the exact
method) in posterior standard deviations. Writes a PNG summary (traces and data usage).

The approximate steps (AustereMH, BarkerMinibatch) and NUTS cost O(N)-ish per step on this
model, so each gets a fixed wall-time budget: a short pilot measures its cost per step and
the number of draws is chosen to fit (printed). They start at ScalableMH's posterior mean
(a warm start given to them for free: within their budget they could not otherwise reach
the posterior). Run: python examples/demo.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from pymc_subsample.datasets import make_logistic

HERE = Path(__file__).resolve().parent
D = 10


def build_model(X, y):
    import pymc as pm

    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=D)
        pm.Bernoulli("y", logit_p=X @ beta, observed=y)
    return model


def per_step_seconds(step, n_steps, q0):
    """Time ``n_steps`` steps of a step method outside pm.sample (pilot for the budget)."""
    from pymc.blocking import DictToArrayBijection, RaveledVars

    info = DictToArrayBijection.map({"beta": np.zeros(D)}).point_map_info
    q = RaveledVars(np.array(q0, dtype=float), info)
    step.set_rng(np.random.default_rng(123)) if hasattr(step, "set_rng") else step.setup_chain(
        np.random.default_rng(123), 0, n_steps
    )
    for _ in range(2):  # warm-up: the engine compiles its functions on first use
        q, _ = step.astep(q)
    t0 = time.perf_counter()
    for _ in range(n_steps):
        q, _ = step.astep(q)
    return (time.perf_counter() - t0) / n_steps


def run(name, model, make_step, *, budget, chains, cores, q0, fixed=None, pilot=5):
    """Sample with a step; fit tune+draws to the wall-time budget unless ``fixed``."""
    import pymc as pm

    t0 = time.perf_counter()
    with model:
        step = make_step()
    setup = time.perf_counter() - t0
    if fixed is None:
        if step is None:  # NUTS: about 10 full-data gradients per draw on this model
            dlogp = model.compile_dlogp()
            point = model.initial_point()
            dlogp(point)
            t1 = time.perf_counter()
            for _ in range(3):
                dlogp(point)
            per = 10 * (time.perf_counter() - t1) / 3
        else:
            per = per_step_seconds(step, pilot, q0)
        total = max(int(budget * min(chains, cores) / chains / per), 30)
        tune, draws = total // 3, total - total // 3
    else:
        tune, draws = fixed
    print(f"\n== {name}: set-up {setup:.1f} s, {chains} chains x ({tune} tune + {draws} draws)",
          flush=True)
    t1 = time.perf_counter()
    with model:
        kwargs = {} if step is None else {"step": step}
        if q0 is not None:  # budgeted runs start where ScalableMH found the posterior
            kwargs["initvals"] = {"beta": np.asarray(q0, dtype=float)}
        idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=cores, random_seed=2024,
                          compute_convergence_checks=False, progressbar=True, **kwargs)
    wall = time.perf_counter() - t1 + setup
    return idata, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10**6)
    ap.add_argument("--budget", type=float, default=45.0, help="seconds per budgeted method")
    ap.add_argument("--quick", action="store_true", help="10^5 rows, 15 s budgets")
    ap.add_argument("--out", default=str(HERE / "output"))
    args = ap.parse_args()
    if args.quick:
        args.rows, args.budget = 10**5, 15.0
    os.makedirs(args.out, exist_ok=True)

    import pymc as pm

    import pymc_subsample as pms
    from pymc_subsample.diagnostics import (
        convergence,
        data_usage_summary,
        get_group,
        plot_data_used,
        posterior_moments,
    )

    t_start = time.perf_counter()
    print(f"pymc {pm.__version__}, pymc_subsample {pms.__version__}: logistic regression, "
          f"N = {args.rows:,} rows, {D} coefficients", flush=True)
    X, y, _ = make_logistic(args.rows, D)
    model = build_model(X, y)
    chains, cores = 2, 2

    results = {}
    idata, wall = run("ScalableMH (exact, 2nd order)", model, lambda: pms.ScalableMH(order=2),
                      budget=None, chains=chains, cores=cores, q0=None, fixed=(1000, 2000))
    results["ScalableMH"] = (idata, wall)
    mode = results["ScalableMH"][0]
    q_mode = posterior_moments(mode)[0]
    for name, make in [
        ("AustereMH", lambda: pms.AustereMH(epsilon=0.05, batch_size=1000)),
        ("BarkerMinibatch", lambda: pms.BarkerMinibatch(batch_size=1000, batch_increment=10000)),
    ]:
        results[name] = run(name, model, make, budget=args.budget, chains=chains, cores=cores,
                            q0=q_mode)
    results["NUTS (PyMC)"] = run("NUTS (PyMC)", model, lambda: None, budget=args.budget,
                                 chains=chains, cores=cores, q0=q_mode)

    ref_mean, ref_sd, _ = posterior_moments(results["ScalableMH"][0])
    header = (f"{'method':<17}{'wall s':>9}{'ESS bulk':>10}{'ESS/s':>10}{'rows/step':>12}"
              f"{'R-hat':>8}{'max |dmean|/sd':>16}")
    lines = [header, "-" * len(header)]
    for name, (idata, wall) in results.items():
        ess, rhat = convergence(idata)
        mean, _, _ = posterior_moments(idata)
        dev = np.max(np.abs(mean - ref_mean) / ref_sd)
        try:
            used = data_usage_summary(idata).loc["all", "mean"]
        except KeyError:
            used = float(args.rows) * float(
                np.mean(get_group(idata, "sample_stats")["n_steps"].values)
            )  # NUTS: every leapfrog step reads all N rows
        lines.append(f"{name:<17}{wall:>9.1f}{ess:>10.0f}{ess / wall:>10.2f}{used:>12,.0f}"
                     f"{rhat:>8.3f}{dev:>16.3f}")
    table = "\n".join(lines)
    print("\n" + table)
    nuts_rate = (lambda e, w: e / w)(convergence(results["NUTS (PyMC)"][0])[0],
                                     results["NUTS (PyMC)"][1])
    smh_rate = (lambda e, w: e / w)(convergence(results["ScalableMH"][0])[0],
                                    results["ScalableMH"][1])
    print(f"\nScalableMH ESS/s over NUTS ESS/s: {smh_rate / nuts_rate:.0f}x "
          "(wall times include each step's set-up)")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(15, 7))
    for ax, name in zip(axes[0], ["ScalableMH", "AustereMH", "BarkerMinibatch"]):
        post = get_group(results[name][0], "posterior")["beta"].values
        for c in range(post.shape[0]):
            ax.plot(post[c, :, 0], lw=0.6)
        ax.set_title(f"{name}: trace of beta[0]")
    for ax, name in zip(axes[1], ["ScalableMH", "AustereMH", "BarkerMinibatch"]):
        plot_data_used(results[name][0], ax=ax, lw=0.6)
        ax.set_yscale("symlog")
        ax.set_title(f"{name}: rows read per step")
    fig.tight_layout()
    png = Path(args.out) / "demo_summary.png"
    fig.savefig(png, dpi=90)
    (Path(args.out) / "demo_table.txt").write_text(table + "\n")
    print(f"\nwrote {png} and {Path(args.out) / 'demo_table.txt'}; "
          f"total {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
