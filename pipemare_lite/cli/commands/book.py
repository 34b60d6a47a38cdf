"""``pipemare-lite book``: execute every chapter, then build the book site (build/book/).

Limits (issue 47): ``--max-cell-output`` and ``--max-chapter-output`` (MiB) cut a chapter's
output beyond them, with a line saying how much; ``--kernel-memory`` (GiB) bounds what a
chapter's kernel may map. SIGINT or SIGTERM at any point stop every child and print
``[book] stopped: ...``; the previous site stays until a complete new one replaces it.
"""

from __future__ import annotations

import argparse
import shlex
import signal
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    """Options of the ``book`` subcommand."""
    parser.add_argument(
        "--out",
        default="build/book",
        help="output folder of the site, replaced as a whole (default build/book); the "
        "Sphinx project is kept beside it (build/book.sphinx)",
    )
    parser.add_argument(
        "--chapters",
        nargs="+",
        metavar="CHAPTER",
        help="only these chapters: numbers (03), names (03_one_f_one_b) or notebook paths",
    )
    parser.add_argument(
        "--timeout", type=int, default=300, help="seconds allowed per cell (default 300)"
    )
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="build the remaining chapters after one fails (the exit status is still 1)",
    )
    parser.add_argument(
        "--chapters-dir", default=None, help="folder of the notebooks (default: chapters/)"
    )
    parser.add_argument(
        "--max-cell-output", type=float, default=20.0, metavar="MIB",
        help="output one cell may keep, in MiB; the rest is cut, with a line saying how much "
        "(default 20)")
    parser.add_argument(
        "--max-chapter-output", type=float, default=100.0, metavar="MIB",
        help="output one chapter may keep, all cells together, in MiB (default 100)")
    parser.add_argument(
        "--kernel-memory", type=float, default=None, metavar="GIB",
        help="memory (address space) a chapter's kernel may map, in GiB; 0: no limit "
        "(default: half of this machine's memory)")
    parser.add_argument(
        "--record-timings",
        metavar="JSON",
        default=None,
        help="also store each chapter's measured run time in this .json file, with a "
        ".meta.json beside it (command, versions, machine, date); chapter 00's table reads "
        "data/results/chapter_times.json",
    )


def _command(args: argparse.Namespace) -> str:
    """The command line that reproduces this build, for the timings' .meta.json."""
    parts = ["python", "-m", "pipemare_lite", "book", "--out", str(args.out)]
    if args.chapters:
        parts += ["--chapters", *args.chapters]
    if args.timeout != 300:
        parts += ["--timeout", str(args.timeout)]
    if args.keep_going:
        parts.append("--keep-going")
    if args.chapters_dir:
        parts += ["--chapters-dir", str(args.chapters_dir)]
    for flag, name, default in (("--max-cell-output", "max_cell_output", 20.0),
                                ("--max-chapter-output", "max_chapter_output", 100.0),
                                ("--kernel-memory", "kernel_memory", None)):
        value = getattr(args, name, default)
        if value != default:
            parts += [flag, f"{value:g}"]
    if args.record_timings:
        parts += ["--record-timings", str(args.record_timings)]
    return shlex.join(parts)


def _limits(args: argparse.Namespace) -> dict:
    """``build_book``'s output caps and kernel memory, in bytes, from the MiB/GiB options."""
    limits = {}
    for flag, name in (("--max-cell-output", "max_cell_output"),
                       ("--max-chapter-output", "max_chapter_output")):
        value = getattr(args, name, None)
        if value is None:
            continue
        if not (0 < value < 2**20):  # (NaN fails too)
            raise ValueError(f"{flag} {value!r}: allowed: a positive number of MiB")
        limits[name] = max(1, int(value * 2**20))
    memory = getattr(args, "kernel_memory", None)
    if memory is not None:
        if not (memory == 0 or 0.25 <= memory < 2**20):
            raise ValueError(f"--kernel-memory {memory!r}: allowed: 0 (no limit) or at least "
                             "0.25 GiB")
        limits["kernel_memory"] = None if memory == 0 else int(memory * 2**30)
    return limits


def run(args: argparse.Namespace) -> int:
    """Build; 0 when every chosen chapter ran, 1 otherwise. Prints where to open the book."""
    from pipemare_lite.book.build import BuildInterrupted, build_book

    limits = _limits(args)
    try:
        results = build_book(
            out=args.out,
            chapters=args.chapters,
            timeout=args.timeout,
            keep_going=args.keep_going,
            directory=args.chapters_dir,
            record=args.record_timings,
            command=_command(args),
            **limits,
        )
    except BuildInterrupted as stopped:
        print(f"[book] stopped: {stopped}", flush=True)
        return 128 + int(getattr(signal, stopped.signal_name))
    index = (Path(args.out) / "index.html").resolve()
    failed = [r for r in results if not r.ok]
    total = sum(r.seconds for r in results)
    print(f"[book] {len(results) - len(failed)} of {len(results)} chapters ran ({total:.1f} s)")
    print(f"[book] open the book: {index.as_uri()}")
    if failed:
        names = ", ".join(r.name for r in failed)
        print(f"[book] FAILED: {names} (the error is printed above and shown on the page)")
        return 1
    return 0
