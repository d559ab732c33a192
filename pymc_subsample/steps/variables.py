"""The variables a subsampling step samples: the checks of its ``vars=``.

:func:`step_value_vars` turns a step's ``vars=`` into PyMC value variables (default: the
model's continuous free variables) and refuses a variable named twice or a discrete one
(:class:`~pymc_subsample.kernels._validation.InvalidParameterError`).
"""

from __future__ import annotations

import pymc as pm
from pymc.util import get_value_vars_from_user_vars

from ..kernels._validation import InvalidParameterError

__all__ = ["step_value_vars"]


def step_value_vars(step_name: str, vars, model) -> list:
    """The value variables step ``step_name`` samples: ``vars`` (default: the continuous
    free variables of ``model``), each once, none discrete."""
    if vars is None:
        vars = model.continuous_value_vars
        if not vars:
            raise InvalidParameterError(
                f"{step_name}: the model has no continuous free variables to sample.")
    vars = get_value_vars_from_user_vars(vars, model)
    _check_unique(vars, model)
    _check_continuous(vars, model)
    return vars


def _check_unique(vars, model):
    seen, twice = set(), []
    for v in vars:
        if v in seen and v not in twice:
            twice.append(v)
        seen.add(v)
    if twice:
        names = ", ".join(f"'{model.values_to_rvs[v].name}'" for v in twice)
        raise InvalidParameterError(
            f"vars= names {names} more than once; give each variable once.")


def _check_continuous(vars, model):
    bad = [v for v in vars if v.dtype in pm.discrete_types]
    if bad:
        names = ", ".join(f"'{model.values_to_rvs[v].name}'" for v in bad)
        raise InvalidParameterError(
            f"Discrete variable(s) {names} cannot be sampled by a continuous subsampling "
            "step. Leave them out of vars= and let PyMC assign them a discrete step "
            "(e.g. pm.BinaryGibbsMetropolis or pm.CategoricalGibbsMetropolis).")
