"""pymc-subsample: subsampling MCMC step methods for PyMC on tall data.

    import pymc as pm, pymc_subsample as pms
    with model:
        idata = pm.sample(step=pms.BarkerMinibatch())   # or AustereMH(), ScalableMH()

The step methods (and everything that needs PyMC) are imported lazily, so the pure
NumPy kernels in :mod:`pymc_subsample.kernels` load without PyMC.
"""

from importlib import import_module

__version__ = "0.1.0"

_LAZY = {
    "LikelihoodEngine": "pymc_subsample.engine",
    "ControlVariate": "pymc_subsample.kernels.variance.control_variates",
    "ModelNotSupportedError": "pymc_subsample.errors",
    "InvalidDataError": "pymc_subsample.errors",
    "InvalidParameterError": "pymc_subsample.errors",
    "BoundViolationError": "pymc_subsample.errors",
    "DataFileChangedError": "pymc_subsample.errors",
    "DataMismatchError": "pymc_subsample.errors",
    "errors": "pymc_subsample.errors",
    "validation": "pymc_subsample.validation",
    "AustereMH": "pymc_subsample.steps.austere",
    "BarkerMinibatch": "pymc_subsample.steps.barker",
    "ScalableMH": "pymc_subsample.steps.scalable",
    "SGLD": "pymc_subsample.steps.sgld",
    "SGLDDivergenceError": "pymc_subsample.errors",
    "consensus_sample": "pymc_subsample.consensus.run",
    "design_austerity_test": "pymc_subsample.kernels.acceptance.austere_design",
    "datasets": "pymc_subsample.datasets",
    "diagnostics": "pymc_subsample.diagnostics",
    "proposals": "pymc_subsample.proposals",
    "out_of_core": "pymc_subsample.out_of_core",
    "passes": "pymc_subsample.passes",
    "loo": "pymc_subsample.workflow",
    "loo_update": "pymc_subsample.workflow",
    "compute_log_likelihood": "pymc_subsample.workflow",
    "sample_posterior_predictive": "pymc_subsample.workflow",
    "advise": "pymc_subsample.advice",
    "check_step": "pymc_subsample.step_checks",
    "steps": "pymc_subsample.steps",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name):
    if name in _LAZY:
        module = import_module(_LAZY[name])
        value = module if module.__name__.endswith("." + name) else getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pymc_subsample' has no attribute '{name}'")


def __dir__():
    return __all__
