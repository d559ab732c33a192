"""Variance reduction of the likelihood estimates, and the running moments behind them.

* the control variates (Taylor proxies about the centre, in parameter or predictor
  coordinates, as in Bardenet, Doucet & Holmes 2017 and Cornish et al. 2019), their
  residuals, importance weights and variance check (:mod:`.control_variates`), and the
  predictor coordinates' NumPy part (:mod:`.predictor`);
* the minibatch estimators of the log-likelihood gradient for SGLD (plain, Welling & Teh
  2011; control variate, Baker, Fearnhead, Fox & Nemeth 2019, "Control variates for
  stochastic gradient MCMC"; SAGA and importance-sampled variants:
  :mod:`.gradient_estimators`);
* the one running mean / ``M2`` (or covariance) accumulator, merged batch by batch, that
  the acceptance tests and the proposals' adaptation use (Chan, Golub & LeVeque 1979;
  Welford 1962: :mod:`.streaming`).

Nothing here imports PyMC or PyTensor.
"""
