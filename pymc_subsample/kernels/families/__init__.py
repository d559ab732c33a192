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
  bounds of :mod:`pymc_subsample.kernels.scalable.region`);
* for rows with two parameters, the closed-form m-th partials in ``(eta, s)`` evaluated on
  a box (:meth:`GLMFamily.box_partials`, interval arithmetic of
  :mod:`pymc_subsample.kernels.scalable.interval`);
* the row log-likelihood and its derivatives in ``eta`` (:meth:`GLMFamily.row_loglik`),
  or the standard log density of a location-scale row (:meth:`GLMFamily.standard_logpdf`),
  for the control variates in predictor coordinates (:mod:`pymc_subsample.kernels.
  predictor`).

A family provides the methods it can; its capabilities (:attr:`GLMFamily.global_bound`,
:attr:`GLMFamily.region_bound`, :attr:`GLMFamily.predictor_coordinates`) follow from which
it overrides. Each states what must be fixed or free in a model for it to match
(:attr:`GLMFamily.requirements`); exactly one family may match a model, and
:func:`register` refuses a family that would match the same models as one registered
(registration order is the order of listings only, never of recognition). :func:`register`
adds one (as a class decorator too), :func:`get_family` finds one by name or alias.

The package: :mod:`.base` (the interface, :class:`GLMFamily`), :mod:`.partials` (helpers
shared by the families: suprema over intervals, the probit link's enclosures, the
location-scale partials, per-row boxes), :mod:`.messages` (the refusal text), one module
per family or close group (:mod:`.bernoulli`, :mod:`.location`, :mod:`.counts`,
:mod:`.zeroinflated_poisson`, :mod:`.censored`, :mod:`.zinb`, :mod:`.zinb_alpha`,
:mod:`.zinb_both`, :mod:`.student_nu`, and :mod:`.categorical`: the multinomial logit
and the ordered logistic and probit, rows of several scalars whose
:attr:`GLMFamily.structure` names another reader of the engine), and the registry
here. A new family is one module and one line of :data:`_BUILTIN` (or a :func:`register`
call of one's own).
:mod:`~pymc_subsample.kernels.scalable.bounds`, :mod:`~pymc_subsample.kernels.scalable.region` and
:mod:`~pymc_subsample.kernels.variance.predictor` keep their functions taking a family name and
dispatch here.

Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

from .._validation import InvalidParameterError
from .base import FamilyCapabilityError, GLMFamily
from .bernoulli import BernoulliLogit, BernoulliProbit
from .categorical import CategoricalSoftmax, OrderedLogistic, OrderedProbit
from .censored import CensoredNormal, CensoredNormalScale
from .counts import GammaLog, NegBinomialLog, PoissonLog
from .location import Normal, NormalScale, StudentT, StudentTScale
from .messages import FAMILIES_DOC, REFUSAL_LIMIT, auto_refusal
from .partials import PROBIT_PEAK3, probit_lambda
from .student_nu import StudentTNu, StudentTNuFixedScale
from .zeroinflated_poisson import ZeroInflatedPoissonLog, ZeroInflatedPoissonLogit
from .zinb import ZeroInflatedNegBinomialLog, ZeroInflatedNegBinomialLogit
from .zinb_alpha import ZeroInflatedNegBinomialAlpha
from .zinb_both import ZeroInflatedNegBinomialBoth

__all__ = [
    "FAMILIES",
    "FAMILIES_DOC",
    "FamilyCapabilityError",
    "GLMFamily",
    "PROBIT_PEAK3",
    "REFUSAL_LIMIT",
    "auto_refusal",
    "family_names",
    "find_family",
    "get_family",
    "overlapping",
    "probit_lambda",
    "register",
    "require",
    "supported_text",
    "unregister",
]

#: registered families by name, in registration order (the order of listings: messages,
#: :func:`supported_text`, docs/families.md; recognition does not depend on it)
FAMILIES: dict = {}
#: lower-case aliases -> name
_ALIASES: dict = {}


def register(family, *, replace: bool = False):
    """Add ``family`` (a :class:`GLMFamily` instance or subclass) to :data:`FAMILIES`.

    Returns its argument, so that it serves as a class decorator. Raises ValueError when
    the name or an alias is taken (unless ``replace``) or the family provides no bound,
    and :class:`~pymc_subsample.kernels._validation.InvalidParameterError` (a ValueError)
    when its requirements contradict themselves or would let it match the same models as
    a registered family (:func:`overlapping`: no order decides between families).
    """
    fam = family() if isinstance(family, type) else family
    if not isinstance(fam, GLMFamily):
        raise TypeError(f"register needs a GLMFamily, got {type(fam).__name__}.")
    if not fam.name or not isinstance(fam.name, str):
        raise ValueError("a GLM family needs a name.")
    if not (fam.global_bound or fam.region_bound or fam.structure_bound):
        raise ValueError(
            f"GLM family {fam.name!r} provides no bound: override sup_derivative or "
            "local_sup (one-parameter rows), box_partials (with scale_param), or "
            "row_constants (another structure).")
    _check_parameters(fam)
    keys = [fam.name] + [_key(a) for a in fam.aliases]
    owners = {**_ALIASES, **{n: n for n in FAMILIES}}
    taken = [k for k in keys if owners.get(k, fam.name) != fam.name]
    if fam.name in FAMILIES and not replace:
        taken.insert(0, fam.name)
    if taken:
        raise ValueError(f"GLM family names already registered: {taken} (replace=True "
                         "replaces a family of the same name).")
    clash = [n for n, f in FAMILIES.items() if n != fam.name and overlapping(fam, f)]
    if clash:
        raise InvalidParameterError(
            f"GLM family {fam.name!r} would match the same models as {clash[0]!r} "
            f"({fam.distribution}, link {fam.link!r}): give one of them a parameter it "
            "needs fixed (fixed_params) that the other needs free (free_params).")
    for a in [a for a, n in _ALIASES.items() if n == fam.name]:  # replaced in place
        del _ALIASES[a]
    FAMILIES[fam.name] = fam
    for a in keys[1:]:
        _ALIASES[a] = fam.name
    return family


def _check_parameters(fam: GLMFamily) -> None:
    """The parameters a family names are its distribution's, and none is required both
    fixed and free."""
    named = (fam.link_param, fam.scale_param, *fam.fixed_params, *fam.free_params,
             *fam.extra_coords)
    unknown = [p for p in named if p and p not in fam.dist_params + fam.derived_params]
    if fam.distribution is not None and unknown:
        raise ValueError(f"GLM family {fam.name!r}: parameters {unknown} are not among its "
                         f"dist_params {fam.dist_params}.")
    both = sorted(set(fam.fixed_params) & set(fam.free_params))
    if both:
        raise InvalidParameterError(f"GLM family {fam.name!r}: parameters {both} are "
                                    "required both fixed and free.")


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
    "some families, a scale or shape parameter sampled on the log scale (the Categorical "
    "families: K class predictors, or a predictor and cutpoints). Registered families: "
)
_TAIL = (
    "For any other model pass bounds=callable: bounds(order) -> array of N per-row "
    "constants psi_i >= sup |(order+1)-th partial derivatives of -log p(x_i | q)| over the "
    "step's unconstrained space (Cornish et al. 2019, eq. 12), or that array itself; or "
    "register a GLM family (pymc_subsample.kernels.families.register)."
)


def overlapping(a: GLMFamily, b: GLMFamily) -> bool:
    """Whether the families ``a`` and ``b`` could both match one model: they read the same
    distribution op (and mixture or censored component) with the same link and
    parameter readers, and no parameter is required fixed by one and free by the other
    (:attr:`GLMFamily.requirements`). Such a pair would leave recognition to an order,
    so :func:`register` refuses the second."""
    if a.distribution is None or a.distribution != b.distribution:
        return False
    if (a.param_reader, a.component, a.link, a.link_param) != (
            b.param_reader, b.component, b.link, b.link_param):
        return False
    ra, rb = a.requirements, b.requirements
    return all(ra[p] == rb[p] for p in set(ra) & set(rb))


def supported_text() -> str:
    """What ``bounds='auto'`` recognises, generated from the registry (the text of
    :data:`pymc_subsample.engine.glm.SUPPORTED_TEXT`; the refusals themselves are short,
    :func:`auto_refusal`, and point to :data:`FAMILIES_DOC`)."""
    entries = []
    for fam in FAMILIES.values():
        if fam.distribution is None:
            continue
        everywhere = fam.global_bound or (fam.structure_bound and fam.structure_global)
        entries.append(f"{fam.name}: {fam.description}" + ("" if everywhere else " [region]"))
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


#: The built-in families, one line each; registered in this order (the order of listings).
_BUILTIN = (
    BernoulliLogit,
    BernoulliProbit,
    StudentT,
    Normal,
    PoissonLog,
    NormalScale,
    StudentTScale,
    GammaLog,
    NegBinomialLog,
    ZeroInflatedPoissonLog,
    ZeroInflatedPoissonLogit,
    CensoredNormal,
    CensoredNormalScale,
    ZeroInflatedNegBinomialLogit,
    ZeroInflatedNegBinomialAlpha,
    ZeroInflatedNegBinomialLog,
    ZeroInflatedNegBinomialBoth,
    StudentTNu,
    StudentTNuFixedScale,
    CategoricalSoftmax,
    OrderedLogistic,
    OrderedProbit,
)
for _family in _BUILTIN:
    register(_family)
del _family
