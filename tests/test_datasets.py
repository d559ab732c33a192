"""Tests of the synthetic data sets (``pymc_subsample.datasets``)."""

import numpy as np
import pytest

from pymc_subsample.datasets import make_logistic


def test_shapes_types_and_seed():
    X, y, beta = make_logistic(1000, 4, seed=3)
    assert X.shape == (1000, 4) and X.dtype == np.float64
    assert y.shape == (1000,) and y.dtype == np.int64 and set(np.unique(y)) <= {0, 1}
    assert beta.shape == (4,)
    X2, y2, beta2 = make_logistic(1000, 4, seed=3)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    assert not np.array_equal(make_logistic(1000, 4, seed=4)[0], X)


def test_smaller_n_is_a_prefix_across_chunks():
    n_big = 3 * (1 << 16) + 17  # several generation chunks
    Xb, yb, bb = make_logistic(n_big, 3, seed=1)
    for n in (5, (1 << 16) + 1, n_big - 1):
        X, y, b = make_logistic(n, 3, seed=1)
        np.testing.assert_array_equal(X, Xb[:n])
        np.testing.assert_array_equal(y, yb[:n])
        np.testing.assert_array_equal(b, bb)


def test_intercept_and_labels_follow_the_model():
    X, y, beta = make_logistic(200_000, 3, seed=2, intercept=True, coef_sd=1.0)
    np.testing.assert_array_equal(X[:, 0], 1.0)
    p = 1.0 / (1.0 + np.exp(-(X @ beta)))
    # mean of y - p is 0 with sd sqrt(mean p(1-p) / n) < 0.0012: 5 sd
    assert abs(np.mean(y - p)) < 5 * np.sqrt(np.mean(p * (1 - p)) / y.size)


@pytest.mark.parametrize("kw", [{"n": 0}, {"n": 10, "d": 0}])
def test_rejects_empty_shapes(kw):
    with pytest.raises(ValueError, match="positive"):
        make_logistic(**kw)
