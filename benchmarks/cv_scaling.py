"""Scaling in N of AustereMH and BarkerMinibatch with their default Taylor control variates.

The 10-feature logistic regression of ``benchmarks/models.py`` (``logistic_model``: no
intercept, ``x_i ~ N(0, I_10)``, ``beta_j ~ Normal(0, 1)``,
``y_i ~ Bernoulli(logit_p = x_i . beta)``; rows from
:func:`pymc_subsample.datasets.make_logistic`, so a smaller N is a prefix of a larger one)
at N = 10^4, 10^5, 10^6 and 10^7. At every N, ``pms.AustereMH()`` and
``pms.BarkerMinibatch()`` are built with their DEFAULT arguments (second-order control
variates about the posterior mode found by Newton's method on all rows,
:func:`pymc_subsample.center.find_center`; Laplace-preconditioned pCN proposal) and run
through ``pm.sample(draws=2000, tune=1000, chains=1, cores=1, progressbar=False,
compute_convergence_checks=False)``. ``pms.ScalableMH()`` (exact: its chain targets the
posterior) is run with the same draws at the same N as the reference. At N = 10^4 and
10^5 only, the plain tests (``control_variate=0``: random walk on plain log-likelihood
differences, the papers' tests) are run too, to show what the control variates change.

Reported per N and step:

* ``setup s``: wall seconds to construct the step (engine, compiled functions, mode
  search, proposal set-up; for ScalableMH also the bound constants and alias table);
* ``s/step``: the seconds of PyMC's draw loop (``sampling_time``, the figure of PyMC's
  "Sampling ... took X seconds" line, stored in the posterior's attributes) divided by
  ``tune + draws``: the marginal cost of a step, PyMC's per-draw work included;
* ``wall``: wall seconds of the whole ``pm.sample`` call divided by ``tune + draws``
  (everything ``pm.sample`` does, including its one-off start-up: step assignment builds
  the model's logp graph and the conversion copies the observed data, both O(N) once per
  call), and the same in CPU seconds of this process (``cpu``);
* a decomposition of the sampling wall time, from wrapping the instance's ``astep``:
  ``astep ms``, the mean milliseconds per step inside ``astep`` (the step's own work),
  without the first call; ``1st s``, that first call (it compiles the engine's batch
  function, lazily: graph rewriting is not cached, so this is paid at every N); and
  ``other s``, the rest of ``pm.sample`` (step assignment, which builds the model's logp
  graph, trace set-up, the conversion to InferenceData with the observed data):
  ``s/step * (tune + draws) = other + 1st + astep * (tune + draws - 1)``;
* ``rows/step``: mean ``data_used`` over the draws (tuning excluded), and as a share of N;
* ``acc``: acceptance rate over the draws;
* ``ESS``: minimum bulk ESS over the 10 coefficients (ArviZ,
  :func:`pymc_subsample.diagnostics.convergence`);
* ``err/sd``: ``max_j |mean_j - mean_j(ScalableMH)| / sd_j(ScalableMH)``, with ``mc``
  the Monte Carlo noise scale of that difference, ``sqrt(1/ESS + 1/ESS_SMH)`` (min ESS of
  each; the max over 10 coefficients of pure noise is typically about 2 ``mc``).

Then the two ratios the issue asks for, per step method: (N = 10^7 row) / (N = 10^4 row)
of rows per step and of seconds per step (the draw loop's; goal: <= 1.5 for both), with
the whole-call wall, CPU-time and ``astep``-only ratios and the change in ``other s`` as
diagnostics. The whole-call wall ratio also carries ``pm.sample``'s O(N) start-up, a
fixed cost per call (about 1 s at 10^7 rows, whatever the number of draws) that is
PyMC's, paid by NUTS too, and not a cost per step. Before any timing, each step is run once on 1,000
rows so that PyTensor's compilation cache is warm for every N (otherwise the first N
would carry the C compilation and flatter the ratios).

Output: the table (stdout and ``benchmarks/output/cv_scaling.csv``) and a log-log figure
of rows per step and seconds per step against N (``benchmarks/output/cv_scaling.png``).

Run: OPENBLAS_NUM_THREADS=1 python benchmarks/cv_scaling.py [--quick]
     (--quick: N = 10^4 and 10^5, tune 200 + draws 400)
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time
import warnings
from pathlib import Path

# One BLAS thread (as benchmarks/scalable.py): multithreaded BLAS spins on a small shared
# machine and makes the full-data passes of the set-up much slower. Must precede numpy.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))

import models as M  # noqa: E402

OUT = HERE / "output"
FULL_NS = (10**4, 10**5, 10**6, 10**7)
QUICK_NS = (10**4, 10**5)
PLAIN_NS = (10**4, 10**5)
GOAL = 1.5

# (label, class name, keyword arguments): the measured steps, then the plain tests
STEPS = (("AustereMH", "AustereMH", {}), ("BarkerMinibatch", "BarkerMinibatch", {}))
PLAIN = (("AustereMH cv=0", "AustereMH", {"control_variate": 0}),
         ("Barker cv=0", "BarkerMinibatch", {"control_variate": 0}))
REF = ("ScalableMH", "ScalableMH", {})


class Timer:
    """Wall, CPU (user + system) and system seconds of this process."""

    def __enter__(self):
        self.w0, self.c0, self.s0 = time.perf_counter(), time.process_time(), os.times().system
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.w0
        self.cpu = time.process_time() - self.c0
        self.sys = os.times().system - self.s0


def time_astep(step):
    """Wrap the instance's ``astep`` to record the wall time of every call (pm.sample calls
    ``step.step`` -> ``self.astep`` on this very object: it does not copy it)."""
    times = []
    inner = step.astep

    def astep(q0):
        t0 = time.perf_counter()
        try:
            return inner(q0)
        finally:
            times.append(time.perf_counter() - t0)

    step.astep = astep
    return times


def run(model, n, label, cls_name, kwargs, *, tune, draws, seed):
    import pymc as pm

    import pymc_subsample as pms
    from pymc_subsample.diagnostics import (
        convergence,
        data_usage_summary,
        get_group,
        posterior_moments,
    )

    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Timer() as t_setup:
            step = getattr(pms, cls_name)(**kwargs)
        times = time_astep(step)
        with Timer() as t_run:
            idata = pm.sample(
                draws=draws, tune=tune, step=step, chains=1, cores=1, random_seed=seed,
                progressbar=False, compute_convergence_checks=False,
            )
        ess = convergence(idata, ["beta"])[0]
    loop = float(get_group(idata, "posterior").attrs.get("sampling_time", math.nan))
    usage = data_usage_summary(idata, n_rows=n).loc["all"]
    mean, sd, _ = posterior_moments(idata, ["beta"])
    steps = tune + draws
    times = np.asarray(times)
    return {
        "n": n, "step": label, "setup_wall": t_setup.wall, "setup_cpu": t_setup.cpu,
        "sample_wall": t_run.wall, "sample_cpu": t_run.cpu, "sample_sys": t_run.sys,
        "s_per_step": loop / steps, "wall_per_step": t_run.wall / steps,
        "cpu_per_step": t_run.cpu / steps,
        # the first call compiles the engine's batch function (lazily): reported apart
        "first_s": float(times[0]), "astep_ms": 1e3 * float(times[1:].mean()),
        "astep_p99_ms": 1e3 * float(np.quantile(times[1:], 0.99)),
        "other_s": t_run.wall - float(times.sum()),
        "rows": float(usage["mean"]), "frac": float(usage["mean_fraction"]),
        "accept": float(usage["accept_rate"]), "ess": float(ess),
        "mean": mean, "sd": sd, "err": math.nan, "mc": math.nan,
    }


def compare(r, ref):
    r["err"] = float(np.max(np.abs(r["mean"] - ref["mean"]) / ref["sd"]))
    r["mc"] = math.sqrt(1.0 / r["ess"] + 1.0 / ref["ess"])


HEADER = (f"{'N':>9} | {'step':<16} | {'setup s':>7} | {'s/step':>8} {'wall':>8} {'cpu':>8} | "
          f"{'astep ms':>8} {'1st s':>5} {'other s':>7} | {'rows/step':>10} {'rows/N':>8} | "
          f"{'acc':>5} | {'ESS':>6} | {'err/sd':>6} {'mc':>5}")


def fmt(r):
    err = "     -" if math.isnan(r["err"]) else f"{r['err']:6.3f}"
    mc = "    -" if math.isnan(r["mc"]) else f"{r['mc']:5.3f}"
    return (f"{r['n']:>9} | {r['step']:<16} | {r['setup_wall']:7.2f} | {r['s_per_step']:8.5f} "
            f"{r['wall_per_step']:8.5f} {r['cpu_per_step']:8.5f} | {r['astep_ms']:8.3f} "
            f"{r['first_s']:5.2f} "
            f"{r['other_s']:7.2f} | {r['rows']:10.1f} {r['frac']:8.2e} | {r['accept']:5.3f} | "
            f"{r['ess']:6.0f} | {err} {mc}")


def warm_up(seed):
    """Run every step once on 1,000 rows (fills PyTensor's compilation cache)."""
    model, _, _ = M.logistic_model(1000)
    for label, cls_name, kw in STEPS + PLAIN + (REF,):
        run(model, 1000, label, cls_name, kw, tune=20, draws=20, seed=seed)


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"AustereMH": ("o-", "C0"), "BarkerMinibatch": ("s-", "C1"),
              "ScalableMH": ("^--", "C2"), "AustereMH cv=0": ("o:", "C0"),
              "Barker cv=0": ("s:", "C1")}
    ns_all = sorted({r["n"] for r in rows})
    for label, (mk, color) in styles.items():
        sel = sorted((r for r in rows if r["step"] == label), key=lambda r: r["n"])
        if not sel:
            continue
        ns = [r["n"] for r in sel]
        open_ = {"mfc": "none"} if ":" in mk else {}
        ax1.loglog(ns, [r["rows"] for r in sel], mk, color=color, label=label, **open_)
        ax2.loglog(ns, [r["s_per_step"] for r in sel], mk, color=color, label=label, **open_)
        if label in ("AustereMH", "BarkerMinibatch"):
            ax2.loglog(ns, [1e-3 * r["astep_ms"] for r in sel], mk[0] + "-.", color=color,
                       alpha=0.5, label=f"{label} (inside astep)")
    ax1.loglog(ns_all, ns_all, "k--", lw=0.8, label="N (exact MH)")
    ax1.set_xlabel("N")
    ax1.set_ylabel("mean rows read per step (draws)")
    ax1.set_title("Rows per step")
    ax1.legend(fontsize=8)
    ax2.set_xlabel("N")
    ax2.set_ylabel("wall seconds per step (pm.sample / (tune + draws))")
    ax2.set_title("Seconds per step")
    ax2.legend(fontsize=7, loc="upper left")
    fig.suptitle("Logistic regression, d = 10: default control variates")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_csv(rows, path):
    keys = ["n", "step", "setup_wall", "setup_cpu", "sample_wall", "sample_cpu", "sample_sys",
            "s_per_step", "wall_per_step", "cpu_per_step", "astep_ms", "astep_p99_ms", "first_s", "other_s",
            "rows", "frac", "accept", "ess", "err", "mc"]
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(keys)
        for r in rows:
            w.writerow([r[k] for k in keys])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: N = 10^4 and 10^5, tune 200 + draws 400")
    ap.add_argument("--out", default=str(OUT), help="directory for the figure and table")
    args = ap.parse_args()

    import logging

    import arviz
    import pymc as pm

    logging.getLogger("pymc").setLevel(logging.ERROR)
    # one chain: ArviZ warns "shape validation failed" (its logger is not the registered one)
    getattr(arviz, "_log", logging.getLogger("arviz")).setLevel(logging.ERROR)
    ns = QUICK_NS if args.quick else FULL_NS
    tune, draws = (200, 400) if args.quick else (1000, 2000)
    t_start = time.perf_counter()
    print(f"pymc {pm.__version__}, python {sys.version.split()[0]}; d = 10; "
          f"N = {', '.join(f'{n:.0e}' for n in ns)}; tune {tune} + draws {draws}, 1 chain"
          + (" (quick)" if args.quick else ""), flush=True)
    with Timer() as t_warm:
        warm_up(seed=7)
    print(f"warm-up on 1,000 rows: {t_warm.wall:.1f} s\n", flush=True)

    print(HEADER)
    print("-" * len(HEADER), flush=True)
    rows = []
    for n in ns:
        k = int(round(math.log10(n)))
        with Timer() as t_data:
            model, _, _ = M.logistic_model(n)
        ref = run(model, n, *REF, tune=tune, draws=draws, seed=100 * k)
        rows.append(ref)
        print(fmt(ref), flush=True)
        todo = STEPS + (PLAIN if n in PLAIN_NS else ())
        for j, (label, cls_name, kw) in enumerate(todo, start=1):
            r = run(model, n, label, cls_name, kw, tune=tune, draws=draws, seed=100 * k + j)
            compare(r, ref)
            rows.append(r)
            print(fmt(r), flush=True)
        print(f"{'':>9} | (data + model: {t_data.wall:.2f} s)", flush=True)
        del model

    def get(n, label):
        return next(r for r in rows if r["n"] == n and r["step"] == label)

    lo, hi = ns[0], ns[-1]
    print(f"\nRatios ({hi:.0e} row) / ({lo:.0e} row); goal <= {GOAL} for rows/step and "
          "s/step (PyMC's draw loop):")
    verdicts = []
    for label, _, _ in STEPS:
        a, b = get(lo, label), get(hi, label)
        r_rows = b["rows"] / a["rows"]
        r_loop = b["s_per_step"] / a["s_per_step"]
        r_wall = b["wall_per_step"] / a["wall_per_step"]
        r_cpu = b["cpu_per_step"] / a["cpu_per_step"]
        r_astep = b["astep_ms"] / a["astep_ms"]
        ok_rows, ok_loop = r_rows <= GOAL, r_loop <= GOAL
        verdicts += [ok_rows, ok_loop]
        print(f"  {label:<16} rows/step {r_rows:6.3f} ({'met' if ok_rows else 'NOT met'})   "
              f"s/step {r_loop:6.3f} ({'met' if ok_loop else 'NOT met'})   "
              f"[whole call {r_wall:.3f}, cpu {r_cpu:.3f}, astep only {r_astep:.3f}, "
              f"other s {a['other_s']:.2f} -> {b['other_s']:.2f}, "
              f"setup {b['setup_wall'] / a['setup_wall']:.1f}x]")
    print("\nWhat the control variates change (rows/step, plain / default):")
    for n in PLAIN_NS:
        if n not in ns:
            continue
        for (label, _, _), (plabel, _, _) in zip(STEPS, PLAIN):
            cv, pl = get(n, label), get(n, plabel)
            print(f"  N = {n:.0e} {label:<16} {pl['rows']:10.1f} / {cv['rows']:8.1f} = "
                  f"{pl['rows'] / cv['rows']:7.1f}x   (s/step {pl['s_per_step']:.5f} / "
                  f"{cv['s_per_step']:.5f}; err/sd {pl['err']:.3f} / {cv['err']:.3f})")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = "_quick" if args.quick else ""
    png, tab = out / f"cv_scaling{suffix}.png", out / f"cv_scaling{suffix}.csv"
    plot(rows, png)
    write_csv(rows, tab)
    print(f"\nall goals {'met' if all(verdicts) else 'NOT met'}; "
          f"total {time.perf_counter() - t_start:.0f} s")
    print(f"figure: {png}\ntable:  {tab}")


if __name__ == "__main__":
    main()
