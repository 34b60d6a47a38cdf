"""The chapters in the source formats of nbgrader and otter-grader (see docs/instructors.md).

Both tools make the student copy and grade it themselves; they need the instructor's
notebook marked up their way. For each exercise cell of a chapter (a code cell whose
solution region defines a registered exercise's name):

- **nbgrader** (:func:`nbgrader_notebook`): the cell becomes an nbgrader *solution* cell
  (``solution: true``), and its ``check(...)`` calls move to a new *autograded test* cell
  right after it (``grade: true``, ``locked: true``, the exercise's ``points``), written as
  ``check(..., raises=True)``, so that a wrong or unattempted answer fails the test cell.
  The ``### BEGIN SOLUTION`` markers are nbgrader's own. Write the result under
  ``source/<assignment>/`` of a course folder (:func:`build_nbgrader`) and run
  ``nbgrader generate_assignment`` and, on submissions, ``nbgrader autograde``.
- **otter** (:func:`otter_notebook`): otter assign's format: an ``# ASSIGNMENT CONFIG``
  raw cell, and per exercise the raw cells ``# BEGIN QUESTION`` (name = the exercise id,
  points), ``# BEGIN SOLUTION``, the solution cell (its markers in otter's spelling,
  ``# BEGIN SOLUTION``), ``# END SOLUTION``, ``# BEGIN TESTS``,
  one test cell ``check(..., raises=True)``, ``# END TESTS``, ``# END QUESTION``. Run
  ``otter assign`` on it, then ``otter check`` (or the grader) on submissions.

Cells tagged ``solution-only`` are left out. Solution regions that belong to no exercise
(for instance in markdown) stay as they are, marked as nbgrader solution cells. Torch-free.
"""

from __future__ import annotations

import ast
import copy
import json
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_raw_cell

from pipemare_lite.book.exercises.assign import (
    BEGIN_MARKER,
    END_MARKER,
    SOLUTION_ONLY_TAG,
    select_chapters,
    solution_regions,
)
from pipemare_lite.book.exercises.registry import find_by_name

NBGRADER_SCHEMA = 3
FORMATS = ("plain", "nbgrader", "otter")


def _masked(source: str) -> str:
    return "\n".join(
        "pass" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


def _is_check_call(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Call)
        and getattr(statement.value.func, "id", None) == "check"
    )


def split_exercise_cell(source: str, **extra: bool):
    """``(exercise, solution source, test source)`` for an exercise cell, else None.

    The test source is the cell's top-level ``check(...)`` calls, each with
    ``raises=True`` (and the keyword arguments ``extra``, e.g. ``quiet=True``); the solution
    source is the rest of the cell.
    """
    if not solution_regions(source):
        return None
    try:
        body = ast.parse(_masked(source)).body
    except SyntaxError:
        return None
    exercise = None
    for statement in body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Assign)):
            names = (
                [statement.name] if not isinstance(statement, ast.Assign)
                else [t.id for t in statement.targets if isinstance(t, ast.Name)]
            )
            found = next((find_by_name(n) for n in names if find_by_name(n)), None)
            exercise = exercise or found
    if exercise is None:
        return None
    lines = source.splitlines()
    checks = [s for s in body if _is_check_call(s)]
    drop = {i for s in checks for i in range(s.lineno - 1, s.end_lineno)}
    solution = "\n".join(line for i, line in enumerate(lines) if i not in drop).rstrip()
    tests = []
    for statement in checks:
        call = copy.deepcopy(statement.value)
        keywords = {"raises": True, **extra}
        call.keywords = [k for k in call.keywords if k.arg not in keywords]
        call.keywords += [ast.keyword(arg=k, value=ast.Constant(v)) for k, v in keywords.items()]
        tests.append(ast.unparse(call))
    if not tests:  # an exercise cell without a check: test it anyway
        call = ast.parse(f"check({exercise.id!r}, {exercise.function_name})").body[0].value
        call.keywords = [ast.keyword(arg=k, value=ast.Constant(v))
                         for k, v in {"raises": True, **extra}.items()]
        tests.append(ast.unparse(call))
    return exercise, solution, "\n".join(tests)


def _nbgrader_meta(grade_id: str, *, solution: bool, grade: bool, points: int = 0) -> dict:
    meta = {
        "grade": grade,
        "grade_id": grade_id,
        "locked": not solution,
        "schema_version": NBGRADER_SCHEMA,
        "solution": solution,
        "task": False,
    }
    if grade:
        meta["points"] = points
    return meta


def _import_check_line() -> str:
    return "from pipemare_lite.book.exercises import check"


def nbgrader_notebook(notebook) -> nbformat.NotebookNode:
    """nbgrader's source version of a chapter (see the module docstring); not modified."""
    result = copy.deepcopy(notebook)
    cells = []
    for index, cell in enumerate(result.cells):
        if SOLUTION_ONLY_TAG in cell.get("metadata", {}).get("tags", []):
            continue
        split = split_exercise_cell(cell.source) if cell.cell_type == "code" else None
        if split is None:
            if solution_regions(cell.source):
                kind = "answer" if cell.cell_type == "markdown" else "solution"
                cell.metadata["nbgrader"] = _nbgrader_meta(
                    f"cell-{index}-{kind}", solution=True, grade=cell.cell_type == "markdown"
                )
            cells.append(cell)
            continue
        exercise, solution, tests = split
        cell.source = solution
        cell.metadata["nbgrader"] = _nbgrader_meta(
            f"{exercise.id}-solution", solution=True, grade=False
        )
        cells.append(cell)
        test = new_code_cell(tests)
        test.metadata["nbgrader"] = _nbgrader_meta(
            f"{exercise.id}-test", solution=False, grade=True, points=exercise.points
        )
        cells.append(test)
    result.cells = cells
    return result


def _otter_markers(source: str) -> str:
    """``### BEGIN SOLUTION`` -> otter's ``# BEGIN SOLUTION`` (same indentation)."""
    lines = []
    for line in source.splitlines():
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if stripped.startswith(BEGIN_MARKER):
            line = f"{indent}# BEGIN SOLUTION"
        elif stripped.startswith(END_MARKER):
            line = f"{indent}# END SOLUTION"
        lines.append(line)
    return "\n".join(lines)


def otter_notebook(notebook, name: str) -> nbformat.NotebookNode:
    """otter assign's source version of a chapter called ``name`` (see the module docstring)."""
    result = copy.deepcopy(notebook)
    config = (
        "# ASSIGNMENT CONFIG\n"
        f"name: {json.dumps(name)}\n"
        "requirements: requirements.txt\n"  # installs the package in otter grade's image
        "export_cell: false\n"
        "init_cell: true\n"
        "check_all_cell: false\n"
        "generate: true\n"  # dist/autograder/*.zip: `otter run` / `otter grade` work as exported
        "run_tests: false\n"
        "files: []\n"
        "tests:\n"
        "  files: true\n"
    )
    cells = [new_raw_cell(config)]
    for cell in result.cells:
        if SOLUTION_ONLY_TAG in cell.get("metadata", {}).get("tags", []):
            continue
        split = (
            split_exercise_cell(cell.source, quiet=True) if cell.cell_type == "code" else None
        )
        if split is None:
            if cell.cell_type == "code":
                cell.source = _otter_markers(cell.source)
            cells.append(cell)
            continue
        exercise, solution, tests = split
        cell.source = _otter_markers(solution)
        cells += [
            new_raw_cell(
                f"# BEGIN QUESTION\nname: {exercise.id}\npoints: {exercise.points}"
            ),
            new_raw_cell("# BEGIN SOLUTION"),
            cell,
            new_raw_cell("# END SOLUTION"),
            new_raw_cell("# BEGIN TESTS"),
            # otter runs test cells as doctests: nothing may be printed or echoed on a pass
            new_code_cell(f"{_import_check_line()}\n" + "\n".join(
                f"_ = {line}" for line in tests.splitlines()
            )),
            new_raw_cell("# END TESTS"),
            new_raw_cell("# END QUESTION"),
        ]
    result.cells = cells
    return result


def build_nbgrader(
    source_dir: str | Path, out_dir: str | Path, chapters=None
) -> list[Path]:
    """An nbgrader course folder: ``out_dir/source/<chapter>/<chapter>.ipynb`` per chapter
    (one assignment each) and ``out_dir/nbgrader_config.py``; returns the notebooks."""
    out_dir = Path(out_dir)
    written = []
    for path in select_chapters(source_dir, chapters):
        folder = out_dir / "source" / path.stem
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / path.name
        nbformat.write(nbgrader_notebook(nbformat.read(path, as_version=4)), target)
        written.append(target)
    config = out_dir / "nbgrader_config.py"
    if not config.exists():
        config.write_text(
            "# nbgrader course folder written by `python -m pipemare_lite assign student "
            "--format nbgrader`\n"
            "c = get_config()  # noqa: F821\n"
            "c.CourseDirectory.root = __file__.rsplit('/', 1)[0]\n"
        )
    return written


#: Where docs/classroom/Dockerfile puts the package: otter grade's image installs it from
#: there (the export's requirements.txt), since the autograder zip does not carry it.
OTTER_PACKAGE_PATH = "/opt/pipemare-lite"


def build_otter(source_dir: str | Path, out_dir: str | Path, chapters=None) -> list[Path]:
    """``out_dir/<chapter>/<chapter>.ipynb`` in otter assign's format per chapter, with the
    ``requirements.txt`` its config names: :data:`OTTER_PACKAGE_PATH`, which ``otter grade
    --image`` with the image of docs/classroom/Dockerfile provides (docs/instructors.md)."""
    out_dir = Path(out_dir)
    written = []
    for path in select_chapters(source_dir, chapters):
        folder = out_dir / path.stem
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / path.name
        nbformat.write(otter_notebook(nbformat.read(path, as_version=4), path.stem), target)
        (folder / "requirements.txt").write_text(OTTER_PACKAGE_PATH + "\n", encoding="utf-8")
        written.append(target)
    return written
