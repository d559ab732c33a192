"""Tests of the synthetic data sets (``pymc_subsample.datasets``)."""

import numpy as np
import pytest

from pymc_subsample.datasets import make_logistic, write_logistic


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


def test_written_float64_files_hold_make_logistics_rows(tmp_path):
    n = (1 << 16) + 5  # two generation chunks
    x_path, y_path, beta = write_logistic(tmp_path, n, 3, seed=7, intercept=True,
                                          dtype="float64")
    X, y, b = make_logistic(n, 3, seed=7, intercept=True)
    Xf, yf = np.load(x_path, mmap_mode="r"), np.load(y_path, mmap_mode="r")
    assert Xf.dtype == np.float64 and yf.dtype == np.int64
    np.testing.assert_array_equal(Xf, X)
    np.testing.assert_array_equal(yf, y)
    np.testing.assert_array_equal(beta, b)


def test_written_float32_files_follow_the_model_of_the_stored_values(tmp_path):
    n = 200_000
    x_path, y_path, beta = write_logistic(tmp_path, n, 3, seed=2, coef_sd=1.0)
    X, y = np.load(x_path, mmap_mode="r"), np.load(y_path, mmap_mode="r")
    assert X.dtype == np.float32 and X.shape == (n, 3) and y.shape == (n,)
    # the covariates are make_logistic's rounded to float32; a smaller n is a prefix
    np.testing.assert_array_equal(X, make_logistic(n, 3, seed=2, coef_sd=1.0)[0]
                                  .astype(np.float32))
    small = tmp_path / "small"
    small.mkdir()
    xs, ys, _ = write_logistic(small, 1000, 3, seed=2, coef_sd=1.0)
    np.testing.assert_array_equal(np.load(ys), y[:1000])
    p = 1.0 / (1.0 + np.exp(-(np.asarray(X, dtype=np.float64) @ beta)))
    assert abs(np.mean(y - p)) < 5 * np.sqrt(np.mean(p * (1 - p)) / n)


def test_write_refuses_a_missing_directory_and_other_dtypes(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        write_logistic(tmp_path / "nope", 10)
    with pytest.raises(ValueError, match="float32"):
        write_logistic(tmp_path, 10, dtype="int32")
