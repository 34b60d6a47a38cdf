"""No answer before its exercise: every chapter, including the ones written later.

For each exercise cell of each chapter (a code cell whose solution region defines a
registered exercise's name), everything a reader has seen before it (the earlier chapters,
and the earlier cells of its own chapter, with the engine source that ``show_source`` cells
display) must not contain

1. a line of its solution (whitespace and comments ignored, short generic lines skipped);
2. the expression its solution returns (also in markdown, e.g. "(P-1)/(M+P-1)");
3. the name of an engine function that answers it (``Exercise.engine_answers``) in code: an
   import, a call, a ``show_source``. The book's measuring instruments may appear: the
   simulator (``simulate``, ``metrics``), the memory model (``memory_by_kind``, chapters 01
   and 03) and the staleness analysis (``weight_versions``, ``versions_from_trace``, chapter
   05); an answer that calls one is rejected by ``check`` and grading instead
   (tests/test_exercises_chapters.py).

Chapters are found by their file names, so a new chapter is covered without editing this
file.
"""

from __future__ import annotations

import ast
import inspect
import io
import re
import tokenize
from pathlib import Path

import nbformat
import pytest

from pipemare_lite.book.exercises.assign import solution_regions
from pipemare_lite.book.exercises.originality import resolve
from pipemare_lite.book.exercises.registry import find_by_name

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
#: Engine names a chapter may use before an exercise that they answer (see rule 3).
MEASURING_INSTRUMENTS = {
    "simulate", "metrics", "memory_by_kind", "weight_versions", "versions_from_trace"
}
#: Normalized solution lines shorter than this are too generic to search for ("M += 1").
MIN_LINE = 12
#: Normalized returned expressions shorter than this are skipped ("1/P"), and so are bare
#: names ("rows", "messages").
MIN_EXPRESSION = 5


def _without_comment(line: str) -> str:
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return line
    comments = [t for t in tokens if t.type == tokenize.COMMENT]
    return line[: comments[0].start[1]] if comments else line


def normalized(text: str) -> str:
    """Text without whitespace, ``$`` and backticks: how lines and formulas are compared."""
    return re.sub(r"[\s$`]", "", text)


def _solution_parts(source: str) -> tuple[list[str], list[str]]:
    """(searchable solution lines, returned expressions) of a cell's solution regions."""
    lines, expressions = [], []
    source_lines = source.splitlines()
    for begin, end in solution_regions(source):
        for line in source_lines[begin + 1 : end]:
            code = normalized(_without_comment(line))
            if not code or code.startswith(("import", "from", '"""', "'''", "#")):
                continue
            if code.startswith("return"):
                expression = code[len("return"):]
                if len(expression) >= MIN_EXPRESSION and not expression.isidentifier():
                    expressions.append(expression)
            if len(code) >= MIN_LINE:
                lines.append(code)
    return lines, expressions


def _defined_names(source: str) -> set[str]:
    try:
        body = ast.parse(_masked(source)).body
    except SyntaxError:
        return set()
    names = set()
    for statement in body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(statement.name)
        elif isinstance(statement, (ast.Assign, ast.AnnAssign)):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _masked(source: str) -> str:
    return "\n".join(
        "pass" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


def _identifiers(source: str) -> set[str]:
    """Names and attribute names a code cell uses, and the names it imports."""
    try:
        tree = ast.parse(_masked(source))
    except SyntaxError:
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias):
            found.add(node.name.split(".")[-1])
    return found


def _imported_objects(notebook) -> dict[str, object]:
    """name -> object for every ``from pipemare_lite... import name [as alias]``."""
    objects = {}
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(_masked(cell.source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pipemare_lite"):
                for alias in node.names:
                    try:
                        objects[alias.asname or alias.name] = resolve(f"{node.module}.{alias.name}")
                    except ImportError:
                        pass
    return objects


def _shown_sources(source: str, objects: dict[str, object]) -> str:
    """The engine source the cell's ``show_source(name)`` calls display."""
    try:
        tree = ast.parse(_masked(source))
    except SyntaxError:
        return ""
    shown = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "show_source"
                and node.args and isinstance(node.args[0], ast.Name)
                and node.args[0].id in objects):
            shown.append(inspect.getsource(objects[node.args[0].id]))
    return "\n".join(shown)


def _readings():
    """For each chapter: its cells as (text a reader sees, identifiers in code, cell)."""
    for path in CHAPTERS:
        notebook = nbformat.read(path, as_version=4)
        objects = _imported_objects(notebook)
        cells = []
        for cell in notebook.cells:
            if "solution-only" in cell.get("metadata", {}).get("tags", []):
                continue
            seen = cell.source
            names: set[str] = set()
            if cell.cell_type == "code":
                seen += "\n" + _shown_sources(cell.source, objects)
                names = _identifiers(cell.source)
            cells.append((seen, names, cell))
        yield path, cells


def _exercise_cells():
    """(chapter path, cell index, exercise, solution lines, expressions, text and names seen
    before it) for every exercise cell of every chapter."""
    seen_text: list[str] = []
    seen_names: set[str] = set()
    found = []
    for path, cells in _readings():
        for index, (text, names, cell) in enumerate(cells):
            if cell.cell_type == "code" and solution_regions(cell.source):
                for name in sorted(_defined_names(cell.source)):
                    exercise = find_by_name(name)
                    if exercise is not None:
                        lines, expressions = _solution_parts(cell.source)
                        found.append((path, index, exercise, lines, expressions,
                                      normalized("\n".join(seen_text)), set(seen_names)))
            seen_text.append(_solution_free(text, cell))
            seen_names |= names
    return found


def _solution_free(text: str, cell) -> str:
    """A cell's text without its own solution regions (a student copy does not show them)."""
    lines = text.splitlines()
    inside = {i for b, e in solution_regions(cell.source) for i in range(b, e + 1)}
    return "\n".join(line for i, line in enumerate(lines) if i not in inside)


EXERCISE_CELLS = _exercise_cells()


def test_every_registered_exercise_of_a_written_chapter_has_a_cell():
    from pipemare_lite.book.exercises import list_exercises

    found = {exercise.id for _, _, exercise, *_ in EXERCISE_CELLS}
    written = {int(p.name[:2]) for p in CHAPTERS}
    expected = {e.id for e in list_exercises() if e.chapter in written}
    assert expected <= found, f"exercise cells not found for {sorted(expected - found)}"


@pytest.mark.parametrize(
    "path, index, exercise, lines, expressions, before, names",
    EXERCISE_CELLS,
    ids=[f"{item[2].id}" for item in EXERCISE_CELLS],
)
def test_no_answer_before_its_exercise(path, index, exercise, lines, expressions, before, names):
    where = f"{path.name} cell {index} ({exercise.id})"
    leaked_lines = [line for line in lines if line in before]
    assert not leaked_lines, f"{where}: solution lines shown earlier: {leaked_lines}"
    leaked = [e for e in expressions if e in before]
    assert not leaked, f"{where}: the returned expression appears earlier: {leaked}"
    engine = {name.rsplit(".", 1)[1] for name in exercise.engine_answers}
    used = sorted((engine - MEASURING_INSTRUMENTS) & names)
    assert not used, f"{where}: engine functions that answer it are used earlier: {used}"


def test_the_search_finds_planted_answers():
    # the checks above must be able to fail: plant the answers where chapter 00 used to
    lines, expressions = _solution_parts(
        "def idle_fraction(P, M):\n    ### BEGIN SOLUTION\n"
        "    bubble = P - 1  # the fill\n    return (P - 1) / (M + P - 1)\n"
        "    ### END SOLUTION\n"
    )
    assert expressions == ["(P-1)/(M+P-1)"] and "bubble=P-1" not in lines  # too short
    markdown = normalized("leaves each device idle for a fraction $(P-1)/(M+P-1)$ of the time")
    assert expressions[0] in markdown
    assert "idle_fraction_gpipe" in _identifiers("show_source(idle_fraction_gpipe)")
    from pipemare_lite.analysis.formulas import idle_fraction_gpipe

    shown = _shown_sources("show_source(f)", {"f": idle_fraction_gpipe})
    assert "def idle_fraction_gpipe" in shown
