"""What every acceptance test of the kernels returns: its decision and the rows it read.

The steps read these two fields from the result of whichever test they run (the
sequential t-test of Korattikara, Chen & Welling 2014, the minibatch Barker test of Seita,
Pan, Chen & Canny 2017, the truncated SMH test of Cornish et al. 2019); each test's
result adds what the test itself reports. Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AcceptanceOutcome"]


@dataclass(frozen=True, slots=True)
class AcceptanceOutcome:
    """The decision of one acceptance test and the data it read (the base of
    :class:`~pymc_subsample.kernels.acceptance.austere.AustereResult`,
    :class:`~pymc_subsample.kernels.acceptance.barker.BarkerResult` and
    :class:`~pymc_subsample.kernels.scalable.smh.SMHResult`).

    Attributes
    ----------
    accept : bool
        Whether the proposal is accepted.
    data_used : int
        Rows whose log-likelihood terms the test evaluated (each result says how it
        counts them).
    """

    accept: bool
    data_used: int
