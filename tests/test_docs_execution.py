"""The documentation build's notebook execution survives a dead kernel and says how it
died (``docs/_ext/notebook_execution.py``, issue 44). Needs the docs extra (nbclient,
jupyter-cache, ipykernel): skipped without it; CI's benchmark job, which runs after the
docs environment is installed, runs it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("jupyter_cache")
pytest.importorskip("ipykernel")
nbformat = pytest.importorskip("nbformat")

_PATH = Path(__file__).resolve().parents[1] / "docs" / "_ext" / "notebook_execution.py"


def _module():
    spec = importlib.util.spec_from_file_location("notebook_execution", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _notebook(marker, deaths):
    """A notebook whose kernel kills itself (SIGKILL) on its first ``deaths``
    executions, counted in the file ``marker``."""
    v4 = nbformat.v4
    code = (
        "import os, pathlib, signal\n"
        f"m = pathlib.Path({str(marker)!r})\n"
        "n = int(m.read_text()) if m.exists() else 0\n"
        "m.write_text(str(n + 1))\n"
        f"if n < {deaths}:\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "print('ran', n + 1)"
    )
    nb = v4.new_notebook(cells=[v4.new_markdown_cell("# Dies first"), v4.new_code_cell(code)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    return nb


def test_a_dead_kernel_is_reported_and_the_notebook_run_again(tmp_path):
    from jupyter_cache.executors.utils import single_nb_execution

    mod = _module()
    log = []
    run = mod.robust(single_nb_execution, log.append, attempts=3)
    nb = _notebook(tmp_path / "count", deaths=1)
    result = run(nb, cwd=str(tmp_path), timeout=120, allow_errors=False)
    assert result.err is None
    (cell,) = [c for c in nb.cells if c.cell_type == "code"]
    assert "ran 2" in "".join(o.get("text", "") for o in cell.outputs)
    assert len(log) == 1, log
    assert "'Dies first' died on attempt 1 of 3" in log[0]
    assert "killed by SIGKILL" in log[0] and "memory available" in log[0]


def test_a_kernel_that_always_dies_fails_after_the_last_attempt(tmp_path):
    from jupyter_cache.executors.utils import single_nb_execution
    from nbclient.exceptions import DeadKernelError

    mod = _module()
    log = []
    run = mod.robust(single_nb_execution, log.append, attempts=2)
    with pytest.raises(DeadKernelError):
        run(_notebook(tmp_path / "count", deaths=5), cwd=str(tmp_path), timeout=120,
            allow_errors=False)
    assert len(log) == 2 and "attempt 2 of 2" in log[1]


def test_exit_statuses_are_described():
    mod = _module()
    assert "SIGKILL (most often the out-of-memory killer)" in mod.describe_exit(-9)
    assert "SIGSEGV" in mod.describe_exit(-11)
    assert mod.describe_exit(3) == "it exited with status 3"
    assert "could not be read" in mod.describe_exit(None)
