"""Benchmark of BarkerMinibatch against AustereMH and exact MH (Seita et al. 2017, Sec 6).

Two experiments of the paper, on synthetic data, in one run:

1. **Table 2 analogue** (Sec 6.2): a logistic regression at temperature ``K = 100`` with
   a random-walk proposal of fixed isotropic covariance (as in the paper), sampled by
   BarkerMinibatch (``delta = 0.01``, first batch ``m = 100``), AustereMH with its
   worst-case design (:func:`pymc_subsample.design_austerity_test`, eq. 8 of Korattikara
   et al. 2014: error ``E(0) <= 0.05``), AustereMH with its defaults (``epsilon = 0.05``,
   ``m = 500``) and exact MH (AustereMH with ``epsilon = 0``: every step reads all rows).
   All four target the same tempered posterior ``p(beta) prod_i p(y_i | beta)^(1/K)``
   with the same proposal from the same start (the maximum-likelihood estimate), so they
   differ only in their acceptance tests. Printed: mean and standard deviation of
   ``data_used`` per step, the standard deviation of the per-chain means (the paper's
   "± sd" over trials), the acceptance rate and the time per step.
2. **Sec 6.1 Gaussian mixture** (Fig. 1-2 analogue): ``theta ~ N(0, diag(10, 1))``,
   ``x_i ~ 0.5 N(theta_1, 2) + 0.5 N(theta_1 + theta_2, 2)``, ``theta = (0, 1)``,
   ``N = 10^6`` rows at ``K = 10^4`` (so ``N / K = 100``, the 100 points of Welling &
   Teh's original posterior), fixed random walk, 3000 samples, first batch ``m = 50``;
   BarkerMinibatch with ``delta = 0.01`` and with the variance rule only
   (``delta = inf``), AustereMH(c) with the paper's ``epsilon = 0.005``, ``m = 50``. The
   paper's "covariance matrix diag(0.15, 0.15)" is run both as a covariance (sd 0.387,
   plotted) and as a standard deviation (0.15): the paper's MHminibatch mean of 182 rows
   matches the variance rule alone with sd 0.15. The exact tempered density is evaluated
   on a grid (data binned into 4000 bins; the binning error is printed). Saved in
   ``benchmarks/output/``: ``barker_mixture.png`` (samples over the exact tempered
   density; log-log histograms of the batch sizes, both readings) and
   ``barker_logistic_batch_sizes.png`` (Fig. 4 analogue).

AustereMH has no temperature argument; the benchmark tempers it exactly by dividing its
``l_i`` by ``K`` (:class:`TemperedAustereMH`), which is what BarkerMinibatch's
``temperature`` does to its own terms.

Run: ``python benchmarks/barker.py [--quick]`` (``--quick``: N = 10^4 / 10^5, short chains,
< 1 min; the full run takes about 4 min of CPU, 9 min wall time on a busy 2-core machine).
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from pymc_subsample.testing import ess, group  # noqa: E402

OUTPUT = ROOT / "benchmarks" / "output"


# ---------------------------------------------------------------------------- utilities
def make_tempered_austere():
    import pymc_subsample as pms

    class TemperedAustereMH(pms.AustereMH):
        """AustereMH on the tempered target ``p(theta) prod_i p(x_i | theta)^(1/K)``: its
        kernel sees ``l_i / K`` (the prior and proposal parts are not tempered)."""

        def __init__(self, vars=None, *, temperature=1.0, **kwargs):
            self.temperature = float(temperature)
            self.loglik_weight = 1.0 / self.temperature
            super().__init__(vars, **kwargs)

        def _terms_fn(self, control, q, q_prop):
            # the rows' terms the kernel reads, tempered (the control variate's sum is
            # tempered by loglik_weight)
            f = super()._terms_fn(control, q, q_prop)
            inv_t = 1.0 / self.temperature
            return lambda rows: f(rows) * inv_t

    return TemperedAustereMH


def run_chains(model, step, *, draws, chains, seed, start):
    import pymc as pm

    t0 = time.perf_counter()
    with model:
        idata = pm.sample(
            draws=draws, tune=0, step=step, chains=chains, cores=1, random_seed=seed,
            initvals=start, progressbar=False, compute_convergence_checks=False,
        )
    elapsed = time.perf_counter() - t0
    ss = group(idata, "sample_stats")
    post = group(idata, "posterior")
    var = next(iter(post.data_vars))
    th = np.asarray(post[var].values, dtype=float)
    th = th.reshape(th.shape[0], th.shape[1], -1)
    return {
        # ESS of each coordinate's (chains, draws), NaN for a constant chain
        "min_ess": min(ess(th[..., j], constant=float("nan")) for j in range(th.shape[-1])),
        "used": np.asarray(ss["data_used"].values),  # (chains, draws)
        "accepted": np.asarray(ss["accepted"].values),
        "exact": np.asarray(ss["exact"].values) if "exact" in ss else None,
        "post": post,
        "seconds": elapsed,
        "steps": draws * chains,
    }


def summarise(label, res, n_total):
    u = res["used"].astype(float)
    chain_sd = f"{u.mean(axis=1).std(ddof=1):>9.1f}" if u.shape[0] > 1 else f"{'-':>9s}"
    ex = res["exact"]
    frac_exact = float(ex.mean()) if ex is not None else float("nan")
    return (
        f"{label:<46s} {u.mean():>9.1f} {u.std():>9.1f} {chain_sd} "
        f"{100 * u.mean() / n_total:>7.2f}% {100 * frac_exact:>6.1f}% "
        f"{res['accepted'].mean():>6.3f} {res['min_ess']:>7.0f} {u.sum() / res['min_ess']:>9.3g} "
        f"{1e3 * res['seconds'] / res['steps']:>8.2f}"
    )


HEADER = (
    f"{'method':<46s} {'mean':>9s} {'sd/step':>9s} {'sd/chain':>9s} {'% of N':>8s} "
    f"{'exact':>7s} {'acc':>6s} {'minESS':>7s} {'rows/ESS':>9s} {'ms/step':>8s}"
)
LEGEND = (
    "data_used per step: mean, sd over steps, sd of the per-chain means; % of N; share of "
    "exact (all-row) decisions;\n    acceptance rate; min over coordinates of the ESS; rows "
    "read per effective sample; wall time per step"
)


# ------------------------------------------------------------------- 1. logistic (Table 2)
def logistic_data(n, d, seed=0):
    rng = np.random.default_rng(seed)
    beta = rng.normal(0.0, 1.0, d) / math.sqrt(d) * 2.0
    X = rng.standard_normal((n, d))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-X @ beta))).astype(np.int64)
    return X, y, beta


def logistic_mle(X, y, iters=25):
    b = np.zeros(X.shape[1])
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-X @ b))
        H = X.T @ (X * (p * (1 - p))[:, None])
        step = np.linalg.solve(H, X.T @ (y - p))
        b += step
        if np.max(np.abs(step)) < 1e-12:
            break
    p = 1.0 / (1.0 + np.exp(-X @ b))
    H = X.T @ (X * (p * (1 - p))[:, None])
    return b, H


def experiment_logistic(quick, seed):
    import pymc as pm

    import pymc_subsample as pms

    n_total = 10_000 if quick else 100_000
    d = 10
    K = 100.0
    chains, draws = (2, 100) if quick else (4, 1000)
    X, y, _ = logistic_data(n_total, d, seed)
    b_mle, H = logistic_mle(X, y)
    # tempered posterior ~ N(b_mle, K H^-1): isotropic random walk with the optimal
    # 2.38 / sqrt(d) times the mean marginal sd (the paper fixes sigma I by hand)
    post_sd = np.sqrt(K * np.diag(np.linalg.inv(H)))
    scaling = float(2.38 / math.sqrt(d) * post_sd.mean())

    def model():
        with pm.Model() as m:
            beta = pm.Flat("beta", shape=d)
            pm.Bernoulli("y", logit_p=pm.math.dot(X, beta), observed=y)
        return m

    t0 = time.perf_counter()
    design = pms.design_austerity_test(n_total)
    t_design = time.perf_counter() - t0
    Tempered = make_tempered_austere()
    start = {"beta": b_mle}
    methods = [
        ("BarkerMinibatch (delta=0.01, m=100)",
         # one transition per draw: the paper's chain, whose data use is per test
         lambda: pms.BarkerMinibatch(steps_per_draw=1, batch_size=100, temperature=K,
                                     scaling=scaling, tune=False)),
        (f"AustereMH worst-case design (m={design.batch_size}, eps={design.epsilon:g})",
         lambda: Tempered(temperature=K, epsilon=design.epsilon, batch_size=design.batch_size,
                          scaling=scaling, tune=False)),
        ("BarkerMinibatch, variance rule only (delta=inf)",
         lambda: pms.BarkerMinibatch(steps_per_draw=1, batch_size=100, temperature=K,
                                     delta=math.inf, scaling=scaling, tune=False)),
        ("AustereMH defaults (m=500, eps=0.05)",
         lambda: Tempered(temperature=K, epsilon=0.05, batch_size=500, scaling=scaling, tune=False)),
        ("exact MH (AustereMH eps=0)",
         lambda: Tempered(temperature=K, epsilon=0.0, scaling=scaling, tune=False)),
    ]
    print(f"\n[1] Table 2 analogue: logistic regression, N = {n_total}, d = {d}, K = {K:g}, "
          f"flat prior, random walk sd {scaling:.4f} (isotropic, fixed), "
          f"{chains} chains x {draws} draws from the MLE")
    print(f"    worst-case design (max_error=0.05, {t_design:.1f} s): m = {design.batch_size}, "
          f"epsilon = {design.epsilon:g}, expected data use at mu_std=0: "
          f"{100 * design.expected_data_use:.1f}% of N")
    print("    " + LEGEND)
    print("    " + HEADER)
    results = {}
    for i, (label, make) in enumerate(methods):
        m = model()
        with m:
            step = make()
        res = run_chains(m, step, draws=draws, chains=chains, seed=seed + 10 + i, start=start)
        results[label] = res
        print("    " + summarise(label, res, n_total), flush=True)
    # the samplers agree on the posterior mean (in units of the tempered posterior sd)
    ref = results[methods[-1][0]]["post"]["beta"].values.reshape(-1, d).mean(axis=0)
    for label, res in results.items():
        m_hat = res["post"]["beta"].values.reshape(-1, d).mean(axis=0)
        dev = np.max(np.abs(m_hat - ref) / post_sd)
        print(f"    max |mean - exact MH mean| / posterior sd, {label.split(' (')[0]}: {dev:.2f}")
    print("    paper (MNIST, K=100, d=784), mean minibatch size ± sd over trials: MHminibatch "
          "125.4 ± 9.2 (13k) / 216.5 ± 7.9 (100k); AustereMH(c) 1924.3 ± 52.4 / 2795.6 ± 364.0")
    return results, n_total


# ---------------------------------------------------------------- 2. mixture (Sec 6.1)
SIG1, SIG2, SIGX = math.sqrt(10.0), 1.0, math.sqrt(2.0)


def mixture_data(n, seed):
    rng = np.random.default_rng(seed)
    second = rng.random(n) < 0.5
    return rng.normal(np.where(second, 1.0, 0.0), SIGX)  # theta = (0, 1)


def mixture_log_density(x, K, t1, t2, n_bins=4000):
    """Exact tempered log density (up to a constant) on a grid, from the data binned finely:
    ``sum_i log p(x_i | theta) / K`` with ``x_i`` replaced by its bin centre (bin width
    ~0.005; the error is checked against the exact sum at a few points)."""
    lo, hi = x.min(), x.max()
    counts, edges = np.histogram(x, bins=n_bins, range=(lo, hi))
    c = 0.5 * (edges[:-1] + edges[1:])
    keep = counts > 0
    c, counts = c[keep], counts[keep].astype(float)
    T1, T2 = np.meshgrid(t1, t2, indexing="xy")
    th1, th2 = T1.ravel(), T2.ravel()
    out = np.empty(th1.size)
    norm = -0.5 * math.log(2 * math.pi * SIGX**2) + math.log(0.5)
    for s in range(0, th1.size, 512):
        a = th1[s : s + 512, None]
        b = a + th2[s : s + 512, None]
        l1 = -0.5 * ((c[None, :] - a) / SIGX) ** 2
        l2 = -0.5 * ((c[None, :] - b) / SIGX) ** 2
        out[s : s + 512] = (np.logaddexp(l1, l2) + norm) @ counts
    logprior = -0.5 * (th1 / SIG1) ** 2 - 0.5 * (th2 / SIG2) ** 2
    return (out / K + logprior).reshape(T1.shape), (c, counts)


def exact_loglik(x, th1, th2):
    norm = -0.5 * math.log(2 * math.pi * SIGX**2) + math.log(0.5)
    return float(np.sum(np.logaddexp(-0.5 * ((x - th1) / SIGX) ** 2,
                                     -0.5 * ((x - th1 - th2) / SIGX) ** 2) + norm))


def experiment_mixture(quick, seed):
    import pymc as pm

    import pymc_subsample as pms

    n_total, K = (100_000, 1.0e3) if quick else (1_000_000, 1.0e4)
    draws = 400 if quick else 3000
    x = mixture_data(n_total, seed)

    def model():
        with pm.Model() as m:
            theta = pm.Normal("theta", 0.0, np.array([SIG1, SIG2]), shape=2)
            pm.NormalMixture("x", w=np.array([0.5, 0.5]),
                             mu=pm.math.stack([theta[0], theta[0] + theta[1]]), sigma=SIGX,
                             observed=x)
        return m

    pms.LikelihoodEngine(model())  # raises ModelNotSupportedError before any output
    Tempered = make_tempered_austere()
    start = {"theta": np.array([0.0, 1.0])}
    # "a random walk proposer with covariance matrix diag(0.15, 0.15)": read as a
    # covariance (sd 0.387, the main runs, plotted) and as a standard deviation (0.15)
    readings = [("cov diag(0.15, 0.15): sd 0.387", math.sqrt(0.15), ""),
                ("sd 0.15", 0.15, ", sd 0.15")]
    print(f"\n[2] Sec 6.1 Gaussian mixture: N = {n_total}, K = {K:g}, random walk "
          f"(fixed), 1 chain x {draws} samples from theta = (0, 1)")
    print("    " + LEGEND)
    results = {}
    i = 0
    for title, prop_sd, tag in readings:
        methods = [
            (f"BarkerMinibatch (delta=0.01, m=50{tag})",
             lambda: pms.BarkerMinibatch(steps_per_draw=1, batch_size=50, temperature=K,
                                         scaling=prop_sd, tune=False)),
            (f"BarkerMinibatch, variance rule only{tag}",
             lambda: pms.BarkerMinibatch(steps_per_draw=1, batch_size=50, temperature=K,
                                         delta=math.inf, scaling=prop_sd, tune=False)),
            (f"AustereMH(c) (m=50, eps=0.005{tag})",
             lambda: Tempered(temperature=K, epsilon=0.005, batch_size=50, scaling=prop_sd,
                              tune=False)),
        ]
        print(f"    proposal {title}")
        print("    " + HEADER)
        for label, make in methods:
            m = model()
            with m:
                step = make()
            res = run_chains(m, step, draws=draws, chains=1, seed=seed + 20 + i, start=start)
            i += 1
            res["reading"] = tag
            results[label] = res
            print("    " + summarise(label, res, n_total), flush=True)
    print("    paper (Table 1, 10 trials of 3000 samples): MHminibatch 182.3 ± 11.4, "
          "AustereMH(c) 13540.5 ± 1521.4, MHSubLhd 65758.9 ± 3222.6")

    # exact tempered density on a grid; moments and mode masses against the samples
    t1 = np.linspace(-2.5, 3.5, 241)
    t2 = np.linspace(-3.5, 3.5, 281)
    logd, _ = mixture_log_density(x, K, t1, t2)
    errs = []  # binning error, in log density units
    for p in [(0.0, 1.0), (1.0, -1.0), (0.4, 0.3)]:
        binned = mixture_log_density(x, K, np.array([p[0]]), np.array([p[1]]))[0].item()
        exact = exact_loglik(x, *p) / K - 0.5 * (p[0] / SIG1) ** 2 - 0.5 * (p[1] / SIG2) ** 2
        errs.append(abs(binned - exact))
    w = np.exp(logd - logd.max())
    w /= w.sum()
    T1, T2 = np.meshgrid(t1, t2, indexing="xy")
    mean = np.array([np.sum(w * T1), np.sum(w * T2)])
    sd = np.sqrt(np.array([np.sum(w * (T1 - mean[0]) ** 2), np.sum(w * (T2 - mean[1]) ** 2)]))
    mass_upper = float(np.sum(w[T2 > 0]))  # the mode near (0, 1) vs the one near (1, -1)
    print(f"    exact tempered density (grid {t1.size}x{t2.size}, binned data; binning error "
          f"{max(errs):.1e} in log density): mean ({mean[0]:+.3f}, {mean[1]:+.3f}), "
          f"sd ({sd[0]:.3f}, {sd[1]:.3f}), mass of the theta_2 > 0 mode {mass_upper:.3f}")
    for label, res in results.items():
        th = res["post"]["theta"].values.reshape(-1, 2)
        print(f"    {label:<46s} samples: mean ({th[:, 0].mean():+.3f}, "
              f"{th[:, 1].mean():+.3f}), sd ({th[:, 0].std():.3f}, {th[:, 1].std():.3f}), "
              f"fraction with theta_2 > 0: {np.mean(th[:, 1] > 0):.3f}")
    return results, (t1, t2, logd), n_total, K


# ------------------------------------------------------------------------------- plots
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    OUTPUT.mkdir(parents=True, exist_ok=True)
    return plt


def plot_mixture(mixture, quick):
    plt = _pyplot()
    suffix = "_quick" if quick else ""
    res_mix, (t1, t2, logd), n_mix, K = mixture
    main = [lab for lab in res_mix if not res_mix[lab]["reading"]]
    alt = [lab for lab in res_mix if res_mix[lab]["reading"]]
    nl = len(main)
    fig, axes = plt.subplots(3, nl, figsize=(5.2 * nl, 13.5))
    levels = np.linspace(logd.max() - 12, logd.max(), 13)
    for ax, label in zip(axes[0], main):
        ax.contourf(t1, t2, logd, levels=levels, cmap="Greys", extend="min")
        th = res_mix[label]["post"]["theta"].values.reshape(-1, 2)
        ax.plot(th[:, 0], th[:, 1], ".", ms=2.5, alpha=0.4, color="tab:red")
        ax.set_title(f"{label}\nsamples over the exact tempered log density", fontsize=9)
        ax.set_xlabel(r"$\theta_1$")
        ax.set_ylabel(r"$\theta_2$")
    used = {label: res_mix[label]["used"].ravel() for label in res_mix}
    top = max(u.max() for u in used.values())
    bins = np.logspace(np.log10(40), np.log10(max(top, 100) * 1.2), 40)
    for row, labels in ((1, main), (2, alt)):
        for ax, label in zip(axes[row], labels):
            u = used[label]
            ax.hist(u, bins=bins, color="tab:blue" if row == 1 else "tab:green")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlim(bins[0], bins[-1])
            ax.set_title(f"{label}\nminibatch sizes: mean {u.mean():.0f} of N = {n_mix:.0e}",
                         fontsize=9)
            ax.set_xlabel("minibatch size (data_used)")
    fig.suptitle(f"Seita et al. (2017) Sec 6.1 mixture: N = {n_mix:.0e}, K = {K:.0e} "
                 "(Fig. 1-2 analogue)")
    fig.tight_layout()
    p1 = OUTPUT / f"barker_mixture{suffix}.png"
    fig.savefig(p1, dpi=110)
    plt.close(fig)
    return p1


def plot_logistic(logistic, quick):
    plt = _pyplot()
    suffix = "_quick" if quick else ""
    res_log, n_log = logistic
    labels = [lab for lab in res_log if not lab.startswith("exact")]
    fig, axes = plt.subplots(1, len(labels), figsize=(4.6 * len(labels), 4), sharex=True, sharey=True)
    allu = [res_log[lab]["used"].ravel() for lab in labels]
    bins = np.logspace(np.log10(50), np.log10(n_log * 1.05), 40)
    for ax, lab, u in zip(axes, labels, allu):
        ax.hist(u, bins=bins, color="tab:blue")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{lab}\nmean {u.mean():.0f}", fontsize=8)
        ax.set_xlabel("minibatch size (data_used)")
    fig.suptitle(f"Logistic regression, N = {n_log}, K = 100 (Fig. 4 analogue)")
    fig.tight_layout()
    p2 = OUTPUT / f"barker_logistic_batch_sizes{suffix}.png"
    fig.savefig(p2, dpi=110)
    plt.close(fig)
    return p2


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small N, short chains (< 1 min)")
    ap.add_argument("--seed", type=int, default=2017)
    args = ap.parse_args(argv)
    import pymc

    from pymc_subsample import ModelNotSupportedError

    logging.getLogger("pymc").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=FutureWarning)

    t0 = time.perf_counter()
    print(f"pymc {pymc.__version__}, python {sys.version.split()[0]}"
          f"{' (quick run)' if args.quick else ''}")
    logistic = experiment_logistic(args.quick, args.seed)
    figures = [plot_logistic(logistic, args.quick)]
    try:
        mixture = experiment_mixture(args.quick, args.seed)
    except ModelNotSupportedError as err:  # defensive: an engine that refuses the mixture
        print(f"\n[2] Sec 6.1 Gaussian mixture: SKIPPED, the likelihood engine refuses the "
              f"NormalMixture model with pymc {pymc.__version__}:\n    {err}")
    else:
        figures.insert(0, plot_mixture(mixture, args.quick))
    print("\nfigures: " + ", ".join(str(p.relative_to(ROOT)) for p in figures))
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
