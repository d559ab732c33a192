"""ScalableMH's set-up of its bounds ``lambda_i <= phi(theta, theta') * psi_i``: where the
control variates and bounds live (the step's space ``q`` or the predictor coordinates
``v(q)``: :func:`bound_coordinates`), the per-row constants ``psi_i``, the table that
draws rows in proportion to them (:class:`~pymc_subsample.kernels.sampling.inverse_cdf.InverseCDFTable`), the whitening and the region (:class:`Bounds`).

Cornish, Vanetti, Bouchard-Cote, Deligiannidis & Doucet (2019), "Scalable
Metropolis-Hastings for exact Bayesian inference with large datasets": eq. 12 (the
constants), eq. 13 (the step factor); the whitened and region forms are
:mod:`pymc_subsample.kernels.scalable.phi`'s and :mod:`pymc_subsample.kernels.scalable.region`'s.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from ..engine.glm import chunk_psi, eta_is_affine, glm_psi, two_param_chunk_psi
from ..engine.predictor import covered_predictor_map
from ..kernels.sampling.inverse_cdf import InverseCDFTable
from ..kernels._validation import InvalidParameterError
from ..passes import map_local
from ..kernels.scalable.bounds import UpperBounds
from ..kernels.variance.control_variates import TaylorProxy
from ..kernels.families import auto_refusal
from ..kernels.scalable.phi import region_phi, taylor_phi
from ..kernels.variance.predictor import whitening

__all__ = ["Bounds", "BoundsRider", "bound_coordinates", "check_bound_args", "predictor_bounds",
           "q_bounds", "summed_glm_psi"]


@dataclass
class Bounds:
    """The bound constants and the step factor of one ScalableMH step object.

    Attributes
    ----------
    psi : ndarray
        ``psi_i``, one per row.
    form : {"whitened", "cornish"}
    order : int
    whiten_inv : ndarray or None
        ``L^-1`` of the whitened form (in the control variates' coordinates).
    region : float or None
        The region's radius in whitened units (None: global bounds).
    path : bool
        Rows of two or more affine functions (a linear predictor and a log scale, and
        a log degrees of freedom for ``student_t_nu``): the path step factor, with the
        constants of :func:`pymc_subsample.kernels.scalable.region.path_constants`.
    """

    psi: np.ndarray
    form: str
    order: int
    whiten_inv: np.ndarray | None = None
    region: float | None = None
    path: bool = False

    def __post_init__(self):
        if self.psi.ndim != 1 or not np.all(np.isfinite(self.psi)) or np.any(self.psi < 0):
            raise InvalidParameterError(
                f"ScalableMH: the bound constants must be one finite value >= 0 per row, "
                f"got shape {self.psi.shape} with values outside [0, inf).")
        self.psi_total = float(self.psi.sum(dtype=np.float64))  # psi may be float32
        self.table = (InverseCDFTable(self.psi, map_fn=map_local) if self.psi_total > 0
                      else None)

    def phi(self, q, q_prop, x, x_prop, center, theta_hat):
        """``(phi, outside)``: the step factor of the pair (``x``: the control variates'
        coordinates of ``q``) and whether a point left the region (then the exact
        full-data test is taken)."""
        outside = False
        if self.form == "whitened":
            w = self.whiten_inv
            phi, outside = region_phi(w @ (x - center), w @ (x_prop - center), self.order,
                                      region=self.region, path=self.path)
        else:
            try:
                phi = taylor_phi(q, q_prop, theta_hat, self.order)
            except OverflowError:
                phi = math.inf  # a point too far for the bounds' arithmetic: exact test
        if self.psi_total == 0.0:
            phi = 0.0  # the remainders vanish (e.g. a Normal likelihood with known scale)
        return phi, outside


def check_bound_args(bounds, bound_form, region):
    """Validate ScalableMH's ``bounds=``, ``bound_form=`` and ``region=`` together;
    returns the bound form in effect and the region argument (None for eq. 12's global
    constants, which have no region)."""
    auto = isinstance(bounds, str)
    if bound_form is None:
        bound_form = "whitened" if auto else "cornish"
    if bound_form not in ("whitened", "cornish"):
        raise InvalidParameterError(
            f"bound_form must be 'whitened' or 'cornish', got {bound_form!r}.")
    if bound_form == "whitened" and not auto:
        raise InvalidParameterError(
            "bound_form='whitened' needs bounds='auto' (the whitened row factors come "
            "from the recognised linear predictor); user bounds are the constants of "
            "Cornish et al. (2019, eq. 12): use bound_form='cornish'.")
    if region is not None and not (isinstance(region, str) and region == "auto"):
        if isinstance(region, bool) or not isinstance(region, numbers.Real) or not (
                0 < region < np.inf):
            raise InvalidParameterError(
                f"region must be 'auto', None or a positive radius (in Laplace sds), got "
                f"{region!r}.")
    if region is not None and bound_form != "whitened":
        region = None  # region bounds are whitened bounds: eq. 12's are global
    return bound_form, region


def region_radius(region_arg, dim):
    """The region's radius in whitened units (``"auto"``: ``sqrt(dim) + 4``), or None."""
    if region_arg == "auto":
        return math.sqrt(dim) + 4.0
    return None if region_arg is None else float(region_arg)


def bound_coordinates(engine, spec, q_hat, affine_map, whitened: bool):
    """Where ScalableMH's control variates and bounds live: the predictor coordinates
    (a :class:`~pymc_subsample.engine.predictor.PredictorMap`), or None to keep them in
    ``q``.

    ``bounds="auto"`` with whitened bounds on a one-parameter GLM uses them. They are
    needed when the linear predictor is not affine in ``q`` (a non-centred hierarchical
    model, a log-transformed coefficient); for an affine one they give the same bounds
    with cheaper functions (the linear predictor and NumPy row terms instead of a
    compiled Hessian-vector graph). Where they do not apply (a per-row scale,
    ``bound_form="cornish"``) an affine predictor keeps the bounds in ``q``.

    Parameters
    ----------
    engine : LikelihoodEngine
    spec : GLMSpec or None
        The recognised GLM (None: user bounds, kept in ``q``).
    q_hat : ndarray
        The centre of the control variates.
    affine_map : PredictorMap or None
        The map found before the mode search when the predictor looked affine in ``q``.
    whitened : bool
        Whether the bounds are whitened (``bound_form="whitened"``).
    """
    if spec is None:
        return None
    if affine_map is not None and affine_map.check_affine(affine_map.v(q_hat)):
        return affine_map  # found before the mode search (affine in q)
    if spec.two_param:
        # an affine eta and log scale keep the path bounds in q (glm_psi); otherwise the
        # predictor coordinates (Normal and Student-t), or glm_psi's refusal
        if not whitened or eta_is_affine(engine, spec, q_hat):
            return None
        return covered_predictor_map(engine, spec, q_hat)
    vmap = covered_predictor_map(engine, spec, q_hat) if whitened else None
    if vmap is None and not eta_is_affine(engine, spec, q_hat):
        if not whitened:
            raise InvalidParameterError(
                f"ScalableMH: the linear predictor of observed '{spec.observed}' is not "
                "affine in the step's unconstrained variables; its bounds are taken in "
                "the predictor's own coordinates, which needs bound_form='whitened'.")
        raise InvalidParameterError(auto_refusal(
            f"the linear predictor of observed '{spec.observed}' is affine neither in the "
            "sampled variables nor in data-free expressions of them (e.g. exp(b * x) or "
            "(X @ b)**2)."))
    return vmap


class BoundsRider:
    """The predictor coordinates' bound constants ``psi_i`` computed chunk by chunk from
    the rows' Jacobian in ``v``: on their own pass (:func:`predictor_bounds`), or riding
    on the mode search's last Hessian pass (:func:`pymc_subsample.center.find_center`'s
    ``rider=``), which reads the same Jacobian, so that the centre's sums and the bounds
    come from one pass over the data.

    The whitening ``L`` is that of the Gaussian approximation ``cov`` given here. On the
    mode search's pass it comes from the previous iterate's Hessian: any invertible
    ``L`` gives valid bounds (:func:`pymc_subsample.kernels.variance.predictor.whitening`), and
    the step whitens its moves with this same ``L``, so only the bounds' tightness
    depends on it.
    """

    def __init__(self, vmap, spec, order, theta, cov, region_arg):
        self.vmap, self.spec, self.order = vmap, spec, order
        self.theta = np.asarray(theta, dtype=np.float64)
        self.chol, self.whiten_inv = whitening(vmap.jacobian_v(self.theta), cov)
        self.region = region_radius(region_arg, vmap.size)
        if self.region is None and (not spec.glm_family.global_bound or vmap.scale):
            raise InvalidParameterError(
                f"ScalableMH: observed '{spec.observed}' ({spec.family}) has derivatives "
                "that are unbounded over the whole space; it needs region bounds "
                "(region='auto' or a radius).")
        self.psi = UpperBounds(vmap.engine.n_rows)
        self.sums_v = None
        #: what the pass's workers call: no lock or per-row array inside, so that it
        #: pickles for a dask.distributed client
        self.chunk = functools.partial(_chunk_constants, spec, order, vmap.scale,
                                       dict(vmap.params), self.chol, self.region)

    def add(self, start, stop, values):
        self.psi.put(start, stop, values)

    def finish(self, psi=None):
        """``(proxy, Bounds)`` once the pass is done (``sums_v``: its sums in ``v``;
        ``psi``: the constants, when a pass other than :meth:`add` collected them)."""
        grad, hess = self.sums_v
        proxy = TaylorProxy(self.vmap.v(self.theta), grad, hess, self.order)
        psi = self.psi.values if psi is None else psi
        return proxy, Bounds(psi, "whitened", self.order, self.whiten_inv,
                             self.region, path=self.spec.two_param)


def _chunk_constants(spec, order, scale, params, chol, region, J, base, y, start, stop):
    """A chunk's bound constants from its Jacobian ``J`` and predictors ``base`` at the
    centre (pairs with a log scale): :class:`BoundsRider`'s ``chunk``. Rounded up to
    float32 here, in the pass's worker (:meth:`~pymc_subsample.kernels.scalable.bounds.
    UpperBounds.round_up`), not where they are stored."""
    if scale:
        psi = two_param_chunk_psi(spec.family, order, J, base, y, whiten=chol,
                                  radius=region, **params)
    else:
        psi = chunk_psi(spec, order, J, base, whiten=chol, radius=region, y=y, **params)
    return UpperBounds.round_up(psi)


def predictor_bounds(vmap, spec, order, theta_hat, cov, region_arg):
    """Taylor proxy, whitening, region and bound constants in the predictor coordinates
    ``v = v(q)`` (:mod:`pymc_subsample.kernels.variance.predictor`): one pass of a
    :class:`BoundsRider`. Returns ``(proxy, Bounds)``."""
    rider = BoundsRider(vmap, spec, order, theta_hat, cov, region_arg)
    grad, hess, psi = vmap.data_pass(vmap.v(theta_hat), order, rider.chunk)
    rider.sums_v = (grad, hess)
    return rider.finish(psi)


def q_bounds(engine, spec, bounds_arg, form, order, theta_hat, chol, region_arg):
    """The bounds in the step's space ``q``: the GLM's constants (``bounds="auto"``),
    or the user's (a callable ``bounds(order)`` or an array).

    ``spec``: a :class:`~pymc_subsample.engine.glm.GLMSpec`, a list of them (several
    observed variables sharing the rows: :func:`summed_glm_psi`), or None (user bounds).
    """
    specs = None if spec is None else (list(spec) if isinstance(spec, (list, tuple))
                                       else [spec])
    whiten_inv = region = None
    if form == "whitened":
        whiten_inv = sla.solve_triangular(chol, np.eye(chol.shape[0]), lower=True)
        region = region_radius(region_arg, chol.shape[0])
    if isinstance(bounds_arg, str):
        psi = summed_glm_psi(engine, specs, order, theta_hat,
                             whiten=chol if form == "whitened" else None, radius=region)
    elif callable(bounds_arg):
        psi = np.asarray(bounds_arg(order), dtype=np.float64)
    else:
        psi = np.asarray(bounds_arg, dtype=np.float64)
    if psi.shape != (engine.n_rows,):
        raise InvalidParameterError(
            f"ScalableMH: the bound constants must be {engine.n_rows} finite values >= 0, "
            f"got shape {psi.shape}.")
    return Bounds(psi, form, order, whiten_inv, region,
                  path=specs is not None and any(sp.two_param for sp in specs))


def summed_glm_psi(engine, specs, order, theta_hat, *, whiten=None, radius=None):
    """Row constants of several observed variables that share the rows: the sum over
    variables of each one's :func:`~pymc_subsample.engine.glm.glm_psi`.

    Row ``i``'s term is ``U_i = sum_v U_i^(v)`` (the engine sums the observed terms row
    by row), so each (k+1)-th partial derivative of ``U_i``, and each (k+1)-th
    derivative form in whitened coordinates, is bounded by the sum of the variables'
    bounds over the same region: Cornish et al. (2019), "Scalable Metropolis-Hastings
    for exact Bayesian inference with large datasets", eq. 12 holds for the sum. A row
    ``f(eta_i)`` of one linear predictor has ``psi_i = sup |f^(k+1)| ||J_i L||^(k+1)``,
    which also bounds its derivative form ``|D^(k+1) U_i[v, ..., v]| / ||v||^(k+1)``, the
    constant of the path step factor (:func:`~pymc_subsample.kernels.scalable.phi.path_phi`): so
    one-parameter and two-parameter variables may be mixed, under the path factor
    (:class:`Bounds` ``path``). Each variable's pass reads the data once.

    Returns
    -------
    ndarray of float32 (rounded up), shape (N,)
    """
    if len(specs) == 1:
        return glm_psi(engine, specs[0], order, theta_hat, whiten=whiten, radius=radius)
    total = np.zeros(engine.n_rows, dtype=np.float64)
    for spec in specs:
        total += glm_psi(engine, spec, order, theta_hat, whiten=whiten, radius=radius)
    # float64 sums of float32 terms: one step up covers the sum's rounding; the store
    # rounds up again to float32
    out = UpperBounds(engine.n_rows)
    out.put(0, engine.n_rows, np.nextafter(total, np.inf))
    return out.values
