"""Vectorised interval arithmetic: rigorous bounds on a formula over a box, row by row.

ScalableMH's region constants for rows with two parameters (a linear predictor and a
log scale or log shape) need ``sup |d^m g / d eta^j d s^(m-j)|`` over a small box per
row (:mod:`pymc_subsample.kernels.scalable.region`). Evaluating each derivative's formula with
intervals in place of numbers gives an enclosure of its range (Moore, "Interval
Analysis", 1966): every operation returns an interval that contains all results of the
operation on members of its operands, so the final interval contains every value of the
formula on the box. It may be wider than the range when a variable occurs several times
(the dependency effect), which makes the bound looser, never wrong. Each result is
widened by a few units in the last place (``1e-13`` relative after a special function)
to cover rounding, which matters where a formula cancels large terms.

Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit, log_expit, polygamma

__all__ = ["Interval"]

#: relative widening per arithmetic operation (a few units in the last place)
_EPS = 4.0 * np.finfo(np.float64).eps
#: relative widening per special-function evaluation (SciPy's accuracy, with room)
_EPS_SPECIAL = 1e-13


class Interval:
    """Closed intervals ``[lo, hi]``, one per row (NumPy arrays of one shape).

    Supports ``+``, ``-``, ``*`` with intervals and numbers (arrays broadcast), division
    by an interval of positive numbers, integer powers, and the monotone functions below.
    """

    __slots__ = ("lo", "hi")
    __array_ufunc__ = None  # ``ndarray * Interval`` defers to ``Interval.__rmul__``

    def __init__(self, lo, hi=None):
        lo = np.asarray(lo, dtype=np.float64)
        hi = lo if hi is None else np.asarray(hi, dtype=np.float64)
        if np.any(lo > hi):
            raise ValueError("Interval: lo must be <= hi.")
        self.lo, self.hi = lo, hi

    @classmethod
    def _outward(cls, lo, hi, eps=_EPS):
        """An interval widened by ``eps`` relative to its ends: covers the rounding of
        the operation that produced them (outward rounding, approximately)."""
        return cls(lo - eps * np.abs(lo), hi + eps * np.abs(hi))

    @staticmethod
    def _of(x) -> "Interval":
        return x if isinstance(x, Interval) else Interval(x)

    # arithmetic ---------------------------------------------------------------------
    def __add__(self, other):
        o = self._of(other)
        return Interval._outward(self.lo + o.lo, self.hi + o.hi)

    __radd__ = __add__

    def __neg__(self):
        return Interval(-self.hi, -self.lo)

    def __sub__(self, other):
        return self + (-self._of(other))

    def __rsub__(self, other):
        return self._of(other) + (-self)

    def __mul__(self, other):
        o = self._of(other)
        c = (self.lo * o.lo, self.lo * o.hi, self.hi * o.lo, self.hi * o.hi)
        return Interval._outward(np.minimum.reduce(c), np.maximum.reduce(c))

    __rmul__ = __mul__

    def __truediv__(self, other):
        o = self._of(other)
        if np.any(o.lo <= 0):
            raise ValueError("Interval division needs a positive denominator.")
        return self * Interval(1.0 / o.hi, 1.0 / o.lo)

    def __pow__(self, n: int):
        n = int(n)
        if n < 0:
            raise ValueError("Interval powers must be >= 0.")
        if n % 2 == 1:
            return Interval._outward(self.lo**n, self.hi**n)
        a, b = np.abs(self.lo) ** n, np.abs(self.hi) ** n
        straddle = (self.lo < 0) & (self.hi > 0)
        return Interval._outward(np.where(straddle, 0.0, np.minimum(a, b)), np.maximum(a, b))

    # monotone functions ----------------------------------------------------------------
    def _increasing(self, f):
        return Interval._outward(f(self.lo), f(self.hi), _EPS_SPECIAL)

    def _decreasing(self, f):
        return Interval._outward(f(self.hi), f(self.lo), _EPS_SPECIAL)

    def exp(self):
        return self._increasing(np.exp)

    def log(self):
        if np.any(self.lo <= 0):
            raise ValueError("Interval log needs positive values.")
        return self._increasing(np.log)

    def expit(self):
        """The logistic function ``1 / (1 + exp(-x))``."""
        return self._increasing(expit)

    def log_expit(self):
        """``log(expit(x))``, computed without cancellation."""
        return self._increasing(log_expit)

    def polygamma(self, n: int):
        """``psi^(n)`` on positive values: increasing for even ``n``, decreasing for odd."""
        if np.any(self.lo <= 0):
            raise ValueError("Interval polygamma needs positive values.")
        f = lambda x: polygamma(n, x)  # noqa: E731
        return self._increasing(f) if n % 2 == 0 else self._decreasing(f)

    # results -------------------------------------------------------------------------
    def abs_sup(self) -> np.ndarray:
        """``max |x|`` over the interval."""
        return np.maximum(np.abs(self.lo), np.abs(self.hi))

    def __contains__(self, x) -> bool:
        x = np.asarray(x, dtype=np.float64)
        return bool(np.all((self.lo <= x) & (x <= self.hi)))

    def __repr__(self) -> str:
        return f"Interval(lo={self.lo!r}, hi={self.hi!r})"
