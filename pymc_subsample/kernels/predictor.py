"""Taylor control variates in the linear predictor's own coordinates.

For a GLM row ``log p(y_i | eta_i)`` whose linear predictor is affine in a vector ``v``
of *predictor coordinates*, ``eta_i = a_i . v + o_i``, while ``v = v(theta)`` is any
smooth function of the sampled variables (a non-centred hierarchical model:
``v = (beta, mu + tau * z)``, ``eta_i = x_i . beta + v_{g_i}``), the second-order Taylor
expansion of each row in ``v`` about ``v_hat``,

    lhat_i(v) = l_i(v_hat) + l_i'(eta_hat_i) (eta_i - eta_hat_i)
                + 1/2 l_i''(eta_hat_i) (eta_i - eta_hat_i)^2,

is a valid control variate (Bardenet, Doucet & Holmes 2017, "On Markov chain Monte Carlo
methods for tall data", Sec. 7.1; Cornish et al. 2019, "Scalable Metropolis-Hastings for
exact Bayesian inference with large datasets", eq. 10): its sum over all rows is the
closed-form quadratic ``G . (v - v_hat) + 1/2 (v - v_hat)' H (v - v_hat)`` with
``G = sum_i l_i' a_i`` and ``H = sum_i l_i'' a_i a_i'``, and each row's remainder depends on
``theta`` only through ``eta_i``. Its bound constants are those of an ordinary GLM in
``v``, however non-linear ``v(theta)`` is: the non-linearity stays in the data-free first
factor of the factorised test, which is evaluated exactly.

Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit, log_expit, log_ndtr

from .bounds import probit_lambda

__all__ = ["PREDICTOR_FAMILIES", "row_loglik", "remainder_difference", "predictor_sums"]

#: families whose rows depend on the parameters through ``eta`` alone
PREDICTOR_FAMILIES = ("bernoulli_logit", "bernoulli_probit", "poisson_log", "normal", "student_t")


def row_loglik(family: str, eta, y, params: dict, *, derivatives: int = 2):
    """``log p(y_i | eta_i)`` up to a constant per row, and its first ``derivatives``
    derivatives in ``eta``.

    Families: ``"bernoulli_logit"`` and ``"bernoulli_probit"`` (``y`` in {0, 1}),
    ``"poisson_log"`` (mean
    ``exp(eta)``), ``"normal"`` (params ``sigma``) and ``"student_t"`` (params ``nu``,
    ``sigma``), with location ``eta``. Row constants (``-log y!``, normalising terms) are
    left out: only differences in ``eta`` are used.

    Returns
    -------
    tuple of ndarray
        ``(l, l', l'')`` (fewer with a smaller ``derivatives``), each shaped like ``eta``.
    """
    eta = np.asarray(eta, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if family == "bernoulli_logit":
        # log p = y eta - log(1 + e^eta) = y log s(eta) + (1 - y) log s(-eta)
        l0 = y * log_expit(eta) + (1.0 - y) * log_expit(-eta)
        s = expit(eta)
        out = (l0, y - s, -s * (1.0 - s))
    elif family == "bernoulli_probit":
        # log p = log Phi(s eta), s = 2 y - 1; lambda = phi / Phi, lambda' = -lambda (t + lambda)
        sgn = 2.0 * y - 1.0
        t = sgn * eta
        lam = probit_lambda(t)
        out = (log_ndtr(t), sgn * lam, -lam * (t + lam))
    elif family == "poisson_log":
        mu = np.exp(eta)
        out = (y * eta - mu, y - mu, -mu)
    elif family == "normal":
        sig2 = np.asarray(params["sigma"], dtype=np.float64) ** 2
        r = y - eta
        out = (-0.5 * r * r / sig2, r / sig2, -np.ones_like(r) / sig2)
    elif family == "student_t":
        nu = float(np.ravel(params["nu"])[0])
        c = nu * np.asarray(params["sigma"], dtype=np.float64) ** 2
        a = 0.5 * (nu + 1.0)
        r = y - eta
        den = c + r * r
        out = (-a * np.log1p(r * r / c), 2.0 * a * r / den, 2.0 * a * (r * r - c) / den**2)
    else:
        raise ValueError(
            f"predictor coordinates support the families {PREDICTOR_FAMILIES}, got {family!r}.")
    return out[: derivatives + 1]


def remainder_difference(family, y, params, eta, eta_prop, eta_hat, order: int) -> np.ndarray:
    """``D_i = R_i(v') - R_i(v)`` with ``R_i = U_i - Uhat_{k,i}``, ``U_i = -l_i``: the data
    factors of the factorised MH test (Cornish et al. 2019, eq. 11) for the Taylor proxy
    of order ``k`` in the predictor coordinates (module docstring).

    ``eta``, ``eta_prop``, ``eta_hat``: the rows' linear predictors at ``v``, ``v'`` and
    the centre ``v_hat``. Only the rows' values at these points are used: no Jacobian or
    Hessian is formed.
    """
    l, _ = row_loglik(family, np.stack([eta, eta_prop]), y, params, derivatives=1)[:2]
    _, d1, d2 = row_loglik(family, eta_hat, y, params)
    step = eta_prop - eta
    taylor = d1 * step
    if order == 2:
        taylor = taylor + 0.5 * d2 * step * ((eta_prop - eta_hat) + (eta - eta_hat))
    return -((l[1] - l[0]) - taylor)


def predictor_sums(family, y, params, eta_hat, A, order: int):
    """One chunk's contribution to the proxy's data sums: ``G = sum_i l_i'(eta_hat_i) a_i``
    and (order 2) ``H = sum_i l_i''(eta_hat_i) a_i a_i'`` (``A``: the rows' ``a_i``)."""
    _, d1, d2 = row_loglik(family, eta_hat, y, params)
    grad = A.T @ d1
    hess = (A * d2[:, None]).T @ A if order == 2 else None
    return grad, hess
