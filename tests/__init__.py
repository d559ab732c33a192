"""The test suite, one folder per subpackage of ``pymc_subsample``.

Every test folder is a package (it has an ``__init__.py``), so test files of the same
name in different folders (``kernels/test_austere.py``, ``steps/test_austere.py``) are
distinct modules (``tests.kernels.acceptance.test_austere``, ...) under pytest's default import
mode, with ``pytest -n 2`` too. Shared models, fixtures and sampling helpers are in
``tests/conftest.py``; the statistics helpers in :mod:`pymc_subsample.testing`.
"""
