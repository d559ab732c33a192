"""The blocked sweep the Metropolis-Hastings steps run on a GLM with a random intercept
per group: a transition kernel (:mod:`pymc_subsample.steps.kernel`) of its own.

A tall hierarchical model defeats one joint proposal: in the centred form the joint
density has no proper mode (the group scale collapses onto the mode search's centre),
in the non-centred form a few hundred group effects and their scale form a funnel that a
random walk or pCN move from one Gaussian fit crosses at a rate falling with the number
of groups. When :func:`~pymc_subsample.engine.groups.find_groups` recognises the
structure, AustereMH, BarkerMinibatch and ScalableMH replace their joint move by this
sweep, whose every move is exact (:mod:`pymc_subsample.kernels.hierarchical`: the rows
through Taylor sums and the factorised test with Poisson thinning of Cornish et al. 2019,
Algorithm 2, and some small groups' rows evaluated exactly):

1. **group effects**, all groups at once, each accepted on its own (conditionally
   independent given the rest): a random walk per group scaled by its conditional
   curvature, tuned per group, and an independence proposal per group from the
   Gaussian approximation of its conditional;
2. **hyperparameters given the group effects** (the sufficient, centred augmentation):
   no data row is read;
3. **hyperparameters with the group effects integrated out**, in effect: every group
   effect held at fixed ``u_g = (a_g - m_g) / s_g``, with ``m_g``, ``s_g`` the mean and
   sd of a Gaussian approximation of its conditional, which moves with the
   hyperparameters (a marginal Metropolis-Hastings move in conditional coordinates,
   exact through its Jacobian);
4. **fixed effects given the group effects**, by a random walk with their conditional
   covariance at the centre and by an independence proposal from a Gaussian
   approximation of their conditional, and **fixed effects with the group effects
   following them** at fixed ``u_g`` (their covariance with the group effects
   integrated out);
5. **hyperparameters given the standardised effects** ``z = (a - loc) / scale`` of the
   data-poor groups (the ancillary, non-centred augmentation), those effects moving with
   them.

Moves 2 and 5 together are the ancillarity-sufficiency interweaving of Yu and Meng (2011,
"To center or not to center: that is not the question -- an ancillarity-sufficiency
interweaving strategy (ASIS) for boosting MCMC efficiency"), applied per group as the
data-poor groups call for the non-centred form and the rich ones for the centred form;
the centred and non-centred forms of a model run the same chain in different
coordinates. The cost per sweep is bounded by the rows of the small groups plus the
thinning's events: it does not grow with ``N``.

The centre of the Taylor sums is a proper one: the mode of ``(beta, a)`` at an empirical-
Bayes group scale (:func:`~pymc_subsample.kernels.hierarchical.eb_fit`), never the
degenerate joint mode.

The package:

* :mod:`~pymc_subsample.steps.hierarchical.sweep` -- :class:`HierarchicalSweep`, the
  kernel: the composition of the moves (:data:`~pymc_subsample.steps.hierarchical.sweep.
  SWEEP_MOVES`, in the order above) and the chain's :class:`SweepState`;
* :mod:`~pymc_subsample.steps.hierarchical.moves` -- the move protocol (``propose``,
  ``log_ratio`` with its Jacobian, the decision: per group or per block; the stats of
  each move kept under its ``name`` as prefix) and the group-effect moves (1);
* :mod:`~pymc_subsample.steps.hierarchical.block_moves` -- the hyperparameter and
  fixed-effect moves (2-5);
* :mod:`~pymc_subsample.steps.hierarchical.fit` -- the centre, its Taylor sums and the
  Gaussian approximations of the conditionals;
* :mod:`~pymc_subsample.steps.hierarchical.factorised` -- the data term of every move;
* :mod:`~pymc_subsample.steps.hierarchical.normal` -- the linear mixed model (the
  Normal likelihood with a sampled scale ``sigma``): the fit and the data term of every
  move exact from sufficient statistics (no row read while sampling), and the scale's
  own move (``scale``: its likelihood conditional, a Gamma in ``1 / sigma^2``, accepted
  by the prior's ratio), appended after the term's moves (``SCALE_MOVES``).

The scale is covered by sufficient statistics rather than by a subsampled test of its
own (a move on ``log sigma`` with Taylor sums in the rows' second coordinate): for the
Normal they are exact, cost ``O(G p + p^2)`` per move whatever ``N``, and leave no
remainder to bound; the other families with a sampled parameter (Student-t, Negative
Binomial, Gamma) have no such statistics and are not covered yet.

How a new group term plugs in (several grouping factors, random slopes): its recogniser appends a new term object to
:attr:`GroupStructure.terms <pymc_subsample.engine.groups.GroupStructure>` (with the
interface of :class:`~pymc_subsample.engine.groups.RandomIntercept`: its coordinates in
``q``, ``loc_scale``, ``effects``, ``with_effects``, ``describe``); the moves that
update it are new :class:`~pymc_subsample.steps.hierarchical.moves.GroupMove` or
:class:`~pymc_subsample.steps.hierarchical.moves.BlockMove` subclasses, each with its
``name`` (its count in ``DEFAULT_MOVES`` and the prefix of its stats) and the tuned
factor it adds to :class:`SweepState`; and the term's type gets its entry in
``SWEEP_MOVES``, the list of moves a sweep makes. No branch of the kernel or of the
steps changes. What a second term does extend is the arithmetic the moves share: the
fit's Taylor sums (:class:`~pymc_subsample.steps.hierarchical.fit.SweepFit`) and the
factorised test are written today for one random intercept (``terms[0]``), and take
each further term's contribution to a row's linear predictor. A family's own sampled
parameter plugs in as the Normal scale does: the structure's ``scale``, its moves in
``SCALE_MOVES`` (their counts in ``DEFAULT_SCALE_MOVES``), and the fit and data term
that can evaluate it (for the Normal, :mod:`~pymc_subsample.steps.hierarchical.normal`).
"""

from .gaussian import GaussianSweep
from .sweep import SWEEP_MOVES, HierarchicalSweep, SweepState

__all__ = ["GaussianSweep", "HierarchicalSweep", "SweepState", "SWEEP_MOVES", "sweep_for"]


def sweep_for(engine, structure):
    """The sweep kernel of ``structure``: the exact Gaussian sweep
    (:class:`~pymc_subsample.steps.hierarchical.gaussian.GaussianSweep`) for a Normal
    likelihood with several group terms or slopes (``structure.kernel == "gaussian"``),
    else the Taylor-sum sweep (:class:`HierarchicalSweep`)."""
    if structure.kernel == "gaussian":
        return GaussianSweep(engine, structure)
    return HierarchicalSweep(engine, structure)
