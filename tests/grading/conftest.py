"""The grading suite's options, markers and fixtures (see docs/instructors.md).

``pytest tests/grading --student path/to/submission --junitxml reports/grades.xml`` grades
one student: each exercise is one test, marked with its id (``-m ex02_1`` runs one).
``--student`` names the folder with the student's notebooks (a path to a file in it, such
as their ``adapter.py``, means its folder; the file itself is never run). The submission is
graded by :func:`pipemare_lite.book.exercises.grading.grade_submission`: in a separate process,
with the instructor's exercise definitions from the package. Without ``--student`` the
book's own chapters are graded (they hold the reference solutions): a self-test, where an
exercise whose chapter does not define its answer yet is skipped, not failed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipemare_lite.book.exercises import list_exercises
from pipemare_lite.book.exercises.grading import (
    MEMORY_MB,
    MISSING,
    SECONDS_PER_EXERCISE,
    grade_submission,
)

CHAPTERS = Path(__file__).resolve().parents[2] / "chapters"


def pytest_addoption(parser):
    """``--student PATH``, ``--exercise-timeout SECONDS``, ``--memory-mb MIB``."""
    parser.addoption(
        "--student",
        default=None,
        metavar="PATH",
        help="a student's submission folder (or a file in it); default: chapters/, a "
        "self-test against the solutions",
    )
    parser.addoption(
        "--exercise-timeout",
        type=float,
        default=SECONDS_PER_EXERCISE,
        metavar="SECONDS",
        help=f"seconds one exercise may take before it fails (default {SECONDS_PER_EXERCISE})",
    )
    parser.addoption(
        "--memory-mb",
        type=int,
        default=MEMORY_MB,
        metavar="MIB",
        help=f"memory cap of the grading process (default {MEMORY_MB} MiB)",
    )


def pytest_configure(config):
    """Register one marker per exercise, so ``-m ex02_1`` selects it without a warning."""
    for exercise in list_exercises():
        config.addinivalue_line(
            "markers", f"{exercise.id}: {exercise.label}, {exercise.signature}"
        )


@pytest.fixture(scope="session")
def submission_report(request):
    """``(SubmissionReport, is_self_test)`` for the ``--student`` folder, or chapters/."""
    # getoption with a default: this conftest is not loaded early when pytest runs the
    # whole tests/ folder, and then --student does not exist (a self-test)
    student = request.config.getoption("--student", default=None)
    timeout = request.config.getoption("--exercise-timeout", default=SECONDS_PER_EXERCISE)
    memory = request.config.getoption("--memory-mb", default=MEMORY_MB)
    if student is None:
        return grade_submission(CHAPTERS, timeout=timeout, memory_mb=memory), True
    path = Path(student)
    if not path.is_absolute():
        path = Path(request.config.invocation_params.dir) / path
    if path.is_file():
        path = path.parent
    if not path.is_dir():
        raise pytest.UsageError(f"--student {student}: no submission folder at {path}")
    return grade_submission(path, timeout=timeout, memory_mb=memory), False


@pytest.fixture
def grade(submission_report):
    """``grade(exercise_id)``: fail with the feedback unless the answer passed every case.

    The failure message (in the junit XML too) ends with the points and how many of all
    the cases passed.
    """
    report, is_self_test = submission_report

    def _grade(exercise_id: str) -> None:
        found = next((g for g in report.grades if g.exercise_id == exercise_id), None)
        if found is None:
            pytest.fail(f"{exercise_id} is not a registered exercise", pytrace=False)
        if found.status == MISSING and is_self_test:
            pytest.skip(f"self-test: {found.message} (chapter not written yet?)")
        if found.status != "passed":
            summary = (
                f"[{exercise_id}: {found.points}/{found.max_points} points, "
                f"{found.cases_passed}/{found.cases_total} cases passed]"
            )
            pytest.fail(f"{found.message}\n{summary}", pytrace=False)

    return _grade
