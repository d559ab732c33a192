"""Pure NumPy/SciPy kernels: acceptance tests, row sampling, Poisson thinning.

Nothing in this sub-package imports PyMC or PyTensor; every kernel takes the
``numpy.random.Generator`` it may draw from and callables that evaluate data rows.
"""
