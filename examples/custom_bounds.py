"""Your own bounds for ScalableMH, worked out for a probit regression.

``bounds="auto"`` recognises the probit link too (``p=pm.math.invprobit(eta)``); the
example derives the same constants by hand, so that its answer can be checked against the
automatic one (``tests/test_custom_bounds.py`` does), and it is the template for a model
no rule covers.

ScalableMH needs, for every data row ``i``, a constant ``psi_i`` that bounds every
(k+1)-th partial derivative of ``U_i(theta) = -log p(y_i | theta)`` over the whole
unconstrained space (Cornish et al. 2019, "Scalable Metropolis-Hastings for exact
Bayesian inference with large datasets", eq. 12), ``k`` the Taylor order. Pass them as
``bounds=callable`` (``bounds(order) -> array of N constants``) or as the array itself.

The probit row is ``U_i(beta) = -g(s_i x_i . beta)`` with ``g = log Phi`` and
``s_i = 2 y_i - 1``, so each (k+1)-th partial is ``-s_i^(k+1) g^(k+1)(t) x_ia x_ib ...``
and

    psi_i = sup_t |g^(k+1)(t)| * M_i^(k+1),    M_i = max_j |x_ij|.

With ``m = phi / Phi`` (the inverse Mills ratio): ``g' = m``, ``g'' = -m (t + m)``,
``g''' = m (t + m)(t + 2 m) - m``. Both suprema are finite (``|g''| < 1``); we take them
on a fine grid with a safety factor. ``bounds=`` takes the paper's eq. 12 form, so the
step uses ``bound_form="cornish"``; a drawn row that broke its bound would raise
``BoundViolationError``, never sample wrongly.

Run: python examples/custom_bounds.py   (N = 10^5, a few seconds after compilation)
"""

from __future__ import annotations

import numpy as np
from scipy.special import log_ndtr


def probit_derivative_sup(m: int) -> float:
    """``sup_t |d^m/dt^m log Phi(t)|`` for ``m`` = 2 or 3 (grid on [-40, 40], step 1e-3,
    times 1.01: the derivatives are smooth and tend to 0 or -1 in the tails)."""
    t = np.linspace(-40.0, 40.0, 80_001)
    mills = np.exp(-0.5 * t * t - 0.5 * np.log(2 * np.pi) - log_ndtr(t))
    d2 = -mills * (t + mills)
    d3 = mills * (t + mills) * (t + 2 * mills) - mills
    return 1.01 * float(np.max(np.abs(d2 if m == 2 else d3)))


def probit_bounds(X):
    """``bounds(order) -> psi`` for ``pm.Bernoulli(p=Phi(X @ beta))`` (eq. 12)."""
    M = np.abs(np.asarray(X, dtype=float)).max(axis=1)

    def bounds(order):
        return probit_derivative_sup(order + 1) * M ** (order + 1)

    return bounds


def probit_model(n=100_000, seed=0):
    import pymc as pm

    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.standard_normal((n, 2))])
    beta_true = np.array([-0.3, 0.8, -0.5])
    y = (rng.random(n) < np.exp(log_ndtr(X @ beta_true))).astype(np.int64)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 2.0, shape=3)
        pm.Bernoulli("y", p=pm.math.invprobit(pm.math.dot(X, beta)), observed=y)
    return model, X


def main():
    import arviz as az
    import pymc as pm

    import pymc_subsample as pms

    model, X = probit_model()
    for label, bounds in [("bounds=probit_bounds(X)", probit_bounds(X)),
                          ('bounds="auto"', "auto")]:
        with model:
            step = pms.ScalableMH(bounds=bounds)
            idata = pm.sample(draws=2000, tune=1000, chains=2, step=step, random_seed=1)
        print(f"\n{label}:")
        print(az.summary(idata, var_names=["beta"]))
        stats = idata.sample_stats if hasattr(idata, "sample_stats") else idata["sample_stats"]
        used = float(np.mean(stats["data_used"].values))
        print(f"rows read per step: {used:.2f} of {len(X):,}")


if __name__ == "__main__":
    main()
