"""Issue 46: no public engine function answers an exercise while it is graded.

An exercise lists the engine functions that compute its answer (``engine_answers``); they are
switched off in every process that runs student code while the exercise is pending. Before
issue 46 the lists missed one-step relatives: ex02_2 (the idle fraction) passed with
``formulas.bubble_ratio_gpipe`` (idle = r / (1 + r)), which was not in its list.

:func:`relatives` finds them generically: every public function of the torch-free engine
modules below, called with an exercise's ``check()`` arguments (and with a trailing 1, for
``M = 1`` or ``v = 1``), then passed through one of a few one-step transforms (``x``,
``1 - x``, ``x / (1 + x)``, ``1 / (1 + x)``, ``1 / x``), that gives the reference's answer on
every case. Each such function must be in the exercise's ``engine_answers``
(:func:`test_every_engine_relative_is_switched_off`), and an answer that just calls it
fails in the jail (:func:`test_answers_that_call_an_engine_relative_fail_in_the_jail`).
"""

from __future__ import annotations

import importlib
import inspect
import math
import signal
from pathlib import Path

import pytest

from pipemare_lite.book.exercises import get_exercise, list_exercises
from pipemare_lite.book.exercises.grading import grade_submission
from tests.notebook_files import write_notebook
from tests.sandbox_required import _sandbox_or_fail, requires_sandbox  # noqa: F401

#: Torch-free engine modules whose public functions could answer an exercise.
MODULES = (
    "pipemare_lite.analysis.formulas", "pipemare_lite.analysis.stage_lr",
    "pipemare_lite.analysis.stage_stability", "pipemare_lite.analysis.theory",
    "pipemare_lite.analysis.staleness", "pipemare_lite.analysis.memory",
    "pipemare_lite.analysis.simulate", "pipemare_lite.analysis.utilization",
    "pipemare_lite.methods.tradeoff", "pipemare_lite.methods.nesterov",
    "pipemare_lite.experiments.paper_arithmetic", "pipemare_lite.schedules.comm_rows",
)
#: One-step transforms of an engine function's result (source text, as an answer writes it).
TRANSFORMS = ("x", "1 - x", "x / (1 + x)", "1 / (1 + x)", "1 / x")
#: Extra trailing arguments tried (M = 1 turns GPipe's formulas into the naive pipeline's).
EXTRAS = ((), (1,))


def _same(got, expected) -> bool:
    if isinstance(expected, bool) or expected is None:
        return got is expected
    if isinstance(expected, (int, float)):
        return (isinstance(got, (int, float)) and not isinstance(got, bool)
                and math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-12))
    if isinstance(expected, (list, tuple)):
        return (isinstance(got, (list, tuple)) and len(got) == len(expected)
                and all(_same(g, e) for g, e in zip(got, expected)))
    return False


class _TooSlow(Exception):
    pass


def _raise_too_slow(*_args):
    raise _TooSlow


def _public_functions() -> list[tuple[str, object]]:
    found = []
    for name in MODULES:
        module = importlib.import_module(name)
        for attr, obj in sorted(vars(module).items()):
            if not attr.startswith("_") and inspect.isfunction(obj) and obj.__module__ == name:
                found.append((f"{name}.{attr}", obj))
    return found


def _answers_on_every_case(function, cases, expected, extra, transform) -> bool:
    """True when ``transform`` of ``function`` answers every case, unless the function just
    hands one of its arguments back on every case (``look_ahead_factor(P, 1)`` is P, and
    ``1 / P`` is ex01_2's answer: that is the student's arithmetic, not the engine's)."""
    echoes = 0
    for case, want in zip(cases, expected):
        signal.setitimer(signal.ITIMER_REAL, 0.5)  # a search on odd arguments: not an answer
        try:
            x = function(*case.values(), *extra)
            echoes += any(_same(x, value) for value in case.values())
            got = eval(transform, {"x": x})  # noqa: S307 - one of TRANSFORMS
        except BaseException:  # noqa: BLE001 - a call that fails answers nothing
            return False
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if not _same(got, want):
            return False
    return echoes < len(cases)


def relatives() -> dict[str, list[tuple[str, tuple, str]]]:
    """Exercise id -> ``(engine function, extra arguments, transform)`` that answer it."""
    previous = signal.signal(signal.SIGALRM, _raise_too_slow)
    found: dict[str, list[tuple[str, tuple, str]]] = {}
    try:
        functions = _public_functions()
        for exercise in list_exercises():
            if exercise.kind != "function":
                continue
            cases = exercise.cases()
            expected = [exercise.reference(**case) for case in cases]
            for name, function in functions:
                for extra in EXTRAS:
                    for transform in TRANSFORMS:
                        if _answers_on_every_case(function, cases, expected, extra, transform):
                            found.setdefault(exercise.id, []).append((name, extra, transform))
    finally:
        signal.signal(signal.SIGALRM, previous)
    return found


@pytest.fixture(scope="module")
def found() -> dict[str, list[tuple[str, tuple, str]]]:
    """:func:`relatives`, computed once for this module."""
    return relatives()


def test_the_audit_finds_the_known_relatives(found):
    """The audit itself: it finds the direct answers (listed long ago) and ex02_2's relative
    that the issue found by hand."""
    assert ("pipemare_lite.analysis.formulas.idle_fraction_gpipe", (), "x") in found["ex02_2"]
    assert ("pipemare_lite.analysis.formulas.bubble_ratio_gpipe", (), "x / (1 + x)") in \
        found["ex02_2"]
    # ex01_2 asks for each rank's utilization with unequal stages since issue 45: no public
    # function answers that in one call, so the audit finds none (it found 4 for the old 1 / P)
    assert "ex01_2" not in found


def test_every_engine_relative_is_switched_off(found):
    """Before: ex02_2 passed with ``formulas.bubble_ratio_gpipe`` (issue 46, attack 5); the
    audit also found ex01_2 (``utilization_gpipe(P, 1)`` and three more), ex02_2
    (``idle_fraction_1f1b``, ``idle_fraction_interleaved(P, M, 1)``) and ex06_3
    (``theory.momentum_stability_bound``, the answer itself). Now each is listed."""
    missing = {
        exercise: sorted({name for name, _, _ in ways} - set(get_exercise(exercise).engine_answers))
        for exercise, ways in found.items()
    }
    assert not {k: v for k, v in missing.items() if v}, missing


def _relay_notebooks(folder: Path, found) -> list[str]:
    """One notebook per chapter whose answers return the first engine relative that runs."""
    cells: dict[int, list[str]] = {}
    for exercise_id, ways in sorted(found.items()):
        exercise = get_exercise(exercise_id)
        params = list(exercise.cases()[0])
        args = ", ".join(params)
        tries = "".join(
            f"    try:\n"
            f"        x = getattr(importlib.import_module({name.rsplit('.', 1)[0]!r}), "
            f"{name.rsplit('.', 1)[1]!r})({args}{''.join(', ' + repr(e) for e in extra)})\n"
            f"        return {transform}\n"
            f"    except Exception as exc:\n"
            f"        errors.append(repr(exc))\n"
            for name, extra, transform in ways
        )
        cells.setdefault(exercise.chapter, []).append(
            f"def {exercise.function_name}({args}):\n"
            f"    import importlib\n    errors = []\n{tries}"
            f"    raise RuntimeError(errors)\n"
        )
    for chapter, sources in cells.items():
        write_notebook(folder / f"{chapter:02d}_relay.ipynb", *sources)
    return sorted(found)


@requires_sandbox
def test_answers_that_call_an_engine_relative_fail_in_the_jail(tmp_path, found):
    """Every exercise the audit found an engine answer for, answered by calling each one in
    turn (the first that runs wins): each scores 0 in the jail, because every one of them is
    switched off in the process that runs the answer. Before: ex02_2 scored 1 of 1 through
    ``bubble_ratio_gpipe`` (issue 46; re-run at 22858bf with ``r / (1 + r)``: 1/1)."""
    exercises = _relay_notebooks(tmp_path / "relay", found)
    report = grade_submission(tmp_path / "relay", exercises)
    scored = {g.exercise_id: (g.points, g.status) for g in report.grades if g.points}
    assert not scored, [(g.exercise_id, g.message[:300]) for g in report.grades if g.points]
    assert all(g.status in ("error", "failed") for g in report.grades), \
        [(g.exercise_id, g.status, g.message[:200]) for g in report.grades]


#: The independent hostile pass's three engine routes the audit above does not reach (issue
#: 46's closing note): each scored its points before these functions joined engine_answers.
HOSTILE_01 = '''
def naive_start_times(P, F, B):
    from pipemare_lite.analysis.overlap import simulate_overlapped
    from pipemare_lite.analysis.simulate import OpCosts
    from pipemare_lite.schedules.builders.common import make_schedule
    s = make_schedule("naive", P, 1, [[("F", r, 0), ("B", r, 0), ("U", r, 0)] for r in range(P)])
    t = {str(a): v for a, v in simulate_overlapped(s, OpCosts(forward=F, backward=B)).times.items()}
    return [[t["%dF0" % r][0], t["%dB0" % r][0]] for r in range(P)]
'''
HOSTILE_02 = ('''
def gpipe_order(P, M):
    from pipemare_lite.schedules.builders.one_f_one_b import one_f_one_b_order
    return [["%d%s%d" % (s, k, m) for k, m in one_f_one_b_order(list(range(M)), M)]
            for s in range(P)]
''', '''
def idle_fraction(P, M):
    from pipemare_lite.figures.widgets.schedule import _no_flush
    return _no_flush("pipedream", P, M, 1, 1.0, 2.0).idle
''')


@requires_sandbox
def test_the_hostile_passs_engine_routes_score_nothing(tmp_path):
    folder = tmp_path / "hostile"
    write_notebook(folder / "01_naive.ipynb", HOSTILE_01)
    write_notebook(folder / "02_gpipe.ipynb", *HOSTILE_02)
    report = grade_submission(folder, ["ex01_3", "ex02_1", "ex02_2"])
    points = {g.exercise_id: g.points for g in report.grades}
    assert points == {"ex01_3": 0, "ex02_1": 0, "ex02_2": 0}, report.to_markdown()
