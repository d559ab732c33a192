"""``check_step``: the conformance checks every step method of the package passes.

In the spirit of scikit-learn's ``check_estimator``: :func:`check_step` builds a step on a
small model and checks the contract that PyMC and the rest of the package rely on,

- :func:`check_declared_stats`: the stats a draw emits are exactly the stats the class
  declares in ``stats_dtypes_shapes`` (PyMC raises on an undeclared stat and silently
  records 0 for a declared one that is never emitted), with the declared shapes;
- :func:`check_sampling_state`: PyMC's ``step.sampling_state`` round-trips: set back to
  a state taken mid-chain, the step makes the same next draws, bit for bit;
- :func:`check_pickle`: a ``cloudpickle`` copy (what multiprocess sampling sends to its
  workers when the start method is not ``fork``) makes the same next draws as the step
  itself. Plain ``pickle`` is not asked for: a step that keeps the ``pymc.Model`` (as
  the package's steps do, in their engine) cannot be pickled by it, as the model holds
  ``functools.partial`` objects that ``pickle`` saves by name;
- :func:`check_refusals`: bad constructor arguments raise the public
  :class:`~pymc_subsample.errors.InvalidParameterError`.

A failed check raises ``AssertionError`` naming the step and the check. The step is
driven as ``pm.sample`` drives it (``set_rng`` on PyMC 5, ``setup_chain`` on PyMC 6;
tuning draws, ``stop_tuning``, draws) but in this process, one draw at a time.
``tests/test_step_checks.py`` runs :func:`check_step` over every entry of
:data:`pymc_subsample.steps.REGISTRY`.
"""

from __future__ import annotations

import warnings

import numpy as np

from .kernels._validation import InvalidParameterError
from .steps import REGISTRY, StepEntry

__all__ = ["check_step", "check_declared_stats", "check_sampling_state", "check_pickle",
           "check_refusals", "small_model"]

#: tuning draws, then kept draws, before a state is taken; then draws compared
TUNE, WARM, COMPARED = 5, 3, 8


def small_model(n_rows: int = 400, seed: int = 0):
    """The default model of :func:`check_step`: a logistic regression with an intercept
    and two slopes on ``n_rows`` rows (a few seconds to set up for any step)."""
    import pymc as pm

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, 2))
    y = (rng.random(n_rows) < 1.0 / (1.0 + np.exp(-(0.3 + X @ [0.8, -0.5])))).astype(float)
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 2.0)
        b = pm.Normal("b", 0.0, 2.0, shape=2)
        pm.Bernoulli("y", logit_p=a + X @ b, observed=y)
    return model


def _resolve(step) -> StepEntry:
    """A registered name, a :class:`StepEntry` or a step class, as an entry."""
    if isinstance(step, StepEntry):
        return step
    if isinstance(step, str):
        if step not in REGISTRY:
            raise InvalidParameterError(
                f"check_step: unknown step {step!r}; registered: {list(REGISTRY)}.")
        return REGISTRY[step]
    if isinstance(step, type):
        return next((e for e in REGISTRY.values() if e.load() is step),
                    StepEntry(step.__name__, step))
    raise InvalidParameterError(
        "check_step expects a registered step name, a StepEntry or a step class, got "
        f"{type(step).__name__}.")


def _build(entry: StepEntry, model, **kwargs):
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return entry.load()(**{**entry.check_kwargs, **kwargs})


def _start_chain(step, seed: int) -> None:
    """What ``pm.sample`` does before a chain: hand the step its generator."""
    rng = np.random.default_rng(seed)
    if hasattr(step, "setup_chain"):
        step.setup_chain(rng, TUNE, WARM + COMPARED)
    else:
        step.set_rng(rng)
    step.tune = True
    if hasattr(step, "reset_tuning"):
        step.reset_tuning()


def _draws(step, point, n):
    """``n`` draws from ``point``: the points and the stats dicts."""
    points, stats = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(n):
            point, st = step.step(point)
            points.append({k: np.array(v, copy=True) for k, v in point.items()})
            stats.append(st)
    return points, stats


def _warm_up(step, model, seed):
    """Start a chain, tune for :data:`TUNE` draws, stop tuning, make :data:`WARM` draws:
    the point reached and the stats of every draw."""
    _start_chain(step, seed)
    point = model.initial_point()
    tuned, st_tune = _draws(step, point, TUNE)
    step.stop_tuning()
    kept, st_kept = _draws(step, tuned[-1], WARM)
    return kept[-1], st_tune + st_kept


def _same(name, what, a, b) -> None:
    """Assert two runs of draws equal bit for bit (points, and the stats' numbers)."""
    for i, (pa, pb) in enumerate(zip(a[0], b[0])):
        for var in pa:
            assert np.array_equal(pa[var], pb[var]), (
                f"{name}: {what}: draw {i} of '{var}' differs ({pa[var]} vs {pb[var]}).")
    for i, (sa, sb) in enumerate(zip(a[1], b[1])):
        for block_a, block_b in zip(sa, sb):
            for key, va in block_a.items():
                vb = block_b.get(key)
                if isinstance(va, (int, float, bool, np.number, np.bool_)):
                    assert np.array_equal(va, vb, equal_nan=True), (
                        f"{name}: {what}: stat '{key}' of draw {i} differs ({va} vs {vb}).")


def check_declared_stats(name, step, stats) -> None:
    """The stats of every draw are the keys of ``stats_dtypes_shapes``, with its shapes
    (one dict per block, as PyMC's ``stats_dtypes_shapes`` of a single step)."""
    declared = step.stats_dtypes_shapes
    for i, blocks in enumerate(stats):
        assert isinstance(blocks, list) and len(blocks) == 1, (
            f"{name}: a draw's stats must be a list of one dict, got {type(blocks).__name__}.")
        emitted = blocks[0]
        extra, missing = sorted(set(emitted) - set(declared)), sorted(set(declared) - set(emitted))
        assert not extra and not missing, (
            f"{name}: draw {i} emits stats not in stats_dtypes_shapes {extra} and does not "
            f"emit declared stats {missing}.")
        for key, (dtype, shape) in declared.items():
            if dtype is object or shape is None:
                continue
            got = np.shape(emitted[key])
            assert list(got) == list(shape), (
                f"{name}: stat '{key}' has shape {got}, declared {shape}.")
            if np.issubdtype(np.dtype(dtype), np.integer):
                assert np.all(np.isfinite(emitted[key])), (
                    f"{name}: integer stat '{key}' is {emitted[key]} (PyMC refuses it).")


def check_sampling_state(name, step, point) -> None:
    """Set back to the ``sampling_state`` taken at ``point``, the step makes the same
    next :data:`COMPARED` draws."""
    state = step.sampling_state
    first = _draws(step, point, COMPARED)
    step.sampling_state = state
    _same(name, "after sampling_state was set back", first, _draws(step, point, COMPARED))


def check_pickle(name, step, point) -> None:
    """A ``cloudpickle`` copy of the step makes its next draws."""
    import cloudpickle

    state = step.sampling_state
    try:
        blob = cloudpickle.dumps(step)
    except Exception as err:  # noqa: BLE001 - the failure is the finding
        raise AssertionError(f"{name}: the step does not cloudpickle: {err!r}") from err
    mine = _draws(step, point, COMPARED)
    _same(name, "a cloudpickle copy", mine, _draws(cloudpickle.loads(blob), point, COMPARED))
    step.sampling_state = state


def check_refusals(entry: StepEntry, model, refusals) -> None:
    """Each dict of bad constructor arguments in ``refusals`` raises
    :class:`~pymc_subsample.errors.InvalidParameterError`."""
    for bad in refusals:
        try:
            _build(entry, model, **bad)
        except InvalidParameterError:
            continue
        except Exception as err:  # noqa: BLE001 - the wrong type is the finding
            raise AssertionError(
                f"{entry.name}({bad}) raised {type(err).__name__}, not the public "
                f"InvalidParameterError: {err}") from err
        raise AssertionError(f"{entry.name}({bad}) was accepted; it should be refused.")


def check_step(step, *, model=None, kwargs=None, refusals=None, seed: int = 0) -> None:
    """Run every conformance check on a step method.

    Parameters
    ----------
    step : str, StepEntry or type
        A name in :data:`pymc_subsample.steps.REGISTRY`, an entry (registered or not) or
        a step class (its entry's ``check_kwargs`` are used when it is registered).
    model : pymc.Model, optional
        Default: :func:`small_model`.
    kwargs : dict, optional
        Constructor arguments, over the entry's ``check_kwargs``.
    refusals : sequence of dict, optional
        Bad constructor arguments that must raise ``InvalidParameterError``. Default:
        the entry's ``refusals`` and ``{"proposal": "no_such_proposal"}`` (a step that
        takes no ``proposal=`` must refuse it too).
    seed : int, default 0
        The chain's generator seed.

    Raises
    ------
    AssertionError
        Naming the step and the check that failed.
    """
    entry = _resolve(step)
    model = small_model() if model is None else model
    built = _build(entry, model, **(kwargs or {}))
    point, stats = _warm_up(built, model, seed)
    check_declared_stats(entry.name, built, stats)
    check_sampling_state(entry.name, built, point)
    check_pickle(entry.name, built, point)
    if refusals is None:
        refusals = (*entry.refusals, {"proposal": "no_such_proposal"})
    check_refusals(entry, model, refusals)
