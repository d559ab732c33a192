"""The package's exception types, in one public module.

============================  =============================================================
``InvalidParameterError``     a bad argument (a ``ValueError`` and a ``TypeError``;
                              :mod:`pymc_subsample.validation`)
``ModelNotSupportedError``    the model cannot be subsampled row by row
``InvalidDataError``          the data cannot be sampled as they are (or changed since
                              the step was built)
``BoundViolationError``       ScalableMH's bound constants do not bound the rows
``DataFileChangedError``      a data file on disk changed under a step
``DataMismatchError``         a model's observed data are not a sampling result's
                              ``observed_data`` (``loo``, ``compute_log_likelihood``, ...)
``SGLDDivergenceError``       an SGLD chain diverged (a PyMC ``SamplingError``)
============================  =============================================================

All but ``SGLDDivergenceError`` are ``ValueError`` subclasses. The types whose modules
need PyMC are imported when first used, so ``import pymc_subsample.errors`` is light.
"""

from importlib import import_module

__all__ = [
    "InvalidParameterError",
    "ModelNotSupportedError",
    "InvalidDataError",
    "BoundViolationError",
    "DataFileChangedError",
    "DataMismatchError",
    "SGLDDivergenceError",
]

#: where each type is defined
_WHERE = {
    "InvalidParameterError": "pymc_subsample.kernels._validation",
    "ModelNotSupportedError": "pymc_subsample.engine.analysis",
    "InvalidDataError": "pymc_subsample.engine.analysis",
    "BoundViolationError": "pymc_subsample.kernels.scalable.thinning",
    "DataFileChangedError": "pymc_subsample.out_of_core",
    "DataMismatchError": "pymc_subsample.workflow.loglik",
    "SGLDDivergenceError": "pymc_subsample.steps.sgld",
}


def __getattr__(name):
    if name in _WHERE:
        value = getattr(import_module(_WHERE[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pymc_subsample.errors' has no attribute '{name}'")


def __dir__():
    return __all__
