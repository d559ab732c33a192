"""NUTS references of the synthetic models of ``tests/test_cv_posteriors.py``.

The slow tests there compare AustereMH, BarkerMinibatch and ScalableMH with long PyMC NUTS
runs on five synthetic tall models. Those runs took about 4 minutes of every CI run; they
are made here once instead, and the tests read their summaries from
``tests/data/cv_posteriors_nuts.json``. The test's criterion (``check`` in the test
module) reads a reference only through four numbers per scalar component: its mean, its
sd (``ddof=1``) and the Monte Carlo standard errors of both
(:func:`pymc_subsample.testing.mcse_mean_sd`, from the reference's own multi-chain ESS).
Those are what the file holds, with the settings of each run (sampler, seed, chains,
tuning and kept draws, the mass matrix's set-up) and the versions that made it; the
check is the same, number for number, as with the draws.

The set-up of each run (``NUTS_REF``): PyMC's NUTS, 4 chains, ``cores=1``,
``target_accept=0.9``. ``mass="hessian"`` starts the chains at ``pm.find_MAP`` with the
inverse of ``pm.find_hessian`` as a fixed dense mass matrix (the unstandardised logistic
regression is ill-conditioned: NUTS from the initial point with jitter left a chain
stuck, adapt_full from it spends minutes in max-depth trees while tuning);
``mass="adapt_full"`` adapts a dense mass matrix from the initial point (the hierarchical
posterior's joint mode, tau = 1.98, is far from its bulk, tau = 0.80 +- 0.14, so a
Hessian there is a poor mass matrix). NUTS on the non-centred Normal model diverges (14
divergences): its reference samples the centred form of the same posterior and computes
``z = (a - mu) / tau`` from those draws. A run with more than 4 divergences or a
component of bulk ESS under ``REF_MIN_ESS`` is refused (no file is written).

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/cv_posteriors_references.py [--only NAME ...]``
from the repository root (about 4 minutes on one core; ``--only`` remakes some models
and keeps the others' entries).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import warnings
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

#: where the tests read the references
OUT = REPO / "tests" / "data" / "cv_posteriors_nuts.json"

#: each model's run; "centred": the reference samples the centred form (see above)
NUTS_REF = {
    "logistic": {"mass": "hessian", "tune": 500, "draws": 1_000, "seed": 31},
    "hierarchical": {"mass": "adapt_full", "tune": 1_000, "draws": 1_000, "seed": 32},
    "hierarchical_centred": {"mass": "adapt_full", "tune": 1_000, "draws": 1_000, "seed": 34},
    "robust_t": {"mass": "hessian", "tune": 500, "draws": 1_000, "seed": 33},
    "hierarchical_normal": {"mass": "adapt_full", "tune": 1_000, "draws": 1_000, "seed": 35,
                            "centred": True},
}
CHAINS = 4
TARGET_ACCEPT = 0.9
REF_MIN_ESS = 400  # a reference with less is not one
MAX_DIVERGENCES = 4


def nuts_reference_draws(name: str):
    """``(label -> (chains, draws) array, divergences)`` of the NUTS run of ``name``."""
    import pymc as pm

    from pymc_subsample.testing import flat_draws, sample_stats
    from tests.test_cv_posteriors import SYNTHETIC, non_centred_normal_model

    cfg = NUTS_REF[name]
    model = non_centred_normal_model(centred=True) if cfg.get("centred") else SYNTHETIC[name]()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kw = dict(draws=cfg["draws"], tune=cfg["tune"], chains=CHAINS, cores=1,
                  random_seed=cfg["seed"], progressbar=False, compute_convergence_checks=False)
        if cfg["mass"] == "hessian":
            start = pm.find_MAP(progressbar=False)
            hess = pm.find_hessian(start)
            step = pm.NUTS(scaling=hess, is_cov=False, target_accept=TARGET_ACCEPT)
            init = {v.name: start[v.name] for v in model.value_vars}
            idata = pm.sample(step=step, initvals=init, **kw)
        else:
            idata = pm.sample(init=cfg["mass"], target_accept=TARGET_ACCEPT, **kw)
    divergences = int(np.sum(sample_stats(idata)["diverging"].values))
    draws = flat_draws(idata)
    if cfg.get("centred"):  # the non-centred form's z from the centred form's a
        for j in range(sum(k.startswith("a[") for k in draws)):
            draws[f"z[{j}]"] = (draws.pop(f"a[{j}]") - draws["mu"]) / draws["tau"]
    return draws, divergences


def make_entry(name: str) -> dict:
    """The file's entry of ``name``: settings, divergences and per-component summaries
    (:func:`tests.test_cv_posteriors.reference_summary`); raises RuntimeError on an
    unreliable run."""
    from tests.test_cv_posteriors import bulk_ess, reference_summary

    draws, divergences = nuts_reference_draws(name)
    ess = {k: float(bulk_ess(v)) for k, v in draws.items()}
    low = {k: round(v) for k, v in ess.items() if v < REF_MIN_ESS}
    if low or divergences > MAX_DIVERGENCES:
        raise RuntimeError(f"NUTS reference for {name} is unreliable: {divergences} "
                           f"divergences, bulk ESS below {REF_MIN_ESS}: {low}")
    summary = reference_summary(draws)
    for label, row in summary.items():
        row["bulk_ess"] = ess[label]
    settings = {"sampler": "PyMC NUTS (pm.sample)", "chains": CHAINS, "cores": 1,
                "target_accept": TARGET_ACCEPT, **NUTS_REF[name]}
    return {"settings": settings, "versions": versions(), "divergences": divergences,
            "summary": summary}


def versions() -> dict:
    import arviz
    import pymc
    import pytensor

    return {"python": platform.python_version(), "numpy": np.__version__,
            "pymc": pymc.__version__, "pytensor": pytensor.__version__,
            "arviz": arviz.__version__}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", choices=sorted(NUTS_REF), default=None)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    names = args.only or list(NUTS_REF)
    old = json.loads(args.out.read_text())["models"] if args.only and args.out.exists() else {}
    models = dict(old)
    for name in names:
        models[name] = make_entry(name)
        s = models[name]["summary"]
        print(f"{name}: {len(s)} components, {models[name]['divergences']} divergences, "
              f"min bulk ESS {min(r['bulk_ess'] for r in s.values()):.0f}", flush=True)
    doc = {
        "generated_by": "benchmarks/cv_posteriors_references.py",
        "models": {k: models[k] for k in NUTS_REF if k in models},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out.relative_to(REPO) if args.out.is_relative_to(REPO) else args.out}")


if __name__ == "__main__":
    main()
