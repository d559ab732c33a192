"""``pms.advise``: which step, or NUTS, for a model, from a short pilot run.

:func:`advise` builds each of this package's steps on the model (a step that refuses the
model is reported with the first sentence of its reason), runs each step that builds for
a short pilot, and forecasts from the pilot's timing, ``data_used`` and bulk ESS the
time a full run would take to 1,000 effective draws. NUTS is priced from the time of one
full-data log density and gradient (PyMC's compiled function, and numpyro's and nutpie's
when installed) times a number of gradient evaluations per effective draw: an assumed
default, refined by a short NUTS pilot (on a random subsample of the rows, its
likelihood scaled up, when a pilot on all rows would be dear). The returned
:class:`Advice` prints as a table and ends with a recommendation, which says plainly
when NUTS is the better tool.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import re
import time
import warnings
from dataclasses import asdict, dataclass, field

import numpy as np

from .kernels._validation import InvalidParameterError, check_int, check_positive
from .steps import REGISTRY as STEP_REGISTRY

__all__ = ["advise", "Advice", "Forecast", "STEP_NAMES", "NUTS_NAMES"]

#: the package's steps that :func:`advise` tries, in this order: those of
#: :data:`pymc_subsample.steps.REGISTRY` with ``advise=True`` (at import; a step
#: registered later is tried too, as :func:`advise` reads the registry when called)
STEP_NAMES = tuple(name for name, entry in STEP_REGISTRY.items() if entry.advise)
#: the NUTS samplers :func:`advise` prices: ``"pymc"``, and ``"numpyro"`` and ``"nutpie"``
#: when installed (nutpie is PyMC 6's default NUTS when installed)
NUTS_NAMES = ("pymc", "numpyro", "nutpie")
_NUTS_LABELS = {"pymc": "NUTS (PyMC)", "numpyro": "NUTS (numpyro)",
                "nutpie": "NUTS (nutpie)"}
#: what each NUTS needs installed (a missing one is skipped, with a note)
_NUTS_NEEDS = {"numpyro": ("numpyro", "jax"), "nutpie": ("nutpie", "numba")}
#: assumed Python overhead of PyMC's NUTS per gradient, for pricing its pilot only (s)
_NUTS_OVERHEAD_S = 2e-4
#: NUTS gradient evaluations per bulk ESS, tuning of 2 x 1,000 included, as measured by
#: ``benchmarks/fastest_nuts.py`` on the 10-feature logistic regression (14.6-18.2 for
#: nutpie, numpyro and PyMC at N = 10^5) ...
_GRADS_PER_ESS = 15.0
#: ... and by ``benchmarks/hierarchical.py``'s numpyro reference on the non-centred
#: hierarchical logistic regression at N = 10^5 (about 610 with 200 groups, 850 with 20:
#: deep trees in the funnel, and the smallest ESS is a hyperparameter's)
_GRADS_PER_ESS_HIERARCHICAL = 600.0
#: rows of the NUTS pilot's random subsample when a pilot on all rows is too dear
_NUTS_PILOT_ROWS = 5000


@dataclass
class Forecast:
    """One candidate's line of :class:`Advice` (a step of this package, or a NUTS).

    Attributes
    ----------
    method : str
        ``"ScalableMH"``, ..., ``"NUTS (PyMC)"``, ``"NUTS (numpyro)"`` (``"NUTS (numpyro,
        GPU)"`` when timed on a GPU), ``"NUTS (nutpie)"``.
    status : str
        ``"ok"``; ``"refused"`` (the step's construction raised: ``reason`` is the first
        sentence of its message); ``"failed"`` (the pilot or the timing raised);
        ``"skipped"`` (not installed, or not asked for).
    reason : str
        Why the candidate is not usable ("" when it is).
    exact : str
        ``"exact"`` or which knob sets the approximation.
    setup_s : float
        Set-up in seconds: a step's construction plus ``pm.sample``'s own time outside its
        draw loop, measured in the pilot; for NUTS, the compilation of its log density and
        gradient.
    seconds_per_draw : float
        Seconds per draw (tuning draws included, which cost about the same for a step);
        for NUTS, per gradient evaluation.
    rows_per_draw : float
        Mean rows read per kept draw (``data_used``); for NUTS ``N`` times its gradient
        evaluations per kept draw, when a NUTS pilot ran (NaN otherwise).
    ess_per_draw : float
        Bulk ESS of the pilot's least-mixing component per kept draw (:func:`least_ess`,
        which allows for the noise of a short pilot's estimates), at most 1 for a step (at
        most 2 for NUTS, whose draws can be antithetic); rough.
    pilot_ess, pilot_rhat : float
        The pilot's minimum bulk ESS and maximum R-hat (split R-hat for one chain).
    poor_mixing : bool
        The pilot mixed too poorly to trust this step (see :func:`advise`).
    grads_per_ess : float
        NUTS only: gradient evaluations per effective draw, tuning included.
    grads_source : str
        NUTS only: ``"assumed"``, ``"assumed (hierarchical)"`` or ``"NUTS pilot"``.
    hierarchical : bool
        A step found a random intercept per group (its blocked sweep), or SGLD refused
        the model for one.
    ess_per_s : float
        Effective draws per second of sampling (tuning included) in the forecast run:
        ``1000 / (t1000_s - setup_s)``.
    t1000_s : float
        Forecast time to 1,000 effective draws, set-up included.
    notes : list of str
        Warnings seen in construction or the pilot, assumptions.
    """

    method: str
    status: str = "ok"
    reason: str = ""
    exact: str = "exact"
    setup_s: float = math.nan
    seconds_per_draw: float = math.nan
    rows_per_draw: float = math.nan
    ess_per_draw: float = math.nan
    pilot_ess: float = math.nan
    pilot_rhat: float = math.nan
    poor_mixing: bool = False
    grads_per_ess: float = math.nan
    grads_source: str = ""
    hierarchical: bool = False
    ess_per_s: float = math.nan
    t1000_s: float = math.nan
    notes: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok" and math.isfinite(self.t1000_s)


@dataclass
class Advice:
    """What :func:`advise` found: one :class:`Forecast` per candidate and a
    recommendation. ``print(advice)`` shows a table; :meth:`to_dict` gives plain Python
    values (no pandas).

    Attributes
    ----------
    n_rows : int or None
        ``N``, the rows of the likelihood (None when no step could read them).
    steps : list of Forecast
        This package's steps, in the order tried.
    nuts : list of Forecast
        The NUTS samplers priced.
    recommendation : str
        The method to use: a step's name, or ``"NUTS"``.
    reason : str
        Why, in a sentence or two.
    settings : dict
        The pilot and the forecast run assumed (``pilot_draws``, ``tune``, ``chains``,
        ``nuts_grads_per_ess``, ...).
    """

    n_rows: int | None
    steps: list
    nuts: list
    recommendation: str
    reason: str
    settings: dict

    def to_dict(self) -> dict:
        """Everything as plain dicts, lists, strings and floats."""
        return {"n_rows": self.n_rows, "recommendation": self.recommendation,
                "reason": self.reason, "settings": dict(self.settings),
                "steps": [asdict(f) for f in self.steps],
                "nuts": [asdict(f) for f in self.nuts]}

    def __str__(self) -> str:
        return _table(self)

    __repr__ = __str__


# ---------------------------------------------------------------------- helpers


def _first_sentence(text) -> str:
    """The first sentence of an error message (up to a full stop followed by a capital)."""
    text = " ".join(str(text).split())
    m = re.search(r"(?<=[.!?])\s+(?=[A-Z(\"'`])", text)
    return text[:m.start()] if m else text


def _error(err) -> str:
    return f"{type(err).__name__}: {_first_sentence(err)}"


def _attrs(idata) -> dict:
    from .diagnostics import get_group

    out = {}
    for name in ("posterior", "sample_stats"):
        try:
            out.update(get_group(idata, name).attrs)
        except KeyError:
            pass
    return out


def _group(idata, name):
    from .diagnostics import get_group

    try:
        return get_group(idata, name)
    except KeyError:
        return None


def _stat_sum(ds, name):
    """Sum of a sample stat (NaN when missing)."""
    if ds is None:
        return math.nan
    from .diagnostics import find_stat

    values = find_stat(ds, name)
    return math.nan if values is None else float(np.nansum(np.asarray(values.values, float)))


def rhat_limit(max_rhat: float, ess: float) -> float:
    """The pilot R-hat above which a step counts as mixing poorly: ``max_rhat``, or
    ``1 + 15 / ESS`` when that is larger. A short pilot's R-hat is noisy: for a
    well-mixing chain, ``R-hat^2 ~ 1 + (F - 1) / n`` with ``F`` the ratio of between- to
    within-chain variance and ``n`` the effective draws per (half-)chain (Gelman & Rubin
    1992, "Inference from iterative simulation using multiple sequences"), so
    ``R-hat - 1`` shrinks as ``1 / ESS``. ArviZ's rank-normalised split R-hat (the
    larger of its bulk and folded forms) of independent draws, four half-chains of 25
    and the largest of 10 parameters, exceeds 1.12 with probability 0.01 (measured in
    the tests), hence the constant 15. With 100 pilot draws at ESS 73 a well-mixing
    chain's R-hat reached 1.11; the limit there is 1.21."""
    return max(float(max_rhat), 1.0 + 15.0 / max(float(ess), 1.0))


def _ess_rhat(idata, names):
    """``(min bulk ESS, max R-hat)`` with :func:`diagnostics.convergence`; NaN (a constant
    chain) counts as ESS 0. With one chain the R-hat is of its two halves taken as two
    chains (ArviZ needs two), i.e. the split R-hat of the chain."""
    from .diagnostics import convergence, get_group

    logger = logging.getLogger("arviz")  # its note on one chain: R-hat is split below
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return _ess_rhat_quiet(idata, names, convergence, get_group)
    finally:
        logger.setLevel(level)


def _ess_rhat_quiet(idata, names, convergence, get_group):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ess, rhat = convergence(idata, names)
        post = get_group(idata, "posterior")[list(names)]
        if post.sizes["chain"] == 1 and post.sizes["draw"] >= 8:
            import xarray as xr

            half = post.sizes["draw"] // 2
            first = post.isel(chain=0, draw=slice(0, half))
            second = post.isel(chain=0, draw=slice(half, 2 * half))
            second = second.assign_coords(draw=first["draw"].values)
            halves = xr.concat([first, second], dim="chain")
            halves = halves.assign_coords(chain=[0, 1]).transpose("chain", "draw", ...)
            rhat = convergence(halves)[1]
    ess = 0.0 if not np.isfinite(ess) else float(ess)
    return ess, float(rhat)


def least_ess(x, z=1.0):
    """The least bulk ESS over components, allowing for the noise of a short pilot.

    The least of ``k`` noisy ESS estimates leans low: on 10 components of equal true ESS,
    200 draws gave a least estimate whose median was 0.67 of the truth (0.79 with the
    allowance below; one clearly slower component came out 1.0-1.13 of its own). The noise of
    ``log ESS`` is measured from the pilot itself: the ESS of each component on the first
    and second halves of the draws gives ``var(log ESS_half) = mean(d^2) / 2`` (``d`` the
    halves' difference), and a full-length estimate has half that variance (the variance
    of an autocorrelation-time estimate falls as ``1 / n``; Geyer, "Practical Markov chain
    Monte Carlo", 1992). The estimate is the geometric mean of the components whose ESS is
    within ``z`` standard deviations of a difference of two estimates above the least: a
    component that mixes clearly slower than the rest stands alone and is taken as it is.

    Parameters
    ----------
    x : ndarray, shape (chains, draws, k)
        The pilot's draws, one column per scalar component.
    z : float, default 1
        The width of the band above the least estimate, in standard deviations.

    Returns
    -------
    float
        The ESS forecast for the least-mixing component, 0 when some component's ESS is
        not finite (a constant chain); the plain least estimate when there are fewer than
        two components or 16 draws per chain.
    """
    import arviz as az
    import xarray as xr

    def ess(a):
        ds = xr.Dataset({"x": (("chain", "draw", "k"), a)})
        return np.asarray(az.ess(ds, method="bulk")["x"].values, dtype=float)

    x = np.asarray(x, dtype=float)
    if np.any(np.all(np.ptp(x, axis=1) == 0, axis=0)):
        return 0.0  # a component that never moved (ArviZ may give it a finite ESS)
    e = ess(x)
    if not np.all(np.isfinite(e) & (e > 0)):
        return 0.0
    half = x.shape[1] // 2
    if x.shape[2] < 2 or half < 8:
        return float(e.min())
    e1, e2 = ess(x[:, :half]), ess(x[:, half:2 * half])
    if not np.all(np.isfinite(e1) & (e1 > 0) & np.isfinite(e2) & (e2 > 0)):
        return float(e.min())
    sd = math.sqrt(float(np.mean((np.log(e1) - np.log(e2)) ** 2)) / 4.0)
    log_e = np.log(e)
    band = log_e <= log_e.min() + z * math.sqrt(2.0) * sd
    return float(np.exp(log_e[band].mean()))


def _forecast_ess(idata, names):
    """:func:`least_ess` of the pilot's draws of ``names`` (every scalar component)."""
    from .diagnostics import get_group

    post = get_group(idata, "posterior")[list(names)]
    cols = []
    for name in names:
        v = np.asarray(post[name].values, dtype=float)
        cols.append(v.reshape(v.shape[0], v.shape[1], -1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return least_ess(np.concatenate(cols, axis=2))


def _sample_kwargs(tune, draws, chains, seed):
    return {"tune": tune, "draws": draws, "chains": chains, "cores": 1,
            "random_seed": int(seed), "progressbar": False,
            "compute_convergence_checks": False}


def _rows_of_observed(model):
    """``N`` from the observed data's leading dimension (when no step could build)."""
    sizes = []
    for rv in model.observed_RVs:
        try:
            shape = np.shape(model.rvs_to_values[rv].eval())
        except Exception:  # noqa: BLE001 - only a label for the report
            continue
        if shape:
            sizes.append(int(shape[0]))
    return max(sizes) if sizes else None


class _Quiet:
    """PyMC's and PyTensor's loggers at ERROR and Python warnings recorded, restored on
    exit (the pilots' notes would drown the report)."""

    def __enter__(self):
        self._levels = {}
        for name in ("pymc", "pytensor", "arviz"):
            logger = logging.getLogger(name)
            self._levels[name] = logger.level
            logger.setLevel(logging.ERROR)
        self._catch = warnings.catch_warnings(record=True)
        self.caught = self._catch.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        self._catch.__exit__(*exc)
        for name, level in self._levels.items():
            logging.getLogger(name).setLevel(level)
        return False

    def first_warnings(self, k=2):
        out = []
        for w in self.caught:
            text = _first_sentence(w.message)
            if "BLAS" in text or text in out:
                continue
            out.append(text)
            if len(out) == k:
                break
        return out


# ---------------------------------------------------------------------- steps


def _pytensor_startup() -> float:
    """Compile a trivial PyTensor function first, untimed: the first compilation in a
    process reads PyTensor's compile cache index (seconds to tens of seconds with a large
    cache), a one-off that would otherwise land on the first step's set-up."""
    import pytensor
    import pytensor.tensor as pt

    t0 = time.perf_counter()
    x = pt.dvector("x")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytensor.function([x], 2 * x)
    return time.perf_counter() - t0


def _forecast_run(setup_s, s_per_draw, ess_per_draw, tune, chains):
    """``(T1000, ESS/s)`` of a run with ``chains`` chains of ``tune`` tuning draws one
    after the other, kept draws until 1,000 effective ones: the benchmarks' definition
    ``T1000 = W - K + K x 1000 / ESS`` (``benchmarks/fastest_nuts.py``) with ``W - K`` the
    set-up plus the tuning draws."""
    sampling = s_per_draw * (chains * tune + 1000.0 / ess_per_draw)
    return setup_s + sampling, 1000.0 / sampling


def _fresh_copy(model):
    """A copy of the model (``pymc.model.fgraph.clone_model``), or the model itself when
    it cannot be copied. The steps keep compiled functions per model object for the next
    step built on it; a pilot on the model itself would hand the later pilots that reuse,
    and their set-up would be forecast too low for the run that builds the step once."""
    try:
        from pymc.model.fgraph import clone_model

        return clone_model(model), ""
    except Exception as err:  # noqa: BLE001 - fall back on the model itself
        return model, ("pilot on the model itself (it could not be copied: "
                       f"{_error(err)}): set-up may be forecast low after another pilot")


def _pilot_step(model, name, kwargs, seed, opts):
    import pymc as pm

    entry = STEP_REGISTRY[name]
    fc = Forecast(method=name, exact=entry.exactness)
    cls = entry.load()
    twin, _ = _fresh_copy(model)
    model, note = _fresh_copy(model)
    if note:
        fc.notes.append(note)
    with _Quiet() as quiet:
        try:
            if twin is not model:  # warm-up on a twin, not timed (see advise's Notes)
                with twin:
                    cls(**kwargs)
            t0 = time.perf_counter()
            with model:
                step = cls(**kwargs)
            construct = time.perf_counter() - t0
        except Exception as err:  # noqa: BLE001 - the refusal is the report
            fc.status, fc.reason = "refused", _error(err)
            fc.hierarchical = "random intercept" in str(err)  # SGLD's refusal says so
            return fc, None
        n_rows = getattr(step, "n_rows", None)
        fc.hierarchical = getattr(step, "sweep", None) is not None
        try:
            t0 = time.perf_counter()
            with model:
                idata = pm.sample(step=step, **_sample_kwargs(
                    opts["pilot_tune"], opts["pilot_draws"], opts["pilot_chains"], seed))
            wall = time.perf_counter() - t0
        except Exception as err:  # noqa: BLE001 - a pilot that fails is reported
            fc.status, fc.reason = "failed", "the pilot failed: " + _error(err)
            return fc, n_rows
    fc.notes += quiet.first_warnings()
    loop = float(_attrs(idata).get("sampling_time", wall))
    iters = opts["pilot_chains"] * (opts["pilot_tune"] + opts["pilot_draws"])
    kept = opts["pilot_chains"] * opts["pilot_draws"]
    fc.setup_s = construct + max(wall - loop, 0.0)
    fc.seconds_per_draw = loop / iters
    used = _stat_sum(_group(idata, "sample_stats"), "data_used")
    fc.rows_per_draw = used / kept
    fc.pilot_ess, fc.pilot_rhat = _ess_rhat(idata, opts["names"])
    fc.poor_mixing = bool(fc.pilot_ess < opts["min_pilot_ess"]
                          or not fc.pilot_rhat <= rhat_limit(opts["max_rhat"], fc.pilot_ess))
    fc.ess_per_draw = min(max(_forecast_ess(idata, opts["names"]), 1.0) / kept, 1.0)
    fc.t1000_s, fc.ess_per_s = _forecast_run(fc.setup_s, fc.seconds_per_draw,
                                             fc.ess_per_draw, opts["tune"], opts["chains"])
    if fc.poor_mixing:
        fc.reason = (f"mixes poorly in the pilot (bulk ESS {fc.pilot_ess:.0f} from {kept} "
                     f"draws, R-hat {fc.pilot_rhat:.2f})")
    return fc, n_rows


# ---------------------------------------------------------------------- NUTS


def _fastest(fn, budget, min_reps=3, max_reps=30):
    """The fastest wall time of ``fn()`` over repetitions (others only slow it down)."""
    times = []
    start = time.perf_counter()
    while len(times) < max_reps and (len(times) < min_reps
                                     or time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(min(times))


def _time_pymc_gradient(model, budget, mode=None):
    """``(compile s, s per log density + gradient)`` of PyMC's compiled function, the one
    its NUTS calls (``model.logp_dlogp_function``), compiled in PyTensor's ``mode``
    (default: PyMC's)."""
    t0 = time.perf_counter()
    kwargs = {} if mode is None else {"mode": mode}
    f = model.logp_dlogp_function(ravel_inputs=True, **kwargs)
    f.set_extra_values({})
    point = model.initial_point()
    order = getattr(f, "_grad_vars", model.continuous_value_vars)
    q = np.concatenate([np.ravel(point[v.name]) for v in order]).astype(float)
    f(q)
    first = time.perf_counter() - t0
    g = _fastest(lambda: f(q), budget)
    return max(first - g, 0.0), g


def _time_nutpie_gradient(model, budget):
    """``(compile s, s per log density + gradient)`` of nutpie's default back end: the
    model's log density and gradient compiled by PyTensor's Numba mode, the graph that
    ``nutpie.compile_pymc_model`` compiles (nutpie then calls it from Rust; called from
    Python here, each evaluation carries a few microseconds more)."""
    return _time_pymc_gradient(model, budget, mode="NUMBA")


def _jax_platform() -> str:
    """The platform of JAX's default device (``"cpu"``, ``"gpu"``, ``"tpu"``)."""
    import jax

    return str(jax.devices()[0].platform)


def _time_numpyro_gradient(model, budget):
    """``(compile s, s per log density + gradient)`` of numpyro's: ``jax.value_and_grad``
    of ``pymc.sampling.jax.get_jaxified_logp``, evaluated inside one jitted
    ``lax.fori_loop`` as numpyro's NUTS evaluates it (the time per evaluation is the
    difference between a long and a one-step loop, per extra step)."""
    import jax
    import jax.numpy as jnp
    from pymc.sampling.jax import get_jaxified_logp

    t0 = time.perf_counter()
    logp = get_jaxified_logp(model, negative_logp=False)
    point = model.initial_point()
    x = [jnp.asarray(point[v.name]) for v in model.value_vars]
    value_and_grad = jax.value_and_grad(logp)

    def body(_, carry):
        q, acc = carry
        value, grad = value_and_grad(q)
        return [p + 1e-12 * d for p, d in zip(q, grad)], acc + value

    loop = jax.jit(lambda q, k: jax.lax.fori_loop(0, k, body, (q, 0.0)))

    def timed(k):
        s = time.perf_counter()
        jax.block_until_ready(loop(x, k))
        return time.perf_counter() - s

    timed(1)
    compile_s = time.perf_counter() - t0
    one = max(timed(3) / 3.0, 1e-7)
    k = int(min(200, max(5, 0.25 * budget / one))) + 1
    short = _fastest(lambda: timed(1), budget / 4)
    long = min(timed(k) for _ in range(3))
    g = max(long - short, 0.0) / (k - 1)
    return max(compile_s - g, 0.0), max(g, 1e-9)


#: the gradient timer of each NUTS
_TIMERS = {"pymc": _time_pymc_gradient, "numpyro": _time_numpyro_gradient,
           "nutpie": _time_nutpie_gradient}


def _pymc_major() -> int:
    import pymc

    return int(pymc.__version__.split(".")[0])


def _subsample_model(model, n_sub, seed):
    """A model of the same posterior's shape on ``n_sub`` random rows: one flat vector
    ``q`` (the unconstrained space PyMC's NUTS samples, the transforms' Jacobians
    included) and a potential of the log prior plus ``N / n_sub`` times the sampled
    rows' log-likelihood, built from :class:`~pymc_subsample.engine.LikelihoodEngine`'s
    row graphs. Its curvature is the full posterior's (the prior weighs against the
    likelihood as with all rows), about another centre, so NUTS needs about as many
    gradients per effective draw on it. Returns ``(model, N)``."""
    import pymc as pm
    import pytensor.tensor as pt
    from pytensor.graph.replace import graph_replace

    from .engine import LikelihoodEngine

    eng = LikelihoodEngine(model, check=False)
    if len(eng.vars) != len(model.value_vars):
        raise ValueError("the model has discrete variables")
    n = eng.n_rows
    rows = np.sort(np.random.default_rng(seed).choice(n, size=min(n_sub, n), replace=False))
    joined = eng._joined
    replace = {b: pt.constant(d) for b, d in zip(joined.batch, eng.gather(rows))}
    with pm.Model() as sub:
        q = pm.Flat("q", shape=eng.ndim, initval=eng.initial_q())
        replace[joined.q] = q
        # graph_replace, not clone_replace: q itself (not a copy) must enter the graph
        pm.Potential("logp", graph_replace(
            joined.prior + (n / rows.size) * pt.sum(joined.loglik), replace, strict=False))
    return sub, n


def _nuts_pilot(model, seed, opts, names=None):
    """A short run of PyMC's NUTS: ``(grads per ESS to 1,000 ESS, tuning included, over
    1,000; kept grads per draw; seconds per gradient in the sampler; ESS per draw)``."""
    import pymc as pm

    # PyMC's own NUTS (on PyMC 6 the default is nutpie when installed): its stats hold
    # the gradient counts and times per draw that the forecast reads
    with model, _Quiet():
        idata = pm.sample(discard_tuned_samples=False, nuts_sampler="pymc", **_sample_kwargs(
            opts["pilot_tune"], opts["pilot_draws"], opts["pilot_chains"], seed))
    ss, ws = _group(idata, "sample_stats"), _group(idata, "warmup_sample_stats")
    kept = opts["pilot_chains"] * opts["pilot_draws"]
    g_kept, g_tune = _stat_sum(ss, "n_steps"), _stat_sum(ws, "n_steps")
    seconds = _stat_sum(ss, "perf_counter_diff") + _stat_sum(ws, "perf_counter_diff")
    if not (g_kept > 0 and np.isfinite(g_tune)):
        raise RuntimeError("the NUTS pilot recorded no gradient counts (n_steps)")
    ess = _forecast_ess(idata, opts["names"] if names is None else names)
    per_draw = min(max(ess, 1.0) / kept, 2.0)
    kept_per_draw = g_kept / kept
    # tuning of the forecast run: the pilot's tuning per chain, then (tune - pilot_tune)
    # draws at the kept draws' cost (adaptation settles; the pilot's early windows are dearer)
    tune_grads = opts["chains"] * (g_tune / opts["pilot_chains"] + max(
        opts["tune"] - opts["pilot_tune"], 0) * kept_per_draw)
    g1000 = tune_grads + 1000.0 * kept_per_draw / per_draw
    s_per_grad = seconds / (g_kept + g_tune) if np.isfinite(seconds) else math.nan
    return g1000 / 1000.0, kept_per_draw, s_per_grad, per_draw


def _price_nuts(model, samplers, n_rows, seed, opts, hierarchical=False):
    out = []
    timings = {}
    assumed = opts["nuts_grads_per_ess"]
    source = "assumed"
    if assumed is None:
        assumed = _GRADS_PER_ESS_HIERARCHICAL if hierarchical else _GRADS_PER_ESS
        source = "assumed (hierarchical)" if hierarchical else "assumed"
    for key in samplers:
        fc = Forecast(method=_NUTS_LABELS[key], exact="exact",
                      grads_per_ess=assumed, grads_source=source)
        needs = _NUTS_NEEDS.get(key, ())
        if any(importlib.util.find_spec(name) is None for name in needs):
            fc.status, fc.reason = "skipped", "/".join(needs) + " not installed"
            out.append(fc)
            continue
        if key == "nutpie" and _pymc_major() >= 6:
            fc.notes.append("PyMC 6's default NUTS (pm.sample() runs nutpie when installed)")
        try:
            with _Quiet():
                timer = _TIMERS[key]
                fc.setup_s, fc.seconds_per_draw = timer(model, opts["timing_budget"])
                platform = _jax_platform() if key == "numpyro" else "cpu"
                if platform != "cpu":
                    fc.method = f"NUTS (numpyro, {platform.upper()})"
                    fc.notes.append(f"timed on JAX's default device ({platform})")
            timings[key] = fc.seconds_per_draw
        except Exception as err:  # noqa: BLE001 - reported
            fc.status, fc.reason = "failed", "gradient timing failed: " + _error(err)
        out.append(fc)
    # refine the gradients per ESS with a short PyMC NUTS run when it is cheap
    pilot = None
    g = timings.get("pymc", min(timings.values(), default=math.nan))
    iters = opts["pilot_chains"] * (opts["pilot_tune"] + opts["pilot_draws"])
    cost = iters * 15 * (g + _NUTS_OVERHEAD_S)
    run_pilot = opts["nuts_pilot"] is True or (opts["nuts_pilot"] == "auto" and np.isfinite(g)
                                                and cost <= opts["nuts_pilot_budget"])
    note, overhead = "", None
    if run_pilot:
        try:
            pilot = _nuts_pilot(model, seed, opts)
        except Exception as err:  # noqa: BLE001 - fall back on the assumption
            note = "NUTS pilot failed (" + _error(err) + "); gradients per ESS assumed"
    elif (opts["nuts_pilot"] == "auto" and np.isfinite(g) and not hierarchical
          and n_rows and n_rows > _NUTS_PILOT_ROWS):
        # too dear on all rows: the same pilot on a random subsample, the likelihood
        # scaled up to all rows (the posterior's shape, not its place, sets NUTS's cost)
        try:
            with _Quiet():
                sub, n = _subsample_model(model, _NUTS_PILOT_ROWS, seed)
                pilot = _nuts_pilot(sub, seed, opts, names=["q"])
                g_sub = _time_pymc_gradient(sub, opts["timing_budget"] / 4)[1]
            # PyMC's sampler time per gradient beyond the log density's own
            overhead = max(pilot[2] - g_sub, 0.0) if np.isfinite(pilot[2]) else 0.0
            note = (f"gradients per ESS from a NUTS pilot on {_NUTS_PILOT_ROWS:,} random "
                    f"rows (likelihood x {n / _NUTS_PILOT_ROWS:.3g}; on all rows it would "
                    f"take about {cost:.0f} s)")
        except Exception as err:  # noqa: BLE001 - fall back on the assumption
            pilot = None
            note = (f"no NUTS pilot (about {cost:.0f} s on all rows; on a subsample: "
                    f"{_error(err)}): gradients per ESS assumed {assumed:g}")
    elif opts["nuts_pilot"] == "auto" and np.isfinite(g):
        note = (f"no NUTS pilot (it would take about {cost:.0f} s): gradients per ESS "
                f"assumed {assumed:g}")
    for fc in out:
        if fc.status != "ok":
            continue
        if note:
            fc.notes.append(note)
        if pilot is not None:
            fc.grads_per_ess, kept_per_draw, s_per_grad, fc.ess_per_draw = pilot
            fc.grads_source = "NUTS pilot" if overhead is None else "NUTS pilot (subsample)"
            if n_rows:
                fc.rows_per_draw = n_rows * kept_per_draw
            if fc.method == _NUTS_LABELS["pymc"]:
                if overhead is not None:  # the sampler's overhead on all rows' gradient
                    fc.seconds_per_draw += overhead
                elif np.isfinite(s_per_grad):
                    # the sampler's own time per gradient (its Python overhead included)
                    fc.seconds_per_draw = max(fc.seconds_per_draw, s_per_grad)
        sampling = 1000.0 * fc.grads_per_ess * fc.seconds_per_draw
        fc.t1000_s = fc.setup_s + sampling
        fc.ess_per_s = 1000.0 / sampling
    return out


# ---------------------------------------------------------------------- the advice


def _recommend(steps, nuts, margin, fast_enough=0.0):
    ran = [f for f in steps if f.ok]
    good = [f for f in ran if not f.poor_mixing]
    best_nuts = min((f for f in nuts if f.ok), key=lambda f: f.t1000_s, default=None)
    nuts_text = (f"{best_nuts.method} is forecast at {best_nuts.t1000_s:,.1f} s to 1,000 ESS"
                 if best_nuts is not None else "NUTS could not be priced")
    if not any(f.status != "refused" for f in steps):
        return "NUTS", ("every step refused this model (its likelihood does not factorise "
                        "over rows, or is not supported: see the reasons above); use "
                        f"pm.sample(). {nuts_text}.")
    if not ran:
        return "NUTS", ("no step completed its pilot (see above); use pm.sample(). "
                        f"{nuts_text}.")
    if not good:
        return "NUTS", ("every step mixes poorly on this posterior in the pilot (tiny ESS "
                        "per draw or a bad R-hat): it may be far from Gaussian (several "
                        "modes, a funnel); use pm.sample(), or a longer pilot to check. "
                        f"{nuts_text}.")
    best = min(good, key=lambda f: f.t1000_s)
    step_text = f"{best.method} is forecast at {best.t1000_s:,.1f} s"
    if best_nuts is not None and best_nuts.t1000_s <= margin * best.t1000_s:
        return "NUTS", (f"{nuts_text}, {step_text}: the subsampling steps are not at least "
                        f"{margin:g}x faster here (the forecasts are rough), and NUTS is "
                        "exact with no bounds or bias knobs; use pm.sample().")
    # "fast enough" only on a NUTS forecast its pilot measured: with an assumed gradient
    # count and no per-gradient overhead, PyMC's NUTS came out 2.9x too fast on a robust
    # regression at N = 10^5 (29 s forecast, 86 s measured; ScalableMH 3.4 s)
    if best_nuts is not None and best_nuts.t1000_s <= fast_enough \
            and best_nuts.grads_source.startswith("NUTS pilot"):
        return "NUTS", (f"{nuts_text}, {step_text}: NUTS takes under {fast_enough:g} s "
                        "here (small data), too little for a speed-up to be worth a "
                        "subsampling step; NUTS is exact with no bounds or bias knobs, and "
                        "its diagnostics are the established ones; use pm.sample().")
    ratio = (f", {best_nuts.t1000_s / best.t1000_s:,.0f}x faster than {best_nuts.method} "
             f"({best_nuts.t1000_s:,.1f} s)" if best_nuts is not None else "")
    kind = ("exact" if best.exact == "exact"
            else f"approximate: bias set by {best.exact.split('(')[-1].rstrip(')')}")
    return best.method, (f"{step_text} to 1,000 ESS{ratio}; it is {kind}. Use "
                         f"pm.sample(step=pms.{best.method}()).")


def advise(model=None, *, pilot_draws=200, pilot_tune=None, pilot_chains=1, steps=None,
           step_kwargs=None, nuts=NUTS_NAMES, tune=1000, chains=2, nuts_grads_per_ess=None,
           nuts_pilot="auto", nuts_pilot_budget=10.0, nuts_margin=2.0, nuts_fast_enough=30.0,
           min_pilot_ess=10.0,
           max_rhat=1.1, timing_budget=1.0, random_seed=None) -> Advice:
    """Which step of this package, or NUTS, for a model: forecasts from a short pilot.

    Each step in ``steps`` is built on the model (inside its context) and, when it builds,
    runs a pilot ``pm.sample(step=..., tune=pilot_tune, draws=pilot_draws,
    chains=pilot_chains, cores=1)``. A step that refuses the model is reported with the
    first sentence of its error (e.g. ScalableMH's ``bounds="auto"`` on an unknown
    Student-t ``nu``, SGLD on a hierarchical model). For each step that ran, from the
    pilot:

    * rows per draw: the mean of ``data_used`` over the kept draws;
    * seconds per draw: ``pm.sample``'s ``sampling_time`` over all its iterations (tuning
      included);
    * ESS per draw: ArviZ's bulk ESS, the minimum over the free variables
      (:func:`pymc_subsample.diagnostics.convergence`), per kept draw, clipped to at most 1
      (and at least one effective draw). From a few hundred draws this is a rough
      estimate (its relative error is of order ``1 / sqrt(ESS)`` and more for slow
      mixing): read the forecasts as good to a factor of about 2;
    * the forecast time to 1,000 ESS of a run of ``chains`` chains of ``tune`` tuning
      draws one after the other (the definition of ``benchmarks/fastest_nuts.py``):
      ``T1000 = setup + seconds_per_draw x (chains x tune + 1000 / ESS_per_draw)``, with
      the set-up (the step's construction plus ``pm.sample``'s own time outside its draw
      loop) measured in the pilot.

    NUTS (``"pymc"``: PyMC's compiled ``model.logp_dlogp_function``, the function its NUTS
    calls; ``"numpyro"``, when installed: ``jax.value_and_grad`` of
    ``pymc.sampling.jax.get_jaxified_logp`` in a jitted loop, as numpyro's NUTS evaluates
    it, on JAX's default device (a GPU when JAX sees one: the line then says so);
    ``"nutpie"``, when installed: the same function as ``"pymc"`` compiled by PyTensor's
    Numba mode, as nutpie's default back end compiles it; on PyMC 6 this is the NUTS that
    ``pm.sample()`` runs) is priced as ``T1000 = compile + 1000 x G x g``: ``g`` the fastest
    time of one full-data log density and gradient, ``G`` the gradient evaluations per
    effective draw with tuning included. ``G`` defaults to ``nuts_grads_per_ess`` = 15, what
    ``benchmarks/fastest_nuts.py`` counted with 2 chains x 1,000 tuning draws on the
    10-feature logistic regression (14.6-18.2 for nutpie, numpyro and PyMC at N = 10^5): an
    assumption, stated in the report, which is low for posteriors with strong correlations
    or funnels (NUTS then needs deeper trees). For a model in which a step finds a random
    intercept per group (its blocked sweep; SGLD refuses it) the default is 600 instead:
    ``benchmarks/hierarchical.py``'s numpyro reference on the non-centred hierarchical
    logistic regression at N = 10^5 took about 610 (200 groups) and 850 (20 groups) gradient
    evaluations per ESS of its slowest quantity. When a short run of PyMC's
    NUTS (the pilot's length) is forecast to take at most ``nuts_pilot_budget`` seconds,
    it is run and ``G`` is measured instead (its tuning gradients, the kept draws'
    gradients per draw over the bulk ESS per draw, clipped to at most 2), and PyMC's
    time per gradient is the sampler's own (Python overhead included, which dominates on
    small data). When that pilot would cost more, and the model has more than 5,000 rows
    and no random intercept per group, the pilot runs instead on 5,000 random rows with
    their log-likelihood scaled by ``N / 5,000``: the posterior's curvature is the full
    data's, so NUTS needs about as many gradients per effective draw (21.8 against
    21.4 on a robust regression at N = 20,000), and PyMC's time per gradient beyond the
    log density's own, measured there, is added to the full data's. Other costs of NUTS
    (its sampler overhead, JAX's import) are not counted: the forecasts favour NUTS.

    The recommendation, in this order: NUTS when every step refused the model (a
    likelihood that does not factorise over rows), when no step completed its pilot, or
    when every step mixes poorly (pilot bulk ESS below ``min_pilot_ess`` or R-hat above
    ``max_rhat``, or above ``1 + 15 / ESS`` for a short pilot whose R-hat is noisier:
    :func:`rhat_limit`; a posterior far from Gaussian); NUTS when the best NUTS forecast is
    within ``nuts_margin`` of the fastest well-mixing step's (the forecasts are rough and
    NUTS is exact without bounds or bias knobs) or below ``nuts_fast_enough`` seconds
    (small data: a speed-up of seconds is not worth a less established method);
    otherwise that step.

    Parameters
    ----------
    model : pymc.Model, optional
        Default: the model on the context stack.
    pilot_draws : int, default 200
        Kept draws per pilot chain (at least 20).
    pilot_tune : int, optional
        Tuning draws per pilot chain; default ``pilot_draws``.
    pilot_chains : int, default 1
        Pilot chains (one after the other).
    steps : sequence of str, optional
        Which steps of :data:`pymc_subsample.steps.REGISTRY` to try, by name
        (``"ScalableMH"``, ``"AustereMH"``, ``"BarkerMinibatch"``, ``"SGLD"``). Default:
        every registered step with ``advise=True``, in the registry's order.
    step_kwargs : dict, optional
        ``{step name: keyword arguments}`` for its construction.
    nuts : sequence of str, default ``("pymc", "numpyro", "nutpie")``
        NUTS samplers to price (numpyro and nutpie are skipped, with a note, when not
        installed); an empty sequence prices none.
    tune, chains : int, default 1000 and 2
        The full run the forecasts are for.
    nuts_grads_per_ess : float, optional
        Assumed NUTS gradient evaluations per effective draw, tuning included. Default:
        15, or 600 when a step found a random intercept per group (see above).
    nuts_pilot : {"auto", True, False}, default "auto"
        Run the short NUTS pilot: when cheap (``"auto"``: on all rows, else on a random
        subsample of them), always on all rows, or never.
    nuts_pilot_budget : float, default 10
        Seconds the NUTS pilot on all rows may be forecast to take under ``"auto"``.
    nuts_margin : float, default 2
        A step is recommended over NUTS only when forecast this many times faster.
    nuts_fast_enough : float, default 30
        NUTS is recommended when it is forecast to reach 1,000 ESS within this many
        seconds, by a forecast its own short pilot measured (0 turns the rule off).
    min_pilot_ess : float, default 10
        Pilot bulk ESS below which a step counts as mixing poorly.
    max_rhat : float, default 1.1
        Pilot R-hat above which a step counts as mixing poorly (raised to
        ``1 + 15 / ESS`` for a short pilot: :func:`rhat_limit`).
    timing_budget : float, default 1
        Seconds spent repeating each gradient timing.
    random_seed : int, optional
        Seeds the pilots (each gets its own seed from ``numpy.random.default_rng``).

    Returns
    -------
    Advice
        Prints as a table; ``.recommendation``, ``.reason``, ``.steps``, ``.nuts``,
        ``.to_dict()``.

    Raises
    ------
    InvalidParameterError
        An argument out of range, or an unknown step or NUTS name.

    Notes
    -----
    Each step is built twice, on two copies of the model (``clone_model``): once untimed
    (PyTensor's compile cache warm, as in ``benchmarks/fastest_nuts.py``'s definition of
    T1000 and as for the run you make after this one), then timed for its pilot. So each
    pilot costs two set-ups (a few passes over the data each, about a second at
    N = 10^6). The step is not built on your model object itself: a step built on it
    later would otherwise reuse the pilot's compiled functions and start faster than
    forecast. PyTensor's start-up in the process (the first compilation) is paid before
    any timing and counted for no method. Timings are of this process on this machine:
    other load slows them.

    Examples
    --------
    >>> with model:                                      # doctest: +SKIP
    ...     advice = pms.advise(random_seed=1)
    >>> print(advice)                                    # doctest: +SKIP
    >>> advice.recommendation                            # doctest: +SKIP
    'ScalableMH'
    """
    import pymc as pm

    model = pm.modelcontext(model)
    def _int(name, value, minimum):
        return check_int(name, value, minimum, label=f"advise: {name}")

    def _pos(name, value):
        return check_positive(name, value, label=f"advise: {name}")

    pilot_draws = _int("pilot_draws", pilot_draws, 20)
    pilot_tune = pilot_draws if pilot_tune is None else _int("pilot_tune", pilot_tune, 0)
    pilot_chains = _int("pilot_chains", pilot_chains, 1)
    registered = tuple(STEP_REGISTRY)
    steps = _names("steps", tuple(n for n in registered if STEP_REGISTRY[n].advise)
                   if steps is None else steps, registered)
    nuts = _names("nuts", nuts, NUTS_NAMES)
    step_kwargs = dict(step_kwargs or {})
    unknown = sorted(set(step_kwargs) - set(registered))
    if unknown:
        raise InvalidParameterError(
            f"advise: step_kwargs has unknown step names {unknown}; use names among "
            f"{list(registered)}.")
    if nuts_pilot not in ("auto", True, False):
        raise InvalidParameterError(
            f"advise: nuts_pilot must be 'auto', True or False, got {nuts_pilot!r}.")
    opts = {"pilot_draws": pilot_draws, "pilot_tune": pilot_tune,
            "pilot_chains": pilot_chains, "tune": _int("tune", tune, 0),
            "chains": _int("chains", chains, 1),
            "nuts_grads_per_ess": None if nuts_grads_per_ess is None else _pos(
                "nuts_grads_per_ess", nuts_grads_per_ess),
            "nuts_pilot": nuts_pilot,
            "nuts_pilot_budget": _pos("nuts_pilot_budget", nuts_pilot_budget),
            "nuts_margin": _pos("nuts_margin", nuts_margin),
            "nuts_fast_enough": 0.0 if nuts_fast_enough == 0 else _pos(
                "nuts_fast_enough", nuts_fast_enough),
            "min_pilot_ess": _pos("min_pilot_ess", min_pilot_ess),
            "max_rhat": _pos("max_rhat", max_rhat),
            "timing_budget": _pos("timing_budget", timing_budget),
            "names": [rv.name for rv in model.free_RVs]}
    seeds = np.random.default_rng(random_seed).integers(0, 2**31 - 1, size=len(steps) + 1)
    startup = _pytensor_startup()

    forecasts, n_rows = [], None
    for name, seed in zip(steps, seeds):
        fc, rows = _pilot_step(model, name, step_kwargs.get(name, {}), seed, opts)
        forecasts.append(fc)
        n_rows = n_rows if n_rows is not None else rows
    if n_rows is None:
        n_rows = _rows_of_observed(model)
    hierarchical = any(f.hierarchical for f in forecasts)
    nuts_fc = _price_nuts(model, nuts, n_rows, seeds[-1], opts, hierarchical) if nuts else []
    recommendation, reason = _recommend(forecasts, nuts_fc, opts["nuts_margin"],
                                        opts["nuts_fast_enough"])
    settings = {k: v for k, v in opts.items() if k != "names"}
    settings["random_seed"] = random_seed
    settings["pytensor_startup_s"] = startup
    return Advice(n_rows=n_rows, steps=forecasts, nuts=nuts_fc,
                  recommendation=recommendation, reason=reason, settings=settings)


def _names(label, values, allowed):
    if isinstance(values, str):
        values = (values,)
    values = tuple(values)
    bad = [v for v in values if v not in allowed]
    if bad:
        raise InvalidParameterError(
            f"advise: {label} has unknown names {bad}; choose among {list(allowed)}.")
    return values


# ---------------------------------------------------------------------- printing


def _fmt(x, spec):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        width = re.match(r"\d*", spec).group(0)
        return format("-", f">{width}") if width else "-"
    return format(x, spec)


def _table(advice: Advice) -> str:
    s = advice.settings
    n = f"N = {advice.n_rows:,}" if advice.n_rows else "N unknown"
    lines = [f"pms.advise: {n}; pilot {s['pilot_chains']} chain(s) x ({s['pilot_tune']} tune + "
             f"{s['pilot_draws']} draws); forecast run {s['chains']} chains x {s['tune']} "
             "tune, to 1,000 bulk ESS (rough: ESS from a short pilot)"]
    head = (f"{'method':<16} {'exact?':<19} {'set-up s':>8} {'rows/draw':>10} "
            f"{'ESS/draw':>8} {'ESS/s':>9} {'T1000 s':>9}  note")
    lines += [head, "-" * len(head)]
    notes = []
    for fc in list(advice.steps) + list(advice.nuts):
        if fc.status in ("refused", "failed", "skipped"):
            lines.append(f"{fc.method:<16} {fc.status}: {fc.reason}")
            continue
        note = fc.reason if fc.poor_mixing else ""
        if fc.grads_source:
            note = (f"{fc.grads_per_ess:.1f} grads/ESS ({fc.grads_source}), "
                    f"{1e3 * fc.seconds_per_draw:.3g} ms/grad")
        lines.append(
            f"{fc.method:<16} {fc.exact:<19} {_fmt(fc.setup_s, '8.2f')} "
            f"{_fmt(fc.rows_per_draw, '10,.1f')} {_fmt(fc.ess_per_draw, '8.2f')} "
            f"{_fmt(fc.ess_per_s, '9,.1f')} {_fmt(fc.t1000_s, '9,.1f')}  {note}")
        notes += [f"  {fc.method}: {t}" for t in fc.notes]
    if s.get("pytensor_startup_s", 0.0) > 0.5:
        notes.append(f"  PyTensor's start-up in this process ({s['pytensor_startup_s']:.1f} s, "
                     "reading its compile cache) is counted for no method")
    if notes:
        lines += ["notes:"] + notes
    lines.append(f"recommendation: {advice.recommendation}. {advice.reason}")
    return "\n".join(lines)
