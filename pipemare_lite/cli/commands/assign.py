"""``python -m pipemare_lite assign student|solutions``: the classroom builds.

``student`` writes copies with every solution region stubbed, outputs cleared and
``solution-only`` cells removed (default ``student/``); ``solutions`` writes executed
copies (default ``solutions/``). ``student --format nbgrader`` writes an nbgrader course
folder and ``student --format otter`` otter assign's notebooks instead: those tools make
the student copies themselves (:mod:`pipemare_lite.book.exercises.formats`). See
docs/instructors.md and :mod:`pipemare_lite.book.exercises.assign`.
"""

from __future__ import annotations

import argparse

DEFAULT_OUT = {"student": "student", "solutions": "solutions"}


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments: which build, where from, where to, which chapters, cell timeout."""
    parser.add_argument("build", choices=sorted(DEFAULT_OUT), help="which copies to write")
    parser.add_argument("--out", help="output folder (default: student/ or solutions/)")
    parser.add_argument(
        "--chapters",
        nargs="+",
        metavar="CHAPTER",
        help="chapters to include, by number (02) or file stem (default: all)",
    )
    parser.add_argument(
        "--source", default="chapters", help="folder with the instructor's chapters (chapters/)"
    )
    parser.add_argument(
        "--format",
        choices=("plain", "nbgrader", "otter"),
        default="plain",
        help="student only: plain stubbed copies (default), an nbgrader course folder, or "
        "otter assign notebooks",
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=300,
        help="solutions only: seconds one cell may run before the build fails (default 300)",
    )


def run(args: argparse.Namespace) -> int:
    """Write the copies and print one line per notebook written."""
    from pipemare_lite.book.exercises.assign import build_solutions, build_student

    if args.timeout <= 0:
        raise ValueError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    out = args.out or DEFAULT_OUT[args.build]
    if args.format != "plain" and args.build != "student":
        raise ValueError(f"--format {args.format} applies to `assign student` only")
    if args.format == "nbgrader":
        from pipemare_lite.book.exercises.formats import build_nbgrader

        written = build_nbgrader(args.source, out, args.chapters)
    elif args.format == "otter":
        from pipemare_lite.book.exercises.formats import build_otter

        written = build_otter(args.source, out, args.chapters)
    elif args.build == "student":
        written = build_student(args.source, out, args.chapters)
    else:
        # a line per chapter as it finishes: the whole build runs for minutes
        written = build_solutions(args.source, out, args.chapters, timeout=args.timeout,
                                  progress=lambda line: print(line, flush=True))
    for path in written:
        print(f"wrote {path}")
    if not written:
        print(f"no chapter notebooks (NN_name.ipynb) in {args.source}")
    return 0
