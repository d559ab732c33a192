"""The named parts of the acceptance tests, the alias table and the consensus run: each
part alone, and the whole built from them."""

import math

import numpy as np
import pytest
from scipy import special

from pymc_subsample.kernels.sampling import alias as alias_mod
from pymc_subsample.kernels.acceptance import austere as austere_mod
from pymc_subsample.kernels.acceptance import barker as barker_mod
from pymc_subsample.kernels.sampling.alias import AliasTable
from pymc_subsample.kernels.acceptance.austere import austere_test
from pymc_subsample.kernels.acceptance.barker import barker_test
from pymc_subsample.kernels.acceptance.barker_correction import default_correction
from pymc_subsample.kernels.acceptance.nonfinite import undecidable
from pymc_subsample.kernels.sampling.rows import RowSampler

#: pure NumPy numerics: CI runs them on Python 3.11 only (see pyproject's markers)
pytestmark = pytest.mark.numerics


# --------------------------------------------------------------------------------------
# the shared non-finite handling
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "values, expected",
    [
        (-math.inf, False),  # zero density at theta': the exact rejection
        (math.nan, True),
        (math.inf, True),
        (np.array([0.1, -np.inf, 0.3]), False),
        (np.array([0.1, -np.inf, np.nan]), True),
        (np.array([-np.inf, np.inf]), True),
        (np.array([1e308, 1e308]), True),  # finite terms whose sum overflowed
    ],
)
def test_undecidable(values, expected):
    assert undecidable(values) is expected


@pytest.mark.parametrize("bad, exact", [(-np.inf, True), (np.nan, False), (np.inf, False)])
def test_both_tests_decide_a_non_finite_term_alike(bad, exact):
    lv = np.zeros(200)
    lv[17] = bad
    every_row = dict(batch_size=200)
    a = austere_test(np.random.default_rng(0), lambda r: lv[r], 200, 0.0, **every_row)
    b = barker_test(np.random.default_rng(0), lambda r: lv[r], 200, 0.0, **every_row)
    for r in (a, b):
        assert not r.accept and r.exact is exact and r.nonfinite is (not exact)
        assert r.data_used == 200
    for o1 in (bad,):
        a = austere_test(np.random.default_rng(0), lambda r: lv[r], 200, o1)
        b = barker_test(np.random.default_rng(0), lambda r: lv[r], 200, o1)
        for r in (a, b):
            assert not r.accept and r.exact is exact and r.nonfinite is (not exact)
            assert r.data_used == 0 and r.n_batches == 0


# --------------------------------------------------------------------------------------
# Austerity MH
# --------------------------------------------------------------------------------------
def test_draw_log_u_is_the_first_draw():
    rng, ref = np.random.default_rng(3), np.random.default_rng(3)
    assert austere_mod._draw_log_u(rng, None) == math.log1p(-ref.random())
    assert austere_mod._draw_log_u(rng, -math.inf) == -math.inf
    assert rng.random() == ref.random()  # a given log_u draws nothing


def test_row_source():
    rng = np.random.default_rng(0)
    draw = austere_mod._row_source(rng, 10, 0.0, None)  # exact test: rows in order
    np.testing.assert_array_equal(draw(4), [0, 1, 2, 3])
    np.testing.assert_array_equal(draw(10), np.arange(4, 10))
    sampler = RowSampler(10, rng)
    assert austere_mod._row_source(rng, 10, 0.05, sampler) == sampler.draw
    sampler.draw(1)
    with pytest.raises(ValueError, match="fresh"):
        austere_mod._row_source(rng, 10, 0.05, sampler)


def test_t_test_stage_matches_eqs_4_and_5():
    n, n_total, mean, m2, mu0 = 50, 1000, 0.02, 0.49, 0.0
    sd = math.sqrt(m2 / (n - 1) / n * (1.0 - (n - 1) / (n_total - 1)))
    t = (mean - mu0) / sd
    delta = float(special.stdtr(n - 1, -abs(t)))
    stage = austere_mod._t_test_stage
    assert stage(n, 1, mean, m2, n_total, mu0, -1.0, delta, True, None) is None  # not < eps
    r = stage(n, 1, mean, m2, n_total, mu0, -1.0, delta * 1.001, True, None)
    assert r.accept and (r.sd, r.t, r.delta) == (sd, t, delta) and not r.exact
    # no spread: |t| = inf decides at once; no spread and no difference: no decision
    assert stage(n, 2, -1.0, 0.0, n_total, mu0, -1.0, 0.01, True, None).accept is False
    assert stage(n, 2, mu0, 0.0, n_total, mu0, -1.0, 0.01, True, None) is None


def test_all_rows_result_is_the_exact_decision():
    r = austere_mod._all_rows_result(10, 2, 0.5, 5.0, 10, -4.0, -1.5, 0.0, None, None)
    assert r.exact and r.accept == (-1.5 < -4.0 + 5.0) and r.data_used == 10 and r.sd == 0.0
    r = austere_mod._all_rows_result(12, 3, 0.5, 6.0, 10, -4.0, -1.5, 0.0, None, lambda: 2.0)
    assert r.exact and r.accept is False and r.data_used == 10 and r.mean == 0.2


# --------------------------------------------------------------------------------------
# the minibatch Barker test
# --------------------------------------------------------------------------------------
def test_append_grows_the_buffer_by_doubling():
    buf = np.zeros(4)
    buf[:3] = [1.0, 2.0, 3.0]
    out = barker_mod._append(buf, 3, np.array([4.0, 5.0]), 100)
    assert out.size == 8
    np.testing.assert_array_equal(out[:5], [1.0, 2.0, 3.0, 4.0, 5.0])
    assert barker_mod._append(out, 5, np.array([6.0]), 100) is out  # room left: in place
    assert barker_mod._append(np.zeros(4), 4, np.zeros(1), 5).size == 5  # at most N


def test_minibatch_stage_waits_for_the_variance_and_the_error_bound():
    corr = default_correction()
    rng = np.random.default_rng(0)
    terms = np.random.default_rng(1).standard_normal(400) * 1e-4
    mean, m2 = float(terms.mean()), float(((terms - terms.mean()) ** 2).sum())
    args = (rng, terms, 400, 1, 10_000, mean, m2, 0.3, corr, corr.sigma**2,
            corr.max_density)
    r = barker_mod._minibatch_stage(*args, 0.05, "acceptance")
    assert r is not None and not r.exact and r.data_used == 400
    assert r.delta_star == 10_000 * mean + 0.3 and r.clt_error <= 0.05
    # s^2 >= sigma^2: grow the batch
    big = terms * 1e3
    mb, m2b = float(big.mean()), float(((big - big.mean()) ** 2).sum())
    assert barker_mod._minibatch_stage(rng, big, 400, 1, 10_000, mb, m2b, 0.3, corr,
                                       corr.sigma**2, corr.max_density, 0.05,
                                       "acceptance") is None
    # Lemma 3's bound needs n >= (6.4 / delta)^2 rows
    assert barker_mod._minibatch_stage(*args, 0.05, "lemma3") is None


def test_fresh_sampler():
    rng = np.random.default_rng(0)
    assert barker_mod._fresh_sampler(None, 10, rng, True).n_total == 10
    used = RowSampler(10, rng)
    used.draw(2)
    assert barker_mod._fresh_sampler(used, 10, rng, False) is used  # unchecked
    with pytest.raises(ValueError, match="'sampler' parameter"):
        barker_mod._fresh_sampler(used, 10, rng, True)


# --------------------------------------------------------------------------------------
# the alias table: rounding and pairing
# --------------------------------------------------------------------------------------
def _ranges(n, chunk):
    return [(s, min(s + chunk, n)) for s in range(0, n, chunk)]


@pytest.mark.parametrize("chunk", [3, 1 << 20])
def test_grid_units_sum_exactly_and_keep_zero_weights_at_zero(chunk):
    w = np.random.default_rng(0).exponential(size=37) ** 3
    w[[4, 20]] = 0.0
    n, bits = w.size, 30
    high = n * (1 << bits)
    units, total_scaled = alias_mod._grid_units(w, _ranges(n, chunk), float(w.max()), high)
    assert units.dtype == np.int64 and int(units.sum()) == high
    assert units[4] == 0 and units[20] == 0
    assert total_scaled * w.max() == pytest.approx(w.sum(), rel=1e-15)
    # within one unit of the exact share
    np.testing.assert_array_less(np.abs(units - high * w / w.sum()), 1.0 + 1e-6)


def test_round_up_largest_breaks_ties_in_row_order():
    units = np.zeros(5, dtype=np.int64)
    frac = np.array([0.5, 0.9, 0.5, -1.0, 0.5], dtype=np.float32)
    alias_mod._round_up_largest(units, frac, _ranges(5, 2), 2, 4)
    np.testing.assert_array_equal(units, [1, 1, 0, 0, 0])
    units[:] = 0
    alias_mod._round_up_largest(units, frac, _ranges(5, 2), 4, 4)  # every positive row
    np.testing.assert_array_equal(units, [1, 1, 1, 0, 1])


@pytest.mark.parametrize("chunk", [2, 1 << 20])
def test_vose_pairing_gives_each_row_its_units(chunk):
    unit = 1 << 4
    units = np.array([0, 3, 40, 16, 1, 36], dtype=np.int64)  # sums to 6 * unit
    expected = units / (6 * unit)
    grid = units.copy()
    alias = alias_mod._vose_pairing(grid, _ranges(6, chunk), unit, chunk)
    mass = grid.copy()  # grid now holds the thresholds
    np.add.at(mass, alias, unit - grid)
    np.testing.assert_array_equal(mass / (6 * unit), expected)
    assert np.all(grid[units >= unit] <= unit) and alias[0] != 0  # zero weight: never own


def test_alias_table_is_built_from_its_parts():
    w = np.random.default_rng(2).exponential(size=1000)
    t = AliasTable(w, chunk=64)
    ranges = _ranges(1000, 64)
    units, _ = alias_mod._grid_units(w, ranges, alias_mod._check_weights(w, ranges),
                                     1000 << t.bits)
    alias = alias_mod._vose_pairing(units, ranges, 1 << t.bits, 64)
    np.testing.assert_array_equal(alias, t.alias)
    np.testing.assert_array_equal(units, t.threshold)


# --------------------------------------------------------------------------------------
# the consensus run's dispatch
# --------------------------------------------------------------------------------------
def _add(a, b):
    return a + b


class _FakeClient:
    """What consensus_sample uses of a dask.distributed.Client."""

    def __init__(self):
        self.keys = []

    def submit(self, fn, *args, key):
        self.keys.append(key)
        return fn(*args)

    def gather(self, futures):
        return list(futures)


def test_run_tasks_without_and_with_a_client():
    dask = pytest.importorskip("dask")
    from pymc_subsample.consensus import run

    calls = [(1, 2), (3, 4), (5, 6)]
    assert run._run_tasks(dask, None, _add, calls, ["a", "b", "c"]) == [3, 7, 11]
    client = _FakeClient()
    assert run._run_tasks(dask, client, _add, calls, ["a", "b", "c"]) == [3, 7, 11]
    assert client.keys == ["a", "b", "c"]


def test_seeds_stack_and_combine():
    from pymc_subsample.consensus import run

    seeds, rng = run._seeds(5, 3)
    seeds2, rng2 = run._seeds(5, 3)
    assert seeds == seeds2 and len(seeds) == 3 and rng.random() == rng2.random()
    draws = np.random.default_rng(0).standard_normal((2, 1, 40, 2, 3))
    results = [{"values": ["a", "b"], "free": ["a", "b"],
                "unconstrained": {"a": d[:, :, 0, 0], "b": d[:, :, 1]}} for d in draws]
    values, free, shapes, shard_draws = run._stack_shard_draws(results)
    assert shapes == [(), (3,)] and [x.shape for x in shard_draws] == [(40, 4), (40, 4)]
    combined = run._combine(("consensus",), shard_draws, np.random.default_rng(0), values,
                            shapes)
    assert combined["consensus"]["a"].shape == (40,)
    assert combined["consensus"]["b"].shape == (40, 3)
    results[1]["unconstrained"]["b"] = draws[1][:, :, 1, :2]
    with pytest.raises(ValueError, match="shard 1's model has variables"):
        run._stack_shard_draws(results)
