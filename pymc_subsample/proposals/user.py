"""User proposals: any object with ``draw(q, rng) -> (q_new, log_ratio)``, or a plain
function ``f(q, rng)``, wrapped and validated by :class:`UserProposal`."""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable

import numpy as np

from ..kernels._validation import InvalidParameterError
from .base import Proposal


def _accepted_kwargs(fn: Callable) -> tuple[bool, frozenset]:
    """(accepts **kwargs, names of keyword-capable parameters) of ``fn``."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return True, frozenset()
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values())
    names = frozenset(
        p.name for p in sig.parameters.values()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    )
    return var_kw, names


def _builtin_names() -> str:
    """The quoted names of the built-in proposals, for error messages."""
    from . import PROPOSAL_NAMES  # the registry imports this module

    return ", ".join(map(repr, PROPOSAL_NAMES))


class UserProposal(Proposal):
    """Wrap a user object with ``draw(q, rng) -> (q_new, log_ratio)`` as a :class:`Proposal`.

    The object is checked when wrapped (it must have a callable ``draw``; a plain
    function ``f(q, rng)`` is accepted as the draw itself) and its first draw after
    each :meth:`reset` is validated: it must return a pair whose first element is a
    finite 1-D float array of length ``ndim`` and whose second is a scalar that is
    finite or ``-inf``. Later draws are only converted (``float64`` array, float) and
    a NaN ``log_ratio`` is rejected.

    Optional hooks of the wrapped object are forwarded when present: ``setup`` (with
    the keyword arguments its signature accepts), ``reset``, ``tune(accepted[, q])``,
    ``stop_tuning``; ``scaling`` is ``float(obj.scaling)`` or NaN.

    Parameters
    ----------
    obj : object
        The user proposal.
    """


    def __init__(self, obj: Any):
        super().__init__(adapt=False)
        if isinstance(obj, type):
            raise InvalidParameterError(
                f"Got the class {obj.__name__}, not an instance: pass {obj.__name__}(...) "
                "as the proposal."
            )
        draw = getattr(obj, "draw", None)
        if draw is None:
            if callable(obj):
                self._is_function = True
            else:
                raise InvalidParameterError(
                    f"A proposal must have a method draw(q, rng) -> (q_new, log_ratio); "
                    f"{type(obj).__name__} object has no 'draw'. Define draw, pass a function "
                    "f(q, rng), or use one of the names " + _builtin_names() + "."
                )
        elif not callable(draw):
            raise InvalidParameterError(
                f"{type(obj).__name__}.draw is not callable (got {type(draw).__name__}); it "
                "must be a method draw(q, rng) -> (q_new, log_ratio)."
            )
        else:
            self._is_function = False
        self.obj = obj
        self._name = getattr(obj, "__name__", None) if self._is_function else type(obj).__name__
        self._checked = False
        self.ndim = None

    def _hook(self, name):
        if self._is_function:
            return None
        h = getattr(self.obj, name, None)
        return h if callable(h) else None

    # the lifecycle (setup, reset, tune, stop_tuning) is the base class's; its hooks
    # forward to the user's object
    def _setup(self, ndim, *, scaling, grad_fn, n_total, mode, cov):
        """Forward to ``obj.setup`` with the keywords it accepts."""
        hook = self._hook("setup")
        if hook is not None:
            kwargs = dict(scaling=scaling, grad_fn=grad_fn, n_total=n_total, mode=mode, cov=cov)
            var_kw, names = _accepted_kwargs(hook)
            if not var_kw:
                kwargs = {k: v for k, v in kwargs.items() if k in names}
            hook(ndim, **kwargs)

    _state_attrs = ("_checked",)

    def _reset_state(self):
        """Forward to ``obj.reset`` if present and re-validate the next draw."""
        self._checked = False
        hook = self._hook("reset")
        if hook is not None:
            hook()

    def _tune(self, accepted, q):
        """Forward to ``obj.tune(accepted)`` (with ``q=q`` if it accepts ``q``)."""
        hook = self._hook("tune")
        if hook is None:
            return
        var_kw, names = _accepted_kwargs(hook)
        if var_kw or "q" in names:
            hook(accepted, q=q)
        else:
            hook(accepted)

    def _finish_tuning(self):
        """Forward to ``obj.stop_tuning`` if present."""
        hook = self._hook("stop_tuning")
        if hook is not None:
            hook()

    @property
    def scaling(self) -> float:
        """``float(obj.scaling)`` if available, else NaN."""
        if self._is_function:
            return float("nan")
        try:
            return float(getattr(self.obj, "scaling"))
        except Exception:
            return float("nan")

    def draw(self, q, rng):
        """Call the user's draw; validate the first result after each reset."""
        fn = self.obj if self._is_function else self.obj.draw
        out = fn(q, rng)
        if not self._checked:
            return self._validate(q, out)
        q_new, log_ratio = out
        log_ratio = float(log_ratio)
        if log_ratio != log_ratio:
            raise ValueError(f"{self._name}.draw returned log_ratio = nan.")
        return np.asarray(q_new, dtype=np.float64), log_ratio

    def _validate(self, q, out):
        who = f"{self._name}.draw(q, rng)" if not self._is_function else f"proposal function {self._name}(q, rng)"
        hint = (
            " It must return (q_new, log_ratio): q_new a 1-D float array like q, and "
            "log_ratio = log q(q | q_new) - log q(q_new | q) as a float (0.0 for a "
            "symmetric proposal, -inf to force a rejection)."
        )
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"{who} returned {type(out).__name__}, not a pair." + hint)
        q_new, log_ratio = out
        ndim = self.ndim if self.ndim is not None else int(np.size(q))
        arr = np.asarray(q_new)
        if arr.dtype.kind not in "fiub":
            raise TypeError(f"{who} returned q_new of dtype {arr.dtype}; expected real floats." + hint)
        if arr.ndim != 1:
            raise ValueError(
                f"{who} returned q_new with shape {arr.shape}; expected a 1-D array of length "
                f"{ndim} (ravel it)." + hint
            )
        if arr.shape[0] != ndim:
            raise ValueError(
                f"{who} returned q_new of length {arr.shape[0]}; expected ndim={ndim}, the "
                "length of the raveled unconstrained vector." + hint
            )
        arr = arr.astype(np.float64, copy=False)
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{who} returned a non-finite q_new." + hint)
        if np.ndim(log_ratio) != 0 or isinstance(log_ratio, (str, bytes)):
            raise TypeError(f"{who} returned log_ratio of type {type(log_ratio).__name__}; expected a scalar float." + hint)
        try:
            lr = float(log_ratio)
        except (TypeError, ValueError):
            raise TypeError(f"{who} returned log_ratio {log_ratio!r}, which is not a number." + hint) from None
        if math.isnan(lr) or lr == math.inf:
            raise ValueError(f"{who} returned log_ratio = {lr}; it must be finite or -inf." + hint)
        self._checked = True
        return arr, lr

    def __repr__(self):
        return f"UserProposal({self.obj!r})"
