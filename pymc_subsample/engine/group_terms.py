"""Recognising several group terms -- crossed or nested grouping factors, random slopes
-- in the linear predictor of a Normal likelihood, for the exact Gaussian sweep.

The models are linear mixed models,

    eta_i = o_i + x_i . beta + sum_k w_ki a_k[g_k(i)],    y_i ~ Normal(eta_i, sigma),

with each term's effects ``a_k`` Normal given its hyperparameters (centred, or
non-centred ``a_k = loc_k + scale_k * z_k``), ``g_k`` integer row data (two factors are
crossed or nested as the data say: the sweep needs neither to be declared) and ``w_ki``
the term's row weight: 1 for a random intercept, a covariate for a random slope with its
own scale. Every gather is read as :func:`~pymc_subsample.engine.groups.find_groups`
reads one (:class:`~pymc_subsample.engine.groups.RandomIntercept`: its group variable,
hyperparameters and index checked); the fixed part (every gather replaced by zeros) must
be affine in the fixed effects, and the linear predictor must be exactly the fixed part
plus the weighted gathers, with weights that read no parameter -- checked numerically at
three points on a sample of rows, never assumed.

The likelihoods with several terms that are not Normal (logistic, Poisson, ...) are
refused here with the reason: the Taylor-sum sweep of
:mod:`~pymc_subsample.steps.hierarchical` covers one random intercept.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.replace import clone_replace

try:  # PyTensor >= 2.31 moved graph traversal helpers
    from pytensor.graph.traversal import ancestors
except ImportError:  # pragma: no cover
    from pytensor.graph.basic import ancestors

from ..kernels.families import get_family
from ..kernels.gaussian_locations import MAX_DENSE_LOCATIONS, eliminated_terms
from .glm import sample_rows
from .groups import (GroupStructure, _fixed_block, _random_intercept, _Refused, _rv_name,
                     gather_label, unnamed_label)

__all__ = ["GAUSSIAN_FAMILIES", "several_terms"]

#: the families whose several group terms the exact Gaussian sweep covers
GAUSSIAN_FAMILIES = ("normal", "normal_scale")


def several_terms(engine, spec, params, eta, nodes, data_vars, q0, scale, scale_vals):
    """The :class:`~pymc_subsample.engine.groups.GroupStructure` of a linear predictor
    with the gathers ``nodes`` (several, or one that is not a plain intercept), for the
    exact Gaussian sweep (``kernel="gaussian"``); raises ``_Refused`` with the reason."""
    model, slices = engine.model, engine.var_slices()
    labels = ", ".join(gather_label(model, n, data_vars) for n in nodes)
    if spec.family not in GAUSSIAN_FAMILIES:
        what = (f"{len(nodes)} group terms ({labels})" if len(nodes) > 1 else
                f"the group effect {labels} multiplied by row data (a random slope) or "
                "used otherwise than as an intercept")
        raise _Refused(f"{what} with the {get_family(spec.family).label} likelihood: the "
                       "sweep covers one random intercept for this family, and crossed, "
                       "nested and slope terms for the Normal likelihood")
    terms, group_vals, hyper_vals = [], [], []
    for node in nodes:
        term, group_value, hypers = _random_intercept(engine, node, q0)
        if group_value in group_vals:
            raise _Refused(f"'{term.group_var}' enters the linear predictor in more than one "
                           "gather")
        terms.append(term)
        group_vals.append(group_value)
        hyper_vals.extend(h for h in hypers if h not in hyper_vals)
    shared = [t.group_var for t in terms if t.hyper_shared]
    if shared:
        raise _Refused(f"the hyperparameters of {', '.join(shared)} are sampled by another "
                       "step (the Gaussian sweep moves every variance parameter itself)")
    if any(v in hyper_vals for v in group_vals):
        raise _Refused("a group term's effects are a hyperparameter of another term")
    outs = [n.outputs[0] for n in nodes]
    zeros = {o: pt.zeros(n.inputs[1].shape, dtype=o.dtype) for o, n in zip(outs, nodes)}
    f = clone_replace(eta, zeros)
    weights = [clone_replace(eta, {**zeros, o: pt.ones(n.inputs[1].shape, dtype=o.dtype)}) - f
               for o, n in zip(outs, nodes)]
    value_vars = set(model.value_vars)
    f_values = [v for v in ancestors([f]) if v in value_vars]
    if any(v in f_values for v in group_vals + hyper_vals):
        raise _Refused("the linear predictor reads a group variable or a hyperparameter "
                       "outside the group effects")
    if any(v in f_values or v in group_vals or v in hyper_vals for v in scale_vals):
        raise _Refused(f"the scale '{scale.name}' is also read by the linear predictor or "
                       "the group effects")
    if any(v not in slices for v in f_values):
        raise _Refused("the fixed effects include variables of another step")
    factors = _factors(terms)
    kept = eliminated_terms([t.n_groups for t in terms], factors)
    n_rest = sum(slices[v].size for v in f_values) + sum(
        t.n_groups for k, t in enumerate(terms) if k not in kept)
    if n_rest > MAX_DENSE_LOCATIONS:
        raise _Refused(f"{n_rest} locations outside the largest grouping factor's terms "
                       "(the fixed effects and the other factors' levels): the Gaussian "
                       f"sweep factorises them densely, up to {MAX_DENSE_LOCATIONS}")
    f_fn = engine.compile_batch([f])
    w_fn = engine.compile_batch(weights)
    check_fn = engine.compile_batch([eta, f, *outs])
    rng = np.random.default_rng(0)  # set-up check, not sampling
    data = sample_rows(engine, rng)
    y_index, fixed_vals, fixed_idx = _fixed_block(engine, spec, f_fn, f_values, terms,
                                                  scale, q0, data, rng)
    w0 = _check_linear(check_fn, w_fn, data, q0, rng)
    for term, w in zip(terms, w0):
        term.slope = "" if np.allclose(w, 1.0, rtol=0.0, atol=1e-12) else next(
            (unnamed_label(r.name, "covariate") for r, col in zip(engine.rows, data)
             if np.shape(col) == w.shape and np.allclose(col, w, rtol=1e-12, atol=0.0)),
            "row weights")
    return GroupStructure(
        family=spec.family, params=params, terms=terms, fixed_idx=np.sort(fixed_idx),
        fixed_names=[_rv_name(model, v) for v in fixed_vals], _f_fn=f_fn, _y_index=y_index,
        engine=engine, scale=scale, kernel="gaussian", _w_fn=w_fn, factors=factors)


def _factors(terms) -> list[int]:
    """The grouping factor of each term: terms whose rows fall in the same levels (an
    intercept and the slopes on one factor) share the index of the first of them."""
    out = []
    for k, t in enumerate(terms):
        out.append(next((j for j in range(k) if terms[j].n_groups == t.n_groups
                         and np.array_equal(terms[j].group_of_row, t.group_of_row)), k))
    return out


def _check_linear(check_fn, w_fn, data, q0, rng):
    """``eta = f + sum_k w_k X_k[g_k]`` on the rows ``data`` at ``q0`` and two random
    points, with the same weights at each (they read no parameter); returns the
    weights."""
    n = data[0].shape[0]
    w0 = None
    for scale in (0.0, 0.5, 1.0):
        q = q0 + scale * rng.standard_normal(q0.size)
        eta, f, *gathered = (np.broadcast_to(np.asarray(v, dtype=np.float64), (n,))
                             for v in check_fn(q, *data))
        w = [np.broadcast_to(np.asarray(v, dtype=np.float64), (n,)) for v in w_fn(q, *data)]
        if w0 is None:
            w0 = w
        same = all(np.allclose(a, b, rtol=1e-10, atol=1e-12) for a, b in zip(w, w0))
        rebuilt = f + sum(wk * xk for wk, xk in zip(w, gathered))
        if not (np.all(np.isfinite(eta)) and np.allclose(eta, rebuilt, rtol=1e-9, atol=1e-9)
                and same):
            raise _Refused("the linear predictor is not the fixed part plus the group "
                           "effects each times a weight of row data (checked at random "
                           "points)")
    return w0

