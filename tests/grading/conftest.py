"""The grading suite's options, markers and fixtures (see docs/instructors.md).

``pytest tests/grading --student path/to/adapter.py --junitxml reports/grades.xml`` grades
one student: each exercise is one test, marked with its id (``-m ex02_1`` runs one).
Without ``--student`` the template ``adapter.py`` in this folder is used: it loads the
instructor's chapters (with solutions), so the run is a self-test of the suite, and an
exercise whose chapter does not define its answer yet is skipped, not failed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import signal
import sys
import threading
from pathlib import Path

import pytest

from pipemare_lite.exercises import list_exercises, run_checks

TEMPLATE_ADAPTER = Path(__file__).resolve().parent / "adapter.py"
#: Default seconds one exercise's checks may take (``--exercise-timeout``); the reference
#: answers need well under one.
SECONDS_PER_EXERCISE = 60


class ExerciseTimeout(Exception):
    """A student's answer ran longer than ``--exercise-timeout`` seconds."""


@contextlib.contextmanager
def _time_limit(seconds: int):
    """Raise ExerciseTimeout after ``seconds`` (POSIX main thread only; elsewhere no limit)."""
    usable = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def _expired(signum, frame):
        raise ExerciseTimeout(f"the checks took longer than {seconds} s (an endless loop?)")

    previous = signal.signal(signal.SIGALRM, _expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def pytest_addoption(parser):
    """``--student PATH``: the student's adapter (default: the template, a self-test)."""
    parser.addoption(
        "--student",
        default=None,
        metavar="PATH",
        help="a student's adapter.py (default: tests/grading/adapter.py, a self-test "
        "against the solution notebooks)",
    )
    parser.addoption(
        "--exercise-timeout",
        type=int,
        default=SECONDS_PER_EXERCISE,
        metavar="SECONDS",
        help=f"seconds one exercise may take before it fails (default {SECONDS_PER_EXERCISE})",
    )


def pytest_configure(config):
    """Register one marker per exercise, so ``-m ex02_1`` selects it without a warning."""
    for exercise in list_exercises():
        config.addinivalue_line(
            "markers", f"{exercise.id}: {exercise.label}, {exercise.signature}"
        )


def _load_adapter(path: Path):
    """Import the adapter file as a module, with its folder importable (for its helpers)."""
    spec = importlib.util.spec_from_file_location(f"grading_adapter_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


@pytest.fixture(scope="session")
def adapter(request):
    """``(module, is_self_test)``: the adapter named by ``--student``, or the template."""
    # getoption with a default: this conftest is not loaded early when pytest runs the
    # whole tests/ folder, and then --student does not exist (a self-test)
    student = request.config.getoption("--student", default=None)
    if student is None:
        return _load_adapter(TEMPLATE_ADAPTER), True
    path = Path(student)
    if not path.is_absolute():
        path = Path(request.config.invocation_params.dir) / path
    if not path.is_file():
        raise pytest.UsageError(f"--student {student}: no adapter file at {path}")
    return _load_adapter(path.resolve()), False


@pytest.fixture
def grade(adapter, request):
    """``grade(exercise_id)``: check the adapter's answer; fail with check()'s message.

    The failure message (in the junit XML too) ends with how many cases passed.
    """
    module, is_self_test = adapter
    seconds = request.config.getoption("--exercise-timeout", default=SECONDS_PER_EXERCISE)

    def _grade(exercise_id: str) -> None:
        exercise = next(e for e in list_exercises() if e.id == exercise_id)
        if not hasattr(module, exercise.function_name):
            message = f"{exercise.function_name} is not defined by the adapter {module.__file__}"
            if is_self_test:
                pytest.skip(f"self-test: {message} (chapter {exercise.chapter:02d} not written?)")
            pytest.fail(message, pytrace=False)
        try:
            with _time_limit(seconds):
                result = run_checks(exercise_id, getattr(module, exercise.function_name))
        except ExerciseTimeout as exc:
            pytest.fail(f"{exercise_id}: {exc}", pytrace=False)
        if not result.passed:
            summary = f"[{exercise_id}: {result.cases_passed}/{result.cases_total} cases passed]"
            pytest.fail(f"{result.message}\n{summary}", pytrace=False)

    return _grade
