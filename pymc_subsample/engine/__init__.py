"""The likelihood engine: a PyMC model's PyTensor graphs -> batch functions of data rows.

Layers, each its own module:

- :mod:`~pymc_subsample.engine.analysis`: which models can be subsampled and where their
  data rows are (refusals with :class:`ModelNotSupportedError`, data fingerprints);
- :mod:`~pymc_subsample.engine.batch_graph`: graph surgery, the per-row log-likelihood
  rebuilt on a batch of rows, and its derivatives;
- :mod:`~pymc_subsample.engine.evaluate`: the compiled functions, one table, and the
  three ways of calling them (a batch of rows, rows in chunks, all rows);
- :mod:`~pymc_subsample.engine.likelihood`: :class:`LikelihoodEngine`, which puts them
  together for a step;
- :mod:`~pymc_subsample.engine.glm` and :mod:`~pymc_subsample.engine.predictor`:
  generalised linear likelihoods recognised in the graph, and their predictor
  coordinates, for ScalableMH's bounds and the control variates.
"""

from .analysis import InvalidDataError, ModelNotSupportedError, RowData
from .evaluate import compile_mode
from .likelihood import LikelihoodEngine

__all__ = ["InvalidDataError", "LikelihoodEngine", "ModelNotSupportedError", "RowData", "compile_mode"]
