"""Issue 31: grading that holds against a hostile class.

Each test is one attack of the issue, as an adversarial student would hand it in, graded
next to an honest classmate. Each docstring says what the attack did to the grader before
issue 31 (commit 74f6b13). Where it says "re-run", these tests' notebooks were graded by
that commit's ``grade_class``/``grade_submission``/``write_reports`` (a copy of its package on
PYTHONPATH) and the result is quoted; the others quote the reproduction in issue 31 (the
``.pth`` one would have written into the shared venv). Each test asserts what the attack
does now: the attacker scores 0 (or the damage stays with the attacker), the honest
student's score is unchanged, and nothing is left behind (no process, no file outside the
reports).

The jail is bubblewrap (:mod:`pipemare_lite.book.exercises.sandbox`); without it these tests
skip loudly (``tests/sandbox_required.py``).
"""

from __future__ import annotations

import csv
import importlib.util
import os
import py_compile
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import pipemare_lite
from pipemare_lite.book.exercises import EXERCISES, get_exercise, run_checks
from pipemare_lite.book.exercises.grading import (
    class_submissions,
    grade_class,
    grade_submission,
    write_reports,
)
from pipemare_lite.book.exercises.hidden import (
    drawn_at_random,
    graded_cases,
    instructor_secret,
)
from pipemare_lite.book.exercises.plain import ForeignValue, from_plain
from tests.notebook_files import write_notebook
from tests.sandbox_required import _sandbox_or_fail, requires_sandbox  # noqa: F401

pytestmark = requires_sandbox
ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(pipemare_lite.__file__).resolve().parent
SITE_PACKAGES = next(Path(p) for p in sys.path if p.endswith("site-packages"))

HONEST_01 = (
    "def naive_utilization(stage_costs):\n"
    "    return [cost / sum(stage_costs) for cost in stage_costs]\n",
    "def naive_order(P):\n    return [[f'{s}F0', f'{s}B0'] for s in range(P)]\n",
)
HONEST_02_2 = (
    "def idle_fraction(P, M):\n    return (P - 1) / (M + P - 1)\n"
)




def _honest(folder: Path) -> Path:
    write_notebook(folder / "01_naive.ipynb", *HONEST_01)
    return folder


def _points(reports, student: str) -> int:
    return next(r.points for r in reports if r.student == student)


def _processes_with(token: str) -> list[int]:
    """Pids whose command line or environment mentions ``token`` (a leftover of a test)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            text = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in text:
            found.append(int(entry))
    return found


def test_a_dataclass_naming_a_module_it_wrote_into_the_package_runs_nothing(tmp_path):
    """Before: the answer wrote ``pipemare_lite/evil_31.py`` into the (writable) package and
    returned a dataclass whose ``__module__`` named it; the grader ``import_module``-d it to
    rebuild the value, so its code ran in the grader (an honest student graded later scored
    0/4). Now the package is read-only in the jail and decoding never imports."""
    marker = tmp_path / "ran_in_grader"
    class_dir = tmp_path / "class"
    write_notebook(
        class_dir / "a_mallory" / "01_naive.ipynb",
        f"""
        import dataclasses, pathlib, sys, types, pipemare_lite
        def naive_utilization(P):
            target = pathlib.Path(pipemare_lite.__file__).parent / "evil_31.py"
            try:
                target.write_text("import pathlib; pathlib.Path({str(marker)!r}).write_text('x')")
            except OSError:
                pass
            sys.modules.setdefault("pipemare_lite.evil_31", types.ModuleType("evil"))
            class Fake:
                __module__ = "pipemare_lite.evil_31"
                x: int = 1
            return dataclasses.dataclass(Fake)()
        """,
    )
    _honest(class_dir / "b_honest")
    try:
        reports = grade_class(class_dir, ["ex01_1", "ex01_2"])
        assert not (PACKAGE / "evil_31.py").exists()
        assert not marker.exists()
        assert _points(reports, "a_mallory") == 0 and _points(reports, "b_honest") == 2
        assert "Fake" in reports[0].grades[1].message  # ex01_2, naive_utilization
    finally:
        (PACKAGE / "evil_31.py").unlink(missing_ok=True)


def test_a_bad_module_name_costs_the_attacker_only(tmp_path):
    """Before: a dataclass whose ``__module__`` named a module that does not exist made
    ``from_plain`` raise ModuleNotFoundError in the grader: the whole class run died, no
    report was written (re-run: ``ModuleNotFoundError: No module named 'pipemare_lite.no'``
    out of ``grade_class``). Now the attacker's exercise fails and the class is graded."""
    class_dir = tmp_path / "class"
    write_notebook(
        class_dir / "a_mallory" / "01_naive.ipynb",
        """
        import dataclasses, sys, types
        def naive_utilization(P):
            sys.modules.setdefault("pipemare_lite.no.such.module", types.ModuleType("x"))
            class Fake:
                __module__ = "pipemare_lite.no.such.module"
                x: int = 1
            return dataclasses.dataclass(Fake)()
        """,
    )
    _honest(class_dir / "b_honest")
    reports = grade_class(class_dir, ["ex01_1", "ex01_2"])
    written = write_reports(reports, tmp_path / "reports")
    assert _points(reports, "a_mallory") == 0 and _points(reports, "b_honest") == 2
    assert written["grades.csv"].exists()
    # and the decoder itself refuses to import anything it is sent
    assert isinstance(from_plain({"__foreign__": "Fake", "text": "x"}), ForeignValue)
    with pytest.raises(ValueError):
        from_plain({"__dataclass__": "pipemare_lite.evil:Fake", "fields": {}})


def test_a_pth_file_cannot_be_planted_in_the_virtual_environment(tmp_path):
    """Before: the answer wrote ``zz_evil.pth`` into the venv's site-packages; it ran in every
    later Python start (the grader's next worker, the instructor's shell). Now the venv is
    read-only in the jail."""
    planted = SITE_PACKAGES / "zz_evil_31.pth"
    folder = write_notebook(
        tmp_path / "mallory" / "01_naive.ipynb",
        f"""
        import pathlib
        def naive_utilization(P):
            try:
                pathlib.Path({str(planted)!r}).write_text("import os")
                return "written"
            except OSError as exc:
                return type(exc).__name__
        """,
    ).parent
    try:
        (grade,) = grade_submission(folder, ["ex01_2"]).grades
        assert not planted.exists()
        assert grade.points == 0 and "OSError" in grade.message, grade.message
    finally:
        planted.unlink(missing_ok=True)


def test_a_submissions_conftest_never_loads_under_make_grade(tmp_path):
    """Before: ``make grade STUDENT=submissions/mallory`` (the folder inside the repository,
    as the docs suggested) ran ``pytest tests/grading --student submissions/mallory``;
    pytest did not know ``--student`` yet, took the folder for a test path and imported its
    ``conftest.py``, which replaced the judge: 30/30 with stub notebooks. Now ``make grade``
    loads the option early (``-p pipemare_lite.book.exercises.pytest_grading``) and the
    suite refuses to grade if a conftest of the submission got loaded anyway."""
    folder = ROOT / "submissions" / f".attack-31-{os.getpid()}"
    marker = tmp_path / "conftest_ran"
    try:
        write_notebook(folder / "01_naive.ipynb",
                  "def naive_utilization(P):\n    raise NotImplementedError\n")
        (folder / "conftest.py").write_text(
            f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
            "import pytest\n@pytest.hookimpl(tryfirst=True)\n"
            "def pytest_runtest_call(item):\n    item.runtest = lambda: None\n"
        )
        make_grade = [  # the Makefile's command
            sys.executable, "-m", "pytest", "-c", "pyproject.toml", "--rootdir", ".",
            "-p", "pipemare_lite.book.exercises.pytest_grading", "tests/grading",
            "-p", "no:cacheprovider", f"--student={folder}", "-m", "ex01_2", "-q",
        ]
        done = subprocess.run(make_grade, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert not marker.exists(), done.stdout
        assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout[-2000:]
        # the old command line (two tokens, no early plugin) loads the conftest: the suite
        # then refuses to grade instead of trusting the result
        old = [sys.executable, "-m", "pytest", "tests/grading", "-p", "no:cacheprovider",
               "--student", str(folder.relative_to(ROOT)), "-m", "ex01_2", "-q"]
        done = subprocess.run(old, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode != 0 and "passed" not in done.stdout.splitlines()[-1]
    finally:
        for path in sorted(folder.glob("**/*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        folder.rmdir() if folder.exists() else None
        parent = ROOT / "submissions"
        if parent.exists() and not any(parent.iterdir()):
            parent.rmdir()


def test_notebooks_that_are_symlinks_are_refused(tmp_path):
    """Before: ``02_gpipe.ipynb`` a symbolic link to the instructor's
    ``chapters/02_gpipe_and_the_bubble.ipynb`` (or to a classmate's notebook) scored full
    marks; one to ``/proc/self/environ`` scored 0 but the report's warnings echoed the
    grader's environment, secrets included (re-run: the link to chapter 02 scored 4/4). Now
    links are refused before anything is read."""
    os.environ["PIPEMARE_TEST_TOKEN_31"] = "s3cr3t-31"
    class_dir = tmp_path / "class"
    mallory = class_dir / "mallory"
    mallory.mkdir(parents=True)
    chapter = next((ROOT / "chapters").glob("02_*.ipynb"))
    (mallory / "02_gpipe.ipynb").symlink_to(chapter)
    (mallory / "01_naive.ipynb").symlink_to("/proc/self/environ")
    honest = _honest(class_dir / "honest")
    (mallory / "03_1f1b.ipynb").symlink_to(honest / "01_naive.ipynb")
    reports = grade_class(class_dir, ["ex01_2", "ex02_1", "ex02_2", "ex03_1"])
    written = write_reports(reports, tmp_path / "reports")
    report = next(r for r in reports if r.student == "mallory")
    assert report.points == 0
    assert sum("symbolic link" in w for w in report.warnings) == 3, report.warnings
    for path in written.values():
        assert "s3cr3t-31" not in path.read_text()
    del os.environ["PIPEMARE_TEST_TOKEN_31"]


def test_a_student_folder_that_links_to_another_is_refused(tmp_path):
    """Before: ``class/mallory`` a symbolic link to ``class/alice`` was graded as Mallory's
    work, under Alice's name (re-run: ``[('alice', 1), ('eve', 0), ('alice', 1)]``: two rows
    for Alice). Now such a folder is refused (0, with why)."""
    class_dir = tmp_path / "class"
    _honest(class_dir / "alice")
    (class_dir / "mallory").symlink_to(class_dir / "alice")
    reports = grade_class(class_dir, ["ex01_1", "ex01_2"])
    assert _points(reports, "alice") == 2 and _points(reports, "mallory") == 0
    mallory = next(r for r in reports if r.student == "mallory")
    assert any("symbolic link" in w for w in mallory.warnings)


def test_a_saboteur_cannot_touch_a_classmateswrite_notebook(tmp_path):
    """Before: the answer, running with the submission folder as working directory, wrote
    over ``../zed/01_naive.ipynb`` (graded later): Zed's work was destroyed, 0 points
    (re-run: ``[('a_sab', 0), ('zed', 0)]``). Now the jail holds only the saboteur's own
    copies."""
    class_dir = tmp_path / "class"
    zed = _honest(class_dir / "zed")
    before = (zed / "01_naive.ipynb").read_bytes()
    write_notebook(
        class_dir / "a_saboteur" / "01_naive.ipynb",
        f"""
        import pathlib
        def naive_utilization(P):
            hit = 0
            for target in (pathlib.Path("../zed/01_naive.ipynb"),
                           pathlib.Path({str(zed / "01_naive.ipynb")!r})):
                try:
                    target.write_text("{{}}")
                    hit += 1
                except OSError:
                    pass
            return hit
        """,
    )
    reports = grade_class(class_dir, ["ex01_1", "ex01_2"])
    assert (zed / "01_naive.ipynb").read_bytes() == before
    assert _points(reports, "zed") == 2 and _points(reports, "a_saboteur") == 0
    assert "returned 0" in reports[0].grades[1].message  # ex01_2, naive_utilization


def test_a_daemon_dies_with_its_worker_and_grades_csv_is_final(tmp_path):
    """Before: a double-forked daemon, started by an answer, slept and rewrote
    ``reports/grades.csv`` 92 s after grading ended, giving itself full marks. Now the
    process tree dies with the worker (bubblewrap's pid namespace) and the reports are out
    of its reach; the CSV is written (atomically) after every worker has ended."""
    token = f"daemon-31-{os.getpid()}"
    out = tmp_path / "reports"
    class_dir = tmp_path / "class"
    write_notebook(
        class_dir / "mallory" / "01_naive.ipynb",
        f"""
        import os, subprocess, sys
        def naive_utilization(stage_costs):
            if len(stage_costs) == 4:
                code = ("import time, pathlib; time.sleep(4); "
                        "pathlib.Path({str(out / 'grades.csv')!r}).write_text('mallory,9,9,99,2')")
                subprocess.Popen([sys.executable, "-c", code, {token!r}], start_new_session=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            return [c / sum(stage_costs) for c in stage_costs]
        """,
    )
    _honest(class_dir / "zed")
    reports = grade_class(class_dir, ["ex01_1", "ex01_2"])
    write_reports(reports, out)
    text = (out / "grades.csv").read_text()
    assert _processes_with(token) == []
    time.sleep(6)
    assert (out / "grades.csv").read_text() == text
    rows = {r["student"]: r for r in csv.DictReader(text.splitlines())}
    assert rows["mallory"]["total"] == "1" and rows["zed"]["total"] == "2"
    assert sorted(p.name for p in out.iterdir()) == [
        "grades.csv", "grades_detail.csv", "mallory.md", "zed.md"]


def _lookup_table_answer(exercise_id: str) -> str:
    """An answer that knows check()'s cases: a literal table computed with the engine (what
    a student can do at home with the installed package), 0 elsewhere."""
    exercise = get_exercise(exercise_id)
    table = {tuple(c.values()): exercise.reference(*c.values()) for c in exercise.cases()}
    arguments = ", ".join(exercise.cases()[0])
    return (f"TABLE = {table!r}\n\ndef {exercise.function_name}({arguments}):\n"
            f"    return TABLE.get(({arguments},), 0)\n")


def test_a_lookup_table_of_checks_cases_fails_the_graders_cases(tmp_path):
    """Before: the graded cases were ``check()``'s, so a table of the engine's answers to
    them (computed with the installed package) scored 32/34 points (re-run on ex02_2: 1/1).
    Now the grader redraws
    the random cases from the instructor's secret: the table passes ``check()`` and fails
    grading."""
    ids = ["ex02_2", "ex03_2", "ex04_2"]
    folder = tmp_path / "mallory"
    for exercise_id in ids:
        chapter = get_exercise(exercise_id).chapter
        write_notebook(folder / f"{chapter:02d}_table.ipynb", _lookup_table_answer(exercise_id))
    namespace: dict = {}
    exec(_lookup_table_answer("ex02_2"), namespace)
    assert run_checks("ex02_2", namespace["idle_fraction"]).passed  # check() is fooled
    exercise = get_exercise("ex02_2")
    assert graded_cases(exercise, instructor_secret()) != exercise.cases()
    report = grade_submission(folder, ids)
    assert report.points == 0, [g.message for g in report.grades]
    # an honest answer scores the same on the grader's cases as on check()'s
    honest = write_notebook(tmp_path / "honest" / "02_gpipe.ipynb", HONEST_02_2).parent
    assert grade_submission(honest, ["ex02_2"]).points == 1


def test_every_function_exercise_draws_cases_the_grader_redraws():
    """Before: ex00_1, ex04_3 and ex05_1 drew nothing at random, so the grader graded
    ``check()``'s own cases there (``drawn_at_random`` was False for those three). Now every
    exercise has drawn cases, and the grader's differ from ``check()``'s."""
    secret = instructor_secret()
    for exercise in EXERCISES.values():
        assert exercise.kind == "function" and drawn_at_random(exercise), exercise.id
        graded = graded_cases(exercise, secret)
        assert len(graded) == len(exercise.cases())
        shown = [exercise.describe_case(c) for c in graded]
        assert shown != [exercise.describe_case(c) for c in exercise.cases()], exercise.id


def _schedule_key(schedule) -> tuple:
    return (schedule.name, schedule.num_ranks, schedule.num_microbatches,
            getattr(schedule, "chunks", 1), getattr(schedule, "num_minibatches", 1))


def _lookup_table_04_3() -> str:
    """ex04_3 with a table: its cases are schedules, so the table is keyed by their sizes."""
    exercise = get_exercise("ex04_3")
    table = {_schedule_key(c["schedule"]): exercise.reference(*c.values())
             for c in exercise.cases()}
    return (f"TABLE = {table!r}\n\ndef count_p2p_messages(schedule):\n"
            "    key = (schedule.name, schedule.num_ranks, schedule.num_microbatches,\n"
            "           getattr(schedule, 'chunks', 1), getattr(schedule, 'num_minibatches', 1))\n"
            "    return TABLE.get(key, 0)\n")


def _lookup_table_05_1() -> str:
    """ex05_1 with a table: the weights each of check()'s backwards must read, keyed by the
    stage's shapes and first weight (the hooks hand the backward the tabled tensor, not
    ``weights``)."""
    from pipemare_lite.book.exercises.harness import hook_stage

    table = {}
    for case in get_exercise("ex05_1").cases():
        module, _x, _g, delta = hook_stage(case["model"], case["seed"])
        params = [p.detach().clone() for p in module.parameters()]
        key = (tuple(tuple(p.shape) for p in params), round(params[0].flatten()[0].item(), 9),
               case["backward_reads"])
        if case["backward_reads"] == "live":
            params = [p + d for p, d in zip(params, delta)]
        table[key] = [p.tolist() for p in params]
    return textwrap.dedent(f"""
        import torch
        TABLE = {table!r}
        def version_hooks(params, weights):
            reads = "live" if weights[0].data_ptr() == params[0].data_ptr() else "stash"
            shapes = tuple(tuple(p.shape) for p in params)
            tabled = TABLE[(shapes, round(params[0].flatten()[0].item(), 9), reads)]
            def pack(t):
                for i, p in enumerate(params):
                    if t is p or getattr(t, "_base", None) is p:
                        return (i, t.size(), t.stride(), t.storage_offset())
                return t
            def unpack(saved):
                if not isinstance(saved, tuple):
                    return saved
                i, size, stride, offset = saved
                return torch.tensor(tabled[i], dtype=torch.float64).as_strided(
                    size, stride, offset)
            return pack, unpack
        """)


def test_a_lookup_table_fails_the_exercises_that_drew_nothing_before(tmp_path):
    """Before: ex00_1, ex04_3 and ex05_1 had fixed cases only, and the grader graded those:
    a table of the engine's answers to them passed ``check()`` and earned their 4 points
    (issue 31's closing note; at 9cbc2d3 ``drawn_at_random`` was False for all three, so
    ``graded_cases`` returned ``check()``'s cases). Now their drawn cases are redrawn from
    the instructor's secret: each table passes ``check()`` and scores 0 in grading, while
    honest answers keep their points."""
    answers = {"ex00_1": _lookup_table_answer("ex00_1"), "ex04_3": _lookup_table_04_3(),
               "ex05_1": _lookup_table_05_1()}
    for exercise_id, source in answers.items():
        namespace: dict = {}
        exec(source, namespace)
        answer = namespace[get_exercise(exercise_id).function_name]
        assert run_checks(exercise_id, answer).passed, exercise_id  # check() is fooled
    folder = tmp_path / "mallory"
    for exercise_id, source in answers.items():
        chapter = get_exercise(exercise_id).chapter
        write_notebook(folder / f"{chapter:02d}_table.ipynb", source)
    report = grade_submission(folder, list(answers))
    assert [g.points for g in report.grades] == [0, 0, 0], [g.message for g in report.grades]
    honest = write_notebook(tmp_path / "honest" / "00_demo.ipynb",
                       "def gpipe_action_count(P, M):\n    return 2 * P * M\n").parent
    assert grade_submission(honest, ["ex00_1"]).points == 1


def test_the_solutions_and_definitions_are_not_in_the_jail(tmp_path):
    """Before: the answer found the editable install's ``chapters/`` next to the package,
    ran the solution cells and scored 8/8; it could also read ``references.py`` and the
    chapter modules. Now the jail has the package only, with those files empty."""
    folder = write_notebook(
        tmp_path / "mallory" / "02_gpipe.ipynb",
        """
        import pathlib, pipemare_lite
        def idle_fraction(P, M):
            package = pathlib.Path(pipemare_lite.__file__).parent
            found = [str(p) for p in package.parent.glob("chapters/*.ipynb")]
            for name in ("references.py", "ch02.py", "registry.py", "hidden.py"):
                try:
                    text = (package / "book" / "exercises" / name).read_text()
                except OSError:  # in the jail: an unreadable empty file
                    text = ""
                if text:
                    found.append(name)
            return found
        """,
    ).parent
    (grade,) = grade_submission(folder, ["ex02_2"]).grades
    assert "returned [] (list)" in grade.message, grade.message


@pytest.mark.parametrize("trick", ["setprofile", "thread", "precompute"])
def test_engine_wrappers_are_rejected_however_they_call(tmp_path, trick):
    """Before: the rule against answers that only call the engine was a profiling hook:
    ``sys.setprofile(None)`` in the answer switched it off, an engine call in a thread was
    not seen, and a table precomputed while the notebook loaded (a default argument) never
    ran under the hook: each scored full marks (re-run: 1/1 for each of the three). Now the
    engine's answering functions raise
    inside the jail from before the notebook loads."""
    answers = {
        "setprofile": """
            import sys
            from pipemare_lite.analysis import formulas
            def idle_fraction(P, M):
                sys.setprofile(None)
                return getattr(formulas, "idle_" + "fraction_gpipe")(P, M)
            """,
        "thread": """
            import threading
            from pipemare_lite.analysis import formulas
            def idle_fraction(P, M):
                out = []
                work = lambda: out.append(getattr(formulas, "idle_" + "fraction_gpipe")(P, M))
                thread = threading.Thread(target=work)
                thread.start(); thread.join()
                return out[0] if out else None
            """,
        "precompute": """
            from pipemare_lite.analysis import formulas
            def _table():
                f = getattr(formulas, "idle_" + "fraction_gpipe")
                return {(P, M): f(P, M) for P in range(1, 20) for M in range(1, 40)}
            def idle_fraction(P, M, _t=_table()):
                return _t[(P, M)]
            """,
    }
    folder = write_notebook(tmp_path / "mallory" / "02_gpipe.ipynb", answers[trick]).parent
    (grade,) = grade_submission(folder, ["ex02_2"]).grades
    assert grade.points == 0, grade.message


@pytest.mark.parametrize("trick",
                         ["exec_source", "unmarshal_pyc", "getsource", "loader", "gc_dig"])
def test_the_engines_source_cannot_be_re_executed_in_the_jail(tmp_path, trick):
    """Before: the switched-off function's module file was readable in the jail, so an answer
    could ``exec`` the file (or unmarshal its ``.pyc``, or ask ``inspect``/the module's loader
    for its text) and call its own, never switched off, copy of the engine function (issue
    31's closing note; at 9cbc2d3 the exec and getsource variants of this answer scored 1/1
    on ex02_2). Now those files and their compiled copies are empty in the jail: the worker
    imported them from its job's text before any student code ran, and dropped the text.
    ``gc_dig``: the worker kept the original code objects in the notebook's process (a dict
    for the rule-3 watcher, and the switch's saved copies to turn functions on again), where
    ``gc.get_objects()`` found them (at ddd551f: 1/1). Now each exercise runs in its own
    process with its functions off for good and only fingerprints of their code kept.
    (The function's name is built at run time, as in the wrapper attacks above, and the copy's
    code moved to another line, so that neither rule 2 nor rule 3's code watcher, which
    compares code objects by content, sees it.)"""
    answers = {
        "exec_source": """
            from pipemare_lite.analysis import formulas
            def idle_fraction(P, M):
                namespace = {"__name__": "copy"}
                exec(open(formulas.__file__).read(), namespace)
                copy = namespace["idle_" + "fraction_gpipe"]
                copy.__code__ = copy.__code__.replace(co_firstlineno=1000)
                return copy(P, M)
            """,
        "unmarshal_pyc": """
            import glob, marshal, os, types
            from pipemare_lite.analysis import formulas
            def idle_fraction(P, M):
                folder = os.path.join(os.path.dirname(formulas.__file__), "__pycache__")
                for path in glob.glob(os.path.join(folder, "formulas.*.pyc")):
                    with open(path, "rb") as handle:
                        data = handle.read()
                    if len(data) > 16:
                        namespace = {"__name__": "copy"}
                        exec(marshal.loads(data[16:]), namespace)
                        copy = namespace["idle_" + "fraction_gpipe"]
                        copy.__code__ = copy.__code__.replace(co_firstlineno=1000)
                        return copy(P, M)
                return -1.0
            """,
        "getsource": """
            import inspect
            from pipemare_lite.analysis import formulas
            def idle_fraction(P, M):
                namespace = {"__name__": "copy"}
                exec(inspect.getsource(formulas), namespace)
                copy = namespace["idle_" + "fraction_gpipe"]
                copy.__code__ = copy.__code__.replace(co_firstlineno=1000)
                return copy(P, M)
            """,
        "gc_dig": """
            import gc, types
            from pipemare_lite.analysis import formulas
            def idle_fraction(P, M):
                # the original code object, wherever the worker kept one (a dict of them)
                want = "idle_" + "fraction_gpipe"
                for holder in gc.get_objects():
                    if isinstance(holder, dict):
                        items = list(holder)
                    elif isinstance(holder, (tuple, list)):
                        items = list(holder)
                    else:
                        continue
                    for item in items:
                        if (isinstance(item, types.CodeType) and item.co_name == want
                                and "EngineAnswerSwitchedOff" not in item.co_names):
                            code = item.replace(co_firstlineno=1000)
                            return types.FunctionType(code, vars(formulas))(P, M)
                return -1.0
            """,
        "loader": """
            from pipemare_lite.analysis import formulas
            def idle_fraction(P, M):
                loader = formulas.__spec__.loader
                text = loader.get_source(formulas.__name__) or loader.get_data(formulas.__file__)
                namespace = {"__name__": "copy"}
                exec(text, namespace)
                copy = namespace["idle_" + "fraction_gpipe"]
                copy.__code__ = copy.__code__.replace(co_firstlineno=1000)
                return copy(P, M)
            """,
    }
    folder = write_notebook(tmp_path / "mallory" / "02_gpipe.ipynb", answers[trick]).parent
    source = PACKAGE / "analysis" / "formulas.py"
    compiled = Path(importlib.util.cache_from_source(str(source)))
    made = not compiled.exists()  # an installed package has its .pyc; a fresh checkout not
    if made:
        py_compile.compile(str(source), cfile=str(compiled), doraise=True)
    try:
        (grade,) = grade_submission(folder, ["ex02_2"]).grades
    finally:
        if made:
            compiled.unlink(missing_ok=True)
    assert grade.points == 0, grade.message
    # the engine still works for an honest answer that uses the same module's other parts
    honest = write_notebook(
        tmp_path / "honest" / "02_gpipe.ipynb",
        "from pipemare_lite.analysis import formulas\n"
        "def idle_fraction(P, M):\n"
        "    assert formulas.__file__.endswith('formulas.py')\n"
        "    return (P - 1) / (M + P - 1)\n",
    ).parent
    assert grade_submission(honest, ["ex02_2"]).points == 1


def test_report_names_never_collide_and_csv_cells_are_not_formulas(tmp_path):
    """Before: students ``a b`` and ``a_b`` both got ``a_b.md`` (one report lost), and a
    folder named ``=2+3`` went into grades.csv raw, which a spreadsheet runs as a formula
    (re-run: reports ``['_2_3.md', 'a_b.md']`` for three students, first CSV cell ``=2+3``).
    Now names are unique and such cells start with ``'``."""
    class_dir = tmp_path / "class"
    for name in ("a b", "a_b", "=2+3"):
        _honest(class_dir / name)
    reports = grade_class(class_dir, ["ex01_2"])
    written = write_reports(reports, tmp_path / "reports")
    paths = [written[r.student] for r in reports]
    assert len(set(paths)) == 3 and all(p.exists() for p in paths)
    assert {p.read_text().splitlines()[0] for p in paths} == {  # escaped: issue 46
        "# Grade report: a b", "# Grade report: a\\_b", "# Grade report: \\=2\\+3"}
    assert sorted(p.name for p in paths) == ["%3D2%2B3.md", "a%20b.md", "a_b.md"]
    rows = list(csv.reader(written["grades.csv"].open()))
    assert [r[0] for r in rows[1:]] == ["'=2+3", "a b", "a_b"]


def test_a_submission_has_one_time_budget(tmp_path):
    """Before: each endless loop cost its own timeout (about 4.5 min each at the defaults),
    with no bound per student. Now a submission has a wall-clock budget for all its
    workers; what is left when it runs out is graded as timed out."""
    folder = write_notebook(
        tmp_path / "slow" / "01_naive.ipynb",
        "def naive_utilization(P):\n    while True:\n        pass\n",
        "def naive_order(P):\n    while True:\n        pass\n",
        "def naive_start_times(P, F, B):\n    while True:\n        pass\n",
    ).parent
    start = time.monotonic()
    report = grade_submission(folder, ["ex01_1", "ex01_2", "ex01_3"], timeout=4, budget=7)
    assert time.monotonic() - start < 7 + 15  # the budget, plus starting and killing
    assert [g.status for g in report.grades] == ["timed out"] * 3
    assert "grading time" in report.grades[-1].message


def test_a_fork_bomb_fails_alone_while_a_classmate_is_graded(tmp_path):
    """A fork bomb (every process forks until it cannot, then holds its place as a sleeping
    ``sleep``) is graded while a classmate is graded beside it (two graders, as when an
    instructor grades two sections at once). Before: every jail ran its student's code as
    uid 65534, and the kernel counts the process limit per uid over the whole machine, so
    the bomb's processes used up the classmate's limit too (at 9cbc2d3 the classmate's
    worker could not fork its notebook's process: 0 of 2, "crashed"). Now each jail runs its
    student as a uid of its own: the bomb hits its own limit, fails within its time limit,
    leaves no process behind, and the classmate keeps full marks."""
    token = f"0.31{os.getpid()}"  # a number, so that sleep takes it (it sums its arguments)
    bomber = write_notebook(
        tmp_path / "bomber" / "01_naive.ipynb",
        f"""
        import os
        def naive_utilization(P):
            while True:
                try:
                    os.fork()
                except OSError:  # the limit: hold this place until the jail dies
                    os.execv("/bin/sleep", ["/bin/sleep", "1000", {token!r}])
        """,
    ).parent
    result = {}

    def grade_the_bomb():
        start = time.monotonic()
        result["report"] = grade_submission(bomber, ["ex01_2"], timeout=15, budget=30)
        result["seconds"] = time.monotonic() - start

    thread = threading.Thread(target=grade_the_bomb)
    thread.start()
    # without a memory cgroup on this machine the jail's process cap is tighter
    from pipemare_lite.book.exercises import memory_cgroup, worker

    held = 20 if memory_cgroup.available()[0] else worker.FALLBACK_PROCESSES - 2
    deadline = time.monotonic() + 20
    while len(_processes_with(token)) < held and time.monotonic() < deadline:
        time.sleep(0.2)  # until the bomb holds its processes
    assert len(_processes_with(token)) >= held, "the bomb never went off"
    honest = grade_submission(_honest(tmp_path / "honest"), ["ex01_1", "ex01_2"])
    thread.join(60)
    assert not thread.is_alive()
    assert honest.points == 2, [g.message for g in honest.grades]
    (grade,) = result["report"].grades
    assert grade.points == 0 and result["seconds"] < 30 + 15, (grade.message, result)
    # killed with the jail: the kernel tears its pid namespace down within moments
    gone_by = time.monotonic() + 5
    while _processes_with(token) and time.monotonic() < gone_by:
        time.sleep(0.1)
    assert _processes_with(token) == []


def test_disk_is_capped_and_nothing_is_written_outside(tmp_path):
    """Before: an answer wrote 600 MB outside its folder (the grader's /tmp), uncapped. Now
    the jail's only writable place is one tmpfs of ``disk_mb`` MiB, gone with the jail."""
    token = f"fill-31-{os.getpid()}"
    folder = write_notebook(
        tmp_path / "filler" / "01_naive.ipynb",
        f"""
        import os, tempfile
        def naive_utilization(P):
            written = 0
            for place in (tempfile.gettempdir(), ".", "/tmp"):
                try:
                    with open(os.path.join(place, "{token}-" + str(written)), "wb") as f:
                        for _ in range(64):
                            f.write(b"x" * 2**20)
                            written += 2**20
                except OSError:
                    pass
            return written
        """,
    ).parent
    (grade,) = grade_submission(folder, ["ex01_2"], disk_mb=16).grades
    returned = float(grade.message.split("returned ")[1].split()[0].rstrip(","))
    assert returned <= 17 * 2**20, grade.message
    assert not list(Path("/tmp").glob(f"{token}*")) and not list(folder.glob(f"{token}*"))


def test_a_huge_answer_is_reported_as_too_big_not_as_a_timeout(tmp_path):
    """Before: an answer returning a 40 MB string (or a list of millions of items) filled
    the pipe past the grader's limit and was reported as "took longer than ... s" (re-run:
    "timed out ... took longer than 20 s", after 42 s). Now
    strings are cut, oversized answers are refused by size, and the message says so."""
    folder = write_notebook(
        tmp_path / "huge" / "01_naive.ipynb",
        "def naive_utilization(P):\n    return 'x' * (40 * 2**20)\n",
        "def naive_order(P):\n    return list(range(5_000_000))\n",
    ).parent
    report = grade_submission(folder, ["ex01_1", "ex01_2"])
    for grade in report.grades:
        assert grade.status != "timed out" and grade.points == 0, grade.message
    assert "cannot be graded" in report.grades[0].message, report.grades[0].message


def test_class_submissions_and_sandbox_refusal(tmp_path, monkeypatch):
    """Without a jail the grader refuses untrusted work unless told it is trusted."""
    from pipemare_lite.book.exercises import sandbox
    from pipemare_lite.cli import main

    _honest(tmp_path / "class" / "alice")
    assert [p.name for p in class_submissions(tmp_path / "class")] == ["alice"]
    monkeypatch.setattr(sandbox, "_probe", lambda: "bubblewrap (bwrap) is not installed")
    with pytest.raises(sandbox.SandboxUnavailable, match="not installed"):
        grade_class(tmp_path / "class", ["ex01_2"])
    assert main(["grade", str(tmp_path / "class"), "--out", str(tmp_path / "r")]) == 2
    assert main(["grade", str(tmp_path / "class"), "--out", str(tmp_path / "r"),
                 "--exercises", "ex01_2", "--no-sandbox"]) == 0
