"""Shared models, fixtures and sampling helpers of the test suite.

The statistics helpers (groups of a sampling result, ESS, MCSE, batch means) are in
:mod:`pymc_subsample.testing`, shared with the benchmarks. This file holds what only the
tests use:

* paths: ``REPO`` (the repository root), ``POSTERIORDB`` (the posteriordb reference
  folder, ``$PMS_POSTERIORDB`` or ``<repo>/../shared/posteriordb``);
* models, as factory functions (a test that changes a seed, a prior or the data changes
  its own model only): :func:`logistic_data`, :func:`bernoulli_logit_draws`,
  :func:`logistic_model`, :func:`make_logistic_model`, :func:`hierarchical_logistic`,
  :func:`hierarchical_normal`, :func:`normal_mean_model`, :func:`linear_regression`;
* kernel helpers: :class:`PermutationSampler`;
* sampling helpers: :func:`run_sample`, :func:`sampler_warnings`, :func:`steps_per_draw`,
  :func:`scalable_mh_accepting_every_proposal`;
* the reference posteriors: :func:`benchmark_models` (``benchmarks/models.py``),
  :func:`posteriordb`, :func:`posteriordb_reference`, :func:`posteriordb_available`, the
  mark :data:`requires_posteriordb`;
* fixtures: ``earnings_reference`` (a posteriordb reference two step modules use).

Test modules import the functions with ``from tests.conftest import ...`` (the test
folders are packages, see ``tests/__init__.py``).
"""

from __future__ import annotations

import dataclasses

import functools
import importlib.util
import inspect
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]

# ``from helpers import ...``, the idiom of the flat layout, keeps working in any test file
if str(REPO / "tests") not in sys.path:
    sys.path.append(str(REPO / "tests"))


# ====================================================================== sampling helpers


def run_sample(model, step, *, draws, tune, chains, seed, cores=1, **kw):
    """``pm.sample`` as the step tests call it: no progress bar, no convergence checks."""
    import pymc as pm

    with model:
        return pm.sample(
            draws=draws,
            tune=tune,
            step=step,
            chains=chains,
            cores=cores,
            random_seed=seed,
            progressbar=kw.pop("progressbar", False),
            compute_convergence_checks=False,
            **kw,
        )


def sampler_warnings(idata, match=""):
    """Messages of the ``SamplerWarning``s a step put in its ``warning`` stat, per chain
    (sample with ``keep_warning_stat=True``)."""
    from pymc_subsample.testing import sample_stats

    stat = sample_stats(idata)["warning"].values
    out = []
    for chain in stat:
        out.append([w.message for w in chain.ravel() if w is not None and match in w.message])
    return out


def steps_per_draw(method) -> int:
    """Markov transitions per draw of a step (an instance, or a class or its name at its
    defaults): the draw's ``data_used`` can reach this many times ``N``."""
    import pymc_subsample as pms

    if not isinstance(method, (str, type)):
        return int(method.steps_per_draw)
    cls = getattr(pms, method) if isinstance(method, str) else method
    param = inspect.signature(cls).parameters.get("steps_per_draw")
    if param is None:
        return 1
    # None: the step picks (BarkerMinibatch: 3 joint moves, or 1 hierarchical sweep)
    return 3 if param.default is None else int(param.default)


def scalable_mh_accepting_every_proposal():
    """ScalableMH that accepts every proposal (a deliberately broken sampler: the
    correctness tests must catch it)."""
    from pymc_subsample import ScalableMH

    class AcceptsEveryProposal(ScalableMH):
        def _decide(self, q, q_prop, log_prior_ratio, log_qratio):
            d = super()._decide(q, q_prop, log_prior_ratio, log_qratio)
            return dataclasses.replace(d, accepted=True)

    return AcceptsEveryProposal


# ====================================================================== kernels


class PermutationSampler:
    """Exact sampling without replacement for the kernels' ``sampler=``: prefixes of one
    uniform random permutation.

    Same distribution of row sets as ``kernels.sampling.rows.RowSampler``, cheaper for many
    repetitions on a small population.
    """

    def __init__(self, n_total, rng):
        self.n_total = n_total
        self.n_drawn = 0
        self._perm = rng.permutation(n_total)

    def draw(self, m):
        m = min(int(m), self.n_total - self.n_drawn)
        rows = self._perm[self.n_drawn : self.n_drawn + m]
        self.n_drawn += m
        return rows


# ====================================================================== models


def bernoulli_logit_draws(rng, eta):
    """``y_i ~ Bernoulli(1 / (1 + exp(-eta_i)))`` as int64, one uniform of ``rng`` a row."""
    eta = np.asarray(eta)
    return (rng.random(eta.shape[0]) < 1.0 / (1.0 + np.exp(-eta))).astype(np.int64)


def logistic_data(rng, n, beta, *, intercept=0.0, dtype=None):
    """Logistic-regression rows from ``rng``: covariates ``X = rng.normal(size=(n, k))``
    (a vector ``x`` of ``n`` for a scalar ``beta``), cast to ``dtype`` if given, then
    ``y`` by :func:`bernoulli_logit_draws` with ``eta = intercept + X @ beta``. Returns
    ``(X, y)``; ``rng`` has moved on (a test may draw more from it)."""
    beta = np.asarray(beta, dtype=float)
    X = rng.normal(size=(n,) + beta.shape)
    if dtype is not None:
        X = X.astype(dtype)
    eta = intercept + (X * beta if beta.ndim == 0 else X @ beta)
    return X, bernoulli_logit_draws(rng, eta)


def logistic_model(X, y, *, prior_sd=1.0, intercept_sd=None, coef="b", n_coef=None,
                   matmul=False, link=None):
    """``y ~ Bernoulli(logit_p = a + X @ b)`` with ``b ~ Normal(0, prior_sd)`` (named
    ``coef``; a scalar for a 1-D ``X``, then ``eta = a + b * x``) and, if ``intercept_sd``
    is given, ``a ~ Normal(0, intercept_sd)`` (created first).

    ``X`` may be a memmap or a ``pms.out_of_core.rows`` constant; the length of ``b`` is
    ``n_coef`` if given, else ``X.shape[1]`` (symbolic for a PyTensor constant).

    ``matmul``: the linear predictor as ``pt.as_tensor(X) @ b`` (a ``Matmul`` node)
    instead of ``pm.math.dot(X, b)`` (a ``Dot``); the engine reads the graph as written,
    so each test keeps the spelling it was written with. ``link``: ``p = link(eta)``
    instead of ``logit_p = eta`` (with ``matmul=True``)."""
    import pymc as pm
    import pytensor.tensor as pt

    with pm.Model() as model:
        a = pm.Normal("a", 0.0, intercept_sd) if intercept_sd is not None else None
        if np.ndim(X) == 1:
            b = pm.Normal(coef, 0.0, prior_sd)
            eta = b * X
        else:
            b = pm.Normal(coef, 0.0, prior_sd, shape=X.shape[1] if n_coef is None else n_coef)
            eta = pt.as_tensor(X) @ b if matmul else pm.math.dot(X, b)
        if a is not None:
            eta = a + eta
        if link is None:
            pm.Bernoulli("y", logit_p=eta, observed=y)
        else:
            pm.Bernoulli("y", p=link(eta), observed=y)
    return model


def make_logistic_model(n, d, *, seed=0, prior_sd=1.0, matmul=False):
    """:func:`logistic_model` on the rows of ``pms.datasets.make_logistic(n, d, seed)``."""
    from pymc_subsample.datasets import make_logistic

    X, y, _ = make_logistic(n, d, seed=seed)
    return logistic_model(X, y, prior_sd=prior_sd, matmul=matmul)


def _group_predictor(g, x, groups, centred):
    """In a model context: ``mu ~ Normal(0, 2)``, ``tau ~ HalfNormal(1)``, the group
    effects (``z ~ Normal(0, 1)`` or, centred, ``a ~ Normal(mu, tau)``), ``b ~ Normal(0,
    2)``, in this order; returns ``mu + tau * z[g] + b * x`` (or ``a[g] + b * x``)."""
    import pymc as pm

    mu = pm.Normal("mu", 0.0, 2.0)
    tau = pm.HalfNormal("tau", 1.0)
    if centred:
        a = pm.Normal("a", mu, tau, shape=groups)
    else:
        z = pm.Normal("z", 0.0, 1.0, shape=groups)
    b = pm.Normal("b", 0.0, 2.0)
    return (a[g] if centred else mu + tau * z[g]) + b * x


def hierarchical_logistic(y, g, x, groups, *, centred=False):
    """Hierarchical logistic regression with integer group indices ``g``, ``mu ~
    Normal(0, 2)``, ``tau ~ HalfNormal(1)``, ``b ~ Normal(0, 2)``.

    Non-centred (default): ``logit p = mu + tau * z[g] + b * x``, ``z ~ Normal(0, 1)``.
    ``centred=True``: ``logit p = a[g] + b * x``, ``a ~ Normal(mu, tau)`` (the same
    posterior; the better form when every group holds many rows)."""
    import pymc as pm

    with pm.Model() as model:
        pm.Bernoulli("y", logit_p=_group_predictor(g, x, groups, centred), observed=y)
    return model


def hierarchical_normal(y, g, x, groups, *, centred=False, per_group_sigma=False):
    """:func:`hierarchical_logistic`'s predictor with a Normal likelihood of unknown
    scale, ``sigma ~ HalfNormal(2)`` (one per group with ``per_group_sigma``):
    ``y ~ Normal(mu + tau * z[g] + b * x, sigma)``."""
    import pymc as pm

    with pm.Model() as model:
        eta = _group_predictor(g, x, groups, centred)
        sigma = pm.HalfNormal("sigma", 2.0, shape=groups if per_group_sigma else ())
        pm.Normal("y", eta, sigma[g] if per_group_sigma else sigma, observed=y)
    return model


def normal_mean_model(y, *, prior_sd, sigma, prior_mean=0.0):
    """``mu ~ Normal(prior_mean, prior_sd)``, ``y_i ~ Normal(mu, sigma)`` (``sigma``
    known): the exact posterior is Normal (each test computes it as it states it)."""
    import pymc as pm

    with pm.Model() as model:
        mu = pm.Normal("mu", prior_mean, prior_sd)
        pm.Normal("y", mu, sigma, observed=y)
    return model


def linear_regression(rng, n, coef, *, prior_sd=10.0):
    """Normal linear regression with known noise sd 1: ``X = rng.normal(size=(n, d))``,
    ``y = X @ coef + rng.normal(size=n)``, ``b ~ Normal(0, prior_sd)``,
    ``y ~ Normal(X @ b, 1)`` (exact Gaussian posterior). Returns ``(model, X, y)``."""
    import pymc as pm

    coef = np.asarray(coef, dtype=float)
    X = rng.normal(size=(n, coef.size))
    y = X @ coef + rng.normal(size=n)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, prior_sd, shape=coef.size)
        pm.Normal("y", pm.math.dot(X, b), 1.0, observed=y)
    return model, X, y


# ====================================================================== reference posteriors


def benchmark_models():
    """``benchmarks/models.py`` as a module (benchmarks/ is not a package): the
    posteriordb loaders and models and the tall synthetic benchmark models."""
    name = "pms_benchmark_models"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / "models.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


POSTERIORDB = benchmark_models().posteriordb_dir()


def posteriordb_available(folder=None) -> bool:
    """Whether the posteriordb folder ``folder`` (by default all four) is there."""
    return benchmark_models().posteriordb_available(folder)


requires_posteriordb = pytest.mark.skipif(
    not posteriordb_available(),
    reason=(
        f"posteriordb reference posteriors not found in {POSTERIORDB} "
        "(set PMS_POSTERIORDB to the folder holding sblrc-blr/, kidiq-kidscore_momiq/, ...)"
    ),
)


def posteriordb(folder):
    """``(data, draws)`` of a posteriordb folder: its data dict and its reference draws,
    ``label -> (10 chains, 1000 draws)`` with 0-based labels (``beta[0]``, ``sigma``)."""
    return benchmark_models().load_posteriordb(folder)


@functools.lru_cache(maxsize=None)
def posteriordb_reference(folder):
    """``(data, reference)`` of a posteriordb folder, read once per process: the
    reference is a ``benchmarks/models.py`` ``Reference`` (means, sds and their Monte
    Carlo errors, the draws in ``reference.draws``)."""
    M = benchmark_models()
    data, draws = posteriordb(folder)
    return data, M.reference_from_draws(draws, f"posteriordb {folder}", int(data["N"]))


# ====================================================================== fixtures


@pytest.fixture(scope="session")
def earnings_reference():
    """posteriordb ``earnings-logearn_height`` (``log(earn) ~ Normal(b1 + b2 height,
    sigma)``, flat priors, N = 1192), read once: ``(data, draws)`` as
    :func:`posteriordb`; the test is skipped where the folder is missing."""
    folder = "earnings-logearn_height"
    if not posteriordb_available(folder):
        pytest.skip("posteriordb reference not available")
    return posteriordb(folder)
