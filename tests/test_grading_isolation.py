"""Grading cannot be faked: each submission runs in its own process, judged by the grader.

The two attacks of issue 18, written out: (1) lines appended to the student's adapter.py
that patch the registry so that functions returning 0 pass; (2) one assignment in an
exercise cell that patches ``registry.EXERCISES``. Each test first shows that the attack
works where the student's code runs in the grader's process (the old design), then that
:func:`grade_submission` gives it no point. Also: timeouts, crashes and memory hogs cost
one exercise, the worker cannot import the definitions, and the reports and class CSV.
"""

from __future__ import annotations

import csv
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from pipemare_lite.book.exercises import get_exercise, list_exercises
from pipemare_lite.book.exercises.grading import (
    class_submissions,
    grade_class,
    grade_submission,
    write_reports,
)
from pipemare_lite.book.exercises.hidden import graded_cases, instructor_secret
from pipemare_lite.cli import main
from tests.sandbox_required import _sandbox_or_fail, requires_sandbox  # noqa: F401

pytestmark = requires_sandbox
ROOT = Path(__file__).resolve().parents[1]
FUNCTION_EXERCISES = [e for e in list_exercises() if e.kind == "function"]


#: For exercises whose answer a harness uses (it calls the answer with other arguments than
#: the case's and uses what it returns), a wrong answer that still runs: with ``return 0``
#: the harness itself would raise, and no patched comparator could make it pass.
WRONG_BUT_RUNNING = {
    "ex05_1": "def version_hooks(params, weights):\n    return (lambda t: t), (lambda t: t)\n",
    # no correction at all: the buffer stays as it came, the backward reads the new weights
    "ex09_1": "def t2_step(delta, w_old, w_new, gamma, distance):\n    return delta, w_new\n",
}


def _zero_function(exercise) -> str:
    """``def name(args): return 0`` for a function exercise (see :data:`WRONG_BUT_RUNNING`)."""
    if exercise.harness is not None:
        return WRONG_BUT_RUNNING[exercise.id]
    arguments = ", ".join(exercise.cases()[0])
    return f"def {exercise.function_name}({arguments}):\n    return 0\n"


def _write_notebook(path: Path, *cells: str) -> Path:
    notebook = new_notebook()
    notebook.cells = [new_code_cell(textwrap.dedent(c)) for c in cells]
    nbformat.write(notebook, path)
    return path


def _zero_submission(folder: Path) -> Path:
    """One notebook per chapter, every function exercise answered with ``return 0``."""
    folder.mkdir(parents=True)
    for chapter in sorted({e.chapter for e in FUNCTION_EXERCISES}):
        cells = ["from pipemare_lite.book.exercises import check"] + [
            _zero_function(e) + f"\ncheck({e.id!r}, {e.function_name})"
            for e in FUNCTION_EXERCISES
            if e.chapter == chapter
        ]
        _write_notebook(folder / f"{chapter:02d}_student.ipynb", *cells)
    return folder


PATCH_EVERY_COMPARE = """
import dataclasses
from pipemare_lite.book.exercises import registry
for _id, _exercise in list(registry.EXERCISES.items()):
    if _exercise.kind == "function":
        registry.EXERCISES[_id] = dataclasses.replace(_exercise, compare=lambda a, e: None)
"""


_IN_PROCESS = """
import pathlib, sys
exec(sys.argv[2])
from pipemare_lite.book.exercises import list_exercises, load_from_notebook, run_checks
passed = 0
for exercise in list_exercises():
    notebooks = sorted(pathlib.Path(sys.argv[1]).glob(f"{exercise.chapter:02d}_*.ipynb"))
    if exercise.kind != "function" or not notebooks:
        continue
    answers = load_from_notebook(notebooks[0], [exercise.function_name])
    if exercise.function_name in answers:
        passed += run_checks(exercise.id, answers[exercise.function_name]).passed
print(passed)
"""


def _in_process_passes(code_before: str, folder: Path) -> int:
    """How many function exercises pass when ``code_before`` and the answers run in the
    grader's own process (what the old grading did): the control for each attack."""
    done = subprocess.run(
        [sys.executable, "-c", _IN_PROCESS, str(folder), textwrap.dedent(code_before)],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


def test_attack_1_appended_adapter_lines_no_longer_fake_a_grade(tmp_path):
    folder = _zero_submission(tmp_path / "mallory")
    template = (ROOT / "tests" / "grading" / "adapter.py").read_text()
    (folder / "adapter.py").write_text(template + "\n# appended by the student\n"
                                       + textwrap.dedent(PATCH_EVERY_COMPARE))
    # control: with the appended lines run in the grader's process, zeros pass
    assert _in_process_passes(PATCH_EVERY_COMPARE, folder) == len(FUNCTION_EXERCISES)

    report = grade_submission(folder)
    assert report.points == 0
    function_ids = {e.id for e in FUNCTION_EXERCISES}
    assert all(g.status == "failed" for g in report.grades if g.exercise_id in function_ids)


def test_attack_2_an_assignment_in_the_exercise_cell_cannot_patch_the_registry(tmp_path):
    folder = tmp_path / "eve"
    folder.mkdir()
    _write_notebook(
        folder / "01_naive.ipynb",
        """
        import dataclasses
        from pipemare_lite.book.exercises import check, registry

        def naive_utilization(P):
            return 0

        registry.EXERCISES["ex01_2"] = dataclasses.replace(
            registry.EXERCISES["ex01_2"], compare=lambda a, e: None)
        check("ex01_2", naive_utilization)
        """,
    )
    # control: loaded in the grader's process, the assignment makes `return 0` pass
    assert _in_process_passes("", folder) >= 1

    report = grade_submission(folder, ["ex01_2"])
    (grade,) = report.grades
    assert grade.status == "failed" and grade.points == 0, grade.message
    assert "naive_utilization(stage_costs=" in grade.message and "returned 0" in grade.message
    assert any("not available while grading" in w for w in report.warnings), report.warnings


def test_removing_the_import_guard_patches_only_the_workers_copy(tmp_path):
    folder = tmp_path / "eve2"
    folder.mkdir()
    _write_notebook(
        folder / "01_naive.ipynb",
        """
        import dataclasses
        import sys

        def naive_utilization(P):
            return 0

        sys.meta_path[:] = [f for f in sys.meta_path if "Block" not in type(f).__name__]
        registry = __import__("pipemare_lite.book.exercises.registry", fromlist=["x"])
        registry.EXERCISES["ex01_2"] = dataclasses.replace(
            registry.EXERCISES["ex01_2"], compare=lambda a, e: None)
        """,
    )
    (grade,) = grade_submission(folder, ["ex01_2"]).grades
    assert grade.status == "failed" and grade.points == 0, grade.message


def test_worker_cannot_import_the_definitions(tmp_path):
    folder = tmp_path / "curious"
    folder.mkdir()
    _write_notebook(
        folder / "01_naive.ipynb",
        """
        def naive_utilization(P):
            found = []
            for name in ("registry", "references", "ch01", "grading"):
                try:
                    __import__(f"pipemare_lite.book.exercises.{name}")
                    found.append(name)
                except ImportError:
                    pass
            return found
        """,
    )
    (grade,) = grade_submission(folder, ["ex01_2"]).grades
    assert "returned 0 numbers" in grade.message, grade.message  # none could be imported


def test_endless_loop_crash_and_memory_hog_cost_one_exercise_each(tmp_path):
    folder = tmp_path / "chaos"
    folder.mkdir()
    _write_notebook(
        folder / "02_gpipe.ipynb",
        """
        import os

        def gpipe_order(P, M):            # never returns
            while True:
                pass

        def idle_fraction(P, M):          # kills its process
            os._exit(3)
        """,
    )
    _write_notebook(
        folder / "01_naive.ipynb",
        """
        def naive_utilization(P):         # asks for far more memory than the cap
            return len(bytearray(64 * 2**30)) and 1 / P

        def naive_order(P):               # right
            return [[f"{s}F0", f"{s}B0"] for s in range(P)]
        """,
    )
    report = grade_submission(folder, ["ex01_1", "ex01_2", "ex02_1", "ex02_2"], timeout=3,
                              memory_mb=2048)
    status = {g.exercise_id: g for g in report.grades}
    assert status["ex01_1"].status == "passed" and status["ex01_1"].points == 1
    assert status["ex01_2"].status == "error" and "MemoryError" in status["ex01_2"].message
    assert status["ex02_1"].status == "timed out" and "longer than 3 s" in status["ex02_1"].message
    assert status["ex02_2"].status == "crashed" and "exit code 3" in status["ex02_2"].message


def test_case_counts_are_honest_and_every_case_runs(tmp_path):
    folder = tmp_path / "half"
    folder.mkdir()
    _write_notebook(
        folder / "01_naive.ipynb",
        "def naive_utilization(stage_costs):\n    n = len(stage_costs)\n"
        "    return [c / sum(stage_costs) for c in stage_costs] if n < 4 else [0.5] * n\n",
    )
    (grade,) = grade_submission(folder, ["ex01_2"], salt=b"run 1").grades
    # the grader's cases: check()'s fixed ones and random ones drawn from its secret and salt
    cases = [len(c["stage_costs"])
             for c in graded_cases(get_exercise("ex01_2"), instructor_secret(), b"run 1")]
    right = sum(1 for P in cases if P < 4)
    assert (grade.cases_passed, grade.cases_total) == (right, len(cases))
    assert f"{right} of {len(cases)} cases passed" in grade.message


def _two_submissions(tmp_path: Path) -> Path:
    class_dir = tmp_path / "class"
    alice = class_dir / "alice"
    alice.mkdir(parents=True)
    _write_notebook(
        alice / "01_naive.ipynb",
        "def naive_utilization(stage_costs):\n"
        "    return [c / sum(stage_costs) for c in stage_costs]\n",
        "def naive_order(P):\n    return [[f'{s}F0', f'{s}B0'] for s in range(P)]\n",
    )
    bob = class_dir / "bob"
    bob.mkdir()
    _write_notebook(bob / "01_naive.ipynb", "def naive_utilization(stage_costs):\n"
                    "    return [1 / (len(stage_costs) + 1)] * len(stage_costs)\n")
    return class_dir


def test_class_csv_and_reports_have_points_per_exercise(tmp_path):
    class_dir = _two_submissions(tmp_path)
    assert [p.name for p in class_submissions(class_dir)] == ["alice", "bob"]
    reports = grade_class(class_dir, ["ex01_1", "ex01_2"])
    written = write_reports(reports, tmp_path / "reports")
    rows = list(csv.DictReader(written["grades.csv"].open()))
    assert rows == [
        {"student": "alice", "ex01_1": "1", "ex01_2": "1", "total": "2", "max_points": "2",
         "note": ""},
        {"student": "bob", "ex01_1": "0", "ex01_2": "0", "total": "0", "max_points": "2",
         "note": ""},
    ]
    detail = list(csv.DictReader(written["grades_detail.csv"].open()))
    assert {(r["student"], r["exercise"], r["status"]) for r in detail} == {
        ("alice", "ex01_1", "passed"), ("alice", "ex01_2", "passed"),
        ("bob", "ex01_1", "missing"), ("bob", "ex01_2", "failed"),
    }
    bob_report = written["bob"].read_text()
    assert "0 / 2 points" in bob_report and "naive_utilization(stage_costs=" in bob_report


def test_cli_grades_a_folder_of_two_submissions(tmp_path, capsys):
    class_dir = _two_submissions(tmp_path)
    out = tmp_path / "out"
    args = ["grade", str(class_dir), "--out", str(out), "--exercises", "ex01_1", "ex01_2"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "alice: 2/2 points" in printed and "bob: 0/2 points" in printed
    header = (out / "grades.csv").read_text().splitlines()[0]
    assert header == "student,ex01_1,ex01_2,total,max_points,note"
    assert main(["grade", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "no submission folder" in capsys.readouterr().err


def test_bad_options_are_reported_early(tmp_path):
    with pytest.raises(ValueError, match="timeout must be a positive"):
        grade_submission(tmp_path, timeout=0)
    with pytest.raises(ValueError, match="memory_mb must be a positive int"):
        grade_submission(tmp_path, memory_mb=-1)
    with pytest.raises(ValueError, match="no submissions in"):
        class_submissions(tmp_path)


def test_an_exercise_whose_cases_cannot_travel_is_reported_not_fatal(tmp_path, monkeypatch):
    import dataclasses

    from pipemare_lite.book.exercises import registry

    exercise = registry.EXERCISES["ex01_2"]
    broken = dataclasses.replace(exercise, cases=lambda: [{"P": lambda: 4}])
    monkeypatch.setitem(registry.EXERCISES, "ex01_2", broken)
    folder = tmp_path / "s"
    folder.mkdir()
    _write_notebook(folder / "01_naive.ipynb",
                    "def naive_utilization(stage_costs):\n"
        "    return [c / sum(stage_costs) for c in stage_costs]\n",
                    "def naive_order(P):\n    return [[f'{s}F0', f'{s}B0'] for s in range(P)]\n")
    report = grade_submission(folder, ["ex01_1", "ex01_2"])
    grades = {g.exercise_id: g for g in report.grades}
    assert grades["ex01_1"].status == "passed"
    assert grades["ex01_2"].status == "crashed" and "picklable" in grades["ex01_2"].message


def test_grading_rejects_answers_that_only_wrap_the_engine(tmp_path):
    folder = tmp_path / "wrapper"
    folder.mkdir()
    _write_notebook(
        folder / "02_gpipe.ipynb",
        "from pipemare_lite.analysis.formulas import idle_fraction_gpipe\n"
        "from pipemare_lite.schedules import build_schedule\n"
        "from pipemare_lite.analysis.simulate import simulate_and_measure",
        "def idle_fraction(P, M):\n    return idle_fraction_gpipe(P, M)\n",
        "def gpipe_order(P, M):\n"
        "    return [[str(a) for a in row if a.kind != 'U']\n"
        "            for row in build_schedule('gpipe', P, M).ranks]\n",
    )
    _write_notebook(
        folder / "01_naive.ipynb",
        "from pipemare_lite.schedules import build_schedule\n"
        "from pipemare_lite.analysis.simulate import OpCosts, simulate_and_measure",
        "def naive_utilization(stage_costs):\n"
        "    costs = OpCosts(stage_multipliers=tuple(stage_costs))\n"
        "    schedule = build_schedule('naive', len(stage_costs), 1)\n"
        "    return list(simulate_and_measure(schedule, costs)[1].utilization_per_rank)\n",
    )
    report = grade_submission(folder, ["ex01_2", "ex02_1", "ex02_2"])
    for grade in report.grades:
        assert grade.status == "failed" and "uses the engine's" in grade.message, grade.message
