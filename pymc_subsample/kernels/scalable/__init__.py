"""ScalableMH's test, bounds and thinning: Cornish, Vanetti, Bouchard-Cote, Deligiannidis
& Doucet (2019), "Scalable Metropolis-Hastings for Exact Bayesian Inference with Large
Datasets".

* the data tests by Poisson thinning and the Poisson estimator (:mod:`.thinning`) and the
  truncated SMH test around them (:mod:`.smh`);
* the step factors ``phi`` (eq. 13 and the whitened and path forms: :mod:`.phi`);
* the per-row constants (eq. 12: :mod:`.bounds`), the region bounds over an interval of
  the linear predictor (:mod:`.region`) with the interval arithmetic they use
  (:mod:`.interval`), and the derivative bounds of the Categorical families' rows
  (several scalars per row): softmax rows (:mod:`.softmax`) and ordered rows
  (:mod:`.ordered`). The families themselves, these included
  (:mod:`pymc_subsample.kernels.families.categorical`), are
  :mod:`pymc_subsample.kernels.families`.

Nothing here imports PyMC or PyTensor.
"""
