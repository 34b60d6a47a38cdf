"""Run one chapter top to bottom in a fresh kernel of this Python (book tooling).

The book build (:mod:`pipemare_lite.book.build`) and ``notebooks run`` (which saves a chapter
with its checked outputs, :mod:`pipemare_lite.book.notebooks`) both execute chapters this way:
each cell under a timeout, a dying kernel or an overrunning cell reported with the chapter
and the cell, SIGINT/SIGTERM ending the run with the kernel shut down.

Limits, each with a message naming the chapter and the cell: a cell keeps at most
``max_cell_output`` bytes of output and a chapter ``max_chapter_output``; what comes after
is dropped as it arrives (printed text already in the kernel, by
:mod:`pipemare_lite.book.kernel_valve`, so a cell printing a gigabyte never reaches the
builder's memory) and replaced by one line saying how much was cut. The kernel may map at
most ``kernel_memory`` bytes (``RLIMIT_AS``, set on the kernel process and inherited by what
it starts), so a cell that fills memory fails with MemoryError in its chapter instead of
taking the machine. Error texts for logs carry no ANSI colour codes (the page keeps the
notebook's own).
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from pathlib import Path

import nbformat

from pipemare_lite.book.kernel_valve import HELD_MARK

#: Output one cell may keep (bytes of text: stream text, each output's data), by default.
MAX_CELL_OUTPUT = 20 * 2**20
#: Output one chapter may keep, all cells together, by default.
MAX_CHAPTER_OUTPUT = 100 * 2**20
#: Colour and cursor codes in a kernel's tracebacks (ESC [ ... letter).
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def without_ansi(text: str) -> str:
    """``text`` without ANSI escape codes (for logs and messages)."""
    return _ANSI.sub("", text)


def _size(n_bytes: float) -> str:
    """Bytes in words: ``1.0 GiB``, ``20.0 MiB``, ``512 B``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{int(n_bytes)} B"


def _output_bytes(content: dict) -> int:
    """How many bytes an output message's content adds to a notebook (its text fields)."""
    if "text" in content:  # stream
        return len(content["text"])
    total = sum(len(v) if isinstance(v, str) else len(json.dumps(v))
                for v in (content.get("data") or {}).values())
    return total + sum(len(line) for line in content.get("traceback") or ())


def default_kernel_memory() -> int:
    """Half of this machine's physical memory: what a chapter's kernel may map by default."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows): 8 GiB
        return 8 * 2**30


def _kernel_manager(connection_file: Path, stream_cap: int | None = None):
    """An *asynchronous* kernel manager whose ``python3`` is this interpreter.

    As ``--nbval-current-env`` does, every kernel name starts this interpreter's ipykernel.
    It must be the asynchronous manager: nbclient runs its per-cell timeout, its dead-kernel
    check and its signal handling as tasks on one event loop, and a blocking manager's client
    holds that loop inside each wait, so none of them ever ran (a dying kernel hung the build,
    a looping cell ran forever, a sleeping one overran ``--timeout``). The connection file
    (it holds the kernel's HMAC key) goes to ``connection_file``, in a folder the caller owns
    and removes, not to the shared runtime folder where a dead kernel's file would stay.
    With ``stream_cap``, the kernel sends at most that many characters of a cell's printed
    output (:mod:`pipemare_lite.book.kernel_valve`).
    """
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    valve = [] if stream_cap is None else [
        "--IPKernelApp.exec_lines=['from pipemare_lite.book.kernel_valve import install; "
        f"install({int(stream_cap)})']"]

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
                    *valve,
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

    def __init__(self, signal_name: str, chapter: str, cell: int | None,
                 message: str | None = None):
        where = f"cell {cell}" if cell is not None else "before its first cell"
        super().__init__(message or f"{signal_name} while running {chapter} ({where}); no "
                         "site was built (the previous one, if any, is unchanged)")
        self.signal_name = signal_name


def execute_chapter(path: Path, timeout: int, *, max_cell_output: int | None = MAX_CELL_OUTPUT,
                    max_chapter_output: int | None = MAX_CHAPTER_OUTPUT,
                    kernel_memory: int | None = None, log=None) -> tuple[object, float, str]:
    """Run one chapter top to bottom; returns (executed notebook, seconds, error text or "").

    Each cell may run ``timeout`` seconds; a cell that overruns it, or a kernel that dies,
    ends the chapter with an error naming the chapter and the cell (numbered from 1, as
    counted over all cells, markdown included, like a notebook's cell list). SIGINT or
    SIGTERM shuts the kernel down and raises :class:`BuildInterrupted`. Output beyond
    ``max_cell_output`` bytes in a cell or ``max_chapter_output`` in the chapter is cut (a
    line in the cell says how much; ``log(message)`` hears of it, naming chapter and cell);
    ``kernel_memory`` bytes (None: no limit) bound the kernel's address space. None for a
    cap: no cap. The error text has no ANSI codes.
    """
    import asyncio
    import signal
    import tempfile
    from asyncio import CancelledError

    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    running: dict[str, object] = {"cell": None, "signal": None}
    kept = {"chapter": 0}  # bytes of output kept, the chapter's and each cell's
    cut: dict[int, int] = {}  # cell index -> bytes dropped
    cell_kept: dict[int, int] = {}

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
            pid = getattr(getattr(self.km, "provisioner", None), "pid", None)
            if kernel_memory is not None and pid is not None:
                import resource

                resource.prlimit(pid, resource.RLIMIT_AS, (kernel_memory, kernel_memory))

        def output(self, outs, msg, display_id, cell_index):
            """Keep an output while the cell's and the chapter's caps allow; count the rest."""
            content = msg.get("content") or {}
            text = content.get("text")
            if isinstance(text, str) and text.startswith(HELD_MARK):  # the kernel's count
                try:
                    cut[cell_index] = cut.get(cell_index, 0) + int(text[len(HELD_MARK):])
                    return None
                except ValueError:
                    pass  # not the valve's line: an ordinary output
            size = _output_bytes(content)
            room = min(
                math.inf if max_cell_output is None
                else max_cell_output - cell_kept.get(cell_index, 0),
                math.inf if max_chapter_output is None else max_chapter_output - kept["chapter"],
            )
            if size <= room:
                cell_kept[cell_index] = cell_kept.get(cell_index, 0) + size
                kept["chapter"] += size
                return super().output(outs, msg, display_id, cell_index)
            if "text" in content and room > 0:  # a stream keeps its head, up to the cap
                head = int(room)
                msg = {**msg, "content": {**content, "text": content["text"][:head]}}
                cell_kept[cell_index] = cell_kept.get(cell_index, 0) + head
                kept["chapter"] += head
                cut[cell_index] = cut.get(cell_index, 0) + size - head
                return super().output(outs, msg, display_id, cell_index)
            cut[cell_index] = cut.get(cell_index, 0) + size
            return None

    with tempfile.TemporaryDirectory(prefix="pml-kernel-") as private:
        client = Client(
            nb,
            km=_kernel_manager(Path(private) / "kernel.json", max_cell_output),
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
            if isinstance(exc, CellExecutionError) and "MemoryError" in detail and (
                    kernel_memory is not None):
                what = (f"ran out of memory: its kernel may map {_size(kernel_memory)} "
                        "(--kernel-memory)")
            error = f"{path.name}: cell {running['cell']} {what}\n{without_ansi(detail)}"
        _note_cuts(nb, path, cut, cell_kept, max_cell_output, max_chapter_output, log)
    return nb, time.perf_counter() - start, error


def _note_cuts(nb, path: Path, cut: dict[int, int], cell_kept: dict[int, int],
               max_cell_output, max_chapter_output, log) -> None:
    """Add to each cell whose output was cut one line saying how much; tell ``log``."""
    for index, dropped in sorted(cut.items()):
        limits = ", ".join(f"{_size(cap)} {what}" for cap, what in (
            (max_cell_output, "per cell (--max-cell-output)"),
            (max_chapter_output, "per chapter (--max-chapter-output)")) if cap is not None)
        line = (f"[book] {path.name}: cell {index + 1}'s output cut: {_size(dropped)} left out "
                f"after the {_size(cell_kept.get(index, 0))} kept (the book keeps at most "
                f"{limits})")
        nb.cells[index].setdefault("outputs", []).append(
            nbformat.v4.new_output("stream", name="stderr", text=line + "\n"))
        if log is not None:
            log(line)
