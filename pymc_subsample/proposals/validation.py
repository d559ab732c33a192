"""Argument checks shared by the proposals (pure Python and NumPy).

The rules themselves (integers, reals in an interval, positive numbers) and the error
type, :class:`~pymc_subsample.kernels._validation.InvalidParameterError`, are those of
:mod:`pymc_subsample.kernels._validation`; this module adds what only proposals need
(a tuned scalar's start, a per-dimension scale).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels._validation import (
    InvalidParameterError,
    check_positive,
    check_positive_int,
    check_real,
)


def _check_ndim(ndim: Any) -> int:
    """``ndim`` as a positive ``int``."""
    return check_positive_int("ndim", ndim)


def _check_target(target_accept: float) -> float:
    """A target acceptance rate in the open interval (0, 1)."""
    return check_real("target_accept", target_accept, 0.0, 1.0)


def _positive_scalar(value: Any, name: str) -> float:
    """A finite positive scalar ``value`` as a float; ``name`` is used in the error."""
    if np.ndim(value) != 0:
        raise InvalidParameterError(
            f"{name} must be a positive scalar, got an array of shape {np.shape(value)}.")
    return check_positive(name, value)


def _start_value(user: float | None, scaling: Any, name: str, default: float) -> float:
    """A tuned scalar's start: the user's value, else the step's suggested ``scaling``
    (checked positive), else ``default``."""
    if user is not None:
        return user
    if scaling is not None:
        return _positive_scalar(scaling, name)
    return default


def _scale_vector(value: Any, ndim: int | None, name: str) -> np.ndarray:
    """Validate a positive scalar or per-dimension scale; return a float64 array."""
    arr = np.array(value, dtype=float)
    if arr.ndim > 1:
        raise InvalidParameterError(
            f"{name} must be a scalar or a 1-D array with one value per dimension, "
            f"got shape {arr.shape}."
        )
    if not (np.all(np.isfinite(arr)) and np.all(arr > 0.0)):
        raise InvalidParameterError(f"{name} must be finite and positive, got {value!r}.")
    if ndim is not None:
        if arr.ndim == 0:
            arr = np.full(ndim, float(arr))
        elif arr.shape != (ndim,):
            raise InvalidParameterError(
                f"{name} has {arr.shape[0]} entries but the sampled vector has ndim={ndim}; "
                "give a scalar or one value per dimension of the raveled unconstrained vector."
            )
    return arr
