"""Argument checks shared by the kernels, proposals, combiners and steps (pure Python and
NumPy).

Each rule is written once here and used by every module that needs it, so that the
same argument gets the same check and the same message everywhere. Every ``check_*``
helper raises :class:`InvalidParameterError`, which is both a ``ValueError`` and a
``TypeError``: a wrong value and a value of the wrong type are the same mistake (a bad
argument), and ``except ValueError`` or ``except TypeError`` catches either.

Messages take one of three forms:

* plain: ``"epsilon must be a number in [0, 0.5), got 0.7."``;
* with ``owner`` (the public function checked): ``"The 'delta' parameter of barker_test
  must be a number in the range (0, inf]. Got 0.0 instead."``;
* with ``label``, which replaces the argument's name at the start of the plain form
  (e.g. ``"data_usage_summary: n_rows must be ..."``).

``what`` replaces the description of what to pass (after "must be"), for a message that
explains the argument's meaning, e.g. ``what="a share of steps in [0, 1] (e.g. 0.01)"``.

``strict=True`` accepts only Python or NumPy numbers of the right kind (no ``bool``, no
strings, no integral floats where an ``int`` is asked for); otherwise values are coerced
with ``int``/``float`` where that is exact.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "InvalidParameterError",
    "check_batch_size",
    "check_bytes",
    "check_callable",
    "check_choice",
    "check_epsilon",
    "check_finite_positive",
    "check_float",
    "check_generator",
    "check_int",
    "check_positive",
    "check_positive_int",
    "check_real",
    "check_share",
    "is_int",
    "is_real",
]


class InvalidParameterError(ValueError, TypeError):
    """A bad argument: a value out of range or of the wrong type.

    Both a ``ValueError`` and a ``TypeError`` (as scikit-learn's error of the same name),
    so code that catches either keeps working. Raised by every ``check_*`` helper of
    :mod:`pymc_subsample.kernels._validation`; the message names the argument and says
    what to pass.
    """


def is_int(x) -> bool:
    """True for a Python or NumPy integer that is not a ``bool``."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def is_real(x) -> bool:
    """True for a Python or NumPy integer or float that is not a ``bool``."""
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(
        x, (bool, np.bool_)
    )


def _fail(name, value, what, owner, shown=None, label=None) -> InvalidParameterError:
    """The error for argument ``name``: ``"<label or name> must be <what>, got <shown>."``
    (or the long form with ``owner``)."""
    shown = value if shown is None else shown
    if owner is None:
        return InvalidParameterError(
            f"{name if label is None else label} must be {what}, got {shown!r}.")
    return InvalidParameterError(
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
    label: str | None = None,
    what: str | None = None,
) -> int:
    """``value`` as an ``int`` in ``[minimum, maximum]``, or :class:`InvalidParameterError`.

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
    label : str, optional
        Replaces ``name`` at the start of the plain message.
    what : str, optional
        Replaces the description of the allowed values in the message.
    """
    if what is None and owner is None:
        what = f"an integer >= {minimum}" if maximum is None else (
            f"an integer in [{minimum}, {maximum_text or maximum}]")
    elif what is None:
        hi = "inf)" if maximum is None else f"{maximum_text or maximum}]"
        what = f"an int in the range [{minimum}, {hi}"
    if not is_int(value):
        if (not strict and isinstance(value, (float, np.floating))
                and float(value).is_integer()):
            value = int(value)
        else:
            raise _fail(name, value, what, owner, label=label)
    if value < minimum or (maximum is not None and value > maximum):
        raise _fail(name, value, what, owner, shown=int(value) if owner is None else value,
                    label=label)
    return int(value)


def check_positive_int(name: str, value, *, strict: bool = False, owner: str | None = None,
                       label: str | None = None, what: str | None = None) -> int:
    """``value`` as an ``int >= 1``, or :class:`InvalidParameterError`: :func:`check_int`
    with ``minimum=1`` and the message "must be a positive integer"."""
    if what is None and owner is None:
        what = "a positive integer"
    return check_int(name, value, 1, strict=strict, owner=owner, label=label, what=what)


def _interval(low, high, closed):
    left = "[" if closed in ("left", "both") else "("
    right = "]" if closed in ("right", "both") else ")"
    return f"{left}{low:g}, {high:g}{right}"


def _as_float(name, value, what, owner, strict, label) -> float:
    """``float(value)`` (only of an int or float type if ``strict``), or the error."""
    if strict and not is_real(value):
        raise _fail(name, value, what, owner, label=label)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise _fail(name, value, what, owner, label=label) from None


def check_float(name: str, value, *, strict: bool = False, owner: str | None = None,
                label: str | None = None, what: str | None = None) -> float:
    """``float(value)``, NaN and infinities included, or :class:`InvalidParameterError`
    ("must be a float") when ``value`` is not a number (for a log ratio that a kernel
    decides on even when it is not finite)."""
    return _as_float(name, value, "a float" if what is None else what, owner, strict, label)


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
    label: str | None = None,
    what: str | None = None,
) -> float:
    """``value`` as a ``float`` in the interval from ``low`` to ``high``, or
    :class:`InvalidParameterError`.

    Parameters
    ----------
    name, value, owner, strict, label, what
        As in :func:`check_int` (``strict``: only int or float types, no ``float(value)``
        coercion of other objects such as strings).
    low, high : float
        Interval ends (``math.inf`` allowed; NaN always fails).
    closed : {"neither", "left", "right", "both"}
        Which ends belong to the interval.
    interval_text : str, optional
        How the message shows the interval (e.g. ``"(0, pi/sqrt(3))"``).
    """
    if what is None:
        interval = _interval(low, high, closed) if interval_text is None else interval_text
        what = (f"a number in {interval}" if owner is None
                else f"a number in the range {interval}")
    v = _as_float(name, value, what, owner, strict, label)
    above = v >= low if closed in ("left", "both") else v > low
    below = v <= high if closed in ("right", "both") else v < high
    if not (above and below):  # NaN fails both
        raise _fail(name, value, what, owner, label=label)
    return v


def check_positive(name: str, value, *, finite: bool = True, strict: bool = False,
                   owner: str | None = None, label: str | None = None,
                   what: str | None = None) -> float:
    """``value`` as a ``float > 0`` (finite unless ``finite=False``, which allows
    ``inf``), or :class:`InvalidParameterError` ("must be a finite positive number").

    Parameters are those of :func:`check_real`.
    """
    if what is None:
        what = "a finite positive number" if finite else "a positive number (inf allowed)"
    v = _as_float(name, value, what, owner, strict, label)
    if not (v > 0.0 and (v < math.inf or not finite)):  # NaN fails
        raise _fail(name, value, what, owner, label=label)
    return v


def check_share(name: str, value, *, strict: bool = False, owner: str | None = None,
                label: str | None = None, what: str | None = None) -> float:
    """``value`` as a ``float`` share in ``[0, 1]``, or :class:`InvalidParameterError`
    ("must be a number in [0, 1]")."""
    return check_real(name, value, 0.0, 1.0, closed="both", strict=strict, owner=owner,
                      label=label, what=what)


def check_bytes(name: str, value, *, allow_none: bool = True, owner: str | None = None,
                label: str | None = None) -> float | None:
    """``value`` as a finite positive number of bytes (a ``float``), or ``None`` when
    ``allow_none``; otherwise :class:`InvalidParameterError`.

    Strict: a ``bool`` or a string is refused. The message gives an example
    (``8 * 2**30`` for 8 GiB).
    """
    if value is None and allow_none:
        return None
    what = "a positive number of bytes (e.g. 8 * 2**30 for 8 GiB)" + (
        " or None" if allow_none else "")
    return check_positive(name, value, strict=True, owner=owner, label=label, what=what)


def check_epsilon(epsilon) -> float:
    """The level ``epsilon`` of one t-test of the Austerity MH test, in ``[0, 0.5)``.

    ``0`` is allowed (the exact test); a level of 0.5 or more would stop at once.
    """
    return check_real("epsilon", epsilon, 0.0, 0.5, closed="left")


def _in(value, choices) -> bool:
    """``value in choices``, False for a value that cannot be compared (an array)."""
    try:
        return bool(value in choices)
    except (TypeError, ValueError):
        return False


def check_choice(name: str, value, choices: tuple, *, allow_none: bool = False,
                 owner: str | None = None, label: str | None = None,
                 what: str | None = None):
    """``value`` if it is one of ``choices`` (or ``None`` with ``allow_none``), else
    :class:`InvalidParameterError` listing them ("must be 'a' or 'b'", "must be one of
    'a', 'b', 'c'", "must be None or one of ...")."""
    if (value is None and allow_none) or _in(value, choices):
        return value
    if what is None:
        listed = " or ".join(repr(c) for c in choices) if len(choices) <= 2 else (
            "one of " + ", ".join(repr(c) for c in choices))
        what = f"None or {listed}" if allow_none else listed
    raise _fail(name, value, what, owner, label=label)


def check_callable(name: str, value, *, signature: str | None = None,
                   owner: str | None = None, label: str | None = None):
    """``value`` if it is callable, else :class:`InvalidParameterError` ("must be
    callable: <signature>, got <type>")."""
    if callable(value):
        return value
    what = "callable" if signature is None else f"callable: {signature}"
    raise _fail(name, value, what, owner, shown=type(value).__name__, label=label)


def check_generator(name: str, value, *, owner: str | None = None) -> np.random.Generator:
    """``value`` if it is a ``numpy.random.Generator``, else :class:`InvalidParameterError`
    (the message suggests ``numpy.random.default_rng(seed)``)."""
    if isinstance(value, np.random.Generator):
        return value
    raise _fail(name, value, "a numpy.random.Generator (e.g. numpy.random.default_rng(seed))",
                owner, shown=type(value).__name__)


def check_finite_positive(name: str, value, *, label: str | None = None) -> float:
    """``value`` as a finite ``float > 0``, or :class:`InvalidParameterError`: "must be a
    number" if it is not a number, "must be finite and > 0" otherwise (``label``
    replaces ``name`` at the start of the message)."""
    label = name if label is None else label
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidParameterError(f"{label} must be a number, got {value!r}.") from None
    if not (v > 0.0 and math.isfinite(v)):
        raise InvalidParameterError(f"{label} must be finite and > 0, got {value!r}.")
    return v


def check_batch_size(value, name: str, n_rows: int, *, allow_none: bool = False):
    """Validate a batch-size argument: a positive integer, capped at the ``N`` rows.

    A batch larger than the data means "all rows" and is capped at ``N``; zero, negative
    and non-integer values raise with a message naming the argument.
    """
    if value is None and allow_none:
        return None
    if not is_int(value):
        raise InvalidParameterError(
            f"{name} must be a positive integer number of rows, got {value!r}.")
    if value < 1:
        raise InvalidParameterError(
            f"{name}={value} is out of range: it must be a positive number of rows "
            f"(at most the N={n_rows} rows of the data).")
    return min(int(value), n_rows)
