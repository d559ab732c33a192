"""Structural limits of the package that keep its step methods readable.

The step classes stay thin, as PyMC's ``step_methods`` are: their set-up, argument
checks, running checks and estimator plumbing live in modules of their own (e.g.
``steps/scalable_setup.py``, ``steps/sgld_setup.py``, ``steps/sgld_checks.py``), so every
module of ``pymc_subsample/steps`` (its subpackages included) has at most
:data:`MAX_STEP_MODULE_LINES` lines, counted as ``wc -l`` counts them.
"""

from __future__ import annotations

from pathlib import Path

STEPS = Path(__file__).resolve().parents[1] / "pymc_subsample" / "steps"

#: the most lines a module of ``pymc_subsample/steps`` may have
MAX_STEP_MODULE_LINES = 350


def _line_count(path: Path) -> int:
    """Newline characters in ``path``: what ``wc -l`` reports."""
    return path.read_bytes().count(b"\n")


def test_every_step_module_is_at_most_350_lines():
    modules = sorted(STEPS.rglob("*.py"))
    assert len(modules) > 10, modules  # the package, its subpackages, found
    long = {str(p.relative_to(STEPS.parent)): n for p in modules
            if (n := _line_count(p)) > MAX_STEP_MODULE_LINES}
    assert not long, (f"step modules over {MAX_STEP_MODULE_LINES} lines (move cohesive "
                      f"helpers into modules of their own): {long}")


def test_the_line_count_is_wc_l(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("a = 1\nb = 2\nc = 3")  # no final newline: wc -l says 2
    assert _line_count(path) == 2
