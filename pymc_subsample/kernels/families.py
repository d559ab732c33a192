"""The GLM families ScalableMH's bounds know: one class per family, and their registry.

ScalableMH (Cornish et al. 2019, "Scalable Metropolis-Hastings for exact Bayesian
inference with large datasets") needs, for every data row, a constant bounding the
(k+1)-th derivatives of ``U_i = -log p(y_i | theta)``. For a row that depends on the
parameters through a linear predictor ``eta_i`` (and, for some families, a log scale or
log shape ``s_i``), everything those bounds need from the likelihood is here, one class
per family (a :class:`GLMFamily`):

* what the family is in a PyMC model, in plain strings (the name of the distribution's
  ``RandomVariable`` op, its parameters, the link reader of
  :mod:`pymc_subsample.engine.glm` that finds ``eta``, which parameters must be fixed,
  which one is sampled on the log scale), read by :func:`pymc_subsample.engine.glm.
  detect_glm`, and the text of :func:`supported_text`;
* the supremum of ``|f^(m)|`` over the whole line (:meth:`GLMFamily.sup_derivative`,
  their eq. 12) and over an interval of ``eta`` (:meth:`GLMFamily.local_sup`, the region
  bounds of :mod:`pymc_subsample.kernels.region`);
* for rows with two parameters, the closed-form m-th partials in ``(eta, s)`` evaluated on
  a box (:meth:`GLMFamily.box_partials`, interval arithmetic of
  :mod:`pymc_subsample.kernels.interval`);
* the row log-likelihood and its derivatives in ``eta`` (:meth:`GLMFamily.row_loglik`),
  or the standard log density of a location-scale row (:meth:`GLMFamily.standard_logpdf`),
  for the control variates in predictor coordinates (:mod:`pymc_subsample.kernels.
  predictor`).

A family provides the methods it can; its capabilities (:attr:`GLMFamily.global_bound`,
:attr:`GLMFamily.region_bound`, :attr:`GLMFamily.predictor_coordinates`) follow from which
it overrides. :func:`register` adds one (as a class decorator too), :func:`get_family`
finds one by name or alias. :mod:`~pymc_subsample.kernels.bounds`,
:mod:`~pymc_subsample.kernels.region` and :mod:`~pymc_subsample.kernels.predictor` keep
their functions taking a family name and dispatch here.

Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import expit, log_expit, log_ndtr

from ._validation import check_finite_positive
from .interval import Interval

__all__ = [
    "FAMILIES",
    "FamilyCapabilityError",
    "GLMFamily",
    "PROBIT_PEAK3",
    "family_names",
    "find_family",
    "get_family",
    "probit_lambda",
    "register",
    "require",
    "supported_text",
    "unregister",
]

#: registered families by name, in registration order (recognition tries them in it)
FAMILIES: dict = {}
#: lower-case aliases -> name
_ALIASES: dict = {}

#: sup_s |s (1 - s)(1 - 2 s)| over s in (0, 1), attained at s = 1/2 -+ 1/(2 sqrt 3).
_LOGIT_SUP3 = 1.0 / (6.0 * math.sqrt(3.0))
#: sup_x |x (x^2 - 3)| / (1 + x^2)^3, attained at x = sqrt(2) - 1.
_T_SUP3 = (3.0 + 2.0 * math.sqrt(2.0)) / 8.0
#: the peak of g''' for g = log Phi (the standard normal log cdf), a root of g'''' found
#: by Brent's method: g''' > 0 rises on (-inf, t*] and falls on [t*, inf)
PROBIT_PEAK3 = 1.0023693410546552
#: sup_t |g'''(t)| = g'''(PROBIT_PEAK3) = 0.295718819193..., with a 1e-6 relative margin
_PROBIT_SUP3 = 0.29571881919312326 * (1.0 + 1e-6)
#: where |s (1 - s)(1 - 2 s)| peaks: s = 1/2 + 1/(2 sqrt 3), eta = log(2 + sqrt 3)
_LOGIT_PEAK3 = math.log(2.0 + math.sqrt(3.0))


def probit_lambda(t):
    """The inverse Mills ratio ``lambda(t) = phi(t) / Phi(t)`` (``g' `` for ``g = log Phi``),
    from ``log_ndtr`` so that it stays finite far in the left tail."""
    t = np.asarray(t, dtype=np.float64)
    return np.exp(-0.5 * t * t - 0.5 * math.log(2.0 * math.pi) - log_ndtr(t))


def _sup(g, lo, hi, critical):
    """``max |g|`` over ``[lo, hi]`` (per row) from the ends and the interior critical
    points (``critical``: scalars or per-row arrays)."""
    val = np.maximum(np.abs(g(lo)), np.abs(g(hi)))
    for c in critical:
        inside = (lo <= c) & (c <= hi)
        if np.any(inside):
            # a scalar critical point: |g(c)| once, not once per row
            gc = np.abs(g(np.float64(c) if np.ndim(c) == 0 else c))
            val = np.where(inside, np.maximum(val, gc), val)
    return val


def _probit_derivatives(t):
    """``(|g''|, g''')`` of ``g = log Phi`` at ``t`` (``lambda = phi / Phi``)."""
    t = np.asarray(t, dtype=np.float64)
    lam = probit_lambda(t)
    return lam * (t + lam), lam * (t + lam) * (t + 2.0 * lam) - lam


def _positive(name: str, value, family: str) -> float:
    return check_finite_positive(name, value, label=f"{family}: parameter {name}")


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
    link : str
        Name of the link reader in :data:`pymc_subsample.engine.glm.LINKS` that reads
        ``eta`` from the parameters: ``"identity"``, ``"log"`` (the parameter is
        ``exp(eta)``), ``"logit"`` (``sigmoid(eta)``), ``"probit"`` (``Phi(eta)``) read the
        parameter :attr:`link_param`; ``"log_mean_shape_scale"`` and
        ``"log_mean_negbinomial"`` the log mean of a Gamma and a NegativeBinomial.
    link_param : str or None
        The parameter the one-parameter readers read.
    link_hint : str
        The link in the message shown when the reader does not match.
    fixed_params : tuple of str
        Distribution parameters that must be fixed; their values are the ``params``
        handed to the numeric methods, under these names.
    scale_param : str or None
        The parameter sampled (or fixed) on the log scale: ``s = log(param)``.
    selector : (str, bool) or None
        ``(param, fixed)``: the family applies only when ``param`` is fixed (True) or
        depends on a free variable (False); two families of one distribution split so.
    needs_y : bool
        :meth:`local_sup` reads the rows' responses.
    unbounded : str
        Why there is no global bound (messages), when :meth:`sup_derivative` is absent.
    param_labels : dict
        Names of parameters in messages.
    """

    name: str = ""
    aliases: tuple = ()
    label: str = ""
    description: str = ""
    distribution: str | None = None
    dist_params: tuple = ()
    link: str = "identity"
    link_param: str | None = None
    link_hint: str = ""
    fixed_params: tuple = ()
    scale_param: str | None = None
    selector: tuple | None = None
    needs_y: bool = False
    unbounded: str = "its derivatives are unbounded over the whole line"
    param_labels = {"nu": "degrees of freedom nu", "sigma": "scale sigma"}

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
    def box_bound(self) -> bool:
        """Two-parameter rows with partials over a box of ``(eta, s)`` (:meth:`box_partials`)."""
        return self.two_param and self._provides("box_partials")

    @property
    def region_bound(self) -> bool:
        """Bounds over a region: :attr:`interval_bound` or :attr:`box_bound`."""
        return self.interval_bound or self.box_bound

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
        :func:`pymc_subsample.kernels.bounds.glm_bound_constants` computes the global
        constants of rows with fixed parameters ``params``: a per-row factor of the
        linear predictor and the parameters of :meth:`sup_derivative` (by default none
        and ``params``)."""
        return None, dict(params)

    def local_sup(self, m: int, lo, hi, *, y=None, **params) -> np.ndarray:
        """``sup |f^(m)(eta)|`` over ``eta in [lo_i, hi_i]`` per row (float64 arrays);
        ``y`` the responses (when :attr:`needs_y`), ``params`` the fixed parameters."""
        raise self._lacks("interval_bound", "no bound over an interval of eta")

    def box_partials(self, m: int, E: Interval, S: Interval, y, **params) -> list:
        """Enclosures (:class:`~pymc_subsample.kernels.interval.Interval`) of the m-th
        partials ``d^m l / d eta^j d s^(m-j)``, in the order ``j = 0..m``, of the row log
        density over the box ``E x S`` (two-parameter rows); ``y`` the responses."""
        raise self._lacks("box_bound", "no partials over a box")

    def row_loglik(self, eta, y, params: dict, derivatives: int = 2) -> tuple:
        """``(l, l', l'')`` in ``eta`` (float64 arrays), ``l = log p(y | eta)`` up to a
        constant per row; may stop early when ``derivatives`` is smaller."""
        raise self._lacks("predictor_coordinates", "no row log-likelihood in NumPy")

    def standard_logpdf(self, t, params: dict) -> tuple:
        """``(H, H', H'')`` at ``t`` for a location-scale row
        ``l = -s + H((y - eta) e^-s)``."""
        raise self._lacks("predictor_coordinates", "no standard log density")


# -------------------------------------------------------------------- registry
def register(family, *, replace: bool = False):
    """Add ``family`` (a :class:`GLMFamily` instance or subclass) to :data:`FAMILIES`.

    Returns its argument, so that it serves as a class decorator. Raises ValueError when
    the name or an alias is taken (unless ``replace``) or the family provides no bound.
    """
    fam = family() if isinstance(family, type) else family
    if not isinstance(fam, GLMFamily):
        raise TypeError(f"register needs a GLMFamily, got {type(fam).__name__}.")
    if not fam.name or not isinstance(fam.name, str):
        raise ValueError("a GLM family needs a name.")
    if not (fam.global_bound or fam.region_bound):
        raise ValueError(
            f"GLM family {fam.name!r} provides no bound: override sup_derivative or "
            "local_sup (one-parameter rows), or box_partials (with scale_param).")
    named = (fam.link_param, fam.scale_param, fam.selector and fam.selector[0], *fam.fixed_params)
    unknown = [p for p in named if p and p not in fam.dist_params]
    if fam.distribution is not None and unknown:
        raise ValueError(f"GLM family {fam.name!r}: parameters {unknown} are not among its "
                         f"dist_params {fam.dist_params}.")
    keys = [fam.name] + [_key(a) for a in fam.aliases]
    owners = {**_ALIASES, **{n: n for n in FAMILIES}}
    taken = [k for k in keys if owners.get(k, fam.name) != fam.name]
    if fam.name in FAMILIES and not replace:
        taken.insert(0, fam.name)
    if taken:
        raise ValueError(f"GLM family names already registered: {taken} (replace=True "
                         "replaces a family of the same name).")
    for a in [a for a, n in _ALIASES.items() if n == fam.name]:  # replaced in place
        del _ALIASES[a]
    FAMILIES[fam.name] = fam
    for a in keys[1:]:
        _ALIASES[a] = fam.name
    return family


def unregister(name: str) -> GLMFamily:
    """Remove the family ``name`` (and its aliases) from the registry and return it."""
    fam = FAMILIES.pop(name)
    for a in [a for a, n in _ALIASES.items() if n == name]:
        del _ALIASES[a]
    return fam


def _key(name) -> str:
    return str(name).lower().replace("-", "_")


def find_family(family) -> GLMFamily | None:
    """The family ``family`` (a :class:`GLMFamily`, or a registered name or alias,
    case-insensitive), or None."""
    if isinstance(family, GLMFamily):
        return family
    if family in FAMILIES:
        return FAMILIES[family]
    key = _key(family)
    key = _ALIASES.get(key, key)
    return FAMILIES.get(key)


def get_family(family) -> GLMFamily:
    """:func:`find_family`, or a ValueError naming the registered families."""
    fam = find_family(family)
    if fam is None:
        raise ValueError(
            f"Unknown GLM family {family!r}; registered: {', '.join(FAMILIES)}. A new one is "
            "a GLMFamily subclass added with pymc_subsample.kernels.families.register.")
    return fam


def _has(family: GLMFamily, capability) -> bool:
    return bool(capability(family) if callable(capability) else getattr(family, capability))


def family_names(capability=None) -> tuple:
    """Names of the registered families, only those with ``capability`` if given: an
    attribute name such as ``"global_bound"``, ``"interval_bound"``, ``"two_param"``,
    or a predicate of the family."""
    return tuple(n for n, f in FAMILIES.items() if capability is None or _has(f, capability))


def require(family, capability, message: str) -> GLMFamily:
    """The family ``family`` (:func:`find_family`) if it has ``capability``
    (:func:`family_names`), else a ValueError with ``message`` formatted with
    ``family`` and ``supported`` (the names of the families that have it)."""
    fam = find_family(family)
    if fam is None or not _has(fam, capability):
        raise ValueError(message.format(family=family, supported=family_names(capability)))
    return fam


_INTRO = (
    "bounds='auto' recognises one observed variable whose row terms depend on the step's "
    "variables only through a linear predictor eta_i = x_i . beta (+ intercept) and, for "
    "some families, a scale or shape parameter sampled on the log scale. Registered "
    "families: "
)
_TAIL = (
    "For any other model pass bounds=callable: bounds(order) -> array of N per-row "
    "constants psi_i >= sup |(order+1)-th partial derivatives of -log p(x_i | q)| over the "
    "step's unconstrained space (Cornish et al. 2019, eq. 12), or that array itself; or "
    "register a GLM family (pymc_subsample.kernels.families.register)."
)


def supported_text() -> str:
    """What ``bounds='auto'`` recognises, generated from the registry (the text of
    :data:`pymc_subsample.engine.glm.SUPPORTED_TEXT`)."""
    entries = []
    for fam in FAMILIES.values():
        if fam.distribution is None:
            continue
        entries.append(f"{fam.name}: {fam.description}"
                       + ("" if fam.global_bound else " [region]"))
    coords = [f.name for f in FAMILIES.values() if f.distribution and f.predictor_coordinates]
    return (
        _INTRO + "; ".join(entries) + ". Families marked [region] have derivatives "
        "unbounded over the whole space and need region bounds (region='auto', the default, "
        "with bound_form='whitened'). "
        + (f"For {', '.join(coords)} eta may also be affine in data-free parameter "
           "expressions only, as in a non-centred hierarchical model, mu + tau * z[g] + "
           "X @ beta (and a sampled scale may be sigma or sigma[g]). " if coords else "")
        + _TAIL
    )


# ------------------------------------------------------------- one-parameter rows
class BernoulliLogit(GLMFamily):
    """Bernoulli with a logit link: ``f(eta) = log(1 + exp(eta)) - y eta`` (``y`` in
    {0, 1}; with ``y`` in {-1, 1}, ``log(1 + exp(-y eta))``, the same derivatives up to
    sign). With ``s = sigmoid(eta)``: ``|f''| = s (1 - s)``, ``|f'''| = |s (1 - s)(1 - 2 s)|``
    (the linear term drops out). ``s (1 - s) <= 1/4`` (at ``s = 1/2``); for
    ``g(s) = s (1 - s)(1 - 2 s)``, ``g'(s) = 6 s^2 - 6 s + 1 = 0`` at
    ``s = 1/2 -+ 1/(2 sqrt 3)``, where ``s (1 - s) = 1/6`` and ``|1 - 2 s| = 1/sqrt 3``:

        sup |f''| = 1/4,    sup |f'''| = 1 / (6 sqrt 3) ~= 0.0962250,

    peaks at ``eta = 0`` and ``eta = +-log(2 + sqrt 3)``."""

    name = "bernoulli_logit"
    aliases = ("logistic", "logit", "bernoulli")
    label = "Bernoulli"
    description = "pm.Bernoulli(logit_p=eta) (or p=pm.math.invlogit(eta))"
    distribution = "BernoulliRV"
    dist_params = ("p",)
    link, link_param = "logit", "p"
    link_hint = "a logit link (logit_p=eta)"

    def sup_derivative(self, m, **params):
        """Cornish et al. (2019), eq. 12: class docstring."""
        return 0.25 if m == 2 else _LOGIT_SUP3

    def local_sup(self, m, lo, hi, *, y=None, **params):
        """Region bound: ``|f''|`` peaks at 0, ``|f'''|`` at ``+-log(2 + sqrt 3)``."""
        if m == 2:
            return _sup(lambda e: expit(e) * expit(-e), lo, hi, (0.0,))

        def g3(e):
            s = expit(e)
            return s * (1.0 - s) * (1.0 - 2.0 * s)

        return _sup(g3, lo, hi, (-_LOGIT_PEAK3, _LOGIT_PEAK3))

    def row_loglik(self, eta, y, params, derivatives=2):
        """``l = y eta - log(1 + e^eta)``, ``l' = y - s``, ``l'' = -s (1 - s)``
        (Bardenet et al. 2017, Sec. 7.1; Cornish et al. 2019, eq. 10)."""
        # log p = y eta - log(1 + e^eta) = log s(eta) - (1 - y) eta, s the logistic function
        le = log_expit(eta)
        l0 = le - (1.0 - y) * eta
        if derivatives == 0:
            return (l0,)
        s = np.exp(le)
        return (l0, y - s, -s * (1.0 - s))


class BernoulliProbit(GLMFamily):
    """Bernoulli with a probit link: ``f(eta) = -log Phi(s eta)`` with ``s = 2 y - 1``, so
    ``|f^(m)(eta)| = |g^(m)(s eta)|`` for ``g = log Phi``. With ``lambda = phi / Phi`` (the
    inverse Mills ratio, ``lambda' = -lambda (t + lambda)``): ``g'' = -lambda (t + lambda)``
    and ``g''' = lambda (t + lambda)(t + 2 lambda) - lambda``. ``-g''`` is the variance
    reduction of a normal truncated above, in ``(0, 1)``, tending to 1 as ``t -> -inf``
    (Sampford 1953, "Some inequalities on Mill's ratio and related functions"); ``g'''`` is
    positive with one peak, at ``t* = 1.00237`` (a root of ``g''''``, found numerically;
    the tests check both facts on a fine grid):

        sup |f''| = 1,    sup |f'''| = g'''(t*) ~= 0.2957188."""

    name = "bernoulli_probit"
    aliases = ("probit",)
    label = "Bernoulli"
    description = "pm.Bernoulli(p=pm.math.invprobit(eta))"
    distribution = "BernoulliRV"
    dist_params = ("p",)
    link, link_param = "probit", "p"
    link_hint = "a probit link (p=pm.math.invprobit(eta))"

    def sup_derivative(self, m, **params):
        """Cornish et al. (2019), eq. 12: class docstring."""
        return 1.0 if m == 2 else _PROBIT_SUP3

    def local_sup(self, m, lo, hi, *, y=None, **params):
        """Region bound. ``|g''|`` decreases in ``t``, so over both signs of ``s`` its
        supremum is ``|g''(-max(|lo|, |hi|))|``; ``g'''`` has one peak, at ``t*``: the
        larger of its suprema over ``[lo, hi]`` and ``[-hi, -lo]`` (taken at
        ``max(t, -8)``, where the closed form is accurate: an upper bound, as ``g'''``
        rises up to ``t*``)."""
        if m == 2:
            return _sup(lambda e: _probit_derivatives(-np.abs(e))[0], lo, hi, ())
        # g''' rises on (-inf, t*]; below -8 its formula loses digits to cancellation, so
        # it is read at -8 there (larger, hence still a bound: 0.004 against 0.296)
        g3 = lambda t: _probit_derivatives(np.maximum(t, -8.0))[1]  # noqa: E731
        return np.maximum(_sup(g3, lo, hi, (PROBIT_PEAK3,)), _sup(g3, -hi, -lo, (PROBIT_PEAK3,)))

    def row_loglik(self, eta, y, params, derivatives=2):
        """``l = log Phi(s eta)``, ``l' = s lambda``, ``l'' = -lambda (t + lambda)``
        (Cornish et al. 2019, eq. 10)."""
        # log p = log Phi(s eta), s = 2 y - 1; lambda = phi / Phi, lambda' = -lambda (t + lambda)
        sgn = 2.0 * y - 1.0
        t = sgn * eta
        lam = probit_lambda(t)
        return (log_ndtr(t), sgn * lam, -lam * (t + lam))


class _FixedScale(GLMFamily):
    """A location family with a fixed scale: ``f(eta) = g((y - eta) / sigma)``, whose
    m-th derivative scales as ``sigma^-m``."""

    selector = ("sigma", True)
    needs_y = False

    def global_sup_args(self, params):
        """The scale moves into the row factor: ``scale = 1 / sigma`` and the supremum
        of the family with ``sigma = 1``."""
        if "sigma" not in params:  # glm_bound_constants says what is missing
            return None, params
        rest = {k: v for k, v in params.items() if k != "sigma"}
        return 1.0 / np.asarray(params["sigma"]), {"sigma": 1.0, **rest}


class StudentT(_FixedScale):
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
    aliases = ("studentt", "t")
    label = "StudentT"
    description = "pm.StudentT(nu, mu=eta, sigma) with nu and sigma fixed"
    distribution = "StudentTRV"
    dist_params = ("nu", "mu", "sigma")
    link, link_param = "identity", "mu"
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


class Normal(_FixedScale):
    """Normal regression with fixed ``sigma > 0``: ``f(eta) = (y - eta)^2 / (2 sigma^2)``,
    ``f'' = 1/sigma^2``, ``f''' = 0``, so SMH-2's Taylor expansion is exact and every
    ``psi_i`` is 0 (the thinning test then never touches the data)."""

    name = "normal"
    aliases = ("gaussian",)
    label = "Normal"
    description = "pm.Normal(mu=eta, sigma) with sigma fixed"
    distribution = "NormalRV"
    dist_params = ("mu", "sigma")
    link, link_param = "identity", "mu"
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


class PoissonLog(GLMFamily):
    """Poisson with a log link: ``f = exp(eta) - y eta``, ``f'' = f''' = exp(eta)``:
    no global bound; increasing, so the supremum over an interval is ``exp(hi)``."""

    name = "poisson_log"
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


# ------------------------------------------------------------- two-parameter rows
def _location_scale(m, E, S, y, nu):
    """Partials of ``l = -s + H((y - eta) e^-s)`` (H the log density of the standard
    Normal or Student-t), by the chain rule with ``t = (y - eta) e^-s``,
    ``dt/d eta = -e^-s``, ``dt/ds = -t`` (``H1, H2, H3``: derivatives of H):

    * m = 2: ``l_ee = e^-2s H2``, ``l_es = e^-s (H1 + t H2)``, ``l_ss = t (H1 + t H2)``;
    * m = 3: ``l_eee = -e^-3s H3``, ``l_ees = -e^-2s (2 H2 + t H3)``,
      ``l_ess = -e^-s (H1 + 3 t H2 + t^2 H3)``, ``l_sss = -t (H1 + 3 t H2 + t^2 H3)``.

    Normal: ``H1 = -t``, ``H2 = -1``, ``H3 = 0``. Student-t with ``D = nu + t^2``:
    ``H2 = -(nu+1)(nu - t^2) / D^2``, ``H1 + t H2 = -2 nu (nu+1) t / D^2``,
    ``H3 = 2 (nu+1) t (3 nu - t^2) / D^3``,
    ``2 H2 + t H3 = -2 nu (nu+1)(nu - 3 t^2) / D^3``,
    ``H1 + 3 t H2 + t^2 H3 = -4 nu (nu+1) t (nu - t^2) / D^3``.
    Returned in the order ``d^m / d eta^j d s^(m-j)``, ``j = 0..m``.
    """
    es = (-S).exp()
    T = (y - E) * es
    if nu is None:  # Normal
        if m == 2:
            return [2.0 * T**2, 2.0 * T * es, es**2]
        return [4.0 * T**2, 4.0 * T * es, 2.0 * es**2, Interval(0.0 * T.lo)]
    D = T**2 + nu
    if m == 2:
        k2 = -2.0 * nu * (nu + 1.0) * T / D**2
        h2 = -(nu + 1.0) * (nu - T**2) / D**2
        return [T * k2, es * k2, es**2 * h2]
    h3 = 2.0 * (nu + 1.0) * T * (3.0 * nu - T**2) / D**3
    c2 = -2.0 * nu * (nu + 1.0) * (nu - 3.0 * T**2) / D**3
    c3 = -4.0 * nu * (nu + 1.0) * T * (nu - T**2) / D**3
    return [T * c3, es * c3, es**2 * c2, es**3 * h3]


class NormalScale(GLMFamily):
    """Normal regression with a sampled scale: ``mu = eta``, ``sigma = e^s``."""

    name = "normal_scale"
    label = "Normal"
    description = "pm.Normal(mu=eta, sigma) with sigma a positive free variable"
    distribution = "NormalRV"
    dist_params = ("mu", "sigma")
    link, link_param = "identity", "mu"
    scale_param = "sigma"
    selector = ("sigma", False)
    unbounded = "the derivatives in the log scale are unbounded"

    def box_partials(self, m, E, S, y, **params):
        """The partials of :func:`_location_scale` (Normal)."""
        return _location_scale(m, E, S, y, None)

    def standard_logpdf(self, t, params):
        """``H = -t^2/2``, ``H' = -t``, ``H'' = -1``."""
        return -0.5 * t * t, -t, -np.ones_like(t)


class StudentTScale(GLMFamily):
    """Student-t regression with fixed ``nu`` and a sampled scale: ``mu = eta``,
    ``sigma = e^s``."""

    name = "student_t_scale"
    label = "StudentT"
    description = ("pm.StudentT(nu, mu=eta, sigma) with nu fixed and sigma a positive "
                   "free variable")
    distribution = "StudentTRV"
    dist_params = ("nu", "mu", "sigma")
    link, link_param = "identity", "mu"
    fixed_params = ("nu",)
    scale_param = "sigma"
    selector = ("sigma", False)
    unbounded = "the derivatives in the log scale are unbounded"

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


class GammaLog(GLMFamily):
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
    unbounded = "the derivatives in the log shape are unbounded"

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


class NegBinomialLog(GLMFamily):
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
    unbounded = "the derivatives in the log shape are unbounded"

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


for _family in (BernoulliLogit, BernoulliProbit, StudentT, Normal, PoissonLog, NormalScale,
                StudentTScale, GammaLog, NegBinomialLog):
    register(_family)
del _family
