"""Diagnostics of data usage for subsampling samplers.

Works with what ``pm.sample`` returns on either PyMC version: an ``arviz.InferenceData``
(PyMC 5) or an xarray ``DataTree`` (PyMC 6). Plots follow ArviZ/matplotlib conventions:
they take an optional ``ax`` and return the axes, and never call ``plt.show()``.
"""

from __future__ import annotations

import arviz as az
import numpy as np

from .kernels._validation import InvalidParameterError, check_positive_int, check_share
from .kernels.variance.control_variates import control_variate_label

__all__ = [
    "get_group",
    "laplace_approximation",
    "convergence",
    "posterior_moments",
    "data_usage_summary",
    "audit_summary",
    "step_settings",
    "plot_batch_sizes",
    "plot_data_used",
]


def get_group(idata, name: str):
    """Group ``name`` (e.g. ``"posterior"``, ``"sample_stats"``) as an ``xarray.Dataset``:
    ArviZ's ``convert_to_dataset``, with a ``KeyError`` naming a missing group.

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.DataTree
    name : str
    """
    try:
        return az.convert_to_dataset(idata, group=name)
    except (KeyError, AttributeError, ValueError, TypeError) as err:
        raise KeyError(f"The sampling result has no '{name}' group.") from err


def _component_labels(name, shape) -> list[str]:
    """Labels of a variable's scalar components in C order: ``name`` for a scalar,
    ``name[i]`` (flat index) otherwise."""
    return [name] if len(shape) == 0 else [f"{name}[{i}]" for i in range(int(np.prod(shape)))]


def posterior_moments(idata, var_names=None):
    """Posterior mean and sd of every scalar component, as two flat float arrays and the
    component labels (``beta[0]``, ...), for comparing samplers."""
    post = get_group(idata, "posterior")
    names = list(post.data_vars) if var_names is None else list(var_names)
    means, sds, labels = [], [], []
    for name in names:
        vals = np.asarray(post[name].values, dtype=float)
        flat = vals.reshape(vals.shape[0] * vals.shape[1], -1)
        means.append(flat.mean(axis=0))
        sds.append(flat.std(axis=0, ddof=1))
        labels += _component_labels(name, vals.shape[2:])
    return np.concatenate(means), np.concatenate(sds), labels


def laplace_approximation(model=None, vars=None):
    """The Laplace approximation at the posterior mode, as a reference for the draws.

    The mode is found by Newton's method on the full data (the same search the steps run
    for their control variates), and the covariance is the inverse of the negative Hessian
    of the log posterior there. For a regular model on tall data it is accurate to about
    ``N^(-1/2)`` posterior standard deviations (the Bernstein-von Mises theorem), so at
    ``N = 10^6`` rows its means and sds are within about 0.001 sd of the posterior's.

    Parameters
    ----------
    model : pymc.Model, optional
        Default: the model on the context stack.
    vars : list of variables, optional
        Continuous variables to approximate (default: all continuous free variables).

    Returns
    -------
    pandas.DataFrame
        Columns ``mean`` and ``sd``, one row per scalar component, labelled as
        :func:`posterior_moments` labels them (``beta[0]``, ...). The approximation is in
        the unconstrained space: a transformed variable appears under its value
        variable's name (``sigma_log__``), an untransformed one under its own name.
    """
    import pandas as pd

    from .center import find_center
    from .engine import LikelihoodEngine

    engine = LikelihoodEngine(model, vars=vars)
    mean, cov = find_center(engine).laplace()
    point = engine.model.initial_point()
    labels = [label for v in engine.vars
              for label in _component_labels(v.name, np.shape(point[v.name]))]
    return pd.DataFrame({"mean": mean, "sd": np.sqrt(np.diag(cov))}, index=labels)


def convergence(idata, var_names=None):
    """``(min bulk ESS, max R-hat)`` over all components of ``var_names`` (default: all
    posterior variables), with ArviZ (0.x or 1.x)."""
    import arviz as az

    post = get_group(idata, "posterior")
    if var_names is not None:
        post = post[list(var_names)]
    ess = az.ess(post, method="bulk")
    rhat = az.rhat(post)
    ess_min = min(float(np.min(ess[v].values)) for v in ess.data_vars)
    rhat_max = max(float(np.max(rhat[v].values)) for v in rhat.data_vars)
    return ess_min, rhat_max


def find_stat(stats, name):
    """A stat by name; in a CompoundStep PyMC may prefix it (``sampler_0__name``)."""
    if name in stats:
        return stats[name]
    for key in stats.data_vars:
        if key.endswith("__" + name):
            return stats[key]
    return None


def data_usage_summary(idata, *, n_rows: int | None = None, quantiles=(0.05, 0.5, 0.95)):
    """Per-chain summary of the rows a subsampling step read.

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.DataTree
        A result of ``pm.sample`` with one of this package's steps.
    n_rows : int, optional
        ``N``, to express usage as a fraction of the data (``data_used / N``); a
        positive integer.
    quantiles : sequence of float
        Quantiles of ``data_used`` per draw to report, each in ``[0, 1]``.

    Returns
    -------
    pandas.DataFrame
        One row per chain plus an ``"all"`` row: ``mean``, the quantiles (``q5``,
        ``q50``, ...), ``total`` rows touched, ``accept_rate``, ``fallback_rate`` (share
        of steps decided on all the data: ScalableMH's ``fallback`` or the sequential
        tests' ``exact``) and, with ``n_rows``, ``mean_fraction``.

    Raises
    ------
    ValueError
        ``n_rows`` is not a positive integer, or a quantile lies outside ``[0, 1]``.
    KeyError
        The result has no ``data_used`` stat (not sampled with this package's steps).

    Notes
    -----
    In a compound step PyMC stacks a stat that several steps record along an extra
    dimension (``accepted_dim_0``), in step order. ``data_used`` is then summed over this
    package's steps (the rows read per draw by all of them; PyMC's own steps do not count
    rows). ``accept_rate`` is left out when another step, such as ``pm.Metropolis``, also
    records ``accepted``: the summary cannot tell the columns apart, so read yours from
    ``sample_stats["accepted"]`` by its position among the steps.
    """
    import pandas as pd

    n_rows, quantiles = _check_usage_args(n_rows, quantiles)
    stats = get_group(idata, "sample_stats")
    used = find_stat(stats, "data_used")
    if used is None:
        raise KeyError(
            "sample_stats has no 'data_used': was the result sampled with a pymc_subsample step?"
        )
    extra = [d for d in used.dims if d not in ("chain", "draw")]
    if extra:  # several of this package's steps: rows read by all of them per draw
        used = used.sum(extra)
    acc = find_stat(stats, "accepted")
    if acc is not None and acc.ndim > 2:  # stacked with another step's: ambiguous
        acc = None
    fb = find_stat(stats, "fallback")
    if fb is None:
        fb = find_stat(stats, "exact")
    if fb is not None and fb.ndim > 2:
        fb = fb.mean([d for d in fb.dims if d not in ("chain", "draw")])
    rows = []
    labels = [int(c) for c in used["chain"].values] + ["all"]
    for label in labels:
        sel = used.values.reshape(-1) if label == "all" else used.sel(chain=label).values
        row = {"chain": label, "mean": float(np.mean(sel))}
        for q in quantiles:
            row[f"q{round(q * 100):d}"] = float(np.quantile(sel, q))
        row["total"] = int(np.sum(sel))
        if acc is not None:
            a = acc.values.reshape(-1) if label == "all" else acc.sel(chain=label).values
            row["accept_rate"] = float(np.mean(a))
        if fb is not None:
            f = fb.values.reshape(-1) if label == "all" else fb.sel(chain=label).values
            row["fallback_rate"] = float(np.mean(f))
        if n_rows is not None:
            row["mean_fraction"] = row["mean"] / float(n_rows)
        rows.append(row)
    return pd.DataFrame(rows).set_index("chain")


def _check_usage_args(n_rows, quantiles):
    """``n_rows`` (None or a positive integer) and ``quantiles`` (numbers in [0, 1]) of
    :func:`data_usage_summary`, checked."""
    if n_rows is not None:
        n_rows = check_positive_int(
            "n_rows", n_rows, label="data_usage_summary: n_rows",
            what="the number of data rows N, a positive integer (or None to leave out "
                 "mean_fraction)")
    what = "a number or a sequence of numbers in [0, 1] (0.05 for the 5% quantile)"
    if isinstance(quantiles, (str, bytes)) or np.ndim(quantiles) > 1:
        raise InvalidParameterError(
            f"data_usage_summary: quantiles must be {what}, got {quantiles!r}.")
    qs = [check_share("quantiles", q, label="data_usage_summary: quantiles", what=what)
          for q in np.atleast_1d(quantiles)]
    return n_rows, qs


def audit_summary(idata):
    """Disagreement of the approximate decisions with the exact full-data ones.

    Reads the ``audit`` stat of :class:`~pymc_subsample.AustereMH` or
    :class:`~pymc_subsample.BarkerMinibatch` sampled with ``audit > 0``: on a random share
    of steps the step also took the exact full-data decision for the same proposal and
    randomness, and recorded 1.0 when both agreed and 0.0 when not.

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.DataTree

    Returns
    -------
    pandas.DataFrame
        One row per chain plus ``"all"``: ``n_audited``, ``disagreement`` (share of
        audited decisions that differ from the exact ones; an estimate of the per-step
        decision error the bias knob causes on this model) and ``mcse`` (its binomial
        Monte Carlo standard error, ``sqrt(p (1 - p) / n)``; with no disagreement seen,
        the rule-of-three bound ``3 / n`` is reported instead).
    """
    import pandas as pd

    stats = get_group(idata, "sample_stats")
    audit = find_stat(stats, "audit")
    if audit is None:
        raise KeyError("sample_stats has no 'audit': sample with AustereMH(audit=...) or "
                       "BarkerMinibatch(audit=...).")
    rows = []
    for label in [int(c) for c in audit["chain"].values] + ["all"]:
        a = audit.values.reshape(-1) if label == "all" else audit.sel(chain=label).values
        a = a[np.isfinite(a)]
        n = int(a.size)
        p = float(1.0 - a.mean()) if n else float("nan")
        if n and p > 0:
            se = float(np.sqrt(p * (1.0 - p) / n))
        else:
            se = 3.0 / n if n else float("nan")
        rows.append({"chain": label, "n_audited": n, "disagreement": p, "mcse": se})
    return pd.DataFrame(rows).set_index("chain")


def step_settings(idata) -> dict:
    """The settings the subsampling steps sampled with (``epsilon``, ``delta``, batch
    sizes, ``order``, ...), as recorded with the draws.

    PyMC gives a step method no way to write ``sample_stats.attrs``, so every step of this
    package records its settings as sample stats ``setting_<name>`` that are constant
    over the draws. This collects them.

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.DataTree
        What ``pm.sample`` returned (PyMC 5 or 6).

    Returns
    -------
    dict
        ``{name: value}`` with Python numbers (``control_variate`` ``-1`` is given back as
        ``"saga"``; ``region`` NaN means global bounds). When several subsampling steps of
        a ``CompoundStep`` record the same setting, its value is a tuple, one per step.
        Empty when the draws hold no recorded settings.

    Raises
    ------
    ValueError
        When a setting is not constant over the draws (the stats were edited).
    """
    stats = get_group(idata, "sample_stats")
    out = {}
    for key in stats.data_vars:
        name = str(key).rpartition("__")[2]  # a CompoundStep may prefix it
        if not name.startswith("setting_"):
            continue
        name = name[len("setting_"):]
        vals = np.asarray(stats[key].values)
        per_step = vals.reshape(vals.shape[0] * vals.shape[1], -1)  # draws x steps
        found = []
        for col in per_step.T:
            first = col[0]
            same = np.isnan(col).all() if np.issubdtype(col.dtype, np.floating) and \
                np.isnan(first) else np.all(col == first)
            if not same:
                raise ValueError(f"The recorded setting '{name}' varies over the draws.")
            value = first.item()
            found.append(control_variate_label(value) if name == "control_variate" else value)
        out[name] = found[0] if len(found) == 1 else tuple(found)
    return out


def _data_used_and_axes(idata, ax):
    """The ``data_used`` stat and the axes to draw on (new ones when ``ax`` is None)."""
    import matplotlib.pyplot as plt

    used = find_stat(get_group(idata, "sample_stats"), "data_used")
    if used is None:
        raise KeyError("sample_stats has no 'data_used'.")
    if ax is None:
        _, ax = plt.subplots()
    return used, ax


def plot_batch_sizes(idata, *, ax=None, bins="auto", log=False, **hist_kwargs):
    """Histogram of the rows read per step (the batch-size plots of Seita et al. 2017,
    Figs. 2 and 4).

    Parameters
    ----------
    idata : arviz.InferenceData or xarray.DataTree
    ax : matplotlib.axes.Axes, optional
    bins : int, sequence or str
    log : bool
        Logarithmic count axis.
    **hist_kwargs
        Passed to ``ax.hist``.

    Returns
    -------
    matplotlib.axes.Axes
    """
    used, ax = _data_used_and_axes(idata, ax)
    ax.hist(np.asarray(used.values).ravel(), bins=bins, log=log, **hist_kwargs)
    ax.set_xlabel("rows read per step (data_used)")
    ax.set_ylabel("steps")
    return ax


def plot_data_used(idata, *, ax=None, **plot_kwargs):
    """``data_used`` over draws, one line per chain.

    Returns
    -------
    matplotlib.axes.Axes
    """
    used, ax = _data_used_and_axes(idata, ax)
    for c in used["chain"].values:
        ax.plot(used.sel(chain=c).values, label=f"chain {int(c)}", **plot_kwargs)
    ax.set_xlabel("draw")
    ax.set_ylabel("rows read (data_used)")
    ax.legend(loc="best")
    return ax
