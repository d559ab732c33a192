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

Rows with an unknown scale (Normal and Student-t with ``sigma`` sampled) depend on the
parameters through two quantities, the linear predictor ``eta_i`` and the log scale
``s_i``; both are affine in ``v`` (``s_i = b_i . v + c_i``: ``log sigma`` is one more
parameter part, or a group's, ``log sigma[g_i]``). The expansion is then the joint
second-order one in ``(eta_i, s_i)``, with sums ``G = sum_i (l_e a_i + l_s b_i)`` and
``H = sum_i (l_ee a_i a_i' + l_es (a_i b_i' + b_i a_i') + l_ss b_i b_i')``
(:func:`scale_row_loglik`, :func:`scale_remainder_difference`, :func:`scale_sums`).

Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla

from ..families import family_names, require

__all__ = ["whitening", "PREDICTOR_FAMILIES", "SCALE_FAMILIES", "row_loglik", "remainder_difference",
           "predictor_sums", "scale_row_loglik", "scale_remainder_difference", "scale_sums"]


def _one_param(family) -> bool:
    """Rows through ``eta`` alone, with NumPy row terms (``GLMFamily.row_loglik``)."""
    return not family.two_param and family.predictor_coordinates


def _scale(family) -> bool:
    """Rows through ``eta`` and a log scale ``s`` (location-scale, sigma sampled), with
    NumPy row terms (``GLMFamily.standard_logpdf``)."""
    return family.two_param and family.predictor_coordinates


def __getattr__(name):
    """``PREDICTOR_FAMILIES`` (:func:`row_loglik`) and ``SCALE_FAMILIES``
    (:func:`scale_row_loglik`), read from the registry
    (:mod:`pymc_subsample.kernels.families`) when asked for."""
    if name == "PREDICTOR_FAMILIES":
        return family_names(_one_param)
    if name == "SCALE_FAMILIES":
        return family_names(_scale)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def row_loglik(family, eta, y, params: dict, *, derivatives: int = 2):
    """``log p(y_i | eta_i)`` up to a constant per row, and its first ``derivatives``
    derivatives in ``eta`` (the rows of the Taylor control variates, Bardenet et al.
    2017, Sec. 7.1; Cornish et al. 2019, eq. 10).

    Families: those of :data:`PREDICTOR_FAMILIES`, each by its
    :meth:`~pymc_subsample.kernels.families.GLMFamily.row_loglik`:
    ``"bernoulli_logit"`` and ``"bernoulli_probit"`` (``y`` in {0, 1}),
    ``"poisson_log"`` (mean ``exp(eta)``), ``"normal"`` (params ``sigma``) and
    ``"student_t"`` (params ``nu``, ``sigma``), with location ``eta``. Row constants
    (``-log y!``, normalising terms) are left out: only differences in ``eta`` are used.

    Returns
    -------
    tuple of ndarray
        ``(l, l', l'')`` (fewer with a smaller ``derivatives``), each shaped like ``eta``.
    """
    eta = np.asarray(eta, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    fam = require(family, _one_param,
                  "predictor coordinates support the families {supported}, got {family!r}.")
    out = fam.row_loglik(eta, y, params, derivatives)
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


def predictor_sums(family, y, params, eta_hat, A, order: int, *, value: bool = False):
    """One chunk's contribution to the proxy's data sums: ``G = sum_i l_i'(eta_hat_i) a_i``
    and (order 2) ``H = sum_i l_i''(eta_hat_i) a_i a_i'`` (``A``: the rows' ``a_i``).
    With ``value``, ``(sum_i l_i, G, H)``: the log-likelihood up to a constant, its
    gradient and Hessian in ``v`` (the mode search's Newton pass)."""
    l0, d1, d2 = row_loglik(family, eta_hat, y, params)
    grad = A.T @ d1
    hess = weighted_gram(A, d2) if order == 2 else None
    return (float(l0.sum()), grad, hess) if value else (grad, hess)


def weighted_gram(A, w) -> np.ndarray:
    """``A' diag(w) A`` (a GLM's Hessian ``X' W X``). When the weights have one sign (a
    log-concave family: ``l'' <= 0``) it is ``+-B'B`` with ``B = sqrt(|w|) A``, a
    symmetric product that NumPy hands to BLAS's ``syrk`` (half the work of a general
    product)."""
    w = np.asarray(w, dtype=np.float64)
    if w.size and (np.all(w <= 0) or np.all(w >= 0)):
        sign = -1.0 if np.all(w <= 0) else 1.0
        B = A * np.sqrt(np.abs(w))[:, None]
        return sign * (B.T @ B)
    return (A * w[:, None]).T @ A


def scale_row_loglik(family, eta, s, y, params: dict):
    """``log p(y_i | eta_i, sigma_i = e^s_i)`` up to a constant per row, its gradient and
    its Hessian in ``(eta, s)``.

    With ``t = (y - eta) e^-s``, ``l = -s + H(t)`` (``H`` the log density of the standard
    Normal, ``-t^2/2``, or Student-t with ``nu`` degrees of freedom,
    ``-(nu+1)/2 log(1 + t^2/nu)``), and by the chain rule (``dt/d eta = -e^-s``,
    ``dt/ds = -t``; the same partials as :func:`pymc_subsample.kernels.scalable.region.local_sup2`
    bounds):

    * ``l_e = -e^-s H1``, ``l_s = -1 - t H1``;
    * ``l_ee = e^-2s H2``, ``l_es = e^-s (H1 + t H2)``, ``l_ss = t (H1 + t H2)``.

    Normal: ``H1 = -t``, ``H2 = -1``. Student-t, ``D = nu + t^2``:
    ``H1 = -(nu+1) t / D``, ``H2 = -(nu+1)(nu - t^2) / D^2``.

    Parameters
    ----------
    family : str or GLMFamily
        One of :data:`SCALE_FAMILIES` (``"normal_scale"``, ``"student_t_scale"``): a
        family with :meth:`~pymc_subsample.kernels.families.GLMFamily.standard_logpdf`.
    eta, s, y : array_like
        Location, log scale and response of each row (broadcast together).
    params : dict
        ``nu`` for the Student-t.

    Returns
    -------
    tuple of ndarray
        ``(l, l_e, l_s, l_ee, l_es, l_ss)``.
    """
    eta, s, y = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (eta, s, y)))
    with np.errstate(over="ignore", invalid="ignore"):  # a far point: the test rejects it
        return _scale_terms(family, eta, s, y, params)


def _scale_terms(family, eta, s, y, params):
    es = np.exp(-s)
    t = (y - eta) * es
    fam = require(
        family, _scale,
        "predictor coordinates with an unknown scale support the families {supported}, "
        "got {family!r}.")
    h0, h1, h2 = fam.standard_logpdf(t, params)
    k = h1 + t * h2
    return (h0 - s, -es * h1, -1.0 - t * h1, es * es * h2, es * k, t * k)


def scale_remainder_difference(family, y, params, point, point_prop, point_hat, order: int):
    """``D_i = R_i(v') - R_i(v)`` for rows with an unknown scale (module docstring):
    :func:`remainder_difference` with the Taylor proxy of order ``order`` in
    ``(eta_i, s_i)`` jointly. Each point is a pair ``(eta, s)`` of the rows' values."""
    (e, s), (ep, sp), (eh, sh) = point, point_prop, point_hat
    l0 = scale_row_loglik(family, e, s, y, params)[0]
    l1 = scale_row_loglik(family, ep, sp, y, params)[0]
    _, ge, gs, hee, hes, hss = scale_row_loglik(family, eh, sh, y, params)
    de, ds, dep, dsp = e - eh, s - sh, ep - eh, sp - sh
    taylor = ge * (ep - e) + gs * (sp - s)
    if order == 2:
        taylor = taylor + 0.5 * (hee * (dep * dep - de * de) + hss * (dsp * dsp - ds * ds)) + hes * (
            dep * dsp - de * ds)
    return -((l1 - l0) - taylor)


def scale_sums(family, y, params, eta_hat, s_hat, A, B, order: int, *, value: bool = False):
    """One chunk's contribution to the proxy's sums for rows with an unknown scale:
    ``G = sum_i l_e a_i + l_s b_i`` and (order 2) the Hessian ``H`` of the module
    docstring (``A``, ``B``: the rows' ``a_i``, ``b_i``); with ``value``, the sum of the
    rows' ``l`` first (:func:`predictor_sums`)."""
    l0, ge, gs, hee, hes, hss = scale_row_loglik(family, eta_hat, s_hat, y, params)
    grad = A.T @ ge + B.T @ gs
    hess = None
    if order == 2:
        cross = (A * hes[:, None]).T @ B
        hess = (A * hee[:, None]).T @ A + (B * hss[:, None]).T @ B + cross + cross.T
    return (float(l0.sum()), grad, hess) if value else (grad, hess)


def whitening(jac: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Cholesky factor ``L`` of the Gaussian approximation's covariance carried to the
    predictor coordinates (``J C J'``, ``J = dv/dq``) and its inverse ``L^-1``, which
    whitens ``v``.

    ``v`` may have more entries than ``q`` (the same coefficient twice, say), so
    ``J C J'`` can be singular: a ridge of ``1e-10`` of its largest variance keeps ``L``
    invertible. Any invertible ``L`` gives valid bounds; this one only makes them tight.

    Returns
    -------
    chol, chol_inv : ndarray, shape (p, p)
    """
    cov_v = jac @ cov @ jac.T
    cov_v = 0.5 * (cov_v + cov_v.T)
    p = cov_v.shape[0]
    ridge = 1e-10 * max(float(np.max(np.diag(cov_v))), 1e-300)
    chol = np.linalg.cholesky(cov_v + ridge * np.eye(p))
    return chol, sla.solve_triangular(chol, np.eye(p), lower=True)
