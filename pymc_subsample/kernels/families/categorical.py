"""Categorical rows: the multinomial logit and the ordered logistic and probit models.

These rows depend on the parameters through several scalars at once (``K`` class
predictors; a predictor and two cutpoints), so they are not rows of one linear predictor:
each family declares the :attr:`~pymc_subsample.kernels.families.base.GLMFamily.structure`
whose engine reader finds them (``"softmax"``, ``"ordered"``:
:func:`pymc_subsample.engine.glm.structure_readers`) and computes its constants with
:meth:`~pymc_subsample.kernels.families.base.GLMFamily.row_constants` from what that
reader hands over: the constants of Cornish et al. (2019), "Scalable Metropolis-Hastings
for exact Bayesian inference with large datasets", eq. 12, and their whitened and region
forms, derived in :mod:`pymc_subsample.kernels.scalable.softmax` and
:mod:`pymc_subsample.kernels.scalable.ordered`. They are families of the registry like
the others: recognised by the same detection (exactly one may match a model), listed by
:func:`~pymc_subsample.kernels.families.supported_text` and docs/families.md.

Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit, ndtr, ndtri

from ..scalable.softmax import softmax_constants
from .base import GLMFamily

__all__ = ["CategoricalSoftmax", "OrderedLogistic", "OrderedProbit"]


class CategoricalSoftmax(GLMFamily):
    """Multinomial logit: ``U_i = lse(eta_i) - eta_{i, y_i}`` with ``eta_i`` the ``K`` class
    predictors of row ``i``, affine in the step's ``q``. The derivatives of log-sum-exp
    are the cumulants of the class index, bounded over the whole space by the squared
    (cubed) largest distance between two classes' whitened Jacobians
    (:mod:`pymc_subsample.kernels.scalable.softmax`), so the constants are global, and
    tighter over a region."""

    name = "categorical_softmax"
    aliases = ("softmax", "multinomial_logit")
    label = "Categorical"
    description = ("pm.Categorical(p=pm.math.softmax(eta, axis=-1)) or logit_p=eta, eta an "
                   "(N, K) affine predictor such as a + X @ B (multinomial logit)")
    distribution, dist_params = "CategoricalRV", ("p",)
    structure = "softmax"
    link, link_param = "softmax", "p"
    link_hint = "p=pm.math.softmax(eta, axis=-1)"
    structure_global = True

    def row_constants(self, order, J, eta_hat, *, whiten=None, radius=None):
        """The constants of a chunk of rows from their Jacobians ``J`` (rows x K x d) and
        class predictors ``eta_hat`` (rows x K) at the centre:
        :func:`~pymc_subsample.kernels.scalable.softmax.softmax_constants` (eq. 12's in
        ``q`` without ``whiten``; the whitened ones with ``whiten = L``, over the ball of
        ``radius`` when given)."""
        return softmax_constants(order, J, eta_hat, whiten=whiten, radius=radius)


class _Ordered(GLMFamily):
    """What the ordered logistic and probit families share (not registered): row ``i``
    of category ``y_i`` has ``l_i = log(F(c_{y_i} - eta_i) - F(c_{y_i-1} - eta_i))``, ``F``
    the link's cdf (:meth:`cdf` of the subclass), ``c`` the cutpoints. The reader finds
    ``c - eta`` in the graph of the Categorical's ``p`` and checks numerically that ``p``
    is :meth:`probabilities` of it; the bounds hold over a region only (the cutpoints'
    gaps may close outside it)."""

    label = "Categorical"
    distribution, dist_params = "CategoricalRV", ("p",)
    structure = "ordered"
    link_param = "p"

    def probabilities(self, eta, cut, sigma=1.0) -> np.ndarray:
        """The class probabilities ``F((c_k - eta) / sigma) - F((c_{k-1} - eta) / sigma)``
        of rows with predictors ``eta`` (n,) and cutpoints ``cut`` (K - 1,), shape
        (n, K)."""
        F = self.cdf(cut[None, :] - eta[:, None], sigma)
        F = np.concatenate([np.zeros((eta.size, 1)), F, np.ones((eta.size, 1))], axis=1)
        return np.diff(F, axis=1)

    def row_constants(self, order, y, eta_hat, G_eta, c_hat, P, B, q_hat_s, rows_s, L,
                      radius):
        """The whitened region constants of a chunk of rows:
        :func:`~pymc_subsample.kernels.scalable.ordered.ordered_constants` with this
        family's link (its arguments, after ``order``)."""
        from ..scalable.ordered import ordered_constants  # it reads the registry's partials

        return ordered_constants(self.link, order, y, eta_hat, G_eta, c_hat, P, B,
                                 q_hat_s, rows_s, L, radius)


class OrderedLogistic(_Ordered):
    """``pm.OrderedLogistic``: ``F`` the logistic cdf."""

    name = "ordered_logistic"
    aliases = ("ordered_logit",)
    description = ("pm.OrderedLogistic(eta=eta, cutpoints=cut), eta affine and cut ordered or "
                   "a cumsum of positive steps")
    link = "logit"
    link_hint = "OrderedLogistic's cutpoints"

    def cdf(self, t, sigma=1.0):
        """The logistic cdf at ``t`` (no scale: ``sigma`` is 1)."""
        return expit(t)

    def fit_scale(self, eta, cut, p0):
        """The scale of the cdf: 1."""
        return 1.0


class OrderedProbit(_Ordered):
    """``pm.OrderedProbit`` with a fixed ``sigma``: ``F(t) = Phi(t / sigma)``; the bounds
    take ``c / sigma`` and ``eta / sigma``."""

    name = "ordered_probit"
    description = "pm.OrderedProbit(eta=eta, cutpoints=cut, sigma=s), s fixed, the rest as above"
    link = "probit"
    link_hint = "OrderedProbit's (sigma fixed)"

    def cdf(self, t, sigma=1.0):
        """``Phi(t / sigma)``."""
        return ndtr(t / sigma)

    def fit_scale(self, eta, cut, p0):
        """The ``sigma`` with ``p0 = Phi((c_0 - eta) / sigma)`` for the first category's
        probabilities ``p0`` of rows with predictors ``eta`` (the median over the rows
        where it is well determined), or None when no row determines it."""
        ok = (p0 > 1e-6) & (p0 < 1 - 1e-6) & (np.abs(cut[0] - eta) > 1e-3)
        if not np.any(ok):
            return None
        sigma = float(np.median((cut[0] - eta[ok]) / ndtri(p0[ok])))
        return sigma if np.isfinite(sigma) and sigma > 0 else None
