"""The book build: execute every chapter, then build the book site from the executed notebooks.

    python -m pipemare_lite book --out build/book [--chapters 00 03] [--timeout 300]
        [--record-timings data/results/chapter_times.json]

Each chapter runs in a fresh ``python3`` kernel of *this* Python environment (never a
kernelspec that happens to point elsewhere), with ``chapters/`` as the working directory and
a per-cell timeout; the build prints which chapter runs and how long it took, and a failing
chapter stops it, naming the chapter, the cell and the error. The executed notebooks then
become the book site (:mod:`pipemare_lite.book.site`: Sphinx, myst-nb and sphinx-book-theme,
offline: local plotly.js and MathJax), written to ``--out``.

Under stress (issue 47): a cell keeps at most ``--max-cell-output`` bytes of output and a
chapter ``--max-chapter-output``, a chapter's kernel may map ``--kernel-memory``
(:mod:`pipemare_lite.book.execute`); SIGINT or SIGTERM in any phase (a chapter, the site's
notebooks, Sphinx, the timings) stops every child (a kernel, Sphinx's process group) and
raises :class:`BuildInterrupted`, which the command prints as ``[book] stopped: ...``; the
site is built beside ``--out`` and swapped in whole
(:meth:`~pipemare_lite.book.site.project.SiteProject.build`), so a stopped build leaves the
previous site as it was and a served site never misses a page.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from pipemare_lite.book.execute import (
    MAX_CELL_OUTPUT,
    MAX_CHAPTER_OUTPUT,
    BuildInterrupted,
    default_kernel_memory,
    execute_chapter,
)
from pipemare_lite.book.notebooks import chapter_info, chapters_dir, list_chapters, meta_path
from pipemare_lite.book.site.pages import WIDGET_MIMETYPE, offline_outputs
from pipemare_lite.book.site.project import (
    MATHJAX_DIR,
    MATHJAX_PATH,
    PLOTLY_JS,
    SiteProject,
    mathjax_source,
    plotly_js_source,
)
from pipemare_lite.figures.viz.figure_html import PLOTLY_MIMETYPE, figure_html
from pipemare_lite.files import atomic_write_text

__all__ = [
    "MATHJAX_DIR",
    "MATHJAX_PATH",
    "PLOTLY_JS",
    "PLOTLY_MIMETYPE",
    "WIDGET_MIMETYPE",
    "BuildInterrupted",
    "ChapterResult",
    "build_book",
    "execute_chapter",
    "figure_html",
    "mathjax_source",
    "offline_outputs",
    "plotly_js_source",
    "record_timings",
    "select_chapters",
]


@dataclass
class ChapterResult:
    """One chapter of a build: where its page is, how long it ran, and its error if it failed."""

    name: str
    title: str
    html: Path
    seconds: float
    error: str = ""

    @property
    def ok(self) -> bool:
        """True when every cell ran."""
        return not self.error


def select_chapters(names: Sequence[str] | None, directory: Path) -> list[Path]:
    """Chapters to build: all, or those named by number (``03``), stem or file name or path."""
    every = list_chapters(directory)
    if not names:
        return every
    chosen = []
    for name in names:
        as_path = Path(name)
        if as_path.suffix == ".ipynb" and as_path.is_file():
            chosen.append(as_path.resolve())
            continue
        key = as_path.name.removesuffix(".ipynb")
        if key.isdigit():
            hits = [p for p in every if p.name[:2] == key.zfill(2)]
        else:
            hits = [p for p in every if p.stem == key]
        if not hits:
            allowed = ", ".join(p.stem for p in every) or "(none: the folder has no chapters)"
            raise ValueError(f"no chapter {name!r} in {directory}; allowed: {allowed}")
        chosen += hits
    return list(dict.fromkeys(chosen))


@contextlib.contextmanager
def build_lock(out: Path):
    """Hold ``<out>.lock`` (an exclusive ``flock``) for one build into ``out``.

    Two builds into one folder would interleave their chapters and Sphinx projects and both
    exit 0 with a mixed site; the second now fails at once, naming the first's pid. The
    operating system drops the lock when its holder dies, so a killed build never leaves
    the folder locked.
    """
    import fcntl

    lock_path = out.with_name(f"{out.name}.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(lock_path, "a+", encoding="utf-8")  # noqa: SIM115 (held for the build)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            raise ValueError(
                f"another book build (pid {holder}) is writing {out}; wait for it to finish "
                f"or build into another --out (lock: {lock_path})"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield
    finally:
        handle.close()  # releases the lock


def build_book(
    out: str | Path = "build/book",
    chapters: Sequence[str] | None = None,
    timeout: int = 300,
    keep_going: bool = False,
    directory: str | Path | None = None,
    log=None,
    record: str | Path | None = None,
    command: str = "python -m pipemare_lite book",
    max_cell_output: int | None = MAX_CELL_OUTPUT,
    max_chapter_output: int | None = MAX_CHAPTER_OUTPUT,
    kernel_memory: int | None = -1,
) -> list[ChapterResult]:
    """Execute chapters, then build the book site into ``out``; one result per chapter.

    Stops running chapters at the first one that fails (its page still shows the error)
    unless ``keep_going``; the caller turns failures into a non-zero exit either way. The
    site holds every chapter built now or by an earlier build into the same ``out`` (while
    its notebook exists). With ``record`` (a ``.json`` path), the measured run times also
    go there, with a ``.meta.json`` naming ``command`` and the machine (:func:`record_timings`).
    ``max_cell_output``, ``max_chapter_output`` (bytes) and ``kernel_memory`` (bytes; -1:
    half of this machine's memory; None: no limit) are the limits of
    :func:`~pipemare_lite.book.execute.execute_chapter`. SIGINT or SIGTERM raises
    :class:`BuildInterrupted` once every child has stopped; ``out`` then holds the previous
    site unchanged.
    """
    log = log or (lambda message: print(message, flush=True))
    if timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds per cell, got {timeout}")
    if record is not None and Path(record).suffix != ".json":
        raise ValueError(f"--record-timings needs a .json file name, got {str(record)!r}")
    folder = Path(directory).resolve() if directory is not None else chapters_dir().resolve()
    paths = select_chapters(chapters, folder)
    if not paths:
        raise ValueError(f"no chapter notebooks (NN_snake_case.ipynb) in {folder}")
    for name, cap in (("max_cell_output", max_cell_output),
                      ("max_chapter_output", max_chapter_output)):
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ValueError(f"{name} must be a positive number of bytes or None, got {cap!r}")
    if kernel_memory == -1:
        kernel_memory = default_kernel_memory()
    elif kernel_memory is not None and (
            isinstance(kernel_memory, bool) or not isinstance(kernel_memory, int)
            or kernel_memory < 2**28):
        raise ValueError(f"kernel_memory must be at least 256 MiB (a kernel with torch maps "
                         f"more), None (no limit) or -1 (half this machine's), got "
                         f"{kernel_memory!r}")
    limits = dict(max_cell_output=max_cell_output, max_chapter_output=max_chapter_output,
                  kernel_memory=kernel_memory)
    with build_lock(Path(out).resolve()), _stopping_on_signals() as phase:
        return _build_locked(out, paths, folder, timeout, keep_going, log, record, command,
                             limits, phase)


@contextlib.contextmanager
def _stopping_on_signals():
    """SIGINT and SIGTERM raise :class:`BuildInterrupted` naming the phase, for the whole
    build; yields ``phase``, a dict whose ``"now"`` says what runs (set by the build).

    A chapter's run puts its own handlers in place (its event loop stops the kernel first)
    and removes them when it ends, which resets both signals; :func:`_build_locked` calls
    the returned ``phase["arm"]()`` after each chapter to put ours back. The handlers found
    before the build come back at its end.
    """
    import threading

    unchanged = "no site was built (the previous one, if any, is unchanged)"
    phase = {"now": "starting", "site": unchanged}

    def stop(signum, frame):
        name = signal.Signals(signum).name
        raise BuildInterrupted(name, "", None, f"{name} while {phase['now']}; {phase['site']}")

    def arm():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, stop)

    if threading.current_thread() is not threading.main_thread():
        yield phase | {"arm": lambda: None}  # signals are not ours to take
        return
    phase["arm"] = arm
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    arm()
    try:
        yield phase
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


def _build_locked(out, paths: list[Path], folder: Path, timeout: int, keep_going: bool, log,
                  record, command: str, limits: dict, phase: dict) -> list[ChapterResult]:
    """:func:`build_book`'s work, under its lock, ``phase["now"]`` saying what runs."""
    site = SiteProject(out, folder, folder.parent)
    site.check_output()  # before minutes of running chapters, not after

    results: list[ChapterResult] = []
    for index, path in enumerate(paths, start=1):
        title = chapter_info(path).title
        log(f"[book] ({index}/{len(paths)}) running {path.name} ...")
        phase["now"] = f"running {path.name}"
        try:
            nb, seconds, error = execute_chapter(path, timeout, log=log, **limits)
        finally:
            phase["arm"]()  # the chapter's event loop reset both signals
        phase["now"] = f"making {path.name}'s page"
        try:
            page = site.add_chapter(path, nb, seconds, error)
        except MemoryError:
            nb = None  # its outputs: what the message below needs memory for
            raise ValueError(f"{path.name}: making its page ran out of memory; lower "
                             "--max-cell-output or --max-chapter-output") from None
        results.append(ChapterResult(path.stem, title, page, seconds, error))
        log(f"[book] {path.name}: {'ok' if not error else 'FAILED'} in {seconds:.1f} s")
        if error:
            log(f"[book] {path.name} failed:\n{error}")
            if not keep_going:
                break
    log("[book] building the site (Sphinx, myst-nb, sphinx-book-theme) ...")
    phase["now"] = "building the site (Sphinx)"
    built = site.build()
    phase["now"], phase["site"] = "finishing", "the new site is in place"
    log(f"[book] site: {built.pages} pages in {built.seconds:.1f} s")
    for warning in built.warnings:
        log(f"[book] sphinx: {warning}")
    if record is not None:
        for written in record_timings(record, results, command, folder):
            log(f"[book] wrote {written}")
    return results


def _version(distribution: str) -> str | None:
    """Installed version of ``distribution`` without importing it (torch is slow to import)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def record_timings(
    path: str | Path, results: Sequence[ChapterResult], command: str, folder: Path
) -> tuple[Path, Path]:
    """Store the measured chapter run times in ``path`` and a ``.meta.json`` beside it.

    ``path`` maps chapter file names to seconds (what :func:`pipemare_lite.book.notebooks.
    chapter_table` reads). Chapters measured now replace their old entries, a chapter that
    failed now loses its entry (its old time no longer describes it), entries of chapters
    not built now are kept while the chapter exists. The meta file says how and where the
    numbers were measured: the command, package, torch and Python versions, platform, CPU
    count, load average, date, and which chapters this run measured. Both files are written
    atomically.
    """
    from pipemare_lite import __version__

    path = Path(path)
    if path.suffix != ".json":
        raise ValueError(f"--record-timings needs a .json file name, got {str(path)!r}")
    try:
        recorded = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except ValueError:
        recorded = {}
    if not isinstance(recorded, dict):
        recorded = {}
    existing = {p.name for p in list_chapters(folder)}
    for r in results:
        recorded.pop(f"{r.name}.ipynb", None)
        if r.ok:
            recorded[f"{r.name}.ipynb"] = round(r.seconds, 1)
    recorded = {k: v for k, v in sorted(recorded.items()) if k in existing}
    atomic_write_text(path, json.dumps(recorded, indent=1) + "\n")
    meta = {
        "command": command,
        "package_version": __version__,
        "torch_version": _version("torch"),
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        # other work on the machine slows the chapters: say how busy it was when recorded
        "load_average_1_5_15_min": [round(x, 2) for x in os.getloadavg()]
        if hasattr(os, "getloadavg")
        else None,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "measured_now": [f"{r.name}.ipynb" for r in results if r.ok],
        "failed_now": [f"{r.name}.ipynb" for r in results if not r.ok],
        "seconds_are": "wall-clock time of one fresh-kernel run of each chapter, top to bottom",
    }
    meta_file = meta_path(path)
    atomic_write_text(meta_file, json.dumps(meta, indent=1) + "\n")
    return path, meta_file
