"""Sphinx configuration of the pymc-subsample documentation site.

Build (from the repository root; warnings are errors, the notebooks are executed):

    python3 -m venv .venv && .venv/bin/pip install -q -e ".[docs]" && \
        .venv/bin/sphinx-build -W --keep-going -b html docs docs/_build/html
"""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))
sys.path.insert(0, os.path.abspath("_ext"))  # the local extension notebook_execution
# the notebooks' kernels inherit this environment: a non-interactive MPLBACKEND (CI sets
# Agg) would stop ipykernel from choosing its inline backend, and no figure would render
os.environ.pop("MPLBACKEND", None)
import pymc_subsample  # noqa: E402

project = "pymc-subsample"
author = "the pymc-subsample developers"
copyright = "2026, the pymc-subsample developers"
version = release = pymc_subsample.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_nb",
    # a notebook whose kernel dies is executed again, and the death reported (its exit
    # status, the memory left): docs/_ext/notebook_execution.py
    "notebook_execution",
    # MathJax served with the site (the build machines, and some readers, have no network)
    "sphinx-mathjax-offline",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints", "jupyter_execute"]
templates_path = ["_templates"]

# API pages: one page per public name, generated at build time under api/generated/
autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"  # numpydoc's Parameters sections say the types
numpydoc_show_class_members = False  # autosummary lists them
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False


# MyST and the notebooks: executed during every build from a clean tree (cached between
# local builds by jupyter-cache); a failing cell fails the build
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3
nb_execution_mode = os.environ.get("PMS_NB_EXECUTION", "cache")
nb_execution_timeout = 1800
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True


def _init_signature(app, what, name, obj, options, signature, return_annotation):
    """Show a class's ``__init__`` signature: PyMC's step classes define ``__new__(*args,
    **kwargs)``, which autodoc would show instead of the keyword arguments."""
    import inspect

    if what == "class" and signature in ("(*args, **kwargs)", None):
        try:
            sig = inspect.signature(obj.__init__)
        except (TypeError, ValueError):
            return None
        params = list(sig.parameters.values())[1:]
        return str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty)), None
    return None


def setup(app):
    app.connect("autodoc-process-signature", _init_signature)


html_theme = "pydata_sphinx_theme"
html_title = f"pymc-subsample {version}"
html_static_path = ["_static"]
html_theme_options = {
    "navbar_end": ["navbar-icon-links"],
    "secondary_sidebar_items": ["page-toc"],
    "show_toc_level": 2,
    "navigation_with_keys": False,
}
html_sidebars = {"index": []}
suppress_warnings = ["mystnb.unknown_mime_type"]
