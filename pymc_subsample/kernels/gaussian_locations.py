"""Exact Gaussian draws of the location parameters of a linear mixed model with any number
of group terms (crossed, nested, random slopes), from sufficient statistics.

For ``y_i ~ Normal(o_i + z_i . theta, sigma)``, ``theta = (beta, a_1, ..., a_K)`` the fixed
effects and every group term's effects (``z_i`` holds the row's covariates, and for term
``k`` the weight ``w_ki`` -- 1 for an intercept, a covariate for a slope -- in the column
of the row's level ``g_k(i)``), and a Gaussian prior of precision ``Lambda`` and mean
``mu`` on ``theta``, the conditional of ``theta`` given the variances is Gaussian with

    P = Z'Z / sigma^2 + Lambda,      P (m - theta_hat) = c / sigma^2 + Lambda (mu - theta_hat),

about a centre ``theta_hat`` with ``c = Z' (y - o - Z theta_hat)``; the residual sum of
squares at ``theta_hat + d`` is ``E - 2 c . d + d' Z'Z d`` with ``E`` the centre's. These
are the blocked ("all locations at once") updates of the Gibbs samplers for crossed and
nested Gaussian models that Papaspiliopoulos, Stumpf-Fetizon and Zanella study
("Scalable Bayesian computation for crossed and nested hierarchical models", 2023): a
draw of every location jointly, whose mixing does not degrade with the number of rows or
of levels, here at a cost independent of ``N``.

Each row falls in one level of a grouping factor, so the block ``Z_b'Z_b`` of the terms
``b`` on the factor with the most locations (its intercept and every slope on it: ``k``
terms) is block diagonal, one ``k x k`` block per level (diagonal for ``k = 1``): it is
eliminated first (its Schur complement ``S = P_rr - P_rb P_bb^{-1} P_br`` on the rest --
the fixed effects and the other factors' terms -- is dense and small), and a draw is
``d_r ~ N(S^{-1} h_r', S^{-1})`` then ``d_b | d_r`` independent per level. The cost of
one conditional is ``O(nnz(Z_r'Z_b) k D_r + G_b k^3 + D_r^3)``, with ``D_r`` the
locations outside ``b`` and ``G_b`` the factor's levels: an intercept and slopes per
level of a factor of 10^4 levels cost ``G_b k^3``, not ``(k G_b)^3``.

Pure NumPy/SciPy (no PyMC): :class:`LocationSums` (the statistics) and
:class:`GaussianConditional` (the factorisation, draws and log density).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp

__all__ = ["Layout", "LocationSums", "GaussianConditional", "MAX_DENSE_LOCATIONS",
           "eliminated_terms"]

#: the largest number of locations outside the eliminated factor's terms (the dense Schur
#: complement)
MAX_DENSE_LOCATIONS = 3000
#: up to this many entries the block ``Z_r'Z_b`` is held dense (scipy.sparse's overhead
#: per product is larger than the product below it)
DENSE_CROSS_ENTRIES = 2_000_000


@dataclass
class LocationSums:
    """The sufficient statistics of Gaussian rows about a centre ``theta_hat``.

    Attributes
    ----------
    n : int
        Rows.
    E : float
        The centre's residual sum of squares.
    c : ndarray, shape (D,)
        ``Z' r`` with the centre's residuals ``r``.
    r_idx, b_idx : ndarray of int
        Positions in ``theta`` of the locations outside the eliminated factor's terms and of
        theirs (level by level).
    ZZ_rr : ndarray, shape (D_r, D_r)
    ZZ_rb : ndarray or scipy.sparse.csr_matrix, shape (D_r, G_b k)
    ZZ_bb : ndarray, shape (G_b,) or (G_b, k, k)
        The blocks of ``Z'Z`` (``ZZ_bb`` the eliminated factor's block: its diagonal for
        one term, else one ``k x k`` block per level; the columns of ``b`` level by
        level, each level's ``k`` terms in turn).
    """

    n: int
    E: float
    c: np.ndarray
    r_idx: np.ndarray
    b_idx: np.ndarray
    ZZ_rr: np.ndarray
    ZZ_rb: object
    ZZ_bb: np.ndarray

    def quadratic(self, d) -> float:
        """``d' Z'Z d``."""
        dr, db = d[self.r_idx], d[self.b_idx]
        return float(dr @ self.ZZ_rr @ dr + 2.0 * dr @ (self.ZZ_rb @ db)
                     + _block_quadratic(self.ZZ_bb, db))

    def ssr(self, d) -> float:
        """The residual sum of squares at ``theta_hat + d`` (never below 0)."""
        return max(self.E - 2.0 * float(self.c @ d) + self.quadratic(d), 0.0)

    def loglik(self, d, log_sigma) -> float:
        """``-N log sigma - SSR / (2 sigma^2)`` at ``theta_hat + d`` (the constant
        dropped)."""
        return -self.n * log_sigma - 0.5 * self.ssr(d) * math.exp(-2.0 * log_sigma)


class GaussianConditional:
    """The Gaussian conditional ``N(theta_hat + m, P^{-1})`` of the locations (module
    docstring), factorised by eliminating the terms of the factor with the most
    locations.

    Parameters
    ----------
    sums : LocationSums
    inv_s2 : float
        ``1 / sigma^2``.
    lam : ndarray, shape (D,)
        The prior precisions of the locations (0 for a fixed effect whose prior enters
        through ``beta_prec``).
    beta_prec : ndarray, shape (p, p)
        A dense prior precision of the first ``p`` locations (the fixed effects), added
        to ``diag(lam)``.
    shift : ndarray, shape (D,)
        ``Lambda (mu - theta_hat)``.

    Raises
    ------
    numpy.linalg.LinAlgError
        ``P`` is not positive definite (an improper conditional).
    """

    def __init__(self, sums, inv_s2, lam, beta_prec, shift):
        r, b = sums.r_idx, sums.b_idx
        h = sums.c * inv_s2 + shift
        self.bb = (_Diagonal if sums.ZZ_bb.ndim == 1 else _PerLevel)(
            sums.ZZ_bb * inv_s2, lam[b])
        self.p_rb = sums.ZZ_rb * inv_s2
        p_rr = sums.ZZ_rr * inv_s2 + np.diag(lam[r])
        p = beta_prec.shape[0]
        p_rr[:p, :p] += beta_prec
        scaled = self.bb.right_solve(self.p_rb)  # P_rb P_bb^-1
        if sp.issparse(self.p_rb):
            S = p_rr - np.asarray((scaled @ self.p_rb.T).todense())
        else:
            S = p_rr - scaled @ self.p_rb.T
        self.chol = np.linalg.cholesky(0.5 * (S + S.T))
        self.h_b = h[b]
        h_r = h[r] - scaled @ self.h_b
        self.mean_r = sla.cho_solve((self.chol, True), h_r)
        self.r_idx, self.b_idx, self.size = r, b, h.size
        self.log_det = 2.0 * float(np.sum(np.log(np.diag(self.chol)))) + self.bb.log_det

    def _mean_b(self, dr):
        return self.bb.solve(self.h_b - self.p_rb.T @ dr)

    def mean(self) -> np.ndarray:
        """The conditional mean ``m`` (about the centre)."""
        out = np.empty(self.size)
        out[self.r_idx] = self.mean_r
        out[self.b_idx] = self._mean_b(self.mean_r)
        return out

    def sample(self, rng) -> np.ndarray:
        """A draw of ``d = theta - theta_hat``."""
        dr = self.mean_r + sla.solve_triangular(self.chol.T, rng.standard_normal(
            self.mean_r.size), lower=False)
        out = np.empty(self.size)
        out[self.r_idx] = dr
        out[self.b_idx] = self._mean_b(dr) + self.bb.half_inverse_t(
            rng.standard_normal(self.b_idx.size))
        return out

    def logpdf(self, d) -> float:
        """The log density at ``d`` (up to ``-D log(2 pi) / 2``, the same for every
        conditional of these locations)."""
        dr, db = d[self.r_idx], d[self.b_idx]
        u = self.chol.T @ (dr - self.mean_r)
        e = db - self._mean_b(dr)
        return float(0.5 * self.log_det - 0.5 * (u @ u) - 0.5 * self.bb.quadratic(e))


class _Diagonal:
    """The eliminated block of one term: ``P_bb`` diagonal (one location per level)."""

    def __init__(self, zz, lam):
        self.p = zz + lam
        if not np.all(self.p > 0.0):
            raise np.linalg.LinAlgError("a level without rows or prior precision")
        self.log_det = float(np.sum(np.log(self.p)))

    def solve(self, v):
        """``P_bb^{-1} v``."""
        return v / self.p

    def right_solve(self, m):
        """``m P_bb^{-1}`` (``m`` dense or sparse, ``G_b`` columns)."""
        return m @ sp.diags(1.0 / self.p) if sp.issparse(m) else m / self.p

    def half_inverse_t(self, z):
        """``L^{-T} z`` with ``P_bb = L L'``: covariance ``P_bb^{-1}`` for white ``z``."""
        return z / np.sqrt(self.p)

    def quadratic(self, e) -> float:
        """``e' P_bb e``."""
        return float(np.sum(self.p * e * e))


class _PerLevel:
    """The eliminated block of ``k`` terms on one factor: ``P_bb`` block diagonal, one
    ``k x k`` block per level (``zz`` of shape ``(G_b, k, k)``, ``lam`` the prior
    precisions level by level), factorised per level."""

    def __init__(self, zz, lam):
        g, k = zz.shape[0], zz.shape[1]
        self.p = zz + lam.reshape(g, k)[:, :, None] * np.eye(k)
        self.k = k
        chol = np.linalg.cholesky(self.p)  # raises LinAlgError where not positive
        self.l_inv = np.linalg.inv(chol)  # (G_b, k, k), lower
        self.p_inv = np.matmul(self.l_inv.transpose(0, 2, 1), self.l_inv)
        self.log_det = 2.0 * float(np.sum(np.log(np.diagonal(chol, axis1=1, axis2=2))))

    def solve(self, v):
        return np.matmul(self.p_inv, v.reshape(-1, self.k, 1)).ravel()

    def right_solve(self, m):
        if sp.issparse(m):
            g = self.p_inv.shape[0]
            inv = sp.bsr_matrix((self.p_inv, np.arange(g), np.arange(g + 1)),
                                shape=(g * self.k, g * self.k))
            return (m @ inv).tocsr()
        n = m.shape[0]
        per_level = np.matmul(m.reshape(n, -1, self.k).transpose(1, 0, 2), self.p_inv)
        return per_level.transpose(1, 0, 2).reshape(n, -1)

    def half_inverse_t(self, z):
        return np.matmul(self.l_inv.transpose(0, 2, 1), z.reshape(-1, self.k, 1)).ravel()

    def quadratic(self, e) -> float:
        return _block_quadratic(self.p, e)


def _block_quadratic(block, e) -> float:
    """``e' B e`` for ``B`` diagonal (its diagonal, 1-D) or block diagonal (``(G, k, k)``,
    ``e`` level by level)."""
    if block.ndim == 1:
        return float(e @ (block * e))
    v = e.reshape(block.shape[0], -1, 1)
    return float(np.sum(v * np.matmul(block, v)))


def eliminated_terms(sizes, factors) -> list[int]:
    """The terms eliminated first: every term on the grouping factor with the most
    locations (``factors[k]`` names term ``k``'s factor; the terms of one factor have
    its number of levels), the first such factor on a tie."""
    totals = {}
    for size, f in zip(sizes, factors):
        totals[f] = totals.get(f, 0) + int(size)
    best = max(totals, key=lambda f: (totals[f], -list(factors).index(f)))
    return [k for k, f in enumerate(factors) if f == best]


class Layout:
    """Where the locations sit in ``theta``: ``p`` fixed effects, then term ``k``'s
    ``sizes[k]`` levels; ``b`` the terms eliminated first (:func:`eliminated_terms`:
    those on the factor with the most locations; ``factors[k]`` names term ``k``'s
    grouping factor, each term its own by default)."""

    def __init__(self, p, sizes, factors=None):
        self.p, self.sizes = int(p), [int(s) for s in sizes]
        self.offsets = np.cumsum([self.p] + self.sizes[:-1]).astype(int)
        self.size = self.p + sum(self.sizes)
        factors = list(range(len(self.sizes))) if factors is None else list(factors)
        self.b_terms = eliminated_terms(self.sizes, factors)
        g_b = self.sizes[self.b_terms[0]]
        # level by level, each level's terms in turn (one k x k block of P per level)
        self.b_idx = np.stack([self.offsets[k] + np.arange(g_b) for k in self.b_terms],
                              axis=1).ravel()
        self.r_idx = np.setdiff1d(np.arange(self.size), self.b_idx)
        #: position of each r-location in the r-block
        self._r_pos = np.full(self.size, -1)
        self._r_pos[self.r_idx] = np.arange(self.r_idx.size)

    def z_times(self, d, X, groups, weights) -> np.ndarray:
        """``Z d`` of the rows of a chunk (``X`` their covariates, ``groups`` and
        ``weights`` each term's levels and weights)."""
        out = X @ d[:self.p]
        for k, (g, w) in enumerate(zip(groups, weights)):
            out = out + w * d[self.offsets[k]:self.offsets[k] + self.sizes[k]][g]
        return out

    def zt_times(self, r, X, groups, weights) -> np.ndarray:
        """``Z' r`` of the rows of a chunk."""
        parts = [X.T @ r]
        parts += [np.bincount(g, w * r, G) for g, w, G in zip(groups, weights, self.sizes)]
        return np.concatenate(parts)

    def zz(self, X, groups, weights):
        """The blocks ``(ZZ_rr, ZZ_rb, ZZ_bb)`` of ``Z'Z`` of the rows of a chunk."""
        n, bt = X.shape[0], self.b_terms
        w = [np.broadcast_to(np.asarray(wk, dtype=np.float64), (n,)) for wk in weights]
        # the r-block's column sets: (start in the r-block, levels or None for X, values)
        sets = [(0, None, X, self.p)]
        for k in range(len(self.sizes)):
            if k not in bt:
                sets.append((int(self._r_pos[self.offsets[k]]), groups[k], w[k], self.sizes[k]))
        rr = np.zeros((self.r_idx.size, self.r_idx.size))
        for i, (s_i, g_i, v_i, n_i) in enumerate(sets):
            for s_j, g_j, v_j, n_j in sets[i:]:
                block = _cross(g_i, v_i, n_i, g_j, v_j, n_j)
                rr[s_i:s_i + n_i, s_j:s_j + n_j] += block
                if s_j != s_i:
                    rr[s_j:s_j + n_j, s_i:s_i + n_i] += block.T
        gb, g_b, kb = groups[bt[0]], self.sizes[bt[0]], len(bt)
        if kb == 1:
            bb = np.bincount(gb, w[bt[0]] * w[bt[0]], g_b)
        else:
            bb = np.empty((g_b, kb, kb))
            for i, ki in enumerate(bt):
                for j, kj in enumerate(bt[i:], i):
                    bb[:, i, j] = bb[:, j, i] = np.bincount(gb, w[ki] * w[kj], g_b)
        shape = (self.r_idx.size, g_b * kb)
        if shape[0] * shape[1] <= DENSE_CROSS_ENTRIES:  # small: dense is faster
            rb = np.zeros(shape)
            for pos, kj in enumerate(bt):  # column of (level l, term pos): l kb + pos
                for s_i, g_i, v_i, n_i in sets:
                    rb[s_i:s_i + n_i, pos::kb] += _cross(g_i, v_i, n_i, gb, w[kj], g_b)
            return rr, rb, bb
        rows, cols, vals = [], [], []
        for pos, kj in enumerate(bt):
            col_of_row, wb = gb * kb + pos, w[kj]
            for s_i, g_i, v_i, _ in sets:
                if g_i is None:  # X' Z_b: every covariate against the row's level
                    for col in range(v_i.shape[1]):
                        rows.append(np.full(n, s_i + col))
                        cols.append(col_of_row)
                        vals.append(v_i[:, col] * wb)
                else:
                    rows.append(s_i + g_i)
                    cols.append(col_of_row)
                    vals.append(v_i * wb)
        rb = (sp.coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                            shape=shape).tocsr() if rows else sp.csr_matrix(shape))
        return rr, rb, bb


def _cross(g_i, v_i, n_i, g_j, v_j, n_j) -> np.ndarray:
    """``sum_rows u_i u_j'`` as a dense ``(n_i, n_j)`` block, with ``u`` a row's dense
    covariates (``g`` None, ``v`` of shape ``(n, n_cols)``) or its weight ``v`` in the
    column of its level ``g``."""
    if g_i is None and g_j is None:
        return v_i.T @ v_j
    if g_j is None:
        return _cross(g_j, v_j, n_j, g_i, v_i, n_i).T
    if g_i is None:
        return np.array([np.bincount(g_j, v_i[:, c] * v_j, n_j) for c in range(n_i)]
                        ).reshape(n_i, n_j)
    flat = g_i.astype(np.int64) * n_j + g_j
    return np.bincount(flat, v_i * v_j, n_i * n_j).reshape(n_i, n_j)
