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


PACKAGE = DOCS.parent / "pymc_subsample"


def _package_modules() -> set[str]:
    """Every module file (``kernels/rows.py``; no ``__init__.py``) and every subpackage
    (``kernels/``) of the package, as paths inside it."""
    out = set()
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if "__pycache__" in rel.parts:
            continue
        if path.name == "__init__.py":
            if rel.parent != Path("."):
                out.add(rel.parent.as_posix() + "/")
        else:
            out.add(rel.as_posix())
    return out


def _named_paths(text: str) -> set[str]:
    """The paths the text names, brace lists expanded (``kernels/{rows,alias}.py`` ->
    ``kernels/rows.py``, ``kernels/alias.py``), with a leading ``pymc_subsample/`` dropped,
    and the folders above them."""
    expanded = re.sub(
        r"([\w/.]*)\{([\w,\s/]+)\}(\.py)?",
        lambda m: " ".join(f"{m[1]}{item.strip()}{m[3] or ''}" for item in m[2].split(",")),
        text)
    paths = {p[len("pymc_subsample/"):] if p.startswith("pymc_subsample/") else p
             for p in re.findall(r"[\w/]*\w\.py\b|[\w/]*\w/", expanded)}
    # a folder is named with any path inside it (``consensus/run.py`` names ``consensus/``)
    return paths | {p[: i + 1] for p in paths for i, c in enumerate(p) if c == "/"}


def test_named_paths_reads_brace_lists_and_plain_paths():
    named = _named_paths("`pymc_subsample/kernels/{rows, alias}.py`, `steps/{a,b}.py` and "
                         "`center.py`; the package `kernels/families/` and "
                         "`pymc_subsample/kernels/families/{base,logit}.py`")
    assert {"kernels/rows.py", "kernels/alias.py", "steps/a.py", "steps/b.py", "center.py",
            "kernels/families/", "kernels/families/base.py",
            "kernels/families/logit.py", "steps/"} <= named
    assert "kernels/{rows, alias}.py" not in named and "rows.py" not in named


def test_the_architecture_doc_names_every_module():
    named = _named_paths((DOCS / "architecture.md").read_text())
    missing = sorted(_package_modules() - named)
    assert not missing, (
        "docs/architecture.md does not name these modules of pymc_subsample/ (add each to "
        "the layer table or a section, as `pymc_subsample/<path>`, `<path>`, or in a brace "
        f"list such as `kernels/{{rows,alias}}.py`): {', '.join(missing)}")


def test_the_architecture_doc_names_no_module_that_is_gone():
    text = (DOCS / "architecture.md").read_text()
    subpackages = {m.split("/")[0] for m in _package_modules() if m.endswith("/")}
    # paths inside the package: under a subpackage's name or pymc_subsample/ (not
    # tests/..., benchmarks/..., nor a placeholder such as steps/<name>.py)
    inside = {p for p in _named_paths(text) if "/" in p and p.split("/")[0] in subpackages}
    gone = sorted(p for p in inside if not (PACKAGE / p).exists())
    assert not gone, ("docs/architecture.md names modules that pymc_subsample/ no longer "
                      f"has (renamed, moved or removed?): {', '.join(gone)}")
