"""Reference posteriors of the small hierarchical models of ``tests/steps/test_hierarchical.py``.

Long NUTS runs (numpyro, 4 chains x (2,000 tune + 10,000 draws), non-centred form) on
``pymc_subsample.testing.hierarchical_data`` with the test's settings; prints the
posterior means, sds and MCSEs of ``mu``, ``log tau``, ``beta`` and every group effect
``a`` as a Python literal, which the test file holds (``REFERENCE``).

Run: python benchmarks/hierarchical_reference.py   (about 5 minutes on one core)
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import numpy as np  # noqa: E402

#: the test models: name -> (hierarchical_data keyword arguments)
MODELS = {
    "logistic": dict(n_rows=3000, n_groups=25, family="bernoulli", n_features=2, seed=3),
    "poisson": dict(n_rows=3000, n_groups=25, family="poisson", n_features=2, seed=4),
}


def summarise(idata):
    """``{quantity: (mean, sd, mcse)}`` for mu, log tau, beta[j] and a[g]."""
    from pymc_subsample.testing import mcse_mean

    post = idata.posterior
    out = {}
    series = {"mu": post["mu"].values, "log_tau": np.log(post["tau"].values)}
    for j in range(post["beta"].shape[-1]):
        series[f"beta[{j}]"] = post["beta"].values[..., j]
    for g in range(post["a"].shape[-1]):
        series[f"a[{g}]"] = post["a"].values[..., g]
    for name, x in series.items():
        out[name] = (round(float(x.mean()), 5), round(float(x.std()), 5),
                     round(float(mcse_mean(x)), 5))
    return out


def main():
    import pymc as pm

    from pymc_subsample.testing import hierarchical_data, hierarchical_model

    for name, kwargs in MODELS.items():
        data = hierarchical_data(**kwargs)
        with hierarchical_model(data, centred=False, family=kwargs["family"]):
            idata = pm.sample(draws=10_000, tune=2_000, chains=4, nuts_sampler="numpyro",
                              random_seed=11, progressbar=False,
                              target_accept=0.95,
                              nuts_sampler_kwargs={"chain_method": "sequential"})
        print(f"{name!r}: {summarise(idata)!r},")


if __name__ == "__main__":
    main()
