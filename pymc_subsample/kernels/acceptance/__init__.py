"""The minibatch acceptance tests of AustereMH and BarkerMinibatch, as pure functions.

* the sequential t-test of Korattikara, Chen & Welling (2014), "Austerity in MCMC Land:
  Cutting the Metropolis-Hastings Budget" (Algorithm 1: :mod:`.austere`), its error and
  data use (Sec. 5.1: :mod:`.austere_error`, :mod:`.austere_dp`) and its optimal design
  (Sec. 5.2: :mod:`.austere_design`);
* the minibatch Barker test of Seita, Pan, Chen & Canny (2017), "An Efficient Minibatch
  Acceptance Test for Metropolis-Hastings" (Algorithm 1: :mod:`.barker`) and its
  correction distribution (Sec. 4, Appendix C.1: :mod:`.barker_correction`);
* what both share: the error of the normal approximation in the acceptance probability
  (:mod:`.clt_error`) and the handling of non-finite log ratios (:mod:`.nonfinite`).

Nothing here imports PyMC or PyTensor.
"""
