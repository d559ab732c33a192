"""pymc-subsample demo: a logistic regression on 10^6 rows, sampled with the three
subsampling MH steps, SGLD (approximate, no MH test) and NUTS, side by side.

NUTS runs three ways, as a user would pick it: PyMC's default (``pm.sample()``: PyTensor's
C backend), numpyro (``pm.sample(nuts_sampler="numpyro")``, JAX) and nutpie
(``pm.sample(nuts_sampler="nutpie")``, Numba); the last two when installed
(``pip install "pymc-subsample[bench]"``, which ``[demo]`` includes), skipped with a note
otherwise.

Prints, per method: wall time (set-up and compilation included), bulk ESS (min over
parameters) per second, mean rows read per step, R-hat, and the largest posterior-mean
difference from the Laplace approximation at the mode (accurate to about N^-1/2 posterior
sd here) in posterior standard deviations; then each step's ESS/s over the fastest
converged NUTS measured (named), over PyMC's default NUTS if it converged, and over PyMC's
NUTS projected. A budgeted NUTS run that has not converged (:func:`not_converged`: R-hat
above 1.01, a bulk ESS under 100 per chain, or a posterior mean further from the reference
than its Monte Carlo error allows) is printed as "not converged", with the reason, and its
ESS/s is neither shown nor used as a ratio's denominator (:func:`speedup_baselines`).
Writes a PNG summary (traces and data usage).

PyTensor's start-up cost in a process (reading its compile cache's index, paid once per
Python session by whatever compiles first) is paid before any timing and counted for no
method: NUTS's figures, measured later in the same process, do not pay it either.

Every method starts from its sampler's default initial point. The four subsampling steps
run 2 chains x (1000 tune + 2000 draws; SGLD takes 10 transitions per draw); NUTS costs
O(N) per gradient, so each NUTS gets the same wall-time budget: the cost of one full-data
gradient is measured (numpyro: its own JAX gradient, in a jitted loop as its NUTS runs it;
PyMC and nutpie: PyMC's compiled gradient, which nutpie's Numba one matches on this model)
and tune + draws chosen to fit about 10 gradients per draw (printed); the compilation of
numpyro and nutpie happens inside ``pm.sample`` and is included in their wall time.
Chains run in parallel, one per core (numpyro: ``chain_method="parallel"``; nutpie:
``cores=2``), with one BLAS thread per process (``OMP/OPENBLAS/MKL_NUM_THREADS``, unless
set); JAX keeps its default threading. Such short NUTS runs are barely tuned, so PyMC's
NUTS is also projected from a fully tuned run on 20,000 rows (see
:func:`nuts_projection`); ``benchmarks/fastest_nuts.py`` times all three NUTS fully tuned.
Run: python examples/demo.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# one BLAS thread per process: 2 chains on 2 cores, one per core (as in benchmarks/); more
# threads per chain oversubscribe the cores, which slows nutpie's Numba gradient (it calls
# BLAS) several-fold. JAX keeps its own default threading. Set these to override.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from pymc_subsample.datasets import make_logistic  # noqa: E402

HERE = Path(__file__).resolve().parent
D = 10
STEPS = ("ScalableMH", "AustereMH", "BarkerMinibatch", "SGLD")
#: NUTS as a user picks it: ``pm.sample(nuts_sampler=...)`` -> the label in the table
NUTS_SAMPLERS = {"pymc": "NUTS (PyMC)", "numpyro": "NUTS (numpyro)", "nutpie": "NUTS (nutpie)"}
#: modules each NUTS sampler needs beyond PyMC
NUTS_REQUIRES = {"numpyro": ("numpyro", "jax"), "nutpie": ("nutpie", "numba")}


#: a budgeted NUTS run's ESS/s is a speed figure only if its largest R-hat is at most this
RHAT_MAX = 1.01
#: ... and its bulk ESS (min over the coefficients) at least this per chain (Vehtari et
#: al. 2021, "Rank-normalization, folding, and localization", Sec. 4: 100 per chain)
ESS_PER_CHAIN_MIN = 100
#: ... and every posterior mean within this many Monte Carlo standard errors (posterior sd
#: / sqrt(ESS)) of the reference, plus the reference's own error
MEAN_MCSE_MAX = 4.0


def not_converged(ess, rhat, dev, *, chains, ref_error=0.0):
    """Why a run has not converged, or None when it has.

    Parameters
    ----------
    ess : float
        Bulk ESS, the minimum over the parameters.
    rhat : float
        R-hat, the maximum over the parameters.
    dev : float
        The largest ``|posterior mean - reference mean| / reference sd`` over the
        parameters.
    chains : int
        Number of chains (the ESS threshold is :data:`ESS_PER_CHAIN_MIN` per chain).
    ref_error : float, optional
        The reference's own error in posterior sds (the Laplace approximation's, about
        ``N**-0.5`` here), added to the allowed deviation.

    Returns
    -------
    str or None
        The failed criteria, joined by "; " (R-hat above :data:`RHAT_MAX`, an ESS under
        ``ESS_PER_CHAIN_MIN * chains``, a deviation over ``MEAN_MCSE_MAX / sqrt(ess) +
        ref_error``; a non-finite value fails its criterion), or None.
    """
    reasons = []
    if not rhat <= RHAT_MAX:
        reasons.append(f"R-hat {rhat:.3f} > {RHAT_MAX}")
    ess_min = ESS_PER_CHAIN_MIN * chains
    if not ess >= ess_min:
        reasons.append(f"ESS {ess:.0f} < {ess_min}")
    limit = MEAN_MCSE_MAX / np.sqrt(ess) + ref_error if ess > 0 else 0.0
    if not dev <= limit:
        reasons.append(f"max |dmean|/sd {dev:.3g} > {limit:.3g}")
    return "; ".join(reasons) or None


def speedup_baselines(nuts_rates, failures, proj_rate, *, pymc_name):
    """The denominators of the steps' speed-ups: converged NUTS runs and the projection.

    Parameters
    ----------
    nuts_rates : dict
        ESS/s of each budgeted NUTS run, by label.
    failures : dict
        :func:`not_converged`'s answer for each label (None: converged).
    proj_rate : float
        PyMC's NUTS projected (:func:`nuts_projection`), always a denominator.
    pymc_name : str
        The label of PyMC's default NUTS.

    Returns
    -------
    list of (str, float)
        ``(label, ESS/s)``: the fastest converged run (if any), PyMC's default NUTS if it
        converged and is not that run, then ``("PyMC's NUTS projected", proj_rate)``. A
        run that has not converged is never one of them.
    """
    converged = {n: r for n, r in nuts_rates.items() if failures.get(n, "unchecked") is None}
    out = []
    if converged:
        fastest = max(converged, key=converged.get)
        out.append((fastest, converged[fastest]))
        if pymc_name in converged and pymc_name != fastest:
            out.append((pymc_name, converged[pymc_name]))
    out.append(("PyMC's NUTS projected", proj_rate))
    return out


def speedup_text(step_rates, nuts_rates, failures, projection, *, rows):
    """The lines under the table: the budgeted NUTS runs, the projection, the speed-ups.

    Parameters
    ----------
    step_rates : dict
        ESS/s of each subsampling step, by name.
    nuts_rates : dict
        ESS/s of each budgeted NUTS run, by label (in the order run).
    failures : dict
        :func:`not_converged`'s answer for each NUTS label.
    projection : tuple
        :func:`nuts_projection`'s ``(ESS/s, gradients per ESS, seconds per gradient)``.
    rows : int
        N, for the text.

    Returns
    -------
    str
        A NUTS run that has not converged is named as such, with its reason and without
        its ESS/s; the speed-ups are over :func:`speedup_baselines`'s denominators.
    """
    proj_rate, per_ess, t_grad = projection
    baselines = speedup_baselines(nuts_rates, failures, proj_rate,
                                  pymc_name=NUTS_SAMPLERS["pymc"])
    runs = [f"{n} {r:.3f} ESS/s" if failures.get(n, "unchecked") is None
            else f"{n} not converged ({failures.get(n, 'unchecked')})"
            for n, r in nuts_rates.items()]
    out = [
        "NUTS runs above (budgeted, compilation included): " + ", ".join(runs),
        f"PyMC's NUTS projected at N = {rows:,}: {per_ess:.0f} gradients per ESS (fully "
        f"tuned, counted on 20,000 rows of the same data) x {1e3 * t_grad:.1f} ms per "
        f"full-data gradient = {proj_rate:.3f} ESS/s",
        "ESS/s over NUTS's (wall times include each step's set-up; a NUTS run that has not "
        "converged is no denominator): against " + ", ".join(label for label, _ in baselines),
    ]
    for name, rate in step_rates.items():
        ratios = [(rate / base, label) for label, base in baselines]
        out.append(f"  {name:<16}" + "".join(
            f" {f'{r:,.0f}' if r >= 10 else f'{r:.1f}':>9}x {label:<22}"
            for r, label in ratios).rstrip())
    return "\n".join(out)


def build_model(X, y):
    import pymc as pm

    with pm.Model() as model:
        beta = pm.Normal("beta", 0, 1, shape=D)
        pm.Bernoulli("y", logit_p=X @ beta, observed=y)
    return model


def gradient_seconds(model, sampler="pymc", reps=3):
    """Wall time of one full-data log-density gradient: for ``sampler="numpyro"`` numpyro's
    JAX gradient as its NUTS evaluates it, inside a loop of one XLA program (a standalone
    jitted call is slower at large N); PyMC's compiled gradient otherwise (nutpie's Numba
    gradient runs at about the same speed as PyTensor's C one on this model)."""
    point = model.initial_point()
    if sampler == "numpyro":
        import jax
        from pymc.sampling.jax import get_jaxified_logp

        grad = jax.grad(get_jaxified_logp(model, negative_logp=False))

        def body(_, x):  # each gradient feeds the next point, as in a trajectory
            return [xi + 1e-12 * gi for xi, gi in zip(x, grad(x))]

        loop = jax.jit(lambda x, k: jax.lax.fori_loop(0, k, body, x))
        x = [point[v.name] for v in model.value_vars]
        jax.block_until_ready(loop(x, 1))
        t0 = time.perf_counter()
        jax.block_until_ready(loop(x, 1))
        t1 = time.perf_counter()
        jax.block_until_ready(loop(x, 1 + 3 * reps))
        return max((time.perf_counter() - t1) - (t1 - t0), 0.0) / (3 * reps)
    dlogp = model.compile_dlogp()
    dlogp(point)
    t0 = time.perf_counter()
    for _ in range(reps):
        dlogp(point)
    return (time.perf_counter() - t0) / reps


def run(name, model, make_step, *, budget, chains, cores, fixed=None, sampler="pymc"):
    """Sample with a step from the model's initial point; NUTS (``make_step`` returning
    None, run by ``sampler``: "pymc", "numpyro" or "nutpie") fits tune + draws to the
    wall-time budget."""
    import pymc as pm

    t0 = time.perf_counter()
    with model:
        step = make_step()
    setup = time.perf_counter() - t0
    if fixed is None:  # NUTS: about 10 full-data gradients per draw on this model
        per = 10 * gradient_seconds(model, sampler)
        total = max(int(budget * min(chains, cores) / chains / per), 30)
        tune, draws = total // 3, total - total // 3
    else:
        tune, draws = fixed
    print(f"\n== {name}: set-up {setup:.1f} s, {chains} chains x ({tune} tune + {draws} draws)",
          flush=True)
    kwargs = {} if step is None else {"step": step}
    if sampler == "numpyro":  # its chains in parallel, one XLA device per core
        kwargs.update(nuts_sampler="numpyro", nuts_sampler_kwargs={"chain_method": "parallel"})
    elif sampler == "nutpie":  # pm.sample does not pass cores on to nutpie
        kwargs.update(nuts_sampler="nutpie", nuts_sampler_kwargs={"cores": cores})
    t1 = time.perf_counter()
    with model:
        idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=cores, random_seed=2024,
                          progressbar=True, **kwargs)
    wall = time.perf_counter() - t1 + setup
    return idata, wall


def nuts_projection(X, y, rows, *, n_small=20_000, chains=2, cores=2):
    """NUTS's ESS/s at ``rows`` rows, projected honestly from a cheap fully tuned run.

    NUTS's gradient evaluations per effective sample depend on the posterior's shape, not
    on N (a tall-data posterior is close to Gaussian whatever N): they are counted on the
    first ``n_small`` rows of the same data, with 1000 tune + 1000 draws per chain, and
    each evaluation is priced at the measured time of one full-data gradient at ``rows``.
    Returns ``(projected ESS/s, gradients per ESS, seconds per gradient)``.
    """
    import pymc as pm

    from pymc_subsample.diagnostics import convergence, get_group

    small = build_model(X[:n_small], y[:n_small])
    with small:
        idata = pm.sample(1000, tune=1000, chains=chains, cores=cores, random_seed=7,
                          progressbar=False)
    ess, _ = convergence(idata)
    grads = float(np.sum(get_group(idata, "sample_stats")["n_steps"].values))
    per_ess = grads / ess
    full = build_model(X[:rows], y[:rows])
    f = full.compile_logp_dlogp() if hasattr(full, "compile_logp_dlogp") else full.compile_dlogp()
    point = full.initial_point()
    f(point)
    t0 = time.perf_counter()
    for _ in range(5):
        f(point)
    t_grad = (time.perf_counter() - t0) / 5
    return 1.0 / (per_ess * t_grad), per_ess, t_grad


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10**6)
    ap.add_argument("--budget", type=float, default=45.0, help="NUTS's sampling budget (s)")
    ap.add_argument("--quick", action="store_true", help="10^5 rows, a 15 s NUTS budget")
    ap.add_argument("--out", default=str(HERE / "output"))
    args = ap.parse_args()
    if args.quick:
        args.rows, args.budget = 10**5, 15.0
    os.makedirs(args.out, exist_ok=True)

    import pymc as pm

    import pymc_subsample as pms
    from pymc_subsample.diagnostics import (
        convergence,
        data_usage_summary,
        get_group,
        posterior_moments,
    )

    t_start = time.perf_counter()
    import pytensor
    import pytensor.tensor as pt

    x = pt.dvector("x")
    pytensor.function([x], 2 * x)  # PyTensor's per-process start-up (see the docstring)
    print(f"PyTensor start-up in this process: {time.perf_counter() - t_start:.1f} s (paid "
          "once per Python session, counted for no method)")
    print(f"pymc {pm.__version__}, pymc_subsample {pms.__version__}: logistic regression, "
          f"N = {args.rows:,} rows, {D} coefficients", flush=True)
    X, y, _ = make_logistic(args.rows, D)
    model = build_model(X, y)
    chains, cores = 2, 2

    results = {}
    fixed = (1000, 2000)
    for name, make in [
        ("ScalableMH", lambda: pms.ScalableMH()),
        ("AustereMH", lambda: pms.AustereMH()),
        ("BarkerMinibatch", lambda: pms.BarkerMinibatch()),
        ("SGLD", lambda: pms.SGLD()),
    ]:
        results[name] = run(name, model, make, budget=None, chains=chains, cores=cores,
                            fixed=fixed)
    import importlib.util

    nuts_names = []
    proj = None
    for sampler, name in NUTS_SAMPLERS.items():
        if sampler == "numpyro":
            # before JAX starts its threads: PyMC forks a process per chain here
            proj = nuts_projection(X, y, args.rows, chains=chains, cores=cores)
        lack = [m for m in NUTS_REQUIRES.get(sampler, ()) if importlib.util.find_spec(m) is None]
        if lack:
            print(f"\n== {name}: skipped ({', '.join(lack)} not installed: "
                  "pip install \"pymc-subsample[bench]\")")
            continue
        results[name] = run(name, model, lambda: None, budget=args.budget, chains=chains,
                            cores=cores, sampler=sampler)
        nuts_names.append(name)
    if proj is None:
        proj = nuts_projection(X, y, args.rows, chains=chains, cores=cores)
    proj_rate, per_ess, t_grad = proj

    # reference: the Laplace approximation at the mode, accurate to about N^-1/2 posterior
    # sd (0.001 sd at N = 10^6) for this model
    with model:
        laplace = pms.diagnostics.laplace_approximation()
    ref_mean, ref_sd = laplace["mean"].to_numpy(), laplace["sd"].to_numpy()
    header = (f"{'method':<17}{'wall s':>9}{'ESS bulk':>10}{'ESS/s':>14}{'rows/step':>12}"
              f"{'R-hat':>8}{'max |dmean|/sd':>16}")  # (NUTS's wall: compilation included)
    lines = [header, "-" * len(header)]
    rows_read, rates = {}, {}  # per method, for the figure
    failures = {}  # per NUTS run: why it has not converged, or None
    for name, (idata, wall) in results.items():
        ess, rhat = convergence(idata)
        mean, _, _ = posterior_moments(idata)
        dev = np.max(np.abs(mean - ref_mean) / ref_sd)
        rate_txt = f"{ess / wall:>14.2f}"
        if name in nuts_names:
            failures[name] = not_converged(ess, rhat, dev, chains=chains,
                                           ref_error=1 / np.sqrt(args.rows))
            if failures[name] is not None:
                rate_txt = f"{'not converged':>14}"
        try:
            used = data_usage_summary(idata).loc["all", "mean"]
        except KeyError:
            used = float(args.rows) * float(
                np.mean(get_group(idata, "sample_stats")["n_steps"].values)
            )  # NUTS: every leapfrog step reads all N rows
        used_txt = f"{used:,.2f}" if used < 10 else f"{used:,.0f}"
        rows_read[name], rates[name] = used, ess / wall
        lines.append(f"{name:<17}{wall:>9.1f}{ess:>10.0f}{rate_txt}{used_txt:>12}"
                     f"{rhat:>8.3f}{dev:>16.3f}")
    lines.append("(max |dmean|/sd: against the Laplace approximation at the mode, accurate to "
                 f"about {1 / np.sqrt(args.rows):.3f} sd here)")
    table = "\n".join(lines)
    print("\n" + table)
    nuts_rates = {name: rates[name] for name in nuts_names}
    for name, why in failures.items():
        if why is not None:  # not a speed figure: neither in the ratios nor in the figure
            del rates[name]
    ratio_text = speedup_text({n: rates[n] for n in STEPS}, nuts_rates, failures,
                              proj, rows=args.rows)
    print("\n" + ratio_text)
    table += "\n\n" + ratio_text

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(5 * len(STEPS), 7.5))
    grid = fig.add_gridspec(2, len(STEPS))
    for k, name in enumerate(STEPS):
        ax = fig.add_subplot(grid[0, k])
        post = get_group(results[name][0], "posterior")["beta"].values
        for c in range(post.shape[0]):
            ax.plot(post[c, :, 0], lw=0.6, label=f"chain {c}")
        ax.set_title(f"{name}: trace of beta[0]")
        ax.set_xlabel("draw")
    # the projection prices ESS/s only: it has no rows-per-draw bar of its own
    rates["PyMC NUTS (projected)"] = proj_rate
    colours = {name: f"C{k}" for k, name in enumerate(rates)}
    half = len(STEPS) // 2
    panels = [(rows_read, "rows read per draw (log scale)"),
              (rates, "bulk ESS per second, set-up included (log scale)")]
    for j, (by_name, label) in enumerate(panels):
        ax = fig.add_subplot(grid[1, j * half:(j + 1) * half])
        names, values = list(by_name), list(by_name.values())
        bars = ax.bar(range(len(names)), values, color=[colours[n] for n in names])
        ax.set_yscale("log")
        ax.set_xticks(range(len(names)), names, rotation=25, ha="right")
        ax.set_title(label)
        for bar, v in zip(bars, values):
            ax.annotate(f"{v:,.2f}" if v < 10 else f"{v:,.0f}", (bar.get_x() + bar.get_width() / 2,
                        bar.get_height()), ha="center", va="bottom", fontsize=9)
        ax.margins(y=0.15)
    fig.suptitle(f"Logistic regression, N = {args.rows:,} rows, {D} coefficients, "
                 "2 chains on 2 cores (NUTS: a wall-time budget, compilation included)")
    fig.tight_layout()
    png = Path(args.out) / "demo_summary.png"
    fig.savefig(png, dpi=90)
    (Path(args.out) / "demo_table.txt").write_text(table + "\n")
    print(f"\nwrote {png} and {Path(args.out) / 'demo_table.txt'}; "
          f"total {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
