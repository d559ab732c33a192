"""Reference posterior of the linear mixed model of ``tests/steps/test_hierarchical_normal.py``.

The model: :func:`pymc_subsample.testing.hierarchical_model` with ``family="normal"``
(``y ~ Normal(a[g] + X beta, sigma)``, ``a ~ Normal(mu, tau)``, ``sigma, tau ~
HalfNormal(1)``, ``mu ~ Normal(0, 1.5)``, ``beta ~ Normal(0, 1)``) on
``hierarchical_data(**MODEL)``: 20,000 rows in 100 groups of heavy-tailed sizes (5 of
them with 1-10 rows). Long PyMC NUTS on the centred form (``FORMS``; the non-centred
form is the poor one for NUTS here: the groups of hundreds to thousands of rows make its
posterior a narrow ridge in ``(mu, tau, z)``, and its trees run to the maximal depth),
4 chains x (1,000 tune + ``DRAWS`` draws), ``target_accept=0.95``, one core. With
``--forms both`` it also runs the non-centred form and pools the two (printing their
largest difference in MCSE). Writes ``tests/data/lmm_nuts.json``: the settings (with
NUTS's divergences, worst R-hat and smallest bulk ESS) and ``{quantity: [mean, sd,
mcse]}`` for ``mu``, ``log_tau``, ``log_sigma``, ``beta[j]`` and every ``a[g]``.

Run: python benchmarks/lmm_reference.py   (several minutes on one core)
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
DRAWS, CHAINS = 3000, 4
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

    import arviz as az

    from pymc_subsample.testing import ess

    forms = (True, False) if "--forms" in sys.argv and sys.argv[-1] == "both" else (True,)
    data = hierarchical_data(**MODEL)
    runs, seconds, checks = {}, {}, {}
    for centred in forms:
        t0 = time.perf_counter()
        with hierarchical_model(data, centred=centred, family="normal"):
            idata = pm.sample(draws=DRAWS, tune=1000, chains=CHAINS, cores=1, random_seed=11,
                              progressbar=False, target_accept=0.95,
                              compute_convergence_checks=False)
        seconds["centred" if centred else "non_centred"] = round(time.perf_counter() - t0, 1)
        runs[centred] = series(posterior(idata))
        div = int(np.sum(idata.sample_stats["diverging"].values))
        checks["centred" if centred else "non_centred"] = {
            "divergences": div,
            "max_rhat": round(max(float(az.rhat(x)) for x in runs[centred].values()), 4),
            "min_bulk_ess": round(min(ess(x, method="bulk") for x in runs[centred].values()))}
        print(f"centred={centred}: {seconds}, {checks}", file=sys.stderr)
    ref, worst = {}, 0.0
    for name in runs[True]:
        x = np.concatenate([runs[c][name] for c in forms])
        if len(forms) == 2:
            x0, x1 = runs[False][name], runs[True][name]
            worst = max(worst, abs(x0.mean() - x1.mean()) / np.hypot(mcse_mean(x0),
                                                                     mcse_mean(x1)))
        ref[name] = [round(float(x.mean()), 6), round(float(x.std()), 6),
                     round(float(mcse_mean(x)), 6)]
    print(f"largest |centred - non-centred| mean difference: {worst:.2f} MCSE", file=sys.stderr)
    out = {"settings": {"data": MODEL, "sampler": "pymc NUTS", "pymc": pm.__version__,
                        "chains_per_form": CHAINS, "tune": 1000, "draws": DRAWS,
                        "target_accept": 0.95, "random_seed": 11,
                        "forms": ["centred" if c else "non-centred" for c in forms],
                        "seconds": seconds, "nuts_checks": checks,
                        "max_form_difference_mcse": (round(float(worst), 2) if len(forms) == 2
                                                     else None)},
           "reference": ref}
    with open(OUT, "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"wrote {os.path.normpath(OUT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
