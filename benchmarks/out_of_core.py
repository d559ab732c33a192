"""ScalableMH on a memory-mapped data set larger than one would hold in RAM.

A logistic regression with N rows (default 10^8) and 10 float32 features, written chunk by
chunk by ``pms.datasets.write_logistic`` into ``.npy`` files (X: float32, y: int64, the
observed variable's dtype) and opened with ``mmap_mode="r"``; y enters the model through
``pms.out_of_core.rows`` so that PyMC does not copy it. Measured in one run:

- the step's one-time passes over the data (mode search, control-variate sums, bound
  constants) with 1 and with 2 threads (``pms.passes.configure(num_workers=...)``),
  and the row table's construction (``InverseCDFTable``);
- 2 chains x 2,000 draws (after 500 tuning steps) in this process;
- the process's anonymous memory (``RssAnon`` in /proc/self/status, sampled every 50 ms)
  during each phase, against the files' size and the step's per-row arrays (``psi_i`` in
  float32 rounded up, the row table's int64 cumulative grid units). The files'
  pages show in ``RssFile``: page cache shared with other processes, not copies.
- the posterior against a Laplace approximation computed here by an independent chunked
  NumPy Newton iteration (accurate to about N^-1/2 sd at this size).

Usage: ``python benchmarks/out_of_core.py [--rows 1e8] [--quick] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import tempfile
import threading
import time

import numpy as np

D = 10
GIB = 2.0**30


class Memory:
    """``RssAnon`` and ``RssFile`` of this process, sampled in a thread; peaks per phase."""

    def __init__(self, interval=0.05):
        self.phase, self.peaks, self._stop = "start", {}, threading.Event()
        self.start_of = {}
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    @staticmethod
    def read():
        out = {}
        with open("/proc/self/status") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("RssAnon", "RssFile"):
                    out[key] = int(rest.split()[0]) * 1024
        return out

    def _record(self):
        now = self.read()
        peak = self.peaks.setdefault(self.phase, {"RssAnon": 0, "RssFile": 0})
        for k, v in now.items():
            peak[k] = max(peak[k], v)
        return now

    def _run(self, interval):
        while not self._stop.is_set():
            self._record()
            self._stop.wait(interval)

    def mark(self, phase):
        self._record()
        self.phase = phase
        self.start_of[phase] = self._record()

    def stop(self):
        self._stop.set()
        self._thread.join()
        self._record()


def laplace(X, y, prior_sd=1.0, chunk=1 << 18):
    """Mode and covariance of the posterior by Newton's method, in NumPy, chunk by chunk."""
    n = X.shape[0]
    b = np.zeros(D)
    for _ in range(50):
        g, h = -b / prior_sd**2, -np.eye(D) / prior_sd**2
        for s in range(0, n, chunk):
            xc = np.asarray(X[s : s + chunk], dtype=np.float64)
            yc = np.asarray(y[s : s + chunk], dtype=np.float64)
            p = 1.0 / (1.0 + np.exp(-(xc @ b)))
            g += xc.T @ (yc - p)
            h -= (xc * (p * (1.0 - p))[:, None]).T @ xc
        step = np.linalg.solve(-h, g)
        b = b + step
        if g @ step < 1e-10:
            break
    return b, np.linalg.inv(-h)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=float, default=1e8)
    ap.add_argument("--quick", action="store_true", help="10^6 rows")
    ap.add_argument("--dir", default=None, help="where to write the data (default: a temp dir)")
    ap.add_argument("--draws", type=int, default=2000)
    args = ap.parse_args(argv)
    n = int(1e6 if args.quick else args.rows)

    mem = Memory()
    import arviz as az
    import pymc as pm

    import pymc_subsample as pms
    from pymc_subsample._memmap import is_file_backed
    from pymc_subsample.engine.evaluate import BatchFunctions

    directory = args.dir or tempfile.mkdtemp(prefix="pms-ooc-")
    os.makedirs(directory, exist_ok=True)
    mem.mark("write data")
    t0 = time.perf_counter()
    x_path, y_path, _ = pms.datasets.write_logistic(directory, n, D, dtype="float32")
    t_write = time.perf_counter() - t0
    file_bytes = os.path.getsize(x_path) + os.path.getsize(y_path)

    def model_on(X, y):
        with pm.Model() as model:
            beta = pm.Normal("beta", 0.0, 1.0, shape=D)
            pm.Bernoulli("y", logit_p=pm.math.dot(X, beta), observed=y)
        return model

    # compile once on a small in-memory model (cached): the set-ups below time the passes
    mem.mark("compile")
    Xm = np.load(x_path, mmap_mode="r")
    with model_on(np.array(Xm[:20_000]), np.array(np.load(y_path, mmap_mode="r")[:20_000])):
        pms.ScalableMH(progressbar=False)

    mem.mark("model")
    model = model_on(pms.out_of_core.rows(x_path), pms.out_of_core.rows(y_path, dtype="int64"))
    baseline = mem.read()["RssAnon"]

    # time spent in the parallel passes (the engine's map_rows) and in building the
    # row table, per set-up (wrappers that only time the calls)
    spent = {"passes": 0.0, "table": 0.0}
    from pymc_subsample.steps import scalable_bounds as scalable_module  # builds the table

    def timing(key, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[key] += time.perf_counter() - t
        return wrapper

    originals = BatchFunctions.map_rows, scalable_module.InverseCDFTable
    BatchFunctions.map_rows = timing("passes", originals[0])
    scalable_module.InverseCDFTable = timing("table", originals[1])
    setups = {}
    step = None
    for threads in (1, 2):
        step = None  # the previous step's arrays go before the next set-up
        gc.collect()
        mem.mark(f"set-up, {threads} thread(s)")
        spent.update(passes=0.0, table=0.0)
        t0 = time.perf_counter()
        with pms.passes.configure(num_workers=threads), model:
            step = pms.ScalableMH(progressbar=False)
        setups[threads] = {"passes s": spent["passes"], "row table s": spent["table"],
                           "set-up s": time.perf_counter() - t0}
    BatchFunctions.map_rows, scalable_module.InverseCDFTable = originals
    per_row = {"psi": step.psi.nbytes, "table": step.table.cumulative.nbytes}

    mem.mark("sampling")
    t0 = time.perf_counter()
    with model:
        idata = pm.sample(draws=args.draws, tune=500, chains=2, cores=1, step=step,
                          random_seed=2026, progressbar=False)
    t_sample = time.perf_counter() - t0
    obs = pms.diagnostics.data_usage_summary(idata, n_rows=n)
    observed_on_disk = is_file_backed(np.asarray(idata["observed_data"]["y"].values))

    mem.mark("Laplace reference (NumPy)")
    mode, cov = laplace(Xm, np.load(y_path, mmap_mode="r"))
    mem.mark("end")
    mem.stop()

    mean, sd, labels = pms.diagnostics.posterior_moments(idata, var_names=["beta"])
    ref_sd = np.sqrt(np.diag(cov))
    err = np.abs(mean - mode) / ref_sd
    ratio = sd / ref_sd
    ess = az.ess(idata, var_names=["beta"])["beta"].values
    rhat = az.rhat(idata, var_names=["beta"])["beta"].values

    lines = [f"# ScalableMH on N = {n:,} memory-mapped rows (10 float32 features)", ""]
    lines += [f"- files: X {os.path.getsize(x_path) / GIB:.2f} GiB + y "
              f"{os.path.getsize(y_path) / GIB:.2f} GiB = {file_bytes / GIB:.2f} GiB "
              f"(written in {t_write:.0f} s)",
              f"- per-row arrays of the step: psi {per_row['psi'] / GIB:.3f} GiB "
              f"(float32), row table {per_row['table'] / GIB:.3f} GiB (int64) = "
              f"{sum(per_row.values()) / GIB:.2f} GiB ({sum(per_row.values()) / n:.0f} B/row)",
              f"- anonymous memory after building the model: {baseline / GIB:.2f} GiB", ""]
    lines += ["| one-time passes | 1 thread | 2 threads | ratio |", "|---|---|---|---|"]
    for key in ("passes s", "row table s", "set-up s"):
        a, b = setups[1][key], setups[2][key]
        lines.append(f"| {key} | {a:.1f} | {b:.1f} | {a / b:.2f} |")
    lines += ["", "| phase | peak RssAnon GiB | peak RssFile GiB |", "|---|---|---|"]
    for phase, peak in mem.peaks.items():
        if phase == "start":
            continue
        lines.append(f"| {phase} | {peak['RssAnon'] / GIB:.2f} | {peak['RssFile'] / GIB:.2f} |")
    peak_anon = max(p["RssAnon"] for ph, p in mem.peaks.items()
                    if ph not in ("write data", "start"))
    budget = 2 * GIB + sum(per_row.values())
    lines += ["", f"- peak RssAnon from the model on: {peak_anon / GIB:.2f} GiB; "
              f"budget 2 GiB + per-row arrays = {budget / GIB:.2f} GiB: "
              f"{'within' if peak_anon <= budget else 'OVER'}; peak / file size "
              f"{peak_anon / file_bytes:.2f}",
              f"- sampling: 2 chains x {args.draws} draws (+500 tuning) in {t_sample:.1f} s; "
              f"rows read per draw {obs.loc['all', 'mean']:.2f}; min ESS {ess.min():.0f}; "
              f"max R-hat {rhat.max():.3f}",
              f"- observed_data in the result is the file: {observed_on_disk}",
              f"- posterior vs Laplace: max |mean - mode| / sd = {err.max():.3f} "
              f"(goal <= 0.1); sd ratio {ratio.min():.3f} .. {ratio.max():.3f}"]
    text = "\n".join(lines)
    print(text)
    out_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "output")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, f"out_of_core-{n:.0e}.md".replace("+", "")), "w") as fh:
        fh.write(text + "\n")
    if args.dir is None:
        shutil.rmtree(directory)
    ok = peak_anon <= budget and err.max() <= 0.1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
