"""Variance reduction for the Austerity test: El hanchi's options against Taylor control
variates (the analogue of Table 1 of El hanchi 2019, "Adaptive subsampling...", for the MH
test's log-likelihood-ratio estimate instead of SGLD's gradient).

On a 10-feature logistic regression (N = 14,780 by default, the size of El hanchi's data
set; synthetic stand-in) it prints, per estimator of ``sum_i l_i`` from a minibatch of
``n = 500`` rows:

* the variance of the estimate at posterior-scale pairs ``(theta, theta')`` (pairs of
  consecutive states and proposals of an exact chain, averaged), computed exactly over all
  rows: uniform sampling without replacement ``N^2 (1 - n/N) S^2 / n``; importance
  sampling ``(sum_i t_i^2 / p_i - (sum_i t_i)^2) / n``. SAGA's stored gradients are taken
  at an independent posterior draw (at stationarity a row's stored gradient is about
  ``N / n`` steps old, i.e. from an effectively independent state);
* the rows read per step, acceptance rate, min ESS and ESS/s of AustereMH run with that
  option (2 chains x (500 tune + 1500 draws)), and its largest posterior-mean error
  against ScalableMH (exact).

Run: python benchmarks/variance_reduction.py [--quick] [--rows N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

OPTIONS = [
    ("plain (paper)", dict(control_variate=0)),
    ("importance (IS)", dict(control_variate=0, sampling="importance")),
    ("SAGA", dict(control_variate="saga")),
    ("IS-SAGA", dict(control_variate="saga", sampling="importance")),
    ("Taylor order 1", dict(control_variate=1)),
    ("Taylor order 2 (default)", dict(control_variate=2)),
]


def estimator_variances(eng, step2, pairs, old_states, n=500):
    """Mean variance of each estimator of sum_i l_i over the pairs (see module doc)."""
    from pymc_subsample.kernels.variance.control_variates import importance_weights, residuals

    N = eng.n_rows
    rows = np.arange(N)
    c = step2.center.theta
    _, g_c = eng.loglik_rows_grad(c, rows, chunk=8192)
    z = np.random.default_rng(0).standard_normal(c.size)
    _, g_m = eng.loglik_rows_grad(c + step2._laplace_chol @ z, rows, chunk=8192)
    p = importance_weights(g_c, g_m)
    p = p / p.sum()
    out = {k: [] for k, _ in OPTIONS}
    for (q, qp), old in zip(pairs, old_states):
        u = qp - q
        t2 = eng.loglik_diff_taylor(q, qp, c, rows, 2)
        plain = t2[0]
        _, g_old = eng.loglik_rows_grad(old, rows, chunk=8192)
        saga = plain - g_old @ u
        terms = {
            "plain (paper)": (plain, False),
            "importance (IS)": (plain, True),
            "SAGA": (saga, False),
            "IS-SAGA": (saga, True),
            "Taylor order 1": (residuals(t2[:2]), False),
            "Taylor order 2 (default)": (residuals(t2), False),
        }
        for k, (t, iid) in terms.items():
            if iid:
                v = (np.sum(t * t / p) - t.sum() ** 2) / n
            else:
                v = N * N * (1 - n / N) * t.var(ddof=1) / n
            out[k].append(v)
    return {k: float(np.mean(v)) for k, v in out.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=14_780)
    ap.add_argument("--quick", action="store_true", help="fewer draws and pairs")
    ap.add_argument("--out", default=str(HERE / "output"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    draws, tune, n_pairs = (400, 200, 10) if args.quick else (1500, 500, 40)

    import arviz as az
    import pymc as pm

    import pymc_subsample as pms
    from pymc_subsample.datasets import make_logistic
    from pymc_subsample.diagnostics import convergence, posterior_moments

    X, y, _ = make_logistic(args.rows, 10)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=10)
        pm.Bernoulli("y", logit_p=X @ beta, observed=y)

    def run(make):
        t0 = time.perf_counter()
        with model:
            step = make()
            idata = pm.sample(draws, tune=tune, step=step, chains=2, cores=2, random_seed=11,
                              progressbar=False, compute_convergence_checks=False)
        return step, idata, time.perf_counter() - t0

    ref_step, ref, _ = run(lambda: pms.ScalableMH())
    ref_mean, ref_sd, _ = posterior_moments(ref)

    # posterior-scale pairs: states of the exact chain and proposals of the default step
    post = az.extract(ref, var_names="beta").values.T  # (draws, 10)
    rng = np.random.default_rng(5)
    with model:
        step2 = pms.AustereMH()
    pairs, olds = [], []
    for k in rng.choice(post.shape[0], size=n_pairs, replace=False):
        q = post[k]
        step2.proposal.reset()
        step2.proposal.stop_tuning()
        pairs.append((q, step2.proposal.draw(q, rng)[0]))
        olds.append(post[rng.integers(post.shape[0])])
    var = estimator_variances(step2.engine, step2, pairs, olds)

    header = (f"{'estimator':<26}{'Var(sum est.)':>15}{'vs plain':>10}{'rows/step':>11}"
              f"{'accept':>8}{'min ESS':>9}{'ESS/s':>9}{'max err/sd':>12}")
    lines = [f"logistic regression, N = {args.rows:,}, d = 10, first batch n = 500; "
             f"{n_pairs} posterior-scale pairs; AustereMH chains 2 x ({tune} + {draws})",
             header, "-" * len(header)]
    for name, kw in OPTIONS:
        _, idata, wall = run(lambda kw=kw: pms.AustereMH(**kw))
        ess, _ = convergence(idata)
        mean, _, _ = posterior_moments(idata)
        st = idata.sample_stats if hasattr(idata, "sample_stats") else idata["sample_stats"]
        used = float(np.mean(st["data_used"].values))
        acc = float(np.mean(st["accepted"].values))
        err = float(np.max(np.abs(mean - ref_mean) / ref_sd))
        lines.append(f"{name:<26}{var[name]:>15.3g}{var[name] / var['plain (paper)']:>10.2g}"
                     f"{used:>11,.0f}{acc:>8.2f}{ess:>9.0f}{ess / wall:>9.1f}{err:>12.3f}")
        print(lines[-1], flush=True)
    table = "\n".join(lines)
    print("\n" + table)
    (Path(args.out) / "variance_reduction.txt").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
