"""Pure NumPy/SciPy kernels: acceptance tests, row sampling, Poisson thinning.

Nothing in this sub-package imports PyMC or PyTensor; every kernel takes the
``numpy.random.Generator`` it may draw from and callables that evaluate data rows.

Split by concern:

* :mod:`.acceptance`: the minibatch acceptance tests of AustereMH and BarkerMinibatch;
* :mod:`.scalable`: ScalableMH's test, bounds and thinning (Cornish et al. 2019), with
  :mod:`.families`, the GLM families those bounds know, and their registry;
* :mod:`.sampling`: row sampling (without replacement, alias and inverse-cdf tables);
* :mod:`.variance`: control variates, gradient estimators and running moments;
* :mod:`.sgld` (SGLD's update and schedules), :mod:`.hierarchical` (the NumPy part of
  the blocked hierarchical sweep) and :mod:`._validation` (the shared argument checks,
  public as :mod:`pymc_subsample.validation`).
"""
