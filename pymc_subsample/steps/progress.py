"""The progress-bar columns of the subsampling steps, beside PyMC's own.

PyMC's hooks ``_progressbar_config`` and ``_make_progressbar_update_functions`` of
:class:`~pymc_subsample.steps.base.SubsampleStep` build on these: fixed-width ``rich``
text columns (:func:`progress_columns`) of the running means of sample stats
(:func:`progress_update_functions`), as many as fit beside PyMC's columns in the console
(:func:`fit_progress_columns`).
"""

from __future__ import annotations

import math

__all__ = ["PYMC_PROGRESS_WIDTH", "PROGRESS_VALUE_WIDTH", "short_number", "column_width",
           "progress_width", "progress_console_width", "fit_progress_columns",
           "progress_columns", "progress_update_functions"]

#: Characters that PyMC's own progress-bar columns take uncut (PyMC 5's layout of its
#: rich table): the edges and the dividers between its five columns (2 + 4), "Draw" (6,
#: to 9,999 draws), "Speed" (17: "9999.99 draws/s"), "Elapsed" (9), "Remaining" (11),
#: and the bar, which rich narrows first but only down to the widest other column (the
#: Speed column's 17; below that it narrows Speed too, which then wraps).
PYMC_PROGRESS_WIDTH = 66
#: values in a progress column take at most this many characters (:func:`short_number`)
PROGRESS_VALUE_WIDTH = 4


def short_number(x: float, width: int = PROGRESS_VALUE_WIDTH) -> str:
    """``x`` in at most ``width`` characters where possible: two, one or no decimals,
    then thousands (``k``), millions (``M``), billions (``G``); ``-`` for NaN."""
    x = float(x)
    if math.isnan(x):
        return "-"
    for scale, suffix in ((1.0, ""), (1e3, "k"), (1e6, "M"), (1e9, "G")):
        for decimals in (2, 1, 0):
            text = f"{x / scale:.{decimals}f}{suffix}"
            if len(text) <= width:
                return text
    return f"{x:.0e}"


def column_width(header: str) -> int:
    """The width of a progress column: its header or a value, whichever is wider."""
    return max(len(header), PROGRESS_VALUE_WIDTH)


def progress_width(columns) -> int:
    """Characters ``columns`` (``PROGRESS_COLUMNS`` entries) add to PyMC's progress
    table: each its :func:`column_width`, its padding (2) and a divider (1)."""
    return sum(column_width(header) + 3 for _, _, header, _ in columns)


def progress_console_width():
    """The width of the console PyMC's progress bar draws on: the ``COLUMNS``
    environment variable, else a terminal's or a notebook's width (as ``rich`` reads
    them); None when the output is neither (no live bar to fit)."""
    import os
    import sys

    from rich.console import Console

    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit():
        return int(columns)
    for stream in (sys.stderr, sys.stdout):
        console = Console(file=stream)
        if console.is_jupyter or console.is_terminal:
            return console.width
    return None


def fit_progress_columns(columns, width="console"):
    """The leading entries of ``columns`` (most useful first) that fit beside PyMC's own
    columns (:data:`PYMC_PROGRESS_WIDTH`) in ``width`` characters, at least the first:
    at 80 characters two four-character columns fit, so that nothing is cut or wrapped
    on PyMC 5. ``width="console"``: :func:`progress_console_width`; None keeps all."""
    if isinstance(width, str):
        width = progress_console_width()
    if width is None:
        return tuple(columns)
    room = width - PYMC_PROGRESS_WIDTH
    kept = []
    for column in columns:
        if kept and progress_width(kept + [column]) > room:
            break
        kept.append(column)
    return tuple(kept)


def progress_columns(columns, n_chains: int = 1):
    """PyMC's ``_progressbar_config``: one ``rich`` text column per entry
    ``(stat, field, header, format)`` of ``columns``, of fixed width
    (:func:`column_width`, no wrapping), so that rich never cuts its header or values
    (it narrows PyMC's flexible columns instead), and the fields' initial values."""
    from rich.progress import TextColumn
    from rich.table import Column

    out = [
        TextColumn(f"{{task.fields[{name}]}}",
                   table_column=Column(header, no_wrap=True, width=column_width(header)))
        for _, name, header, _ in columns
    ]
    return out, {name: ["-"] * n_chains for _, name, _, _ in columns}


def progress_update_functions(columns):
    """PyMC's ``_make_progressbar_update_functions``: the running means of the columns'
    stats over the draws so far (non-finite values skipped), each in its column's width
    (the column's format, else :func:`short_number`). PyMC passes a draw's stats without
    its chain, so the means pool the chains (which run the same kernel); tuning draws
    count too."""
    totals = {stat: [0.0, 0] for stat, *_ in columns}

    def update_stats(step_stats):
        out = {}
        for stat, name, header, fmt in columns:
            value = float(step_stats.get(stat, 0.0))
            total = totals[stat]
            if math.isfinite(value):
                total[0] += value
                total[1] += 1
            mean = total[0] / total[1] if total[1] else math.nan
            text = fmt.format(mean) if total[1] else "-"
            width = column_width(header)
            out[name] = text if len(text) <= width else short_number(mean, width)
        return out

    return (update_stats,)
