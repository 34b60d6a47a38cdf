"""Grade submissions: each in its own process, judged with the instructor's definitions.

A *submission* is a folder with a student's chapter notebooks (``NN_name.ipynb``); a *class*
is a folder of submissions, one sub-folder per student (named after the student). For each
submission :func:`grade_submission`

1. takes the exercises, their cases and their expected answers from this package (the
   instructor's copy: nothing in the submission is imported, an ``adapter.py`` in it
   included);
2. reads the submission's notebooks itself, refusing symbolic links, hard links and
   anything that is not a regular file of the folder, and starts a fresh interpreter
   (:mod:`pipemare_lite.book.exercises.worker`) in a bubblewrap jail
   (:mod:`~pipemare_lite.book.exercises.sandbox`: its own tmpfs, the package and the venv
   read-only, no network, a uid of its own, rlimits), sending it the notebooks' contents;
   then, one exercise at a time, the exercise and its cases. The worker runs no student
   code: it forks one process per exercise that holds only that exercise (no other task,
   no case of another, no pipe to the grader), loads the notebook from a fresh read-only
   copy, gets its cases only after loading, and sends back only what the answer returned
   (as JSON); the grader takes one result, for the exercise it is grading, once;
3. decodes those values with a fixed list of plain types (nothing a worker sends is ever
   imported: :mod:`~pipemare_lite.book.exercises.plain`) and judges them here, with
   :func:`~pipemare_lite.book.exercises.feedback.judge`: the same verdict and message as
   ``check()`` in the notebook, every case run and counted.

The cases graded are not ``check()``'s: the random ones are drawn again from the
instructor's secret and a salt fresh for every run and student
(:mod:`~pipemare_lite.book.exercises.hidden`), which the handout and ``check()`` do not have.
What a student's code prints is counted, never shown (it could hold cases); load warnings
and reports are capped (:data:`MAX_WARNINGS`, :data:`MAX_REPORT_CHARS`). An answer that
crashes its process costs that exercise only; one that loops past its timeout too: the
grader starts a new worker for the remaining ones, until the submission's time budget
(``budget``) runs out. Any failure while grading one submission is
that submission's failure only. Each exercise is worth its ``points`` when every case
passes, nothing otherwise; with ``partial_credit=True`` (the instructor's option, ``grade
--partial-credit``) an answer that ran earns its points times the share of cases it passed.
:func:`grade_class` grades every submission of a
folder and :func:`write_reports` writes one report per student (Markdown) and the class
CSVs. ``python -m pipemare_lite grade FOLDER`` drives it (for
instructors: docs/instructors.md). Torch-free.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import pickle
import re
import select
import signal
import stat
import string
import subprocess
import sys
import tempfile
import time
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from pipemare_lite.book.exercises import evaluate as ev
from pipemare_lite.book.exercises import hidden, memory_cgroup, sandbox, worker
from pipemare_lite.book.exercises.exercise import Exercise
from pipemare_lite.book.exercises.feedback import judge
from pipemare_lite.book.exercises.plain import from_plain
from pipemare_lite.book.exercises.registry import get_exercise, list_exercises

#: Default seconds one exercise (or loading one notebook) may take.
SECONDS_PER_EXERCISE = 60
#: Seconds a worker may take to start and to load one notebook, on top of the exercise
#: timeout (an interpreter start on a loaded 2-core machine can take several seconds).
STARTUP_SECONDS = 30
#: Default memory cap of a worker, in MiB (address space: torch alone maps about 1 GiB).
MEMORY_MB = 4096
#: Most bytes one event line of a worker may have (a runaway answer is cut, not read): twice
#: what the worker passes on of one exercise's message.
MAX_EVENT_BYTES = 2 * worker.MAX_EVENT_BYTES
#: What the report says of an answer whose results were refused by size (never decoded).
TOO_LARGE = (f"returned more than {worker.MAX_EVENT_BYTES >> 20} MiB of results: output too "
             "large to grade, 0 points (the grader reads at most that much of one answer)")
#: Most load warnings one report shows, and characters each (the rest are counted).
MAX_WARNINGS, MAX_WARNING_CHARS = 50, 500
#: Printed output (bytes, per submission) past which the report says how much there was.
OUTPUT_NOTE_BYTES = 2**20
#: Longest message of one exercise in a report, and the longest report (characters).
MAX_MESSAGE_CHARS, MAX_REPORT_CHARS = 4000, 256 * 2**10
#: Default wall-clock seconds one submission may take in all (workers, restarts, loads).
STUDENT_SECONDS = 300
#: Largest notebook the grader reads, in bytes.
MAX_NOTEBOOK_BYTES = 16 * 2**20
_NOTEBOOK_RE = re.compile(r"([0-9][0-9])_\w+\.ipynb\Z", re.ASCII)

MISSING, TIMEOUT, CRASHED = "missing", "timed out", "crashed"


@dataclass
class ExerciseGrade:
    """One exercise of one submission.

    Attributes:
        exercise_id, label: ``"ex02_1"``, ``"Exercise 2.1"``.
        status: ``"passed"``, ``"failed"``, ``"error"``, ``"not attempted"`` (as
            :class:`~pipemare_lite.book.exercises.feedback.CheckResult`), or ``"missing"`` (no
            notebook or no definition), ``"timed out"``, ``"crashed"``.
        points, max_points: awarded and possible (points is a float, rounded to 0.01, under
            partial credit).
        cases_passed, cases_total: every case runs; ``cases_passed`` counts them all.
        message: what the student is told (``check()``'s message, or why it did not run).
    """

    exercise_id: str
    label: str
    status: str
    points: int | float
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
    #: One line for the class CSV when the submission could not be graded as such (a folder
    #: with no chapter notebook); empty otherwise.
    note: str = ""

    @property
    def points(self) -> int | float:
        """Points awarded (rounded to 0.01 under partial credit)."""
        total = sum(g.points for g in self.grades)
        return total if isinstance(total, int) else round(total, 2)

    @property
    def max_points(self) -> int:
        """Points possible."""
        return sum(g.max_points for g in self.grades)

    def to_markdown(self) -> str:
        """The per-student report: a table of exercises, then each one's feedback."""
        lines = [
            f"# Grade report: {markdown_text(self.student)}",
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
            lines += [f"### {g.label} (`{g.exercise_id}`): {g.status}", ""]
            lines += [markdown_code_block(_cut(g.message, MAX_MESSAGE_CHARS)), ""]
        if self.warnings:
            lines += ["## While loading your notebooks", ""]
            lines += [f"- {markdown_text(_cut(w, MAX_WARNING_CHARS))}"
                      for w in self.warnings[:MAX_WARNINGS + 2]]
            lines += [""]
        return _cut("\n".join(lines), MAX_REPORT_CHARS)


def markdown_text(text) -> str:
    """``text`` as Markdown that shows exactly its characters, on one line: every ASCII
    punctuation character backslash-escaped (CommonMark allows it for all of them, so no
    heading, list, link, image, emphasis, table cell or HTML can start), and every control,
    format or line/paragraph-separator character (newlines, tabs, ``\\x0b``, bidi
    overrides) written as its ``\\uXXXX`` code. For every student-controlled string in a
    report (a folder name, a load warning with an exception's text)."""
    out = []
    for character in str(text):
        if character in _ASCII_PUNCTUATION:
            out.append("\\" + character)
        elif unicodedata.category(character) in _INVISIBLE:
            out.append(f"\\u{ord(character):04x}")
        else:
            out.append(character)
    return "".join(out)


_ASCII_PUNCTUATION = frozenset(string.punctuation)
#: Unicode categories shown as codes: controls, formats, separators of lines and paragraphs,
#: surrogates, private use and unassigned.
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def markdown_code_block(text: str) -> str:
    """``text`` in a fenced code block that nothing in it can close: the fence is one
    backtick longer than the longest run of backticks in ``text`` (at least three)."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def _cut(text: str, limit: int) -> str:
    """``text``, or its first ``limit`` characters and a note of how many were cut."""
    text = str(text)
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n...({len(text) - limit:,} more characters cut)"


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


def with_partial_credit(grade: ExerciseGrade) -> ExerciseGrade:
    """``grade`` with its points times the share of cases passed, rounded to 0.01, when its
    answer ran and failed some cases (``"failed"`` or ``"error"``); any other grade as it is
    (passed: full points; timed out, crashed, missing, not attempted: 0)."""
    if grade.status not in ("failed", "error") or grade.cases_total <= 0:
        return grade
    share = min(max(grade.cases_passed, 0), grade.cases_total) / grade.cases_total
    return replace(grade, points=round(grade.max_points * share, 2))


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


def _judged(exercise: Exercise, event: dict, cases: list[dict] | None) -> ExerciseGrade:
    if event.get("missing"):
        return _grade_of(
            exercise, MISSING,
            f"{exercise.function_name} is not defined by the notebook (or its cell raised; "
            "see the warnings)",
        )
    try:
        result = judge(exercise, _evaluation_from(event), cases=cases)
    except Exception as exc:  # a malformed report is no pass, and this student's only
        return _grade_of(
            exercise, CRASHED,
            f"the worker's report could not be read: {type(exc).__name__}: {str(exc)[:300]}",
        )
    grade = _grade_of(exercise, result.status, result.message, result.cases_passed)
    grade.cases_total = result.cases_total
    return grade


class _Worker:
    """One worker process (in a jail unless ``jailed`` is False), the pipe it reports on,
    and the pipe its (and its exercises') standard output and error go to: counted, never
    kept (student code prints what it likes there, hidden cases included)."""

    def __init__(self, setup: bytes, python: str, jailed: bool, disk_mb: int, locked: list,
                 cgroup: memory_cgroup.JailCgroup | None = None):
        read_fd, write_fd = os.pipe()
        out_read, out_write = os.pipe()
        self.cgroup = cgroup
        if jailed:
            command = sandbox.worker_command(write_fd, disk_mb, locked)
            if cgroup is not None:  # entered before bubblewrap starts: all of the jail is in it
                command = cgroup.command(command)
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        else:
            command = [python, "-m", "pipemare_lite.book.exercises.worker", str(write_fd)]
            env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg"}
        try:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=out_write, stderr=out_write,
                pass_fds=(write_fd,), env=env, start_new_session=True,
            )
        finally:
            os.close(write_fd)
            os.close(out_write)
        self.fd, self.out_fd, self.buffer, self.output_bytes = read_fd, out_read, b"", 0
        self.ready = False  # the worker said "ready" (it sends nothing else before)
        self.send(setup)

    def send(self, data: bytes) -> bool:
        """One frame to the worker's stdin; False when it is gone."""
        try:
            self.process.stdin.write(worker.frame(data))
            self.process.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            return False
        return True

    def next_event(self, deadline: float) -> dict | None:
        """The next event; ``{"event": "eof"}`` when the worker closed its end,
        ``{"event": "too big"}`` for a line over :data:`MAX_EVENT_BYTES`, None when
        ``deadline`` passed first. Output on the other pipe is counted and dropped."""
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_EVENT_BYTES:
                return {"event": "too big"}
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            watched = [self.fd] + ([self.out_fd] if self.out_fd is not None else [])
            ready, _, _ = select.select(watched, [], [], left)
            if not ready:
                return None
            if self.out_fd in ready:
                dropped = os.read(self.out_fd, 1 << 20)
                self.output_bytes += len(dropped)
                if not dropped:
                    os.close(self.out_fd)
                    self.out_fd = None
            if self.fd in ready:
                chunk = os.read(self.fd, 1 << 20)
                if not chunk:
                    return {"event": "eof"}
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            return {"event": "garbled"}
        if not isinstance(event, dict):
            return {"event": "garbled"}
        if event.get("event") == "ready" and not self.ready:
            # the worker's first line, before any student code: the jail's memory cap
            # becomes what it holds now plus --memory-mb (this first time only)
            self.ready = True
            if self.cgroup is not None:
                self.cgroup.tighten()
        return event

    def stop(self) -> None:
        """Kill the worker and its whole session (what it started) if still there; close
        the pipes. In a jail, bubblewrap's pid namespace takes the rest with it."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.stdin.close()
        except OSError:
            pass
        self.process.wait()
        if self.cgroup is not None:  # whatever is left in the jail's cgroup goes too
            self.cgroup.close()
        for fd in (self.fd, self.out_fd):
            if fd is not None:
                os.close(fd)

    def out_of_memory_kills(self) -> int:
        """Processes of this jail the kernel killed at its memory cap so far."""
        return self.cgroup.out_of_memory_kills() if self.cgroup is not None else 0


def duplicate_chapters(folder: Path) -> dict[int, list[str]]:
    """Chapter -> the names of its notebooks in ``folder``, for each chapter with more than
    one (``01_naive.ipynb`` and ``01_copy.ipynb``): the grader refuses to pick one."""
    names: dict[int, list[str]] = {}
    for path in sorted(folder.iterdir()):
        match = _NOTEBOOK_RE.match(path.name)
        if match:
            names.setdefault(int(match.group(1)), []).append(path.name)
    return {chapter: found for chapter, found in names.items() if len(found) > 1}


def _both(names: list[str]) -> str:
    return ", ".join(names[:-1]) + " and " + names[-1]


def read_submission(folder: Path) -> tuple[dict[int, tuple[str, bytes]], list[str]]:
    """Chapter -> ``(file name, contents)`` of the notebooks in ``folder``, and warnings.

    Refused (with a warning, never followed): a folder that is a symbolic link, a notebook
    that is a symbolic link, a hard link or not a regular file, one over
    :data:`MAX_NOTEBOOK_BYTES`, and every notebook of a chapter that has two or more
    (:func:`duplicate_chapters`: which one the student meant is theirs to say). The
    contents are read here, by the grader, so the worker never sees a path outside its jail.
    """
    found: dict[int, tuple[str, bytes]] = {}
    refused: list[str] = []
    if folder.is_symlink():
        return {}, [f"{folder.name} is a symbolic link (to another folder): refused, not graded"]
    twice = duplicate_chapters(folder)
    for chapter, names in twice.items():
        refused.append(f"{_both(names)} are both chapter {chapter:02d}'s notebook: neither is "
                       "graded (hand in one)")
    for path in sorted(folder.iterdir()):
        match = _NOTEBOOK_RE.match(path.name)
        if not match or int(match.group(1)) in found or int(match.group(1)) in twice:
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            refused.append(f"{path.name} is a symbolic link or cannot be opened: refused")
            continue
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                refused.append(f"{path.name} is not a regular file: refused")
            elif info.st_nlink > 1:
                refused.append(f"{path.name} is a hard link (shared with another file): refused")
            elif info.st_size > MAX_NOTEBOOK_BYTES:
                limit = MAX_NOTEBOOK_BYTES >> 20
                refused.append(f"{path.name} is larger than {limit} MiB: refused")
            else:
                found[int(match.group(1))] = (path.name, handle.read(MAX_NOTEBOOK_BYTES + 1))
    return found, refused


def grade_submission(
    folder: str | Path,
    exercises: Iterable[str | Exercise] | None = None,
    *,
    student: str | None = None,
    timeout: float = SECONDS_PER_EXERCISE,
    memory_mb: int = MEMORY_MB,
    python: str = sys.executable,
    sandboxed: bool = True,
    budget: float = STUDENT_SECONDS,
    disk_mb: int = sandbox.DISK_MB,
    secret: bytes | None = None,
    hidden_cases: bool = True,
    partial_credit: bool = False,
    salt: bytes | None = None,
) -> SubmissionReport:
    """Grade the notebooks in ``folder`` on ``exercises`` (default: all registered).

    ``sandboxed=False`` runs the worker outside a jail (trusted work only: the book's own
    chapters, a student's pre-grade on their own machine); ``budget`` is the wall-clock
    seconds the whole submission may take; ``secret`` draws the graded cases
    (:func:`~pipemare_lite.book.exercises.hidden.graded_cases`; default: the instructor's
    secret, :func:`~pipemare_lite.book.exercises.hidden.instructor_secret`);
    ``hidden_cases=False`` grades on ``check()``'s own cases (a student's pre-grade);
    ``partial_credit=True`` gives an answer that ran its points times the share of cases
    it passed (:func:`with_partial_credit`; default: all or nothing); ``salt`` goes into the
    random cases' seeds with the secret (default: 16 fresh random bytes, so every call draws
    new cases from the same distributions and a leaked case is worth nothing next time;
    :func:`grade_class` gives each student its run's salt and their name).

    Raises:
        FileNotFoundError: ``folder`` is not a folder.
        ValueError: ``timeout``, ``budget``, ``memory_mb`` or ``disk_mb`` is not positive.
        SandboxUnavailable: ``sandboxed`` and no jail can start here (the message says why).
    """
    for name, value in (("timeout", timeout), ("budget", budget)):
        if not value > 0:
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    for name, value in (("memory_mb", memory_mb), ("disk_mb", disk_mb)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if sandboxed:
        available, why = sandbox.sandbox_available()
        if not available:
            raise sandbox.SandboxUnavailable(why)
    given = Path(folder)
    if not given.is_dir():
        raise FileNotFoundError(f"no submission folder at {given}")
    notebooks, warnings_seen = read_submission(given)
    twice = {} if given.is_symlink() else duplicate_chapters(given)
    note = ""
    if not given.is_symlink() and not submission_notebooks(given):
        note = "no chapter notebook (NN_name.ipynb) in the folder"
        others = sorted(p.name for p in given.iterdir())[:5]
        warnings_seen.append(f"{note}; it holds: {', '.join(others) or 'nothing'}")
    chosen = _selected(exercises)
    if hidden_cases:
        secret = hidden.instructor_secret() if secret is None else secret
        salt = os.urandom(16) if salt is None else salt
        cases = {e.id: hidden.graded_cases(e, secret, salt) for e in chosen
                 if e.kind == "function"}
    else:
        cases = {e.id: e.cases() for e in chosen if e.kind == "function"}
    grades: dict[str, ExerciseGrade] = {}
    pending: dict[tuple[str, bytes], list[Exercise]] = {}
    for exercise in chosen:
        notebook = notebooks.get(exercise.chapter)
        unsendable = _unsendable(cases.get(exercise.id, []), exercise)
        if unsendable:
            grades[exercise.id] = _grade_of(exercise, CRASHED, unsendable)
        elif exercise.chapter in twice:
            grades[exercise.id] = _grade_of(
                exercise, MISSING,
                f"{_both(twice[exercise.chapter])} are both chapter {exercise.chapter:02d}'s "
                "notebook: neither is graded (hand in one)",
            )
        elif notebook is None:
            grades[exercise.id] = _grade_of(
                exercise, MISSING,
                f"no notebook for chapter {exercise.chapter:02d} (NN_name.ipynb) in the submission",
            )
        else:
            pending.setdefault(notebook, []).append(exercise)
    run = _Run(pending, grades, warnings_seen, cases, timeout, memory_mb, python, sandboxed,
               disk_mb, time.monotonic() + budget, budget)
    while pending:
        run.one_worker()
    ordered = [grades[e.id] for e in chosen]
    if partial_credit:
        ordered = [with_partial_credit(g) for g in ordered]
    return SubmissionReport(student or given.name, given, ordered, warnings_seen + run.notes(),
                            note)


def _unsendable(cases: list[dict], exercise: Exercise) -> str | None:
    """Why the exercise's cases cannot be sent to a worker (they must pickle), or None."""
    try:
        pickle.dumps(cases)
    except Exception as exc:
        return (
            f"the grader cannot send the cases of {exercise.id} to the grading process "
            f"({type(exc).__name__}: {exc}); the exercise's cases must be picklable "
            "(an instructor's problem, not the student's)"
        )
    return None


@dataclass
class _Run:
    """Workers over one submission until every exercise is graded or the budget is spent."""

    pending: dict[tuple[str, bytes], list[Exercise]]
    grades: dict[str, ExerciseGrade]
    warnings_seen: list[str]
    cases: dict[str, list[dict]]
    timeout: float
    memory_mb: int
    python: str
    sandboxed: bool
    disk_mb: int
    deadline: float
    budget: float
    output_bytes: int = 0
    warnings_dropped: int = 0

    def _setup(self, cwd: str, cgroup: bool = False) -> tuple[bytes, list[str]]:
        """The worker's first frame (the notebooks and what every exercise's process shares:
        no cases, no exercise ids) and the locked files' paths in the jail."""
        answers = {n for exercises in self.pending.values() for e in exercises
                   for n in e.engine_answers}
        # the engine files that define those functions: empty in the jail, sent here
        locked = sandbox.locked_sources(answers) if self.sandboxed else {}
        job = {
            "cwd": cwd,
            "uid": sandbox.worker_uid(),  # the jail's own: see sandbox's docstring
            "memory_bytes": self.memory_mb * 2**20,
            # with a cgroup the jail's total is capped; without, fewer processes
            "memory_cgroup": cgroup,
            "cpu_seconds": int(self.timeout + STARTUP_SECONDS) + 10,  # per exercise process
            "answers": sorted(answers),
            "needs_torch": any(e.needs_torch for v in self.pending.values() for e in v),
            "notebooks": [{"path": name, "data": data} for name, data in self.pending],
        }
        setup = pickle.dumps({"locked": locked, "job": pickle.dumps(job)})
        return setup, [entry["path"] for entry in locked.values()]

    def _header(self, name: str, exercise: Exercise) -> bytes:
        """What the process of ``exercise`` gets before its notebook loads: names and
        options, and the engine answers of every exercise not graded yet (switched off)."""
        off = {n for v in self.pending.values() for e in v for n in e.engine_answers}
        return pickle.dumps({
            "id": exercise.id, "notebook": name, "name": exercise.function_name,
            "kind": exercise.kind, "engine_answers": list(exercise.engine_answers),
            "off": sorted(off), "harness": exercise.harness, "max_lines": exercise.max_lines,
        })

    def _finish(self, exercise: Exercise, grade: ExerciseGrade) -> None:
        self.grades[exercise.id] = grade
        for key, exercises in list(self.pending.items()):
            if exercise in exercises:
                exercises.remove(exercise)
                if not exercises:
                    del self.pending[key]

    def _warn(self, event: dict) -> None:
        """The load warnings of one exercise's process: new ones kept up to
        :data:`MAX_WARNINGS` per submission (each cut to :data:`MAX_WARNING_CHARS`), the rest
        counted."""
        texts = event.get("texts") if isinstance(event.get("texts"), list) else []
        more = event.get("more", 0)
        self.warnings_dropped += more if type(more) is int and 0 <= more < 2**40 else 0
        for text in texts[:worker.MAX_WARNINGS]:
            text = str(text)[:MAX_WARNING_CHARS]
            if text in self.warnings_seen:
                continue
            if len(self.warnings_seen) >= MAX_WARNINGS:
                self.warnings_dropped += 1
            else:
                self.warnings_seen.append(text)

    def notes(self) -> list[str]:
        """Lines for the report on what was capped (none when nothing was)."""
        lines = []
        if self.warnings_dropped:
            lines.append(f"... and {self.warnings_dropped} more warnings, not shown (at most "
                         f"{MAX_WARNINGS} are)")
        if self.output_bytes > OUTPUT_NOTE_BYTES:
            lines.append(f"your code printed {self.output_bytes:,} bytes while being graded "
                         "(printed output is not kept; nothing of it is shown)")
        return lines

    def _time_out_everything(self) -> None:
        for exercises in list(self.pending.values()):
            for exercise in list(exercises):
                self._finish(exercise, _grade_of(
                    exercise, TIMEOUT,
                    f"not run: the submission used up its {self.budget:g} s of grading time",
                ))

    def one_worker(self) -> None:
        """Run one worker (one jail) over what is pending, one exercise at a time; what it
        finished leaves ``pending``. The worker forks one process per exercise (see
        :mod:`~pipemare_lite.book.exercises.worker`); the grader sends it one exercise, with
        its cases, and takes one result for that exercise's id (or its crash), then the next.

        If the worker times out, dies or sends a message too big, the exercise in progress is
        graded as such (a notebook whose load fails so: all its exercises) and removed, so
        the next worker starts after it. When the submission's budget is spent, everything
        left is graded as timed out.
        """
        if time.monotonic() >= self.deadline:
            self._time_out_everything()
            return
        order = [(key, e) for key, exercises in self.pending.items() for e in exercises]
        outcome, key, exercise, answering = "done", None, None, False
        with tempfile.TemporaryDirectory() as cwd:
            cgroup = memory_cgroup.create(self.memory_mb * 2**20) if self.sandboxed else None
            setup, locked = self._setup(cwd, cgroup is not None)
            try:
                worker_ = _Worker(setup, self.python, self.sandboxed, self.disk_mb, locked,
                                  cgroup)
            except BaseException:
                if cgroup is not None:
                    cgroup.close()
                raise
            try:
                for key, exercise in order:
                    outcome = self._one_exercise(worker_, key, exercise)
                    if outcome != "done":
                        answering = outcome.startswith("answer ")
                        outcome = outcome.removeprefix("answer ")
                        break
            finally:
                worker_.stop()
                self.output_bytes += worker_.output_bytes
            if outcome == "done" or not self.pending:
                return
            limit = self.timeout if answering else self.timeout + STARTUP_SECONDS
            status, reason = {
                "timeout": (TIMEOUT, f"took longer than {limit:g} s (an endless loop?)"),
                "budget": (TIMEOUT, f"was stopped: the submission used up its {self.budget:g} s "
                           "of grading time"),
                "too big": (CRASHED, TOO_LARGE),
            }.get(outcome, (CRASHED, f"stopped the grading process (exit code "
                            f"{worker_.process.returncode})"))
        if answering:
            self._finish(exercise, _grade_of(exercise, status,
                                             f"{exercise.function_name} {reason}"))
        else:  # loading the notebook (or starting the worker) failed: its exercises go
            for other in list(self.pending.get(key, [exercise])):
                self._finish(other, _grade_of(other, status, f"loading {key[0]} {reason}"))

    def _one_exercise(self, worker_: _Worker, key: tuple[str, bytes], exercise: Exercise) -> str:
        """Grade ``exercise`` on ``worker_``: ``"done"``, or why the worker must go
        (``"timeout"``, ``"budget"``, ``"eof"``; prefixed ``"answer "`` when the answer, not
        the load, was running)."""
        cases = self.cases.get(exercise.id, [])
        if not worker_.ready:  # no exercise before the worker has loaded (and the jail's
            # memory cap is set: :meth:`_Worker.next_event`)
            phase_end = min(time.monotonic() + self.timeout + STARTUP_SECONDS, self.deadline)
            while not worker_.ready:
                event = worker_.next_event(phase_end)
                if event is None:
                    return "budget" if time.monotonic() >= self.deadline else "timeout"
                if event.get("event") in ("eof", "too big"):
                    return event["event"]
        killed_before = worker_.out_of_memory_kills()
        if not (worker_.send(self._header(key[0], exercise)) and worker_.send(pickle.dumps(cases))):
            return "eof"
        answering = False
        phase_end = time.monotonic() + self.timeout + STARTUP_SECONDS
        while True:
            event = worker_.next_event(min(phase_end, self.deadline))
            prefix = "answer " if answering else ""
            if event is None:
                return prefix + ("budget" if time.monotonic() >= self.deadline else "timeout")
            kind = event.get("event")
            if kind in ("eof", "too big"):
                return prefix + kind
            if event.get("id") != exercise.id:
                continue  # only the exercise being graded has a voice, and only now
            if kind == "warnings":
                self._warn(event)
            elif kind == "start" and not answering:
                answering, phase_end = True, time.monotonic() + self.timeout
            elif kind == "result" and answering:
                self._finish(exercise, _judged(exercise, event, cases))
                return "done"
            elif kind == "too big":
                return self._too_big(exercise)
            elif kind == "crashed":
                code = event.get("code")
                what = f"{exercise.function_name}" if answering else f"loading {key[0]}"
                message = (f"{what} stopped its grading process (exit code "
                           f"{code if type(code) is int else '?'})")
                if worker_.out_of_memory_kills() > killed_before:
                    message += (f": the kernel killed it at the memory cap ({self.memory_mb} "
                                "MiB for all of its processes together)")
                self._finish(exercise, _grade_of(exercise, CRASHED, message))
                return "done"

    def _too_big(self, exercise: Exercise) -> str:
        self._finish(exercise, _grade_of(
            exercise, CRASHED, f"{exercise.function_name} {TOO_LARGE}"))
        return "done"


def class_submissions(folder: str | Path) -> list[Path]:
    """The submissions in ``folder``: ``folder`` itself when it holds chapter notebooks,
    else every sub-folder (one per student), those without a chapter notebook included: they
    are graded too, all missing, with a note in the CSV (a student whose notebook is misnamed
    is not dropped from the class in silence). Hidden folders (``.git``,
    ``.ipynb_checkpoints``) and ``__MACOSX`` are not students.

    Raises:
        FileNotFoundError: ``folder`` is not a folder.
        ValueError: it holds no chapter notebook, directly or one level down.
    """
    folder = Path(folder)
    if submission_notebooks(folder):
        return [folder]
    found = [p for p in sorted(folder.iterdir())
             if p.is_dir() and not p.name.startswith(".") and p.name != "__MACOSX"]
    if not any(submission_notebooks(p) for p in found):
        raise ValueError(
            f"no submissions in {folder}: expected chapter notebooks (NN_name.ipynb) in it "
            "or in one sub-folder per student"
        )
    return found


def grade_class(
    folder: str | Path, exercises: Iterable[str | Exercise] | None = None, **options
) -> list[SubmissionReport]:
    """:func:`grade_submission` for each submission of :func:`class_submissions`.

    Whatever goes wrong while grading one submission is that submission's failure only: its
    report says so and the class goes on (a missing sandbox is the instructor's problem and
    stops the run before the first student).
    """
    chosen = _selected(exercises)
    if options.get("sandboxed", True):
        available, why = sandbox.sandbox_available()
        if not available:
            raise sandbox.SandboxUnavailable(why)
    reports = []
    run_salt = options.pop("salt", None)
    run_salt = os.urandom(16) if run_salt is None else run_salt
    for path in class_submissions(folder):
        salt = run_salt + b"\0" + path.name.encode("utf-8", "surrogateescape")
        try:
            reports.append(grade_submission(path, chosen, salt=salt, **options))
        except sandbox.SandboxUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 - one student's failure is theirs only
            message = f"grading stopped: {type(exc).__name__}: {str(exc)[:300]}"
            grades = [_grade_of(e, CRASHED, message) for e in chosen]
            reports.append(SubmissionReport(path.name, path, grades, [message]))
    return reports


#: Characters a spreadsheet reads as the start of a formula.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")


def csv_cell(value) -> str | int:
    """A CSV cell a spreadsheet shows as text: a string starting like a formula, after any
    leading whitespace, gets a ``'``; control characters become spaces."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    text = re.sub(r"[\x00-\x1f\x7f]", " ", str(value))
    # spreadsheets skip leading blanks before a formula (" =1+1" is one)
    return "'" + text if text.lstrip().startswith(_FORMULA_START) else text


def report_name(student: str) -> str:
    """The report's file name for ``student`` (without ``.md``): one name, one file, never
    another student's. ASCII letters, digits, ``_`` and ``-`` stay; every other byte of the
    name (UTF-8; ``.``, ``%`` and spaces included) is written ``%XX`` (so ``a b`` ->
    ``a%20b``, ``a_b`` -> ``a_b``, ``a%20b`` -> ``a%2520b``), which makes the mapping
    one-to-one and leaves nothing a file system or a shell reads specially. A name whose
    escaped form is longer than 200 characters is cut there and ends with ``~`` and the
    first 16 hex digits of its SHA-256 (``~`` appears nowhere else)."""
    raw = student.encode("utf-8", "surrogateescape")
    name = "".join(chr(b) if _NAME_SAFE.fullmatch(chr(b)) else f"%{b:02X}" for b in raw)
    if len(name) > 200:
        name = name[:200] + "~" + hashlib.sha256(raw).hexdigest()[:16]
    return name


_NAME_SAFE = re.compile(r"[A-Za-z0-9_-]", re.ASCII)


def report_names(reports: list[SubmissionReport], ignore_case: bool = False) -> list[str]:
    """:func:`report_name` of each report, in order; ``ignore_case``: the reports go to a
    file system that ignores case (macOS's, by default).

    Raises:
        ValueError: one student appears twice, or (``ignore_case``) two students' names give
            names that differ only in case (one report of the two would be lost).
    """
    names = [report_name(r.student) for r in reports]
    seen: dict[str, str] = {}
    for report, name in zip(reports, names):
        key = name.lower() if ignore_case else name
        other = seen.setdefault(key, report.student)
        if other != report.student or names.count(name) > 1:
            raise ValueError(
                f"students {other!r} and {report.student!r} would get the same report file "
                f"({name}.md{', case ignored' if ignore_case else ''}): rename one of the two "
                "folders")
    return names


def _ignores_case(folder: Path) -> bool:
    """True when the file system of ``folder`` takes ``A`` and ``a`` for the same name."""
    probe = tempfile.NamedTemporaryFile(dir=folder, prefix=".case-probe-A")
    with probe:
        name = Path(probe.name).name
        return (folder / name.replace("-A", "-a", 1)).exists()


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file next to ``path``, then rename it over ``path``."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _csv_text(rows: list[list]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    for row in rows:
        writer.writerow([csv_cell(cell) for cell in row])
    return buffer.getvalue()


def write_reports(reports: list[SubmissionReport], out_dir: str | Path) -> dict[str, Path]:
    """Write ``grades.csv`` (one row per student: points per exercise, total, maximum and a
    note, empty unless the folder held no chapter notebook),
    ``grades_detail.csv`` (one row per student and exercise) and ``<student>.md``.

    Called once every worker has ended; each file is written to a temporary name and renamed
    (atomic). Cells that a spreadsheet would read as a formula are escaped
    (:func:`csv_cell`); each student's report name is their name escaped, one-to-one
    (:func:`report_name`: ``a b`` -> ``a%20b.md``, ``a_b`` -> ``a_b.md``). Returns the paths
    written, by name (``"grades.csv"``, ``"grades_detail.csv"`` and one per student).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ids = [g.exercise_id for g in reports[0].grades] if reports else []
    written: dict[str, Path] = {}
    names = report_names(reports, ignore_case=_ignores_case(out_dir))
    for report, name in zip(reports, names):
        path = out_dir / f"{name}.md"
        _write_atomically(path, report.to_markdown() + "\n")
        written[report.student] = path
    rows = [["student", *ids, "total", "max_points", "note"]]
    for report in reports:
        points = {g.exercise_id: g.points for g in report.grades}
        rows.append([report.student, *(points.get(i, 0) for i in ids), report.points,
                     report.max_points, report.note])
    detail = [["student", "exercise", "status", "points", "max_points", "cases_passed",
               "cases_total"]]
    for report in reports:
        for g in report.grades:
            detail.append([report.student, g.exercise_id, g.status, g.points,
                           g.max_points, g.cases_passed, g.cases_total])
    written["grades_detail.csv"] = out_dir / "grades_detail.csv"
    _write_atomically(written["grades_detail.csv"], _csv_text(detail))
    written["grades.csv"] = out_dir / "grades.csv"
    _write_atomically(written["grades.csv"], _csv_text(rows))
    return written
