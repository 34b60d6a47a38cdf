"""Student and solution copies of the chapters (the classroom build, see docs/instructors.md).

The chapters in ``chapters/`` are the instructor's source: exercise solutions sit between
``### BEGIN SOLUTION`` and ``### END SOLUTION`` (nbgrader/otter markers) in code cells.

- :func:`student_notebook` replaces every solution region, and only the region, with a
  stub at the marker's indentation. Inside a function (the ``def`` line and docstring are
  kept) the stub is ``raise NotImplementedError("Exercise 2.1")``, which ``check()``
  reports as "not attempted yet". At the top level of a cell a region that assigns names
  (a constant exercise) becomes ``NAME = NotImplemented  # Exercise 2.3: ...``, so the
  next cell's ``check("ex02_3", NAME)`` also says "not attempted yet" instead of failing
  with a NameError; any other top-level region becomes the ``raise`` stub. Markdown
  regions become "*Your answer here.*". Cells tagged ``solution-only`` are removed, every
  output and execution count is cleared, widget state is dropped.
- :func:`solution_notebook` executes the source with nbclient (per-cell timeout, working
  directory = the chapters folder).

``python -m pipemare_lite assign student|solutions`` drives both (``commands/assign.py``).
Torch-free (the executed chapters may import torch in their own kernel).
"""

from __future__ import annotations

import ast
import copy
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import nbformat

from pipemare_lite.book.exercises.registry import find_by_name
from pipemare_lite.book.solutions import expand_solution

BEGIN_MARKER = "### BEGIN SOLUTION"
END_MARKER = "### END SOLUTION"
#: Cells with this tag (e.g. answers to "check your understanding") exist only in solutions.
SOLUTION_ONLY_TAG = "solution-only"
#: What a markdown solution region becomes.
MARKDOWN_STUB = "*Your answer here.*"
_CHAPTER_FILE_RE = re.compile(r"^(\d\d)_\w+\.ipynb$")
_DEF_RE = re.compile(r"^(\s*)(?:async\s+)?def\s+([A-Za-z_]\w*)\s*\(")


class SolutionMarkupError(ValueError):
    """Unbalanced or nested solution markers; the message names the notebook cell and line."""


def solution_regions(source: str, where: str = "cell") -> list[tuple[int, int]]:
    """``(begin_line, end_line)`` 0-based indices of each marker pair in ``source``.

    Raises:
        SolutionMarkupError: an END without BEGIN, a BEGIN inside a region, or a BEGIN
            never closed; the message says where (``where``) and on which line.
    """
    regions, begin = [], None
    for number, line in enumerate(source.splitlines()):
        text = line.strip()
        if text.startswith(BEGIN_MARKER):
            if begin is not None:
                raise SolutionMarkupError(
                    f"{where}, line {number + 1}: {BEGIN_MARKER!r} inside another solution "
                    f"region (opened on line {begin + 1})"
                )
            begin = number
        elif text.startswith(END_MARKER):
            if begin is None:
                raise SolutionMarkupError(
                    f"{where}, line {number + 1}: {END_MARKER!r} without {BEGIN_MARKER!r}"
                )
            regions.append((begin, number))
            begin = None
    if begin is not None:
        raise SolutionMarkupError(f"{where}, line {begin + 1}: {BEGIN_MARKER!r} never closed")
    return regions


def _enclosing_function(lines: list[str], begin: int) -> str | None:
    """The name of the ``def`` that the region starting at ``begin`` is inside, if any."""
    indent = len(lines[begin]) - len(lines[begin].lstrip())
    for line in reversed(lines[:begin]):
        match = _DEF_RE.match(line)
        if match and len(match.group(1)) < indent:
            return match.group(2)
    return None


def _assigned_names(region: list[str]) -> list[str]:
    """Top-level names a region assigns, in order; [] if it does not parse on its own."""
    try:
        body = ast.parse("\n".join(region)).body
    except SyntaxError:
        return []
    names: list[str] = []
    for statement in body:
        targets = statement.targets if isinstance(statement, ast.Assign) else (
            [statement.target] if isinstance(statement, (ast.AnnAssign, ast.AugAssign)) else []
        )
        for target in targets:
            for node in ast.walk(target):
                if isinstance(node, ast.Name) and node.id not in names:
                    names.append(node.id)
    return names


def _label(name: str | None, fallback: str) -> str:
    exercise = find_by_name(name) if name else None
    return exercise.label if exercise is not None else fallback


def stub_code(source: str, fallback_label: str = "Exercise", where: str = "cell") -> str:
    """``source`` with each solution region replaced by its stub (see the module docstring)."""
    lines = source.splitlines()
    regions = solution_regions(source, where)
    for begin, end in reversed(regions):
        indent = lines[begin][: len(lines[begin]) - len(lines[begin].lstrip())]
        region = lines[begin + 1 : end]
        function = _enclosing_function(lines, begin) if indent else None
        if function is not None:
            label = _label(function, fallback_label)
            stub = [f'{indent}raise NotImplementedError("{label}")']
        else:
            names = _assigned_names([line[len(indent) :] for line in region]) if not indent else []
            if names:
                label = _label(names[0], fallback_label)
                stub = [
                    f"{name} = NotImplemented  # {label}: replace NotImplemented with your answer"
                    for name in names
                ]
            else:
                stub = [f'{indent}raise NotImplementedError("{_label(None, fallback_label)}")']
        lines[begin : end + 1] = stub
    return "\n".join(lines)


def stub_markdown(source: str, where: str = "cell") -> str:
    """A markdown cell with each solution region replaced by :data:`MARKDOWN_STUB`."""
    lines = source.splitlines()
    for begin, end in reversed(solution_regions(source, where)):
        lines[begin : end + 1] = [MARKDOWN_STUB]
    return "\n".join(lines)


def chapter_number(path: str | Path) -> int | None:
    """NN of ``NN_name.ipynb``, or None for another file name."""
    match = _CHAPTER_FILE_RE.match(Path(path).name)
    return int(match.group(1)) if match else None


def _masked_magics(source: str) -> str:
    if source.lstrip().startswith("%%"):
        return ""
    return "\n".join(
        "pass" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


def _parses(source: str) -> bool:
    try:
        ast.parse(_masked_magics(source))
    except SyntaxError:
        return False
    return True


def student_notebook(notebook, name: str = "notebook") -> nbformat.NotebookNode:
    """A student copy of ``notebook`` (a NotebookNode; not modified); ``name`` labels errors.

    Raises:
        SolutionMarkupError: unbalanced markers, or a stub that would break a code cell
            that parsed before (the message names the cell).
    """
    chapter = chapter_number(name)
    student = copy.deepcopy(notebook)
    student.metadata.pop("widgets", None)
    kept, region_count = [], 0
    for index, cell in enumerate(student.cells):
        tags = cell.get("metadata", {}).get("tags", [])
        if SOLUTION_ONLY_TAG in tags:
            continue
        where = f"{name} cell {index}"
        if cell.cell_type == "code":
            regions = solution_regions(cell.source, where)
            fallback = (
                f"Exercise {chapter}.{region_count + 1}" if chapter is not None else "Exercise"
            )
            region_count += len(regions)
            if regions:
                stubbed = stub_code(cell.source, fallback, where)
                if _parses(cell.source) and not _parses(stubbed):
                    raise SolutionMarkupError(f"{where}: the stubbed cell is not valid Python")
                cell.source = stubbed
                expand_solution(cell)  # the chapters open solutions collapsed; a stub is seen
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)
        elif cell.cell_type == "markdown":
            cell.source = stub_markdown(cell.source, where)
        kept.append(cell)
    student.cells = kept
    return student


def solution_notebook(notebook, cwd: str | Path, timeout: int = 300) -> nbformat.NotebookNode:
    """An executed copy of ``notebook`` (kernel ``python3``, working directory ``cwd``).

    Raises:
        nbclient.exceptions.CellExecutionError: a cell failed (its error is in the message).
        nbclient.exceptions.CellTimeoutError: a cell ran longer than ``timeout`` seconds.
    """
    from nbclient import NotebookClient  # only the solution build needs a kernel

    executed = copy.deepcopy(notebook)
    client = NotebookClient(
        executed, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    )
    client.execute()
    return executed


def select_chapters(source_dir: str | Path, chapters: Iterable[str] | None = None) -> list[Path]:
    """The chapter notebooks in ``source_dir`` (``NN_name.ipynb``), all or those named.

    A selector is a number (``"2"``, ``"02"``), a stem (``"02_gpipe_and_the_bubble"``) or
    a file name.

    Raises:
        FileNotFoundError: ``source_dir`` is not a folder.
        ValueError: a selector matches no chapter (the message lists the chapters).
    """
    source_dir = Path(source_dir)
    if not source_dir.is_dir():
        raise FileNotFoundError(f"no chapters folder at {source_dir}")
    available = sorted(p for p in source_dir.glob("*.ipynb") if chapter_number(p) is not None)
    if not chapters:
        return available
    chosen: list[Path] = []
    for selector in chapters:
        matches = [
            p
            for p in available
            if selector in (p.name, p.stem)
            or (selector.isdigit() and int(selector) == chapter_number(p))
        ]
        if not matches:
            names = ", ".join(p.name for p in available) or "none"
            raise ValueError(f"no chapter matches {selector!r}; chapters in {source_dir}: {names}")
        chosen += [p for p in matches if p not in chosen]
    return sorted(chosen)


def build_student(
    source_dir: str | Path,
    out_dir: str | Path,
    chapters: Iterable[str] | None = None,
    *,
    handout: bool = True,
) -> list[Path]:
    """Write a student copy of each selected chapter into ``out_dir``; return their paths.

    With ``handout`` (the default) the folder also gets the students' ``adapter.py``, a
    ``README.md`` and the engine files the chapters link to, the links rewritten to them
    (:func:`pipemare_lite.book.exercises.handout.write_handout`), so it works on its own.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path in select_chapters(source_dir, chapters):
        student = student_notebook(nbformat.read(path, as_version=4), path.name)
        target = out_dir / path.name
        nbformat.write(student, target)
        written.append(target)
    if handout and written:
        from pipemare_lite.book.exercises.handout import write_handout

        write_handout(out_dir, written)
    return written


def build_solutions(
    source_dir: str | Path,
    out_dir: str | Path,
    chapters: Iterable[str] | None = None,
    timeout: int = 300,
    progress: Callable[[str], None] | None = None,
) -> list[Path]:
    """Write an executed copy of each selected chapter into ``out_dir``; return their paths.

    Each notebook runs with the chapters folder as working directory, so relative paths
    in a chapter mean the same as when a reader runs it. ``progress``, when given, gets one
    line per chapter as it finishes (``[3/12] 02_gpipe_and_the_bubble.ipynb 8.1 s``): the
    whole build takes minutes.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    selected = select_chapters(source_dir, chapters)
    for number, path in enumerate(selected, start=1):
        started = time.perf_counter()
        executed = solution_notebook(
            nbformat.read(path, as_version=4), cwd=path.parent.resolve(), timeout=timeout
        )
        target = out_dir / path.name
        nbformat.write(executed, target)
        written.append(target)
        if progress is not None:
            progress(f"[{number}/{len(selected)}] {path.name} "
                     f"{time.perf_counter() - started:.1f} s")
    return written
