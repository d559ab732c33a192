"""Side-by-side comparison of the three subsampling steps with PyMC's Metropolis and NUTS.

    python benchmarks/compare.py MODEL [--quick] [--cap SECONDS] [--init {map,default}]
                                       [--adapt-cov] [--methods A,B,...]

``MODEL`` is one of ``logistic-1e4 logistic-1e5 logistic-1e6 robust hierarchical
linear-1e5 sblrc-blr kidiq earnings nes1980`` or ``all`` (every model but
``linear-1e5``); the models and their reference posteriors are described in
``benchmarks/models.py``. All methods run on the same model in one process, one after
the other, each with 2 chains sampled sequentially in one process (``cores=1``); times
are wall-clock seconds of that process (on a shared machine they include waiting for a
CPU, so compare methods within one table rather than across runs).

Methods (package defaults, as the README documents them):

- ``AustereMH(epsilon=0.05, batch_size=500)``
- ``BarkerMinibatch(batch_size=100, delta=0.01, temperature=1.0)``
- ``ScalableMH(order=2, bounds="auto")`` -- exact, but ``bounds="auto"`` only knows GLMs
  with a fixed scale: on the Normal regressions with unknown ``sigma`` it raises a
  ``ValueError``, reported in the table as ``not applicable: ...``
- ``SGLD()`` -- stochastic gradient Langevin with Taylor control variates (batch 100,
  10 transitions per draw; approximate, no MH test)
- ``pm.Metropolis()`` (PyMC's default: one component at a time for vector variables)
- ``pm.NUTS()``

With ``--adapt-cov`` AustereMH and BarkerMinibatch use the adaptive full-covariance
random walk (``proposal_kwargs={"adapt_covariance": True}``) instead of the default
diagonal one: on the strongly correlated posteriordb posteriors the diagonal random walk
reaches only a handful of effective draws.

Budget (documented choice). Per method: ``tune``/``draws`` per chain =

============================  ============  ============
method                        full          ``--quick``
============================  ============  ============
subsampling steps, Metropolis  2000 / 5000   500 / 1000
NUTS                           1000 / 1000   300 / 300
============================  ============  ============

capped so that the estimated sampling time stays under ``--cap`` seconds (default 30,
``--quick`` 10): the cost of one step is measured by a pilot started at the reference
posterior mean (tuning on; a few untimed warm-up steps, then up to 150 steps or
``cap / 5`` seconds; NUTS: the time of one gradient of the full log posterior times
10 leapfrog steps per iteration), and ``tune`` and ``draws`` are scaled down by the same
factor, to no fewer than 200 each (NUTS: 100). If even that floor
is estimated to take more than 3 x ``--cap``, the method is skipped ("over budget").
Set-up and compilation are timed but not capped.

Start: every chain of every method starts at the MAP (``pm.find_MAP``, computed once per
model and not counted), so the table compares sampling efficiency at stationarity; with
``--init default`` chains start at PyMC's initial point, and on tall data the random
walks then spend a short budget travelling to the posterior (tens to hundreds of
posterior sds away). With the default cap ``all`` takes
about 20-30 minutes on one free core (the first run also computes the cached references
of the synthetic models, a few minutes).

Columns: ``tune``/``draws`` actually used; ``setup s`` (step construction and the pilot's
warm-up steps: compilation, and for ScalableMH the mode search and the pass over the
data); ``sample s``; ``ESS``
(minimum bulk ESS over all parameter components, ArviZ); ``ESS/s`` (ESS per second of
sampling, tuning included); ``ESS/s incl. setup`` (per second of set-up plus sampling:
counts ScalableMH's O(N) set-up, but also compilation, which dominates on small data);
``ESS/1e6 rows`` (ESS per million data rows touched during tuning and
sampling: for the subsampling steps the sum of ``data_used``; for Metropolis ``N`` per
evaluation of the log posterior, which PyMC's Metropolis does once per vector component
per draw; for NUTS ``N`` per leapfrog step, from ``n_steps``; ScalableMH's set-up passes
are not counted); ``R-hat`` (maximum); ``max err/sd`` (the largest
``|posterior mean - reference mean| / reference sd`` over components); ``rows/step``
(mean rows read per draw after tuning, as ``ESS/1e6 rows`` counts them).

Writes ``benchmarks/output/compare-<MODEL>[-quick][-cold].md`` and ``.csv`` and prints the
table.
"""

from __future__ import annotations

import argparse
import copy
import csv
import os
import sys
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))

import models as M  # noqa: E402

METHODS = ["AustereMH", "BarkerMinibatch", "ScalableMH", "SGLD", "Metropolis", "NUTS"]
ALL = ["logistic-1e4", "logistic-1e5", "logistic-1e6", "robust", "hierarchical",
       "sblrc-blr", "kidiq", "earnings", "nes1980"]
BUDGET = {  # (tune, draws) per chain
    "full": {"step": (2000, 5000), "NUTS": (1000, 1000)},
    "quick": {"step": (500, 1000), "NUTS": (300, 300)},
}
FLOOR = {"step": 200, "NUTS": 100}
CHAINS = 2
NUTS_LEAPFROG_GUESS = 10
COLUMNS = ["model", "N", "method", "status", "tune", "draws", "setup s", "sample s", "ESS",
           "ESS/s", "ESS/s incl. setup", "ESS/1e6 rows", "R-hat", "max err/sd", "rows/step"]


def make_step(method, model, adapt_cov=False):
    import pymc as pm

    import pymc_subsample as pms

    extra = {"proposal_kwargs": {"adapt_covariance": True}} if adapt_cov else {}
    with model:
        if method == "AustereMH":
            return pms.AustereMH(epsilon=0.05, batch_size=500, **extra)
        if method == "BarkerMinibatch":
            return pms.BarkerMinibatch(batch_size=100, delta=0.01, temperature=1.0, **extra)
        if method == "ScalableMH":
            return pms.ScalableMH(order=2, bounds="auto")
        if method == "SGLD":
            return pms.SGLD()
        if method == "Metropolis":
            return pm.Metropolis()
        if method == "NUTS":
            return pm.NUTS()
    raise KeyError(method)


def shorten(msg, width=110):
    msg = " ".join(str(msg).split())
    for sep in (". ", "; "):
        if sep in msg[:width]:
            msg = msg[: msg.index(sep, 0, width)].rstrip(".;") + "."
            break
    return msg if len(msg) <= width else msg[: width - 3] + "..."


def reference_point(model, ref):
    """A model point (value variables) at the reference posterior mean."""
    import pytensor.tensor as pt

    point = model.initial_point()
    pos = {lab: i for i, lab in enumerate(ref.labels)}
    for rv in model.free_RVs:
        value_var = model.rvs_to_values[rv]
        shape = np.shape(point[value_var.name])
        if shape == ():
            val = np.array(ref.mean[pos[rv.name]])
        else:
            val = np.array([ref.mean[pos[f"{rv.name}[{j}]"]] for j in range(int(np.prod(shape)))])
            val = val.reshape(shape)
        tr = model.rvs_to_transforms.get(rv)
        if tr is not None:
            val = tr.forward(pt.as_tensor(val), *rv.owner.inputs).eval()
        point[value_var.name] = np.asarray(val, dtype=point[value_var.name].dtype)
    return point


def _start_chain(step, seed):
    rng = np.random.default_rng(seed)
    if hasattr(step, "setup_chain"):
        try:
            step.setup_chain(rng, 10**6, 0)
            return
        except TypeError:
            pass
    if hasattr(step, "set_rng"):
        step.set_rng(rng)


def seconds_per_step(method, step, model, point, budget, max_steps=150):
    """Pilot estimate of the cost of one iteration near the posterior, tuned.

    Returns ``(seconds per step, seconds of the untimed warm-up)``. Runs the step from
    ``point`` (tuning on): warm-up steps, untimed (at least 3, at most 20, until
    ``budget / 3`` seconds: this package's engine compiles some functions on their first
    use, and the proposal adapts a little), then up to ``max_steps`` timed steps or until
    ``budget`` seconds have passed (at least 3); returns their mean time, leaving out
    steps over 20 times the median (a late first compile).
    The subsampling steps run on the step object itself (``pm.sample`` resets their
    proposal and tuning state at the start of every chain, and keeps the compiled
    functions); PyMC's Metropolis runs on a copy (it keeps its tuned scaling). NUTS: the
    time of one gradient of the full log posterior times ``NUTS_LEAPFROG_GUESS``.
    """
    if method == "NUTS":
        with model:
            fn = model.compile_logp(), model.compile_dlogp()
        fn[0](point), fn[1](point)
        t0 = time.perf_counter()
        for _ in range(3):
            fn[0](point)
            fn[1](point)
        return (time.perf_counter() - t0) / 3 * NUTS_LEAPFROG_GUESS, 0.0
    pilot = copy.deepcopy(step) if method == "Metropolis" else step
    _start_chain(pilot, 1)
    pt = dict(point)
    times = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        for i in range(20):  # warm-up: lazy compiles happen on first use of each path
            pt, _ = pilot.step(pt)
            if i >= 2 and time.perf_counter() - t0 > budget / 3:
                break
        first = time.perf_counter() - t0
        start = time.perf_counter()
        while len(times) < max_steps and (len(times) < 3 or time.perf_counter() - start < budget):
            t1 = time.perf_counter()
            pt, _ = pilot.step(pt)
            times.append(time.perf_counter() - t1)
    times = np.asarray(times)
    # drop compile-size outliers (a late first use of some code path), keep heavy tails
    times = times[times <= 20.0 * np.median(times)]
    return float(np.mean(times)), first


def metropolis_evals_per_draw(step):
    methods = getattr(step, "methods", [step])
    return int(sum(len(getattr(s, "enum_dims", [0])) for s in methods))


def _stat(ds, *names):
    for name in names:
        if name in ds:
            return np.asarray(ds[name].values)
        for key in ds.data_vars:
            if key.endswith("__" + name):
                return np.asarray(ds[key].values)
    return None


def run_method(name, model, ref, method, args, init):
    import pymc as pm

    from pymc_subsample.diagnostics import convergence, get_group, posterior_moments

    row = {"model": name, "N": ref.n_rows, "method": method}
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            step = make_step(method, model, args.adapt_cov)
    except (ValueError, NotImplementedError) as err:
        row["status"] = "not applicable: " + shorten(err)
        return row
    setup = time.perf_counter() - t0
    kind = "NUTS" if method == "NUTS" else "step"
    tune, draws = BUDGET["quick" if args.quick else "full"][kind]
    t_pilot = time.perf_counter()
    per_step, first = seconds_per_step(method, step, model, reference_point(model, ref),
                                       args.cap / 5)
    t_pilot = time.perf_counter() - t_pilot
    if method != "Metropolis":  # (a copy) -- ours compile lazily during the warm-up
        setup += first
    est = CHAINS * (tune + draws) * per_step
    status = "ok"
    if est > args.cap:
        factor = args.cap / est
        floor = FLOOR[kind]
        tune, draws = max(int(tune * factor), floor), max(int(draws * factor), floor)
        est = CHAINS * (tune + draws) * per_step
        status = "ok (capped)"
        if est > 3 * args.cap:
            row.update(status=f"skipped: over budget (est. {est:.0f} s at the floor "
                              f"{tune}+{draws}, {per_step * 1e3:.0f} ms/step)",
                       **{"setup s": round(setup, 1)})
            return row
    print(f"  {method:<16} tune {tune}, draws {draws} x {CHAINS} chains "
          f"(pilot {t_pilot:.1f} s: {per_step * 1e3:.2f} ms/step, est. {est:.0f} s)", flush=True)
    kwargs = {}
    if init is not None:
        kwargs["initvals"] = init
    t1 = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(
            draws=draws, tune=tune, chains=CHAINS, cores=1, step=step, random_seed=args.seed,
            progressbar=False, compute_convergence_checks=False, discard_tuned_samples=False,
            **kwargs,
        )
    wall = time.perf_counter() - t1
    ess, rhat = convergence(idata)
    mean, _, labels = posterior_moments(idata)
    idx = ref.index(labels)
    err = float(np.max(np.abs(mean - ref.mean[idx]) / ref.sd[idx]))
    stats = get_group(idata, "sample_stats")
    try:
        warm = get_group(idata, "warmup_sample_stats")
    except (KeyError, AttributeError):
        warm = None
    n = ref.n_rows
    if method == "Metropolis":
        per_draw = metropolis_evals_per_draw(step) * n
        rows_total = per_draw * CHAINS * (tune + draws)
        rows_step = per_draw
    elif method == "NUTS":
        ns = _stat(stats, "n_steps", "tree_size")
        nw = _stat(warm, "n_steps", "tree_size") if warm is not None else None
        rows_total = n * (float(ns.sum()) + (float(nw.sum()) if nw is not None else 0.0))
        rows_step = n * float(ns.mean())
    else:
        du = _stat(stats, "data_used")
        dw = _stat(warm, "data_used") if warm is not None else None
        rows_total = float(du.sum()) + (float(dw.sum()) if dw is not None else 0.0)
        rows_step = float(du.mean())
    row.update({
        "status": status, "tune": tune, "draws": draws, "setup s": round(setup, 1),
        "sample s": round(wall, 1), "ESS": round(ess), "ESS/s": round(ess / wall, 2),
        "ESS/s incl. setup": round(ess / (setup + wall), 2),
        "ESS/1e6 rows": round(ess / rows_total * 1e6, 3), "R-hat": round(rhat, 3),
        "max err/sd": round(err, 3), "rows/step": round(rows_step, 1),
    })
    return row


def fmt(v):
    if v is None or v == "":
        return ""
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 100:
            return f"{v:,.0f}"
        return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def markdown(rows):
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c, "")) for c in COLUMNS) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=list(M.MODELS) + ["all"])
    ap.add_argument("--quick", action="store_true", help="short runs (smoke test)")
    ap.add_argument("--cap", type=float, default=None,
                    help="estimated sampling seconds per method (default 30; --quick 10)")
    ap.add_argument("--init", choices=["map", "default"], default="map",
                    help="start every chain at the MAP (default) or at PyMC's initial point")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help="comma-separated subset of " + ",".join(METHODS))
    ap.add_argument("--adapt-cov", action="store_true",
                    help="AustereMH and BarkerMinibatch with proposal_kwargs="
                         "{'adapt_covariance': True} (adaptive full-covariance random walk)")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--out", default=str(HERE / "output"))
    args = ap.parse_args(argv)
    if args.cap is None:
        args.cap = 10.0 if args.quick else 30.0
    methods = [m for m in args.methods.split(",") if m]
    bad = sorted(set(methods) - set(METHODS))
    if bad:
        ap.error(f"unknown methods {bad}")
    names = ALL if args.model == "all" else [args.model]

    import pymc as pm

    import pymc_subsample as pms

    print(f"pymc {pm.__version__}, pymc_subsample {pms.__version__}; cap {args.cap:.0f} s per "
          f"method, {CHAINS} chains on 1 core, init={args.init}"
          f"{', adaptive covariance' if args.adapt_cov else ''}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    tag = (args.model + ("-quick" if args.quick else "")
           + ("-cold" if args.init == "default" else "")
           + ("-adaptcov" if args.adapt_cov else ""))
    rows = []
    t_all = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        try:
            model, ref = M.build(name)
        except FileNotFoundError as err:
            print(f"== {name}: skipped ({err})")
            rows.append({"model": name, "status": "skipped: " + shorten(err)})
            continue
        print(f"== {name}: N = {ref.n_rows:,}, reference {ref.source} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
        init = None
        if args.init == "map":
            with model:
                mp = pm.find_MAP(progressbar=False)
            init = {rv.name: mp[rv.name] for rv in model.free_RVs}
        for method in methods:
            try:
                row = run_method(name, model, ref, method, args, init)
            except Exception as err:  # a failure is a result too: report it, go on
                traceback.print_exc()
                row = {"model": name, "N": ref.n_rows, "method": method,
                       "status": "error: " + shorten(f"{type(err).__name__}: {err}")}
            rows.append(row)
            print("    " + "  ".join(f"{c}={fmt(row.get(c))}" for c in COLUMNS[3:]
                                    if row.get(c) not in (None, "")), flush=True)
    table = markdown(rows)
    md = Path(args.out) / f"compare-{tag}.md"
    md.write_text(
        f"# compare.py {args.model}{' --quick' if args.quick else ''}\n\n"
        f"pymc {pm.__version__}; cap {args.cap:.0f} s per method; {CHAINS} chains, 1 core; "
        f"init={args.init}{'; adaptive covariance' if args.adapt_cov else ''}; "
        f"total {time.perf_counter() - t_all:.0f} s\n\n{table}\n"
    )
    with open(Path(args.out) / f"compare-{tag}.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    print()
    print(table)
    print(f"\nwritten {md} and .csv; total {time.perf_counter() - t_all:.0f} s")
    return rows


if __name__ == "__main__":
    main()
