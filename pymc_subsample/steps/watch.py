"""Watching a chain for the failures that leave no trace in its draws: a chain that does
not move, one that sits far from the posterior, and a test that reads every row on every
draw (a mixin of :class:`~pymc_subsample.steps.base.SubsampleStep`).

A chain stuck where it started (``initvals`` thousands of posterior sds out, with
``init="model"``) returns draws of sd 1e-5 that look like a posterior; ScalableMH's
bounds grow with the distance from their centre, so there every test falls back to all
rows. Each is a sampler warning (once per chain, in the next draw's ``warning`` stat,
logged by ``pm.sample``) naming what was seen and what to do. The checks read the draw's
state and stats only: no rows, no randomness (the draws are unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ChainWatch", "WatchedChain", "STUCK_DRAWS", "FAR_SDS", "FALLBACK_DRAWS",
           "IMPROPER_OPS", "FLAT_DROP"]

#: draws in a row without a move that make a chain stuck
STUCK_DRAWS = 100
#: a draw moved when it went at least this many posterior sds (RMS over coordinates, of
#: the Laplace approximation; any change when the step has none): a chain whose random
#: walk was tuned down to steps of 1e-5 far out does not count as moving
MOVE_SDS = 1e-3
#: posterior sds (root mean square over coordinates, of the Laplace approximation at the
#: step's centre) beyond which a chain sits far from the posterior
FAR_SDS = 50.0
#: draws in a row whose test read all rows (ScalableMH's ``fallback``)
FALLBACK_DRAWS = 50
#: the priors that can leave a posterior improper (their models get the check of
#: :meth:`WatchedChain._check_proper` at set-up)
IMPROPER_OPS = ("FlatRV", "HalfFlatRV")
#: a log posterior that falls less than this (nats) 10 Laplace sds from the centre, along
#: its widest direction, is taken for improper (a Gaussian falls 50, a Cauchy 4.6)
FLAT_DROP = 1.0


@dataclass
class ChainWatch:
    """A chain's counts: draws since it last moved, draws in a row that fell back to
    all rows."""

    still: int = 0
    fallbacks: int = 0


class WatchedChain:
    """The checks of :meth:`_watch_chain`, run after every draw by ``astep``."""

    def _watch_chain(self, q_old, q, stats) -> None:
        """Count and warn (once per chain each) as the module docstring says: the
        distance from the centre is checked after tuning (a tuning chain may start far
        out and come in)."""
        watch = self.chain.watch
        watch.still = 0 if self._moved(q_old, q) else watch.still + 1
        watch.fallbacks = watch.fallbacks + 1 if stats.get("fallback") else 0
        if watch.still == STUCK_DRAWS:
            self.warn_once(
                "stuck", f"the chain has not moved in {STUCK_DRAWS} draws: it is stuck (a "
                "start far from the posterior, or a proposal never accepted there) or mixes "
                "very slowly, and its draws are not a sample of the posterior. Start the "
                "chain nearer the posterior (init='laplace', the default, starts at a draw "
                "of the Laplace approximation), or check the model.")
        far = None if self.tune else self._sds_from_centre(q)
        if far is not None and far > FAR_SDS:
            self.warn_once(
                "far", f"the chain sits {far:.3g} posterior sds (of the Laplace "
                "approximation at the step's centre) from the centre: it has not reached "
                "the posterior, or the posterior is improper or far from Gaussian (a flat "
                "prior on separable data, a coefficient running away). Check the model and "
                "the chain's trace.")
        if watch.fallbacks == FALLBACK_DRAWS:
            self._warn_fallback(stats)

    def _warn_fallback(self, stats):
        """Every one of the last draws read all rows: say so, with the likely cause."""
        rate = stats.get("poisson_rate", float("nan"))
        self.warn_once(
            "fallback", f"the last {FALLBACK_DRAWS} draws each read all "
            f"{self.engine.n_rows:,} rows (fallback: the bounds' expected thinning events, "
            f"{rate:.3g}, reach the number of rows). The bounds grow with the distance "
            "from their centre: far from it (a chain that has not reached the posterior) "
            "every test reads all rows; near it, on few rows, the bounds are loose. The "
            "step stays exact but costs a full pass per draw: start the chain nearer the "
            "posterior, or use AustereMH on few rows.")

    def _moved(self, q_old, q) -> bool:
        if getattr(self, "_laplace_chol", None) is None:
            return not np.array_equal(q_old, q)
        return self._in_sds(np.asarray(q, dtype=np.float64) - q_old) >= MOVE_SDS

    def _in_sds(self, r) -> float:
        """The root mean square of ``L^{-1} r`` (``L`` the Laplace Cholesky factor; its
        inverse is computed once per factor, so a draw pays one small product)."""
        chol = self._laplace_chol
        cached = getattr(self, "_watch_inverse", None)
        if cached is None or cached[0] is not chol:
            inv = (np.linalg.inv(chol) if np.ndim(chol) == 2
                   else 1.0 / np.asarray(chol, dtype=np.float64))
            cached = self._watch_inverse = (chol, inv)
        inv = cached[1]
        z = inv @ r if np.ndim(inv) == 2 else inv * r
        return float(np.sqrt(np.mean(z * z)))

    def _sds_from_centre(self, q):
        """The root mean square over coordinates of ``L^{-1} (q - m)``, with ``m`` and
        ``L L'`` the Laplace approximation at the centre, or None without one."""
        mean = getattr(self, "_laplace_mean", None)
        chol = getattr(self, "_laplace_chol", None)
        if mean is None or chol is None:
            return None
        return self._in_sds(np.asarray(q, dtype=np.float64) - mean)

    # ------------------------------------------------------------------ improper posteriors
    def _check_proper(self, mean, cov) -> None:
        """Warn when a model with a flat prior looks improper at the centre: along the
        Laplace approximation's widest direction ``v`` (sd ``s``), the log posterior 10
        ``s`` from the centre falls less than :data:`FLAT_DROP` nats on one side (a flat
        prior on separable classes: the mode search "converges" where the curvature
        vanishes, and the chain runs away). Two passes over the rows, only for models
        with a prior of :data:`IMPROPER_OPS`."""
        model = self.engine.model
        flat = [model.values_to_rvs[v].name for v in self.engine.vars
                if type(model.values_to_rvs[v].owner.op).__name__ in IMPROPER_OPS]
        if not flat:
            return
        w, vecs = np.linalg.eigh(np.asarray(cov, dtype=np.float64))
        v, s = vecs[:, -1], float(np.sqrt(max(w[-1], 0.0)))

        def logp(x):
            return float(self.engine.prior(x) + self.engine.full_loglik(x))

        base = logp(mean)
        drop = min(base - logp(mean + sign * 10.0 * s * v) for sign in (1.0, -1.0))
        if not drop < FLAT_DROP:  # NaN (a point outside the support) counts as proper
            return
        self._improper_warning = (
            f"the posterior looks improper: 10 Laplace sds ({10 * s:.3g}) from the centre "
            f"along its widest direction the log posterior falls {drop:+.3g} nats (a "
            f"Gaussian falls 50). {', '.join(repr(f) for f in flat)} has a flat prior "
            "that the data may not identify (e.g. separable classes in a logistic "
            "regression): its draws run away. Give it a proper prior.")
        import warnings

        warnings.warn(f"{type(self).__name__}: {self._improper_warning}", UserWarning,
                      stacklevel=5)

