"""``python -m pipemare_lite grade FOLDER``: grade a class (or one student) into reports.

``FOLDER`` holds one sub-folder of chapter notebooks per student (named after the student),
or is itself one student's folder. Each submission is graded in its own process with the
instructor's exercise definitions (:mod:`pipemare_lite.book.exercises.grading`); the command
writes ``grades.csv`` (points per exercise, total, maximum), ``grades_detail.csv`` and one
``<student>.md`` report per student into ``--out`` (default ``reports/``), and prints one
line per student. Each submission runs in its own bubblewrap jail
(:mod:`pipemare_lite.book.exercises.sandbox`); where no jail can start, the command refuses
to grade unless ``--no-sandbox`` says the work is trusted. See docs/instructors.md.
"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments: the folder, the output folder, which exercises, timeout, memory cap."""
    from pipemare_lite.book.exercises.grading import (
        MEMORY_MB,
        SECONDS_PER_EXERCISE,
        STUDENT_SECONDS,
    )
    from pipemare_lite.book.exercises.sandbox import DISK_MB

    parser.add_argument("folder", help="a folder of submissions (one sub-folder per student)")
    parser.add_argument("--out", default="reports", help="where the reports go (reports/)")
    parser.add_argument(
        "--exercises", nargs="+", metavar="ID", help="exercise ids to grade (default: all)"
    )
    parser.add_argument(
        "--chapters", nargs="+", type=int, metavar="NN", help="grade only these chapters"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=SECONDS_PER_EXERCISE,
        help=f"seconds one exercise may run (default {SECONDS_PER_EXERCISE})",
    )
    parser.add_argument(
        "--memory-mb",
        type=int,
        default=MEMORY_MB,
        help=f"memory cap of each grading process in MiB (default {MEMORY_MB})",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=STUDENT_SECONDS,
        help=f"seconds one student's whole submission may take (default {STUDENT_SECONDS})",
    )
    parser.add_argument(
        "--disk-mb",
        type=int,
        default=DISK_MB,
        help=f"MiB a submission may write in its jail, in all (default {DISK_MB})",
    )
    parser.add_argument(
        "--partial-credit",
        action="store_true",
        help="an answer that runs earns its points times the share of cases it passes "
        "(default: all or nothing, every case must pass)",
    )
    parser.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run the submissions without a bubblewrap jail: ONLY for work you trust "
        "(the students' code then runs as you, with your files)",
    )


def run(args: argparse.Namespace) -> int:
    """Grade, write the reports, print a line per student; 0 even when students fail."""
    from pipemare_lite.book.exercises import get_exercise, list_exercises
    from pipemare_lite.book.exercises.grading import grade_class, write_reports
    from pipemare_lite.book.exercises.sandbox import SandboxUnavailable

    exercises = [get_exercise(i) for i in args.exercises] if args.exercises else list_exercises()
    if args.chapters:
        exercises = [e for e in exercises if e.chapter in set(args.chapters)]
    if not exercises:
        raise ValueError("no exercise selected (check --exercises and --chapters)")
    try:
        reports = grade_class(
            args.folder, exercises, timeout=args.timeout, memory_mb=args.memory_mb,
            budget=args.budget, disk_mb=args.disk_mb, sandboxed=not args.no_sandbox,
            partial_credit=args.partial_credit,
        )
    except FileNotFoundError as exc:
        raise ValueError(str(exc)) from None
    except SandboxUnavailable as exc:
        raise ValueError(
            f"refusing to grade untrusted work without a sandbox: {exc}. Install bubblewrap, "
            "or pass --no-sandbox if you trust every submission (docs/instructors.md)"
        ) from None
    written = write_reports(reports, args.out)
    for report in reports:
        print(f"{report.student}: {report.points}/{report.max_points} points "
              f"-> {written[report.student]}")
    print(f"wrote {written['grades.csv']} and {written['grades_detail.csv']}")
    return 0
