"""The documentation covers the public API (the site itself is built by .ci/run)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _documented() -> set[str]:
    names = set()
    for rst in (DOCS / "api").glob("*.rst"):
        text = rst.read_text()
        names.update(re.findall(r"^\s+([A-Za-z_][A-Za-z0-9_]*)\s*$", text, flags=re.M))
        names.update(re.findall(r"^\.\. autoclass:: ([A-Za-z_][A-Za-z0-9_]*)", text, flags=re.M))
    return names


@pytest.mark.parametrize("module", ["pymc_subsample", "pymc_subsample.proposals",
                                    "pymc_subsample.diagnostics", "pymc_subsample.datasets",
                                    "pymc_subsample.out_of_core", "pymc_subsample.passes"])
def test_every_public_name_has_an_api_entry(module):
    import importlib

    mod = importlib.import_module(module)
    public = {n for n in mod.__all__ if not n.startswith("_")}
    # modules: their names
    public -= {"__version__", "datasets", "diagnostics", "proposals", "out_of_core", "passes"}
    missing = sorted(public - _documented())
    assert not missing, f"{module}: no API entry in docs/api/*.rst for {missing}"


def test_every_notebook_is_in_the_tutorials_toctree():
    index = (DOCS / "notebooks" / "index.md").read_text()
    notebooks = sorted(p.stem for p in (DOCS / "notebooks").glob("*.ipynb"))
    assert len(notebooks) >= 5
    assert [n for n in notebooks if n not in index] == []
