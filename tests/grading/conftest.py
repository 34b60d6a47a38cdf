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
from pipemare_lite.book.exercises.pytest_grading import PLUGIN, add_options
from pipemare_lite.book.exercises.sandbox import SandboxUnavailable

CHAPTERS = Path(__file__).resolve().parents[2] / "chapters"


def pytest_addoption(parser, pluginmanager):
    """``--student PATH``, ``--exercise-timeout SECONDS``, ``--memory-mb MIB``,
    ``--no-sandbox``: registered here unless the early plugin (``-p``, see its docstring)
    already did."""
    if not pluginmanager.has_plugin(PLUGIN):
        add_options(parser)


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
    no_sandbox = request.config.getoption("--no-sandbox", default=False)
    if student is None:  # the book's own solutions: trusted, on a fixed secret's cases
        report = grade_submission(
            CHAPTERS, timeout=timeout, memory_mb=memory, sandboxed=False, secret=b"self-test"
        )
        return report, True
    path = Path(student)
    if not path.is_absolute():
        path = Path(request.config.invocation_params.dir) / path
    if path.is_file():
        path = path.parent
    if not path.is_dir():
        raise pytest.UsageError(f"--student {student}: no submission folder at {path}")
    _refuse_the_submissions_conftest(request.config, path)
    try:
        report = grade_submission(path, timeout=timeout, memory_mb=memory, sandboxed=not no_sandbox)
    except SandboxUnavailable as exc:
        raise pytest.UsageError(
            f"refusing to grade untrusted work without a sandbox: {exc}; pass --no-sandbox "
            "only if you trust the submission"
        ) from None
    return report, False


def _refuse_the_submissions_conftest(config, folder: Path) -> None:
    """A conftest.py from the submission's folder in this process: stop (see
    :mod:`pipemare_lite.book.exercises.pytest_grading`)."""
    folder = folder.resolve()
    for plugin in config.pluginmanager.get_plugins():
        source = getattr(plugin, "__file__", None)
        where = Path(source).resolve() if source else None
        if where is not None and (where == folder or folder in where.parents):
            raise pytest.UsageError(
                f"{source} from the submission was loaded by pytest: its code ran in the "
                f"grader. Run `pytest -p {PLUGIN} tests/grading --student ...` (as `make grade` "
                "does), with the submissions outside the repository"
            )


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
