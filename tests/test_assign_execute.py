"""The solution build executes notebooks; a student copy runs top to bottom with its stubs.

Both start a Jupyter kernel (2-5 s each, hence ``slow``), on the fixture notebook only.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from pipemare_lite.book.exercises.assign import build_solutions, build_student, solution_notebook

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DIR = ROOT / "tests" / "fixtures" / "assign"
FIXTURE = FIXTURE_DIR / "02_exercise_fixture.ipynb"


def _stdout(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def _check_outputs(notebook) -> list[str]:
    return [_stdout(c) for c in notebook.cells if c.cell_type == "code" and "check(" in c.source]


@pytest.mark.slow
def test_solution_build_executes_and_its_checks_pass(tmp_path):
    (written,) = build_solutions(FIXTURE_DIR, tmp_path, timeout=120)
    executed = nbformat.read(written, as_version=4)
    code = [c for c in executed.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    outputs = _check_outputs(executed)
    assert len(outputs) == 2 and all(out.startswith("✅") for out in outputs), outputs


@pytest.mark.slow
def test_student_copy_runs_and_says_not_attempted(tmp_path):
    (student_path,) = build_student(FIXTURE_DIR, tmp_path)
    student = nbformat.read(student_path, as_version=4)
    executed = solution_notebook(student, cwd=tmp_path, timeout=120)  # no cell may raise
    outputs = _check_outputs(executed)
    assert len(outputs) == 2 and all("not attempted yet" in out for out in outputs), outputs
