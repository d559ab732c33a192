"""The steps' progress-bar columns fit beside PyMC's own in an 80-character terminal.

PyMC draws its progress bar as a ``rich`` table: the bar, "Draw", the step's columns,
"Speed", "Elapsed", "Remaining". Too wide a table makes rich cut headers ("Rows/dr…") or
wrap cells. The steps' columns have short headers and fixed widths, and only those that
fit beside PyMC's columns are shown (:func:`pymc_subsample.steps.progress.
fit_progress_columns`). Checked here without a terminal: the width budget, and PyMC's own
table rendered into an 80-character console with worst-case values.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

import pymc_subsample as pms
from pymc_subsample.steps import REGISTRY as STEP_REGISTRY
from pymc_subsample.steps import progress
from pymc_subsample.steps.progress import (
    PYMC_PROGRESS_WIDTH,
    fit_progress_columns,
    progress_columns,
    progress_update_functions,
    progress_width,
    short_number,
)

STEPS = list(STEP_REGISTRY)
#: worst-case stats of a draw: many rows read, a large noise ratio
WORST = {"data_used": 987654.0, "accepted": 1.0, "fallback": 0.125, "noise_ratio": 12.5}


@pytest.mark.parametrize("name", STEPS)
def test_columns_fit_the_width_budget(name):
    columns = getattr(pms, name).PROGRESS_COLUMNS
    for width in (60, 80, 100):
        kept = fit_progress_columns(columns, width)
        assert kept == columns[:len(kept)] and len(kept) >= 1
        assert len(kept) == 1 or progress_width(kept) <= width - PYMC_PROGRESS_WIDTH
    # two columns fit at 80 for the MH steps (SGLD's "Noise" is one character wider)
    assert len(fit_progress_columns(columns, 80)) == (1 if name == "SGLD" else 2)
    assert fit_progress_columns(columns, 90) == columns
    assert fit_progress_columns(columns, None) == columns
    # every header within its column, every value within its width
    (update,) = progress_update_functions(columns)
    shown = update(WORST)
    for (_, field, header, _), col in zip(columns, progress_columns(columns)[0]):
        width = col.get_table_column().width
        assert len(header) <= width and len(shown[field]) <= width, (header, shown[field])


def test_short_numbers():
    assert [short_number(x) for x in (0.8, 12.345, 200.0, 1000.0, 987654.0, 2.5e6)] == [
        "0.80", "12.3", "200", "1000", "988k", "2.5M"]
    assert short_number(float("nan")) == "-"


def _render(cls, chains, width, speed):
    """PyMC's own progress table for the step class ``cls`` at the end of a run, drawn
    into a ``width``-character console (no terminal needed)."""
    from pymc.progress_bar.progress import MCMCProgressBarManager

    manager = MCMCProgressBarManager(cls, chains=chains, draws=5000, tune=4999)
    progress = manager._backend._progress
    manager._backend._initialize_tasks()
    fields = {}
    for update in manager.update_stats_functions:
        fields.update(update(WORST))
    for task in progress.tasks:
        progress.update(task.id, completed=9999, draw=9999, sampling_speed=speed, **fields)
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(
        progress.make_tasks_table(progress.tasks))
    return [line for line in out.getvalue().splitlines() if line.strip()]


@pytest.mark.parametrize("chains", [1, 2])
@pytest.mark.parametrize("name", STEPS)
def test_pymc_draws_the_columns_uncut_at_80_characters(name, chains, monkeypatch):
    """At ``COLUMNS=80``: the step's headers and values are whole on PyMC 5 and 6; on
    PyMC 5 the whole table fits (nothing cut, no cell wrapped) even at 9,999 draws/s.
    (PyMC 6 spreads its own columns by ratio and cuts "Remaining" at 80 characters
    with or without the step's columns.)"""
    import pymc as pm

    monkeypatch.setenv("COLUMNS", "80")
    cls = getattr(pms, name)
    kept = fit_progress_columns(cls.PROGRESS_COLUMNS)
    assert kept == fit_progress_columns(cls.PROGRESS_COLUMNS, 80)
    (update,) = progress_update_functions(kept)
    values = update(WORST)
    for speed in (12.34, 9999.99):
        lines = _render(cls, chains, 80, speed)
        assert max(len(line) for line in lines) <= 80
        header = lines[0].split()
        for _, field, head, _ in kept:
            assert head in header, (head, lines[0])
            assert all(values[field] in line.split() for line in lines[2:]), (field, lines)
        if pm.__version__.startswith("5."):
            text = "\n".join(lines)
            assert "…" not in text and len(lines) == 2 + chains, text


def test_a_wide_console_shows_every_column(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    columns, fields = pms.ScalableMH._progressbar_config(2)
    assert [c.get_table_column().header for c in columns] == ["Rows", "Acc", "Fallbk"]
    monkeypatch.setenv("COLUMNS", "80")
    columns, fields = pms.ScalableMH._progressbar_config(2)
    assert [c.get_table_column().header for c in columns] == ["Rows", "Acc"]
    assert set(pms.ScalableMH._make_progressbar_update_functions()[0](WORST)) == set(fields)
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr(progress, "progress_console_width", lambda: None)  # no terminal
    assert len(pms.ScalableMH._progressbar_config(1)[0]) == 3
