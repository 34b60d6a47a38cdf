"""Issue 46: one voice per exercise, read-only notebooks, leak-proof cases, capped floods.

Each test is one attack of the issue, handed in as a hostile student would, and says what it
did before (main at 22858bf, quoted from the issue or re-run there) and asserts what it does
now: the attacker gains no point, the grader does not crash, and the honest answers in the
same submission keep their points. The jail is bubblewrap; without it these tests skip
loudly (``tests/sandbox_required.py``).
"""

from __future__ import annotations

import os
import re

from pipemare_lite.book.exercises.grading import (
    MAX_REPORT_CHARS,
    MAX_WARNINGS,
    grade_submission,
)
from tests.notebook_files import write_notebook
from tests.sandbox_required import _sandbox_or_fail, requires_sandbox  # noqa: F401

pytestmark = requires_sandbox

HONEST_01 = (
    "def naive_order(P):\n    return [[f'{s}F0', f'{s}B0'] for s in range(P)]\n",
    "def naive_utilization(stage_costs):\n    total = sum(stage_costs)\n"
    "    return [c / total for c in stage_costs]\n",
)
STUB_02 = "def idle_fraction(P, M):\n    raise NotImplementedError\n"

#: Load-time code of chapter 01's notebook: looks for the grader's job (anything holding
#: cases or tasks) up the call stack and in every object the garbage collector knows, and
#: for any writable file; writes forged ``result`` events for chapter 02's exercise (with
#: the right answers for every case it found) to each file object and each file descriptor;
#: says what it found in a warning (which the report shows).
FORGER = '''
import gc, io, json, os, sys, warnings

def _forge():
    seen, keys, files, cases = set(), [], [], []
    frame = sys._getframe()
    places = []
    while frame is not None:
        places += [frame.f_locals, frame.f_globals]
        frame = frame.f_back
    for obj in places + gc.get_objects():
        if isinstance(obj, dict) and id(obj) not in seen:
            seen.add(id(obj))
            if not all(isinstance(k, str) for k in list(obj)[:50]):
                continue
            for key in ("cases", "tasks", "notebooks", "job"):
                if isinstance(obj.get(key), list) and obj[key]:
                    keys.append(key)
            if obj.get("id") == "ex02_2" and isinstance(obj.get("cases"), list):
                cases = obj["cases"]  # the grader's hidden cases of chapter 02's exercise
        elif isinstance(obj, io.IOBase):
            files.append(obj)
    # the right answers to those cases (the engine's formula, written out)
    outcomes = [{"value": (c["P"] - 1) / (c["M"] + c["P"] - 1)} for c in cases]
    forged = {"event": "result", "id": "ex02_2", "status": "ran", "detail": "",
              "value": None, "outcomes": outcomes or [{"value": 0.5}] * 10}
    line = (json.dumps(forged) + "\\n").encode()
    wrote = 0
    for f in files:
        try:
            f.write(line if "b" in getattr(f, "mode", "b") else line.decode())
            f.flush()
            wrote += 1
        except Exception:
            pass
    for fd in range(3, 256):
        try:
            os.write(fd, line)
            wrote += 1
        except OSError:
            pass
    try:  # chapter 02's engine answer, from chapter 01's process (ex02_2 is still pending)
        from pipemare_lite.analysis import formulas
        engine = f"on: {formulas.idle_fraction_gpipe(4, 8)}"
    except BaseException as exc:
        engine = f"off: {type(exc).__name__}"
    warnings.warn(f"FORGER found {sorted(set(keys))} and {len(cases)} cases; wrote {wrote} "
                  f"times; engine {engine}")
    return wrote

_forged = _forge()
'''


def test_a_forged_result_for_another_exercise_gains_nothing(tmp_path):
    """Before (issue 46, attack 1): chapter 01's notebook, at load time, walked
    ``sys._getframe()`` up to the worker's job (every notebook's tasks and hidden cases) and to
    the report's file object, and wrote ``result`` events for chapters 02, 04, 08 and 12: 7 of
    7 points on stub notebooks (this notebook, re-run at 22858bf: it found the job's
    ``cases``, ``notebooks`` and ``tasks`` and ex02_2's 10 cases, chapter 02's engine answer
    was on in chapter 01's process, and the stub scored 1/1).
    Now the process that loads chapter 01 holds no job, no other task and no case, its only
    voice is a pipe to the worker (which runs no student code and passes on one result under
    the id it is grading), and the grader takes one result, for the exercise it is grading,
    once."""
    folder = tmp_path / "forger"
    write_notebook(folder / "01_naive.ipynb", HONEST_01[0] + FORGER, HONEST_01[1])
    write_notebook(folder / "02_gpipe.ipynb", STUB_02)
    report = grade_submission(folder, ["ex01_1", "ex01_2", "ex02_2"])
    points = {g.exercise_id: g.points for g in report.grades}
    assert points == {"ex01_1": 1, "ex01_2": 1, "ex02_2": 0}, report.to_markdown()
    found = [w for w in report.warnings if "FORGER found" in w]
    assert found, report.warnings
    # nothing that holds cases, tasks, notebooks or a job was within its reach
    assert all("found [] and 0 cases" in w for w in found), found
    # every pending exercise's engine answers are off in every process that runs student code
    assert all("engine off: EngineAnswerSwitchedOff" in w for w in found), found
    assert report.grades[2].status == "not attempted", report.grades[2].message


REWRITER = '''
import glob, os, shutil, subprocess, warnings

LOOKUP = ('{"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], '
          '"execution_count": null, "source": "def idle_fraction(P, M):\\\\n    '
          'return (P - 1) / (M + P - 1)\\\\n"}], "metadata": {}, "nbformat": 4, '
          '"nbformat_minor": 5}')

def _rewrite():
    done, found = [], []
    places = ("/sandbox/**/*.ipynb", "/tmp/**/*.ipynb", "**/*.ipynb")
    notebooks = [p for place in places for p in glob.glob(place, recursive=True)]
    for folder in sorted({os.path.dirname(os.path.abspath(p)) for p in notebooks}):
        found.append(folder)
        path = os.path.join(folder, "02_gpipe.ipynb")  # there already, or planted early
        for how in ("write", "chmod", "replace", "rename"):
            try:
                if how == "write":
                    with open(path, "w") as f:
                        f.write(LOOKUP)
                elif how == "chmod":
                    os.chmod(folder, 0o777)
                elif how == "replace":
                    with open(os.path.join(folder, "x.ipynb"), "w") as f:
                        f.write(LOOKUP)
                    os.replace(os.path.join(folder, "x.ipynb"), path)
                else:
                    os.rename(notebooks[0], path)
                done.append((path, how))
            except OSError:
                pass
    # and a process that keeps trying while the next notebook loads
    subprocess.Popen(["/bin/sh", "-c", "while true; do for f in $(find /sandbox -name '02_*' "
                      "2>/dev/null); do cp /sandbox/tmp/l $f; done; done"],
                     start_new_session=True)
    with open("/sandbox/tmp/l", "w") as f:
        f.write(LOOKUP)
    warnings.warn(f"REWRITER did {done} of {len(found)}")
    return done

_done = _rewrite()  # an assignment: the loader runs it with the answer's cell
'''


def test_a_notebook_that_rewrites_the_next_gains_nothing(tmp_path):
    """Before (issue 46, attack 2): the notebooks were chowned to the student's uid and kept
    between processes, so chapter 01's process replaced chapter 02's notebook with a lookup
    table before chapter 02 loaded: 4 of 4 (this notebook, re-run at 22858bf: all four ways
    worked and the stub scored 1/1). Now each notebook is copied afresh, read-only to
    the student's uid (the worker's folder and file), before each exercise's load, after
    every process the last exercise left is killed."""
    folder = tmp_path / "rewriter"
    write_notebook(folder / "01_naive.ipynb", HONEST_01[0] + REWRITER, HONEST_01[1])
    write_notebook(folder / "02_gpipe.ipynb", STUB_02)
    report = grade_submission(folder, ["ex01_1", "ex01_2", "ex02_2"])
    points = {g.exercise_id: g.points for g in report.grades}
    assert points == {"ex01_1": 1, "ex01_2": 1, "ex02_2": 0}, report.to_markdown()
    said = [w for w in report.warnings if "REWRITER did" in w]
    assert said, report.warnings
    if os.geteuid() == 0:  # a jail started by root: the shelf is root's, read-only to it
        # it found the worker's shelf (its own notebook's folder) and could change nothing
        assert all("did [] of 1" in w for w in said), said
    assert report.grades[2].status == "not attempted", report.grades[2].message


CASE_LEAKER = '''
import gc, warnings

def _leak():
    found = []
    for obj in gc.get_objects():  # a dict of ints is not tracked: the lists that hold them are
        for item in obj if isinstance(obj, list) else [obj]:
            if isinstance(item, dict) and set(item) == {"P", "M"}:
                found.append(repr(item))
    for text in found[:40]:
        warnings.warn("LEAK " + text)
    warnings.warn(f"LEAKER saw {len(found)}")
    return found

_found = _leak()
'''


def test_load_time_warnings_carry_no_case(tmp_path):
    """Before (issue 46, attack 3): a notebook's load-time warnings carried every case of
    every task into the report (the process held the job; this notebook, re-run at 22858bf:
    it saw all 10 of ex02_2's graded cases at load time). Now an exercise's process gets its
    cases only after its notebook has loaded and its warnings are sent, so none is there to
    leak; and the report shows no graded case (this answer passes none, so the feedback's one
    failing input is the only case in it)."""
    folder = tmp_path / "leaker"
    write_notebook(folder / "02_gpipe.ipynb",
                   "def idle_fraction(P, M):\n    return -1.0\n" + CASE_LEAKER)
    report = grade_submission(folder, ["ex02_2"])
    text = report.to_markdown()
    assert "LEAKER saw" in text, text
    assert not re.search(r"'P': \d+, 'M': \d+", "\n".join(report.warnings)), report.warnings
    shown = re.findall(r"P=\d+, M=\d+", report.grades[0].message)
    assert len(set(shown)) <= 1, report.grades[0].message


FLOOD = '''
import sys, warnings

def _flood():
    for i in range(8000):
        warnings.warn(f"FLOOD {i} " + "x" * 500)
    for i in range(20000):
        print("PRINTED " + "y" * 500)
        sys.stderr.write("E" * 500 + "\\n")
    return i

_flooded = _flood()
'''


def test_a_warnings_and_output_flood_gets_a_line_not_a_crash(tmp_path):
    """Before (issue 46, attack 4): 8,000 warnings x 50 x 500 characters made a 201 MB report
    and a grader of 1.46 GB. Now an exercise's process sends at most 50 warnings of 500
    characters (the rest counted), the report keeps at most ``MAX_WARNINGS`` and says how
    many more there were, printed output is counted and dropped (one line says how much),
    and a report is cut at ``MAX_REPORT_CHARS``; the honest answers keep their points."""
    folder = tmp_path / "flooder"
    write_notebook(folder / "01_naive.ipynb", HONEST_01[0] + FLOOD, HONEST_01[1])
    report = grade_submission(folder, ["ex01_1", "ex01_2"])
    assert report.points == 2, report.to_markdown()[:2000]
    text = report.to_markdown()
    assert len(text) <= MAX_REPORT_CHARS + 100
    assert len(report.warnings) <= MAX_WARNINGS + 2
    assert any(re.search(r"and \d+ more warnings", w) for w in report.warnings), report.warnings
    assert any("printed" in w and "bytes" in w for w in report.warnings), report.warnings
    assert "PRINTED" not in text  # printed output is never shown (it could hold cases)


NOISE = '''
import os

def _noise():
    # its own pipe to the worker: garbage, a line nested past any parser, a forged "loaded"
    # and two results, all before the notebook has loaded
    deep = b"[" * 200000 + b"]" * 200000 + b"\\n"
    lines = [b"not json\\n", deep, b'{"event": "loaded"}\\n',
             b'{"event": "result", "status": "ran", "outcomes": []}\\n',
             b'{"event": "result", "id": "ex01_1", "missing": true}\\n']
    sent = 0
    for fd in range(3, 64):
        try:
            for line in lines:
                os.write(fd, line)
            sent += 1
        except OSError:
            pass
    return sent

_sent = _noise()
'''


def test_noise_on_the_exercise_pipe_costs_its_sender_only(tmp_path):
    """An exercise's process writes garbage, a line nested 200,000 deep (json raises
    RecursionError, not ValueError), a forged ``loaded`` and two forged results on every file
    descriptor it has, at load time. Its own exercise gets at most what it returned; the
    worker and the grader go on, and the next exercise of the notebook is graded as usual."""
    folder = tmp_path / "noise"
    write_notebook(folder / "01_naive.ipynb", HONEST_01[0] + NOISE, HONEST_01[1])
    report = grade_submission(folder, ["ex01_1", "ex01_2"])
    grades = {g.exercise_id: g for g in report.grades}
    assert grades["ex01_2"].points == 1, grades["ex01_2"].message
    assert grades["ex01_1"].points == 0 and grades["ex01_1"].status != "passed"
