"""Student and solution builds: stubs, stripping, and that nothing of a solution survives.

Run on the fixture notebook in tests/fixtures/assign/ and on every chapter in chapters/.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest

from pipemare_lite.book.exercises import list_exercises
from pipemare_lite.book.exercises.assign import (
    BEGIN_MARKER,
    END_MARKER,
    SOLUTION_ONLY_TAG,
    SolutionMarkupError,
    chapter_number,
    select_chapters,
    solution_regions,
    stub_code,
    student_notebook,
)
from pipemare_lite.cli import main

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DIR = ROOT / "tests" / "fixtures" / "assign"
FIXTURE = FIXTURE_DIR / "02_exercise_fixture.ipynb"
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))


def _solution_lines(notebook) -> set[str]:
    """Every non-blank line inside a solution region, stripped (markers excluded)."""
    lines = set()
    for cell in notebook.cells:
        source = cell.source.splitlines()
        for begin, end in solution_regions(cell.source):
            lines |= {line.strip() for line in source[begin + 1 : end] if line.strip()}
    return lines


def _lines_outside_solutions(notebook) -> set[str]:
    lines = set()
    for cell in notebook.cells:
        if SOLUTION_ONLY_TAG in cell.get("metadata", {}).get("tags", []):
            continue
        source = cell.source.splitlines()
        inside = {i for b, e in solution_regions(cell.source) for i in range(b, e + 1)}
        lines |= {line.strip() for i, line in enumerate(source) if i not in inside}
    return lines


def _solution_only_lines(notebook) -> set[str]:
    return {
        line.strip()
        for cell in notebook.cells
        if SOLUTION_ONLY_TAG in cell.get("metadata", {}).get("tags", [])
        for line in cell.source.splitlines()
        if line.strip()
    }


def assert_no_solution_survives(source, student) -> None:
    """Search the student copy for every solution line that is not also in the handout text."""
    student_text = "\n".join(cell.source for cell in student.cells)
    student_lines = {line.strip() for line in student_text.splitlines()}
    assert BEGIN_MARKER not in student_text and END_MARKER not in student_text
    secret = (_solution_lines(source) | _solution_only_lines(source)) - _lines_outside_solutions(
        source
    )
    leaked = sorted(secret & student_lines)
    assert not leaked, f"solution lines in the student copy: {leaked}"
    for cell in student.cells:
        assert SOLUTION_ONLY_TAG not in cell.get("metadata", {}).get("tags", [])
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    assert "widgets" not in student.metadata


def _masked(source: str) -> str:
    return "\n".join(
        "pass" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


def _parses(source: str) -> bool:
    try:
        ast.parse(_masked(source))
    except SyntaxError:
        return False
    return True


# --- stubs --------------------------------------------------------------------------------


def test_function_region_becomes_raise_keeping_def_and_docstring():
    source = (
        "def gpipe_order(P, M):\n"
        '    """Docstring stays."""\n'
        "    ### BEGIN SOLUTION\n"
        "    return [[f'{r}F0'] for r in range(P)]\n"
        "    ### END SOLUTION\n"
        "\n"
        "x = 1"
    )
    assert stub_code(source) == (
        "def gpipe_order(P, M):\n"
        '    """Docstring stays."""\n'
        '    raise NotImplementedError("Exercise 2.1")\n'
        "\n"
        "x = 1"
    )


def test_nested_region_keeps_its_indentation_and_unknown_function_gets_fallback_label():
    source = (
        "def helper(n):\n"
        "    for i in range(n):\n"
        "        ### BEGIN SOLUTION\n"
        "        print(i)\n"
        "        ### END SOLUTION\n"
        "    return n"
    )
    stubbed = stub_code(source, fallback_label="Exercise 7.3")
    assert '        raise NotImplementedError("Exercise 7.3")' in stubbed.splitlines()
    ast.parse(stubbed)


def test_top_level_constant_region_becomes_a_placeholder_assignment():
    source = "### BEGIN SOLUTION\nM_FOR_10_PERCENT = 1 + 2\n### END SOLUTION\nprint('x')"
    stubbed = stub_code(source, fallback_label="Exercise 2.3")  # no longer a registered name
    assert stubbed.splitlines()[0].startswith("M_FOR_10_PERCENT = NotImplemented  # Exercise 2.3")
    namespace: dict = {}
    exec(stubbed.replace("print('x')", ""), namespace)
    assert namespace["M_FOR_10_PERCENT"] is NotImplemented


def test_top_level_region_without_assignment_becomes_raise():
    stubbed = stub_code("### BEGIN SOLUTION\nprint('answer')\n### END SOLUTION", "Exercise 5.1")
    assert stubbed == 'raise NotImplementedError("Exercise 5.1")'


@pytest.mark.parametrize(
    "source, message",
    [
        ("x = 1\n### END SOLUTION", "line 2: '### END SOLUTION' without"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION", "line 2:.*inside another"),
        ("x = 1\n    ### BEGIN SOLUTION\nx = 2", "line 2:.*never closed"),
    ],
)
def test_unbalanced_markers_are_reported_with_their_line(source, message):
    with pytest.raises(SolutionMarkupError, match=message):
        stub_code(source, where="02_x.ipynb cell 4")


# --- student copies -----------------------------------------------------------------------


def test_fixture_student_copy_has_no_solution_and_valid_stubs():
    source = nbformat.read(FIXTURE, as_version=4)
    before = nbformat.writes(source)
    student = student_notebook(source, FIXTURE.name)
    assert nbformat.writes(source) == before  # the source is not modified
    assert _solution_lines(source)  # the fixture does have solutions to strip
    assert_no_solution_survives(source, student)
    assert len(student.cells) == len(source.cells) - 1  # the solution-only cell
    text = "\n".join(cell.source for cell in student.cells)
    for label in ("Exercise 2.1", "Exercise 2.2", "Exercise 2.3"):
        assert label in text
    assert "fixture-solution-only-answer" not in text
    assert "fixture-markdown-answer" not in text and "*Your answer here.*" in text
    for cell in student.cells:
        if cell.cell_type == "code":
            assert _parses(cell.source), cell.source
    nbformat.validate(student)


@pytest.mark.skipif(not CHAPTERS, reason="no chapters in chapters/ yet")
@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_student_copy_has_no_solution(path):
    source = nbformat.read(path, as_version=4)
    student = student_notebook(source, path.name)
    assert_no_solution_survives(source, student)
    for before, after in zip(
        [c for c in source.cells if SOLUTION_ONLY_TAG not in c.metadata.get("tags", [])],
        student.cells,
    ):
        if after.cell_type == "code" and _parses(before.source):
            assert _parses(after.source), f"{path.name}: stub broke\n{after.source}"


def _uses_outside_check(source: str, name: str) -> bool:
    """True if ``source`` reads ``name`` anywhere except as an argument of ``check(...)``."""
    try:
        tree = ast.parse(_masked(source))
    except SyntaxError:
        return False
    inside_check = {
        id(node)
        for call in ast.walk(tree)
        if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "check"
        for node in ast.walk(call)
    }
    return any(
        isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
        and id(node) not in inside_check
        for node in ast.walk(tree)
    )


def test_use_detector_ignores_check_calls_attributes_and_imports():
    assert _uses_outside_check("rows = gpipe_order(2, 3)", "gpipe_order")
    assert not _uses_outside_check('check("ex02_1", gpipe_order)', "gpipe_order")
    assert not _uses_outside_check("print(m.gpipe_order)", "gpipe_order")
    assert not _uses_outside_check("from x import gpipe_order as g", "gpipe_order")


@pytest.mark.skipif(not CHAPTERS, reason="no chapters in chapters/ yet")
@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_student_copy_stays_runnable(path):
    # a stubbed answer used by a later cell would stop the student's run there
    chapter = chapter_number(path)
    notebook = nbformat.read(path, as_version=4)
    for exercise in list_exercises(chapter):
        users = [
            index
            for index, cell in enumerate(notebook.cells)
            if cell.cell_type == "code"
            and not solution_regions(cell.source)
            and _uses_outside_check(cell.source, exercise.function_name)
        ]
        assert not users, f"{path.name}: cells {users} use {exercise.function_name}"


# --- selection and the command line -------------------------------------------------------


def test_select_chapters_by_number_stem_or_name():
    assert select_chapters(FIXTURE_DIR) == [FIXTURE]
    for selector in ("2", "02", "02_exercise_fixture", "02_exercise_fixture.ipynb"):
        assert select_chapters(FIXTURE_DIR, [selector]) == [FIXTURE]
    with pytest.raises(ValueError, match=r"no chapter matches '07'.*02_exercise_fixture"):
        select_chapters(FIXTURE_DIR, ["07"])
    with pytest.raises(FileNotFoundError):
        select_chapters(FIXTURE_DIR / "missing")


def test_cli_student_build_writes_stubbed_copies(tmp_path, capsys):
    assert main(["assign", "student", "--source", str(FIXTURE_DIR), "--out", str(tmp_path)]) == 0
    written = tmp_path / FIXTURE.name
    assert f"wrote {written}" in capsys.readouterr().out
    source = nbformat.read(FIXTURE, as_version=4)
    assert_no_solution_survives(source, nbformat.read(written, as_version=4))


def test_cli_reports_bad_chapter_and_timeout(tmp_path, capsys):
    args = ["assign", "student", "--source", str(FIXTURE_DIR), "--out", str(tmp_path)]
    assert main(args + ["--chapters", "9"]) == 2
    assert "no chapter matches '9'" in capsys.readouterr().err
    assert main(["assign", "solutions", "--source", str(FIXTURE_DIR), "--timeout", "0"]) == 2
    assert "--timeout must be a positive" in capsys.readouterr().err


def test_the_solution_build_reports_each_chapter_as_it_finishes(tmp_path, monkeypatch, capsys):
    """Issue 30: `make solutions` printed nothing for four minutes."""
    from pipemare_lite.book.exercises import assign
    from pipemare_lite.cli import main as cli_main

    source = tmp_path / "chapters"
    source.mkdir()
    for name in ("01_first.ipynb", "02_second.ipynb"):
        nbformat.write(nbformat.v4.new_notebook(), source / name)
    monkeypatch.setattr(assign, "solution_notebook", lambda nb, cwd, timeout: nb)  # no kernel
    lines = []
    assign.build_solutions(source, tmp_path / "out", progress=lines.append)
    assert [line.split(" ")[:2] for line in lines] == [["[1/2]", "01_first.ipynb"],
                                                       ["[2/2]", "02_second.ipynb"]]
    assert all(line.endswith(" s") for line in lines)
    # the command prints them as they come
    assert cli_main(["assign", "solutions", "--source", str(source),
                     "--out", str(tmp_path / "cli")]) == 0
    assert "[2/2] 02_second.ipynb" in capsys.readouterr().out
