"""The grading suite's command-line options, as a plugin that pytest loads *early*.

``make grade STUDENT=...`` runs ``pytest -p pipemare_lite.book.exercises.pytest_grading
tests/grading --student PATH``. Loaded with ``-p``, this plugin registers ``--student``
before pytest's first look at the command line; without it (issue 31) pytest did not know
``--student`` yet when it looked for the initial ``conftest.py`` files, took ``PATH`` for a
test path and imported the submission's own ``conftest.py`` into the grader's process (with
the folder inside the repository, a stub notebook then scored 30/30). The suite's fixtures
(``tests/grading/conftest.py``) also refuse to grade when a conftest.py from the
submission's folder is loaded, whichever way pytest was started. Docs: docs/instructors.md.
"""

from __future__ import annotations

PLUGIN = "pipemare_lite.book.exercises.pytest_grading"


def add_options(parser) -> None:
    """``--student``, ``--exercise-timeout``, ``--memory-mb``, ``--no-sandbox``."""
    from pipemare_lite.book.exercises.grading import MEMORY_MB, SECONDS_PER_EXERCISE

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
    parser.addoption(
        "--no-sandbox",
        action="store_true",
        default=False,
        help="grade --student without a bubblewrap jail (ONLY for work you trust)",
    )


def pytest_addoption(parser) -> None:
    """Register the options (see :func:`add_options`)."""
    add_options(parser)
