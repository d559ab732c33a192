"""Argument checks and the bad-argument error, public (pure Python and NumPy).

The public name of :mod:`pymc_subsample.kernels._validation`, where the rules are written
once: every ``check_*`` helper raises :class:`InvalidParameterError`, which is both a
``ValueError`` and a ``TypeError`` (``except ValueError`` and
``pytest.raises(ValueError)`` keep working). A step method, proposal or control variate
of your own can use the same checks, so that its refusals read like the package's::

    from pymc_subsample.validation import check_positive
    self.step_size = check_positive("step_size", step_size, strict=True)

The package's other exception types are in :mod:`pymc_subsample.errors`.
"""

# the names and their list are written once, in kernels/_validation.py
from .kernels._validation import *  # noqa: F403
from .kernels._validation import __all__  # noqa: F401
