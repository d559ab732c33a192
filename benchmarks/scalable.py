"""Benchmark of ScalableMH (Cornish et al. 2019, Figs. 1 and 2) on logistic regression.

Synthetic logistic regression with d = 10 coefficients (an intercept column and nine
standard-normal covariates), N = 2^10 ... 2^20 rows, generated in chunks (the data for a
smaller N is a prefix of the data for a larger one). For every N:

* Fig. 1: mean rows read per step (``data_used``, over the draws after tuning) of
  ScalableMH with first- and second-order control variates, against exact MH (N rows).
* Fig. 2 (at N = 2^10, 2^12, ..., 2^20): effective sample size per second (minimum over
  the 10 coefficients, one chain) of ScalableMH (order 1 and 2), ``pm.Metropolis`` and
  ``pm.NUTS`` on the same model in the same run.

Accounting. ScalableMH's set-up (building the step: likelihood engine, mode search by
L-BFGS on the full data, one pass for the gradient/Hessian sums and the bound constants,
plus a 20-step warm-up run that compiles the per-row functions) is timed separately; its
ESS/s is given for the sampling (tuning + draws) alone and with the set-up included. NUTS
is timed from the construction of ``pm.NUTS`` (compilation) to the end of ``pm.sample``
(tuning + draws). NUTS and Metropolis start at ScalableMH's ``theta_hat`` (the MAP, a
warm start given to them for free) and Metropolis uses the Laplace standard deviations as
its proposal scale, which favours them. Times are wall-clock (``perf_counter``) and, since
the machine may be shared, CPU time of this process (``process_time``); the ratios at
N = 2^20 (~1.05e6) are printed for both.

Run: python benchmarks/scalable.py [--quick]   (PNGs in benchmarks/output/)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

# One BLAS thread for every sampler: on a small shared machine, multithreaded BLAS spins
# and makes a full-data pass up to 10x slower (measured: 17 ms vs 1.2 ms for a NumPy
# logp + gradient at N = 2^16, d = 10, on a loaded 2-core box). Must precede numpy.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from pymc_subsample.datasets import make_logistic  # noqa: E402

from pymc_subsample.testing import ess, group  # noqa: E402

D = 10
CHUNK = 1 << 16
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "output")


# ---------------------------------------------------------------------- data and model


def build_model(X, y):
    import pymc as pm

    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 10.0, shape=D)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, beta), observed=y)
    return model


# ---------------------------------------------------------------------- helpers


class Timer:
    def __enter__(self):
        self.w0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.w0
        self.cpu = time.process_time() - self.c0


def min_ess(idata):
    """The smallest ESS of the coefficients' one chain (0 for a constant chain)."""
    beta = np.asarray(group(idata, "posterior")["beta"].values)  # (1, draws, D)
    return float(min(ess(beta[0, :, j], constant=0.0) for j in range(beta.shape[-1])))


def sample(model, step, *, draws, tune, seed, initvals=None, **kw):
    import pymc as pm

    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pm.sample(
            draws=draws, tune=tune, step=step, chains=1, cores=1, random_seed=seed,
            progressbar=False, compute_convergence_checks=False, initvals=initvals, **kw,
        )


# ---------------------------------------------------------------------- runs


def run_smh(model, order, *, draws, tune, seed):
    import pymc_subsample as pms

    with Timer() as t_setup:
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            step = pms.ScalableMH(order=order)
        init = {"beta": step.theta_hat.copy()}
        sample(model, step, draws=10, tune=10, seed=seed + 1, initvals=init)  # warm-up
    with Timer() as t_run:
        idata = sample(model, step, draws=draws, tune=tune, seed=seed, initvals=init)
    ss = group(idata, "sample_stats")
    return {
        "data_used": float(np.asarray(ss["data_used"].values).mean()),
        "rate": float(np.asarray(ss["poisson_rate"].values).mean()),
        "fallback": float(np.asarray(ss["fallback"].values).mean()),
        "accept": float(np.asarray(ss["accepted"].values).mean()),
        "ess": min_ess(idata),
        "setup_wall": t_setup.wall, "setup_cpu": t_setup.cpu,
        "wall": t_run.wall, "cpu": t_run.cpu,
        # Laplace standard deviations (sqrt diag H^-1 at theta_hat), from the proposal's factor
        "theta_hat": step.theta_hat, "sd": step.proposal._factor.sd.copy(),
        "draws": draws, "tune": tune,
    }


def run_metropolis(model, init, sd, *, draws, tune, seed):
    import pymc as pm

    with Timer() as t:
        with model:
            step = pm.Metropolis([model["beta"]], S=sd)
        idata = sample(model, step, draws=draws, tune=tune, seed=seed, initvals=init)
    ss = group(idata, "sample_stats")
    return {"ess": min_ess(idata), "wall": t.wall, "cpu": t.cpu,
            "accept": float(np.asarray(ss["accepted"].values).mean()), "draws": draws, "tune": tune}


def run_nuts(model, init, *, draws, tune, seed):
    import pymc as pm

    with Timer() as t:
        with model:
            step = pm.NUTS([model["beta"]])
        idata = sample(model, step, draws=draws, tune=tune, seed=seed, initvals=init,
                       init="adapt_diag")
    ss = group(idata, "sample_stats")
    return {"ess": min_ess(idata), "wall": t.wall, "cpu": t.cpu,
            "grads": float(np.asarray(ss["n_steps"].values).mean()), "draws": draws, "tune": tune}


def budget(kind, n, quick):
    """(tune, draws) per sampler and N: full-data samplers get fewer draws at large N."""
    if quick:
        return {"smh2": (100, 300), "smh1": (100, 400), "metropolis": (100, 300),
                "nuts": (100, 100)}[kind]
    if kind == "smh2":
        return 300, 1500
    if kind == "smh1":
        return 500, 3000
    if kind == "metropolis":
        return (500, 2500) if n <= 2**16 else (300, 1200) if n <= 2**18 else (200, 1000)
    # NUTS: ~5 gradient evaluations per draw at ~20-40 ms each at N = 2^20
    return (500, 1000) if n <= 2**14 else (300, 500) if n <= 2**18 else (150, 250)


def plot(rows, fig2_rows, outdir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(outdir, exist_ok=True)

    def save(fig, ax, ylabel, name):
        """Label, lay out, save and close one figure; returns its path."""
        ax.set_xlabel("N")
        ax.set_ylabel(ylabel)
        ax.set_title(f"Logistic regression, d = {D}")
        ax.legend()
        fig.tight_layout()
        path = os.path.join(outdir, name)
        fig.savefig(path, dpi=120)
        plt.close(fig)
        return path

    ns = np.array([r["n"] for r in rows], dtype=float)
    fig, ax = plt.subplots(figsize=(5.5, 4))
    ax.loglog(ns, ns, "k--", label="MH (N rows)")
    ax.loglog(ns, [r["smh1"]["data_used"] for r in rows], "o-", label="SMH-1")
    ax.loglog(ns, [r["smh2"]["data_used"] for r in rows], "s-", label="SMH-2")
    ref = rows[0]["smh2"]["data_used"] * np.sqrt(ns[0] / ns)
    ax.loglog(ns, ref, ":", color="grey", label=r"$\propto N^{-1/2}$")
    p1 = save(fig, ax, "mean rows read per step", "scalable_fig1_data_used.png")

    fig, ax = plt.subplots(figsize=(5.5, 4))
    ns2 = np.array([r["n"] for r in fig2_rows], dtype=float)
    for key, label, mk in (("smh1", "SMH-1", "o-"), ("smh2", "SMH-2", "s-"),
                           ("metropolis", "pm.Metropolis", "^-"), ("nuts", "pm.NUTS", "v-")):
        ax.loglog(ns2, [r[key]["ess"] / r[key]["wall"] for r in fig2_rows], mk, label=label)
    p2 = save(fig, ax, "min ESS / s (sampling, wall clock)", "scalable_fig2_ess_per_second.png")
    return p1, p2


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: N = 2^10 and 2^13 (< 1 min)")
    ap.add_argument("--out", default=OUT, help="directory for the PNGs")
    args = ap.parse_args()

    import logging

    import pymc as pm

    logging.getLogger("pymc").setLevel(logging.ERROR)
    if args.quick:
        logn_fig1, logn_fig2 = [10, 13], [13]
    else:
        logn_fig1, logn_fig2 = list(range(10, 21)), [10, 12, 14, 16, 18, 20]
    n_max = 2 ** max(logn_fig1)
    print(f"pymc {pm.__version__}, python {sys.version.split()[0]}; d = {D}; "
          f"N = 2^{logn_fig1[0]} ... 2^{logn_fig1[-1]}" + (" (quick)" if args.quick else ""))
    with Timer() as t_data:
        X_all, y_all, _ = make_logistic(n_max, D, intercept=True)
    print(f"data: {n_max} rows generated in {t_data.wall:.1f} s\n", flush=True)

    hdr = (f"{'N':>9} | {'rows/step SMH-1':>15} {'SMH-2':>8} {'MH':>9} | "
           f"{'rate SMH-2':>10} {'acc-1':>5} {'acc-2':>5} | "
           f"{'setup s (SMH-1, SMH-2)':>22}")
    print("Fig. 1: mean rows read per step")
    print(hdr)
    rows, fig2_rows = [], []
    for k in logn_fig1:
        n = 2**k
        X, y = X_all[:n], y_all[:n]
        model = build_model(X, y)
        r = {"n": n}
        for order in (1, 2):
            tune, draws = budget(f"smh{order}", n, args.quick)
            r[f"smh{order}"] = run_smh(model, order, draws=draws, tune=tune, seed=1000 + k)
        s1, s2 = r["smh1"], r["smh2"]
        print(f"{n:>9} | {s1['data_used']:>15.2f} {s2['data_used']:>8.3f} {n:>9} | "
              f"{s2['rate']:>10.3f} {s1['accept']:>5.2f} {s2['accept']:>5.2f} | "
              f"{s1['setup_wall']:>10.1f} {s2['setup_wall']:>10.1f}", flush=True)
        if k in logn_fig2:
            init = {"beta": s2["theta_hat"].copy()}
            sd = s2["sd"]
            tune, draws = budget("metropolis", n, args.quick)
            r["metropolis"] = run_metropolis(model, init, sd, draws=draws, tune=tune, seed=2000 + k)
            tune, draws = budget("nuts", n, args.quick)
            r["nuts"] = run_nuts(model, init, draws=draws, tune=tune, seed=3000 + k)
            fig2_rows.append(r)
        rows.append(r)
        del model

    print("\nFig. 2: min ESS over the 10 coefficients per second "
          "(sampling = tuning + draws; SMH set-up separate)")
    print(f"{'N':>9} | {'sampler':>13} | {'tune+draws':>10} | {'ESS':>7} | {'wall s':>7} "
          f"{'cpu s':>7} | {'ESS/s wall':>10} {'ESS/s cpu':>10} | {'+setup wall':>11} {'+setup cpu':>10}")
    for r in fig2_rows:
        for key, label in (("smh1", "ScalableMH-1"), ("smh2", "ScalableMH-2"),
                           ("metropolis", "pm.Metropolis"), ("nuts", "pm.NUTS")):
            v = r[key]
            extra = ""
            if key.startswith("smh"):
                extra = (f" | {v['ess'] / (v['wall'] + v['setup_wall']):>11.2f} "
                         f"{v['ess'] / (v['cpu'] + v['setup_cpu']):>10.2f}")
            print(f"{r['n']:>9} | {label:>13} | {v['tune']:>4}+{v['draws']:<5} | {v['ess']:>7.0f} | "
                  f"{v['wall']:>7.1f} {v['cpu']:>7.1f} | {v['ess'] / v['wall']:>10.2f} "
                  f"{v['ess'] / v['cpu']:>10.2f}{extra}")
        print(f"{'':>9} | NUTS: {r['nuts']['grads']:.1f} gradient evaluations per draw; "
              f"Metropolis acceptance {r['metropolis']['accept']:.2f}")

    big = fig2_rows[-1]
    n = big["n"]
    nuts = big["nuts"]
    print(f"\nAt N = {n} ({n:.3g}) rows:")
    for key, label in (("smh2", "ScalableMH (order 2)"), ("smh1", "ScalableMH (order 1)")):
        v = big[key]
        for clock, t, ts in (("wall", "wall", "setup_wall"), ("cpu", "cpu", "setup_cpu")):
            r1 = (v["ess"] / v[t]) / (nuts["ess"] / nuts[t])
            r2 = (v["ess"] / (v[t] + v[ts])) / (nuts["ess"] / nuts[t])
            print(f"  {label} ESS/s / NUTS ESS/s [{clock}]: {r1:8.1f}x sampling only, "
                  f"{r2:8.1f}x with set-up ({v[ts]:.1f} s set-up, NUTS total {nuts[t]:.1f} s)")
    goal = (big["smh2"]["ess"] / big["smh2"]["wall"]) / (nuts["ess"] / nuts["wall"])
    print(f"  goal >= 100x (order 2, sampling, wall): {'met' if goal >= 100 else 'NOT met'}")
    p1, p2 = plot(rows, fig2_rows, args.out)
    print(f"\nfigures: {p1}\n         {p2}")


if __name__ == "__main__":
    main()
