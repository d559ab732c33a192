"""El hanchi (2019), SGLD and its variance-reduced gradients, on a stand-in for his data.

Reproduces the stochastic-gradient Langevin findings of "Scaling up MCMC for Bayesian
inference using adaptive data subsampling" (El hanchi 2019, Sec. 2, 4 and 5, Table 1)
with ``pms.SGLD``:

1. full-gradient Langevin (LD) at his step size ``epsilon = 0.005`` is stable and its
   stationary distribution matches the posterior (his Figure 3);
2. SGLD with plain minibatch gradients at the same step is visibly biased (Figure 4,
   Figures 6-7);
3. SAGA-LD at ``epsilon = 5e-4`` converges to the posterior (Figure 8), at the price of a
   much higher autocorrelation (Figure 9);
4. Table 1: the variance of the gradient estimator along its largest principal component
   is the same for every estimator at ``epsilon = 0.005`` and drops for the SAGA
   estimators at smaller steps (SGLD 1000/1000/1000, SAGA 1000/200/100, IS 1000/1000/1000,
   IS-SAGA 1000/300/150 at ``epsilon`` = 5e-3/5e-4/5e-5; "approximate values").

A fifth column is added: the Taylor control variates about the posterior mode of Baker,
Fearnhead, Fox & Nemeth (2019), "Control variates for stochastic gradient MCMC"
(``gradient="cv"``, the step's default).

Stand-in data
-------------
His data are the MNIST digits 0 and 1 projected on their first 10 principal components
(N = 14,780 rows, d = 10), a logistic regression without intercept and a N(0, I) prior.
The stand-in keeps N, d, the model and the prior, and imitates the two features of PCA
scores of two well-separated digit classes that drive the findings:

* features: a latent class (share 7,877 / 14,780 of "ones", as in MNIST) shifts the first
  latent coordinate by +-``MU`` = +-4 with a within-class sd ``S1`` = 1; the other nine
  latent coordinates are N(0, sd^2) with sds decreasing geometrically from 2 to 0.5. The
  rows are centred and rotated onto their principal axes (an actual PCA, so the columns
  are uncorrelated and sorted by variance): sds ~4.1 (bimodal first score), 2.0, ..., 0.5;
* labels: ``y_i ~ Bernoulli(sigmoid(x_i . beta_true))`` with ``beta_true`` along the
  classes' mean difference and ``|beta_true| = 4`` (logits near +-16 at the class
  centres: a well-separated logistic model). Seed ``SEED`` = 1.

The classes are nearly separable (2 rows misclassified at the mode): a handful of rows
near the decision boundary set both the posterior's curvature and the gradient noise.
The mode's Hessian has eigenvalues 2.0 to 22.7 (posterior variances along its principal
axes 0.05 to 0.50; El hanchi quotes ~1 for the largest) and the plain minibatch
estimator's covariance at the mode has its largest eigenvalue 1.7e3 (Table 1: ~1e3).
What was tuned (``MU``, ``S1``, the sds of the other scores and ``|beta_true|``), and why:

* LD at ``epsilon = 0.005`` is accurate only if ``epsilon * lambda_max(Hessian)`` is small
  (here 0.11). With Gaussian features (sds 5 to 0.5) and logistic labels, i.e. no gap
  between the classes, the curvature is 2e3-2e4 and LD diverges at his step size;
* the gradient noise must be large enough for SGLD to fail at 0.005 (relative excess
  variance ``epsilon * lambda_max(Var) / 2`` ~4 at the mode), and SAGA needs stored
  gradients that stay useful over the N/S ~ 121 transitions between refreshes of a row,
  which requires a posterior that is not too steep. With the other scores' sds running
  from 3.9 (instead of 2) to 0.5, the curvature was ~60 and SAGA at 5e-4 only 1.5x less
  noisy than SGLD, its chain ~20% too wide along the steepest direction.

Seeds 0-3 of the final design give 19-30 for the curvature and 1.0e3-3.0e3 for the noise;
seed 1 is typical.

Conventions
-----------
El hanchi's update is ``theta' = theta - eps grad U(theta) + N(0, 2 eps)`` with ``U``
minus the log posterior. ``pms.SGLD`` moves ``q' = q + (h/2) M g_hat + sqrt(h) F xi``;
with ``precondition=False`` (``M = F = I``) and ``step_size = h = 2 eps`` the two are the
same update. Step sizes are quoted in his ``eps`` and ``h = 2 eps`` is given beside them.
LD is ``gradient="minibatch"`` with ``batch_size = N`` (exact gradients); every other chain
reads S = ceil(sqrt(N)) = 122 rows per transition (``steps_per_draw=1``, ``tune=0``) and
starts at the posterior mode (Newton's method on all rows). The SAGA store and the
importance weights are initialised at the mode.

The package's ``"is"`` and ``"is_saga"`` draw rows with probabilities proportional to
``||grad_i(mode)|| + L_i s`` (his Sec. 5.1 weights, fixed at the mode, 10% uniform),
not with the Lipschitz weights ``p_i ~ L_i`` of his Table 1 IS column: they are closer to
his "modified SGLD" (Sec. 5.2.2, whose variance he reports 2 orders of magnitude lower at
0.005) than to his IS column.

Measured
--------
* Reference: PyMC NUTS, 4 chains x 2,000 draws after 1,000 tuning steps (seed 20190501),
  cached in ``benchmarks/output/cache/``, and checked against self-normalised importance
  sampling from a Laplace-centred multivariate t (written in NumPy).
* Table 1: ``lambda_max(Var(g_hat))`` along each estimator's own chain over the first
  5,000 transitions from the mode, at ``eps`` = 5e-3, 5e-4, 5e-5: the chain mean of the
  step's batch estimate (``4 noise_ratio / h``, the ``noise_ratio`` sample stat) and the
  exact value from all N per-row gradients at 50 states of the chain (every 100
  transitions; SAGA's store and the importance probabilities read from the live step).
  The step's estimate is ``lambda_max`` of a running average of the batches' covariance
  estimates over the last 200 transitions; it lags the chain's move away from the mode
  and came out 0.36-1.2x the exact value in the full run (0.8-1.1x for SGLD and SAGA at
  the two smaller steps). The exact value is the quantity of Table 1.
* Error table (his Figures 6-7 after 5,000 iterations): 2-norm error of the mean and of
  the vector of marginal variances, max |mean error| / posterior sd, min and max sd
  ratio, sd ratio along the posterior's smallest- and largest-variance directions, and the
  minimum ESS (ArviZ) of the coordinates. ``mc = 1/sqrt(min ESS)`` is the Monte Carlo
  scale of an error in posterior sds; at ``eps`` = 5e-5 no chain (LD included) has mixed
  in 5,000 transitions, so those rows measure the start at the mode, not a bias.
* Bias against step size: longer chains (``--draws``, default 50,000, the first 5,000
  discarded; LD 30,000 at four steps, its transitions cost ~15x a minibatch's) at 8 step
  sizes from 5e-5 to 1e-2. The posterior's largest-variance direction relaxes in about
  ``1 / (2 eps)`` transitions, so below ``eps ~ 5e-4`` even these chains have few
  effective draws along it: there, max |mean error| and the coordinates' sd ratios
  measure the start at the mode as much as a bias (the LD line and the ``mc`` floor show
  how much). The sd ratio along the smallest-variance direction, where the gradient noise
  acts, mixes ~10x faster and is the cleaner measure of the noise's bias.

Figures in ``benchmarks/output/``: ``elhanchi_marginals.png`` (his Figures 3, 4, 8:
densities of LD at 0.005, SGLD at 0.005 and SAGA-LD at 5e-4 after 5,000 discarded
transitions, along the posterior's largest- and smallest-variance directions, against
the reference), ``elhanchi_bias_vs_step.png`` (max |mean error| / sd, the sd ratio along
the smallest-variance direction and the largest coordinate sd ratio against ``h``, one line
per estimator and one for LD) and ``elhanchi_acf.png`` (his Figure 9).
Tables: stdout and ``benchmarks/output/elhanchi.csv``.

Run: OPENBLAS_NUM_THREADS=1 python benchmarks/elhanchi.py [--quick]
     (--quick: 6,000 transitions per chain, 4 step sizes, LD at 5e-4 and 5e-3 only, the
     first 1,000 discarded; ~1.5 minutes. The full run takes ~12 minutes; the NUTS
     reference adds ~1.5 minutes to the first run)

Outcome of the full run: LD at 0.005 matches the reference (max |mean error| 0.10 sd, sd
ratios 0.90-1.00); SGLD at 0.005 does not (3.5 sd, sd 3x too wide along the steepest
direction); SAGA-LD at 5e-4 does (0.23 sd, sd ratios 0.88-1.05) with LD-at-5e-4's
autocorrelation, ~10x longer than LD at 0.005. Table 1's pattern holds for SAGA (no gain
at 5e-3, 4x at 5e-4, 16x at 5e-5 in the exact variance; his 1x/5x/10x); the package's
IS and IS-SAGA are 2-3 orders of magnitude below SGLD at every step and unbiased up to
eps = 0.01, which is his Sec. 5.2.4 claim, not his IS column. CV is unbiased up to
eps = 2e-3 and biased at 5e-3 (sd ~1.5x too wide along the steepest direction).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import time
import warnings
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from pymc_subsample.testing import ess  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE / "output"
CACHE = OUT / "cache"

# ---- the stand-in (see the module docstring)
N_ROWS = 14_780
DIM = 10
SHARE_ONES = 7_877 / 14_780
MU = 4.0            # half the class separation along the first latent coordinate
S1 = 1.0            # within-class sd along it
PC_SD = (2.0, 0.5)  # sds of the other nine latent coordinates, geometric
BETA_NORM = 4.0     # |beta_true|
SEED = 1
BATCH = math.ceil(math.sqrt(N_ROWS))  # 122

# ---- the experiment
EPS_TABLE = (5e-3, 5e-4, 5e-5)
EPS_SWEEP = (5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2)
EPS_SWEEP_QUICK = (5e-5, 5e-4, 5e-3, 1e-2)
EPS_LD = (5e-5, 5e-4, 5e-3, 1e-2)
EPS_LD_QUICK = (5e-4, 5e-3)
TABLE_ITERS = 5_000
EXACT_EVERY = 100
ESTIMATORS = ("minibatch", "saga", "is", "is_saga", "cv")
LABEL = {"ld": "LD", "minibatch": "SGLD", "saga": "SAGA", "is": "IS", "is_saga": "IS-SAGA",
         "cv": "CV"}
# El hanchi's Table 1 ("approximate values"), eps -> estimator -> value
PUBLISHED = {
    5e-3: {"minibatch": 1000, "saga": 1000, "is": 1000, "is_saga": 1000},
    5e-4: {"minibatch": 1000, "saga": 200, "is": 1000, "is_saga": 300},
    5e-5: {"minibatch": 1000, "saga": 100, "is": 1000, "is_saga": 150},
}
NUTS_REF = {"chains": 4, "draws": 2000, "tune": 1000, "target_accept": 0.9, "seed": 20190501}


# ---------------------------------------------------------------------------------------
# data, model, mode
# ---------------------------------------------------------------------------------------


def standin_data(seed=SEED):
    """``(X, y, beta_true)``: the PCA-score stand-in for MNIST 0 vs 1 (module docstring)."""
    rng = np.random.default_rng(seed)
    cls = np.where(rng.random(N_ROWS) < SHARE_ONES, 1.0, -1.0)
    z = rng.standard_normal((N_ROWS, DIM))
    z[:, 1:] *= np.geomspace(PC_SD[0], PC_SD[1], DIM - 1)
    z[:, 0] = cls * MU + S1 * rng.standard_normal(N_ROWS)
    z -= z.mean(axis=0)
    # principal axes: uncorrelated columns sorted by variance, each sign fixed so that its
    # largest |score| is positive
    _, _, vt = np.linalg.svd(z, full_matrices=False)
    x = z @ vt.T
    x *= np.sign(x[np.abs(x).argmax(axis=0), np.arange(DIM)])
    diff = x[cls > 0].mean(axis=0) - x[cls < 0].mean(axis=0)
    beta_true = BETA_NORM * diff / np.linalg.norm(diff)
    y = (rng.random(N_ROWS) < 1.0 / (1.0 + np.exp(-(x @ beta_true)))).astype(np.int64)
    return x, y, beta_true


def build_model(x, y):
    import pymc as pm

    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 1.0, shape=DIM)
        pm.Bernoulli("y", logit_p=pm.math.dot(x, beta), observed=y)
    return model


def sigmoid(t):
    return 0.5 * (1.0 + np.tanh(0.5 * t))


def row_grads(x, y, q):
    """Per-row gradients of ``log p(y_i | x_i, q)``, ``(N, d)``."""
    return (y - sigmoid(x @ q))[:, None] * x


def log_post(x, y, thetas):
    """Log posterior (up to a constant) at each row of ``thetas``, ``(k,)``."""
    out = np.empty(len(thetas))
    for s in range(0, len(thetas), 1000):
        eta = thetas[s:s + 1000] @ x.T
        out[s:s + 1000] = (y * eta - np.logaddexp(0.0, eta)).sum(1) - 0.5 * (
            thetas[s:s + 1000] ** 2).sum(1)
    return out


def posterior_mode(x, y):
    """``(mode, hessian of U at the mode)`` by Newton's method on all rows."""
    q = np.zeros(DIM)
    for _ in range(100):
        p = sigmoid(x @ q)
        grad = x.T @ (y - p) - q
        hess = (x * (p * (1 - p))[:, None]).T @ x + np.eye(DIM)
        step = np.linalg.solve(hess, grad)
        q = q + step
        if np.max(np.abs(step)) < 1e-12:
            break
    p = sigmoid(x @ q)
    return q, (x * (p * (1 - p))[:, None]).T @ x + np.eye(DIM)


# ---------------------------------------------------------------------------------------
# exact estimator covariance
# ---------------------------------------------------------------------------------------


def exact_lambda(name, x, y, q, *, grads_center=None, store=None, p=None, batch=BATCH):
    """Largest eigenvalue of the exact covariance of the estimator ``name`` of
    ``sum_i grad log p(y_i | q)`` from all N per-row gradients (the estimators' forms are
    those of El hanchi Sec. 4.1 and 4.3 and Baker et al. Algorithm 2)."""
    n = x.shape[0]
    g = row_grads(x, y, q)
    if name in ("minibatch", "cv", "saga", "ld"):
        if name == "ld":
            return 0.0
        base = {"minibatch": 0.0, "cv": grads_center, "saga": store}[name]
        z = n * (g - base)
        # mean of `batch` draws without replacement: population covariance (divisor n)
        # times (n - m) / ((n - 1) m)
        cov = np.cov(z.T, ddof=0) * (n - batch) / ((n - 1) * batch)
    else:
        u = g - (store if name == "is_saga" else 0.0)
        # i.i.d. draws of u_i / p_i: E[z z'] - E[z] E[z]', E[z] = sum_i u_i
        total = u.sum(axis=0)
        cov = ((u / p[:, None]).T @ u - np.outer(total, total)) / batch
    return float(np.linalg.eigvalsh(cov)[-1])


# ---------------------------------------------------------------------------------------
# reference
# ---------------------------------------------------------------------------------------


def _cache_key():
    return (f"elhanchi-ref-n{N_ROWS}-d{DIM}-mu{MU}-s{S1}-pc{PC_SD[0]}_{PC_SD[1]}-b{BETA_NORM}"
            f"-seed{SEED}-nuts{NUTS_REF['chains']}x{NUTS_REF['draws']}t{NUTS_REF['tune']}"
            f"a{NUTS_REF['target_accept']}s{NUTS_REF['seed']}")


def nuts_reference(model):
    """NUTS draws ``(chains * draws, d)``, min ESS and max R-hat; cached."""
    import arviz as az
    import pymc as pm

    from pymc_subsample.diagnostics import get_group

    path = CACHE / f"{_cache_key()}.npz"
    if path.exists():
        f = np.load(path)
        return f["draws"], float(f["min_ess"]), float(f["max_rhat"]), True
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(draws=NUTS_REF["draws"], tune=NUTS_REF["tune"],
                          chains=NUTS_REF["chains"], cores=1,
                          target_accept=NUTS_REF["target_accept"], random_seed=NUTS_REF["seed"],
                          progressbar=False, compute_convergence_checks=False)
    beta = np.asarray(get_group(idata, "posterior")["beta"].values)  # (chains, draws, d)
    min_ess = min(ess(beta[:, :, j], method="bulk") for j in range(DIM))
    max_rhat = max(float(az.rhat(beta[:, :, j])) for j in range(DIM))
    draws = beta.reshape(-1, DIM)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.savez(path, draws=draws, min_ess=min_ess, max_rhat=max_rhat)
    return draws, min_ess, max_rhat, False


def is_crosscheck(x, y, mode, hess, n=20_000, nu=5, seed=7):
    """Self-normalised importance sampling from a multivariate t (``nu`` degrees of
    freedom) at the mode with the inverse Hessian as scale: ``(mean, cov, ESS, Pareto k)``."""
    import arviz as az
    from scipy import stats

    cov = np.linalg.inv(hess)
    prop = stats.multivariate_t(loc=mode, shape=cov, df=nu, seed=seed)
    t = prop.rvs(size=n)
    logw = log_post(x, y, t) - prop.logpdf(t)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, khat = az.psislw(logw.copy())
    w = np.exp(logw - logw.max())
    w /= w.sum()
    mean = w @ t
    c = ((t - mean) * w[:, None]).T @ (t - mean)
    return mean, c, 1.0 / np.sum(w**2), float(np.asarray(khat))


# ---------------------------------------------------------------------------------------
# chains
# ---------------------------------------------------------------------------------------


def run_chain(model, x, y, mode, method, eps, draws, seed, *, exact=False):
    """One chain of ``pms.SGLD`` from the mode; ``method`` is an estimator or ``"ld"``.

    Returns a dict: ``draws`` (T, d), ``lam`` (T,): the batch estimate of
    ``lambda_max(Var(g_hat))`` per transition, ``stuck``: number of transitions that stayed
    because a gradient was not finite, ``exact``: exact ``lambda_max`` at states every
    ``EXACT_EVERY`` transitions within the first ``TABLE_ITERS`` (if ``exact``), seconds.
    """
    import pymc as pm

    import pymc_subsample as pms
    from pymc_subsample.diagnostics import get_group

    h = 2.0 * eps
    gradient = "minibatch" if method == "ld" else method
    batch = N_ROWS if method == "ld" else BATCH
    exact_vals = []
    t0 = time.perf_counter()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pms.SGLD(gradient=gradient, batch_size=batch, step_size=h, precondition=False,
                        center={"beta": mode}, steps_per_draw=1)
        est = step.estimator
        grads_c = row_grads(x, y, mode) if method == "cv" else None

        def callback(trace, draw):
            i = draw.draw_idx + 1  # transitions done; the store now serves transition i + 1
            if i % EXACT_EVERY or i > TABLE_ITERS:
                return
            q = np.asarray(draw.point["beta"], dtype=float)
            exact_vals.append(exact_lambda(
                method, x, y, q, grads_center=grads_c, store=getattr(est, "h", None),
                p=getattr(est, "p", None)))

        idata = pm.sample(tune=0, draws=draws, step=step, chains=1, cores=1,
                          initvals={"beta": mode}, random_seed=seed, progressbar=False,
                          compute_convergence_checks=False,
                          callback=callback if exact and method != "ld" else None)
    seconds = time.perf_counter() - t0
    beta = np.asarray(get_group(idata, "posterior")["beta"].values)[0]
    ss = get_group(idata, "sample_stats")
    lam = 4.0 * np.asarray(ss["noise_ratio"].values, dtype=float)[0] / h
    stuck = int(np.sum(np.asarray(ss["accept"].values) == 0.0))
    rows = float(np.mean(ss["data_used"].values))
    return {"method": method, "eps": eps, "draws": beta, "lam": lam, "stuck": stuck,
            "rows": rows, "exact": exact_vals, "seconds": seconds}


def moments_error(draws, ref):
    """Errors of a chain's moments against the reference (a dict from :func:`ref_summary`)."""
    d = np.asarray(draws, dtype=float)
    finite = np.all(np.isfinite(d))
    m = d.mean(axis=0)
    v = d.var(axis=0, ddof=1)
    sd = np.sqrt(v)
    dm = m - ref["mean"]
    proj = d @ ref["dirs"]  # coordinates along the reference's eigenvectors
    dir_sd = proj.std(axis=0, ddof=1) / np.sqrt(ref["dir_var"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        min_ess = min(ess(d[:, j]) for j in range(d.shape[1])) if finite and np.ptp(d) > 0 \
            else float("nan")
    return {
        "err_mean": float(np.linalg.norm(dm)),
        "err_var": float(np.linalg.norm(v - ref["var"])),
        "max_dm_sd": float(np.max(np.abs(dm) / ref["sd"])),
        "sd_min": float(np.min(sd / ref["sd"])),
        "sd_max": float(np.max(sd / ref["sd"])),
        "sd_small_dir": float(dir_sd[0]),
        "sd_large_dir": float(dir_sd[-1]),
        "min_ess": float(min_ess),
    }


def ref_summary(draws):
    mean = draws.mean(axis=0)
    cov = np.cov(draws.T)
    w, u = np.linalg.eigh(cov)
    return {"mean": mean, "var": np.diag(cov).copy(), "sd": np.sqrt(np.diag(cov)), "cov": cov,
            "dirs": u, "dir_var": w, "draws": draws}


# ---------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------


def fmt_num(v):
    if v is None or not np.isfinite(v):
        return "-"
    if v == 0:
        return "0"
    if abs(v) >= 1e5 or abs(v) < 1e-2:
        return f"{v:.1e}"
    return f"{v:,.0f}" if abs(v) >= 10 else f"{v:.2f}"


def print_table1(table_runs):
    print("\nTable 1: lambda_max(Var(g_hat)), the variance of the estimator along its largest "
          "principal component,\nover each chain's first "
          f"{TABLE_ITERS:,} transitions from the mode. Cell: batch estimate (chain mean of "
          "4 noise_ratio / h) / exact\n(mean over the chain's states at transitions "
          f"{EXACT_EVERY:,}, {2 * EXACT_EVERY:,}, ..., {TABLE_ITERS:,}) [El hanchi].")
    head = f"{'eps':>7} {'h':>7} " + " ".join(f"{LABEL[e]:>24}" for e in ESTIMATORS)
    print(head)
    for eps in EPS_TABLE:
        cells = []
        for e in ESTIMATORS:
            r = table_runs[(e, eps)]
            batch_est = float(np.nanmean(r["lam"][:TABLE_ITERS]))
            ex = float(np.mean(r["exact"])) if r["exact"] else float("nan")
            pub = PUBLISHED[eps].get(e)
            cells.append(f"{fmt_num(batch_est)} / {fmt_num(ex)} [{pub if pub else '-'}]")
        print(f"{eps:>7.0e} {2 * eps:>7.0e} " + " ".join(f"{c:>24}" for c in cells))
    print("  (relative excess variance per update, Welling & Teh's alpha = eps * lambda / 2: "
          "at eps = 5e-3 a lambda of 400 doubles the injected variance)")


def print_error_table(table_runs, ref, ld_runs):
    print(f"\nErrors after {TABLE_ITERS:,} transitions from the mode (his Figures 6-7); "
          f"reference norms: ||mean|| = {np.linalg.norm(ref['mean']):.3f}, "
          f"||var|| = {np.linalg.norm(ref['var']):.3f}")
    print(f"{'method':<8} {'eps':>7} {'|dmean|':>8} {'|dvar|':>9} {'max|dm|/sd':>10} "
          f"{'sd ratio':>13} {'small dir':>9} {'large dir':>9} {'min ESS':>8} {'mc':>6} "
          f"{'stuck':>6}")
    rows = []
    for eps in EPS_TABLE:
        for method in ("ld",) + ESTIMATORS:
            r = ld_runs.get(eps) if method == "ld" else table_runs[(method, eps)]
            if r is None:
                continue
            e = moments_error(r["draws"][:TABLE_ITERS], ref)
            mc = 1.0 / math.sqrt(e["min_ess"]) if e["min_ess"] > 0 else float("nan")
            print(f"{LABEL[method]:<8} {eps:>7.0e} {fmt_num(e['err_mean']):>8} "
                  f"{fmt_num(e['err_var']):>9} {fmt_num(e['max_dm_sd']):>10} "
                  f"{fmt_num(e['sd_min']):>6}-{fmt_num(e['sd_max']):<6} "
                  f"{fmt_num(e['sd_small_dir']):>9} {fmt_num(e['sd_large_dir']):>9} "
                  f"{e['min_ess']:>8.0f} {mc:>6.2f} {r['stuck']:>6d}")
            rows.append((method, eps, TABLE_ITERS, e))
        print()
    return rows


def print_sweep(sweep, ref, eps_grid, draws_sgld, draws_ld, burn):
    print(f"Bias against step size: chains of {draws_sgld:,} transitions (LD {draws_ld:,}), the "
          f"first {burn:,} discarded; cell: max|mean error|/sd, sd ratio min-max "
          "(coordinates), mc = 1/sqrt(min ESS)")
    print(f"{'method':<8} " + " ".join(f"{e:>18.0e}" for e in eps_grid))
    rows = []
    for method in ("ld",) + ESTIMATORS:
        cells, cells2 = [], []
        for eps in eps_grid:
            r = sweep.get((method, eps))
            if r is None:
                cells.append(f"{'':>18}")
                cells2.append(f"{'':>18}")
                continue
            e = moments_error(r["draws"][burn:], ref)
            e["noise_ratio"] = float(np.nanmean(r["lam"][burn:])) * eps / 2.0
            rows.append((method, eps, len(r["draws"]) - burn, e))
            r["err"] = e
            mc = 1.0 / math.sqrt(e["min_ess"]) if e["min_ess"] > 0 else float("nan")
            cells.append(f"{fmt_num(e['max_dm_sd']):>7} {fmt_num(e['sd_min']):>4}-"
                         f"{fmt_num(e['sd_max']):<4}")
            cells2.append(f"a={e['noise_ratio']:<7.2g} mc={mc:.2f}")
        print(f"{LABEL[method]:<8} " + " ".join(f"{c:>18}" for c in cells))
        print(f"{'':<8} " + " ".join(f"{c:>18}" for c in cells2))
    print("  a = mean noise_ratio (eps * lambda_max(Var g_hat) / 2, the batch estimate)")
    return rows


def plot_marginals(path, ref, runs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy.stats import gaussian_kde

    dirs = {"largest-variance direction": ref["dirs"][:, -1],
            "smallest-variance direction": ref["dirs"][:, 0]}
    fig, axes = plt.subplots(len(runs), 2, figsize=(10, 3.0 * len(runs)))
    for row, (title, d) in enumerate(runs):
        for col, (dname, v) in enumerate(dirs.items()):
            ax = axes[row, col]
            a = ref["draws"] @ v
            b = d @ v
            lo = min(np.quantile(a, 0.001), np.quantile(b, 0.005))
            hi = max(np.quantile(a, 0.999), np.quantile(b, 0.995))
            grid = np.linspace(lo, hi, 400)
            ax.plot(grid, gaussian_kde(a)(grid), "k-", lw=2, label="reference (NUTS)")
            if np.ptp(b) > 0:
                ax.plot(grid, gaussian_kde(b)(grid), "C3-", lw=1.5, label=title)
            ax.set_title(f"{title}: {dname}", fontsize=9)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_bias(path, sweep, eps_grid):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    panels = (("max_dm_sd", "max |mean error| / posterior sd (coordinates)", True),
              ("sd_small_dir", "sd ratio along the posterior's smallest-variance direction",
               True),
              ("sd_max", "max sd ratio (coordinates)", True))
    for ax, (key, title, logy) in zip(axes, panels):
        for k, method in enumerate(("ld",) + ESTIMATORS):
            pts = [(2 * eps, sweep[(method, eps)]["err"][key]) for eps in eps_grid
                   if (method, eps) in sweep and "err" in sweep[(method, eps)]]
            if not pts:
                continue
            hs, vals = zip(*pts)
            style = dict(color="k", ls="--", marker="s") if method == "ld" else dict(
                color=f"C{k}", marker="o")
            ax.plot(hs, vals, label=LABEL[method], **style)
        if key == "max_dm_sd":
            mcs = []
            for eps in eps_grid:
                vals = [1 / math.sqrt(r["err"]["min_ess"]) for (m, e), r in sweep.items()
                        if e == eps and "err" in r and r["err"]["min_ess"] > 0]
                mcs.append(2 * np.median(vals) if vals else np.nan)
            ax.plot([2 * e for e in eps_grid], mcs, color="0.6", ls=":",
                    label="2 x median mc (MC noise)")
        else:
            ax.axhline(1.0, color="0.6", ls=":")
        ax.set_xscale("log")
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel("h = 2 eps (pms.SGLD step_size)")
        sec = ax.secondary_xaxis("top", functions=(lambda h: h / 2, lambda e: 2 * e))
        sec.set_xlabel("El hanchi's eps", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_acf(path, ref, series, max_lag):
    import arviz as az
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    v = ref["dirs"][:, -1]
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, d in series:
        acf = az.autocorr(d @ v)[: max_lag + 1]
        ax.plot(np.arange(len(acf)), acf, label=label)
    ax.axhline(0, color="0.6", lw=0.8)
    ax.set_xlabel("lag (transitions)")
    ax.set_ylabel("ACF along the largest-variance direction")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="6,000 transitions per chain, 4 step sizes (about 2-3 minutes)")
    ap.add_argument("--draws", type=int, default=None,
                    help="transitions per stochastic-gradient chain (default 50,000; quick 6,000)")
    ap.add_argument("--out", default=str(OUT), help="directory for the figures and the CSV")
    args = ap.parse_args()
    import logging

    import pymc  # noqa: F401  (its logger's level is set on import)

    logging.getLogger("pymc").setLevel(logging.ERROR)
    t_start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    draws_sgld = args.draws or (6_000 if args.quick else 50_000)
    draws_ld = 6_000 if args.quick else 30_000
    if draws_sgld < TABLE_ITERS or draws_ld < TABLE_ITERS:
        ap.error(f"--draws must be at least {TABLE_ITERS}")
    eps_grid = EPS_SWEEP_QUICK if args.quick else EPS_SWEEP
    eps_ld = EPS_LD_QUICK if args.quick else EPS_LD
    burn = TABLE_ITERS // 5 if args.quick else TABLE_ITERS

    # ---- data and exact quantities at the mode
    x, y, beta_true = standin_data()
    model = build_model(x, y)
    mode, hess = posterior_mode(x, y)
    dlogp = model.compile_dlogp()
    grad_norm = float(np.linalg.norm(dlogp({"beta": mode})))
    lam_h = np.linalg.eigvalsh(hess)
    lam_v = exact_lambda("minibatch", x, y, mode)
    n_err = int(np.sum((x @ mode > 0) != (y > 0)))
    print(f"Stand-in: N = {N_ROWS:,}, d = {DIM}, batch S = {BATCH}; feature sds "
          f"{np.array2string(x.std(axis=0), precision=2)}; share of y = 1: {y.mean():.3f}")
    print(f"  |beta_true| = {BETA_NORM}, mode {np.array2string(mode, precision=2)} "
          f"(|grad log p| at the mode {grad_norm:.1e}); rows misclassified at the mode: "
          f"{n_err}")
    print(f"  Hessian of U at the mode: eigenvalues {lam_h[0]:.2f} .. {lam_h[-1]:.2f} "
          f"(LD: eps * lambda_max = {5e-3 * lam_h[-1]:.3f} at eps = 0.005); plain minibatch "
          f"lambda_max(Var(g_hat)) at the mode {lam_v:,.0f}")

    # ---- reference
    t0 = time.perf_counter()
    draws_ref, min_ess_ref, max_rhat_ref, cached = nuts_reference(model)
    ref = ref_summary(draws_ref)
    is_mean, is_cov, is_ess, khat = is_crosscheck(x, y, mode, hess)
    is_sd = np.sqrt(np.diag(is_cov))
    print(f"Reference: NUTS {NUTS_REF['chains']} x {NUTS_REF['draws']:,} (min bulk ESS "
          f"{min_ess_ref:,.0f}, max R-hat {max_rhat_ref:.3f}){' [cached]' if cached else ''}, "
          f"{time.perf_counter() - t0:.0f} s")
    print(f"  sd {np.array2string(ref['sd'], precision=3)}; posterior variances along its "
          f"principal axes {ref['dir_var'][0]:.3f} .. {ref['dir_var'][-1]:.3f}; "
          f"max |mean - mode| / sd = {np.max(np.abs(ref['mean'] - mode) / ref['sd']):.2f}")
    print(f"  cross-check, Laplace-t importance sampling (ESS {is_ess:,.0f}, Pareto k "
          f"{khat:.2f}): max |mean diff| / sd = "
          f"{np.max(np.abs(is_mean - ref['mean']) / ref['sd']):.3f}, sd ratio "
          f"{np.min(is_sd / ref['sd']):.3f} .. {np.max(is_sd / ref['sd']):.3f}")

    # ---- chains
    sweep = {}
    t0 = time.perf_counter()
    seeds = {m: 100 * k for k, m in enumerate(("ld",) + ESTIMATORS)}
    for i, eps in enumerate(eps_grid):
        for method in ESTIMATORS:
            sweep[(method, eps)] = run_chain(model, x, y, mode, method, eps, draws_sgld,
                                             seeds[method] + i + 1, exact=eps in EPS_TABLE)
    t_sgld = time.perf_counter() - t0
    t0 = time.perf_counter()
    for eps in eps_ld:
        sweep[("ld", eps)] = run_chain(model, x, y, mode, "ld", eps, draws_ld,
                                       seeds["ld"] + EPS_SWEEP.index(eps) + 1)
    t_ld = time.perf_counter() - t0
    print(f"Chains: {len(eps_grid) * len(ESTIMATORS)} stochastic-gradient chains x "
          f"{draws_sgld:,} transitions in {t_sgld:.0f} s, {len(eps_ld)} LD chains x "
          f"{draws_ld:,} in {t_ld:.0f} s")

    table_runs = {(m, e): sweep[(m, e)] for m in ESTIMATORS for e in EPS_TABLE}
    ld_runs = {e: sweep[("ld", e)] for e in EPS_TABLE if ("ld", e) in sweep}
    print_table1(table_runs)
    rows = print_error_table(table_runs, ref, ld_runs)
    rows_sweep = print_sweep(sweep, ref, eps_grid, draws_sgld, draws_ld, burn)

    # ---- CSV
    csv_path = out / f"elhanchi{'-quick' if args.quick else ''}.csv"
    keys = ["err_mean", "err_var", "max_dm_sd", "sd_min", "sd_max", "sd_small_dir",
            "sd_large_dir", "min_ess"]
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["part", "method", "eps", "h", "transitions", *keys, "noise_ratio",
                    "lambda_batch", "lambda_exact", "stuck", "seconds"])
        for part, rs in (("table", rows), ("sweep", rows_sweep)):
            for method, eps, n_used, e in rs:
                r = sweep[(method, eps)]
                seg = r["lam"][:TABLE_ITERS] if part == "table" else r["lam"][burn:]
                lam_b = float(np.nanmean(seg))
                w.writerow([part, LABEL[method], eps, 2 * eps, n_used,
                            *[f"{e[k]:.6g}" for k in keys], f"{lam_b * eps / 2:.6g}",
                            f"{lam_b:.6g}",
                            f"{np.mean(r['exact']):.6g}" if r["exact"] else "",
                            r["stuck"], f"{r['seconds']:.2f}"])

    # ---- figures
    figs = []
    p = out / "elhanchi_marginals.png"
    marg = [("LD, eps = 0.005", sweep[("ld", 5e-3)]["draws"][burn:]),
            ("SGLD, eps = 0.005", sweep[("minibatch", 5e-3)]["draws"][burn:]),
            ("SAGA-LD, eps = 5e-4", sweep[("saga", 5e-4)]["draws"][burn:])]
    plot_marginals(p, ref, marg)
    figs.append(p)
    p = out / "elhanchi_bias_vs_step.png"
    plot_bias(p, sweep, eps_grid)
    figs.append(p)
    p = out / "elhanchi_acf.png"
    acf_series = [("LD, eps = 0.005", sweep[("ld", 5e-3)]["draws"][burn:]),
                  ("LD, eps = 5e-4", sweep[("ld", 5e-4)]["draws"][burn:]),
                  ("SAGA-LD, eps = 5e-4", sweep[("saga", 5e-4)]["draws"][burn:])]
    plot_acf(p, ref, acf_series, max_lag=min(3000, draws_ld - burn - 1))
    figs.append(p)

    # ---- the findings
    def err(method, eps):
        return sweep[(method, eps)].get("err") or moments_error(
            sweep[(method, eps)]["draws"][burn:], ref)

    ld, sg, sa = err("ld", 5e-3), err("minibatch", 5e-3), err("saga", 5e-4)
    print("\nFindings (chains after the first "
          f"{burn:,} transitions; max |mean err| in posterior sds, sd ratios along the "
          "posterior's smallest/largest-variance directions):")
    for name, e in (("LD, eps = 0.005", ld), ("SGLD, eps = 0.005", sg),
                    ("SAGA-LD, eps = 5e-4", sa)):
        print(f"  {name:<20} max|dm|/sd {fmt_num(e['max_dm_sd']):>6}, sd ratio "
              f"{fmt_num(e['sd_min'])}-{fmt_num(e['sd_max'])}, small/large dir "
              f"{fmt_num(e['sd_small_dir'])}/{fmt_num(e['sd_large_dir'])}, "
              f"mc {1 / math.sqrt(e['min_ess']):.2f}")
    print(f"CSV: {csv_path}")
    print("Figures: " + ", ".join(str(f) for f in figs))
    print(f"Wall time: {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
