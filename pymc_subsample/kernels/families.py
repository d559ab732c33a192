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
        ``selector`` and ``fixed_params``).
    component : str or None
        For :attr:`param_reader`: the class name of the mixture component's op it reads
        (``"PoissonRV"``).
    selector : (str, bool) or None
        ``(param, fixed)``: the family applies only when ``param`` is fixed (True) or
        depends on a free variable (False); two families of one distribution split so.
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
    scale_transform: str = "log"
    param_reader: str | None = None
    derived_params: tuple = ()
    component: str | None = None
    selector: tuple | None = None
    needs_y: bool = False
    unbounded: str = "its derivatives are unbounded over the whole line"
    support: str | None = None
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
    unknown = [p for p in named if p and p not in fam.dist_params + fam.derived_params]
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
#: the multinomial logit, recognised outside the registry (engine/softmax.py)
_SOFTMAX_TEXT = (
    "Also categorical_softmax (multinomial logit): pm.Categorical(p=pm.math.softmax(eta, "
    "axis=-1)) or logit_p=eta, eta an (N, K) affine predictor such as a + X @ B. "
    "Also ordered_logistic and ordered_probit: pm.OrderedLogistic or pm.OrderedProbit "
    "(sigma fixed) with eta affine and cutpoints ordered or a cumsum of positive steps. "
)
_TAIL = (
    "For any other model pass bounds=callable: bounds(order) -> array of N per-row "
    "constants psi_i >= sup |(order+1)-th partial derivatives of -log p(x_i | q)| over the "
    "step's unconstrained space (Cornish et al. 2019, eq. 12), or that array itself; or "
    "register a GLM family (pymc_subsample.kernels.families.register)."
)


#: The documentation page that lists the families ``bounds='auto'`` knows, how to pass
#: bounds of one's own and how to register a family; every refusal points to it.
FAMILIES_DOC = "docs/families.md"
#: The upper limit on the length of a refusal (:func:`auto_refusal`) with names of
#: ordinary length: a message read at a prompt, not a manual.
REFUSAL_LIMIT = 300


def auto_refusal(what: str) -> str:
    """A refusal of ScalableMH's ``bounds='auto'``: ``what`` (one sentence naming the
    observed variable and what about its likelihood is not supported), then what to do
    instead and the page that lists the families (:data:`FAMILIES_DOC`). The full list
    (:func:`supported_text`) is left to that page and to :data:`pymc_subsample.engine.
    glm.SUPPORTED_TEXT`, so that the message stays within :data:`REFUSAL_LIMIT`
    characters for names of ordinary length."""
    return (f"ScalableMH bounds='auto': {what} Pass bounds= (a callable or an array) or use "
            f"AustereMH/BarkerMinibatch; see {FAMILIES_DOC}.")


def supported_text() -> str:
    """What ``bounds='auto'`` recognises, generated from the registry (the text of
    :data:`pymc_subsample.engine.glm.SUPPORTED_TEXT`; the refusals themselves are short,
    :func:`auto_refusal`, and point to :data:`FAMILIES_DOC`)."""
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
        + _SOFTMAX_TEXT + _TAIL
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
    support = "binary"

    def sup_derivative(self, m, **params):
        """Cornish et al. (2019), eq. 12: class docstring."""
        return 0.25 if m == 2 else _LOGIT_SUP3

    def local_sup(self, m, lo, hi, *, y=None, **params):
        """Region bound. Both ``|f''| = p q`` and ``|f'''| = p q |p - q|`` (``p = s``,
        ``q = 1 - s``) are even in ``eta``; in ``|eta|``, ``|f''|`` decreases from 0 and
        ``|f'''|`` rises to its peak at ``log(2 + sqrt 3)`` and then falls. So each
        supremum over ``[lo, hi]`` is the value at one point: the ``|eta|`` of the
        interval nearest 0 (``m = 2``) or nearest the peak (``m = 3``), evaluated with
        one ``expit`` of ``-|eta|`` (accurate in the tails)."""
        lo = np.asarray(lo, dtype=np.float64)
        hi = np.asarray(hi, dtype=np.float64)
        alo, ahi = np.abs(lo), np.abs(hi)
        # the |eta| reached on [lo, hi]: [near, far]
        near = np.minimum(alo, ahi)
        near[(lo <= 0.0) & (hi >= 0.0)] = 0.0
        if m == 2:
            t = near
        else:
            t = np.maximum(alo, ahi)
            np.minimum(t, _LOGIT_PEAK3, out=t)
            np.maximum(t, near, out=t)
        q = expit(-t)
        p = 1.0 - q
        p *= q  # p q
        if m == 2:
            return p
        q *= -2.0
        q += 1.0  # p - q = 1 - 2 q
        p *= q
        return p

    def row_loglik(self, eta, y, params, derivatives=2):
        """``l = y eta - log(1 + e^eta)``, ``l' = y - s``, ``l'' = -s (1 - s)``
        (Bardenet et al. 2017, Sec. 7.1; Cornish et al. 2019, eq. 10)."""
        # log p = y eta - log(1 + e^eta) = log s(eta) - (1 - y) eta, s the logistic function
        if derivatives == 0:
            return (log_expit(eta) - (1.0 - y) * eta,)
        # with the derivatives s is needed anyway, and log(s) costs a sixth of log_expit
        # (the set-up's passes over all rows). Both are within an ulp or two of
        # log s in absolute terms; below eta = -700, where s loses precision to
        # subnormals, log s = eta - log1p(e^eta) is eta to double precision.
        s = expit(eta)
        with np.errstate(divide="ignore"):
            le = np.log(s)
        if np.min(eta, initial=0.0) < -700.0:
            le = np.where(eta < -700.0, eta, le)[()]  # [()]: a scalar stays a scalar
        l0 = le - (1.0 - y) * eta
        d2 = s - 1.0
        d2 *= s  # -s (1 - s)
        return (l0, y - s, d2)


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
    support = "binary"
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
    support = "real"
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
    support = "real"
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
    support = "real"
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
    support = "real"
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


# ------------------------------------------------------------ zero-inflated Poisson
#: eta above which a zero row's terms are evaluated at this value: they carry a factor
#: ``e^(r - x)``, ``x = e^eta >= 4.8e8``, below the smallest float there (for any
#: ``r = logit psi < 10^8``), and ``x^3`` would overflow far beyond it
_ZI_ETA_MAX = 20.0
#: sub-interval width and most sub-intervals for the interval suprema of zero rows
_ZI_PIECE = 0.05
_ZI_MAX_PIECES = 16


def _logit_psi(psi, family: str) -> np.ndarray:
    """``r = log(psi / (1 - psi))`` of a fixed zero-inflation probability, checked to lie
    in (0, 1)."""
    psi = np.asarray(psi, dtype=np.float64)
    if not np.all((psi > 0.0) & (psi < 1.0)):
        raise ValueError(
            f"{family}: psi (the probability of the count component) must lie strictly "
            "between 0 and 1; with psi = 1 use pm.Poisson.")
    return np.log(psi) - np.log1p(-psi)


def _zip_zero_partials(m, E, R):
    """Enclosures of the m-th partials of a zero row of the zero-inflated Poisson,
    ``l = softplus(r - x) - softplus(r)`` with ``x = e^eta``, ``r = logit psi``, over the
    box ``E x R``, in the order ``d^m l / d eta^j d r^(m-j)``, ``j = 0..m``.

    With ``z = r - x``, ``W = sigmoid(z)``, ``V = 1 - W``, ``P = sigmoid(r)``,
    ``Q = 1 - P`` (``softplus' = sigmoid``, ``sigmoid' = W V``,
    ``sigmoid'' = W V (V - W)``, and ``dz/d eta = -x``, ``d^2 z / d eta^2 = -x``):

    * m = 2: ``l_rr = W V - P Q``, ``l_er = -x W V``, ``l_ee = x W (x V - 1)``;
    * m = 3: ``l_rrr = W V (V - W) - P Q (Q - P)``, ``l_err = -x W V (V - W)``,
      ``l_eer = x W V (x (V - W) - 1)``,
      ``l_eee = -x W (x^2 V (V - W) - 3 x V + 1)``.
    """
    E = Interval(np.minimum(E.lo, _ZI_ETA_MAX), np.minimum(E.hi, _ZI_ETA_MAX))
    X = E.exp()
    Z = R - X
    W, V = Z.expit(), (-Z).expit()
    P, Q = R.expit(), (-R).expit()
    WV = W * V
    if m == 2:
        return [WV - P * Q, -(X * WV), X * W * (X * V - 1.0)]
    VW = V - W
    return [WV * VW - P * Q * (Q - P), -(X * WV * VW), X * WV * (X * VW - 1.0),
            -(X * W * (X**2 * (V * VW) - 3.0 * (X * V) + 1.0))]


def _zip_count_partials(m, E, R):
    """The m-th partials of a count row (``y > 0``) of the zero-inflated Poisson,
    ``l = log sigmoid(r) + y eta - e^eta``: ``l_ee = l_eee = -e^eta``, the mixed ones 0,
    ``l_rr = -P Q``, ``l_rrr = -P Q (Q - P)`` (:func:`_zip_zero_partials`' notation)."""
    X = E.exp()
    P, Q = R.expit(), (-R).expit()
    zero = Interval(np.zeros(np.broadcast(E.lo, R.lo).shape))
    if m == 2:
        return [-(P * Q), zero, -X]
    return [-(P * Q * (Q - P)), zero, zero, -X]


def _rows_where(mask, a: Interval, b: Interval) -> Interval:
    """Row by row: ``a`` where ``mask``, else ``b``."""
    return Interval(np.where(mask, a.lo, b.lo), np.where(mask, a.hi, b.hi))


def _per_row_box(E: Interval, S: Interval, y):
    """``(E, S, y, shape)``: the box's intervals and the responses broadcast to one entry
    per row (the shape of the three together), for partials that treat rows by type."""
    y = np.asarray(y, dtype=np.float64)
    n = np.broadcast(E.lo, S.lo, y).shape
    return (Interval(np.broadcast_to(E.lo, n), np.broadcast_to(E.hi, n)),
            Interval(np.broadcast_to(S.lo, n), np.broadcast_to(S.hi, n)), y, n)


def _pieces(lo, hi):
    """Sub-intervals of ``[lo_i, hi_i]`` (at most ``_ZI_MAX_PIECES``, of width about
    ``_ZI_PIECE``): interval evaluation's excess shrinks with the width."""
    width = float(np.max(hi - lo)) if np.size(lo) else 0.0
    k = int(min(_ZI_MAX_PIECES, max(1, math.ceil(width / _ZI_PIECE))))
    for i in range(k):
        a = lo + (hi - lo) * (i / k)
        b = hi if i == k - 1 else lo + (hi - lo) * ((i + 1) / k)
        yield a, b


class ZeroInflatedPoissonLog(GLMFamily):
    """Zero-inflated Poisson with a log link and a fixed ``psi`` in (0, 1):
    ``p(0) = 1 - psi + psi e^-mu``, ``p(y) = psi Poisson(y | mu)`` for ``y > 0``,
    ``mu = e^eta``. PyMC builds it as a ``Mixture`` of ``DiracDelta(0)`` and the Poisson
    with weights ``(1 - psi, psi)``.

    Count rows (``y > 0``): ``f = -l = e^eta - y eta - log psi``, the Poisson row:
    ``f'' = f''' = e^eta``, increasing, so the supremum over ``[lo, hi]`` is ``exp(hi)``
    (no global bound). Zero rows: with ``r = logit psi`` and ``x = e^eta``,
    ``l = log(1 - psi + psi e^-x) = softplus(r - x) - softplus(r)``, whose derivatives in
    ``eta`` are bounded (they carry ``e^-x`` as ``x`` grows and ``x`` as it shrinks):
    ``l'' = x W (x V - 1)``, ``l''' = -x W (x^2 V (V - W) - 3 x V + 1)``,
    ``W = sigmoid(r - x)``, ``V = 1 - W``. Their suprema over ``[lo, hi]`` are enclosed
    by interval arithmetic (:mod:`~pymc_subsample.kernels.interval`) on sub-intervals of
    width at most 0.05: an upper bound, not the exact supremum (docs/engine.md,
    "Zero-inflated Poisson")."""

    name = "zeroinflated_poisson_log"
    aliases = ("zip", "zeroinflated_poisson", "zero_inflated_poisson")
    label = "ZeroInflatedPoisson"
    description = "pm.ZeroInflatedPoisson(psi, mu=pm.math.exp(eta)) with psi fixed"
    distribution = "MixtureRV"
    dist_params = ("w", "zero", "count")
    param_reader = "zero_inflated"
    component = "PoissonRV"
    derived_params = ("psi", "mu")
    link, link_param = "log", "mu"
    link_hint = "a log link (use mu=pm.math.exp(eta))"
    fixed_params = ("psi",)
    selector = ("psi", True)
    needs_y = True
    unbounded = ("zero-inflated Poisson with log link: the count rows' derivatives, "
                 "exp(eta), are unbounded")
    param_labels = {"psi": "zero-inflation probability psi"}

    def local_sup(self, m, lo, hi, *, y=None, **params):
        """Region bound: ``exp(hi)`` for count rows, interval enclosures of ``|l^(m)|``
        for zero rows (class docstring)."""
        if y is None or params.get("psi") is None:
            raise TypeError(f"{self.name} needs y and psi.")
        y = np.asarray(y, dtype=np.float64)
        r = _logit_psi(params["psi"], self.name)
        zero = y == 0
        out = np.exp(hi)
        if np.any(zero):
            R = Interval(np.broadcast_to(r, lo.shape))
            best = np.zeros_like(lo)
            for a, b in _pieces(lo, hi):
                part = _zip_zero_partials(m, Interval(a, b), R)[m]
                best = np.maximum(best, part.abs_sup())
            out = np.where(zero, best, out)
        return out

    def row_loglik(self, eta, y, params, derivatives=2):
        """Count rows: ``l = log psi + y eta - e^eta``, ``l' = y - e^eta``,
        ``l'' = -e^eta``; zero rows: ``l = softplus(r - x) - softplus(r)``,
        ``l' = -x W``, ``l'' = x W (x V - 1)`` (class docstring; Cornish et al. 2019,
        eq. 10)."""
        r = _logit_psi(params["psi"], self.name)
        eta = np.asarray(eta, dtype=np.float64)
        zero = np.asarray(y) == 0
        with np.errstate(over="ignore"):  # a far point: the test rejects it
            x = np.exp(eta)
        x0 = np.exp(np.minimum(eta, _ZI_ETA_MAX))  # zero rows (see _ZI_ETA_MAX)
        z = r - x0
        l_zero = np.logaddexp(0.0, z) - np.logaddexp(0.0, r)
        l_count = log_expit(r) + y * eta - x
        l0 = np.where(zero, l_zero, l_count)
        if derivatives == 0:
            return (l0,)
        xw = x0 * expit(z)
        l1 = np.where(zero, -xw, y - x)
        l2 = np.where(zero, xw * (x0 * expit(-z) - 1.0), -x)
        return (l0, l1, l2)


class ZeroInflatedPoissonLogit(GLMFamily):
    """Zero-inflated Poisson with a log link and ``psi`` a free variable in (0, 1),
    sampled on the logit scale (PyMC's default for ``pm.Beta``, ``pm.Uniform(0, 1)``):
    rows of ``(eta, r = logit psi)``, both affine in the step's variables. The partials
    over a box of ``(eta, r)`` are :func:`_zip_count_partials` (``y > 0``) and
    :func:`_zip_zero_partials` (``y = 0``); none is bounded in ``eta`` alone for count
    rows, so region bounds (the path bound) are needed."""

    name = "zeroinflated_poisson_logit"
    label = "ZeroInflatedPoisson"
    description = ("pm.ZeroInflatedPoisson(psi, mu=pm.math.exp(eta)) with psi a free "
                   "variable in (0, 1) (logit-transformed)")
    distribution = "MixtureRV"
    dist_params = ("w", "zero", "count")
    param_reader = "zero_inflated"
    component = "PoissonRV"
    derived_params = ("psi", "mu")
    link, link_param = "log", "mu"
    link_hint = "a log link (use mu=pm.math.exp(eta))"
    scale_param = "psi"
    scale_transform = "logit"
    selector = ("psi", False)
    needs_y = True
    unbounded = "the count rows' derivatives, exp(eta), are unbounded"
    param_labels = {"psi": "zero-inflation probability psi"}

    def box_partials(self, m, E, S, y, **params):
        """Count rows :func:`_zip_count_partials`, zero rows :func:`_zip_zero_partials`
        (``S``: the interval of ``r = logit psi``)."""
        E, S, y, _ = _per_row_box(E, S, y)
        zero = y == 0
        count = _zip_count_partials(m, E, S)
        if not np.any(zero):
            return count
        return [_rows_where(zero, a, b) for a, b in zip(_zip_zero_partials(m, E, S), count)]


for _family in (ZeroInflatedPoissonLog, ZeroInflatedPoissonLogit):
    register(_family)
del _family


# ------------------------------------------------------------- censored Normal rows
#: below this ``t`` the closed forms of ``g''`` and ``g'''`` (``g = log Phi``) lose digits
#: to cancellation (``t + lambda`` is small): they are bounded by their value here instead
_LOGPHI_TAIL = -8.0


def _logphi_enclosure(k, tl, th):
    """An enclosure ``[lo, hi]`` (per row) of ``g^(k)`` over ``t in [tl, th]``,
    ``g = log Phi``, ``k`` in {1, 2, 3}, from the shapes of these functions (the
    :class:`BernoulliProbit` docstring; checked on dense grids in the tests):
    ``g' = lambda > 0`` decreases; ``g'' = -lambda (t + lambda)`` increases from -1 to 0;
    ``g''' > 0`` rises up to ``t* =`` :data:`PROBIT_PEAK3` and falls after it. Below
    :data:`_LOGPHI_TAIL` the monotone ends are read at the tail point (``g''`` is then
    enclosed by ``[-1, g''(-8)]``, ``g'''`` by ``[0, g'''(-8)]``); every end is widened by
    a relative margin covering the rounding of the closed forms."""
    tl = np.asarray(tl, dtype=np.float64)
    th = np.asarray(th, dtype=np.float64)
    if k == 1:
        # lambda = exp(-t^2/2 - log sqrt(2 pi) - log Phi(t)): the exponent's rounding grows
        # with t^2 in the left tail
        lo = probit_lambda(th) * (1.0 - 1e-10 - 1e-15 * th * th)
        hi = probit_lambda(tl) * (1.0 + 1e-10 + 1e-15 * tl * tl)
        return np.maximum(lo, 0.0), hi
    tail = _LOGPHI_TAIL
    if k == 2:
        lo = np.where(tl < tail, -1.0,
                      -_probit_derivatives(np.maximum(tl, tail))[0] * (1.0 + 1e-9))
        hi = -_probit_derivatives(np.maximum(th, tail))[0] * (1.0 - 1e-9)
        return np.maximum(lo, -1.0), np.minimum(hi, 0.0)

    def up(t):
        return _probit_derivatives(np.maximum(t, tail))[1] * (1.0 + 1e-8)

    def down(t):
        return np.where(t < tail, 0.0,
                        _probit_derivatives(np.maximum(t, tail))[1] * (1.0 - 1e-8))

    peak = (tl <= PROBIT_PEAK3) & (PROBIT_PEAK3 <= th)
    hi = np.where(peak, _PROBIT_SUP3, np.maximum(up(tl), up(th)))
    lo = np.maximum(np.minimum(down(tl), down(th)), 0.0)
    return lo, hi


def _censored_rows(y, lower, upper, shape):
    """``(at_lower, at_upper, c)`` per row: whether the row is censored at its lower bound
    (``y <= lower``, PyMC's rule, the lower bound first) or at its upper bound
    (``y >= upper``), and the bound it is censored at (0 for the other rows)."""
    if y is None:
        raise TypeError("censored rows need y (the responses), to tell which rows are "
                        "censored.")
    y = np.broadcast_to(np.asarray(y, dtype=np.float64), shape)
    lower = np.broadcast_to(np.asarray(-np.inf if lower is None else lower,
                                       dtype=np.float64), shape)
    upper = np.broadcast_to(np.asarray(np.inf if upper is None else upper,
                                       dtype=np.float64), shape)
    at_lower = np.isfinite(lower) & (y <= lower)
    at_upper = ~at_lower & np.isfinite(upper) & (y >= upper)
    c = np.where(at_lower, lower, np.where(at_upper, upper, 0.0))
    return at_lower, at_upper, c


class CensoredNormal(_FixedScale):
    """Censored Normal regression with fixed ``sigma > 0``:
    ``pm.Censored(pm.Normal.dist(mu=eta, sigma), lower, upper)``, bounds fixed (numbers
    or one per row; either may be None or infinite). With ``g = log Phi`` and
    ``lambda = g' = phi / Phi``, a row's ``U_i = -l_i`` is

    * uncensored (``lower < y < upper``): ``(y - eta)^2 / (2 sigma^2)``, so
      ``|f''| = 1 / sigma^2`` and ``f''' = 0``;
    * censored at the lower bound (``y = lower``): ``-g(t)``, ``t = (lower - eta) / sigma``;
    * censored at the upper bound (``y = upper``): ``-g(t)``, ``t = (eta - upper) / sigma``
      (``1 - Phi(-t) = Phi(t)``).

    For a censored row ``|f^(m)(eta)| = |g^(m)(t)| / sigma^m``, and from the probit family
    (:class:`BernoulliProbit`) ``|g''| < 1`` and ``0 < g''' <= g'''(t*) ~= 0.2957188``:

        sup |f''| = 1 / sigma^2,    sup |f'''| = 0.2957188 / sigma^3

    over the whole line and every row (Cornish et al. 2019, eq. 12; ``f''' = 0`` when no
    row can be censored). Over an interval of ``eta`` (:meth:`local_sup`) each row takes
    the supremum of its own type: ``|g''|`` decreases in ``t`` and ``g'''`` has one peak."""

    name = "censored_normal"
    aliases = ("censored",)
    label = "Censored Normal"
    description = ("pm.Censored(pm.Normal.dist(mu=eta, sigma), lower, upper) with sigma, "
                   "lower and upper fixed")
    distribution = "CensoredRV"
    dist_params = ("dist", "lower", "upper")
    param_reader = "censored"
    component = "NormalRV"
    derived_params = ("mu", "sigma")
    link, link_param = "identity", "mu"
    link_hint = "a Normal distribution inside (pm.Censored(pm.Normal.dist(mu=eta, sigma), ...))"
    fixed_params = ("sigma", "lower", "upper")
    needs_y = True
    param_labels = {"sigma": "scale sigma", "lower": "lower bound", "upper": "upper bound"}

    def sup_derivative(self, m, **params):
        """Cornish et al. (2019), eq. 12: class docstring (the largest over the row types:
        the responses are not read here)."""
        sigma = _positive("sigma", params["sigma"], self.name)
        if m == 2:
            return 1.0 / (sigma * sigma)
        lower = np.asarray(params.get("lower", -np.inf), dtype=np.float64)
        upper = np.asarray(params.get("upper", np.inf), dtype=np.float64)
        if np.all(np.isneginf(lower)) and np.all(np.isposinf(upper)):
            return 0.0  # no row can be censored: a Normal likelihood
        return _PROBIT_SUP3 / sigma**3

    def local_sup(self, m, lo, hi, *, y=None, sigma=None, lower=None, upper=None,
                  **params):
        """Region bound, per row type (class docstring): ``t`` runs over
        ``[(lower - hi), (lower - lo)] / sigma`` (censored below) or
        ``[(lo - upper), (hi - upper)] / sigma`` (censored above); the supremum of
        ``|g''|`` is at the interval's left end, that of ``g'''`` at ``t*`` if inside, else
        at an end (:func:`_logphi_enclosure`)."""
        if sigma is None:
            raise TypeError("censored_normal needs sigma.")
        lo = np.asarray(lo, dtype=np.float64)
        hi = np.asarray(hi, dtype=np.float64)
        at_lower, at_upper, c = _censored_rows(y, lower, upper, lo.shape)
        sig = np.broadcast_to(np.asarray(sigma, dtype=np.float64), lo.shape)
        cens = at_lower | at_upper
        tl = np.where(at_lower, c - hi, np.where(at_upper, lo - c, 0.0)) / sig
        th = np.where(at_lower, c - lo, np.where(at_upper, hi - c, 0.0)) / sig
        # the rounding of the differences and the division: a relative widening
        tl = tl - 1e-12 * (1.0 + np.abs(tl))
        th = th + 1e-12 * (1.0 + np.abs(th))
        g_lo, g_hi = _logphi_enclosure(m, tl, th)
        if m == 2:
            val = np.where(cens, -g_lo, 1.0)  # g'' < 0: |g''| largest at the low end
        else:
            val = np.where(cens, g_hi, 0.0)
        return val / sig**m

    def row_loglik(self, eta, y, params, derivatives=2):
        """Uncensored rows: ``l = -r^2 / (2 sigma^2)``, ``l' = r / sigma^2``,
        ``l'' = -1 / sigma^2`` (``r = y - eta``); censored rows: ``l = log Phi(t)``,
        ``l' = -+lambda(t) / sigma``, ``l'' = -lambda (t + lambda) / sigma^2``
        (``t = (lower - eta) / sigma`` or ``(eta - upper) / sigma``; Cornish et al. 2019,
        eq. 10)."""
        eta = np.asarray(eta, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        shape = np.broadcast(eta, y).shape
        sigma = np.asarray(params["sigma"], dtype=np.float64)
        at_lower, at_upper, c = _censored_rows(y, params.get("lower"), params.get("upper"),
                                               shape)
        cens = at_lower | at_upper
        sgn = np.where(at_lower, -1.0, 1.0)
        r = y - eta
        t = np.where(cens, sgn * (eta - c) / sigma, 0.0)
        l0 = np.where(cens, log_ndtr(t), -0.5 * r * r / sigma**2)
        if derivatives == 0:
            return (l0,)
        lam = probit_lambda(t)
        l1 = np.where(cens, sgn * lam / sigma, r / sigma**2)
        l2 = np.where(cens, -lam * (t + lam), -1.0) / sigma**2
        return (l0, l1, l2)


def _censored_partials(m, T, es):
    """Partials of a censored row ``l = g(T)``, ``g = log Phi``, in ``(eta, s)``:
    ``T = (lower - eta) e^-s`` (censored below) or ``(eta - upper) e^-s`` (above), so
    ``dT/d eta = -+e^-s``, ``dT/ds = -T``; with ``G_k = g^(k)(T)`` and up to signs (only
    their absolute values are used):

    * m = 2: ``l_ss = T (G1 + T G2)``, ``l_es = e^-s (G1 + T G2)``, ``l_ee = e^-2s G2``;
    * m = 3: ``l_sss = -T K``, ``l_ess = e^-s K``, ``l_ees = -e^-2s (2 G2 + T G3)``,
      ``l_eee = e^-3s G3``, ``K = G1 + 3 T G2 + T^2 G3``,

    in the order ``d^m / d eta^j d s^(m-j)``, ``j = 0..m``. ``T`` and ``es = e^-s`` are
    intervals; ``G_k`` are enclosed over ``T`` by :func:`_logphi_enclosure`."""
    G1, G2, G3 = (Interval(*_logphi_enclosure(k, T.lo, T.hi)) for k in (1, 2, 3))
    if m == 2:
        B = G1 + T * G2
        return [T * B, es * B, es**2 * G2]
    K = G1 + 3.0 * (T * G2) + T**2 * G3
    return [T * K, es * K, es**2 * (2.0 * G2 + T * G3), es**3 * G3]


class CensoredNormalScale(GLMFamily):
    """Censored Normal regression with a sampled scale: ``mu = eta``, ``sigma = e^s``,
    bounds fixed. Uncensored rows are :class:`NormalScale`'s; censored rows are
    ``l = log Phi(T)`` (:func:`_censored_partials`). Their control variates stay in the
    step's space (no :meth:`standard_logpdf`: a censored row is not ``-s + H(t)``)."""

    name = "censored_normal_scale"
    label = "Censored Normal"
    description = ("pm.Censored(pm.Normal.dist(mu=eta, sigma), lower, upper) with lower and "
                   "upper fixed and sigma a positive free variable")
    distribution = "CensoredRV"
    dist_params = ("dist", "lower", "upper")
    param_reader = "censored"
    component = "NormalRV"
    derived_params = ("mu", "sigma")
    link, link_param = "identity", "mu"
    link_hint = CensoredNormal.link_hint
    fixed_params = ("lower", "upper")
    scale_param = "sigma"
    selector = ("sigma", False)
    needs_y = True
    unbounded = "the derivatives in the log scale are unbounded"
    param_labels = CensoredNormal.param_labels

    def box_partials(self, m, E, S, y, lower=None, upper=None, **params):
        """Uncensored rows: :func:`_location_scale` (Normal); censored rows:
        :func:`_censored_partials`."""
        E, S, y, n = _per_row_box(E, S, y)
        normal = _location_scale(m, E, S, y, None)
        at_lower, at_upper, c = _censored_rows(y, lower, upper, n)
        cens = at_lower | at_upper
        if not np.any(cens):
            return normal
        below, above = c - E, E - c  # T e^s for rows censored below / above
        D = Interval(np.where(at_lower, below.lo, np.where(at_upper, above.lo, 0.0)),
                     np.where(at_lower, below.hi, np.where(at_upper, above.hi, 0.0)))
        es = (-S).exp()
        parts = _censored_partials(m, D * es, es)
        return [_rows_where(cens, p, q) for p, q in zip(parts, normal)]


for _family in (CensoredNormal, CensoredNormalScale):
    register(_family)
del _family


# ------------------------------------------------- zero-inflated NegativeBinomial
def _zi_zero_partials(m, R, Z, g):
    """Enclosures of the m-th partials of a zero row ``l = softplus(z) - softplus(r)``,
    ``z = r + g(eta)`` (``g = log p(0 | eta)`` of the count distribution), from the
    intervals of ``r``, ``z`` and ``g = [g', g'', g''']``, in the order
    ``d^m l / d eta^j d r^(m-j)``, ``j = 0..m``. With ``W = sigmoid(z)``, ``V = 1 - W``,
    ``P = sigmoid(r)``, ``Q = 1 - P``:

    * m = 2: ``l_rr = W V - P Q``, ``l_er = W V g'``, ``l_ee = W V g'^2 + W g''``;
    * m = 3: ``l_rrr = W V (V - W) - P Q (Q - P)``, ``l_err = W V (V - W) g'``,
      ``l_eer = W V (V - W) g'^2 + W V g''``,
      ``l_eee = W V (V - W) g'^3 + 3 W V g' g'' + W g'''``

    (the Poisson's ``g = -e^eta`` gives :func:`_zip_zero_partials`).
    """
    W, V = Z.expit(), (-Z).expit()
    P, Q = R.expit(), (-R).expit()
    WV = W * V
    g1, g2 = g[0], g[1]
    if m == 2:
        return [WV - P * Q, WV * g1, WV * g1**2 + W * g2]
    S3 = WV * (V - W)
    return [S3 - P * Q * (Q - P), S3 * g1, S3 * g1**2 + WV * g2,
            S3 * g1**3 + 3.0 * (WV * (g1 * g2)) + W * g[2]]


def _nb_zero_log_p0(E, alpha):
    """``g = log p(0) = -a softplus(eta - log a)`` of a NegativeBinomial with mean
    ``e^eta`` and fixed shape ``a``, and ``[g', g'', g''']`` (intervals):
    ``g' = -a p``, ``g'' = -a p q``, ``g''' = -a p q (q - p)``,
    ``p = sigmoid(eta - log a)``, ``q = 1 - p``."""
    a = np.asarray(alpha, dtype=np.float64)
    T = E - np.log(a)
    p, q = T.expit(), (-T).expit()
    g = a * (-T).log_expit()  # -a softplus(T) = a log sigmoid(-T)
    pq = p * q
    return g, [-(a * p), -(a * pq), -(a * (pq * (q - p)))]


def _nb_count_partials(m, E, R, y, alpha):
    """The m-th partials of a count row (``y > 0``) of the zero-inflated NegativeBinomial
    with fixed shape ``a``, ``l = log sigmoid(r) + y eta - (y + a) log(a + e^eta) + c``:
    ``l_ee = -(y + a) p q``, ``l_eee = -(y + a) p q (q - p)``, the mixed ones 0,
    ``l_rr = -P Q``, ``l_rrr = -P Q (Q - P)``."""
    a = np.asarray(alpha, dtype=np.float64)
    T = E - np.log(a)
    p, q = T.expit(), (-T).expit()
    P, Q = R.expit(), (-R).expit()
    ya = y + a
    zero = Interval(np.zeros(np.broadcast(E.lo, R.lo).shape))
    if m == 2:
        return [-(P * Q), zero, -(ya * (p * q))]
    return [-(P * Q * (Q - P)), zero, zero, -(ya * (p * q * (q - p)))]


def _zinb_partials(m, E, R, y, alpha):
    """All rows' m-th partials in ``(eta, r)`` (zero rows :func:`_zi_zero_partials`,
    count rows :func:`_nb_count_partials`)."""
    E, R, y, _ = _per_row_box(E, R, y)
    count = _nb_count_partials(m, E, R, y, alpha)
    zero = y == 0
    if not np.any(zero):
        return count
    g, dg = _nb_zero_log_p0(E, alpha)
    parts = _zi_zero_partials(m, R, R + g, dg)
    return [_rows_where(zero, a, b) for a, b in zip(parts, count)]


def _positive_alpha(params, family):
    alpha = params.get("n")
    if alpha is None:
        raise TypeError(f"{family} needs alpha (the NegativeBinomial's n).")
    alpha = np.asarray(alpha, dtype=np.float64)
    if not np.all((alpha > 0) & np.isfinite(alpha)):
        raise ValueError(f"{family}: alpha must be finite and > 0.")
    return alpha


class ZeroInflatedNegBinomialLog(GLMFamily):
    """Zero-inflated NegativeBinomial with a log link, ``psi`` in (0, 1) and shape
    ``alpha`` fixed: ``p(0) = 1 - psi + psi (a / (a + mu))^a``, ``p(y) = psi NB(y | mu, a)``
    for ``y > 0``, ``mu = e^eta``. Count rows: ``f'' = (y + a) p q``,
    ``f''' = (y + a) p q (q - p)`` with ``p = sigmoid(eta - log a)`` (bounded, as the
    NegativeBinomial with fixed shape); zero rows: :func:`_zi_zero_partials` with
    ``g = -a softplus(eta - log a)``, bounded too. Suprema over an interval by interval
    arithmetic on sub-intervals (as :class:`ZeroInflatedPoissonLog`)."""

    name = "zeroinflated_negbinomial_log"
    aliases = ("zinb",)
    label = "ZeroInflatedNegativeBinomial"
    description = ("pm.ZeroInflatedNegativeBinomial(psi, mu=pm.math.exp(eta), alpha) with "
                   "psi and alpha fixed")
    distribution = "MixtureRV"
    dist_params = ("w", "zero", "count")
    param_reader = "zero_inflated"
    component = "NegBinomialRV"
    derived_params = ("psi", "n", "p")
    link = "log_mean_negbinomial"
    link_hint = "a log link (use mu=pm.math.exp(eta))"
    fixed_params = ("psi", "n")
    selector = ("psi", True)
    needs_y = True
    unbounded = "region bounds only (the suprema are taken over intervals)"
    param_labels = {"psi": "zero-inflation probability psi", "n": "shape alpha"}

    def local_sup(self, m, lo, hi, *, y=None, **params):
        """Region bound: interval enclosures of ``|l^(m)|`` over sub-intervals."""
        if y is None or params.get("psi") is None:
            raise TypeError(f"{self.name} needs y and psi.")
        alpha = _positive_alpha(params, self.name)
        r = _logit_psi(params["psi"], self.name)
        R = Interval(np.broadcast_to(r, lo.shape))
        best = np.zeros_like(lo)
        for a, b in _pieces(lo, hi):
            part = _zinb_partials(m, Interval(a, b), R, y, alpha)[m]
            best = np.maximum(best, part.abs_sup())
        return best

    def row_loglik(self, eta, y, params, derivatives=2):
        """Count rows: ``l = log psi + y eta - (y + a) log(a + e^eta)``,
        ``l' = y - (y + a) p``, ``l'' = -(y + a) p q``; zero rows:
        ``l = softplus(r + g) - softplus(r)``, ``l' = W g'``, ``l'' = W V g'^2 + W g''``
        (up to constants per row; Cornish et al. 2019, eq. 10)."""
        a = float(np.ravel(_positive_alpha(params, self.name))[0])
        r = _logit_psi(params["psi"], self.name)
        eta = np.asarray(eta, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        zero = y == 0
        t = eta - math.log(a)
        sp = np.logaddexp(0.0, t)  # softplus(t) = log(1 + mu / a)
        z = r - a * sp
        l_zero = np.logaddexp(0.0, z) - np.logaddexp(0.0, r)
        l_count = log_expit(r) + y * eta - (y + a) * (math.log(a) + sp)
        l0 = np.where(zero, l_zero, l_count)
        if derivatives == 0:
            return (l0,)
        p, q = expit(t), expit(-t)
        w, v = expit(z), expit(-z)
        g1, g2 = -a * p, -a * p * q
        l1 = np.where(zero, w * g1, y - (y + a) * p)
        l2 = np.where(zero, w * v * g1 * g1 + w * g2, -(y + a) * p * q)
        return (l0, l1, l2)


class ZeroInflatedNegBinomialLogit(GLMFamily):
    """Zero-inflated NegativeBinomial with a log link, fixed shape ``alpha`` and ``psi`` a
    free variable in (0, 1) sampled on the logit scale: rows of ``(eta, r = logit psi)``
    with the partials of :func:`_zinb_partials`."""

    name = "zeroinflated_negbinomial_logit"
    label = "ZeroInflatedNegativeBinomial"
    description = ("pm.ZeroInflatedNegativeBinomial(psi, mu=pm.math.exp(eta), alpha) with "
                   "alpha fixed and psi a free variable in (0, 1) (logit-transformed)")
    distribution = "MixtureRV"
    dist_params = ("w", "zero", "count")
    param_reader = "zero_inflated"
    component = "NegBinomialRV"
    derived_params = ("psi", "n", "p")
    link = "log_mean_negbinomial"
    link_hint = "a log link (use mu=pm.math.exp(eta))"
    fixed_params = ("n",)
    scale_param = "psi"
    scale_transform = "logit"
    selector = ("psi", False)
    needs_y = True
    unbounded = "the derivatives in logit psi need region bounds"
    param_labels = {"psi": "zero-inflation probability psi", "n": "shape alpha"}

    def box_partials(self, m, E, S, y, **params):
        """:func:`_zinb_partials` (``S``: the interval of ``r = logit psi``)."""
        return _zinb_partials(m, E, S, y, _positive_alpha(params, self.name))


for _family in (ZeroInflatedNegBinomialLog, ZeroInflatedNegBinomialLogit):
    register(_family)
del _family

from . import family_zinb_alpha  # noqa: E402,F401  (registers zeroinflated_negbinomial_alpha)
from . import family_zinb_both  # noqa: E402,F401  (registers zeroinflated_negbinomial_both)
from . import family_student_nu  # noqa: E402,F401  (registers student_t_nu, student_t_nu_fixed_scale)
