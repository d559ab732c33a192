"""Comparison models for the benchmarks and the reference-posterior tests.

Every builder returns ``(model, reference)``: a ``pymc.Model`` and a :class:`Reference`
holding the per-parameter posterior mean and sd (and their Monte Carlo standard errors),
flattened, with labels matching :func:`pymc_subsample.diagnostics.posterior_moments`
(``beta[0]``, ..., ``sigma``). ``Reference.source`` says where it comes from:

- ``posteriordb``: the 10,000 reference draws of the posteriordb project (Stan NUTS runs
  by its maintainers). Stan's 1-based ``beta[1]`` is mapped to ``beta[0]``. The folder is
  ``<repo>/../shared/posteriordb`` unless the environment variable ``PMS_POSTERIORDB``
  names another one.
- ``exact``: a conjugate posterior in closed form (``linear-1e5``).
- ``Laplace-t IS``: for the tall synthetic models (logistic, robust, hierarchical),
  self-normalised importance sampling of 4,000 draws from a multivariate t (10 degrees
  of freedom) at the posterior mode with the inverse Hessian as scale, weighted by the
  exact log posterior written in NumPy (independently of PyMC and of this package; the
  tests of the benchmark check it equals the PyMC model's log density up to a
  constant). Exact up to the reported Monte Carlo error; refused if the Pareto k of the
  weights exceeds 0.5 (measured: k < 0.35, ESS 2,400-3,700 of 4,000). Chosen over a long
  NUTS run because NUTS at 10^5-10^6 rows takes hours on the project's 2-core machine,
  while the importance sampler evaluates thousands of parameter vectors per pass over
  the data (one matrix product). Cross-check at N = 10^4: NUTS (4 x 2,500 draws) and the
  importance sampler agree within 0.02 sd on every mean and 3% on every sd.
- ``NUTS``: :func:`nuts_reference`, a long PyMC NUTS run (``NUTS_REF``) for models
  without a NumPy density; not used by the registry at present.

Computed references are cached in ``benchmarks/output/cache/`` (gitignored), keyed by the
model, its data settings and the reference settings; the first build takes from seconds
(10^4 rows) to about 20 minutes on a loaded machine (10^6 rows). Delete the folder to
recompute.

Models (``MODELS``):

=================  ========  ==================================================================
name               N rows    model
=================  ========  ==================================================================
logistic-1e4/5/6   10^4..6   ``y_i ~ Bernoulli(logit_p = x_i . beta)``, ``x_i ~ N(0, I_10)``,
                             ``beta_j ~ Normal(0, 1)`` (synthetic, d = 10; data generated in
                             chunks of 10^6 rows)
robust             10^5      ``y_i ~ StudentT(nu=4, mu = x_i . beta, sigma=1)``, intercept + 4
                             covariates, ``beta_j ~ Normal(0, 10)``; noise t_4 plus 1% gross
                             outliers
hierarchical       10^5      ``y_i ~ Bernoulli(logit_p = alpha[g_i] + x_i . beta)``, 20 groups,
                             ``alpha_g ~ Normal(mu_alpha, sigma_alpha)``, ``mu_alpha ~ N(0, 2)``,
                             ``sigma_alpha ~ HalfNormal(1)``, ``beta ~ N(0, 1)`` (3 covariates)
linear-1e5         10^5      ``y_i ~ Normal(x_i . beta, 1)`` (sigma known), ``beta ~ N(0, 10^2)``:
                             conjugate, exact reference
sblrc-blr ...      100..     the four posteriordb posteriors, exactly as
                             ``shared/posteriordb/README.md`` describes them
=================  ========  ==================================================================

Run ``python benchmarks/models.py`` to build every model and print its reference.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# the multi-chain ESS and the Monte Carlo standard errors of the references (re-exported)
from pymc_subsample.testing import ess_mean, flat_draws, mcse_mean_sd

REPO = Path(__file__).resolve().parents[1]
CACHE_DIR = REPO / "benchmarks" / "output" / "cache"
D_LOGISTIC = 10

# posteriordb folder -> short model name used by compare.py
POSTERIORDB = {
    "sblrc-blr": "sblrc-blr",
    "kidiq": "kidiq-kidscore_momiq",
    "earnings": "earnings-logearn_height",
    "nes1980": "nes1980-nes",
}

__all__ = [
    "Reference",
    "MODELS",
    "build",
    "posteriordb_dir",
    "posteriordb_available",
    "load_posteriordb",
    "posteriordb_model",
    "reference_from_draws",
    "ess_mean",
    "mcse_mean_sd",
    "logistic_data",
]


# ---------------------------------------------------------------------------------------
# references
# ---------------------------------------------------------------------------------------


@dataclass
class Reference:
    """Posterior mean and sd per scalar parameter component.

    Attributes
    ----------
    labels : list of str
        ``beta[0]``, ..., ``sigma`` (0-based, as ``diagnostics.posterior_moments``).
    mean, sd : ndarray
    mcse_mean, mcse_sd : ndarray
        Monte Carlo standard errors of ``mean`` and ``sd`` (0 for an exact reference).
    source : str
        ``posteriordb ...``, ``exact ...``, ``Laplace-t IS ...`` or ``NUTS ...`` (with
        details; ``[cached]`` when read from the cache).
    n_rows : int
        Number of data rows of the model.
    draws : dict, optional
        ``label -> (chains, draws)`` array when the reference is built from draws.
    """

    labels: list
    mean: np.ndarray
    sd: np.ndarray
    mcse_mean: np.ndarray
    mcse_sd: np.ndarray
    source: str
    n_rows: int
    draws: dict | None = field(default=None, repr=False)

    def index(self, labels):
        """Positions of ``labels`` in this reference (KeyError naming a missing label)."""
        pos = {lab: i for i, lab in enumerate(self.labels)}
        missing = [lab for lab in labels if lab not in pos]
        if missing:
            raise KeyError(f"labels {missing} not in the reference ({self.labels})")
        return np.array([pos[lab] for lab in labels], dtype=int)

    def as_table(self) -> str:
        lines = [f"reference ({self.source}), N = {self.n_rows}"]
        for i, lab in enumerate(self.labels):
            lines.append(
                f"  {lab:<14} mean {self.mean[i]: .6g} (mcse {self.mcse_mean[i]:.2g})   "
                f"sd {self.sd[i]:.6g} (mcse {self.mcse_sd[i]:.2g})"
            )
        return "\n".join(lines)


def reference_from_draws(draws: dict, source: str, n_rows: int) -> Reference:
    """A :class:`Reference` from ``label -> (chains, draws)`` arrays."""
    labels = list(draws)
    mean = np.array([np.mean(draws[k]) for k in labels])
    sd = np.array([np.std(np.asarray(draws[k]).ravel(), ddof=1) for k in labels])
    errs = np.array([mcse_mean_sd(draws[k]) for k in labels])
    return Reference(labels, mean, sd, errs[:, 0], errs[:, 1], source, int(n_rows), draws)


def _stan_label(name: str) -> str:
    """``beta[3]`` (Stan, 1-based) -> ``beta[2]``; scalars unchanged."""
    if "[" not in name:
        return name
    base, idx = name[:-1].split("[")
    return f"{base}[{','.join(str(int(i) - 1) for i in idx.split(','))}]"


# ---------------------------------------------------------------------------------------
# posteriordb
# ---------------------------------------------------------------------------------------


def posteriordb_dir() -> Path:
    """The posteriordb folder: ``$PMS_POSTERIORDB`` or ``<repo>/../shared/posteriordb``."""
    env = os.environ.get("PMS_POSTERIORDB")
    if env:
        return Path(env).expanduser().resolve()
    return REPO.parent / "shared" / "posteriordb"


def posteriordb_available(folder: str | None = None) -> bool:
    root = posteriordb_dir()
    folders = [folder] if folder else list(POSTERIORDB.values())
    return all(
        (root / f / "data.json.zip").is_file() and (root / f / "reference_draws.json.zip").is_file()
        for f in folders
    )


def _read_json_zip(path: Path):
    with zipfile.ZipFile(path) as zf:
        names = [n for n in zf.namelist() if not n.endswith("/")]
        if len(names) != 1:
            raise ValueError(f"{path}: expected one JSON file, found {names}")
        with zf.open(names[0]) as fh:
            return json.load(io.TextIOWrapper(fh, encoding="utf-8"))


def load_posteriordb(folder: str):
    """``(data, draws)`` of a posteriordb folder: the data dict and the reference draws as
    ``label -> (10, 1000)`` arrays with 0-based labels."""
    root = posteriordb_dir() / folder
    if not root.is_dir():
        raise FileNotFoundError(
            f"posteriordb folder {root} not found (set PMS_POSTERIORDB to the folder holding "
            f"{', '.join(POSTERIORDB.values())})"
        )
    data = _read_json_zip(root / "data.json.zip")
    chains = _read_json_zip(root / "reference_draws.json.zip")
    draws = {
        _stan_label(k): np.array([np.asarray(ch[k], dtype=float) for ch in chains])
        for k in chains[0]
    }
    return data, draws


def posteriordb_model(folder: str, data: dict):
    """The PyMC model of a posteriordb posterior, as ``shared/posteriordb/README.md``
    describes it. Coefficients are the vector ``beta`` and the scale ``sigma``."""
    import pymc as pm

    n = int(data["N"])
    if folder == "sblrc-blr":
        X = np.asarray(data["X"], dtype=float)
        y = np.asarray(data["y"], dtype=float)
        with pm.Model() as model:
            beta = pm.Normal("beta", 0.0, 10.0, shape=X.shape[1])
            sigma = pm.HalfNormal("sigma", 10.0)
            pm.Normal("y", mu=pm.math.dot(X, beta), sigma=sigma, observed=y)
    elif folder == "kidiq-kidscore_momiq":
        x = np.asarray(data["mom_iq"], dtype=float)
        y = np.asarray(data["kid_score"], dtype=float)
        with pm.Model() as model:
            beta = pm.Flat("beta", shape=2)
            sigma = pm.HalfCauchy("sigma", 2.5)
            pm.Normal("kid_score", mu=beta[0] + beta[1] * x, sigma=sigma, observed=y)
    elif folder == "earnings-logearn_height":
        x = np.asarray(data["height"], dtype=float)
        y = np.log(np.asarray(data["earn"], dtype=float))
        with pm.Model() as model:
            beta = pm.Flat("beta", shape=2)
            sigma = pm.HalfFlat("sigma")
            pm.Normal("log_earn", mu=beta[0] + beta[1] * x, sigma=sigma, observed=y)
    elif folder == "nes1980-nes":
        age = np.asarray(data["age_discrete"])
        X = np.column_stack(
            [
                np.ones(n),
                np.asarray(data["real_ideo"], dtype=float),
                np.asarray(data["race_adj"], dtype=float),
                (age == 2).astype(float),
                (age == 3).astype(float),
                (age == 4).astype(float),
                np.asarray(data["educ1"], dtype=float),
                np.asarray(data["gender"], dtype=float),
                np.asarray(data["income"], dtype=float),
            ]
        )
        y = np.asarray(data["partyid7"], dtype=float)
        with pm.Model() as model:
            beta = pm.Flat("beta", shape=X.shape[1])
            sigma = pm.HalfFlat("sigma")
            pm.Normal("partyid7", mu=pm.math.dot(X, beta), sigma=sigma, observed=y)
    else:
        raise KeyError(f"unknown posteriordb folder {folder!r}")
    return model


def _build_posteriordb(folder):
    data, draws = load_posteriordb(folder)
    model = posteriordb_model(folder, data)
    n = int(data["N"])
    return model, reference_from_draws(draws, f"posteriordb {folder} (10 x 1000 Stan draws)", n)


# ---------------------------------------------------------------------------------------
# synthetic tall models
# ---------------------------------------------------------------------------------------


def logistic_data(n, d=D_LOGISTIC, seed=0):
    """Synthetic logistic-regression rows ``(X, y, beta_true)``
    (:func:`pymc_subsample.datasets.make_logistic`)."""
    from pymc_subsample.datasets import make_logistic

    return make_logistic(n, d, seed=seed)


def logistic_model(n, seed=0):
    """``(model, X, y)``: the synthetic logistic regression (``beta ~ Normal(0, 1)``)."""
    import pymc as pm

    X, y, _ = logistic_data(n, seed=seed)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 1.0, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=pm.math.dot(X, beta), observed=y)
    return model, X, y


def robust_data(n=10**5, seed=1, nu=4.0, sigma=1.0, outlier_share=0.01):
    rng = np.random.default_rng(seed)
    k = 4
    X = np.column_stack([np.ones(n), rng.standard_normal((n, k))])
    beta_true = np.array([1.0, 2.0, -1.0, 0.5, 0.0])
    y = X @ beta_true + sigma * rng.standard_t(nu, n)
    bad = rng.random(n) < outlier_share
    y[bad] += rng.normal(0.0, 50.0, bad.sum())
    return X, y


ROBUST = {"nu": 4.0, "sigma": 1.0, "prior_sd": 10.0}


def robust_model(n=10**5, seed=1):
    """``(model, X, y)``: Student-t regression with fixed ``nu = 4``, ``sigma = 1``; t-noise
    plus 1% gross outliers (``N(0, 50^2)``)."""
    import pymc as pm

    X, y = robust_data(n, seed, ROBUST["nu"], ROBUST["sigma"])
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, ROBUST["prior_sd"], shape=X.shape[1])
        pm.StudentT("y", nu=ROBUST["nu"], mu=pm.math.dot(X, beta), sigma=ROBUST["sigma"],
                    observed=y)
    return model, X, y


HIER = {"n": 10**5, "groups": 20, "k": 3, "seed": 2}


def hierarchical_data(n=10**5, groups=20, k=3, seed=2):
    rng = np.random.default_rng(seed)
    g = rng.integers(0, groups, n)
    X = rng.standard_normal((n, k))
    alpha_true = rng.normal(-0.5, 0.7, groups)
    beta_true = rng.normal(0.0, 0.5, k)
    eta = alpha_true[g] + X @ beta_true
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.int64)
    return g, X, y


def hierarchical_model(n=10**5, groups=20, k=3, seed=2):
    """``(model, g, X, y)``: hierarchical logistic regression with integer group indices
    ``g`` (centred; every group has about n / groups rows, so the centred form is the
    efficient one)."""
    import pymc as pm

    g, X, y = hierarchical_data(n, groups, k, seed)
    with pm.Model() as model:
        mu_alpha = pm.Normal("mu_alpha", 0.0, 2.0)
        sigma_alpha = pm.HalfNormal("sigma_alpha", 1.0)
        alpha = pm.Normal("alpha", mu_alpha, sigma_alpha, shape=groups)
        beta = pm.Normal("beta", 0.0, 1.0, shape=k)
        pm.Bernoulli("y", logit_p=alpha[g] + pm.math.dot(X, beta), observed=y)
    return model, g, X, y


def linear_model_exact(n=10**5, d=5, seed=3, sigma=1.0, prior_sd=10.0):
    """Normal linear regression with known ``sigma`` and a Normal prior: the posterior is
    Normal with precision ``X'X / sigma^2 + I / prior_sd^2`` (conjugate, exact)."""
    import pymc as pm

    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.standard_normal((n, d - 1))])
    beta_true = rng.normal(0.0, 1.0, d)
    y = X @ beta_true + sigma * rng.standard_normal(n)
    prec = X.T @ X / sigma**2 + np.eye(d) / prior_sd**2
    cov = np.linalg.inv(prec)
    mean = cov @ (X.T @ y / sigma**2)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, prior_sd, shape=d)
        pm.Normal("y", mu=pm.math.dot(X, beta), sigma=sigma, observed=y)
    labels = [f"beta[{j}]" for j in range(d)]
    sd = np.sqrt(np.diag(cov))
    ref = Reference(labels, mean, sd, np.zeros(d), np.zeros(d), "exact (conjugate Normal)", n)
    return model, ref


# ---------------------------------------------------------------------------------------
# references for tall GLMs: importance sampling from the Laplace approximation
# ---------------------------------------------------------------------------------------


class NumpyPosterior:
    """A NumPy log posterior in the form :func:`pymc_subsample.center.find_center` reads.

    ``find_center`` takes a likelihood engine (duck-typed); this gives it the methods it
    calls for a posterior written in NumPy: ``logp_hessian(q) -> (value, grad, hess)`` of
    the whole log posterior stands for the likelihood sums, with a flat "prior" (the
    search only ever uses their sum). No warm start on a subsample (``n_rows = 0``).
    """

    n_rows = 0
    #: the Hessian comes with every evaluation: exact Newton steps
    cheap_hessian = True

    def __init__(self, ndim, logp_hessian):
        self.ndim = int(ndim)
        self._logp_hessian = logp_hessian

    def initial_q(self):
        return np.zeros(self.ndim)

    def full_loglik_hessian(self, q):
        return self._logp_hessian(q)

    def full_loglik_grad(self, q):
        value, grad, _ = self._logp_hessian(q)
        return value, grad

    def full_loglik(self, q):
        return self._logp_hessian(q)[0]

    def prior_hessian(self, q):
        return 0.0, np.zeros(self.ndim), np.zeros((self.ndim, self.ndim))

    def prior_and_grad(self, q):
        return 0.0, np.zeros(self.ndim)

    def prior(self, q):
        return 0.0


def posterior_mode(ndim, logp_hessian, *, start=None, tol=1e-10):
    """Posterior mode and inverse negative Hessian (the Laplace approximation) by the
    package's own mode search, :func:`pymc_subsample.center.find_center` (damped Newton,
    L-BFGS fallback), on a NumPy log posterior ``logp_hessian(q) -> (value, grad, hess)``.

    Returns the Laplace mean (the converged centre plus one more Newton step) and the
    covariance there."""
    from pymc_subsample.center import find_center

    center = find_center(NumpyPosterior(ndim, logp_hessian), start, tol=tol, warm_rows=None)
    if not center.converged:
        raise RuntimeError(f"the mode search did not converge ({center.method}).")
    return center.laplace()


class _GLMTarget:
    """Unnormalised log posterior of ``y_i ~ family(x_i . beta)``, ``beta ~ N(0, prior_sd^2)``
    in NumPy, written independently of PyMC, evaluated for many ``beta`` at once and in
    chunks of rows. Families: ``"logistic"`` and ``"student_t"`` (fixed nu, sigma)."""

    def __init__(self, X, y, family, prior_sd, nu=None, sigma=None, chunk=50_000):
        self.X, self.y, self.family = X, np.asarray(y, dtype=float), family
        self.prior_sd, self.nu, self.sigma, self.chunk = prior_sd, nu, sigma, chunk

    def _row_terms(self, eta, y):
        """Per-row log-likelihood (up to a constant), first and second derivative in eta."""
        if self.family == "logistic":
            p = 1.0 / (1.0 + np.exp(-eta))
            return y * eta - np.logaddexp(0.0, eta), y - p, -p * (1.0 - p)
        nu, s = self.nu, self.sigma
        r = (y - eta) / s
        q = nu + r * r
        ll = -0.5 * (nu + 1.0) * np.log1p(r * r / nu)
        return ll, (nu + 1.0) * r / (s * q), (nu + 1.0) * (r * r - nu) / (s * s * q * q)

    def grad_hess(self, beta):
        d = self.X.shape[1]
        lp = -0.5 * beta @ beta / self.prior_sd**2
        g = -beta / self.prior_sd**2
        h = -np.eye(d) / self.prior_sd**2
        for s in range(0, len(self.y), self.chunk):
            Xc, yc = self.X[s : s + self.chunk], self.y[s : s + self.chunk]
            ll, d1, d2 = self._row_terms(Xc @ beta, yc)
            lp += ll.sum()
            g += Xc.T @ d1
            h += (Xc * d2[:, None]).T @ Xc
        return lp, g, h

    def logp_many(self, B):
        """``(K,)`` log posterior for the rows of ``B`` ``(K, d)``."""
        out = -0.5 * np.sum(B * B, axis=1) / self.prior_sd**2
        for s in range(0, len(self.y), self.chunk):
            Xc, yc = self.X[s : s + self.chunk], self.y[s : s + self.chunk]
            eta = Xc @ B.T  # (rows, K)
            out += self._row_terms(eta, yc[:, None])[0].sum(axis=0)
        return out

    def mode(self):
        """Posterior mode and inverse negative Hessian (the package's mode search,
        :func:`pymc_subsample.center.find_center`, on this NumPy log posterior)."""
        return posterior_mode(self.X.shape[1], self.grad_hess)


class _HierTarget:
    """Unnormalised log posterior of the hierarchical logistic regression in NumPy, in the
    unconstrained coordinates ``theta = (mu_alpha, log sigma_alpha, alpha[G], beta[k])``
    (with the log-Jacobian of ``sigma_alpha``), evaluated for many ``theta`` at once."""

    def __init__(self, g, X, y, groups, chunk=50_000):
        self.g, self.X, self.y = g, X, np.asarray(y, dtype=float)
        self.G, self.k, self.chunk = groups, X.shape[1], chunk
        self.d = 2 + groups + self.k

    def labels(self):
        return (["mu_alpha", "sigma_alpha"] + [f"alpha[{j}]" for j in range(self.G)]
                + [f"beta[{j}]" for j in range(self.k)])

    def constrain(self, B):
        out = np.array(B, dtype=float, copy=True)
        out[:, 1] = np.exp(B[:, 1])
        return out

    def _prior(self, B):
        mu, ls = B[:, 0], B[:, 1]
        a, b = B[:, 2 : 2 + self.G], B[:, 2 + self.G :]
        sig = np.exp(ls)
        lp = -0.5 * mu**2 / 4.0 - 0.5 * sig**2 + ls  # N(0, 2), HalfNormal(1) + Jacobian
        lp += -0.5 * np.sum((a - mu[:, None]) ** 2, axis=1) / sig**2 - self.G * ls
        lp += -0.5 * np.sum(b * b, axis=1)
        return lp

    def logp_many(self, B):
        B = np.atleast_2d(B)
        out = self._prior(B)
        a, b = B[:, 2 : 2 + self.G], B[:, 2 + self.G :]
        for s in range(0, len(self.y), self.chunk):
            sl = slice(s, s + self.chunk)
            gc, Xc, yc = self.g[sl], self.X[sl], self.y[sl]
            eta = a[:, gc].T + Xc @ b.T  # (rows, K)
            out += (yc[:, None] * eta - np.logaddexp(0.0, eta)).sum(axis=0)
        return out

    def grad(self, th):
        mu, ls = th[0], th[1]
        a, b = th[2 : 2 + self.G], th[2 + self.G :]
        sig2 = np.exp(2 * ls)
        gr = np.zeros(self.d)
        gr[0] = -mu / 4.0 + np.sum(a - mu) / sig2
        gr[1] = -sig2 + 1.0 + np.sum((a - mu) ** 2) / sig2 - self.G
        gr[2 : 2 + self.G] = -(a - mu) / sig2
        gr[2 + self.G :] = -b
        eta = a[self.g] + self.X @ b
        r = self.y - 1.0 / (1.0 + np.exp(-eta))
        gr[2 : 2 + self.G] += np.bincount(self.g, weights=r, minlength=self.G)
        gr[2 + self.G :] += self.X.T @ r
        return gr

    def hessian(self, th, eps=1e-5):
        """Hessian by central differences of the analytic gradient (symmetrised)."""
        h = np.empty((self.d, self.d))
        for j in range(self.d):
            e = np.zeros(self.d)
            e[j] = eps
            h[:, j] = (self.grad(th + e) - self.grad(th - e)) / (2 * eps)
        return 0.5 * (h + h.T)

    def mode(self):
        """Posterior mode and inverse negative Hessian (the package's mode search,
        :func:`pymc_subsample.center.find_center`, on this NumPy log posterior)."""
        return posterior_mode(
            self.d, lambda t: (float(self.logp_many(t)[0]), self.grad(t), self.hessian(t)))


def _pareto_khat(logw):
    """Shape ``k`` of the generalised Pareto tail of the importance weights (the fit of
    Zhang & Stephens 2009 with the weak prior of PSIS, Vehtari et al. 2024, as in ArviZ's
    ``psislw``): ``k < 0.5`` means the importance-sampling estimates are reliable.
    Written here because ArviZ 1.x (PyMC 6) has no public PSIS for a plain vector of log
    weights (``psislw`` is ArviZ 0.x only)."""
    x = np.sort(logw - logw.max())
    n = x.size
    m = int(np.ceil(min(0.2 * n, 3.0 * np.sqrt(n))))
    cut = x[-m - 1]
    tail = np.exp(x[-m:]) - np.exp(cut)
    tail = np.sort(tail[tail > 0])
    n_t = tail.size
    if n_t < 5:
        return 0.0
    m_est = 30 + int(np.sqrt(n_t))
    b = 1.0 - np.sqrt(m_est / (np.arange(1, m_est + 1, dtype=float) - 0.5))
    b /= 3.0 * tail[int(n_t / 4 + 0.5) - 1]
    b += 1.0 / tail[-1]
    k = np.log1p(-b[:, None] * tail).mean(axis=1)
    len_scale = n_t * (np.log(-(b / k)) - k - 1.0)
    wts = 1.0 / np.exp(len_scale - len_scale[:, None]).sum(axis=1)
    b_post = np.sum(b * wts)
    k_post = np.log1p(-b_post * tail).mean()
    return float((n_t * k_post + 10 * 0.5) / (n_t + 10))


def laplace_is_reference(target, labels, n_rows, *, n_draws=4000, df=10.0,
                         seed=0, block=250):
    """Reference from self-normalised importance sampling with a multivariate-t proposal
    (``df`` degrees of freedom) centred at the posterior mode with the inverse Hessian as
    scale, in the target's unconstrained coordinates (moments of the constrained values).
    Exact up to Monte Carlo error (reported): the weights use the log posterior itself.
    Raises if the Pareto ``k`` of the weights is above 0.5 (unreliable)."""
    import scipy.stats

    mode, cov = target.mode()
    d = mode.size
    prop = scipy.stats.multivariate_t(loc=mode, shape=cov, df=df, seed=seed)
    B = prop.rvs(size=n_draws).reshape(n_draws, d)
    logq = prop.logpdf(B)
    logp = np.concatenate(
        [target.logp_many(B[s : s + block]) for s in range(0, n_draws, block)]
    )
    logw = logp - logq
    if hasattr(target, "constrain"):
        B = target.constrain(B)
    w = np.exp(logw - logw.max())
    w /= w.sum()
    mean = w @ B
    dev = B - mean
    var = w @ dev**2
    sd = np.sqrt(var)
    mcse_mean = np.sqrt((w**2) @ dev**2)
    mcse_var = np.sqrt((w**2) @ (dev**2 - var) ** 2)
    mcse_sd = mcse_var / (2.0 * sd)
    ess = 1.0 / np.sum(w**2)
    khat = _pareto_khat(logw)
    if khat > 0.5:
        raise RuntimeError(f"importance-sampling reference unreliable: Pareto k = {khat:.2f}")
    source = (f"Laplace-t IS ({n_draws} draws, ESS {ess:.0f}, Pareto k {khat:.2f})")
    return Reference(list(labels), mean, sd, mcse_mean, mcse_sd, source, int(n_rows))


# ---------------------------------------------------------------------------------------
# cached references
# ---------------------------------------------------------------------------------------

NUTS_REF = {"chains": 4, "draws": 1000, "tune": 1000, "target_accept": 0.9}
IS_REF = {"n_draws": 4000, "df": 10.0, "seed": 0}


def _cache_path(key: str, settings: dict) -> Path:
    h = hashlib.sha1(json.dumps([key, settings], sort_keys=True).encode()).hexdigest()[:10]
    return CACHE_DIR / f"{key}-{h}.npz"


def _cached(key: str, settings: dict, compute, verbose=True) -> Reference:
    """Read the reference ``key`` from the cache or compute and store it."""
    path = _cache_path(key, settings)
    if path.is_file():
        z = np.load(path, allow_pickle=False)
        return Reference(
            [str(s) for s in z["labels"]], z["mean"], z["sd"], z["mcse_mean"], z["mcse_sd"],
            str(z["source"]) + " [cached]", int(z["n_rows"]),
        )
    import time

    if verbose:
        print(f"[models] computing the reference {key} (cached in {path})", flush=True)
    t0 = time.perf_counter()
    ref = compute()
    ref.source += f", {time.perf_counter() - t0:.0f} s"
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez(
        tmp, labels=np.array(ref.labels), mean=ref.mean, sd=ref.sd, mcse_mean=ref.mcse_mean,
        mcse_sd=ref.mcse_sd, source=np.array(ref.source), n_rows=np.array(ref.n_rows),
    )
    os.replace(tmp, path)
    return ref


def nuts_reference(model, key: str, n_rows: int, *, cores=1) -> Reference:
    """Reference from a long NUTS run (``NUTS_REF``), cached under ``key`` (which must
    identify the model and its data: name, N, seed)."""

    def compute():
        import pymc as pm

        with model:
            idata = pm.sample(
                draws=NUTS_REF["draws"], tune=NUTS_REF["tune"], chains=NUTS_REF["chains"],
                cores=cores, target_accept=NUTS_REF["target_accept"], random_seed=20240501,
                progressbar=False, compute_convergence_checks=False,
            )
        draws = flat_draws(idata)
        ess = min(ess_mean(v) for v in draws.values())
        if ess < 400:
            raise RuntimeError(f"NUTS reference for {key}: min ESS {ess:.0f} < 400; not cached.")
        ref = reference_from_draws(
            draws, f"NUTS {NUTS_REF['chains']}x{NUTS_REF['draws']} (min ESS {ess:.0f})", n_rows
        )
        ref.draws = None
        return ref

    return _cached(key, NUTS_REF, compute)


# ---------------------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------------------


def _logistic(n):
    def build_():
        model, X, y = logistic_model(n)
        labels = [f"beta[{j}]" for j in range(X.shape[1])]
        ref = _cached(
            f"logistic-n{n}-d{D_LOGISTIC}-seed0", IS_REF,
            lambda: laplace_is_reference(_GLMTarget(X, y, "logistic", 1.0), labels, n, **IS_REF),
        )
        return model, ref

    return build_


def _robust():
    model, X, y = robust_model()
    labels = [f"beta[{j}]" for j in range(X.shape[1])]
    target = _GLMTarget(X, y, "student_t", ROBUST["prior_sd"], nu=ROBUST["nu"],
                        sigma=ROBUST["sigma"])
    ref = _cached("robust-n100000-seed1", IS_REF,
                  lambda: laplace_is_reference(target, labels, len(y), **IS_REF))
    return model, ref


def _hierarchical():
    model, g, X, y = hierarchical_model(**HIER)
    target = _HierTarget(g, X, y, HIER["groups"])
    key = "hierarchical-n{n}-g{groups}-k{k}-seed{seed}".format(**HIER)
    ref = _cached(key, IS_REF,
                  lambda: laplace_is_reference(target, target.labels(), len(y), **IS_REF))
    return model, ref


MODELS = {
    "logistic-1e4": _logistic(10**4),
    "logistic-1e5": _logistic(10**5),
    "logistic-1e6": _logistic(10**6),
    "robust": _robust,
    "hierarchical": _hierarchical,
    "linear-1e5": linear_model_exact,
    **{short: (lambda f=folder: _build_posteriordb(f)) for short, folder in POSTERIORDB.items()},
}


def build(name: str):
    """``(model, reference)`` for a model of ``MODELS``."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    return MODELS[name]()


if __name__ == "__main__":  # pragma: no cover
    import sys

    for name in sys.argv[1:] or list(MODELS):
        m, r = build(name)
        print(f"== {name}")
        print(r.as_table())
