"""``pms.advise`` against full runs: its forecast time to 1,000 ESS, and what a full run
of the method it recommends (and of PyMC's NUTS where that is cheap) measures.

Models (data seed 0):

1. ``demo``: the demo's logistic regression, ``make_logistic(N, 10)``,
   ``beta ~ Normal(0, 1)``, ``y ~ Bernoulli(logit_p=X @ beta)``;
2. ``hierarchical``: the hierarchical logistic regression of ``benchmarks/hierarchical.py``
   (``testing.hierarchical_data(N, G)``: G groups of very unequal size, non-centred form);
3. ``student_t``: a robust regression, ``y = 0.5 + X b + sigma t_4`` with 5 covariates,
   ``a, b ~ Normal(0, 5)``, ``sigma ~ HalfNormal(5)``, ``y ~ StudentT(nu=4, mu=a + X b,
   sigma)`` (nu fixed, unknown scale);
4. ``small``: the demo's logistic regression at N = 1,000.

For each: ``pms.advise(model, random_seed=1)`` (its defaults: pilots of 200 + 200 draws,
one chain; the forecast run is 2 chains x 1,000 tuning draws, to 1,000 bulk ESS), printed;
then full runs on a fresh copy of the model (so that nothing compiled in the pilots is
reused), each measured as ``benchmarks/fastest_nuts.py`` measures time to 1,000 ESS
(``T1000 = W - K + K x 1000 / ESS``, ``W`` everything from the step's construction to the
end of ``pm.sample``, ``K`` the kept draws' time, ESS the minimum bulk ESS over the free
variables), 2 chains one after the other, ``tune=1000``:

* the recommended method: a step with 2,000 kept draws per chain (``K`` = its share of
  ``pm.sample``'s sampling time by iterations); NUTS (PyMC's) with 1,000 (``K`` = the sum
  of its per-draw ``perf_counter_diff``);
* when NUTS is recommended, also the fastest step that mixed well (to check its forecast);
* PyMC's NUTS when advise forecasts it below ``--nuts-budget`` seconds (default 120),
  recommended or not (a forecast far below the truth could still run for long).

Printed at the end: one table, model | N | method | forecast T1000 | measured T1000 |
ratio | ESS | R-hat | recommended. Forecasts are rough (a pilot of 200 draws); read the
ratio as good when within a factor of 2.

Run: python benchmarks/advise.py [--rows 1e6] [--groups 200] [--models demo,...]
     [--nuts-budget 120] [--quick]   (--quick: N = 2 x 10^4, G = 20, pilots of 60 draws,
     full runs of 300 tune + 600 draws: a smoke run of a few minutes)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

MODELS = ("demo", "hierarchical", "student_t", "small")


def build(name, n_rows, groups, seed=0):
    """A fresh PyMC model ``name`` on ``n_rows`` rows (the same data on every call)."""
    import pymc as pm
    import pytensor.tensor as pt

    import pymc_subsample as pms
    from pymc_subsample.testing import hierarchical_data, hierarchical_model

    if name in ("demo", "small"):
        X, y, _ = pms.datasets.make_logistic(n_rows, 10, seed=seed)
        with pm.Model() as model:
            beta = pm.Normal("beta", 0.0, 1.0, shape=10)
            pm.Bernoulli("y", logit_p=pt.as_tensor(X) @ beta, observed=y)
        return model
    if name == "hierarchical":
        return hierarchical_model(hierarchical_data(n_rows, groups, seed=seed), centred=False)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, 5))
    coef = np.array([1.0, -0.5, 0.25, 0.0, 0.5])
    y = 0.5 + X @ coef + 1.5 * rng.standard_t(4, size=n_rows)
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 5.0)
        b = pm.Normal("b", 0.0, 5.0, shape=5)
        sigma = pm.HalfNormal("sigma", 5.0)
        pm.StudentT("y", nu=4.0, mu=a + pt.as_tensor(X) @ b, sigma=sigma, observed=y)
    return model


def _ess_rhat(idata, model):
    from pymc_subsample.diagnostics import convergence

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return convergence(idata, [rv.name for rv in model.free_RVs])


def run_step(name, model, args, seed):
    """Measured T1000 of step ``name`` (``benchmarks/fastest_nuts.py``'s definition)."""
    import pymc as pm

    import pymc_subsample as pms
    from pymc_subsample.advice import _attrs

    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        step = getattr(pms, name)()
        construct = time.perf_counter() - t0
        t0 = time.perf_counter()
        idata = pm.sample(step=step, tune=args.tune, draws=args.draws, chains=2, cores=1,
                          random_seed=seed, progressbar=False,
                          compute_convergence_checks=False)
        wall = time.perf_counter() - t0
    loop = float(_attrs(idata).get("sampling_time", wall))
    ess, rhat = _ess_rhat(idata, model)
    kept = loop * args.draws / (args.tune + args.draws)
    return construct + wall - kept + kept * 1000.0 / ess, ess, rhat


def run_nuts(model, args, seed):
    """Measured T1000 of PyMC's NUTS (kept time: the sum of its per-draw timer)."""
    import pymc as pm

    from pymc_subsample.diagnostics import get_group

    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        idata = pm.sample(tune=args.tune, draws=args.nuts_draws, chains=2, cores=1,
                          random_seed=seed, progressbar=False,
                          compute_convergence_checks=False)
        wall = time.perf_counter() - t0
    kept = float(np.sum(get_group(idata, "sample_stats")["perf_counter_diff"].values))
    ess, rhat = _ess_rhat(idata, model)
    return wall - kept + kept * 1000.0 / ess, ess, rhat


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=float, default=None,
                    help="N of the demo, hierarchical and Student-t models (default 1e6)")
    ap.add_argument("--small-rows", type=int, default=1000)
    ap.add_argument("--groups", type=int, default=None, help="groups (default 200)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--nuts-budget", type=float, default=120.0,
                    help="run PyMC's NUTS fully when advise forecasts it below this (s)")
    ap.add_argument("--pilot-draws", type=int, default=None)
    ap.add_argument("--tune", type=int, default=None)
    ap.add_argument("--draws", type=int, default=None)
    ap.add_argument("--nuts-draws", type=int, default=None)
    ap.add_argument("--random-seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    quick = {"rows": 2e4, "groups": 20, "pilot_draws": 60, "tune": 300, "draws": 600,
             "nuts_draws": 300}
    full = {"rows": 1e6, "groups": 200, "pilot_draws": 200, "tune": 1000, "draws": 2000,
            "nuts_draws": 1000}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.rows = int(args.rows)
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    bad = [m for m in args.models if m not in MODELS]
    if bad:
        ap.error(f"--models: unknown {bad}; choose among {','.join(MODELS)}")
    return args


def main(argv=None):
    args = parse_args(argv)
    import logging

    import pymc as pm

    import pymc_subsample as pms

    for name in ("pymc", "pytensor"):
        logging.getLogger(name).setLevel(logging.ERROR)
    print(f"pymc {pm.__version__}; {os.cpu_count()} CPUs; load average "
          f"{os.getloadavg()[0]:.2f}; full runs: 2 chains one after the other, tune "
          f"{args.tune}, {args.draws} step / {args.nuts_draws} NUTS draws per chain",
          flush=True)
    rows = []
    for name in args.models:
        n = args.small_rows if name == "small" else args.rows
        print(f"\n== {name}, N = {n:,}", flush=True)
        t0 = time.perf_counter()
        advice = pms.advise(build(name, n, args.groups), pilot_draws=args.pilot_draws,
                            tune=args.tune, random_seed=args.random_seed)
        print(advice)
        print(f"(advise took {time.perf_counter() - t0:.1f} s)", flush=True)
        forecasts = {f.method: f for f in advice.steps + advice.nuts if f.ok}
        runs = []
        if advice.recommendation != "NUTS":
            runs.append(advice.recommendation)
        else:
            good = [f for f in advice.steps if f.ok and not f.poor_mixing]
            if good:
                runs.append(min(good, key=lambda f: f.t1000_s).method)
        nuts = forecasts.get("NUTS (PyMC)")
        if nuts is not None and nuts.t1000_s < args.nuts_budget:
            runs.append("NUTS (PyMC)")
        for method in runs:
            seed = args.random_seed + 1
            try:
                if method.startswith("NUTS"):
                    t, ess, rhat = run_nuts(build(name, n, args.groups), args, seed)
                else:
                    t, ess, rhat = run_step(method, build(name, n, args.groups), args, seed)
            except Exception as err:  # noqa: BLE001 - reported in the table
                print(f"  {method}: FAILED ({type(err).__name__}: {err})")
                t, ess, rhat = float("nan"), float("nan"), float("nan")
            fc = forecasts[method].t1000_s
            rec = method == advice.recommendation or (advice.recommendation == "NUTS"
                                                      and method.startswith("NUTS"))
            rows.append((name, n, method, fc, t, ess, rhat, rec))
            print(f"  {method}: forecast {fc:,.1f} s, measured {t:,.1f} s (ESS {ess:.0f}, "
                  f"R-hat {rhat:.3f})", flush=True)
    head = (f"{'model':<13} {'N':>9} {'method':<16} {'forecast s':>10} {'measured s':>10} "
            f"{'ratio':>6} {'ESS':>6} {'R-hat':>6}  recommended")
    print("\n" + head + "\n" + "-" * len(head))
    for name, n, method, fc, t, ess, rhat, rec in rows:
        print(f"{name:<13} {n:>9,} {method:<16} {fc:>10,.1f} {t:>10,.1f} {fc / t:>6.2f} "
              f"{ess:>6.0f} {rhat:>6.3f}  {'yes' if rec else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
