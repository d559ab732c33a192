"""Rebuild the shipped Barker correction table ``barker_correction.npz``.

Computes the correction distribution ``C_1`` of Seita et al. (2017), Section 4 and
Appendix C.1 (see :mod:`pymc_subsample.kernels.acceptance.barker_correction` for the method), and
writes it where the package reads it (``pymc_subsample/data/barker_correction.npz``).
Not a benchmark: the offline build of a data file, kept out of the installed package.
Run from the repository::

    python benchmarks/build_barker_correction.py

Options override :data:`~pymc_subsample.kernels.acceptance.barker_correction.DEFAULT_BUILD_SETTINGS`;
``--output`` writes elsewhere (e.g. to compare a rebuild with the shipped file).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# run as a file from a checkout: make the repository importable
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pymc_subsample.kernels.acceptance.barker_correction import (  # noqa: E402
    DEFAULT_BUILD_SETTINGS,
    DEFAULT_TABLE_PATH,
    build_correction,
)


def main(argv=None) -> int:
    d = DEFAULT_BUILD_SETTINGS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--output", type=Path, default=DEFAULT_TABLE_PATH)
    ap.add_argument("--method", choices=["minimax", "lstsq"], default=d["method"])
    ap.add_argument("--half-width", type=float, default=d["half_width"])
    ap.add_argument("--n-points", type=int, default=d["n_points"])
    ap.add_argument("--sigma", type=float, default=d["sigma"])
    ap.add_argument("--tol", type=float, default=d["tol"], help="minimax only")
    ap.add_argument("--x-max", type=float, default=d["x_max"], help="minimax only")
    ap.add_argument("--dx", type=float, default=d["dx"], help="minimax only")
    ap.add_argument("--lam", type=float, default=10.0, help="lstsq only")
    a = ap.parse_args(argv)

    t0 = time.perf_counter()
    corr = build_correction(
        a.method,
        half_width=a.half_width,
        n_points=a.n_points,
        sigma=a.sigma,
        tol=a.tol,
        x_max=a.x_max,
        dx=a.dx,
        lam=a.lam,
    )
    elapsed = time.perf_counter() - t0
    a.output.parent.mkdir(parents=True, exist_ok=True)
    corr.save(a.output)
    print(f"wrote {a.output} ({a.output.stat().st_size / 1024:.1f} KiB) in {elapsed:.1f} s")
    print(f"  settings   {corr.settings}")
    print(f"  sum        {corr.probs.sum():.17g}")
    print(f"  cdf_error  {corr.cdf_error:.3e}  (sup |P(N(0,s^2)+X_corr<=x) - S(x)|)")
    print(f"  mean, var  {corr.mean:.3e}, {corr.var:.6f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
