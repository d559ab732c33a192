"""Time to 1,000 effective draws: this package's steps against the fastest NUTS a user can pick.

Issue 28: the package's speed claims were made against PyMC's default NUTS (PyTensor's C
backend, here without BLAS: the slowest NUTS). A user who wants speed writes
``pm.sample(nuts_sampler="numpyro")`` or ``pm.sample(nuts_sampler="nutpie")``. This
benchmark times all of them the same way.

Model (the demo's, ``build_model`` in ``examples/demo.py``): ``X, y, _ =
pms.datasets.make_logistic(N, 10, seed=0)`` (the rows for a smaller N are a prefix of
those for a larger one), ``beta ~ Normal(0, 1, shape=10)``,
``y ~ Bernoulli(logit_p=X @ beta)``.

Methods: ``pms.ScalableMH()``, ``pms.AustereMH()``, ``pms.BarkerMinibatch()``,
``pms.SGLD()`` (defaults, ``pm.sample(step=...)``); numpyro NUTS
(``pm.sample(nuts_sampler="numpyro")``); nutpie (``pm.sample(nuts_sampler="nutpie")``,
its default Numba backend); nutpie's JAX back end (``nuts_sampler_kwargs={"backend":
"jax", "gradient_backend": "jax"}``); PyMC's default NUTS (``pm.sample()``). numpyro and
nutpie are skipped, with a note, when they are not installed (``pip install
"pymc-subsample[bench]"``).

PyMC 6 (issue 45) makes nutpie its default NUTS when it is installed and compiles with
Numba. On PyMC 6 with nutpie, the nutpie entry is therefore ``pm.sample()`` as PyMC 6
runs it (labelled "nutpie: PyMC 6 default"), and the PyMC entry asks for PyMC's own NUTS
by name (``nuts_sampler="pymc"``, labelled "PyMC's own", Numba-compiled); on PyMC 5 the
PyMC entry is ``pm.sample()`` itself. The first line of the output names the versions.

Definition (the same for every method)
--------------------------------------
* 2 chains run one after the other in one process: ``cores=1`` for the PyMC steps and
  PyMC's NUTS, ``chain_method="sequential"`` for numpyro, ``cores=1`` for nutpie (its
  thread pool then samples one chain at a time); ``tune=1000``; every chain starts
  from the sampler's own default initial point; ``random_seed`` fixed (``--random-seed``).
* ESS: the minimum over the 10 coefficients of ArviZ's bulk ESS of the kept draws
  (``pymc_subsample.diagnostics.convergence``).
* ``T1000 = W - K + K x 1000 / ESS``: ``W`` is the wall time of everything (the step's
  construction, or the model-to-sampler compilation, plus the whole ``pm.sample`` call:
  initial point, tuning, the kept draws, conversion to InferenceData) and ``K`` the time
  of the kept draws, so T1000 = (everything that is not the kept draws) + (the kept draws'
  time) x 1000 / ESS.
* Splitting ``K`` off (the ``split`` column of the JSON):

  - the package's steps: construction timed on its own; ``pm.sample``'s ``sampling_time``
    (its draw loop) split in proportion to iterations, ``K = loop x draws / (tune +
    draws)``, 2,000 kept draws per chain; the rest of ``pm.sample`` is set-up.
  - PyMC's NUTS: ``K`` = the sum of its own per-draw timer (``perf_counter_diff``) over
    the kept draws (``discard_tuned_samples=False``; the tuning draws' stats also give the
    tuning gradients).
  - nutpie: compiled (``nutpie.compile_pymc_model``, inside ``pm.sample``) before its
    sampler starts; the sampler's time (``sampling_time``) split in proportion to
    gradient evaluations (``n_steps`` of the kept and of the warm-up draws, which nutpie
    keeps).
  - numpyro: JAX compiles the sampler inside numpyro's ``MCMC.run``, so ``sampling_time``
    holds XLA compilation + tuning + kept draws, with asynchronous dispatch (compilation
    and execution overlap, so compile events cannot be subtracted). ``pm.sample`` keeps no
    warm-up stats, so the tuning is replayed, untimed: the same ``pm.sample`` call with
    numpyro's ``MCMC.run`` swapped for ``MCMC.warmup(collect_warmup=True)``, same seed and
    initial points, which reproduces the tuning exactly (checked: the final step sizes
    agree, printed). ``K`` = ``sampling_time`` split in proportion to gradient
    evaluations, which hands the kept draws their gradient share of the compilation;
    with ESS >= 1,000 that share is scaled by <= 1, so this can only favour numpyro (by
    at most half of that share).
  - NUTS gets 600 kept draws per chain (``--nuts-draws``), which puts its ESS near
    1,000-2,000 on this posterior, so ``1000 / ESS`` is close to 1 and the split barely
    matters: T1000 moves by at most ``K x (1 - 1000 / ESS)`` between "all sampler time is
    kept draws" and "none is".

* Warm-up (not counted): before its timed run each method is run once on a twin of the
  model (the same data and structure, a separate ``pm.Model`` object): each step is
  constructed (PyTensor's compile cache warm, as in ``time_to_ess.py``) and sampled
  briefly (``pm.sample``, 10 tuning + 10 draws), each NUTS sampler gets a short
  ``pm.sample`` (10 tuning + 10 draws, tree depth capped at 4: per-process one-offs such
  as JAX's per-primitive compilations, Numba's first use, PyTensor's cache).
  A twin rather than the timed model itself: the package keeps the compiled functions and
  log-density graphs of a model object for its next step construction, and a warm-up on
  the timed model would hand the timed construction that reuse (about 2 s -> 0.2-0.5 s
  per step at N = 10^5), which a user's first ``pm.sample(step=...)`` does not get. The
  timed runs pay their own graph building and compilation. A step's whole run
  (construction and ``pm.sample``) is made ``--step-runs`` times (default 2), each on a
  model it has not seen and with the same seed, and the least T1000 counts (all are in
  the JSON, ``t1000_runs_s``), as the NUTS gradient times are the best of several: one
  run can hold a full garbage collection of Python's objects (0.2-0.7 s here) or a burst
  of the shared machine's other load.
* Gradient evaluations per ESS (NUTS): leapfrog steps (``n_steps``) summed over the kept
  draws / ESS, with tuning / ESS, and to 1,000 ESS: ``G1000 = tuning + kept x 1000 /
  ESS``.

Projection (figures marked "projected")
---------------------------------------
Where a full NUTS run would be too long (numpyro and nutpie at N >= ``--project-at``,
default 10^7; PyMC's NUTS at N >= ``--pymc-project-at``, default 10^6), NUTS is priced:

    T1000(N) = G1000(n) x g(N) + max(O(n) + c(N) - c(n), c(N)),   O(n) = T1000(n) - G1000(n) x g(n)

``n`` is the largest N this sampler was measured at (in this run; else a counting run at
``--count-rows``, or ``--reuse-counts FILE``: an earlier run's JSON), ``g(N)`` the time
(fastest of several repetitions: other processes only slow a timing down) of one log
density + gradient with the sampler's own compiled function at N (numpyro:
``jax.value_and_grad`` of ``pymc.sampling.jax.get_jaxified_logp``, timed inside one jitted
``lax.fori_loop`` as NUTS runs it: at N = 10^6 a standalone jitted call took 63-77 ms
here, the loop 25-39 ms, numpyro's own sampler 42 ms per gradient; nutpie: the
Numba-compiled ``logp_func`` of
``nutpie.compile_pymc_model``; PyMC: ``model.logp_dlogp_function(ravel_inputs=True)``; the
last two are the functions their samplers call), ``c(N)`` the time to compile that
function (first call less one evaluation; timed after an untimed first compilation on
1,000 rows in the process), ``O(n)`` everything measured at ``n`` that is
not priced gradient work (compilation, set-up, the sampler's own overhead, conversion).
This assumes that NUTS's gradient evaluations per ESS do not fall as N grows (the
posterior of this model is close to Gaussian at every N and the mass matrix is adapted)
and ignores any growth of the sampler's overhead with N; ``O(n)`` also holds, as a
constant, the gap between a sampler's time per gradient in its run and ``g(n)`` (at N =
10^5 here nutpie and PyMC's NUTS ran at 1.7-2.6x ``g(n)`` per gradient): all of this
favours NUTS. When a NUTS is measured at two Ns, a "projection check" line prices the
larger from the smaller.

Threads: ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and ``MKL_NUM_THREADS`` default to 1
(as in the other benchmarks: the steps, PyTensor and Numba use one core). JAX's XLA
threading is left at its default, so numpyro may use both cores of the machine (as the
package's set-up passes do); said in the output.

Printed per N: a table (method, set-up + compile s, sampling s = tuning + kept draws,
kept s, ESS, R-hat, T1000 s, NUTS gradient evaluations per ESS, and for each step the
ratio of every NUTS's T1000 to its own), a line per NUTS with its gradient counts, and a
line naming the fastest NUTS with every step's ratio against it. JSON:
``benchmarks/output/fastest_nuts.json`` (``--json``).

Run: python benchmarks/fastest_nuts.py [--rows 1e5 1e6] [--methods scalable,numpyro,...]
     [--quick] [--nuts-draws 600] [--draws 2000] [--tune 1000]
     [--project-at 1e7] [--pymc-project-at 1e6] [--count-rows 1e5] [--reuse-counts FILE]
     (--quick: N = 5 x 10^3, tune 200, 400 step / 200 NUTS draws per chain: a smoke run
     of about two minutes that does not follow the tune=1,000 definition)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
import traceback
import warnings
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
# XLA_FLAGS deliberately untouched: JAX keeps its default threading (see the docstring)

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))
from demo import build_model  # noqa: E402  (the demo's model: one definition)

D = 10
STEPS = {"scalable": "ScalableMH", "austere": "AustereMH", "barker": "BarkerMinibatch",
         "sgld": "SGLD"}
NUTS = {"numpyro": "NUTS (numpyro)", "nutpie": "NUTS (nutpie)",
        "nutpie_jax": "NUTS (nutpie, JAX)", "pymc": "NUTS (PyMC default)"}
LABELS = {**STEPS, **NUTS}
REQUIRES = {"numpyro": ("numpyro", "jax"), "nutpie": ("nutpie", "numba"),
            "nutpie_jax": ("nutpie", "jax")}


def _pymc_major() -> int:
    import pymc as pm

    return int(pm.__version__.split(".")[0])


def pymc6_default_is_nutpie() -> bool:
    """Whether ``pm.sample()`` runs nutpie here: PyMC 6 makes nutpie its default NUTS
    when it is installed (and compiles with Numba). Then the ``nutpie`` entry is
    ``pm.sample()`` as PyMC 6 runs it, and the ``pymc`` entry asks for PyMC's own NUTS
    (``nuts_sampler="pymc"``, Numba-compiled) by name; on PyMC 5 ``pymc`` is ``pm.sample()``
    itself (PyTensor's C backend)."""
    return _pymc_major() >= 6 and not missing("nutpie")


def _relabel():
    """The labels of the PyMC version this run is on (:func:`pymc6_default_is_nutpie`)."""
    if pymc6_default_is_nutpie():
        NUTS["nutpie"] = LABELS["nutpie"] = "NUTS (nutpie: PyMC 6 default)"
        NUTS["pymc"] = LABELS["pymc"] = "NUTS (PyMC's own)"


def _rows(text):
    value = float(text)
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"not a positive whole number of rows: {text}")
    return int(value)


def missing(key):
    """The modules ``key`` needs that are not installed (empty for the steps and PyMC)."""
    return [m for m in REQUIRES.get(key, ()) if importlib.util.find_spec(m) is None]


# ---------------------------------------------------------------------- helpers


def _attrs(idata):
    """The attributes of the posterior and sample-stats groups (``sampling_time``, ...)."""
    from pymc_subsample.advice import _attrs as attrs

    return attrs(idata)


def _stats(idata, name):
    """The group ``name`` of a result, or None."""
    from pymc_subsample.advice import _group

    return _group(idata, name)


def _sum(ds, name):
    if ds is None or name not in ds:
        return None
    return float(np.asarray(ds[name].values, dtype=float).sum())


def _ess_rhat(idata):
    from pymc_subsample.diagnostics import convergence

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return convergence(idata, ["beta"])


def _finish(rec):
    """T1000 and the derived NUTS gradient counts of a measured record."""
    ess = rec["ess"]
    wall = rec["setup_s"] + rec["sampling_s"]
    rec["t1000_s"] = (wall - rec["kept_s"] + rec["kept_s"] * 1000.0 / ess) if ess > 0 \
        else float("inf")
    if rec.get("grads_kept") is not None and ess > 0:
        gk, gt = rec["grads_kept"], rec.get("grads_tune")
        rec["grads_per_ess_kept"] = gk / ess
        if gt is not None:
            rec["grads_per_ess_total"] = (gt + gk) / ess
            rec["grads_to_1000"] = gt + gk * 1000.0 / ess
    return rec


def _quiet():
    """Silence PyMC's and PyTensor's progress notes and the samplers' warnings."""
    import logging

    importlib.import_module("pymc")  # importing PyMC sets its logger's level: set it after
    for name in ("pymc", "pytensor", "jax", "numba"):
        logging.getLogger(name).setLevel(logging.ERROR)


# ---------------------------------------------------------------------- the steps


def run_step(model, twin, key, args, fresh=None):
    """One step's run: construction and ``pm.sample`` on a model it has not seen, after a
    warm-up on ``twin`` (a construction for PyTensor's compile cache and a short
    ``pm.sample`` for the process's one-offs, as each NUTS sampler gets). With ``fresh``
    (a function that builds another new model of the same data) the whole run is made
    ``args.step_runs`` times, each on a new model with the same seed (the same draws), and
    the run with the least T1000 counts, as the NUTS gradients take the best of several
    timings: a single run can hold one of Python's full garbage collections (0.2-0.7 s
    here) or the machine's other load. Every run's T1000 is in the JSON."""
    import pymc as pm

    import pymc_subsample as pms

    cls = getattr(pms, STEPS[key])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with twin:
            pm.sample(step=cls(), tune=10, draws=10, chains=1, cores=1, random_seed=0,
                      progressbar=False, compute_convergence_checks=False)
    runs = []
    for r in range(args.step_runs if fresh is not None else 1):
        runs.append(_timed_step_run(cls, key, args, fresh() if r else model))
    best = min(runs, key=lambda rec: rec["t1000_s"])
    best["t1000_runs_s"] = [rec["t1000_s"] for rec in runs]
    best["construct_timings_s"] = [rec["construct_s"] for rec in runs]
    return best


def _timed_step_run(cls, key, args, model):
    import pymc as pm

    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        step = cls()
        construct = time.perf_counter() - t0
        t0 = time.perf_counter()
        idata = pm.sample(step=step, tune=args.tune, draws=args.draws, chains=args.chains,
                          cores=1, random_seed=args.random_seed, progressbar=False,
                          compute_convergence_checks=False)
        wall = time.perf_counter() - t0
    loop = float(_attrs(idata).get("sampling_time", wall))
    ess, rhat = _ess_rhat(idata)
    kept = loop * args.draws / (args.tune + args.draws)
    rec = {"method": key, "label": STEPS[key], "kind": "step", "status": "measured",
           "setup_s": construct + (wall - loop), "construct_s": construct,
           "sampling_s": loop, "tune_s": loop - kept, "kept_s": kept, "ess": ess,
           "rhat": rhat, "tune": args.tune, "draws": args.draws, "chains": args.chains,
           "split": "pm.sample's sampling_time split by iterations"}
    return _finish(rec)


# ---------------------------------------------------------------------- NUTS samplers


def _nuts_kwargs(key, *, warmup=False):
    """``pm.sample`` keyword arguments of sampler ``key`` (chains one after the other)."""
    pymc6 = _pymc_major() >= 6
    if key == "numpyro":
        kw = {"chain_method": "sequential"}
        if warmup:  # PyMC 6 hands these kwargs to numpyro's NUTS, PyMC 5 to sample_numpyro_nuts
            kw.update({"max_tree_depth": 4} if pymc6 else {"nuts_kwargs": {"max_tree_depth": 4}})
        return {"nuts_sampler": "numpyro", "nuts_sampler_kwargs": kw}
    if key in ("nutpie", "nutpie_jax"):
        kw = {} if pymc6 else {"cores": 1}  # PyMC 6 passes pm.sample's own cores on
        if key == "nutpie_jax":  # nutpie's JAX back end (PyMC 5 and 6 read it here)
            kw.update(backend="jax", gradient_backend="jax")
        if warmup:
            kw["maxdepth"] = 4
        # PyMC 6 keeps nutpie's warm-up (its gradient counts) only when asked to
        return {"nuts_sampler": "nutpie", "nuts_sampler_kwargs": kw,
                **({"cores": 1, "discard_tuned_samples": False} if pymc6 else {})}
    out = {"cores": 1, "discard_tuned_samples": False}
    if pymc6_default_is_nutpie():
        out["nuts_sampler"] = "pymc"  # PyMC's own NUTS, which pm.sample() no longer runs
    if warmup:
        out["max_treedepth"] = 4
    return out


def _numpyro_tuning_replay(model, args):
    """The tuning of the timed numpyro run, replayed untimed: the same ``pm.sample`` call
    with numpyro's ``MCMC.run`` swapped for ``MCMC.warmup(collect_warmup=True)`` (which
    calls the original ``run``). Returns the sample stats of the warm-up draws."""
    import pymc as pm
    from numpyro.infer import MCMC

    original = MCMC.run

    def warmup_only(self, *a, **kw):
        MCMC.run = original
        try:
            self.warmup(*a, collect_warmup=True, **kw)
        finally:
            MCMC.run = warmup_only

    MCMC.run = warmup_only
    try:
        with model:
            idata = pm.sample(tune=args.tune, draws=args.nuts_draws, chains=args.chains,
                              random_seed=args.random_seed, progressbar=False,
                              compute_convergence_checks=False, **_nuts_kwargs("numpyro"))
    finally:
        MCMC.run = original
    return _stats(idata, "sample_stats")


def run_nuts(model, twin, key, args):
    import pymc as pm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with twin:
            pm.sample(tune=10, draws=10, chains=args.chains,
                      random_seed=args.random_seed + 1, progressbar=False,
                      compute_convergence_checks=False,
                      **_nuts_kwargs(key, warmup=True))  # warm-up (not counted)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        idata = pm.sample(tune=args.tune, draws=args.nuts_draws, chains=args.chains,
                          random_seed=args.random_seed, progressbar=False,
                          compute_convergence_checks=False, **_nuts_kwargs(key))
        wall = time.perf_counter() - t0
    loop = float(_attrs(idata).get("sampling_time", wall))
    ss = _stats(idata, "sample_stats")
    ws = _stats(idata, "warmup_sample_stats")
    ess, rhat = _ess_rhat(idata)
    gk = _sum(ss, "n_steps")
    gt = _sum(ws, "n_steps")
    rec = {"method": key, "label": NUTS[key], "kind": "nuts", "status": "measured",
           "setup_s": wall - loop, "sampling_s": loop, "ess": ess, "rhat": rhat,
           "tune": args.tune, "draws": args.nuts_draws, "chains": args.chains,
           "grads_kept": gk, "grads_tune": gt,
           "divergences": int(_sum(ss, "diverging") or 0)}
    notes = []
    if key == "numpyro":
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                replay = _numpyro_tuning_replay(model, args)
            gt = rec["grads_tune"] = _sum(replay, "n_steps")
            final = np.asarray(replay["step_size"].values)[:, -1]
            kept_step = np.asarray(ss["step_size"].values)[:, 0]
            rec["tuning_replay_exact"] = bool(np.allclose(final, kept_step, rtol=1e-12))
            notes.append("tuning replayed untimed to count its gradients: final step sizes "
                         + ("agree (same tuning)" if rec["tuning_replay_exact"] else
                            f"DIFFER ({final} vs {kept_step}): counts approximate"))
        except Exception as err:  # an API change in numpyro or PyMC: split by iterations
            notes.append(f"tuning replay failed ({type(err).__name__}: {err})")
    if key == "pymc" and "perf_counter_diff" in ss:
        kept = _sum(ss, "perf_counter_diff")
        rec["split"] = "kept = sum of PyMC's per-draw perf_counter_diff"
    elif gk is not None and gt is not None:
        kept = loop * gk / (gk + gt)
        rec["split"] = "sampling_time split by gradient evaluations"
        if key == "numpyro":
            rec["split"] += " (XLA compilation inside, shared by gradients)"
    else:
        kept = loop * args.nuts_draws / (args.tune + args.nuts_draws)
        rec["split"] = "sampling_time split by iterations (no tuning gradient counts)"
    rec.update(kept_s=kept, tune_s=loop - kept)
    if notes:
        rec["note"] = "; ".join(notes)
    return _finish(rec)


# ---------------------------------------------------------------------- gradient timing


def _time_calls(fn, *, budget=2.0, min_reps=5, max_reps=50):
    """The fastest wall time of ``fn()`` (already called once) over repeated calls: other
    processes on the machine can only slow a call down."""
    times = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < min_reps
                                     or time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.min(times)), len(times)


def _jax_loop_timing(logp, x):
    """``(compile s, s per logp+gradient, reps)`` of ``jax.value_and_grad(logp)`` evaluated
    inside one jitted ``lax.fori_loop`` (each step feeding the next), as numpyro's NUTS
    evaluates it: inside a loop of one XLA program. The time per evaluation is the
    difference between the fastest long and the fastest one-step loop (of 5 each), per
    extra step (dispatch cancels). A
    standalone jitted call is slower at large N (at N = 10^6 here: 63 ms against 36 ms in
    the loop, and 42 ms per gradient in numpyro's own sampler), so it would inflate
    numpyro's projection."""
    import jax

    value_and_grad = jax.value_and_grad(logp)

    def body(_, carry):
        point, acc = carry
        value, grad = value_and_grad(point)
        return [p + 1e-12 * g for p, g in zip(point, grad)], acc + value

    loop = jax.jit(lambda point, k: jax.lax.fori_loop(0, k, body, (point, 0.0)))

    def timed(k):
        t0 = time.perf_counter()
        jax.block_until_ready(loop(x, k))
        return time.perf_counter() - t0

    first = timed(1)
    one = max(timed(3) / 3, 1e-6)
    k = int(min(200, max(5, 0.5 / one))) + 1
    shorts, longs = [], []
    for _ in range(5):
        shorts.append(timed(1))
        longs.append(timed(k))
    grad = max(min(longs) - min(shorts), 0.0) / (k - 1)
    return max(first - grad, 0.0), grad, len(longs)


def grad_timing(model, key):
    """``{"grad_s", "compile_s", "reps", "function"}``: the time of one log density +
    gradient with sampler ``key``'s own compiled function (the fastest of ``reps``
    repetitions), and the time to build and compile that function (its first call less
    one evaluation)."""
    ip = model.initial_point()
    names = [v.name for v in model.value_vars]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        if key in ("numpyro", "nutpie_jax"):  # the JAX log density both samplers run
            import jax.numpy as jnp
            from pymc.sampling.jax import get_jaxified_logp

            logp = get_jaxified_logp(model, negative_logp=False)
            jaxify = time.perf_counter() - t0
            compile_s, grad, reps = _jax_loop_timing(logp, [jnp.asarray(ip[n])
                                                            for n in names])
            return {"grad_s": grad, "compile_s": jaxify + compile_s, "reps": reps,
                    "function": "jax.value_and_grad(get_jaxified_logp(model)) in a jitted "
                                "lax.fori_loop"}
        if key == "nutpie":
            import nutpie

            compiled = nutpie.compile_pymc_model(model)
            q = np.concatenate([np.ravel(ip[n]) for n in names]).astype(float)

            def call():
                compiled.logp_func(q)

            what = "nutpie.compile_pymc_model(model).logp_func (Numba)"
        else:
            f = model.logp_dlogp_function(ravel_inputs=True)
            f.set_extra_values({})
            order = getattr(f, "_grad_vars", model.continuous_value_vars)
            q = np.concatenate([np.ravel(ip[v.name]) for v in order]).astype(float)

            def call():
                f(q)

            what = "model.logp_dlogp_function(ravel_inputs=True)"
        call()
        first = time.perf_counter() - t0
        grad, reps = _time_calls(call)
    return {"grad_s": grad, "compile_s": max(first - grad, 0.0), "reps": reps,
            "function": what}


def project(key, n_rows, src, timing):
    """A projected NUTS record at ``n_rows`` from the measured record ``src``."""
    g1000 = src["grads_to_1000"]
    overhead = src["t1000_s"] - g1000 * src["grad_s"]
    nongrad = max(overhead + timing["compile_s"] - src["grad_compile_s"],
                  timing["compile_s"])
    grad_work = g1000 * timing["grad_s"]
    return {"method": key, "label": NUTS[key], "kind": "nuts", "status": "projected",
            "setup_s": nongrad, "sampling_s": grad_work, "t1000_s": nongrad + grad_work,
            "grads_to_1000": g1000, "grad_s": timing["grad_s"],
            "grad_compile_s": timing["compile_s"], "grad_reps": timing["reps"],
            "grad_function": timing["function"], "source_rows": src["rows"],
            "source_t1000_s": src["t1000_s"], "source_overhead_s": overhead,
            "source_grad_s": src["grad_s"], "source_grad_compile_s": src["grad_compile_s"],
            "source_file": src.get("source_file"),
            "grads_per_ess_kept": src.get("grads_per_ess_kept"),
            "grads_per_ess_total": src.get("grads_per_ess_total")}


# ---------------------------------------------------------------------- printing


def _fmt(v, spec, width):
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "-".rjust(width)
    return format(v, spec).rjust(width)


def print_table(n_rows, recs, nuts_keys, chains):
    proj = " projected"
    head = (f"{'method':<30}{'setup+compile s':>16}{'sampling s':>11}{'kept s':>9}"
            f"{'ESS':>7}{'R-hat':>7}{'T1000 s':>10}{'grad/ESS':>9}")
    ratio_w = 20
    for k in nuts_keys:
        head += f"{k + ' / step':>{ratio_w}}"
    print(f"\nN = {n_rows:,}: time to 1,000 bulk ESS (T1000), set-up and compilation "
          f"included; {chains} chains one after the other")
    print(head)
    print("-" * len(head))
    for rec in recs.values():
        if rec["status"] in ("failed", "skipped"):
            print(f"{rec['label']:<30}  {rec['status']}: {rec.get('error', '')[:150]}")
            continue
        p = rec["status"] == "projected"
        line = f"{rec['label']:<30}"
        line += _fmt(rec["setup_s"], ".1f", 16) + _fmt(rec["sampling_s"], ".1f", 11)
        line += _fmt(rec.get("kept_s"), ".1f", 9) + _fmt(rec.get("ess"), ".0f", 7)
        line += _fmt(rec.get("rhat"), ".3f", 7) + _fmt(rec["t1000_s"], ",.1f", 10)
        line += _fmt(rec.get("grads_per_ess_kept"), ".1f", 9)
        if rec["kind"] == "step":
            for k in nuts_keys:
                base = recs.get(k)
                if base is None or base["status"] not in ("measured", "projected"):
                    line += "-".rjust(ratio_w)
                    continue
                r = base["t1000_s"] / rec["t1000_s"]
                cell = f"{r:,.1f}x" + (proj if base["status"] == "projected" else "")
                line += cell.rjust(ratio_w)
        if p:
            line += "   <- projected (setup = compile and overhead, sampling = G1000 x g(N))"
        print(line)
    print("(set-up+compile: everything outside the sampler's loop; sampling: the loop, tuning "
          "+ kept draws, numpyro's including JAX's compilation of the sampler; kept: the kept "
          "draws' share; grad/ESS: NUTS's gradient evaluations per ESS over the kept draws; "
          "ratios: the NUTS's T1000 / the step's)")


def print_nuts_details(n_rows, recs):
    for key in NUTS:
        rec = recs.get(key)
        if rec is None or rec["status"] not in ("measured", "projected"):
            continue
        if rec["status"] == "measured":
            gt, gk = rec.get("grads_tune"), rec.get("grads_kept")
            txt = f"  {rec['label']}: "
            if gk is not None:
                txt += (f"{gt:,.0f} tuning + " if gt is not None else "tuning not counted, ")
                txt += (f"{gk:,.0f} kept gradient evaluations; {rec['grads_per_ess_kept']:.1f}"
                        " per ESS over the kept draws")
                if gt is not None:
                    txt += (f", {rec['grads_per_ess_total']:.1f} per ESS with tuning, "
                            f"{rec['grads_to_1000']:,.0f} to 1,000 ESS")
            txt += f"; {rec['divergences']} divergences; K: {rec['split']}"
            if rec.get("note"):
                txt += f"; {rec['note']}"
            if rec.get("grad_s") is not None:
                txt += (f"; g = {1e3 * rec['grad_s']:.2f} ms per logp+gradient, "
                        f"c = {rec['grad_compile_s']:.1f} s to compile it")
            print(txt)
        else:
            src = (f"N = {rec['source_rows']:,}"
                   + (f" of {rec['source_file']}" if rec.get("source_file") else ""))
            print(f"  {rec['label']} projected: {rec['grads_to_1000']:,.0f} gradient "
                  f"evaluations to 1,000 ESS, tuning included (measured at {src}) x "
                  f"{1e3 * rec['grad_s']:.2f} ms per logp+gradient at N = {n_rows:,} "
                  f"({rec['grad_function']}, fastest of {rec['grad_reps']}) = "
                  f"{rec['sampling_s']:,.1f} s projected, + {rec['setup_s']:.1f} s "
                  f"compilation and overhead projected (at {src}: T1000 {rec['source_t1000_s']:.1f}"
                  f" s - {rec['grads_to_1000']:,.0f} x {1e3 * rec['source_grad_s']:.2f} ms = "
                  f"{rec['source_overhead_s']:.1f} s; logp+gradient compile "
                  f"{rec['source_grad_compile_s']:.1f} s there, {rec['grad_compile_s']:.1f} s "
                  f"here) = {rec['t1000_s']:,.1f} s projected")


def fastest_line(n_rows, recs):
    nuts = [r for k, r in recs.items() if k in NUTS and r["status"] in ("measured",
                                                                          "projected")]
    steps = [r for k, r in recs.items() if k in STEPS and r["status"] == "measured"]
    if not nuts:
        return None, "no NUTS measured or projected"
    best = min(nuts, key=lambda r: r["t1000_s"])
    p = " projected" if best["status"] == "projected" else ""
    txt = (f"fastest NUTS at N = {n_rows:,}: {best['label']} (T1000 {best['t1000_s']:,.1f} s"
           f"{p})")
    if steps:
        txt += "; its T1000 over each step's: " + ", ".join(
            f"{r['label']} {best['t1000_s'] / r['t1000_s']:,.1f}x{p}" for r in steps)
    return best["method"], txt


# ---------------------------------------------------------------------- main


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=_rows, nargs="+", default=None,
                    help="sizes N (default 1e5 1e6; --quick: 5e3)")
    ap.add_argument("--methods", default=",".join(LABELS),
                    help="comma-separated among " + ",".join(LABELS) + " (default: all)")
    ap.add_argument("--tune", type=int, default=None, help="tuning draws (default 1000)")
    ap.add_argument("--draws", type=int, default=None,
                    help="the steps' kept draws per chain (default 2000)")
    ap.add_argument("--nuts-draws", type=int, default=None,
                    help="NUTS's kept draws per chain (default 600: ESS about 1,000-2,000)")
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--project-at", type=_rows, default=10**7,
                    help="project numpyro and nutpie at N >= this (default 1e7)")
    ap.add_argument("--pymc-project-at", type=_rows, default=10**6,
                    help="project PyMC's NUTS at N >= this (default 1e6)")
    ap.add_argument("--count-rows", type=_rows, default=None,
                    help="N of the counting run for a NUTS projected at every requested N "
                         "(default 1e5, capped below its projection threshold)")
    ap.add_argument("--reuse-counts", default=None, metavar="FILE",
                    help="take the counts for projections from an earlier run's JSON (its "
                         "largest measured N per sampler) instead of a counting run")
    ap.add_argument("--step-runs", type=int, default=2,
                    help="timed runs of each step, each on a new model; the least T1000 "
                         "counts (default 2)")
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--random-seed", type=int, default=1)
    ap.add_argument("--json", default=str(HERE / "output" / "fastest_nuts.json"))
    ap.add_argument("--quick", action="store_true",
                    help="N = 5e3, tune 200, 400 step / 200 NUTS draws (unless given)")
    ap.add_argument("--traceback", action="store_true", help="print failed runs' tracebacks")
    args = ap.parse_args(argv)
    quick = {"rows": [5 * 10**3], "tune": 200, "draws": 400, "nuts_draws": 200,
             "count_rows": 2 * 10**3}
    full = {"rows": [10**5, 10**6], "tune": 1000, "draws": 2000, "nuts_draws": 600,
            "count_rows": 10**5}
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.rows = sorted(set(args.rows))
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in LABELS]
    if unknown or not methods:
        ap.error(f"--methods: unknown {unknown}; choose among {','.join(LABELS)}")
    args.methods = [m for m in LABELS if m in methods]
    return args


def threshold(key, args):
    return args.pymc_project_at if key == "pymc" else args.project_at


def _load_counts(path):
    """The largest measured N per NUTS sampler in an earlier run's JSON."""
    with open(path) as fh:
        old = json.load(fh)
    out = {}
    for n_text, recs in old.get("results", {}).items():
        for key, rec in recs.items():
            if key in NUTS and rec.get("status") == "measured" and rec.get("grads_to_1000"):
                if key not in out or int(n_text) > out[key]["rows"]:
                    out[key] = {**rec, "rows": int(n_text), "source_file": str(path)}
    return out


def main(argv=None):
    args = parse_args(argv)
    warnings.filterwarnings("ignore", message="PyTensor could not link to a BLAS")
    _quiet()
    _relabel()
    import pymc as pm
    import pytensor

    import pymc_subsample as pms

    nuts_keys = []
    for key in args.methods:
        if key in NUTS:
            lack = missing(key)
            if lack:
                print(f"note: {NUTS[key]} skipped: {', '.join(lack)} not installed "
                      "(pip install \"pymc-subsample[bench]\")")
            else:
                nuts_keys.append(key)
    step_keys = [k for k in args.methods if k in STEPS]
    versions = {"python": platform.python_version(), "pymc": pm.__version__,
                "pytensor": pytensor.__version__, "pymc_subsample": pms.__version__,
                "numpy": np.__version__}
    for mod in ("numpyro", "jax", "nutpie", "numba", "arviz"):
        if importlib.util.find_spec(mod) is not None:
            versions[mod] = importlib.import_module(mod).__version__
    threads = {v: os.environ.get(v) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                              "MKL_NUM_THREADS", "XLA_FLAGS")}
    print(", ".join(f"{k} {v}" for k, v in versions.items()))
    print(f"{os.cpu_count()} CPUs; OMP/OPENBLAS/MKL_NUM_THREADS = "
          f"{threads['OMP_NUM_THREADS']}/{threads['OPENBLAS_NUM_THREADS']}/"
          f"{threads['MKL_NUM_THREADS']}; XLA_FLAGS = {threads['XLA_FLAGS'] or '(unset)'}: "
          "JAX's default threading, so numpyro may use every core")
    if not pytensor.config.blas__ldflags and pm.__version__.startswith("5."):
        print("note: PyTensor links to no BLAS here (blas__ldflags empty): PyMC's default "
              "NUTS runs PyTensor's C backend without it, as for the users of such a set-up")
    print(f"{args.chains} chains one after the other, tune {args.tune}; steps {args.draws} "
          f"and NUTS {args.nuts_draws} kept draws per chain; random_seed {args.random_seed}; data "
          f"seed {args.data_seed}", flush=True)

    reused = _load_counts(args.reuse_counts) if args.reuse_counts else {}
    # which NUTS need a counting run (projected at every requested N, no reused counts)
    count_for = [k for k in nuts_keys if all(n >= threshold(k, args) for n in args.rows)
                 and k not in reused]
    count_n = {k: min(args.count_rows, threshold(k, args) - 1) for k in count_for}
    largest = max(args.rows + list(count_n.values()) + [r["rows"] for r in reused.values()])
    X, y, _ = pms.datasets.make_logistic(largest, D, seed=args.data_seed)

    results = {}      # N -> key -> record
    measured = dict(reused)  # key -> the latest measured record (with grad timing)
    out = {"benchmark": "fastest_nuts", "argv": sys.argv[1:] if argv is None else argv,
           "versions": versions, "threads": threads, "cpus": os.cpu_count(),
           "config": {k: v for k, v in vars(args).items()}, "model": (
               "make_logistic(N, 10, seed=data_seed); beta ~ Normal(0, 1, shape=10); "
               "y ~ Bernoulli(logit_p=X @ beta)"), "results": results, "counting_runs": {}}

    def write_json():
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump({**out, "results": {str(n): r for n, r in results.items()}}, fh,
                      indent=1, default=float)

    def measure_nuts(key, n_rows, model, twin):
        try:
            rec = run_nuts(model, twin, key, args)
        except Exception as err:
            if args.traceback:
                traceback.print_exc()
            return {"method": key, "label": NUTS[key], "kind": "nuts", "status": "failed",
                    "error": f"{type(err).__name__}: {err}", "rows": n_rows}
        rec["rows"] = n_rows
        if rec.get("grads_to_1000") and (key not in measured
                                         or measured[key]["rows"] <= n_rows):
            measured[key] = rec
        return rec

    warmed = set()

    def add_timing(rec, model=None):
        """Time the sampler's logp+gradient at the record's N (once per record), after an
        untimed first compilation on 1,000 rows in this process (per-process one-offs)."""
        if rec.get("grad_s") is None:
            n = rec["rows"]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if rec["method"] not in warmed:
                    grad_timing(build_model(X[:1000], y[:1000]), rec["method"])
                    warmed.add(rec["method"])
                t = grad_timing(model if model is not None else build_model(X[:n], y[:n]),
                                rec["method"])
            rec.update(grad_s=t["grad_s"], grad_compile_s=t["compile_s"],
                       grad_reps=t["reps"], grad_function=t["function"])
        return {"grad_s": rec["grad_s"], "compile_s": rec["grad_compile_s"],
                "reps": rec["grad_reps"], "function": rec["grad_function"]}

    def progress(rec):
        if rec["status"] == "measured":
            print(f"  {rec['label']}: set-up {rec['setup_s']:.1f} s, sampling "
                  f"{rec['sampling_s']:.1f} s, ESS {rec['ess']:.0f} -> T1000 "
                  f"{rec['t1000_s']:.1f} s", flush=True)
        elif rec["status"] == "projected":
            print(f"  {rec['label']}: T1000 {rec['t1000_s']:,.1f} s projected", flush=True)
        else:
            print(f"  {rec['label']}: {rec['status']}: {rec.get('error', '')}", flush=True)

    for key, n_rows in count_n.items():
        print(f"\ncounting run: {NUTS[key]} at N = {n_rows:,} (it is projected at every "
              "requested N)", flush=True)
        rec = measure_nuts(key, n_rows, build_model(X[:n_rows], y[:n_rows]),
                           build_model(X[:n_rows], y[:n_rows]))
        out["counting_runs"][key] = rec
        progress(rec)

    for n_rows in args.rows:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"\n== N = {n_rows:,} (load average {load:.2f} on {os.cpu_count()} CPUs: other "
              "processes slow every timing)", flush=True)
        out.setdefault("load_average", {})[str(n_rows)] = load
        model = build_model(X[:n_rows], y[:n_rows])
        twin = build_model(X[:n_rows], y[:n_rows])  # the warm-ups' model (see docstring)
        recs = results[n_rows] = {}
        for key in step_keys:
            try:
                recs[key] = run_step(model, twin, key, args, fresh=lambda: build_model(
                    X[:n_rows], y[:n_rows]))
            except Exception as err:
                if args.traceback:
                    traceback.print_exc()
                recs[key] = {"method": key, "label": STEPS[key], "kind": "step",
                             "status": "failed", "error": f"{type(err).__name__}: {err}"}
            recs[key]["rows"] = n_rows
            progress(recs[key])
        checks = []
        model = build_model(X[:n_rows], y[:n_rows])  # NUTS's own, untouched by the steps
        for key in nuts_keys:
            if n_rows < threshold(key, args):
                previous = measured.get(key)
                rec = measure_nuts(key, n_rows, model, twin)
                if (previous is not None and previous["rows"] < n_rows
                        and rec["status"] == "measured"):
                    # price this N from the smaller one, against the measurement
                    try:
                        add_timing(previous)
                        check = project(key, n_rows, previous, add_timing(rec, model))
                        rec["projection_check"] = {"from_rows": previous["rows"],
                                                   "projected_t1000_s": check["t1000_s"]}
                        checks.append(
                            f"  projection check, {NUTS[key]}: priced from N = "
                            f"{previous['rows']:,} it would take {check['t1000_s']:,.1f} s at "
                            f"N = {n_rows:,}; measured {rec['t1000_s']:,.1f} s (ratio "
                            f"{check['t1000_s'] / rec['t1000_s']:.2f})")
                    except Exception as err:
                        checks.append(f"  projection check, {NUTS[key]}: failed "
                                      f"({type(err).__name__}: {err})")
            else:
                src = measured.get(key)
                try:
                    if src is None:
                        raise LookupError("no measured N to project from")
                    add_timing(src)
                    rec = project(key, n_rows, src, add_timing({"rows": n_rows,
                                                                 "method": key}, model))
                except Exception as err:
                    if args.traceback:
                        traceback.print_exc()
                    rec = {"method": key, "label": NUTS[key], "kind": "nuts",
                           "status": "failed", "error": f"{type(err).__name__}: {err}"}
            rec["rows"] = n_rows
            recs[key] = rec
            progress(rec)
        for rec in recs.values():
            if rec["kind"] == "step" and rec["status"] == "measured":
                rec["ratios"] = {k: recs[k]["t1000_s"] / rec["t1000_s"] for k in nuts_keys
                                 if recs.get(k, {}).get("status") in ("measured",
                                                                      "projected")}
                rec["ratios_projected"] = [k for k in rec["ratios"]
                                           if recs[k]["status"] == "projected"]
        print_table(n_rows, recs, nuts_keys, args.chains)
        print_nuts_details(n_rows, recs)
        for line in checks:
            print(line)
        best, line = fastest_line(n_rows, recs)
        out.setdefault("fastest_nuts", {})[str(n_rows)] = best
        print(line, flush=True)
        write_json()
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
