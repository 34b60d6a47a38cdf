"""Measure grading a class in jails: wall time and the grader's peak memory (issue 46).

Not a test (pytest does not collect it). Builds ``N`` students, each handing in the book's
own chapters 01 and 02 (the solutions), ``F`` of them with chapter 01 replaced by the
flooding notebook of tests/test_grading_voices.py (8,000 warnings of 500 characters and
20 MB printed at load time), grades chapters 01-02's six exercises with ``grade_class`` and
``write_reports``, and prints one line::

    PYTHONPATH=$PWD .venv/bin/python tests/measure_grading_class.py 30 3 /tmp/class30

The CPU time of the jails is not the grader's (they are not its waited children); to count
it, run the command in a cpuacct cgroup and read ``cpuacct.usage`` afterwards.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import time
from pathlib import Path

from pipemare_lite.book.exercises.grading import grade_class, write_reports
from tests.notebook_files import write_notebook
from tests.test_grading_voices import FLOOD, HONEST_01

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ["ex01_1", "ex01_2", "ex01_3", "ex02_1", "ex02_2", "ex02_3"]


def build_class(folder: Path, students: int, flooders: int) -> Path:
    """``students`` folders of chapters 01 and 02, the first ``flooders`` of them flooding."""
    shutil.rmtree(folder, ignore_errors=True)
    for k in range(students):
        student = folder / "class" / f"student{k:02d}"
        student.mkdir(parents=True)
        for chapter in ("01", "02"):
            shutil.copy(next((ROOT / "chapters").glob(f"{chapter}_*.ipynb")), student)
        if k < flooders:
            for path in student.glob("01_*.ipynb"):
                path.unlink()
            write_notebook(student / "01_naive.ipynb", HONEST_01[0] + FLOOD, HONEST_01[1])
    return folder / "class"


def main() -> None:
    """Build, grade, write the reports, print the measurements."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("students", type=int)
    parser.add_argument("flooders", type=int)
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    if not 0 <= args.flooders <= args.students:
        parser.error(f"flooders must be between 0 and {args.students}, got {args.flooders}")
    classroom = build_class(args.folder, args.students, args.flooders)
    start = time.monotonic()
    reports = grade_class(classroom, EXERCISES)
    seconds = time.monotonic() - start
    written = write_reports(reports, args.folder / "reports")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    largest = max(p.stat().st_size for p in written.values() if p.suffix == ".md")
    print(f"students={args.students} flooders={args.flooders} exercises={len(EXERCISES)} "
          f"wall={seconds:.1f}s grader_peak_rss={usage.ru_maxrss / 1024:.0f}MiB "
          f"grader_cpu={usage.ru_utime + usage.ru_stime:.1f}s largest_report={largest}B "
          f"points={[r.points for r in reports]}")


if __name__ == "__main__":
    main()
