"""After the draws: model comparison, log-likelihoods and predictive checks on tall data,
without ``N x draws`` arrays.

- :func:`~pymc_subsample.workflow.loo.loo` and :func:`~pymc_subsample.workflow.loo.loo_update`:
  PSIS-LOO from a random subsample of rows with the difference estimator (Magnusson et al.,
  ICML 2019 / AISTATS 2020), returning ArviZ's own ELPD object for ``az.compare``;
- :func:`~pymc_subsample.workflow.loglik.compute_log_likelihood`: a ``log_likelihood``
  group for a subset of rows;
- :func:`~pymc_subsample.workflow.predictive.sample_posterior_predictive`: posterior
  predictive draws for a subset of rows, with the matching ``observed_data``.

All of them evaluate the model through the likelihood engine, chunk by chunk, from data in
RAM, a ``numpy.memmap`` or Zarr. The log-likelihood is always per row and unscaled (no
``total_size`` factor).
"""

from .loglik import compute_log_likelihood
from .loo import loo, loo_update
from .predictive import sample_posterior_predictive

__all__ = ["compute_log_likelihood", "loo", "loo_update", "sample_posterior_predictive"]
