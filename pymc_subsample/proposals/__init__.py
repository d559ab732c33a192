"""Proposal distributions shared by the subsampling step methods.

Every proposal works on the step's raveled unconstrained ``float64`` vector ``q`` of
length ``ndim`` and draws only from the :class:`numpy.random.Generator` passed to
:meth:`Proposal.draw`. The contract (see ``docs/architecture.md``) is

``draw(q, rng) -> (q_new, log_ratio)``, with
``log_ratio = log q(q | q_new) - log q(q_new | q)`` (0 for a symmetric proposal).

Built-in proposals derive from :class:`Proposal`, which adds the hooks the step
methods call: :meth:`~Proposal.setup` once, :meth:`~Proposal.reset` at the start of
every chain, :meth:`~Proposal.tune` after every tuning step, :meth:`~Proposal.stop_tuning`
at the end of tuning, and the :attr:`~Proposal.scaling` property reported in
``sample_stats``. Any other object with a ``draw(q, rng)`` method can be used through
:func:`as_proposal` (which wraps it in :class:`UserProposal` and validates it).

The built-in classes, what their :attr:`~Proposal.scaling` reports, and symmetry:

- :class:`RandomWalk` (symmetric): mean marginal proposal standard deviation.
- :class:`Langevin` (asymmetric): step size ``h``.
- :class:`PreconditionedRandomWalk` (symmetric): ``l`` in ``(l / sqrt(d)) L eps``.
- :class:`ReversibleRandomWalk` (asymmetric): ``l``, as the preconditioned walk.
- :class:`PCN` (asymmetric): ``beta = sqrt(1 - rho)``.
- :class:`SurrogateHMC` (asymmetric): leapfrog step ``h``.

Each tunes one scalar on the log scale by the Robbins-Monro recursion described in
:mod:`pymc_subsample.proposals.adaptation` and fixes it at the averaged iterate at the
end of tuning.

Layout: ``base`` (the :class:`Proposal` base class, the covariance factor),
``validation`` (argument checks), ``adaptation`` (tuning), one module per family
(``random_walk``, ``langevin``, ``pcn``, ``hmc``, ``user``) and, here, :data:`REGISTRY`
with the factories. A new proposal is a new module plus one line in :data:`REGISTRY`.

This package imports only NumPy and SciPy.
"""

from __future__ import annotations

import difflib
from typing import Any

from ..kernels._validation import InvalidParameterError
from .base import Proposal
from .hmc import SurrogateHMC
from .langevin import Langevin
from .pcn import PCN
from .random_walk import PreconditionedRandomWalk, RandomWalk, ReversibleRandomWalk
from .user import UserProposal

__all__ = [
    "Proposal",
    "RandomWalk",
    "Langevin",
    "PreconditionedRandomWalk",
    "ReversibleRandomWalk",
    "PCN",
    "SurrogateHMC",
    "UserProposal",
    "as_proposal",
    "make_proposal",
    "PROPOSAL_NAMES",
    "REGISTRY",
]

#: The built-in proposals by the name :func:`make_proposal` accepts.
REGISTRY: dict[str, type[Proposal]] = {
    "random_walk": RandomWalk,
    "langevin": Langevin,
    "preconditioned": PreconditionedRandomWalk,
    "reversible": ReversibleRandomWalk,
    "pcn": PCN,
    "surrogate_hmc": SurrogateHMC,
}

#: Names accepted by :func:`make_proposal` and :func:`as_proposal`.
PROPOSAL_NAMES: tuple[str, ...] = tuple(REGISTRY)


def make_proposal(spec: str | type[Proposal], **kwargs: Any) -> Proposal:
    """Build a built-in proposal from its name (or class) and constructor arguments.

    Parameters
    ----------
    spec : str or type
        A key of :data:`REGISTRY`: ``"random_walk"``, ``"langevin"``, ``"preconditioned"``,
        ``"reversible"``, ``"pcn"`` or ``"surrogate_hmc"`` (ScalableMH only; case and
        ``-``/``_`` insensitive), or a :class:`Proposal` subclass.
    **kwargs
        Passed to the constructor, e.g. ``make_proposal("pcn", rho=0.5)``.

    Returns
    -------
    Proposal
    """
    if isinstance(spec, type) and issubclass(spec, Proposal) and spec is not UserProposal:
        return spec(**kwargs)
    if not isinstance(spec, str):
        raise InvalidParameterError(
            f"make_proposal expects a proposal name ({', '.join(map(repr, PROPOSAL_NAMES))}) "
            f"or a Proposal subclass, got {type(spec).__name__}."
        )
    key = spec.strip().lower().replace("-", "_").replace(" ", "_")
    cls = REGISTRY.get(key)
    if cls is None:
        close = difflib.get_close_matches(key, PROPOSAL_NAMES, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise InvalidParameterError(
            f"Unknown proposal {spec!r}. Valid names: {', '.join(map(repr, PROPOSAL_NAMES))}.{hint} "
            "You can also pass a Proposal instance or any object with a method "
            "draw(q, rng) -> (q_new, log_ratio)."
        )
    return cls(**kwargs)


def as_proposal(obj: Any, **kwargs: Any) -> Proposal:
    """Turn what a user passed as ``proposal=`` into a :class:`Proposal`.

    Parameters
    ----------
    obj : Proposal, str, type or object with ``draw``
        A built-in instance (returned as is), a name or class (see
        :func:`make_proposal`, which receives ``kwargs``), or any object with
        ``draw(q, rng) -> (q_new, log_ratio)`` or a function ``f(q, rng)`` (wrapped in
        :class:`UserProposal`).

    Returns
    -------
    Proposal
    """
    if isinstance(obj, Proposal):
        if kwargs:
            raise InvalidParameterError(
                "Keyword arguments can only be given with a proposal name or class, not an "
                "instance.")
        return obj
    if isinstance(obj, str) or (isinstance(obj, type) and issubclass(obj, Proposal)):
        return make_proposal(obj, **kwargs)
    if kwargs:
        raise InvalidParameterError(
            "Keyword arguments can only be given with a proposal name or class.")
    if obj is None:
        raise InvalidParameterError(
            "No proposal given: pass one of " + ", ".join(map(repr, PROPOSAL_NAMES))
            + ", a Proposal instance, or an object with draw(q, rng) -> (q_new, log_ratio)."
        )
    return UserProposal(obj)
