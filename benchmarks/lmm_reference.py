"""Reference posterior of the linear mixed model of ``tests/steps/test_hierarchical_normal.py``.

The model: :func:`pymc_subsample.testing.hierarchical_model` with ``family="normal"``
(``y ~ Normal(a[g] + X beta, sigma)``, ``a ~ Normal(mu, tau)``, ``sigma, tau ~
HalfNormal(1)``, ``mu ~ Normal(0, 1.5)``, ``beta ~ Normal(0, 1)``) on
``hierarchical_data(**MODEL)``: 20,000 rows in 100 groups of heavy-tailed sizes (5 of
them with 1-10 rows). Long PyMC NUTS, non-centred and centred forms (the reference
pools both: the same posterior, two parametrisations, so a parametrisation NUTS
samples poorly shows up as a disagreement, printed), each 4 chains x (1,000 tune +
``DRAWS`` draws), ``target_accept=0.95``, one core. Writes ``tests/data/lmm_nuts.json``:
the settings and ``{quantity: [mean, sd, mcse]}`` for ``mu``, ``log_tau``,
``log_sigma``, ``beta[j]`` and every ``a[g]``.

Run: python benchmarks/lmm_reference.py   (about 10-20 minutes on one core)
"""

from __future__ import annotations

import json
import os
import sys
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

#: the test's data (hierarchical_data keyword arguments)
MODEL = dict(n_rows=20_000, n_groups=100, family="normal", n_features=2, seed=5, sigma=1.0)
#: draws per chain (after 1,000 tuning draws), chains per form
DRAWS, CHAINS = 4000, 4
OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "lmm_nuts.json")


def series(post):
    """``{quantity: (chains, draws) array}``: mu, log tau, log sigma, beta[j], a[g]."""
    out = {"mu": post["mu"].values, "log_tau": np.log(post["tau"].values),
           "log_sigma": np.log(post["sigma"].values)}
    for j in range(post["beta"].shape[-1]):
        out[f"beta[{j}]"] = post["beta"].values[..., j]
    for g in range(post["a"].shape[-1]):
        out[f"a[{g}]"] = post["a"].values[..., g]
    return out


def main():
    import pymc as pm

    from pymc_subsample.testing import hierarchical_data, hierarchical_model, mcse_mean, posterior

    data = hierarchical_data(**MODEL)
    runs, seconds = {}, {}
    for centred in (False, True):
        t0 = time.perf_counter()
        with hierarchical_model(data, centred=centred, family="normal"):
            idata = pm.sample(draws=DRAWS, tune=1000, chains=CHAINS, cores=1, random_seed=11,
                              progressbar=False, target_accept=0.95,
                              compute_convergence_checks=False)
        seconds["centred" if centred else "non_centred"] = round(time.perf_counter() - t0, 1)
        runs[centred] = series(posterior(idata))
        div = int(np.sum(idata.sample_stats["diverging"].values))
        print(f"centred={centred}: {seconds}, {div} divergences", file=sys.stderr)
    ref, worst = {}, 0.0
    for name in runs[False]:
        x0, x1 = runs[False][name], runs[True][name]
        m0, m1 = mcse_mean(x0), mcse_mean(x1)
        worst = max(worst, abs(x0.mean() - x1.mean()) / np.hypot(m0, m1))
        x = np.concatenate([x0, x1])
        ref[name] = [round(float(x.mean()), 6), round(float(x.std()), 6),
                     round(float(mcse_mean(x)), 6)]
    print(f"largest |centred - non-centred| mean difference: {worst:.2f} MCSE", file=sys.stderr)
    out = {"settings": {"data": MODEL, "sampler": "pymc NUTS", "pymc": pm.__version__,
                        "chains_per_form": CHAINS, "tune": 1000, "draws": DRAWS,
                        "target_accept": 0.95, "random_seed": 11, "forms": ["non-centred",
                                                                            "centred"],
                        "seconds": seconds,
                        "max_form_difference_mcse": round(float(worst), 2)},
           "reference": ref}
    with open(OUT, "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"wrote {os.path.normpath(OUT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
