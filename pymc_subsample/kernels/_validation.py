"""Argument checks shared by the kernels (pure Python and NumPy).

Each rule is written once here and used by every kernel that needs it, so that the
same argument gets the same check and the same message everywhere. Messages take one
of two forms:

* plain: ``"epsilon must be a number in [0, 0.5), got 0.7."``;
* with ``owner`` (the public function checked): ``"The 'delta' parameter of barker_test
  must be a number in the range (0, inf]. Got 0.0 instead."``.

``strict=True`` accepts only Python or NumPy numbers of the right kind (no ``bool``, no
strings, no integral floats where an ``int`` is asked for); otherwise values are coerced
with ``int``/``float`` where that is exact.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "check_choice",
    "check_epsilon",
    "check_finite_positive",
    "check_int",
    "check_real",
    "is_int",
    "is_real",
]


def is_int(x) -> bool:
    """True for a Python or NumPy integer that is not a ``bool``."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def is_real(x) -> bool:
    """True for a Python or NumPy integer or float that is not a ``bool``."""
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(
        x, (bool, np.bool_)
    )


def _fail(name, value, what, owner, shown=None):
    shown = value if shown is None else shown
    if owner is None:
        return ValueError(f"{name} must be {what}, got {shown!r}.")
    return ValueError(
        f"The '{name}' parameter of {owner} must be {what}. Got {shown!r} instead."
    )


def check_int(
    name: str,
    value,
    minimum: int,
    *,
    maximum: int | None = None,
    maximum_text: str | None = None,
    strict: bool = False,
    owner: str | None = None,
) -> int:
    """``value`` as an ``int`` in ``[minimum, maximum]``, or ``ValueError``.

    Parameters
    ----------
    name : str
        The argument's name, for the message.
    value : object
        The argument.
    minimum, maximum : int
        Bounds (``maximum=None``: none).
    maximum_text : str, optional
        How the message shows ``maximum`` (e.g. ``"n_total=100"``).
    strict : bool, default False
        Reject integral floats such as ``10.0`` (otherwise accepted as ``10``).
    owner : str, optional
        The function checked, for the long message form.
    """
    if owner is None:
        what = f"an integer >= {minimum}" if maximum is None else (
            f"an integer in [{minimum}, {maximum_text or maximum}]")
    else:
        hi = "inf)" if maximum is None else f"{maximum_text or maximum}]"
        what = f"an int in the range [{minimum}, {hi}"
    if not is_int(value):
        if (not strict and isinstance(value, (float, np.floating))
                and float(value).is_integer()):
            value = int(value)
        else:
            raise _fail(name, value, what, owner)
    if value < minimum or (maximum is not None and value > maximum):
        raise _fail(name, value, what, owner, shown=int(value) if owner is None else value)
    return int(value)


def _interval(low, high, closed):
    left = "[" if closed in ("left", "both") else "("
    right = "]" if closed in ("right", "both") else ")"
    return f"{left}{low:g}, {high:g}{right}"


def check_real(
    name: str,
    value,
    low: float,
    high: float,
    *,
    closed: str = "neither",
    strict: bool = False,
    owner: str | None = None,
    interval_text: str | None = None,
) -> float:
    """``value`` as a ``float`` in the interval from ``low`` to ``high``, or ``ValueError``.

    Parameters
    ----------
    name, value, owner, strict
        As in :func:`check_int` (``strict``: only int or float types, no ``float(value)``
        coercion of other objects such as strings).
    low, high : float
        Interval ends (``math.inf`` allowed; NaN always fails).
    closed : {"neither", "left", "right", "both"}
        Which ends belong to the interval.
    interval_text : str, optional
        How the message shows the interval (e.g. ``"(0, pi/sqrt(3))"``).
    """
    interval = _interval(low, high, closed) if interval_text is None else interval_text
    what = f"a number in {interval}" if owner is None else f"a number in the range {interval}"
    if strict and not is_real(value):
        raise _fail(name, value, what, owner)
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise _fail(name, value, what, owner) from None
    above = v >= low if closed in ("left", "both") else v > low
    below = v <= high if closed in ("right", "both") else v < high
    if not (above and below):  # NaN fails both
        raise _fail(name, value, what, owner)
    return v


def check_epsilon(epsilon) -> float:
    """The level ``epsilon`` of one t-test of the Austerity MH test, in ``[0, 0.5)``.

    ``0`` is allowed (the exact test); a level of 0.5 or more would stop at once.
    """
    return check_real("epsilon", epsilon, 0.0, 0.5, closed="left")


def check_choice(name: str, value, choices: tuple, *, owner: str | None = None):
    """``value`` if it is one of ``choices``, else ``ValueError`` listing them."""
    if value in choices:
        return value
    listed = " or ".join(repr(c) for c in choices) if len(choices) <= 2 else (
        "one of " + ", ".join(repr(c) for c in choices))
    raise _fail(name, value, listed, owner)


def check_finite_positive(name: str, value, *, label: str | None = None) -> float:
    """``value`` as a finite ``float > 0``: ``TypeError`` if it is not a number,
    ``ValueError`` otherwise (``label`` replaces ``name`` at the start of the message)."""
    label = name if label is None else label
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{label} must be a number, got {value!r}.") from None
    if not (v > 0.0 and math.isfinite(v)):
        raise ValueError(f"{label} must be finite and > 0, got {value!r}.")
    return v
