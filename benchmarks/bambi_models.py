"""Models written with Bambi: ScalableMH (the blocked sweep) against PyMC's NUTS, through
``m.fit``.

Needs the ``bambi`` extra (``pip install -e ".[bambi]"``; Bambi is not in the test
environment). Data: ``N`` rows (about 20,000 at the default size) in ``G = 40`` groups of
heavy-tailed size (Pareto(1.2) x 300, at least one row; five groups of 1, 2, 3, 5 and 8
rows), one standard-normal covariate ``x``, group intercepts ``a_g ~ Normal(0, 0.6)`` and
``eta = -0.4 + 0.7 x + a[g]``. Per family (``bernoulli``: ``y ~ x + (1|g)``; ``poisson``:
``c ~ x + (1|g)``; ``gaussian``: ``z ~ x + (1|g)`` with ``sigma = 1.3``; and three Normal
models with several group terms, which run the exact Gaussian sweep:
``gaussian_crossed``: ``w ~ x + (1|g) + (1|h)``, ``h`` a factor of 12 levels crossed with
``g``, effects sd 0.4; ``gaussian_slope``: ``v ~ x + (x|g)``, slopes sd 0.3 (Bambi's
``(x|g)`` is an intercept and a slope per group with independent scales);
``gaussian_nested``: ``u ~ x + (1|g/k)``, ``k`` 1-6 levels in each group, effects sd
0.5), the Bambi model (its own default priors) is fitted twice, one process, one chain
after the other:

* the reference: ``m.fit()`` with PyMC's NUTS, 2 chains x (1,000 tune + 2,000 draws);
* ``pms.ScalableMH()`` built in ``m.backend.model`` and passed as ``m.fit(step=...)``,
  2 chains x (1,000 tune + 1,000 draws); its construction is inside the timed region.

Printed per model: each fit's wall time, the smallest bulk ESS and the largest R-hat
over every posterior variable but Bambi's offsets and ``mu`` (the fixed effects, the
scales and every group effect);
the quantities whose ScalableMH mean is off the reference's by more than ``0.1 sd + 4
MCSE`` (MCSEs of both runs combined, unrounded) or whose sd ratio is outside
0.8-1.25; and the time ratio. The reference is a 4,000-draw NUTS run, not a long one:
a check of agreement, not of exactness (the exactness checks are the plain forms'
tests against long NUTS, which these models run draw for draw:
``tests/steps/test_model_idioms.py``).

    python benchmarks/bambi_models.py [--families bernoulli poisson gaussian gaussian_crossed
                                                  gaussian_slope gaussian_nested]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

FORMULAS = {"bernoulli": "y ~ x + (1|g)", "poisson": "c ~ x + (1|g)",
            "gaussian": "z ~ x + (1|g)",
            # several group terms of a Normal likelihood (the exact Gaussian sweep)
            "gaussian_crossed": "w ~ x + (1|g) + (1|h)",
            "gaussian_slope": "v ~ x + (x|g)",
            "gaussian_nested": "u ~ x + (1|g/k)"}
#: the Bambi family of each entry of FORMULAS
FAMILY = {"gaussian_crossed": "gaussian", "gaussian_slope": "gaussian",
          "gaussian_nested": "gaussian"}


def data(seed=3, n_groups=40):
    """The data frame of the module docstring."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    sizes = np.maximum(1, (rng.pareto(1.2, n_groups) * 300).astype(int))
    sizes[:5] = [1, 2, 3, 5, 8]
    g = np.repeat(np.arange(n_groups), sizes)
    rng.shuffle(g)
    x = rng.normal(size=g.size)
    eta = -0.4 + 0.7 * x + rng.normal(0, 0.6, n_groups)[g]
    df = pd.DataFrame({"g": [f"L{k:02d}" for k in g], "x": x})
    df["y"] = (rng.random(g.size) < 1 / (1 + np.exp(-eta))).astype(int)
    df["c"] = rng.poisson(np.exp(eta))
    df["z"] = eta + rng.normal(0, 1.3, g.size)
    # the models with several group terms (drawn after the columns above, which keep
    # their values): a factor h of 12 levels crossed with g, a slope on x per group of g,
    # and a factor k of 1-6 levels nested in each group of g
    n_h = 12
    h = rng.integers(0, n_h, g.size)
    k = (rng.random(g.size) * rng.integers(1, 7, n_groups)[g]).astype(int)
    df["h"] = [f"H{v:02d}" for v in h]
    df["k"] = [f"K{v}" for v in k]
    base = eta + rng.normal(0, 1.3, g.size)
    df["w"] = base + rng.normal(0, 0.4, n_h)[h]
    df["v"] = base + rng.normal(0, 0.3, n_groups)[g] * x
    nested = rng.normal(0, 0.5, (n_groups, 6))
    df["u"] = base + nested[g, k]
    return df


def fit(df, family, with_step):
    """``(seconds, idata)`` of one fit (module docstring)."""
    import bambi as bmb

    import pymc_subsample as pms

    m = bmb.Model(FORMULAS[family], df, family=FAMILY.get(family, family))
    m.build()
    t0 = time.perf_counter()
    if with_step:
        with m.backend.model:
            step = pms.ScalableMH()
        idata = m.fit(step=step, draws=1000, tune=1000, chains=2, cores=1, random_seed=1,
                      progressbar=False)
    else:
        idata = m.fit(draws=2000, tune=1000, chains=2, cores=1, random_seed=1,
                      progressbar=False)
    return time.perf_counter() - t0, idata


def compare(ref, got):
    """The quantities outside ``0.1 sd + 4 MCSE`` or the sd ratios 0.8-1.25, the smallest
    bulk ESS and the largest R-hat of ``got``."""
    import arviz as az

    names = [v for v in ref.posterior.data_vars  # every variable but the offsets and mu
             if not v.endswith("_offset") and v != "mu"]
    r = az.summary(ref, var_names=names, round_to="none")
    s = az.summary(got, var_names=names, round_to="none")
    bad = []
    for k in r.index:
        tol = 0.1 * r.loc[k, "sd"] + 4 * np.hypot(r.loc[k, "mcse_mean"], s.loc[k, "mcse_mean"])
        off = abs(s.loc[k, "mean"] - r.loc[k, "mean"])
        ratio = s.loc[k, "sd"] / r.loc[k, "sd"]
        if off > tol or not 0.8 <= ratio <= 1.25:
            bad.append(f"{k}: off {off / r.loc[k, 'sd']:.3f} sd (tol {tol / r.loc[k, 'sd']:.3f}),"
                       f" sd ratio {ratio:.3f}")
    return len(r), bad, float(s["ess_bulk"].min()), float(s["r_hat"].max())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(FORMULAS), choices=FORMULAS)
    args = parser.parse_args(argv)
    import pymc

    df = data()
    print(f"PyMC {pymc.__version__}; N = {len(df)} rows, 40 groups (crossed with 12, "
          f"{df.groupby('g')['k'].nunique().sum()} nested levels)")
    for family in args.families:
        t_ref, ref = fit(df, family, False)
        t_got, got = fit(df, family, True)
        n, bad, ess, rhat = compare(ref, got)
        print(f"{family}: NUTS {t_ref:.1f} s, ScalableMH {t_got:.1f} s "
              f"(x{t_ref / t_got:.1f} wall; draws 4,000 vs 2,000); ScalableMH min bulk ESS "
              f"{ess:.0f}, max R-hat {rhat:.3f}; {n} quantities, {len(bad)} outside")
        for line in bad:
            print("   ", line)


if __name__ == "__main__":
    main()
