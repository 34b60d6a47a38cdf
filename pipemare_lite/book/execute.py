"""Run one chapter top to bottom in a fresh kernel of this Python (book tooling).

The book build (:mod:`pipemare_lite.book.build`) and ``notebooks run`` (which saves a chapter
with its checked outputs, :mod:`pipemare_lite.book.notebooks`) both execute chapters this way:
each cell under a timeout, a dying kernel or an overrunning cell reported with the chapter
and the cell, SIGINT/SIGTERM ending the run with the kernel shut down.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat


def _kernel_manager(connection_file: Path):
    """An *asynchronous* kernel manager whose ``python3`` is this interpreter.

    As ``--nbval-current-env`` does, every kernel name starts this interpreter's ipykernel.
    It must be the asynchronous manager: nbclient runs its per-cell timeout, its dead-kernel
    check and its signal handling as tasks on one event loop, and a blocking manager's client
    holds that loop inside each wait, so none of them ever ran (a dying kernel hung the build,
    a looping cell ran forever, a sleeping one overran ``--timeout``). The connection file
    (it holds the kernel's HMAC key) goes to ``connection_file``, in a folder the caller owns
    and removes, not to the shared runtime folder where a dead kernel's file would stay.
    """
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    class CurrentEnvironmentSpecs(KernelSpecManager):
        """Answers every kernel name with this interpreter's ipykernel."""

        def get_kernel_spec(self, kernel_name):
            return KernelSpec(
                argv=[
                    sys.executable,
                    "-m",
                    "ipykernel_launcher",
                    "-f",
                    "{connection_file}",
                    # its transport warning is noise in every build log
                    "--IPKernelApp.log_level=ERROR",
                ],
                display_name="Python 3 (pipemare-lite)",
                language="python",
                name=kernel_name,
            )

    return AsyncKernelManager(
        kernel_name="python3",
        kernel_spec_manager=CurrentEnvironmentSpecs(),
        connection_file=str(connection_file),
    )


class BuildInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while a chapter ran; its kernel has been shut down."""

    def __init__(self, signal_name: str, chapter: str, cell: int | None):
        where = f"cell {cell}" if cell is not None else "before its first cell"
        super().__init__(f"{signal_name} while running {chapter} ({where}); no site was built")
        self.signal_name = signal_name


def execute_chapter(path: Path, timeout: int) -> tuple[object, float, str]:
    """Run one chapter top to bottom; returns (executed notebook, seconds, error text or "").

    Each cell may run ``timeout`` seconds; a cell that overruns it, or a kernel that dies,
    ends the chapter with an error naming the chapter and the cell (numbered from 1, as
    counted over all cells, markdown included, like a notebook's cell list). SIGINT or
    SIGTERM shuts the kernel down and raises :class:`BuildInterrupted`.
    """
    import asyncio
    import signal
    import tempfile
    from asyncio import CancelledError

    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    running: dict[str, object] = {"cell": None, "signal": None}

    def on_cell_start(cell, cell_index):
        running["cell"] = cell_index + 1

    def stop(signum, task):
        running["signal"] = signal.Signals(signum).name
        task.cancel()

    class Client(NotebookClient):
        """nbclient's own SIGINT/SIGTERM handlers only kill the kernel (and the build would
        go on with the next chapter); ours, put in their place once nbclient has installed
        them, cancel the run, so that nbclient's cleanup shuts the kernel down and the
        whole build stops."""

        async def async_start_new_kernel(self, **kwargs):
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                try:
                    loop.add_signal_handler(signum, stop, signum, asyncio.current_task())
                except (RuntimeError, NotImplementedError, ValueError):
                    pass  # not the main thread, or no signals here: nothing to hand over
            await super().async_start_new_kernel(**kwargs)

    with tempfile.TemporaryDirectory(prefix="pml-kernel-") as private:
        client = Client(
            nb,
            km=_kernel_manager(Path(private) / "kernel.json"),
            timeout=timeout,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
            record_timing=False,
            shutdown_kernel="immediate",
            on_cell_start=on_cell_start,
        )
        start = time.perf_counter()
        error = ""
        # figures as plain plotly JSON (what the page turns into a live plot), whatever
        # renderer the environment would pick (a "browser" renderer would open windows)
        env = {**os.environ, "PLOTLY_RENDERER": "plotly_mimetype"}
        try:
            # cleanup_kc: shut the kernel down at the end even though we made its manager
            # (nbclient leaves a kernel it did not create running)
            client.execute(env=env, cleanup_kc=True)
        except (CellExecutionError, CellTimeoutError, DeadKernelError, CancelledError) as exc:
            if running["signal"] is not None:
                # our cancel, which nbclient reports as a dead kernel when it hits a cell
                raise BuildInterrupted(running["signal"], path.name, running["cell"]) from None
            if isinstance(exc, CancelledError):
                raise
            detail = str(exc).strip() or type(exc).__name__
            if isinstance(exc, CellTimeoutError):
                what = f"ran longer than the {timeout} s allowed per cell (--timeout)"
            elif isinstance(exc, DeadKernelError):
                what = "killed its kernel (the kernel process died)"
            else:
                what = "raised an error"
            error = f"{path.name}: cell {running['cell']} {what}\n{detail}"
    return nb, time.perf_counter() - start, error
