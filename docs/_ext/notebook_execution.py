"""Notebook execution that survives a dead kernel (issue 44), a local Sphinx extension.

The tutorials are executed during every documentation build by myst-nb, through
jupyter-cache's ``single_nb_execution`` and nbclient. Once, on a loaded 2-core machine,
the kernel executing ``03_hierarchical.ipynb`` died (nbclient's ``DeadKernelError``)
and the whole build failed with no word on why: nbclient reports only that the kernel
process is gone, not how it ended.

This extension wraps that execution:

* the kernel is started by :class:`RecordingKernelManager`, which records the kernel
  process's exit status when nbclient finds it dead, so the build log says how it ended
  (killed by a signal, ``SIGKILL`` most often the kernel's out-of-memory killer;
  ``SIGSEGV`` / ``SIGABRT`` a crash in compiled code; an exit status of its own) and how
  much memory the machine had left at that moment;
* a notebook whose kernel died is executed again from its original cells in a new
  kernel, up to ``ATTEMPTS`` times in all. A failing cell (``CellExecutionError``) or a
  timeout is not retried: it fails the build as before.

The retry is a robustness measure, not a cover: every death is reported in the build
log, with the notebook, the attempt and the exit status.
"""

from __future__ import annotations

import copy
import functools
import signal

#: executions of one notebook whose kernel died before the build gives up
ATTEMPTS = 3

#: the kernel managers started, newest last (the one a death is read from)
_MANAGERS: list = []


def _kernel_manager_class():
    from jupyter_client import AsyncKernelManager

    class RecordingKernelManager(AsyncKernelManager):
        """nbclient's default kernel manager, which keeps the kernel's exit status
        (``exit_status``: None while it runs) when a liveness check finds it gone."""

        exit_status = None

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            _MANAGERS.append(self)
            del _MANAGERS[:-4]

        async def _async_is_alive(self) -> bool:
            if self.owns_kernel and self.has_kernel and self.provisioner is not None:
                status = await self.provisioner.poll()
                if status is not None:
                    self.exit_status = status
            return await super()._async_is_alive()

    return RecordingKernelManager


def describe_exit(status) -> str:
    """How a kernel process ended, from its exit status (a negative status is the
    signal that killed it)."""
    if status is None:
        return "its exit status could not be read"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        why = {"SIGKILL": " (most often the out-of-memory killer)",
               "SIGSEGV": " (a crash in compiled code)",
               "SIGABRT": " (an abort in compiled code)"}.get(name, "")
        return f"it was killed by {name}{why}"
    return f"it exited with status {status}"


def _memory_left() -> str:
    try:
        with open("/proc/meminfo") as fh:
            info = dict(line.split(":", 1) for line in fh)
        return f"{int(info['MemAvailable'].split()[0]) / 2**20:.1f} GiB of memory available"
    except (OSError, KeyError, ValueError):
        return "memory available unknown"


def _title(nb) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.strip():
            return cell.source.strip().splitlines()[0].lstrip("# ").strip()
    return "(untitled)"


def robust(execute, log, attempts=ATTEMPTS):
    """``execute`` (jupyter-cache's ``single_nb_execution(nb, cwd, ...)``, which runs
    ``nb`` in place) run again from ``nb``'s original cells when its kernel dies; each
    death logged by ``log(message)``."""
    from nbclient.exceptions import DeadKernelError

    manager = _kernel_manager_class()

    @functools.wraps(execute)
    def run(nb, *args, **kwargs):
        original = copy.deepcopy(nb)
        for attempt in range(1, attempts + 1):
            try:
                return execute(nb, *args, kernel_manager_class=manager, **kwargs)
            except DeadKernelError:
                status = _MANAGERS[-1].exit_status if _MANAGERS else None
                log(f"the kernel executing the notebook '{_title(original)}' died on "
                    f"attempt {attempt} of {attempts}: {describe_exit(status)}; "
                    f"{_memory_left()}")
                if attempt == attempts:
                    raise
                nb.cells = copy.deepcopy(original.cells)
                nb.metadata = copy.deepcopy(original.metadata)

    return run


def setup(app):
    """Wrap the execution of myst-nb's two executors (the cached and the direct one)."""
    from sphinx.util import logging

    from myst_nb.core.execute import cache, direct

    logger = logging.getLogger(__name__)
    for module in (cache, direct):
        if not hasattr(module, "single_nb_execution"):  # myst-nb changed: say so
            raise RuntimeError(f"{module.__name__} has no single_nb_execution to wrap; "
                               "update docs/_ext/notebook_execution.py")
        module.single_nb_execution = robust(module.single_nb_execution, logger.info)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
