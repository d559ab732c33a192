"""Tests of the streaming moments (kernels/variance/streaming.py) and the shared argument checks
(kernels/_validation.py)."""

import math

import numpy as np
import pytest

from pymc_subsample.kernels._validation import (
    check_choice,
    check_epsilon,
    check_finite_positive,
    check_int,
    check_real,
)
from pymc_subsample.kernels.variance.streaming import RunningMoments, batch_moments, merge_moments

#: pure NumPy numerics: CI runs them on Python 3.11 only (see pyproject's markers)
pytestmark = pytest.mark.numerics


def test_scalar_batches_match_two_pass_moments():
    rng = np.random.default_rng(0)
    x = 1e6 + rng.standard_normal(1000)  # a large offset: the merge must not cancel
    n, mean, m2 = 0, 0.0, 0.0
    acc = RunningMoments()
    for part in np.array_split(x, [3, 10, 200, 201, 700]):
        bm, b2 = batch_moments(part)
        n, mean, m2 = merge_moments(n, mean, m2, part.size, bm, b2)
        acc.add_batch(part)
    assert n == acc.n == x.size
    np.testing.assert_allclose([mean, acc.mean], x.mean(), rtol=1e-15)
    np.testing.assert_allclose([m2 / (n - 1), acc.variance()], x.var(ddof=1), rtol=1e-9)
    one = RunningMoments()
    for v in x:
        one.add(v)
    np.testing.assert_allclose(one.variance(ddof=0), x.var(), rtol=1e-9)


def test_vector_welford_and_batches_match_numpy_covariance():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((500, 3)) @ np.array([[1.0, 0.5, 0.0], [0.0, 2.0, 0.3],
                                                  [0.0, 0.0, 0.1]]) + 5.0
    single, batched = RunningMoments(3), RunningMoments(3)
    for row in q:
        single.add(row)
    for part in np.array_split(q, [1, 50, 51, 300]):
        batched.add_batch(part)
    ref = np.cov(q, rowvar=False)
    np.testing.assert_allclose(single.covariance(), ref, rtol=1e-10)
    np.testing.assert_allclose(batched.covariance(), ref, rtol=1e-10)
    np.testing.assert_allclose(single.mean, q.mean(axis=0), rtol=1e-14)
    # Welford's update, written out, gives the same numbers bit for bit
    mean, m2 = np.zeros(3), np.zeros((3, 3))
    for i, row in enumerate(q, 1):
        delta = row - mean
        mean += delta / i
        m2 += np.outer(delta, row - mean)
    np.testing.assert_array_equal(single.m2, m2)
    assert np.isnan(RunningMoments(2).covariance()).all()
    assert math.isnan(RunningMoments().variance())


def test_shared_checks():
    assert check_int("n", 10.0, 1) == 10
    with pytest.raises(ValueError, match=r"n must be an integer >= 1, got 0\."):
        check_int("n", 0, 1)
    with pytest.raises(ValueError, match="The 'n' parameter of f must be an int"):
        check_int("n", 10.0, 1, strict=True, owner="f")
    with pytest.raises(ValueError, match=r"\[1, n_total=5\]"):
        check_int("m", 6, 1, maximum=5, maximum_text="n_total=5", owner="f")
    with pytest.raises(ValueError, match="True"):
        check_int("n", True, 0)
    assert check_epsilon(0.0) == 0.0
    for bad in (0.5, -0.1, float("nan"), "x"):
        with pytest.raises(ValueError, match="epsilon"):
            check_epsilon(bad)
    assert check_real("d", math.inf, 0.0, math.inf, closed="right") == math.inf
    with pytest.raises(ValueError, match=r"\(0, inf\)"):
        check_real("t", math.inf, 0.0, math.inf)
    with pytest.raises(ValueError, match="'a' or 'b'"):
        check_choice("c", "z", ("a", "b"))
    with pytest.raises(TypeError, match="must be a number"):
        check_finite_positive("s", "x")
    with pytest.raises(ValueError, match="> 0"):
        check_finite_positive("s", 0.0)
