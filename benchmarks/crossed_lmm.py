"""The exact Gaussian sweep on linear mixed models with several group terms, against NUTS.

Issue 43 (mixed models on tall data). Data: ``N`` rows, two grouping factors with very
unequal level sizes (Dirichlet(0.7) shares, so some levels hold a handful of rows),
``x ~ Normal(0, 1)``, ``y = 0.4 + 0.8 x + a[g] + c[h] + eps`` with ``a ~ N(0, 0.7)``,
``c ~ N(0, 0.4)``, ``eps ~ N(0, 1)``. Models (``--model``):

* ``crossed``: ``y ~ Normal(b0 + b1 x + a[g] + c[h], sigma)``, ``g`` and ``h`` drawn
  independently (``G`` and ``H`` levels), ``a ~ Normal(0, tau)``, ``c ~ Normal(0, t2)``
  (centred);
* ``nested``: the same with each level of ``g`` inside one level of ``h``
  (``h = g * H // G``);
* ``slope``: ``a[g] + c[h] * x`` (``c`` a random slope per level of ``h`` with its own
  scale), ``a`` non-centred (``a = tau * za``).

Priors: ``b ~ Normal(0, 2)``, ``tau, t2, sigma ~ HalfNormal(1)``.

Methods: ``pms.ScalableMH()`` (AustereMH and BarkerMinibatch run the same sweep and give
the same draws on these models); PyMC's default NUTS (``pm.sample()``); numpyro
(``nuts_sampler="numpyro"``, ``chain_method="sequential"``) and nutpie
(``nuts_sampler="nutpie"``) when installed (``pip install "pymc-subsample[bench]"``).
Every method: 2 chains one after the other (``cores=1``), ``--tune`` + ``--draws``
draws, ``random_seed=1``; the step is built inside the timed region.

Printed per method: ``time_s`` (construction + ``pm.sample``), ``minESS`` (smallest
ArviZ bulk ESS over ``b``, ``log tau``, ``log t2``, ``log sigma``, every ``a`` and
``c``), ``maxRhat``, ``t1000_s = time_s x 1000 / minESS``, ``speedup`` (PyMC NUTS's
``t1000_s`` over the method's) and ``err`` against the first NUTS run: the largest
``|mean - ref| / (0.1 ref sd + 4 MCSE)`` (``<= 1`` agrees). All ratios come from one
run on one machine; the PyMC version is printed.

Run: python benchmarks/crossed_lmm.py [--model {crossed,nested,slope}] [--n-rows N]
     [--groups G] [--levels H] [--draws D] [--tune T] [--nuts pymc,numpyro,nutpie]
     (defaults: crossed, N = 2 x 10^4, G = 30, H = 8, 1,000 + 1,000, all three NUTS)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
import warnings

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402

import pymc_subsample as pms  # noqa: E402
from pymc_subsample.testing import mcse_mean, posterior  # noqa: E402


def make_data(n, G, H, nested, seed=0):
    rng = np.random.default_rng(seed)
    g = rng.choice(G, size=n, p=rng.dirichlet(np.full(G, 0.7)))
    h = g * H // G if nested else rng.choice(H, size=n, p=rng.dirichlet(np.full(H, 0.7)))
    x = rng.normal(size=n)
    y = (0.4 + 0.8 * x + rng.normal(0, 0.7, G)[g] + rng.normal(0, 0.4, H)[h]
         + rng.normal(0, 1.0, n))
    return x, g.astype(np.int64), h.astype(np.int64), y


def build_model(data, G, H, kind):
    x, g, h, y = data
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 2.0, shape=2)
        tau, t2 = pm.HalfNormal("tau", 1.0), pm.HalfNormal("t2", 1.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        if kind == "slope":
            a = pm.Deterministic("a", tau * pm.Normal("za", 0.0, 1.0, shape=G))
        else:
            a = pm.Normal("a", 0.0, tau, shape=G)
        c = pm.Normal("c", 0.0, t2, shape=H)
        second = c[h] * x if kind == "slope" else c[h]
        pm.Normal("y", b[0] + b[1] * x + a[g] + second, sigma, observed=y)
    return m


def quantities(idata):
    post = posterior(idata)
    out = {f"b[{j}]": post["b"].values[..., j] for j in range(2)}
    for name in ("tau", "t2", "sigma"):
        out[f"log {name}"] = np.log(post[name].values)
    for name in ("a", "c"):
        for i in range(post[name].shape[-1]):
            out[f"{name}[{i}]"] = post[name].values[..., i]
    return out


def summarise(q):
    ess = {k: float(az.ess(v)) for k, v in q.items()}
    rhat = {k: float(az.rhat(v)) for k, v in q.items()}
    mcse = {k: float(mcse_mean(v)) for k, v in q.items()}
    return ess, rhat, mcse


def run(method, model, args):
    kw = dict(draws=args.draws, tune=args.tune, chains=2, cores=1, random_seed=1,
              progressbar=False, compute_convergence_checks=False)
    t0 = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method == "ScalableMH":
            idata = pm.sample(step=pms.ScalableMH(), **kw)
        elif method == "pymc NUTS":
            idata = pm.sample(**kw)
        elif method == "numpyro":
            idata = pm.sample(nuts_sampler="numpyro",
                              nuts_sampler_kwargs={"chain_method": "sequential"}, **kw)
        else:
            idata = pm.sample(nuts_sampler="nutpie", **kw)
    return time.perf_counter() - t0, quantities(idata)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=["crossed", "nested", "slope"], default="crossed")
    p.add_argument("--n-rows", type=int, default=20_000)
    p.add_argument("--groups", type=int, default=30)
    p.add_argument("--levels", type=int, default=8)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--tune", type=int, default=1000)
    p.add_argument("--nuts", default="pymc,numpyro,nutpie")
    args = p.parse_args(argv)
    data = make_data(args.n_rows, args.groups, args.levels, args.model == "nested")
    model = build_model(data, args.groups, args.levels, args.model)
    print(f"PyMC {pm.__version__}; model {args.model}: N={args.n_rows}, G={args.groups}, "
          f"H={args.levels}; 2 chains x ({args.tune} + {args.draws})")
    nuts = {"pymc": "pymc NUTS", "numpyro": "numpyro", "nutpie": "nutpie"}
    methods = ["ScalableMH"]
    for key in args.nuts.split(","):
        if key and (key == "pymc" or importlib.util.find_spec(key) is not None):
            methods.append(nuts[key])
        elif key:
            print(f"{key}: not installed, skipped (pip install 'pymc-subsample[bench]')")
    recs, ref = {}, None
    for method in methods:
        try:
            secs, q = run(method, model, args)
        except Exception as err:  # a failed run is reported, the others go on
            print(f"{method}: FAILED {type(err).__name__}: {err}")
            continue
        ess, rhat, mcse = summarise(q)
        recs[method] = (secs, q, ess, rhat, mcse)
        if ref is None and method != "ScalableMH":
            ref = method
    if not recs:
        return
    pymc_t = None
    if "pymc NUTS" in recs:
        secs, _, ess, _, _ = recs["pymc NUTS"]
        pymc_t = secs * 1000 / min(ess.values())
    print(f"{'method':<12}{'time_s':>9}{'minESS':>9}{'maxRhat':>9}{'t1000_s':>10}"
          f"{'speedup':>9}{'err':>7}  worst")
    for method, (secs, q, ess, rhat, mcse) in recs.items():
        t1000 = secs * 1000 / min(ess.values())
        err, worst = float("nan"), ""
        if ref is not None and method != ref:
            rq, rmcse = recs[ref][1], recs[ref][4]
            errs = {k: abs(v.mean() - rq[k].mean())
                    / (0.1 * rq[k].std() + 4 * np.hypot(mcse[k], rmcse[k]))
                    for k, v in q.items()}
            worst = max(errs, key=errs.get)
            err = errs[worst]
        speed = pymc_t / t1000 if pymc_t else float("nan")
        print(f"{method:<12}{secs:9.1f}{min(ess.values()):9.0f}{max(rhat.values()):9.3f}"
              f"{t1000:10.1f}{speed:9.1f}{err:7.2f}  {worst}")
    print(f"(err against {ref}; speedup against PyMC's NUTS, PyMC {pm.__version__})")


if __name__ == "__main__":
    main()
