"""No import circle among the package's modules.

Every module of ``pymc_subsample`` is parsed with :mod:`ast` (nothing is imported) and
its imports of other modules of the package are collected, relative and absolute. Two
graphs are built:

* the **module-level** graph: imports executed when the module is imported (statements
  at the top level, including those inside top-level ``if``/``try`` blocks). It must have
  no cycle: a cycle there makes the import order matter (the module imported first sees
  the other half-initialised).
* the **function-level** graph: imports inside function or method bodies, run only when
  called. They are the accepted way to reach a module that imports this one, so the
  whole package is not required to be acyclic with them; the GLM families
  (``kernels/families/``) are, with them too.

``from . import x`` counts as an import of the submodule ``x`` when ``x`` is one, else of
the package; an import of ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``, which
count as imported (a package's ``__init__`` importing its own submodules is no cycle:
a submodule importing its package's ``__init__`` back is).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "pymc_subsample"


def _modules(root: Path, package: str) -> dict:
    """``{dotted name: path}`` of every module of ``package`` under ``root``."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_package(name: str, modules: dict) -> bool:
    return modules[name].name == "__init__.py"


def _resolve(module: str, node: ast.ImportFrom, modules: dict) -> str:
    """The absolute base module of a ``from ... import`` in ``module``."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not _is_package(module, modules):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(module: str, node, modules: dict) -> set:
    """Modules of the package that the import statement ``node`` in ``module`` runs: the
    modules it names and the packages above them, except the packages that contain
    ``module`` (already being imported when it runs) unless it names them itself (reads
    a name from their ``__init__``)."""
    if isinstance(node, ast.Import):
        named = {a.name for a in node.names}
    else:
        base = _resolve(module, node, modules)
        named = {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                 for a in node.names}
    parents = {".".join(module.split(".")[:k]) for k in range(1, module.count(".") + 1)}
    if _is_package(module, modules):
        parents.add(module)
    out = set()
    for name in named:
        parts = name.split(".")
        for k in range(1, len(parts) + 1):  # a.b.c runs a, a.b and a.b.c
            prefix = ".".join(parts[:k])
            if prefix in modules and prefix != module and (
                    prefix == name or prefix not in parents):
                out.add(prefix)
    return out


def _walk_level(tree: ast.Module):
    """``(import node, at module level)`` for every import statement of a module."""
    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, not in_function
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                      ast.Lambda))
            yield from visit(child, inner)

    yield from visit(tree, False)


def import_graphs(root: Path = ROOT, package: str = PACKAGE):
    """``(module_level, function_level)``: ``{module: set of imported package modules}``."""
    modules = _modules(root, package)
    top = {m: set() for m in modules}
    inner = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node, module_level in _walk_level(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and not (
                    (node.module or "").startswith(package)):
                continue
            (top if module_level else inner)[name] |= _targets(name, node, modules)
    return top, inner


def find_cycle(graph: dict):
    """One cycle of ``graph`` as a list of nodes (first == last), or None."""
    state = {}

    def dfs(node, stack):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = dfs(nxt, stack)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = dfs(node, [])
            if found:
                return found
    return None


def _union(a: dict, b: dict) -> dict:
    return {k: a.get(k, set()) | b.get(k, set()) for k in set(a) | set(b)}


def test_no_module_level_import_cycle():
    top, _ = import_graphs()
    cycle = find_cycle(top)
    assert cycle is None, "module-level import circle: " + " -> ".join(cycle)


def test_the_families_package_has_no_cycle_even_with_function_level_imports():
    top, inner = import_graphs()
    both = _union(top, inner)
    prefix = f"{PACKAGE}.kernels.families"
    sub = {k: {v for v in vs if v.startswith(prefix)} for k, vs in both.items()
           if k.startswith(prefix)}
    assert len(sub) > 3, sorted(sub)
    cycle = find_cycle(sub)
    assert cycle is None, "import circle in the families: " + " -> ".join(cycle)


def _write(root: Path, files: dict):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.mark.parametrize("files, cycle", [
    # today's families circle: a module whose last line imports a module importing it back
    ({"pkg/__init__.py": "", "pkg/k/__init__.py": "",
      "pkg/k/families.py": "X = 1\nfrom . import extra  # noqa\n",
      "pkg/k/extra.py": "from .families import X\n"}, True),
    ({"pkg/__init__.py": "", "pkg/a.py": "import pkg.b\n", "pkg/b.py": "from pkg import a\n"},
     True),
    ({"pkg/__init__.py": "", "pkg/a.py": "from .b import f\n",
      "pkg/b.py": "def f():\n    from . import a\n"}, False),  # function level: allowed
    ({"pkg/__init__.py": "from .a import X\n", "pkg/a.py": "X = 1\n"}, False),
    # a submodule importing a sibling does not import its (half-initialised) package
    ({"pkg/__init__.py": "from .a import X\n", "pkg/a.py": "from .b import Y\nX = Y\n",
      "pkg/b.py": "Y = 2\n"}, False),
    ({"pkg/__init__.py": "from .a import X\n", "pkg/a.py": "from . import Y\n"}, True),
])
def test_the_cycle_finder_finds_circles(tmp_path, files, cycle):
    """The checker itself: it finds the circle the GLM families had (``families.py``'s
    last lines importing modules that import it back) and does not flag function-level
    imports or a package ``__init__`` importing its submodules."""
    _write(tmp_path, files)
    top, _ = import_graphs(tmp_path, "pkg")
    assert (find_cycle(top) is not None) == cycle, top


def _top(module: str) -> str:
    """The first-level subpackage (or top-level module) of a dotted module name."""
    parts = module.split(".")
    return ".".join(parts[:2])


def private_imports(root: Path = ROOT, package: str = PACKAGE) -> list:
    """``(importer, target, name)`` for each private name (one leading underscore) that
    a module imports from another first-level part of the package (``steps`` from
    ``engine``, ``consensus`` from ``diagnostics``, ...): what crosses such a line is an
    interface and must carry a public name. A private *module* (``_memmap``,
    ``kernels/_validation``) is the package's internal interface and may be imported
    anywhere in it; a private name inside a module is that module's own."""
    modules = _modules(root, package)
    out = []
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            target = _resolve(module, node, modules)
            for alias in node.names:
                name = alias.name
                if name.startswith("_") and not name.startswith("__"):
                    if f"{target}.{name}" in modules:
                        continue  # a private module, not a private name
                    if _top(target) != _top(module):
                        out.append((module, target, name))
    return out


def test_no_private_name_crosses_a_subpackage():
    assert private_imports() == []


def test_the_private_import_finder_finds_one(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/a/__init__.py": "",
                      "pkg/a/m.py": "def _helper():\n    pass\n",
                      "pkg/a/_io.py": "", "pkg/a/n.py": "from .m import _helper\n",
                      "pkg/b.py": "from .a.m import _helper\nfrom .a import m, _io\n"})
    assert private_imports(tmp_path, "pkg") == [("pkg.b", "pkg.a.m", "_helper")]
