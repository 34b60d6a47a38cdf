"""The grading suite end to end: a student's notebooks in, junit XML with one test per exercise.

(Until issue 18 the student's answers could be pasted into their adapter.py, which the suite
imported; now the suite grades the notebooks only, in a separate process, so the same
answers are written as notebook cells here. The verdicts asserted are unchanged.)
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import pytest

from pipemare_lite.book.exercises import EXERCISES, run_checks
from tests.sandbox_required import _sandbox_or_fail, requires_sandbox  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]

STUDENT_NOTEBOOKS = {
    "01_naive.ipynb": [
        """
def naive_utilization(stage_costs):            # right
    return [cost / sum(stage_costs) for cost in stage_costs]
""",
        """
def naive_order(P):                            # wrong: backward before forward
    return [[f"{r}B0", f"{r}F0"] for r in range(P)]
""",
    ],
    "02_gpipe.ipynb": [
        """
def gpipe_order(P, M):                         # not attempted
    raise NotImplementedError("Exercise 2.1")
""",
        """
def idle_fraction(P, M):                       # never returns
    while True:
        pass
""",
        """
from fractions import Fraction

def smallest_m_below(P, target):               # right (was the constant M_FOR_10_PERCENT)
    M = 1
    while Fraction(P - 1, M + P - 1) >= Fraction(str(target)):
        M += 1
    return M
""",
    ],
}


def _write_student(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, cells in STUDENT_NOTEBOOKS.items():
        notebook = nbformat.v4.new_notebook()
        notebook.cells = [nbformat.v4.new_code_cell(c.strip()) for c in cells]
        nbformat.write(notebook, folder / name)
    (folder / "adapter.py").write_text("raise SystemExit('the grader must never run this')\n")
    return folder


def _run_grading(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pytest", "-c", "pyproject.toml", "--rootdir", ".",
               "-p", "pipemare_lite.book.exercises.pytest_grading",  # as `make grade` does
               "tests/grading", "-p", "no:cacheprovider", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@requires_sandbox
def test_grading_a_student_writes_one_verdict_per_exercise(tmp_path):
    adapter = _write_student(tmp_path / "student") / "adapter.py"  # its folder is graded
    report = tmp_path / "reports" / "grades.xml"
    done = _run_grading(
        "--student", str(adapter), "--junitxml", str(report), "--exercise-timeout", "2", "-q"
    )
    assert done.returncode == 1, done.stdout + done.stderr  # some exercises fail

    verdicts, messages = {}, {}
    for case in ET.parse(report).getroot().iter("testcase"):
        exercise_id = case.get("name").split("_", 1)[1][:6]  # test_ex02_1_gpipe_order
        problem = case.find("failure")
        verdicts[exercise_id] = "failed" if problem is not None else (
            "skipped" if case.find("skipped") is not None else "passed"
        )
        if problem is not None:
            messages[exercise_id] = problem.get("message", "") + (problem.text or "")
    assert set(verdicts) == set(EXERCISES)
    assert verdicts["ex01_2"] == verdicts["ex02_3"] == "passed"
    assert verdicts["ex01_1"] == "failed" and "Hint:" in messages["ex01_1"]
    assert verdicts["ex02_1"] == "failed" and "not attempted yet" in messages["ex02_1"]
    assert verdicts["ex02_2"] == "failed" and "longer than 2 s" in messages["ex02_2"]
    assert verdicts["ex03_1"] == "failed" and "no notebook for chapter 03" in messages["ex03_1"]
    assert "skipped" not in verdicts.values()  # a student's missing answer is a failure


def _import(path: Path):
    spec = importlib.util.spec_from_file_location(f"adapter_under_test_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_template_adapter_reads_the_notebooks_next_to_it(tmp_path):
    # (in place, the template reads chapters/: the self-test run by tests/grading shows it)
    template = ROOT / "tests" / "grading" / "adapter.py"
    shutil.copy(template, tmp_path / "adapter.py")
    shutil.copy(ROOT / "tests" / "fixtures" / "assign" / "02_exercise_fixture.ipynb", tmp_path)
    adapter = _import(tmp_path / "adapter.py")
    assert adapter.NOTEBOOK_DIR == tmp_path
    assert run_checks("ex02_2", adapter.idle_fraction).passed
    assert not hasattr(adapter, "naive_order")  # no chapter 01 notebook there
