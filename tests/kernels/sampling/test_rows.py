"""RowSampler: uniform row draws without replacement, in growing batches, on each of its
paths (NumPy's Floyd sampling for a first batch small against N, rejection on the mask,
the permutation of the remaining rows past half of them)."""

import numpy as np
import pytest
from scipy import stats

from pymc_subsample.kernels.sampling.rows import RowSampler

#: pure NumPy numerics: CI runs them on Python 3.11 only (see pyproject's markers)
pytestmark = pytest.mark.numerics


@pytest.mark.parametrize("n_total, sizes", [
    (200_000, [100, 100, 3000]),       # Floyd first batch, then rejection
    (200_000, [5000, 5000]),           # first batch over N/50: rejection from the start
    (1_000, [10, 400, 300, 290]),      # small N: rejection, then the permuted rest
])
def test_batches_are_distinct_new_rows_of_the_requested_sizes(n_total, sizes):
    s = RowSampler(n_total, np.random.default_rng(3))
    for _ in range(3):  # restart must forget every draw
        got = [s.draw(m) for m in sizes]
        assert [g.size for g in got] == [min(m, n_total - sum(sizes[:i]))
                                         for i, m in enumerate(sizes)]
        allrows = np.concatenate(got)
        assert allrows.dtype == np.int64
        assert np.unique(allrows).size == allrows.size
        assert allrows.min() >= 0 and allrows.max() < n_total
        np.testing.assert_array_equal(s.drawn(), allrows)
        s.restart()


def _inclusion_pvalue(draw_batches, n_total, reps, n_bins=20):
    """Chi-square p-value of the rows drawn (pooled over ``reps`` repetitions) falling
    uniformly in ``n_bins`` equal bins of the row range, and of the first row of each
    batch doing so (the order within a batch must be random too)."""
    counts = np.zeros(n_bins)
    first = np.zeros(n_bins)
    for _ in range(reps):
        rows = draw_batches()
        counts += np.bincount(rows * n_bins // n_total, minlength=n_bins)
        first[rows[0] * n_bins // n_total] += 1
    return stats.chisquare(counts).pvalue, stats.chisquare(first).pvalue


@pytest.mark.parametrize("path", ["floyd", "rejection"])
def test_rows_are_uniform_and_in_random_order(path):
    n_total, reps = 100_000, 2000
    s = RowSampler(n_total, np.random.default_rng(11))
    if path == "floyd":
        def draw():
            s.restart()
            return s.draw(50)
    else:  # the second batch: rejection against the rows drawn first
        def draw():
            s.restart()
            s.draw(50)
            return s.draw(50)
    p_all, p_first = _inclusion_pvalue(draw, n_total, reps)
    assert p_all > 1e-3 and p_first > 1e-3


def test_the_uniformity_check_catches_a_biased_sampler():
    """The check above has power: rows drawn from the lower 90% only are caught."""
    rng = np.random.default_rng(11)
    n_total = 100_000

    def biased():
        return rng.choice(int(0.9 * n_total), size=50, replace=False)

    p_all, _ = _inclusion_pvalue(biased, n_total, 2000)
    assert p_all < 1e-6
