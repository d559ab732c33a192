"""Argument checks shared by the proposals (pure Python and NumPy)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _check_ndim(ndim: Any) -> int:
    """``ndim`` as a positive ``int`` (TypeError or ValueError otherwise)."""
    try:
        n = int(ndim)
    except (TypeError, ValueError):
        raise TypeError(f"ndim must be a positive integer, got {ndim!r}.") from None
    if n != ndim or n < 1:
        raise ValueError(f"ndim must be a positive integer, got {ndim!r}.")
    return n


def _check_target(target_accept: float) -> float:
    """A target acceptance rate in the open interval (0, 1)."""
    t = float(target_accept)
    if not 0.0 < t < 1.0:
        raise ValueError(f"target_accept must be in (0, 1), got {target_accept!r}.")
    return t


def _positive_scalar(value: Any, name: str) -> float:
    """A finite positive scalar ``value`` as a float; ``name`` is used in the error."""
    arr = np.asarray(value, dtype=float)
    if arr.ndim != 0:
        raise ValueError(f"{name} must be a positive scalar, got an array of shape {arr.shape}.")
    v = float(arr)
    if not (math.isfinite(v) and v > 0.0):
        raise ValueError(f"{name} must be a finite positive number, got {value!r}.")
    return v


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
        raise ValueError(
            f"{name} must be a scalar or a 1-D array with one value per dimension, "
            f"got shape {arr.shape}."
        )
    if not (np.all(np.isfinite(arr)) and np.all(arr > 0.0)):
        raise ValueError(f"{name} must be finite and positive, got {value!r}.")
    if ndim is not None:
        if arr.ndim == 0:
            arr = np.full(ndim, float(arr))
        elif arr.shape != (ndim,):
            raise ValueError(
                f"{name} has {arr.shape[0]} entries but the sampled vector has ndim={ndim}; "
                "give a scalar or one value per dimension of the raveled unconstrained vector."
            )
    return arr
