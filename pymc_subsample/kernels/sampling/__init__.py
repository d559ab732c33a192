"""Row sampling: which data rows a test evaluates.

* rows without replacement, drawn incrementally, for the growing minibatches of the
  sequential tests, and i.i.d. rows by importance (:mod:`.rows`);
* rows with given weights, step 2 of Algorithm 1 of Cornish et al. (2019), "Scalable
  Metropolis-Hastings for Exact Bayesian Inference with Large Datasets": Walker's alias
  table (:mod:`.alias`) and the inverse-cdf table on an integer grid (:mod:`.inverse_cdf`),
  over what they share: the weights' checks and the table protocol (:mod:`.table`).

Nothing here imports PyMC or PyTensor; every sampler draws from the ``rng`` it is given.
"""
