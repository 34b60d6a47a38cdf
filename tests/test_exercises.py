"""check() and the registry, on small stand-in exercises (no engine needed), plus hashing.

The chapter exercises, checked against the engine, are in tests/test_exercises_chapters.py.
"""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path

import pytest

from pipemare_lite.book.exercises import (
    EXERCISES,
    Exercise,
    UnknownExerciseError,
    check,
    list_exercises,
    registry,
    run_checks,
)
from pipemare_lite.book.exercises.compare import (
    compare_close,
    compare_float,
    compare_int,
    compare_int_list,
    compare_iterates,
    compare_polynomial,
    compare_rows,
)
from pipemare_lite.book.exercises.hashing import answer_hash, matches_hash, normalize

ROOT = Path(__file__).resolve().parents[1]


def _square_cases():
    return [{"x": 0}, {"x": 3}, {"x": -2}]


SQUARE = Exercise(
    id="ex98_1",
    chapter=98,
    title="square a number (stand-in)",
    function_name="square",
    signature="square(x) -> int",
    hint="multiply x by itself",
    cases=_square_cases,
    reference=lambda x: x * x,
    compare=compare_int,
)
ANSWER = Exercise(
    id="ex98_2",
    chapter=98,
    title="the answer (stand-in)",
    function_name="THE_ANSWER",
    signature="THE_ANSWER: int",
    hint="six times seven",
    answer_hash=hashlib.sha256(b"ex98_2:42").hexdigest(),
    diagnose=lambda value: "too small" if value < 42 else None,
)


@pytest.fixture
def stand_ins(monkeypatch):
    """Register the two stand-in exercises for one test."""
    monkeypatch.setitem(registry.EXERCISES, SQUARE.id, SQUARE)
    monkeypatch.setitem(registry.EXERCISES, ANSWER.id, ANSWER)


# --- function exercises -------------------------------------------------------------------


def test_right_function_passes_every_case(stand_ins, capsys):
    assert check("ex98_1", lambda x: x**2).passed is True
    out = capsys.readouterr().out
    assert out.startswith("✅") and "passed 3 cases" in out


def test_stub_is_not_attempted_yet(stand_ins, capsys):
    def square(x):
        raise NotImplementedError("Exercise 98.1")

    assert check("ex98_1", square).passed is False
    out = capsys.readouterr().out
    assert "not attempted yet" in out and "Traceback" not in out
    assert run_checks("ex98_1", square).status == "not attempted"


def test_other_exception_reports_type_message_and_line(stand_ins, capsys):
    def square(x):
        values = [x]
        return values[1] * x  # IndexError on every case

    result = run_checks("ex98_1", square)
    assert result.status == "error" and not result.passed
    assert "IndexError: list index out of range" in result.message
    line = square.__code__.co_firstlineno + 2
    assert f"line {line} of your code" in result.message
    assert "Hint: multiply x by itself" in result.message
    assert check("ex98_1", square).passed is False
    assert "Traceback" not in capsys.readouterr().out


def test_wrong_function_shows_input_and_hint_not_expected(stand_ins):
    result = run_checks("ex98_1", lambda x: x + x)  # right for x = 0, wrong for x = 3
    assert result.status == "failed" and result.cases_passed == 1
    assert "square(x=3)" in result.message and "returned 6" in result.message
    assert "Hint:" in result.message
    assert not re.search(r"\b9\b", result.message)  # the expected value is never shown


def test_value_instead_of_function_is_explained(stand_ins):
    result = run_checks("ex98_1", 9)
    assert not result.passed and "pass the function itself" in result.message


# --- constant exercises -------------------------------------------------------------------


def test_constant_compared_by_hash(stand_ins, capsys):
    assert check("ex98_2", 42).passed is True
    assert check("ex98_2", 42.0).passed is True  # same normalized value
    assert check("ex98_2", 41).passed is False
    out = capsys.readouterr().out
    assert "too small" in out and "Hint: six times seven" in out


def test_constant_placeholders_are_not_attempted(stand_ins):
    assert run_checks("ex98_2", NotImplemented).status == "not attempted"
    assert run_checks("ex98_2", ...).status == "not attempted"
    assert "pass its value" in run_checks("ex98_2", lambda: 42).message


def test_diagnose_that_raises_does_not_hide_the_verdict(stand_ins):
    # diagnose compares with 42: a str makes it raise TypeError, the verdict must still come
    result = run_checks("ex98_2", "forty-two")
    assert result.status == "failed" and "is not right" in result.message


# --- registry -----------------------------------------------------------------------------


def test_unknown_id_lists_known_ids():
    with pytest.raises(UnknownExerciseError) as info:
        check("ex02_9", lambda P, M: None)
    message = str(info.value)
    assert "ex02_9" in message and all(exercise_id in message for exercise_id in EXERCISES)


def test_required_ids_and_names_are_registered():
    # the chapter writers use exactly these (issue 5)
    required = {
        "ex01_1": "naive_order",
        "ex01_2": "naive_utilization",
        "ex02_1": "gpipe_order",
        "ex02_2": "idle_fraction",
        "ex02_3": "smallest_m_below",  # was the constant M_FOR_10_PERCENT (issue 18)
        "ex03_1": "one_f_one_b_order",
        "ex03_2": "peak_activations_1f1b",
        "ex04_1": "p2p_messages_per_microbatch",
        "ex04_2": "interleaved_idle_fraction",
    }
    for exercise_id, name in required.items():
        exercise = EXERCISES[exercise_id]
        assert exercise.function_name == name and exercise.id == exercise_id
        assert exercise.signature.startswith(name)
        assert exercise_id in registry.__doc__ and name in registry.__doc__
    # ex02_3 was the book's one constant exercise; a hashed small int falls to brute force,
    # so it became a function (issue 18). Constants stay supported: see the stand-in ANSWER.
    assert EXERCISES["ex02_3"].kind == "function" and EXERCISES["ex02_1"].kind == "function"
    assert ANSWER.kind == "constant"


def test_list_exercises_by_chapter():
    assert [e.id for e in list_exercises(2)] == ["ex02_1", "ex02_2", "ex02_3"]
    assert list_exercises() == list(EXERCISES.values())
    assert list_exercises(77) == []
    with pytest.raises(ValueError, match="chapter must be an int"):
        list_exercises("02")


def test_cases_are_deterministic_and_include_edge_cases():
    for exercise in list_exercises():
        if exercise.kind == "function":
            first, second = exercise.cases(), exercise.cases()
            assert first == second and len(first) >= 4, exercise.id
    assert {"stage_costs": [1.0]} in EXERCISES["ex01_2"].cases()  # one stage: always busy
    assert {"P": 4, "M": 2} in EXERCISES["ex03_1"].cases()  # M < P: clamped warm-up


def test_exercise_definition_errors_are_early():
    with pytest.raises(ValueError, match="exNN_k"):
        Exercise(id="two_one", chapter=2, title="", function_name="f", signature="f()",
                 hint="", answer_hash="0")
    with pytest.raises(ValueError, match="not both or neither"):
        Exercise(id="ex02_9", chapter=2, title="", function_name="f", signature="f()", hint="")
    with pytest.raises(ValueError, match="chapter"):
        Exercise(id="ex02_9", chapter=3, title="", function_name="f", signature="f()",
                 hint="", answer_hash="0")
    assert SQUARE.label == "Exercise 98.1"


def test_every_exercise_has_a_grading_test_and_marker():
    grading = (ROOT / "tests" / "grading" / "test_grading.py").read_text()
    marked = set(re.findall(r"@pytest\.mark\.(ex\d\d_\d+)\b", grading))
    assert marked == set(EXERCISES)


def test_no_registered_constant_is_written_in_clear():
    # the hash-checked answer must not appear as a literal next to its name in the source
    source = (ROOT / "pipemare_lite" / "book" / "exercises" / "ch02.py").read_text()
    assert not re.search(r"M_FOR_10_PERCENT\s*=\s*\d", source)


# --- hashing ------------------------------------------------------------------------------


def test_hash_is_sha256_of_salted_normalized_text():
    assert answer_hash("ex98_2", 42) == hashlib.sha256(b"ex98_2:42").hexdigest()
    assert answer_hash("ex98_3", 42) != answer_hash("ex98_2", 42)  # salted by the id


def test_normalize_makes_equal_answers_equal():
    numpy = pytest.importorskip("numpy")
    assert normalize(64) == normalize(64.0) == normalize(numpy.int64(64)) == "64"
    assert normalize(0.1 + 0.2) == normalize(0.3)
    assert normalize(1 / 3) == normalize(0.333333) != normalize(0.3334)
    assert normalize(True) != normalize(1)
    assert normalize(" Yes ") == normalize("yes")
    assert normalize([1, 2.0, (3,)]) == normalize((1, 2, [3]))
    with pytest.raises(TypeError, match="dict"):
        normalize({"a": 1})
    assert matches_hash("ex98_2", {"a": 1}, answer_hash("ex98_2", 42)) is False


# --- comparators --------------------------------------------------------------------------


def test_compare_rows_messages_never_contain_the_expected_action():
    expected = [["0F0", "0F1", "0B0", "0B1"], ["1F0", "1F1", "1B0", "1B1"]]
    assert compare_rows([list(r) for r in expected], expected) is None
    wrong = [["0F0", "0F1", "0B1", "0B0"], expected[1]]
    message = compare_rows(wrong, expected)
    assert "rank 0, position 2" in message and "'0B1'" in message and "0B0" not in message
    assert "one row per rank (2)" in compare_rows(expected[:1], expected)
    assert "too few" in compare_rows([expected[0][:3], expected[1]], expected)
    assert "too many" in compare_rows([expected[0] + ["0U0"], expected[1]], expected)
    assert "list with one list" in compare_rows("0F0 0B0", expected)


def test_compare_numbers_and_lists():
    assert compare_float(1 / 3, 0.3333333333333333) is None
    assert "expected a number" in compare_float(True, 1.0)
    assert "not right" in compare_float(0.25, 0.5)
    assert compare_int(6, 6) is None and "expected an int" in compare_int(6.0, 6)
    assert compare_int_list([3, 2, 1], [3, 2, 1]) is None
    assert "stage 1: you have 3" in compare_int_list([3, 3, 1], [3, 2, 1])
    assert "one per stage (3)" in compare_int_list([3, 2], [3, 2, 1])
    assert "is not an int" in compare_int_list([3, "2", 1], [3, 2, 1])
    numpy = pytest.importorskip("numpy")
    assert compare_int_list(numpy.array([3, 2, 1]), [3, 2, 1]) is None
    assert compare_float(numpy.float64(0.5), 0.5) is None
    assert compare_rows(numpy.array([["0F0", "0B0"]]), [["0F0", "0B0"]]) is None


# --- check() for graders (nbgrader, otter) and for notebooks --------------------------------


def test_check_can_raise_for_a_test_cell_and_stays_friendly_otherwise(stand_ins, capsys):
    from pipemare_lite.book.exercises import ExerciseFailed

    with pytest.raises(ExerciseFailed, match=r"square\(x=3\) returned 6") as info:
        check("ex98_1", lambda x: x + x, raises=True)
    assert isinstance(info.value, AssertionError)  # what nbgrader and otter count as failed
    assert "Hint: multiply x by itself" in str(info.value)

    def stub(x):
        raise NotImplementedError

    with pytest.raises(ExerciseFailed, match="not attempted yet"):
        check("ex98_1", stub, raises=True)
    assert check("ex98_1", lambda x: x * x, raises=True).passed  # a right answer: no raise
    assert not check("ex98_1", lambda x: x + x)  # the default: print, never raise
    assert "returned 6" in capsys.readouterr().out


def test_environment_variable_makes_every_check_raise(stand_ins, monkeypatch):
    from pipemare_lite.book.exercises import ExerciseFailed
    from pipemare_lite.book.exercises.feedback import RAISES_ENV

    monkeypatch.setenv(RAISES_ENV, "1")
    with pytest.raises(ExerciseFailed):
        check("ex98_1", lambda x: x + x)
    assert not check("ex98_1", lambda x: x + x, raises=False)  # an explicit False wins


def test_check_cell_shows_no_true_false_echo(stand_ins):
    from IPython.core.formatters import DisplayFormatter

    result = run_checks("ex98_1", lambda x: x + x)
    assert bool(result) is False and bool(run_checks("ex98_1", lambda x: x * x)) is True
    # what Jupyter displays for the value of a cell ending in check(...): nothing
    assert DisplayFormatter().format(result) == ({}, {})


def test_every_exercises_cases_can_travel_to_the_grading_process():
    # grading sends the cases to a separate process (pickle); a lambda in a case could not
    import pickle

    for exercise in list_exercises():
        if exercise.kind == "function":
            assert pickle.loads(pickle.dumps(exercise.cases())) == exercise.cases(), exercise.id


def test_compare_close_iterates_and_polynomials():
    close = compare_close(1e-4)
    assert close(0.28463, 0.284630) is None and close(0.284631, 0.28463) is None
    assert "too high" in close(0.2856, 0.28463) and "too low" in close(0.2, 0.28463)
    assert "expected a number" in close("0.28", 0.28463)
    # iterates: rounding judged against the largest value so far
    assert compare_iterates([1.0, 0.5, 1e-12], [1.0, 0.5, 0.0]) is None
    assert compare_iterates([1.0, -1e6, 1e-3], [1.0, -1e6, 0.0]) is None  # 1e-9 of 1e6
    assert "w[2] is 0.1" in compare_iterates([1.0, 0.5, 0.1], [1.0, 0.5, 0.0])
    assert "one more than the steps" in compare_iterates([1.0, 0.5], [1.0, 0.5, 0.0])
    assert "w[1] is nan" in compare_iterates([1.0, float("nan")], [1.0, 0.5])
    numpy = pytest.importorskip("numpy")
    assert compare_iterates(numpy.array([1.0, 0.7]), [1.0, 0.7]) is None
    # polynomials: a factor z more (trailing zero) is the same stability question
    right = [1.0, -1.0, 0.0, 0.3]
    assert compare_polynomial(right, right) is None
    assert compare_polynomial(right + [0.0], right) is None
    assert compare_polynomial(numpy.array(right), right) is None
    assert "coefficient of z^2 is -1.5" in compare_polynomial([1.0, -1.5, 0.0, 0.3], right)
    assert "degree 4" in compare_polynomial([1.0, -1.0, 0.0, 0.0, 0.3], right)
    assert "no nonzero" in compare_polynomial([0.0, 0.0], right)
    assert "item 1" in compare_polynomial([1.0, "x"], right)


def test_engine_answers_must_be_dotted_engine_names():
    with pytest.raises(ValueError, match="engine_answers must be dotted names"):
        Exercise(id="ex98_3", chapter=98, title="", function_name="f", signature="f()",
                 hint="", answer_hash="0", engine_answers=("numpy.roots",))


def test_an_answer_that_runs_a_named_engine_function_is_rejected():
    from pipemare_lite.analysis import formulas

    watched = Exercise(
        id="ex98_4", chapter=98, title="GPipe idle fraction (stand-in)",
        function_name="idle", signature="idle(P, M) -> float", hint="count the slots",
        cases=lambda: [{"P": 4, "M": 8}, {"P": 2, "M": 2}],
        reference=lambda P, M: (P - 1) / (M + P - 1), compare=compare_float,
        engine_answers=("pipemare_lite.analysis.formulas.idle_fraction_gpipe",),
    )
    registry.EXERCISES["ex98_4"] = watched
    try:
        assert run_checks("ex98_4", lambda P, M: (P - 1) / (M + P - 1)).passed
        for wrapper in (formulas.idle_fraction_gpipe,  # the engine's function itself
                        lambda P, M: formulas.idle_fraction_gpipe(P, M),
                        lambda P, M: getattr(formulas, "idle_fraction" + "_gpipe")(P, M)):
            result = run_checks("ex98_4", wrapper)
            assert result.status == "failed" and "idle_fraction_gpipe" in result.message
    finally:
        del registry.EXERCISES["ex98_4"]


# --- a budget of work per case, and a ladder of hints -------------------------------------


def test_a_case_over_its_line_budget_is_stopped_and_named_a_search():
    import sys

    from pipemare_lite.book.exercises import evaluate

    def searches(n):
        k = 0
        while k * k < n:
            try:
                k += 1
            except Exception:  # the stop is no Exception: an answer cannot swallow it
                pass
        return k

    def solves(n):
        return math.isqrt(n - 1) + 1 if n > 0 else 0

    cases = [{"n": 16}, {"n": 10**12}]
    previous = sys.gettrace()
    stopped = evaluate.run_function(searches, cases, max_lines=200)
    assert sys.gettrace() is previous  # a debugger's or coverage's trace comes back
    assert stopped.outcomes[0].error is None and stopped.outcomes[0].value == 4
    assert stopped.outcomes[1].error.startswith(evaluate.TOO_MUCH_WORK + " 200 lines")
    solved = evaluate.run_function(solves, cases, max_lines=200)
    assert [o.value for o in solved.outcomes] == [4, 10**6]
    unlimited = evaluate.run_function(searches, [{"n": 10**6}])
    assert unlimited.outcomes[0].value == 1000


def test_hint_ladders_and_budgets_are_validated():
    def make(**fields):
        return Exercise(id="ex02_9", chapter=2, title="", function_name="f", signature="f()",
                        answer_hash="0", **fields)

    assert make(hint=("a nudge", "The whole method")).hints == ("a nudge", "The whole method")
    assert make(hint="one").hints == ("one",)
    for bad in (("a", ""), (), ["a", "b"], ("a", 3)):
        with pytest.raises(ValueError, match="hint"):
            make(hint=bad)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_lines"):
            make(hint="h", max_lines=bad)
