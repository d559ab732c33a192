"""The interface of a GLM family: :class:`GLMFamily`, the base class every family
subclasses, with every attribute the package reads declared and documented.

Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import numpy as np

from ..scalable.interval import Interval

__all__ = ["FamilyCapabilityError", "GLMFamily"]


class FamilyCapabilityError(ValueError):
    """A numeric part asked of a GLM family that does not provide it (a global bound of
    a Poisson-log family, for instance): its capability flags say what it provides."""


class GLMFamily:
    """One GLM family: how to recognise it in a model and the numbers its bounds need.

    Subclass it, set the attributes and override the methods the family can provide,
    then :func:`register` it (an instance, or the class: it is instantiated). Rows depend
    on the parameters through the linear predictor ``eta`` (one-parameter rows) or through
    ``eta`` and ``s``, the log of the distribution parameter :attr:`scale_param`
    (two-parameter rows, :attr:`two_param`).

    Attributes
    ----------
    name : str
        The registry key (``GLMSpec.family`` in :mod:`pymc_subsample.engine.glm`).
    aliases : tuple of str
        Other names :func:`get_family` accepts (case-insensitive, ``-`` read as ``_``).
    label : str
        The distribution in messages (``"Bernoulli"``).
    description : str
        How a model writes it, for :func:`supported_text`.
    distribution : str or None
        The class name of PyMC's ``RandomVariable`` op (``"BernoulliRV"``); None: the
        family is never recognised in a model (bounds functions only).
    dist_params : tuple of str
        Names of that op's distribution parameters, in order (``("mu", "sigma")``).
    structure : str
        The kind of row structure the engine's reader finds, the name of a reader in
        :func:`pymc_subsample.engine.glm.structure_readers`: ``"glm"`` (the default: one
        linear predictor ``eta``, read by :attr:`link` and :attr:`param_reader`, and
        the coordinates above), ``"softmax"`` (``K`` class predictors, a multinomial
        logit) or ``"ordered"`` (a predictor and cutpoints). A family of another
        structure gives its bounds by :meth:`row_constants`.
    link : str
        Name of the link reader in :data:`pymc_subsample.engine.glm.LINKS` that reads
        ``eta`` from the parameters: ``"identity"``, ``"log"`` (the parameter is
        ``exp(eta)``), ``"logit"`` (``sigmoid(eta)``), ``"probit"`` (``Phi(eta)``) read the
        parameter :attr:`link_param`; ``"log_mean_shape_scale"`` and
        ``"log_mean_negbinomial"`` the log mean of a Gamma and a NegativeBinomial. For
        another :attr:`structure`, the link its reader checks (``"softmax"``; an ordered
        row's cdf, ``"logit"`` or ``"probit"``).
    link_param : str or None
        The parameter the one-parameter readers read.
    link_hint : str
        The link in the message shown when the reader does not match.
    fixed_params : tuple of str
        Distribution parameters that must be fixed (depend on no free variable of the
        model) for the family to match; their values are the ``params`` handed to the
        numeric methods, under these names.
    free_params : tuple of str
        Distribution parameters that must depend on a free variable for the family to
        match. With :attr:`fixed_params` this is the family's whole selector
        (:attr:`requirements`): a parameter in neither may be either. Recognition
        (:func:`pymc_subsample.engine.glm.detect_glm`) takes the one family whose
        requirements hold and whose link and parameter readers match; two families that
        both match a model are an error of the registry, never resolved by order.
    scale_param : str or None
        The parameter sampled (or fixed) on the log scale: ``s = log(param)`` (or on the
        scale :attr:`scale_transform` names).
    scale_transform : str
        How the second row coordinate reads :attr:`scale_param`: ``"log"`` (default,
        ``s = log(param)``) or ``"logit"`` (``s = log(param / (1 - param))``, a mixing
        probability).
    param_reader : str or None
        Name of a reader in :data:`pymc_subsample.engine.glm.PARAM_READERS` that derives
        :attr:`derived_params` from the op's parameters (a zero-inflated mixture's ``psi``
        and its count component's parameters); None: the op's parameters only.
    derived_params : tuple of str
        The names that reader adds (they may serve as ``link_param``, ``scale_param``,
        :attr:`fixed_params`, :attr:`free_params` and :attr:`extra_coords`).
    component : str or None
        For :attr:`param_reader`: the class name of the mixture component's op it reads
        (``"PoissonRV"``).
    extra_coords : tuple of str
        Parameters read as further row coordinates after ``eta`` and the
        :attr:`scale_param` coordinate, each as ``log(param - c)`` with ``c >= 0`` a fixed
        shift found by recognition (passed to the numeric methods as ``<param>_shift``):
        a sampled Student-t ``nu`` with a sampled scale, a zero-inflated
        NegativeBinomial's ``alpha`` with a sampled ``psi``. Default none: rows of one
        coordinate, or two with a :attr:`scale_param` (:attr:`n_coords`).
    needs_y : bool
        :meth:`local_sup` reads the rows' responses.
    unbounded : str
        Why there is no global bound (messages), when :meth:`sup_derivative` is absent.
    support : {"binary", "count", "real"} or None
        The responses the distribution gives positive mass or density: ``{0, 1}``, the
        non-negative integers, the real line; None: not declared (the data checks then
        run the model's compiled log density, :meth:`in_support`).
    param_labels : dict
        Names of parameters in messages.
    structure_global : bool
        For a family of another :attr:`structure`: its :meth:`row_constants` hold over
        the whole space too (``radius=None``, as a multinomial logit's), not only over a
        region.
    """

    name: str = ""
    aliases: tuple = ()
    label: str = ""
    description: str = ""
    distribution: str | None = None
    dist_params: tuple = ()
    structure: str = "glm"
    link: str = "identity"
    link_param: str | None = None
    link_hint: str = ""
    fixed_params: tuple = ()
    scale_param: str | None = None
    scale_transform: str = "log"
    param_reader: str | None = None
    derived_params: tuple = ()
    component: str | None = None
    free_params: tuple = ()
    extra_coords: tuple = ()
    needs_y: bool = False
    unbounded: str = "its derivatives are unbounded over the whole line"
    support: str | None = None
    param_labels = {"nu": "degrees of freedom nu", "sigma": "scale sigma"}
    structure_global: bool = False

    # ----------------------------------------------------------------- capabilities
    def _provides(self, method: str) -> bool:
        return getattr(type(self), method) is not getattr(GLMFamily, method)

    @property
    def two_param(self) -> bool:
        """Rows depend on ``eta`` and a log scale or log shape (the path bound)."""
        return self.scale_param is not None

    @property
    def global_bound(self) -> bool:
        """Derivatives bounded over the whole line (:meth:`sup_derivative`)."""
        return not self.two_param and self._provides("sup_derivative")

    @property
    def interval_bound(self) -> bool:
        """One-parameter rows with suprema over an interval of ``eta`` (:meth:`local_sup`)."""
        return not self.two_param and self._provides("local_sup")

    @property
    def n_coords(self) -> int:
        """The number of row coordinates: ``eta``, the :attr:`scale_param` coordinate (if
        any) and the :attr:`extra_coords`."""
        return 1 + self.two_param + len(self.extra_coords)

    @property
    def requirements(self) -> dict:
        """``{param: "fixed" or "free"}``: what must hold of the model's distribution
        parameters for the family to match (:attr:`fixed_params`, :attr:`free_params`)."""
        return {**{p: "fixed" for p in self.fixed_params},
                **{p: "free" for p in self.free_params}}

    def unmet(self, is_fixed) -> list:
        """The requirements a model does not meet, in the order of :attr:`requirements`:
        ``(param, "fixed" or "free")`` for each parameter required fixed that depends on
        a free variable, or required free that is fixed. ``is_fixed(param) -> bool`` says
        whether the model's parameter ``param`` depends on no free variable."""
        return [(p, need) for p, need in self.requirements.items()
                if is_fixed(p) != (need == "fixed")]

    @property
    def box_bound(self) -> bool:
        """Rows of two or more coordinates with partials over a box (:meth:`box_partials`
        for ``(eta, s)``, :meth:`box_partials_d` for more)."""
        return self.two_param and (self._provides("box_partials")
                                   or self._provides("box_partials_d"))

    @property
    def region_bound(self) -> bool:
        """Bounds over a region: :attr:`interval_bound` or :attr:`box_bound`."""
        return self.interval_bound or self.box_bound

    @property
    def structure_bound(self) -> bool:
        """Rows of another :attr:`structure` than ``"glm"``, whose constants the family
        computes from what that structure's reader finds (:meth:`row_constants`)."""
        return self.structure != "glm" and self._provides("row_constants")

    @property
    def predictor_coordinates(self) -> bool:
        """Row terms in NumPy for the predictor coordinates (:meth:`row_loglik`, or
        :meth:`standard_logpdf` for a location-scale row with a sampled scale)."""
        return self._provides("standard_logpdf" if self.two_param else "row_loglik")

    def _lacks(self, capability: str, what: str) -> FamilyCapabilityError:
        """The error for a numeric part this family does not provide: the methods below
        are optional, and a family's capabilities are the ones it overrides."""
        return FamilyCapabilityError(
            f"GLM family {self.name!r}: {what} (its {capability} is False; check it "
            "before asking for this part, or override the method to provide it).")

    def in_support(self, y) -> np.ndarray | None:
        """Where the responses ``y`` lie in the distribution's :attr:`support` (a boolean
        array), or None when the family declares none."""
        y = np.asarray(y)
        if self.support == "binary":
            return (y == 0) | (y == 1)
        if self.support == "count":
            return (y >= 0) & (y == np.floor(y))
        if self.support == "real":
            return np.isfinite(y)
        return None

    def param_label(self, param: str) -> str:
        """The name of a distribution parameter in messages."""
        return self.param_labels.get(param, param)

    def __repr__(self) -> str:
        return f"<GLMFamily {self.name!r}>"

    # ---------------------------------------------------------------- numeric parts
    def sup_derivative(self, m: int, **params) -> float:
        """``sup_eta |f^(m)(eta)|`` of ``U_i = f(eta_i)`` over the whole line, for every
        response (Cornish et al. 2019, eq. 12), ``m`` in {2, 3}; ``params`` are the
        :attr:`fixed_params`, checked by the caller."""
        raise self._lacks("global_bound", f"no global derivative bound ({self.unbounded})")

    def global_sup_args(self, params: dict):
        """``(scale, sup_params)`` with which
        :func:`pymc_subsample.kernels.scalable.bounds.glm_bound_constants` computes the global
        constants of rows with fixed parameters ``params``: a per-row factor of the
        linear predictor and the parameters of :meth:`sup_derivative` (by default none
        and ``params``)."""
        return None, dict(params)

    def local_sup(self, m: int, lo, hi, *, y=None, **params) -> np.ndarray:
        """``sup |f^(m)(eta)|`` over ``eta in [lo_i, hi_i]`` per row (float64 arrays);
        ``y`` the responses (when :attr:`needs_y`), ``params`` the fixed parameters."""
        raise self._lacks("interval_bound", "no bound over an interval of eta")

    def box_partials(self, m: int, E: Interval, S: Interval, y, **params) -> list:
        """Enclosures (:class:`~pymc_subsample.kernels.scalable.interval.Interval`) of the m-th
        partials ``d^m l / d eta^j d s^(m-j)``, in the order ``j = 0..m``, of the row log
        density over the box ``E x S`` (two-parameter rows); ``y`` the responses."""
        raise self._lacks("box_bound", "no partials over a box")

    def box_partials_d(self, m: int, boxes, y, **params) -> list:
        """Enclosures of the m-th partials of the row log density over the box
        ``boxes[0] x ... x boxes[d-1]`` (one :class:`~pymc_subsample.kernels.scalable.interval.
        Interval` per row coordinate, ``d =`` :attr:`n_coords`), in the order of
        :func:`~pymc_subsample.kernels.families.partials.multi_indices` ``(m, d)``. By
        default, for two coordinates, :meth:`box_partials`; families with
        :attr:`extra_coords` override it."""
        if self.n_coords == 2 and self._provides("box_partials"):
            E, S = boxes
            return self.box_partials(m, E, S, y, **params)
        raise self._lacks("box_bound", f"no partials over a box of {len(boxes)} coordinates")

    def row_loglik(self, eta, y, params: dict, derivatives: int = 2) -> tuple:
        """``(l, l', l'')`` in ``eta`` (float64 arrays), ``l = log p(y | eta)`` up to a
        constant per row; may stop early when ``derivatives`` is smaller."""
        raise self._lacks("predictor_coordinates", "no row log-likelihood in NumPy")

    def standard_logpdf(self, t, params: dict) -> tuple:
        """``(H, H', H'')`` at ``t`` for a location-scale row
        ``l = -s + H((y - eta) e^-s)``."""
        raise self._lacks("predictor_coordinates", "no standard log density")

    def row_constants(self, order: int, *inputs, **options) -> np.ndarray:
        """Per-row constants of rows of another :attr:`structure` (Cornish et al. 2019,
        eq. 12, or its whitened and region forms), from the ``inputs`` that structure's
        reader computes for a chunk of rows (their Jacobians and values at the centre);
        ``order`` the Taylor order ``k``."""
        raise self._lacks("structure_bound", "no row constants of another structure")
