"""``assign student --format nbgrader|otter``: the markup, and round trips with the real tools.

The round trips (marked ``slow``) run nbgrader's ``generate_assignment`` and ``autograde``
on a course folder, and otter's ``assign`` and ``check``, on chapter 04 (torch-free, the
fastest) with a right and a wrong submission. They are skipped when the tools are not
installed (``pip install -e ".[classroom]"``).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from pipemare_lite.book.exercises import list_exercises
from pipemare_lite.book.exercises.formats import (
    OTTER_PACKAGE_PATH,
    nbgrader_notebook,
    otter_notebook,
    split_exercise_cell,
)
from pipemare_lite.cli import main

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "chapters" / "04_interleaving_and_zero_bubble.ipynb"
ASSIGNMENT = CHAPTER.stem
WRONG_P2P = "def p2p_messages_per_microbatch(P, v):\n    return v * P - 1\n"


def _env() -> dict:
    """The tools' console scripts (nbgrader calls ``alembic``) and this tree on the path."""
    bin_dir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }


def _run(*command: str, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_split_moves_the_check_into_a_raising_test():
    source = (
        "def idle_fraction(P, M):\n    ### BEGIN SOLUTION\n    return 0\n    ### END SOLUTION\n"
        '\n\ncheck("ex02_2", idle_fraction)'
    )
    exercise, solution, tests = split_exercise_cell(source)
    assert exercise.id == "ex02_2" and "check" not in solution
    assert tests == "check('ex02_2', idle_fraction, raises=True)"
    assert split_exercise_cell("x = 1") is None
    _, _, quiet = split_exercise_cell(source, quiet=True)
    assert quiet == "check('ex02_2', idle_fraction, raises=True, quiet=True)"


def test_nbgrader_markup_of_a_chapter():
    source = nbformat.read(CHAPTER, as_version=4)
    marked = nbgrader_notebook(source)
    meta = [c.metadata["nbgrader"] for c in marked.cells if "nbgrader" in c.metadata]
    tests = {m["grade_id"]: m for m in meta if m["grade"]}
    solutions = {m["grade_id"] for m in meta if m["solution"]}
    exercises = list_exercises(4)
    assert set(tests) == {f"{e.id}-test" for e in exercises}
    assert solutions == {f"{e.id}-solution" for e in exercises}
    assert all(
        tests[f"{e.id}-test"]["points"] == e.points and tests[f"{e.id}-test"]["locked"]
        for e in exercises
    )
    test_sources = [c.source for c in marked.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert all("raises=True" in s for s in test_sources)
    assert len(marked.cells) == len(source.cells) + len(exercises)  # one test cell each
    nbformat.validate(marked)


def test_otter_markup_of_a_chapter():
    marked = otter_notebook(nbformat.read(CHAPTER, as_version=4), ASSIGNMENT)
    raw = [c.source.splitlines()[0] for c in marked.cells if c.cell_type == "raw"]
    assert raw[0] == "# ASSIGNMENT CONFIG"
    exercises = list_exercises(4)
    assert raw.count("# BEGIN QUESTION") == raw.count("# END QUESTION") == len(exercises)
    code = "\n".join(c.source for c in marked.cells if c.cell_type == "code")
    assert "### BEGIN SOLUTION" not in code and "# BEGIN SOLUTION" in code
    assert "_ = check('ex04_1', p2p_messages_per_microbatch, raises=True, quiet=True)" in code


def test_cli_format_options(tmp_path, capsys):
    out = tmp_path / "course"
    args = ["assign", "student", "--format", "nbgrader", "--chapters", "04", "--out", str(out)]
    assert main(args) == 0
    assert (out / "source" / ASSIGNMENT / CHAPTER.name).is_file()
    assert (out / "nbgrader_config.py").is_file()
    assert main(["assign", "solutions", "--format", "otter"]) == 2
    assert "applies to `assign student` only" in capsys.readouterr().err


def _fill(notebook, answers: dict[str, str], is_answer) -> None:
    """Put ``answers[name]`` (or the solution) into every answer cell of ``notebook``."""
    for cell in notebook.cells:
        if cell.cell_type == "code" and is_answer(cell):
            name = cell.source.split("(")[0].replace("def ", "").strip()
            cell.source = answers[name]


def _solutions_by_name(source) -> dict[str, str]:
    found = {}
    for cell in source.cells:
        split = split_exercise_cell(cell.source) if cell.cell_type == "code" else None
        if split is not None:
            exercise, solution, _ = split
            lines = [line for line in solution.splitlines() if "SOLUTION" not in line]
            found[exercise.function_name] = "\n".join(lines)
    return found


@pytest.mark.slow
def test_nbgrader_round_trip(tmp_path):
    pytest.importorskip("nbgrader")
    course = tmp_path / "course"
    assert (
        main(
            ["assign", "student", "--format", "nbgrader", "--chapters", "04", "--out", str(course)]
        )
        == 0
    )
    _run(sys.executable, "-m", "nbgrader", "generate_assignment", ASSIGNMENT, "--force", cwd=course)
    released = course / "release" / ASSIGNMENT / CHAPTER.name
    solutions = _solutions_by_name(nbformat.read(CHAPTER, as_version=4))
    for student, answers in (
        ("alice", solutions),
        ("bob", {**solutions, "p2p_messages_per_microbatch": WRONG_P2P}),
    ):
        notebook = nbformat.read(released, as_version=4)
        text = "\n".join(c.source for c in notebook.cells)
        assert "2 * (v * P - 1)" not in text  # nbgrader stripped the solutions
        _fill(notebook, answers, lambda c: c.metadata.get("nbgrader", {}).get("solution"))
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        nbformat.write(notebook, folder / CHAPTER.name)
    _run(
        sys.executable, "-m", "nbgrader", "autograde", ASSIGNMENT, "--create", "--force", cwd=course
    )
    _run(sys.executable, "-m", "nbgrader", "export", cwd=course)
    rows = {r["student_id"]: r for r in csv.DictReader((course / "grades.csv").open())}
    maximum = sum(e.points for e in list_exercises(4))
    assert float(rows["alice"]["max_score"]) == maximum
    assert float(rows["alice"]["score"]) == maximum
    wrong_points = next(e.points for e in list_exercises(4) if e.id == "ex04_1")
    assert float(rows["bob"]["score"]) == maximum - wrong_points


@pytest.mark.slow
def test_otter_round_trip(tmp_path):
    pytest.importorskip("otter")
    out = tmp_path / "otter"
    assert (
        main(["assign", "student", "--format", "otter", "--chapters", "04", "--out", str(out)]) == 0
    )
    folder = out / ASSIGNMENT
    _run(sys.executable, "-m", "otter", "assign", CHAPTER.name, "dist", cwd=folder)
    student = folder / "dist" / "student" / CHAPTER.name
    tests = folder / "dist" / "student" / "tests"
    assert sorted(p.stem for p in tests.glob("*.py")) == [e.id for e in list_exercises(4)]
    solutions = _solutions_by_name(nbformat.read(CHAPTER, as_version=4))
    for name, answers in (
        ("right", solutions),
        ("wrong", {**solutions, "p2p_messages_per_microbatch": WRONG_P2P}),
    ):
        notebook = nbformat.read(student, as_version=4)
        assert "2 * (v * P - 1)" not in "\n".join(c.source for c in notebook.cells)
        _fill(notebook, answers, lambda c: "otter_answer_cell" in c.metadata.get("tags", []))
        nbformat.write(notebook, folder / f"{name}.ipynb")
    right = _run(
        sys.executable, "-m", "otter", "check", "right.ipynb", "-t", str(tests), cwd=folder
    )
    assert "All tests passed" in right.stdout + right.stderr
    wrong = subprocess.run(
        [sys.executable, "-m", "otter", "check", "wrong.ipynb", "-t", str(tests)],
        cwd=folder,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = wrong.stdout + wrong.stderr
    assert "ex04_1 results:" in report and "known mistake" in report, report[-3000:]
    assert "ex04_2 results: All test cases passed!" in report
    assert "ex04_3 results: All test cases passed!" in report
    # issue 31: the export generates the autograder zip, so `otter run` grades as exported
    (autograder,) = (folder / "dist" / "autograder").glob("*.zip")
    # ... and it carries the requirement that installs the package in `otter grade`'s image
    # (built on docs/classroom/Dockerfile's, tests/test_classroom_recipes.py)
    with zipfile.ZipFile(autograder) as archive:  # otter merges it into the pip section
        environment = archive.read("environment.yml").decode()
    assert f"- {OTTER_PACKAGE_PATH}" in environment.split("pip:", 1)[1], environment
    ran = _run(sys.executable, "-m", "otter", "run", "-a", str(autograder), "-o", str(tmp_path),
               "right.ipynb", cwd=folder)
    assert "0.0" not in (ran.stdout.strip().splitlines() or ["0.0"])[-1], ran.stdout
