"""Poisson, Gamma and NegativeBinomial rows with a log mean ``e^eta``; Gamma and
NegativeBinomial with their shape on the log scale (two-parameter rows).

Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import numpy as np

from .base import GLMFamily


class PoissonLog(GLMFamily):
    """Poisson with a log link: ``f = exp(eta) - y eta``, ``f'' = f''' = exp(eta)``:
    no global bound; increasing, so the supremum over an interval is ``exp(hi)``."""

    name = "poisson_log"
    support = "count"
    aliases = ("poisson",)
    label = "Poisson"
    description = "pm.Poisson(mu=pm.math.exp(eta))"
    distribution = "PoissonRV"
    dist_params = ("mu",)
    link, link_param = "log", "mu"
    link_hint = "a log link (use mu=pm.math.exp(eta))"
    unbounded = "Poisson with log link: f(eta) = exp(eta) - y eta has unbounded derivatives"

    def local_sup(self, m, lo, hi, *, y=None, **params):
        """Region bound: ``exp(hi)``."""
        return np.exp(hi)

    def row_loglik(self, eta, y, params, derivatives=2):
        """``l = y eta - e^eta``, ``l' = y - e^eta``, ``l'' = -e^eta`` (Cornish et al.
        2019, eq. 10)."""
        mu = np.exp(eta)
        return (y * eta - mu, y - mu, -mu)


class _LogShape(GLMFamily):
    """A family with a mean ``e^eta`` and a shape ``a = e^s`` on the log scale, ``s`` the
    second row coordinate: its derivatives in ``s`` are unbounded, so it has region
    bounds only (the path bound over boxes of ``(eta, s)``)."""

    unbounded = "the derivatives in the log shape are unbounded"


class GammaLog(_LogShape):
    """Gamma with shape ``a = e^s`` and mean ``e^eta``: ``l = A(a) + a c(eta) + const``,
    ``A(a) = a log a - lgamma(a)``, ``c = log v - v``, ``v = y e^-eta``."""

    name = "gamma_log"
    label = "Gamma"
    description = ("pm.Gamma with mean pm.math.exp(eta) and shape alpha fixed or a "
                   "positive free variable")
    distribution = "GammaRV"
    dist_params = ("shape", "scale")
    link = "log_mean_shape_scale"
    scale_param = "shape"

    def box_partials(self, m, E, S, y, **params):
        """With ``d/ds = a d/da``:

        * m = 2: ``l_ee = -a v``, ``l_es = a (v - 1)``,
          ``l_ss = a (log a - psi(a) + 2 - a psi1(a) + c)``;
        * m = 3: ``l_eee = a v``, ``l_ees = -a v``, ``l_ess = a (v - 1)``,
          ``l_sss = a (log a - psi(a) + 3 - 3 a psi1(a) - a^2 psi2(a) + c)``

        (``psi1``, ``psi2``: the trigamma and tetragamma functions).
        """
        a = S.exp()
        v = y * (-E).exp()
        c = v.log() - v
        if m == 2:
            ss = a * (S - a.polygamma(0) + 2.0 - a * a.polygamma(1) + c)
            return [ss, a * (v - 1.0), a * v]
        sss = a * (S - a.polygamma(0) + 3.0 - 3.0 * a * a.polygamma(1)
                   - a**2 * a.polygamma(2) + c)
        return [sss, a * (v - 1.0), a * v, a * v]


class NegBinomialLog(_LogShape):
    """NegativeBinomial with mean ``mu = e^eta`` and shape ``a = e^s``:
    ``l = lgamma(y + a) - lgamma(a) + a log a + y eta - (y + a) log(a + mu)``."""

    name = "negbinomial_log"
    label = "NegativeBinomial"
    description = ("pm.NegativeBinomial(mu=pm.math.exp(eta), alpha) with alpha fixed or a "
                   "positive free variable")
    distribution = "NegBinomialRV"
    dist_params = ("n", "p")
    link = "log_mean_negbinomial"
    scale_param = "n"

    def box_partials(self, m, E, S, y, **params):
        """With ``p = mu / (a + mu) = expit(eta - s)``, ``q = 1 - p``,
        ``dp/d eta = pq = -dp/ds``, ``T = psi(y + a) - psi(a) + 1``,
        ``T1 = psi1(y + a) - psi1(a)``, ``T2 = psi2(y + a) - psi2(a)``:

        * m = 2: ``l_ee = -(y + a) p q``, ``l_es = p ((y + a) q - a)``,
          ``l_ss = a (T + log q) + a^2 T1 + a p - a q - (y + a) p q``;
        * m = 3: ``l_eee = -(y + a) p q (1 - 2p)``, ``l_ees = p q ((y + a)(1 - 2p) - a)``,
          ``l_ess = p q ((y + a)(2p - 1) + a) - a p^2``,
          ``l_sss = a (T + log q) + 3 a^2 T1 + a^3 T2 + a p + a p^2 - a q - 2 a p q
          + (y + a) p q (1 - 2p)``.
        """
        a = S.exp()
        x = E - S
        p = x.expit()
        q = (-x).expit()
        logq = (-x).log_expit()
        ya = a + y
        pq = p * q
        T = ya.polygamma(0) - a.polygamma(0) + 1.0
        T1 = ya.polygamma(1) - a.polygamma(1)
        base = a * (T + logq) - a * q
        if m == 2:
            ss = base + a**2 * T1 + a * p - ya * pq
            return [ss, p * (ya * q - a), -(ya * pq)]
        T2 = ya.polygamma(2) - a.polygamma(2)
        one_2p = 1.0 - 2.0 * p
        sss = (base + 3.0 * a**2 * T1 + a**3 * T2 + a * p + a * p**2 - 2.0 * a * pq
               + ya * pq * one_2p)
        return [sss, pq * (-(ya * one_2p) + a) - a * p**2, pq * (ya * one_2p - a),
                -(ya * pq * one_2p)]
