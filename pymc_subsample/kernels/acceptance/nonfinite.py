"""Non-finite log ratios in the minibatch acceptance tests.

Shared by the sequential t-test of Korattikara, Chen & Welling (2014), "Austerity in
MCMC Land: Cutting the Metropolis-Hastings Budget" (:mod:`pymc_subsample.kernels.acceptance.austere`)
and the minibatch Barker test of Seita, Pan, Chen & Canny (2017), "An Efficient Minibatch
Acceptance Test for Metropolis-Hastings" (:mod:`pymc_subsample.kernels.acceptance.barker`). Neither
paper says what to do when the data-free log ratio or a per-row term is not finite; both
tests then reject at once, without statistics, and tell apart the two cases below.
"""

from __future__ import annotations

import numpy as np

__all__ = ["undecidable"]


def undecidable(values) -> bool:
    """Whether a non-finite log ratio or batch of terms leaves the decision undecidable.

    Called when the data-free log ratio ``log_ratio_o1``, or the sum of a batch of
    per-row terms ``l_i = log p(x_i | theta') - log p(x_i | theta)``, is not finite. The
    test rejects in every case; this says whether that rejection is the exact MH (or
    Barker) decision:

    * ``-inf`` (zero prior or reverse-proposal density at ``theta'``, or a row with zero
      likelihood at ``theta'``), with no NaN or ``+inf``: the full-data log ratio is
      ``-inf`` whatever the unseen rows hold, so rejecting is exact: ``False``.
    * a NaN or ``+inf`` (zero density at the *current* state, or an overflow): the
      decision cannot be made, and the test rejects defensively so that the chain never
      moves to a point whose density was not evaluated: ``True`` (the step warns).
    * finite terms whose sum overflowed: ``True`` as well.

    Parameters
    ----------
    values : float or numpy.ndarray
        ``log_ratio_o1``, or the batch's terms.

    Returns
    -------
    bool
        True when the test must report the rejection as non-finite (``nonfinite=True``),
        False when it is the exact decision.
    """
    v = np.asarray(values)
    if np.isnan(v).any() or np.isposinf(v).any():
        return True
    return not np.isneginf(v).any()  # no -inf: finite terms whose sum overflowed
