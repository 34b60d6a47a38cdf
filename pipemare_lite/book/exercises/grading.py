"""Grade submissions: each in its own process, judged with the instructor's definitions.

A *submission* is a folder with a student's chapter notebooks (``NN_name.ipynb``); a *class*
is a folder of submissions, one sub-folder per student (named after the student). For each
submission :func:`grade_submission`

1. takes the exercises, their cases and their expected answers from this package (the
   instructor's copy: nothing in the submission is imported, an ``adapter.py`` in it
   included);
2. starts a fresh interpreter (:mod:`pipemare_lite.book.exercises.worker`) with a memory cap,
   a CPU cap and, per exercise, a wall-clock timeout; the worker loads the student's
   answers from the notebooks, cannot import the registry or the references, and sends
   back only what the answers returned (as JSON);
3. judges those values here, with :func:`~pipemare_lite.book.exercises.check.judge`: the same
   verdict and message as ``check()`` in the notebook, every case run and counted.

An answer that loops past its timeout or crashes the worker costs that exercise only: the
grader starts a new worker for the remaining ones. Each exercise is worth its ``points``
when every case passes, nothing otherwise. :func:`grade_class` grades every submission of a
folder and :func:`write_reports` writes one report per student (Markdown) and the class
CSVs. ``python -m pipemare_lite grade FOLDER`` drives it (for
instructors: docs/instructors.md). Torch-free.
"""

from __future__ import annotations

import csv
import json
import os
import pickle
import re
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pipemare_lite.book.exercises import evaluate as ev
from pipemare_lite.book.exercises.check import judge
from pipemare_lite.book.exercises.exercise import Exercise
from pipemare_lite.book.exercises.plain import from_plain
from pipemare_lite.book.exercises.registry import get_exercise, list_exercises

#: Default seconds one exercise (or loading one notebook) may take.
SECONDS_PER_EXERCISE = 60
#: Seconds a worker may take to start and to load one notebook, on top of the exercise
#: timeout (an interpreter start on a loaded 2-core machine can take several seconds).
STARTUP_SECONDS = 30
#: Default memory cap of a worker, in MiB (address space: torch alone maps about 1 GiB).
MEMORY_MB = 4096
#: Most bytes one event line of a worker may have (a runaway answer is cut, not read).
MAX_EVENT_BYTES = 32 * 2**20
_NOTEBOOK_RE = re.compile(r"^(\d\d)_\w+\.ipynb$")

MISSING, TIMEOUT, CRASHED = "missing", "timed out", "crashed"


@dataclass
class ExerciseGrade:
    """One exercise of one submission.

    Attributes:
        exercise_id, label: ``"ex02_1"``, ``"Exercise 2.1"``.
        status: ``"passed"``, ``"failed"``, ``"error"``, ``"not attempted"`` (as
            :class:`~pipemare_lite.book.exercises.check.CheckResult`), or ``"missing"`` (no
            notebook or no definition), ``"timed out"``, ``"crashed"``.
        points, max_points: awarded and possible.
        cases_passed, cases_total: every case runs; ``cases_passed`` counts them all.
        message: what the student is told (``check()``'s message, or why it did not run).
    """

    exercise_id: str
    label: str
    status: str
    points: int
    max_points: int
    cases_passed: int
    cases_total: int
    message: str


@dataclass
class SubmissionReport:
    """Every graded exercise of one student, with the loader's warnings."""

    student: str
    folder: Path
    grades: list[ExerciseGrade]
    warnings: list[str] = field(default_factory=list)

    @property
    def points(self) -> int:
        """Points awarded."""
        return sum(g.points for g in self.grades)

    @property
    def max_points(self) -> int:
        """Points possible."""
        return sum(g.max_points for g in self.grades)

    def to_markdown(self) -> str:
        """The per-student report: a table of exercises, then each one's feedback."""
        lines = [
            f"# Grade report: {self.student}",
            "",
            f"**{self.points} / {self.max_points} points**",
            "",
            "| exercise | status | points | cases passed |",
            "| --- | --- | --- | --- |",
        ]
        for g in self.grades:
            lines.append(
                f"| {g.label} (`{g.exercise_id}`) | {g.status} | {g.points}/{g.max_points} "
                f"| {g.cases_passed}/{g.cases_total} |"
            )
        lines += ["", "## Feedback", ""]
        for g in self.grades:
            lines += [f"### {g.label} (`{g.exercise_id}`): {g.status}", "", "```text"]
            lines += [g.message, "```", ""]
        if self.warnings:
            lines += ["## While loading your notebooks", ""]
            lines += [f"- {w}" for w in self.warnings] + [""]
        return "\n".join(lines)


def submission_notebooks(folder: str | Path) -> dict[int, Path]:
    """Chapter number -> notebook (``NN_name.ipynb``) in ``folder``; the first by name wins.

    Raises:
        FileNotFoundError: ``folder`` is not a folder.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"no submission folder at {folder}")
    found: dict[int, Path] = {}
    for path in sorted(folder.glob("*.ipynb")):
        match = _NOTEBOOK_RE.match(path.name)
        if match:
            found.setdefault(int(match.group(1)), path)
    return found


def _selected(exercises: Iterable[str | Exercise] | None) -> list[Exercise]:
    if exercises is None:
        return list_exercises()
    return [e if isinstance(e, Exercise) else get_exercise(e) for e in exercises]


def _grade_of(exercise: Exercise, status: str, message: str, passed: int = 0) -> ExerciseGrade:
    total = len(exercise.cases()) if exercise.kind == "function" else 1
    points = exercise.points if status == "passed" else 0
    return ExerciseGrade(
        exercise.id, exercise.label, status, points, exercise.points, passed, total, message
    )


def _evaluation_from(event: dict) -> ev.Evaluation:
    outcomes = [
        ev.CaseOutcome(error=str(o["error"])) if "error" in o else
        ev.CaseOutcome(value=from_plain(o.get("value")))
        for o in event.get("outcomes", [])
    ]
    return ev.Evaluation(
        status=str(event.get("status")),
        outcomes=outcomes,
        value=from_plain(event.get("value")),
        detail=str(event.get("detail", "")),
    )


def _judged(exercise: Exercise, event: dict) -> ExerciseGrade:
    if event.get("missing"):
        return _grade_of(
            exercise, MISSING,
            f"{exercise.function_name} is not defined by the notebook (or its cell raised; "
            "see the warnings)",
        )
    try:
        result = judge(exercise, _evaluation_from(event))
    except (ValueError, TypeError, KeyError) as exc:  # a malformed report is no pass
        return _grade_of(exercise, CRASHED, f"the worker's report could not be read: {exc}")
    grade = _grade_of(exercise, result.status, result.message, result.cases_passed)
    grade.cases_total = result.cases_total
    return grade


class _Worker:
    """One worker process and the pipe it reports on."""

    def __init__(self, job: dict, python: str, log):
        read_fd, write_fd = os.pipe()
        self.process = subprocess.Popen(
            [python, "-m", "pipemare_lite.book.exercises.worker", str(write_fd)],
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=log,
            pass_fds=(write_fd,),
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg"},
        )
        os.close(write_fd)
        self.fd, self.buffer = read_fd, b""
        try:
            self.process.stdin.write(pickle.dumps(job))
            self.process.stdin.close()
        except BrokenPipeError:
            pass

    def next_event(self, deadline: float) -> dict | None:
        """The next event; ``{"event": "eof"}`` when the worker closed its end, None when
        ``deadline`` passed first."""
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or len(self.buffer) > MAX_EVENT_BYTES:
                return None
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return {"event": "eof"}
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            event = json.loads(line)
        except ValueError:
            return {"event": "garbled"}
        return event if isinstance(event, dict) else {"event": "garbled"}

    def stop(self) -> None:
        """Kill the worker if it still runs; close the pipe."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        os.close(self.fd)


def _log_tail(log) -> str:
    log.flush()
    log.seek(0)
    text = log.read().decode("utf-8", "replace").strip()
    return text[-600:]


def grade_submission(
    folder: str | Path,
    exercises: Iterable[str | Exercise] | None = None,
    *,
    student: str | None = None,
    timeout: float = SECONDS_PER_EXERCISE,
    memory_mb: int = MEMORY_MB,
    python: str = sys.executable,
) -> SubmissionReport:
    """Grade the notebooks in ``folder`` on ``exercises`` (default: all registered).

    Raises:
        FileNotFoundError: ``folder`` is not a folder.
        ValueError: ``timeout`` or ``memory_mb`` is not positive.
    """
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb <= 0:
        raise ValueError(f"memory_mb must be a positive int, got {memory_mb!r}")
    folder = Path(folder).resolve()
    notebooks = submission_notebooks(folder)
    chosen = _selected(exercises)
    grades: dict[str, ExerciseGrade] = {}
    pending: dict[Path, list[Exercise]] = {}
    for exercise in chosen:
        path = notebooks.get(exercise.chapter)
        unsendable = _unsendable(exercise)
        if unsendable:
            grades[exercise.id] = _grade_of(exercise, CRASHED, unsendable)
        elif path is None:
            grades[exercise.id] = _grade_of(
                exercise, MISSING,
                f"no notebook for chapter {exercise.chapter:02d} (NN_name.ipynb) in the submission",
            )
        else:
            pending.setdefault(path, []).append(exercise)
    warnings_seen: list[str] = []
    while pending:
        _run_worker(pending, grades, warnings_seen, folder, timeout, memory_mb, python)
    ordered = [grades[e.id] for e in chosen]
    return SubmissionReport(student or folder.name, folder, ordered, warnings_seen)


def _unsendable(exercise: Exercise) -> str | None:
    """Why the exercise's cases cannot be sent to a worker (they must pickle), or None."""
    if exercise.kind != "function":
        return None
    try:
        pickle.dumps(exercise.cases())
    except Exception as exc:
        return (
            f"the grader cannot send the cases of {exercise.id} to the grading process "
            f"({type(exc).__name__}: {exc}); the exercise's cases must be picklable "
            "(an instructor's problem, not the student's)"
        )
    return None


def _job(pending: dict[Path, list[Exercise]], folder: Path, timeout: float, memory_mb: int):
    steps = len(pending) + sum(len(v) for v in pending.values())
    return {
        "cwd": str(folder),
        "memory_bytes": memory_mb * 2**20,
        "cpu_seconds": int(timeout * steps) + 10,  # a backstop: the wall clock rules
        "notebooks": [
            {
                "path": str(path),
                "tasks": [
                    {
                        "id": e.id,
                        "name": e.function_name,
                        "kind": e.kind,
                        "cases": e.cases() if e.kind == "function" else [],
                        "engine_answers": list(e.engine_answers),
                        "harness": e.harness,
                    }
                    for e in exercises
                ],
            }
            for path, exercises in pending.items()
        ],
    }


def _run_worker(pending, grades, warnings_seen, folder, timeout, memory_mb, python) -> None:
    """Run one worker over ``pending``; what it finished leaves ``pending``.

    If it times out or dies, the exercise (or the notebook load) in progress is graded as
    such and removed, so the next worker starts after it.
    """
    by_id = {e.id: (path, e) for path, exercises in pending.items() for e in exercises}
    with tempfile.TemporaryFile() as log:
        worker = _Worker(_job(pending, folder, timeout, memory_mb), python, log)
        current: tuple[str, object] | None = None  # ("load", path) or ("start", exercise id)
        timed_out = False
        try:
            while pending:
                running_answer = current is not None and current[0] == "start"
                allowed = timeout if running_answer else timeout + STARTUP_SECONDS
                event = worker.next_event(time.monotonic() + allowed)
                timed_out = event is None
                if event is None or event.get("event") == "eof":
                    break
                kind = event.get("event")
                if kind == "load":
                    current = ("load", Path(str(event.get("notebook"))))
                elif kind == "warnings":
                    warnings_seen.extend(str(t) for t in event.get("texts", []))
                elif kind == "start" and event.get("id") in by_id:
                    current = ("start", event["id"])
                elif kind == "result" and event.get("id") in by_id:
                    path, exercise = by_id.pop(event["id"])
                    grades[exercise.id] = _judged(exercise, event)
                    pending[path].remove(exercise)
                    if not pending[path]:
                        del pending[path]
                    current = None
        finally:
            if not timed_out:
                try:  # it closed its pipe: let it finish exiting, to read its exit code
                    worker.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            worker.stop()
        if not pending:
            return
        in_answer = current is not None and current[0] == "start"
        limit = timeout if in_answer else timeout + STARTUP_SECONDS
        reason = (
            f"took longer than {limit:g} s (an endless loop?)" if timed_out
            else f"stopped the grading process (exit code {worker.process.returncode}): "
            f"{_log_tail(log) or 'no output'}"
        )
        status = TIMEOUT if timed_out else CRASHED
        if current is not None and current[0] == "start":
            path, exercise = by_id[current[1]]
            grades[exercise.id] = _grade_of(exercise, status, f"{exercise.function_name} {reason}")
            pending[path].remove(exercise)
            if not pending[path]:
                del pending[path]
        else:  # loading a notebook (or starting the worker) failed: its exercises go
            path = current[1] if current is not None else next(iter(pending))
            for exercise in pending.pop(path, []):
                grades[exercise.id] = _grade_of(
                    exercise, status, f"loading {Path(path).name} {reason}"
                )


def class_submissions(folder: str | Path) -> list[Path]:
    """The submissions in ``folder``: its sub-folders with chapter notebooks, or ``folder``
    itself when it holds notebooks.

    Raises:
        FileNotFoundError: ``folder`` is not a folder.
        ValueError: it holds no chapter notebook, directly or one level down.
    """
    folder = Path(folder)
    if submission_notebooks(folder):
        return [folder]
    found = [p for p in sorted(folder.iterdir()) if p.is_dir() and submission_notebooks(p)]
    if not found:
        raise ValueError(
            f"no submissions in {folder}: expected chapter notebooks (NN_name.ipynb) in it "
            "or in one sub-folder per student"
        )
    return found


def grade_class(
    folder: str | Path, exercises: Iterable[str | Exercise] | None = None, **options
) -> list[SubmissionReport]:
    """:func:`grade_submission` for each submission of :func:`class_submissions`."""
    chosen = _selected(exercises)
    return [grade_submission(path, chosen, **options) for path in class_submissions(folder)]


def write_reports(reports: list[SubmissionReport], out_dir: str | Path) -> dict[str, Path]:
    """Write ``grades.csv`` (one row per student: points per exercise, total, maximum),
    ``grades_detail.csv`` (one row per student and exercise) and ``<student>.md``.

    Returns the paths written, by name (``"grades.csv"``, ``"grades_detail.csv"`` and one
    per student).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ids = [g.exercise_id for g in reports[0].grades] if reports else []
    written: dict[str, Path] = {}
    summary = out_dir / "grades.csv"
    with summary.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student", *ids, "total", "max_points"])
        for report in reports:
            points = {g.exercise_id: g.points for g in report.grades}
            writer.writerow(
                [report.student, *(points.get(i, 0) for i in ids), report.points, report.max_points]
            )
    written["grades.csv"] = summary
    detail = out_dir / "grades_detail.csv"
    with detail.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["student", "exercise", "status", "points", "max_points", "cases_passed", "cases_total"]
        )
        for report in reports:
            for g in report.grades:
                writer.writerow([report.student, g.exercise_id, g.status, g.points,
                                 g.max_points, g.cases_passed, g.cases_total])
    written["grades_detail.csv"] = detail
    for report in reports:
        safe = re.sub(r"[^\w.-]", "_", report.student) or "student"
        path = out_dir / f"{safe}.md"
        path.write_text(report.to_markdown() + "\n", encoding="utf-8")
        written[report.student] = path
    return written
