"""Normal and Student-t rows, ``mu = eta``, with a fixed scale (one-parameter rows) or a
sampled one (two-parameter rows ``(eta, log sigma)``).

Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import math

import numpy as np

from .base import GLMFamily
from .partials import _T_SUP3, _location_scale, _positive, _sup


class _FixedScale(GLMFamily):
    """A location family with a fixed scale: ``f(eta) = g((y - eta) / sigma)``, whose
    m-th derivative scales as ``sigma^-m``; ``sigma`` is among its subclasses'
    :attr:`~GLMFamily.fixed_params` (a sampled scale: :class:`_SampledScale`)."""

    needs_y = False

    def global_sup_args(self, params):
        """The scale moves into the row factor: ``scale = 1 / sigma`` and the supremum
        of the family with ``sigma = 1``."""
        if "sigma" not in params:  # glm_bound_constants says what is missing
            return None, params
        rest = {k: v for k, v in params.items() if k != "sigma"}
        return 1.0 / np.asarray(params["sigma"]), {"sigma": 1.0, **rest}


class _SampledScale(GLMFamily):
    """A location family whose scale ``sigma = e^s`` is a free variable: rows of
    ``(eta, s)``, bounded over boxes of both (the path bound); the case of a fixed scale
    is :class:`_FixedScale`."""

    scale_param = "sigma"
    free_params = ("sigma",)
    unbounded = "the derivatives in the log scale are unbounded"


class _NormalRows(GLMFamily):
    """What the Normal families share: ``pm.Normal(mu=eta, sigma)`` read through ``mu``
    (the identity link), responses on the real line. Not registered itself."""

    label = "Normal"
    distribution = "NormalRV"
    dist_params = ("mu", "sigma")
    link, link_param = "identity", "mu"
    support = "real"


class _StudentTRows(GLMFamily):
    """What the Student-t families share: ``pm.StudentT(nu, mu=eta, sigma)`` read through
    ``mu`` (the identity link); each family states which of ``nu`` and ``sigma`` are fixed
    or free. Not registered itself."""

    label = "StudentT"
    distribution = "StudentTRV"
    dist_params = ("nu", "mu", "sigma")
    link, link_param = "identity", "mu"


class StudentT(_FixedScale, _StudentTRows):
    """Student-t regression with fixed ``nu > 0`` and scale ``sigma > 0``. Up to
    constants ``f(eta) = a log(1 + r^2 / c)``, ``r = y - eta``, ``a = (nu + 1) / 2``,
    ``c = nu sigma^2``; derivatives in ``eta`` are ``(-1)^m`` those in ``r``:

        f''  = 2 a (c - r^2) / (c + r^2)^2,
        f''' = 4 a r (r^2 - 3 c) / (c + r^2)^3.

    ``|f''|``: in ``t = r^2``, ``h(t) = (c - t) / (c + t)^2`` decreases to its minimum
    ``-1/(8c)`` at ``t = 3c``, then increases to 0; so ``sup |h| = 1/c``. ``|f'''|``: with
    ``r = sqrt(c) x``, ``f''' = 4 a c^(-3/2) k(x)``, ``k(x) = x (x^2 - 3) / (1 + x^2)^3``;
    ``k'(x) = -3 (x^4 - 6 x^2 + 1) / (1 + x^2)^4`` vanishes at ``x = sqrt 2 -+ 1``, where
    ``|k| = 1/(4 -+ 2 sqrt 2)^2``; the larger is ``(3 + 2 sqrt 2)/8``. Hence

        sup |f''|  = (nu + 1) / (nu sigma^2),
        sup |f'''| = (nu + 1)(3 + 2 sqrt 2) / (4 (nu sigma^2)^(3/2)),

    neither depending on ``y``."""

    name = "student_t"
    support = "real"
    aliases = ("studentt", "t")
    description = "pm.StudentT(nu, mu=eta, sigma) with nu and sigma fixed"
    fixed_params = ("nu", "sigma")
    needs_y = True

    def sup_derivative(self, m, **params):
        """Cornish et al. (2019), eq. 12: class docstring."""
        nu = _positive("nu", params["nu"], self.name)
        sigma = _positive("sigma", params["sigma"], self.name)
        c = nu * sigma * sigma
        if m == 2:
            return (nu + 1.0) / c
        return 2.0 * (nu + 1.0) * _T_SUP3 / c**1.5

    def local_sup(self, m, lo, hi, *, y=None, **params):
        """Region bound: ``f''`` is critical at ``r = 0, +-sqrt(3 c)``, ``f'''`` at
        ``r^2 = c (3 -+ 2 sqrt 2)`` (``r = y - eta``)."""
        nu, sigma = params.get("nu"), params.get("sigma")
        if y is None or nu is None or sigma is None:
            raise TypeError("student_t needs y, nu and sigma.")
        y = np.asarray(y, dtype=np.float64)
        c = np.asarray(nu, dtype=np.float64) * np.asarray(sigma, dtype=np.float64) ** 2
        a = (np.asarray(nu, dtype=np.float64) + 1.0) / 2.0
        r_lo, r_hi = y - hi, y - lo  # r = y - eta reverses the interval
        if m == 2:
            rc = np.sqrt(3.0 * c)
            return _sup(lambda r: 2.0 * a * (c - r * r) / (c + r * r) ** 2, r_lo, r_hi,
                        (0.0, rc, -rc))
        r1 = np.sqrt(c * (3.0 - 2.0 * math.sqrt(2.0)))
        r2 = np.sqrt(c * (3.0 + 2.0 * math.sqrt(2.0)))
        return _sup(lambda r: 4.0 * a * r * (r * r - 3.0 * c) / (c + r * r) ** 3, r_lo, r_hi,
                    (r1, -r1, r2, -r2))

    def row_loglik(self, eta, y, params, derivatives=2):
        """``l = -a log(1 + r^2 / c)`` and its derivatives in ``eta`` (Cornish et al.
        2019, eq. 10)."""
        nu = float(np.ravel(params["nu"])[0])
        c = nu * np.asarray(params["sigma"], dtype=np.float64) ** 2
        a = 0.5 * (nu + 1.0)
        r = y - eta
        den = c + r * r
        return (-a * np.log1p(r * r / c), 2.0 * a * r / den, 2.0 * a * (r * r - c) / den**2)


class Normal(_FixedScale, _NormalRows):
    """Normal regression with fixed ``sigma > 0``: ``f(eta) = (y - eta)^2 / (2 sigma^2)``,
    ``f'' = 1/sigma^2``, ``f''' = 0``, so SMH-2's Taylor expansion is exact and every
    ``psi_i`` is 0 (the thinning test then never touches the data)."""

    name = "normal"
    aliases = ("gaussian",)
    description = "pm.Normal(mu=eta, sigma) with sigma fixed"
    fixed_params = ("sigma",)

    def sup_derivative(self, m, **params):
        """Cornish et al. (2019), eq. 12: class docstring."""
        sigma = _positive("sigma", params["sigma"], self.name)
        return 1.0 / (sigma * sigma) if m == 2 else 0.0

    def local_sup(self, m, lo, hi, *, y=None, **params):
        """Region bound: the constants of :meth:`sup_derivative`, per row."""
        sigma = params.get("sigma")
        if sigma is None:
            raise TypeError("normal needs sigma.")
        val = 1.0 / np.asarray(sigma, dtype=np.float64) ** 2 if m == 2 else 0.0
        return np.broadcast_to(np.asarray(val, dtype=np.float64), lo.shape).copy()

    def row_loglik(self, eta, y, params, derivatives=2):
        """``l = -r^2 / (2 sigma^2)``, ``l' = r / sigma^2``, ``l'' = -1 / sigma^2``
        (Cornish et al. 2019, eq. 10)."""
        sig2 = np.asarray(params["sigma"], dtype=np.float64) ** 2
        r = y - eta
        return (-0.5 * r * r / sig2, r / sig2, -np.ones_like(r) / sig2)


class NormalScale(_SampledScale, _NormalRows):
    """Normal regression with a sampled scale: ``mu = eta``, ``sigma = e^s``."""

    name = "normal_scale"
    description = "pm.Normal(mu=eta, sigma) with sigma a positive free variable"

    def box_partials(self, m, E, S, y, **params):
        """The partials of :func:`_location_scale` (Normal)."""
        return _location_scale(m, E, S, y, None)

    def standard_logpdf(self, t, params):
        """``H = -t^2/2``, ``H' = -t``, ``H'' = -1``."""
        return -0.5 * t * t, -t, -np.ones_like(t)


class StudentTScale(_SampledScale, _StudentTRows):
    """Student-t regression with fixed ``nu`` and a sampled scale: ``mu = eta``,
    ``sigma = e^s``."""

    name = "student_t_scale"
    support = "real"
    description = ("pm.StudentT(nu, mu=eta, sigma) with nu fixed and sigma a positive "
                   "free variable")
    fixed_params = ("nu",)

    def box_partials(self, m, E, S, y, **params):
        """The partials of :func:`_location_scale` (Student-t)."""
        nu = params.get("nu")
        if nu is None:
            raise TypeError("student_t_scale needs nu.")
        return _location_scale(m, E, S, y, float(nu))

    def standard_logpdf(self, t, params):
        """``H = -(nu+1)/2 log(1 + t^2/nu)``, ``H' = -(nu+1) t / D``,
        ``H'' = -(nu+1)(nu - t^2) / D^2``, ``D = nu + t^2``."""
        nu = float(np.ravel(params["nu"])[0])
        d = nu + t * t
        h0 = -0.5 * (nu + 1.0) * np.log1p(t * t / nu)
        h1 = -(nu + 1.0) * t / d
        h2 = -(nu + 1.0) * (nu - t * t) / (d * d)
        return h0, h1, h2
