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
                                    "pymc_subsample.out_of_core", "pymc_subsample.passes",
                                    "pymc_subsample.steps", "pymc_subsample.step_checks",
                                    "pymc_subsample.errors", "pymc_subsample.validation"])
def test_every_public_name_has_an_api_entry(module):
    import importlib

    mod = importlib.import_module(module)
    public = {n for n in mod.__all__ if not n.startswith("_")}
    # modules: their names
    public -= {"__version__", "datasets", "diagnostics", "proposals", "out_of_core", "passes",
               "errors", "validation", "steps"}
    missing = sorted(public - _documented())
    assert not missing, f"{module}: no API entry in docs/api/*.rst for {missing}"


def test_the_step_pages_are_the_registered_steps():
    """docs/api has one page per step of pymc_subsample.steps.REGISTRY (with its
    autoclass), and the index lists exactly those in its toctree and autosummary."""
    from pymc_subsample.steps import REGISTRY

    index = (DOCS / "api" / "index.rst").read_text()
    section = index.split("Step methods\n------------", 1)[1].split("\n---", 1)[0]
    toctree = section.split(".. toctree::", 1)[1].split("..", 1)[0]
    summary = section.split(".. autosummary::", 1)[1].split("\n\n", 2)[1]
    pages = {p.stem for p in (DOCS / "api").glob("*.rst")} - {"index", "LikelihoodEngine"}
    names = sorted(REGISTRY)
    assert sorted(pages) == names
    assert sorted(re.findall(r"^   (\w+)$", toctree, flags=re.M)) == names
    assert sorted(re.findall(r"^   (\w+)$", summary, flags=re.M)) == names
    for name in names:
        page = (DOCS / "api" / f"{name}.rst").read_text()
        assert f".. autoclass:: {name}" in page, name


def test_every_notebook_is_in_the_tutorials_toctree():
    index = (DOCS / "notebooks" / "index.md").read_text()
    notebooks = sorted(p.stem for p in (DOCS / "notebooks").glob("*.ipynb"))
    assert len(notebooks) >= 5
    assert [n for n in notebooks if n not in index] == []
