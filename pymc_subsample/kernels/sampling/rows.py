"""Drawing data rows without replacement, incrementally.

The sequential tests (AustereMH, BarkerMinibatch) grow a minibatch until they can
decide; every new row must be one not drawn before in this step, and the cost of a
draw must not depend on the number of rows ``N``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["RowSampler", "ImportanceSampler"]


class RowSampler:
    """Uniform sampling of row indices without replacement, in growing batches.

    Each call to :meth:`draw` returns ``m`` indices not returned before, chosen
    uniformly among those not yet drawn, so the union of all batches is a uniform
    random subset of ``range(n_total)`` of its size (sampling without replacement,
    as Algorithm 1 of Korattikara et al. 2014 and Algorithm 1 of Seita et al. 2017
    require).

    Rows already drawn are marked in a boolean mask of ``N`` bytes that is allocated
    once and cleared row by row by :meth:`restart`, so a draw of ``m`` rows costs
    O(m log m) whatever ``N`` and however many rows were drawn before (a first batch of
    at most ``N / 50`` rows, the usual case, is NumPy's ``Generator.choice`` without
    replacement: Floyd's algorithm, O(m) in C). Past half the
    rows, the remaining ones are permuted once (O(N), but the test then reads O(N)
    rows anyway).

    Parameters
    ----------
    n_total : int
        Number of rows ``N``.
    rng : numpy.random.Generator
        The only source of randomness.
    """

    def __init__(self, n_total: int, rng: np.random.Generator):
        n_total = int(n_total)
        if n_total < 1:
            raise ValueError(f"n_total must be a positive number of rows, got {n_total}.")
        self.n_total = n_total
        self.rng = rng
        self._mask = np.zeros(n_total, dtype=bool)
        self._drawn: list[np.ndarray] = []
        self._rest: np.ndarray | None = None
        self._n_before_rest = 0
        self.n_drawn = 0

    def restart(self, rng: np.random.Generator | None = None) -> "RowSampler":
        """Forget all draws (O(rows drawn)), optionally switching generator; returns self."""
        for chunk in self._drawn:
            self._mask[chunk] = False
        self._drawn = []
        self._rest = None
        self._n_before_rest = 0
        self.n_drawn = 0
        if rng is not None:
            self.rng = rng
        return self

    @property
    def exhausted(self) -> bool:
        return self.n_drawn >= self.n_total

    def drawn(self) -> np.ndarray:
        """All indices drawn so far, in draw order."""
        if not self._drawn:
            return np.empty(0, dtype=np.int64)
        return np.concatenate(self._drawn)

    def draw(self, m: int) -> np.ndarray:
        """Draw up to ``m`` new distinct rows (fewer only when all rows are used)."""
        m = min(int(m), self.n_total - self.n_drawn)
        if m <= 0:
            return np.empty(0, dtype=np.int64)
        if self._rest is None and 2 * (self.n_drawn + m) > self.n_total:
            self._rest = self.rng.permutation(np.flatnonzero(~self._mask))
            self._n_before_rest = self.n_drawn
        if self._rest is not None:
            start = self.n_drawn - self._n_before_rest
            new = self._rest[start : start + m]
        elif self.n_drawn == 0 and self.n_total > 10_000 and m <= self.n_total // 50:
            # a first batch that is small against N: NumPy's own sampling without
            # replacement (Floyd's algorithm, in random order), O(m) and in C
            new = self.rng.choice(self.n_total, size=m, replace=False)
        else:
            new = self._draw_rejection(m)
        self._mask[new] = True
        self._drawn.append(new)
        self.n_drawn += new.size
        return new

    def _draw_rejection(self, m: int) -> np.ndarray:
        # Candidates uniform on all rows; keep, in draw order, the first occurrence of
        # each one not drawn before, until m are found. Fewer than half the rows are
        # drawn, so the expected number of rounds is small.
        out = np.empty(0, dtype=np.int64)
        while out.size < m:
            cand = self.rng.integers(0, self.n_total, size=2 * (m - out.size) + 8)
            cand = cand[~self._mask[cand]]
            if out.size:
                cand = cand[~np.isin(cand, out)]
            order = np.argsort(cand, kind="stable")
            srt = cand[order]
            first = order[np.concatenate([[True], srt[1:] != srt[:-1]])] if srt.size else order
            out = np.concatenate([out, cand[np.sort(first)][: m - out.size]])
        return out


class ImportanceSampler:
    """I.i.d. rows with ``P(X = i) = p_i``: the importance-sampled minibatches of El hanchi
    (2019, "Adaptive subsampling...", Sec. 5.1), drawn from Walker's alias table.

    Same interface as :class:`RowSampler` (``draw``, ``restart``, ``n_total``,
    ``n_drawn``), but rows may repeat; the test then works on the terms
    ``t_i / (N p_i)``, whose mean is unbiased for ``(1/N) sum_i t_i``.

    Parameters
    ----------
    table : AliasTable
        Built once over the weights (:class:`~pymc_subsample.kernels.sampling.alias.AliasTable`).
    rng : numpy.random.Generator
    """

    def __init__(self, table, rng: np.random.Generator):
        self.table = table
        self.n_total = int(table.n)
        self.probs = table.probabilities()
        self.rng = rng
        self.n_drawn = 0
        self._drawn: list[np.ndarray] = []

    def restart(self, rng: np.random.Generator | None = None) -> "ImportanceSampler":
        self.n_drawn = 0
        self._drawn = []
        if rng is not None:
            self.rng = rng
        return self

    def drawn(self) -> np.ndarray:
        """All rows drawn since the last restart, in draw order (with repeats)."""
        return np.concatenate(self._drawn) if self._drawn else np.empty(0, dtype=np.int64)

    def draw(self, m: int) -> np.ndarray:
        new = self.table.sample(self.rng, int(m))
        self._drawn.append(new)
        self.n_drawn += new.size
        return new
