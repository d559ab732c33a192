"""Draws of every step configuration for fixed seeds, saved or compared: the check that a
refactoring leaves the chains unchanged.

    python benchmarks/draws_fingerprint.py --save /tmp/before.npz     # on the old code
    python benchmarks/draws_fingerprint.py --compare /tmp/before.npz  # on the new code

Each configuration samples one chain (150 tuning draws, 100 kept, ``random_seed=1``) on a
small model and keeps its posterior draws and the stats ``accepted`` and ``data_used``.
``--compare`` prints, per configuration, whether the draws are bit-for-bit equal, and
otherwise the largest difference in posterior sds; it exits 1 if any differs.
"""

from __future__ import annotations

import argparse
import sys
import warnings

import numpy as np
import pymc as pm

import pymc_subsample as pms
from pymc_subsample.proposals import Langevin

TUNE, DRAWS = 150, 100


def logistic(n=3000, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ np.linspace(-1, 1, d)))).astype(float)
    with pm.Model() as m:
        b = pm.Normal("b", 0, 2, shape=d)
        pm.Bernoulli("y", logit_p=X @ b, observed=y)
    return m


def normal_scale(n=3000, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    y = 0.5 + 1.5 * x + 0.7 * rng.standard_normal(n)
    with pm.Model() as m:
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 5)
        s = pm.HalfNormal("s", 2)
        pm.Normal("y", a + b * x, s, observed=y)
    return m


def poisson(n=3000, seed=2):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    y = rng.poisson(np.exp(0.3 + X @ np.array([0.4, -0.2])))
    with pm.Model() as m:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 2, shape=2)
        pm.Poisson("y", mu=pm.math.exp(a + X @ b), observed=y)
    return m


def hier_nc(n=3000, groups=6, seed=3):
    rng = np.random.default_rng(seed)
    g = rng.integers(0, groups, n)
    x = rng.standard_normal(n)
    eta = 0.3 * x + rng.normal(0, 0.8, groups)[g]
    y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)
    with pm.Model() as m:
        mu = pm.Normal("mu", 0, 2)
        tau = pm.HalfNormal("tau", 1)
        z = pm.Normal("z", 0, 1, shape=groups)
        b = pm.Normal("b", 0, 2)
        pm.Bernoulli("y", logit_p=b * x + (mu + tau * z)[g], observed=y)
    return m


MODELS = {"logistic": logistic, "normal_scale": normal_scale, "poisson": poisson,
          "hier_nc": hier_nc}

CONFIGS = {
    "austere_cv2": ("logistic", lambda: pms.AustereMH()),
    "austere_cv1": ("logistic", lambda: pms.AustereMH(control_variate=1)),
    "austere_cv0": ("logistic", lambda: pms.AustereMH(control_variate=0, batch_size=300)),
    "austere_saga": ("logistic", lambda: pms.AustereMH(control_variate="saga")),
    "austere_is": ("logistic", lambda: pms.AustereMH(sampling="importance")),
    "austere_is_cv0": ("logistic",
                       lambda: pms.AustereMH(sampling="importance", control_variate=0)),
    "austere_recenter_audit": ("logistic",
                               lambda: pms.AustereMH(recenter=True, audit=0.2)),
    "austere_langevin_cv": ("logistic", lambda: pms.AustereMH(
        proposal=Langevin(gradient="cv", batch_size=100))),
    "austere_langevin_saga": ("logistic", lambda: pms.AustereMH(
        proposal=Langevin(gradient="saga", batch_size=100))),
    "austere_langevin_plain": ("logistic", lambda: pms.AustereMH(proposal="langevin")),
    "austere_max_error": ("logistic", lambda: pms.AustereMH(max_error=0.05)),
    "austere_hier": ("hier_nc", lambda: pms.AustereMH()),
    "austere_normal": ("normal_scale", lambda: pms.AustereMH()),
    "barker_cv2": ("logistic", lambda: pms.BarkerMinibatch()),
    "barker_cv0": ("logistic", lambda: pms.BarkerMinibatch(control_variate=0)),
    "barker_saga": ("logistic", lambda: pms.BarkerMinibatch(control_variate="saga")),
    "barker_temp": ("logistic", lambda: pms.BarkerMinibatch(temperature=2.0, steps_per_draw=1)),
    "barker_hier": ("hier_nc", lambda: pms.BarkerMinibatch()),
    "smh_o2": ("logistic", lambda: pms.ScalableMH()),
    "smh_o1": ("logistic", lambda: pms.ScalableMH(order=1)),
    "smh_o2_poisson_test": ("logistic", lambda: pms.ScalableMH(data_test="poisson")),
    "smh_global": ("logistic", lambda: pms.ScalableMH(region=None)),
    "smh_cornish": ("logistic", lambda: pms.ScalableMH(bound_form="cornish")),
    "smh_rw": ("logistic", lambda: pms.ScalableMH(proposal="random_walk")),
    "smh_reversible": ("logistic", lambda: pms.ScalableMH(proposal="reversible", order=1)),
    "smh_user_bounds": ("logistic", lambda: pms.ScalableMH(
        bounds=np.full(3000, 50.0), order=1)),
    "smh_poisson": ("poisson", lambda: pms.ScalableMH()),
    "smh_normal": ("normal_scale", lambda: pms.ScalableMH()),
    "smh_hier": ("hier_nc", lambda: pms.ScalableMH()),
    "smh_langevin": ("logistic", lambda: pms.ScalableMH(
        proposal=Langevin(gradient="cv", batch_size=100))),
    "sgld_cv": ("logistic", lambda: pms.SGLD()),
    "sgld_minibatch": ("logistic", lambda: pms.SGLD(gradient="minibatch")),
    "sgld_saga": ("logistic", lambda: pms.SGLD(gradient="saga")),
    "sgld_is": ("logistic", lambda: pms.SGLD(gradient="is")),
    "sgld_is_saga": ("logistic", lambda: pms.SGLD(gradient="is_saga")),
    "sgld_decreasing": ("logistic", lambda: pms.SGLD(schedule="decreasing")),
    "sgld_plain": ("logistic", lambda: pms.SGLD(gradient="minibatch", precondition=False,
                                                step_size=1e-4)),
    "sgld_hier": ("hier_nc", lambda: pms.SGLD(hierarchical="allow")),
}


def run(name):
    model_name, make = CONFIGS[name]
    with MODELS[model_name]():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            step = make()
            idata = pm.sample(tune=TUNE, draws=DRAWS, chains=1, cores=1, step=step,
                              random_seed=1, progressbar=False,
                              compute_convergence_checks=False)
    post = idata["posterior"]
    stats = idata["sample_stats"]
    out = {f"{name}/{v}": np.asarray(post[v]) for v in post.data_vars}
    for s in ("accepted", "data_used"):
        if s in stats:
            out[f"{name}/stat_{s}"] = np.asarray(stats[s])
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--save")
    g.add_argument("--compare")
    p.add_argument("--only", nargs="*", help="configurations to run (default: all)")
    a = p.parse_args(argv)
    names = a.only or list(CONFIGS)
    res = {}
    for name in names:
        try:
            res.update(run(name))
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"{name}: ERROR {type(e).__name__}: {e}", flush=True)
            res[f"{name}/error"] = np.array(repr(e))
    if a.save:
        np.savez(a.save, **res)
        print(f"saved {len(names)} configurations to {a.save}")
        return 0
    ref = dict(np.load(a.compare))
    bad = 0
    for name in names:
        keys = sorted(k for k in ref if k.startswith(name + "/"))
        new = sorted(k for k in res if k.startswith(name + "/"))
        if keys != new:
            print(f"{name}: DIFFERENT outputs {keys} vs {new}")
            bad += 1
            continue
        worst, equal = 0.0, True
        for k in keys:
            x, y = ref[k], res[k]
            if x.dtype.kind in "fiub":
                if not np.array_equal(x, y):
                    equal = False
                    sd = float(np.std(x)) or 1.0
                    worst = max(worst, float(np.max(np.abs(x - y))) / sd)
            elif str(x) != str(y):
                equal = False
                worst = np.inf
        print(f"{name}: {'identical' if equal else f'DIFFERENT (max {worst:.3g} sd)'}",
              flush=True)
        bad += not equal
    print(f"{len(names) - bad} of {len(names)} identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
