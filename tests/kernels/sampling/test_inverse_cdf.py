"""InverseCDFTable: ScalableMH's rows drawn in proportion to their bound constants."""

import numpy as np
import pytest
from scipy import stats

from pymc_subsample.kernels.sampling.inverse_cdf import InverseCDFTable

#: pure NumPy numerics: CI runs them on Python 3.11 only (see pyproject's markers)
pytestmark = pytest.mark.numerics


def _chi2_pvalue(rows, probs):
    counts = np.bincount(rows, minlength=probs.size)
    keep = probs > 0
    assert counts[~keep].sum() == 0
    expected = probs[keep] * rows.size
    return stats.chisquare(counts[keep], expected).pvalue


def test_probabilities_match_the_weights():
    rng = np.random.default_rng(0)
    w = rng.gamma(0.5, 1.0, size=100_000)
    w[::5] = 0.0
    table = InverseCDFTable(w, chunk=4096)  # many chunks: the carried cumulative sum
    p = table.probabilities()
    q = w / w.sum()
    assert np.all(p[w == 0] == 0.0) and np.all(p[w > 0] > 0.0)
    assert np.abs(p - q).sum() < 1e-12  # total variation of the grid rounding
    assert table.total == pytest.approx(w.sum(), rel=1e-12)
    assert len(table) == w.size and np.all(np.diff(table.cumulative) >= 0)


def test_draws_follow_the_weights_and_a_wrong_sampler_is_caught():
    w = np.array([0.5, 0.0, 3.0, 1e-3, 2.0, 0.0, 1.0])
    table = InverseCDFTable(w)
    probs = w / w.sum()
    rows = table.sample(np.random.default_rng(1), 200_000)
    assert rows.dtype == np.int64
    assert _chi2_pvalue(rows, probs) > 1e-3
    # the test has power: the table's probabilities off by 3% on two rows is refused
    wrong = probs.copy()
    wrong[0] *= 1.03
    wrong[4] -= probs[0] * 0.03
    assert _chi2_pvalue(rows, wrong) < 1e-3


def test_the_table_built_on_threads_is_the_serial_one():
    """``map_fn`` runs the chunks' cumulative sums on threads (ScalableMH's set-up); the
    carries are added afterwards, so the table is the same integer for integer."""
    from concurrent.futures import ThreadPoolExecutor

    w = np.random.default_rng(4).gamma(0.3, 1.0, size=70_001).astype(np.float32)
    serial = InverseCDFTable(w, chunk=4096)
    with ThreadPoolExecutor(3) as pool:
        threaded = InverseCDFTable(w, chunk=4096, map_fn=lambda f, xs: list(pool.map(f, xs)))
    np.testing.assert_array_equal(serial.cumulative, threaded.cumulative)
    # the test can fail: the chunks' carries left out
    broken = InverseCDFTable(w, chunk=4096, map_fn=lambda f, xs: [f(x) for x in xs][:1] * len(xs))
    assert not np.array_equal(serial.cumulative, broken.cumulative)


def test_float32_memmap_weights(tmp_path):
    w = np.random.default_rng(2).exponential(size=50_000).astype(np.float32)
    np.save(tmp_path / "w.npy", w)
    mm = np.load(tmp_path / "w.npy", mmap_mode="r")
    a, b = InverseCDFTable(mm), InverseCDFTable(w.astype(np.float64))
    np.testing.assert_array_equal(a.cumulative, b.cumulative)
    np.testing.assert_array_equal(a.sample(np.random.default_rng(3), 10),
                                  b.sample(np.random.default_rng(3), 10))


def test_same_seed_same_rows():
    table = InverseCDFTable(np.arange(1.0, 11.0))
    a = table.sample(np.random.default_rng(5), 50)
    b = table.sample(np.random.default_rng(5), 50)
    np.testing.assert_array_equal(a, b)
    assert table.sample(np.random.default_rng(5), 0).shape == (0,)


@pytest.mark.parametrize("w, match", [
    (np.array([1.0, np.nan]), "must be finite; weight 1"),
    (np.array([1.0, -2.0]), "must be >= 0; weight 1"),
    (np.zeros(3), "positive sum"),
    (np.zeros((2, 2)), "1-D"),
    (np.array([]), "empty"),
])
def test_bad_weights_are_refused(w, match):
    with pytest.raises(ValueError, match=match):
        InverseCDFTable(w)
