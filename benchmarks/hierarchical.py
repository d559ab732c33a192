"""Subsampling steps on a hierarchical GLM with many groups of very unequal size, against NUTS.

The issue "hierarchical models on tall data: many groups of very unequal size". Data from
``pymc_subsample.testing.hierarchical_data`` (N rows in G groups with heavy-tailed sizes:
a few groups hold a large share of the rows, at least 5% of the groups hold 1-10 rows;
four standard-normal covariates) and the model of ``testing.hierarchical_model``:
``mu ~ Normal(0, 1.5)``, ``tau ~ HalfNormal(1)``, ``beta ~ Normal(0, 1)``, group
intercepts ``a = mu + tau * z`` (non-centred, ``z ~ Normal(0, 1)``) or
``a ~ Normal(mu, tau)`` (centred), ``eta = a[group] + X beta`` and
``y ~ Bernoulli(logit_p=eta)`` or ``Poisson(exp(eta))``.

The reference is NUTS on the non-centred form (numpyro through ``pm.sample(
nuts_sampler="numpyro")``, chains run one after the other, JAX compilation included in
its wall time; or PyMC's NUTS with ``--reference pymc``), run once. Then for each step
(``pms.AustereMH()``, ``pms.BarkerMinibatch()``, ``pms.ScalableMH()``, ``pms.SGLD()``,
all with their defaults) and each form: ``pm.sample(step=..., chains, cores=1,
random_seed=1)``, the step built inside the timed region. A run that raises is printed as
FAILED with its error and the script goes on.

Printed per run (quantities: ``mu``, ``log(tau)``, every ``beta[j]`` and every
``a[g]``):

* ``time_s``: wall time of step construction + ``pm.sample`` (set-up and tuning included);
* ``rows/draw``: mean of the sample stat ``data_used`` (rows read per kept draw); for the
  reference, N x mean leapfrog steps per draw (full-data gradient evaluations);
* ``minESS``: the smallest bulk ESS (ArviZ) over the quantities; ``maxRhat``: the
  largest R-hat;
* ``err_ratio``: the largest ``|mean - ref mean| / (0.1 ref sd + 4 MCSE)`` over the
  quantities, with ``MCSE = sqrt(MCSE_run^2 + MCSE_ref^2)`` (ArviZ's ESS for the mean);
  ``<= 1`` passes; ``worst`` names the quantity where it is largest;
* ``sd/ref``: the smallest and largest ratio of posterior sd to the reference's;
* ``t1000_s``: time to 1,000 ESS, ``time_s x 1000 / minESS``; ``speedup``: the
  reference's ``t1000_s`` over the run's.

A line ``rows per draw`` after each run gives the distribution of ``data_used`` (mean,
median, 95th percentile, max, mean as a fraction of N), the acceptance rate where the step
reports one, and the quantities with the smallest ESS and largest R-hat; the steps'
sampler warnings (logged by PyMC) and Python warnings are printed as they come; at the
end, a table of all runs and the errors of the failed ones.

Run: python benchmarks/hierarchical.py [--quick] [--family {bernoulli,poisson}]
     [--form {centred,noncentred,both}] [--steps austere,barker,scalable,sgld]
     [--n-rows N] [--groups G] [--draws D] [--tune T] [--chains C]
     [--reference {numpyro,pymc,none}]
     (defaults: N = 10^5, G = 200, 1,000 + 1,000 draws, 2 chains; --quick: N = 2 x 10^4,
     G = 40, 300 + 300 draws, a few minutes per step)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
import traceback
import warnings

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
# one XLA thread for the numpyro reference, as the steps run on one core
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import numpy as np  # noqa: E402

STEPS = {"austere": "AustereMH", "barker": "BarkerMinibatch", "scalable": "ScalableMH",
         "sgld": "SGLD"}
FORMS = ("centred", "noncentred")
COLUMNS = (("step", 14, "s"), ("form", 10, "s"), ("time_s", 8, ".1f"),
           ("rows/draw", 10, ",.0f"), ("minESS", 7, ".0f"), ("maxRhat", 7, ".3f"),
           ("err_ratio", 9, ".2f"), ("worst", 10, "s"), ("sd/ref_min", 10, ".2f"),
           ("sd/ref_max", 10, ".2f"), ("t1000_s", 8, ".1f"), ("speedup", 7, ".2f"),
           ("status", 6, "s"))


# ---------------------------------------------------------------------- summaries


def quantities(idata):
    """``label -> (chains, draws)`` draws of ``mu``, ``log_tau``, ``beta[j]`` and ``a[g]``."""
    from pymc_subsample.testing import posterior

    post = posterior(idata)
    out = {"mu": np.asarray(post["mu"].values, dtype=float)}
    with np.errstate(divide="ignore", invalid="ignore"):
        out["log_tau"] = np.log(np.asarray(post["tau"].values, dtype=float))
    for name in ("beta", "a"):
        vals = np.asarray(post[name].values, dtype=float)
        for j in range(vals.shape[2]):
            out[f"{name}[{j}]"] = vals[:, :, j]
    return out


def summarise(draws):
    """Per quantity: mean, sd (ddof=1), MCSE of the mean, bulk ESS and R-hat (NaN for
    non-finite draws; a constant quantity has MCSE 0 and bulk ESS 0)."""
    import arviz as az

    from pymc_subsample.testing import ess

    out = {}
    for label, x in draws.items():
        if not np.all(np.isfinite(x)):
            out[label] = dict(mean=np.nan, sd=np.nan, mcse=np.nan, ess=np.nan, rhat=np.nan)
            continue
        sd = float(x.std(ddof=1))
        if sd == 0.0:
            out[label] = dict(mean=float(x.mean()), sd=0.0, mcse=0.0, ess=0.0, rhat=np.nan)
            continue
        rhat = float(az.rhat(x)) if x.shape[0] > 1 else np.nan
        out[label] = dict(mean=float(x.mean()), sd=sd, mcse=sd / np.sqrt(ess(x)),
                          ess=ess(x, method="bulk"), rhat=rhat)
    return out


def _nanmin(values):
    values = np.asarray(list(values), dtype=float)
    return float(np.nan) if np.all(np.isnan(values)) else float(np.nanmin(values))


def _nanmax(values):
    values = np.asarray(list(values), dtype=float)
    return float(np.nan) if np.all(np.isnan(values)) else float(np.nanmax(values))


def compare(summ, ref):
    """``err_ratio``, its quantity, and the smallest and largest sd ratio against ``ref``
    (NaN ratios, from non-finite draws, make ``err_ratio`` NaN: the run does not pass)."""
    ratios, sd_ratio = {}, {}
    for label, r in ref.items():
        s = summ[label]
        tol = 0.1 * r["sd"] + 4.0 * np.hypot(s["mcse"], r["mcse"])
        ratios[label] = abs(s["mean"] - r["mean"]) / tol
        sd_ratio[label] = s["sd"] / r["sd"]
    vals = np.array(list(ratios.values()))
    if np.any(np.isnan(vals)):
        worst = next(k for k, v in ratios.items() if np.isnan(v))
        err = float("nan")
    else:
        worst = max(ratios, key=ratios.get)
        err = float(ratios[worst])
    return err, worst, _nanmin(sd_ratio.values()), _nanmax(sd_ratio.values())


def rows_line(ss, n_rows):
    """The ``rows per draw`` line of a run (and its mean, NaN without ``data_used``)."""
    parts = []
    mean = float("nan")
    if "data_used" in ss:
        used = np.asarray(ss["data_used"].values, dtype=float).ravel()
        mean = float(used.mean())
        parts.append(f"mean {mean:,.1f} ({mean / n_rows:.2%} of N), median "
                     f"{np.median(used):,.0f}, 95% {np.percentile(used, 95):,.0f}, max "
                     f"{used.max():,.0f}")
    else:
        parts.append("no data_used stat")
    for stat in ("accepted", "accept"):
        if stat in ss:
            parts.append(f"acceptance {float(np.mean(ss[stat].values)):.3f}")
            break
    return "; ".join(parts), mean


def fmt_row(row):
    cells = []
    for name, width, spec in COLUMNS:
        value = row.get(name)
        if value is None or (isinstance(value, float) and np.isnan(value) and spec != "s"):
            text = "-" if value is None else "nan"
        else:
            text = format(value, spec)
        cells.append(text.rjust(width) if spec != "s" else text.ljust(width))
    return " ".join(cells)


def header():
    return " ".join(n.rjust(w) if s != "s" else n.ljust(w) for n, w, s in COLUMNS)


# ---------------------------------------------------------------------- runs


def _ess_note(summ):
    """Where the bulk ESS is smallest and R-hat largest."""
    ess = {k: v["ess"] for k, v in summ.items() if not np.isnan(v["ess"])}
    rhat = {k: v["rhat"] for k, v in summ.items() if not np.isnan(v["rhat"])}
    parts = []
    if ess:
        k = min(ess, key=ess.get)
        parts.append(f"min ESS {ess[k]:.0f} at {k}")
    if rhat:
        k = max(rhat, key=rhat.get)
        parts.append(f"max R-hat {rhat[k]:.3f} at {k}")
    return ", ".join(parts) or "no finite ESS"


def _warning_note(caught):
    """One line with the number of warnings a run raised and its first distinct messages."""
    if not caught:
        return None
    seen = []
    for w in caught:
        msg = f"{w.category.__name__}: {str(w.message).splitlines()[0][:160]}"
        if msg not in seen:
            seen.append(msg)
    return f"  {len(caught)} warning(s): " + " | ".join(seen[:3])


def run_reference(model, args):
    import pymc as pm

    kwargs = dict(draws=args.draws, tune=args.tune, chains=args.chains, cores=1,
                  random_seed=2, progressbar=False, compute_convergence_checks=False)
    if args.reference == "numpyro":
        kwargs.update(nuts_sampler="numpyro",
                      nuts_sampler_kwargs={"chain_method": "sequential"})
    with model, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message="PyTensor could not link to a BLAS")
        t0 = time.perf_counter()
        idata = pm.sample(**kwargs)
        wall = time.perf_counter() - t0
    return idata, wall, caught


def run_step(model, key, args):
    import pymc as pm

    import pymc_subsample as pms

    cls = getattr(pms, STEPS[key])
    with model, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message="PyTensor could not link to a BLAS")
        t0 = time.perf_counter()
        step = cls()
        idata = pm.sample(step=step, draws=args.draws, tune=args.tune, chains=args.chains,
                          cores=1, random_seed=1, progressbar=False,
                          compute_convergence_checks=False)
        wall = time.perf_counter() - t0
    return idata, wall, caught


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-rows", type=int, default=None, help="rows N (default 10^5)")
    ap.add_argument("--groups", type=int, default=None, help="groups G (default 200)")
    ap.add_argument("--family", choices=("bernoulli", "poisson"), default="bernoulli")
    ap.add_argument("--form", choices=FORMS + ("both",), default="both")
    ap.add_argument("--steps", default=",".join(STEPS),
                    help="comma-separated among " + ",".join(STEPS) + " (default: all)")
    ap.add_argument("--draws", type=int, default=None, help="kept draws (default 1000)")
    ap.add_argument("--tune", type=int, default=None, help="tuning draws (default 1000)")
    ap.add_argument("--chains", type=int, default=2)
    have_numpyro = all(importlib.util.find_spec(m) is not None for m in ("numpyro", "jax"))
    ap.add_argument("--reference", choices=("numpyro", "pymc", "none"),
                    default="numpyro" if have_numpyro else "pymc")
    ap.add_argument("--seed", type=int, default=0, help="seed of the data (default 0)")
    ap.add_argument("--reuse-reference", action="store_true",
                    help="reuse the reference of an earlier run with the same settings "
                         "(kept in benchmarks/output/); say so in any figure quoted")
    ap.add_argument("--quick", action="store_true",
                    help="N = 2 x 10^4, G = 40, 300 + 300 draws (unless given)")
    ap.add_argument("--traceback", action="store_true", help="print failed runs' tracebacks")
    args = ap.parse_args(argv)
    quick = {"n_rows": 2 * 10**4, "groups": 40, "draws": 300, "tune": 300}
    full = {"n_rows": 10**5, "groups": 200, "draws": 1000, "tune": 1000}
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = [s for s in steps if s not in STEPS]
    if unknown or not steps:
        ap.error(f"--steps: unknown {unknown}; choose among {','.join(STEPS)}")
    args.steps = steps
    args.forms = FORMS if args.form == "both" else (args.form,)
    return args


def main(argv=None):
    args = parse_args(argv)
    import logging

    from pymc_subsample.testing import (hierarchical_data, hierarchical_model, posterior,
                                        sample_stats)

    import pytensor

    importlib.import_module("pymc")  # importing PyMC sets its logger's level: set it after

    # keep the steps' sampler warnings (logged by PyMC at WARNING), drop PyMC's progress notes
    logging.getLogger("pymc").setLevel(logging.WARNING)
    logging.getLogger("pytensor").setLevel(logging.ERROR)
    data = hierarchical_data(args.n_rows, args.groups, family=args.family, seed=args.seed)
    sizes = data["sizes"]
    print(f"N = {args.n_rows:,}, G = {args.groups}, {data['X'].shape[1]} covariates, "
          f"{args.family}; group sizes min {sizes.min()}, median {np.median(sizes):.0f}, "
          f"max {sizes.max():,} ({sizes.max() / args.n_rows:.1%} of rows), "
          f"{int((sizes <= 10).sum())} groups of <= 10 rows; y mean {data['y'].mean():.3f}")
    print(f"{args.chains} chains x ({args.tune} tune + {args.draws} draws), cores=1; "
          f"reference: {args.reference} NUTS on the non-centred form", flush=True)
    if not pytensor.config.blas__ldflags:
        print("note: PyTensor links to no BLAS here (blas__ldflags empty): its compiled dot "
              "products, used by PyMC's NUTS and PyMC-compiled functions, are slower")
    models = {form: hierarchical_model(data, centred=form == "centred", family=args.family)
              for form in set(args.forms) | {"noncentred"}}

    rows = []
    ref_name = f"nuts-{args.reference}"
    ref_summ = ref_t1000 = None
    cache = os.path.join(os.path.dirname(os.path.abspath(__file__)), "output",
                         f"hierarchical_ref_{args.reference}_{args.n_rows}_{args.groups}_"
                         f"{args.family}_{args.seed}_{args.chains}x{args.tune}+{args.draws}.pkl")
    cached = None
    if args.reuse_reference and os.path.exists(cache):
        import pickle

        with open(cache, "rb") as fh:
            cached = pickle.load(fh)
        ref_summ, row = cached["summ"], cached["row"]
        ref_t1000 = row["t1000_s"]
        rows.append(row)
        print(fmt_row(row))
        print(f"  reference: reused from {cache} (measured in an earlier run)", flush=True)
    try:
        if cached is not None:
            raise LookupError("reused")
        if args.reference == "none":
            raise RuntimeError("--reference none: no comparisons")
        ref, wall, caught = run_reference(models["noncentred"], args)
    except LookupError:
        pass
    except Exception as err:  # the steps still run, without comparisons
        print(f"{ref_name} noncentred FAILED: {type(err).__name__}: {err}", flush=True)
        if args.traceback:
            traceback.print_exc()
        rows.append({"step": ref_name, "form": "noncentred", "status": "FAILED",
                     "error": f"{type(err).__name__}: {err}"})
    else:
        ref_summ = summarise(quantities(ref))
        ss = sample_stats(ref)
        steps_per_draw = float(np.mean(ss["n_steps"].values)) if "n_steps" in ss else np.nan
        min_ess = _nanmin(s["ess"] for s in ref_summ.values())
        ref_t1000 = wall * 1000.0 / min_ess if min_ess > 0 else np.inf
        attrs = {**posterior(ref).attrs, **ss.attrs}
        sampling = float(attrs.get("sampling_time", np.nan))
        row = {"step": ref_name, "form": "noncentred", "time_s": wall,
               "rows/draw": args.n_rows * steps_per_draw, "minESS": min_ess,
               "maxRhat": _nanmax(s["rhat"] for s in ref_summ.values()),
               "t1000_s": ref_t1000, "speedup": 1.0, "status": "ok"}
        rows.append(row)
        div = int(np.sum(ss["diverging"].values)) if "diverging" in ss else -1
        print(fmt_row(row))
        print(f"  reference: {wall:.1f} s wall ({sampling:.1f} s in the sampler, the rest "
              f"compilation and conversion), {steps_per_draw:.1f} leapfrog steps per draw, "
              f"{div} divergences; {_ess_note(ref_summ)}", flush=True)
        note = _warning_note(caught)
        if note:
            print(note)
        import pickle

        os.makedirs(os.path.dirname(cache), exist_ok=True)
        with open(cache, "wb") as fh:
            pickle.dump({"summ": ref_summ, "row": row}, fh)

    for key in args.steps:
        for form in args.forms:
            name = STEPS[key]
            try:
                idata, wall, caught = run_step(models[form], key, args)
                summ = summarise(quantities(idata))
                ss = sample_stats(idata)
            except Exception as err:
                print(f"{name} {form} FAILED: {type(err).__name__}: {err}", flush=True)
                if args.traceback:
                    traceback.print_exc()
                rows.append({"step": name, "form": form, "status": "FAILED",
                             "error": f"{type(err).__name__}: {err}"})
                continue
            line, rows_mean = rows_line(ss, args.n_rows)
            min_ess = _nanmin(s["ess"] for s in summ.values())
            t1000 = wall * 1000.0 / min_ess if min_ess > 0 else np.inf
            row = {"step": name, "form": form, "time_s": wall, "rows/draw": rows_mean,
                   "minESS": min_ess, "maxRhat": _nanmax(s["rhat"] for s in summ.values()),
                   "t1000_s": t1000}
            if ref_summ is not None:
                err, worst, sd_lo, sd_hi = compare(summ, ref_summ)
                row.update({"err_ratio": err, "worst": worst, "sd/ref_min": sd_lo,
                            "sd/ref_max": sd_hi, "speedup": ref_t1000 / t1000})
                row["status"] = "pass" if err <= 1.0 else "fail"
            else:
                row["status"] = "ok"
            rows.append(row)
            print(fmt_row(row))
            print(f"  rows per draw: {line}; {_ess_note(summ)}", flush=True)
            note = _warning_note(caught)
            if note:
                print(note)

    print()
    print(f"Summary (N = {args.n_rows:,}, G = {args.groups}, {args.family}, {args.chains} "
          f"chains x ({args.tune} + {args.draws}); status: pass = err_ratio <= 1)")
    print(header())
    for row in rows:
        print(fmt_row(row))
    for row in rows:
        if "error" in row:
            print(f"FAILED {row['step']} {row['form']}: {row['error'].splitlines()[0][:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
