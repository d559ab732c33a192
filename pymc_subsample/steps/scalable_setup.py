"""ScalableMH's set-up passes, as functions of the engine and the step's arguments.

Before the draws, :class:`~pymc_subsample.steps.scalable.ScalableMH` (Cornish, Vanetti,
Bouchard-Cote, Deligiannidis & Doucet 2019, "Scalable Metropolis-Hastings for exact
Bayesian inference with large datasets") checks its arguments and the rows, recognises
the GLM of each observed variable (``bounds="auto"``), locates the centre ``theta_hat``
and builds the Taylor control variates (Sec. 3.1) and the bound constants (eq. 12)
there. Here:

* the arguments' checks (:func:`check_args`);
* the rows' check handed to the first pass over all rows (:func:`check_rows`,
  :func:`hand_row_check`);
* the recognition of ``bounds="auto"`` (:func:`recognise_glms`, :func:`summed_specs`);
* the centre, by a mode search on the predictor coordinates' NumPy row terms when it can,
  with the bound constants riding on its last pass (:func:`locate_center`);
* the control variates and the bounds at the centre (:func:`control_and_bounds`), in the
  coordinates :func:`~pymc_subsample.steps.scalable_bounds.bound_coordinates` picks.
"""

from __future__ import annotations

import dataclasses

from ..center import inverse_pd
from ..engine.glm import detect_glms
from ..engine.predictor import affine_likelihood
from ..engine.softmax import bounds_in_q, detect_specs
from ..kernels._validation import InvalidParameterError, check_choice, check_int, check_positive
from ..kernels.families import FAMILIES_DOC
from ..kernels.variance.control_variates import PredictorTaylorControlVariate, TaylorControlVariate
from . import setup
from .scalable_bounds import (
    BoundsRider, bound_coordinates, check_bound_args, predictor_bounds, q_bounds)

__all__ = ["check_args", "check_rows", "hand_row_check", "recognise_glms", "summed_specs",
           "locate_center", "control_and_bounds"]


def check_args(order, truncation, bounds, bound_form, region, data_test, rho, proposal,
               kwargs: dict) -> tuple:
    """ScalableMH's own arguments, checked (:class:`InvalidParameterError` otherwise)
    before any set-up, and their defaults resolved: ``data_test`` by the order,
    ``rho`` into the proposal's arguments (popped from ``kwargs``, the rest of the
    step's keywords).

    Returns
    -------
    tuple
        ``(order, truncation, bound_form, region, data_test, proposal_kwargs)``.
    """
    order = check_int("order", order, 1, maximum=2, strict=True,
                      what="1 or 2 (the Taylor order k)")
    if truncation is not None:
        truncation = check_positive("truncation", truncation, finite=False, strict=True)
    if "mode" in kwargs:
        raise InvalidParameterError(
            "ScalableMH takes its centre theta_hat as center= (it was mode=). For "
            "PyTensor's compile mode pass compile_kwargs={'mode': ...}, as with PyMC's "
            "own step methods."
        )
    bound_form, region = check_bound_args(bounds, bound_form, region)
    if data_test is None:
        data_test = "poisson" if order == 1 else "factorised"
    data_test = check_choice("data_test", data_test, ("factorised", "poisson"),
                             what="'factorised' (SMH) or 'poisson' (MH-SS)")
    proposal_kwargs = dict(kwargs.pop("proposal_kwargs", None) or {})
    if rho is not None:
        name = "pcn" if proposal is None and order == 2 else proposal
        if not (isinstance(name, str) and name.lower() == "pcn"):
            raise InvalidParameterError("rho applies to proposal='pcn' only.")
        proposal_kwargs.setdefault("rho", rho)
    return order, truncation, bound_form, region, data_test, proposal_kwargs


def check_rows(engine, bounds_arg, bound_form):
    """The engine's data checks (:meth:`~pymc_subsample.engine.likelihood.
    LikelihoodEngine.validate`), before anything else reads the data.

    On an ordinary GLM whose family declares its support, the pass over all rows runs on
    the family's NumPy row terms, in parallel, instead of the model's compiled graph,
    which holds Python's lock (0.8 s of a 5 s set-up at N = 10^7); the probe rows are
    still compared with the compiled graph.

    Returns
    -------
    row_check : DeferredRowCheck or None
        The scan of every row, left to ride on the mode search's first pass over all rows
        (None: done here).
    found : tuple or None
        ``(spec, affine_map, likelihood)`` of the GLM recognised for it, for the mode
        search to reuse (None without a deferred check).
    """
    terms, found = None, None
    if isinstance(bounds_arg, str) and bound_form == "whitened":
        try:
            specs = detect_glms(engine.model)
            q0 = engine.initial_q()
            if len(specs) == 1:
                found = (specs[0], *affine_likelihood(engine, specs[0], q0))
        except ValueError:  # not recognised: the set-up says why, after the checks
            found = None
        if found is not None and found[1] is not None:
            terms = found[1].check_terms(found[1].v(q0))
    row_check = engine.validate(terms=terms, defer=terms is not None)
    return row_check, (found if row_check is not None else None)


def hand_row_check(check, lik=None):
    """Hand the deferred row ``check`` to ``lik``'s next pass over all rows, or (``lik``
    None or without the hook, or a check that no pass took) run it now. Returns the check
    still pending (handed to a pass that may not run: to be handed again), or None."""
    if check is None or check.done:
        return None
    if lik is not None and hasattr(lik, "row_check"):
        lik.row_check = check
        return check  # run by the next call if no pass took it
    check.run()
    return None


def recognise_glms(engine, bounds):
    """Validate ``bounds=`` early; for ``"auto"`` recognise the GLM of every observed
    variable (a list of specs, or raise); None for user bounds."""
    if isinstance(bounds, str):
        if bounds != "auto":
            raise InvalidParameterError(
                f"ScalableMH: bounds must be 'auto', a callable or an array, got "
                f"{bounds[:40]!r}; see {FAMILIES_DOC}.")
        return detect_specs(engine.model)
    if bounds is None:
        raise InvalidParameterError("ScalableMH needs bound constants: bounds='auto', a "
                                    f"callable or an array; see {FAMILIES_DOC}.")
    return None


def summed_specs(specs) -> bool:
    """Whether the recognised likelihood's bounds are sums over several terms taken in
    ``q`` (several observed variables sharing the rows, or a likelihood bounded in ``q``
    only): no predictor coordinates then."""
    return specs is not None and (len(specs) > 1 or bounds_in_q(specs))


def _same_spec(a, b) -> bool:
    """Whether two recognitions of the same model found the same GLM (the observed
    variable and its family; the graphs are the model's, so these determine the rest)."""
    return (type(a) is type(b) and getattr(a, "observed", None) == getattr(b, "observed", 0)
            and str(getattr(a, "family", None)) == str(getattr(b, "family", 0))
            and getattr(a, "two_param", None) == getattr(b, "two_param", 0))


def _mode_search(engine, spec, found, whitened: bool, order: int, region):
    """What the mode search runs on: ``(affine_map, lik, rider)``.

    For an ordinary GLM (``spec``) with whitened bounds, the mode search's passes use the
    predictor coordinates' NumPy row terms (``lik``, reused from ``found`` when
    :func:`check_rows` recognised the same GLM) instead of compiling the engine's
    Hessian graph, and the bound constants ride on its last pass (``rider``, a
    :class:`~pymc_subsample.steps.scalable_bounds.BoundsRider` factory at the pass's
    point and Laplace covariance). Otherwise ``(None, engine, None)``.
    """
    affine_map, lik, rider = None, engine, None
    if spec is not None and whitened:
        if found is not None and _same_spec(found[0], spec):
            affine_map, lik = found[1:]
        else:
            affine_map, lik = affine_likelihood(engine, spec, engine.initial_q())
    if affine_map is not None:

        def rider(q, sums):
            cov = inverse_pd(-(sums[1] + sums[3]))
            return BoundsRider(affine_map, spec, order, q, cov, region)

    return affine_map, lik, rider


def locate_center(engine, center_arg, spec, found, row_check, *, whitened: bool,
                  order: int, region) -> tuple:
    """The centre of the control variates and bounds (``center_arg``, or the posterior
    mode by :func:`pymc_subsample.steps.setup.locate_center`, to
    ``SCALABLE_CENTER_TOL``) and what its search leaves for the bounds.

    The deferred ``row_check`` (:func:`check_rows`) rides on the search's first pass
    over all rows, or runs here: it is done on return.

    Returns
    -------
    center : Center
        Without its rider (which holds a lock, in the way of pickling for spawned
        workers, and the pass's temporaries).
    warning : str or None
        The mode search's non-convergence warning.
    affine_map : PredictorMap or None
        The ordinary GLM's predictor coordinates the search ran on.
    rider_done : BoundsRider or None
        The bound constants of the search's last pass.
    """
    affine_map, lik, rider = _mode_search(engine, spec, found, whitened, order, region)
    row_check = hand_row_check(row_check, lik if affine_map is not None else None)
    center, warning = setup.locate_center(
        lik, engine, center_arg, "the centre of the control variates and bounds",
        "the bounds hold but may be loose, so the test may read many rows. Pass center= "
        "(e.g. from pm.find_MAP).", rider=rider, tol=setup.SCALABLE_CENTER_TOL)
    hand_row_check(row_check)  # no pass over all rows took it (e.g. center= given)
    return dataclasses.replace(center, rider=None), warning, affine_map, center.rider


def control_and_bounds(engine, specs, spec, center, cov, chol, affine_map, rider_done, *,
                       order: int, bounds_arg, bound_form: str, region):
    """The control variates and the bounds at the centre: ``(control, bounds, curved)``.

    In the predictor coordinates when :func:`~pymc_subsample.steps.scalable_bounds.
    bound_coordinates` puts them there (the constants the mode search's rider computed,
    ``rider_done``, when it ran on the same map), else in ``q`` (also with several
    observed variables, :func:`summed_specs`: their predictor coordinates are per
    variable, while the engine's row terms sum the variables). ``curved``: the predictor
    coordinates are not affine in ``q`` at the centre (the proposal then defaults to
    surrogate HMC).
    """
    several = summed_specs(specs)
    theta_hat = center.theta
    vmap = None if several else bound_coordinates(engine, spec, theta_hat, affine_map,
                                                  bound_form == "whitened")
    if vmap is not None:
        if vmap is affine_map and rider_done is not None:
            proxy, bounds = rider_done.finish()
        else:
            proxy, bounds = predictor_bounds(vmap, spec, order, theta_hat, cov, region)
        return (PredictorTaylorControlVariate(vmap, proxy), bounds,
                not vmap.v_is_affine(theta_hat))
    bounds = q_bounds(engine, specs if several else spec, bounds_arg, bound_form, order,
                      theta_hat, chol, region)
    return TaylorControlVariate(engine, center.proxy(order)), bounds, False
