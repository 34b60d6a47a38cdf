"""Issue 30, "Exercises": what ``check()`` and grading tell a student about a wrong answer.

Each test names what the old code (9cbc2d3) said for the same answer.
"""

from __future__ import annotations

import math
from pathlib import Path

import nbformat

from pipemare_lite.book.exercises import run_checks
from pipemare_lite.book.exercises.compare import (
    compare_close,
    compare_float,
    compare_int,
    compare_polynomial,
)
from pipemare_lite.book.exercises.plain import dumps, from_plain, loads, to_plain
from tests.notebook_files import write_notebook
from tests.sandbox_required import _sandbox_or_fail, requires_sandbox  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]


def test_a_nan_answer_is_named_nan_not_too_low():
    """Before: ``compare_float(nan, 0.4)`` said "too low" (NaN > x is False)."""
    for problem in (compare_float(math.nan, 0.4), compare_close(1e-3)(math.nan, 2.0)):
        assert problem is not None and "NaN" in problem and "too low" not in problem
    result = run_checks("ex02_2", lambda P, M: float("nan"))
    assert not result.passed and "NaN" in result.message and "too low" not in result.message
    # a polynomial with a NaN coefficient (ex06_2): before, "cannot be compared (ValueError)"
    problem = compare_polynomial([math.nan, 1.0], [1.0, -1.0])
    assert problem is not None and "nan" in problem and "finite" in problem


def test_a_huge_int_is_too_high_in_check():
    """Before: an int of over 4,300 digits could not be printed, so ``check()`` said
    "returned a value that cannot be compared (ValueError)" on every case."""
    assert compare_int(10**5000, 3) == (
        "returned an integer with over 3,900 digits, which is not right: too high")
    assert "too low" in compare_int(-(10**5000), 3)
    assert "too high" in compare_float(10**400, 0.5)  # no OverflowError from float()
    result = run_checks("ex00_1", lambda P, M: 2 ** (2**20))
    assert "too high" in result.message and "cannot be compared" not in result.message


def test_a_huge_int_travels_as_its_sign_and_size():
    """Before: ``to_plain`` passed it through and ``json.dumps`` raised ValueError in the
    worker, which died: "stopped the grading process (exit code 70): no output"."""
    for value in (2**20000, -(2**20000)):
        back = loads(dumps(value))
        assert isinstance(back, int) and (back > 0) == (value > 0) and back.bit_length() > 13_000
    assert from_plain(to_plain(2**100)) == 2**100  # an ordinary int is itself


@requires_sandbox
def test_a_huge_int_is_graded_too_high_not_as_a_crash(tmp_path):
    """Before: graded as "crashed ... stopped the grading process (exit code 70): no output"
    (re-run at 9cbc2d3 with ``return 2 ** (2 ** 24)`` for ex00_1)."""
    from pipemare_lite.book.exercises.grading import grade_submission

    folder = write_notebook(tmp_path / "huge" / "00_demo.ipynb",
                       "def gpipe_action_count(P, M):\n    return 2 ** (2 ** 24)\n").parent
    (grade,) = grade_submission(folder, ["ex00_1"]).grades
    assert grade.status == "failed" and grade.points == 0, grade.message
    assert "too high" in grade.message and "over 3,900 digits" in grade.message


def test_partial_credit_is_the_share_of_cases_passed():
    """Before: all or nothing only (no such option; 7/10 cases earned 0)."""
    from pipemare_lite.book.exercises.grading import ExerciseGrade, with_partial_credit

    failed = ExerciseGrade("ex04_3", "Exercise 4.3", "failed", 0, 2, 7, 10, "...")
    assert with_partial_credit(failed).points == 1.4
    for status in ("timed out", "crashed", "missing", "not attempted", "passed"):
        grade = ExerciseGrade("ex04_3", "Exercise 4.3", status, 0, 2, 7, 10, "...")
        assert with_partial_credit(grade) is grade


@requires_sandbox
def test_grade_partial_credit_option_and_all_or_nothing_default(tmp_path):
    """``grade --partial-credit``: a half-right answer earns the share of cases it passed on
    the grader's cases; without the option it earns 0 (the default, as before)."""
    from pipemare_lite.book.exercises import get_exercise
    from pipemare_lite.book.exercises.grading import grade_submission
    from pipemare_lite.book.exercises.hidden import graded_cases, instructor_secret
    from pipemare_lite.cli import main

    # right when P is even, a known mistake otherwise
    answer = ("def gpipe_action_count(P, M):\n"
              "    return 2 * P * M if P % 2 == 0 else P * M\n")
    folder = write_notebook(tmp_path / "class" / "half" / "00_demo.ipynb", answer).parent
    salt = b"one run"  # the grader salts its cases per run: this test fixes the salt
    cases = graded_cases(get_exercise("ex00_1"), instructor_secret(), salt)
    passed = sum(c["P"] % 2 == 0 for c in cases)
    assert 0 < passed < len(cases)
    (all_or_nothing,) = grade_submission(folder, ["ex00_1"], salt=salt).grades
    assert all_or_nothing.points == 0 and all_or_nothing.cases_passed == passed
    (partial,) = grade_submission(folder, ["ex00_1"], partial_credit=True, salt=salt).grades
    assert partial.points == round(passed / len(cases), 2)
    out = tmp_path / "reports"
    assert main(["grade", str(tmp_path / "class"), "--exercises", "ex00_1", "--out", str(out),
                 "--partial-credit"]) == 0
    rows = (out / "grades.csv").read_text().splitlines()
    detail = (out / "grades_detail.csv").read_text().splitlines()[1].split(",")
    share = int(detail[5]) / int(detail[6])  # that run's own (salted) cases
    assert 0 < share < 1 and rows[1].split(",")[1] == str(round(share, 2))


def _no_tie_break(rows, budget_bytes):
    """ex10_2 without the tie-break: the first row of the highest utilization that fits."""
    fitting = [r for r in rows if r["utilization"] is not None and r["device_peak"] <= budget_bytes]
    return max(fitting, key=lambda r: r["utilization"])["method"] if fitting else None


def _wrong_at_horizon_0(lr, lam, tau, horizon):
    """ex08_2 right everywhere but at horizon 0, where T1 is off (the full lr), not "never"."""
    if horizon == 0:
        return None
    bound = 2 * math.sin(math.pi / (2 * (2 * tau + 1)))
    for k in range(horizon + 1):
        if lr * tau ** -(1 - min(k / horizon, 1)) * lam >= bound:
            return k
    return None


def test_a_known_mistake_is_named_only_when_it_explains_every_case():
    """Before: a mistake was named when it agreed with the answer on the failing cases only.
    ex08_2 wrong only at horizon 0 was told "this uses the bound of a stage without delay"
    (which agrees there, and fails cases that answer passed); ex10_2 without the tie-break
    was named a mistake it is not (issue 30). Now a mistake must also pass every case the
    answer passed, and the mistakes themselves are still named."""
    from pipemare_lite.book.exercises import get_exercise

    for exercise_id, answer in (("ex08_2", _wrong_at_horizon_0), ("ex10_2", _no_tie_break)):
        result = run_checks(exercise_id, answer)
        assert not result.passed and 0 < result.cases_passed, (exercise_id, result.message)
        assert "A known mistake" not in result.message, (exercise_id, result.message)
        for mistake in get_exercise(exercise_id).mistakes:  # each still named for itself
            # called through a function of this test (the mistake's own is the book's code)
            named = run_checks(exercise_id, lambda *a, m=mistake: m.answer(*a)).message
            assert f"A known mistake: {mistake.message}" in named, (exercise_id, named)


def _bound(tau):
    return 2 * math.sin(math.pi / (2 * (2 * tau + 1)))


def _depth(outside):
    """ex07_2, solved for P, with the stability test ``outside(step, bound)``: the largest
    delay from the inverted bound, checked against the bound itself with ``outside``."""
    def largest_stable_depth(step, num_microbatches):
        tau = math.ceil((math.pi / (2 * math.asin(step / 2)) - 1) / 2) - 1
        while tau > 0 and outside(step, _bound(tau)):
            tau -= 1
        while not outside(step, _bound(tau + 1)):
            tau += 1
        return (num_microbatches * tau + 1) // 2
    return largest_stable_depth


def _crossing(reaches):
    """ex08_2 with the crossing test ``reaches(step * lam, bound)``."""
    def first_update_outside(lr, lam, tau, horizon):
        for k in range(horizon + 1):
            factor = 1.0 if horizon == 0 else float(tau) ** -(1.0 - min(k / horizon, 1.0))
            if reaches(lr * factor * lam, _bound(tau)):
                return k
        return None
    return first_update_outside


def _calibration(still_missing):
    """ex09_2 with the test ``still_missing(missing, tolerance)``."""
    def updates_until_calibrated(gamma, tolerance):
        k, missing = 1, gamma
        while still_missing(missing, tolerance):
            k, missing = k + 1, missing * gamma
        return k
    return updates_until_calibrated


def test_answers_that_break_the_texts_boundary_fail():
    """Before: each of these passed every case (ex07_2 "stable while strictly below the
    bound" answered with step > bound; ex08_2 "reaching the bound counts" with >; ex09_2 "at
    most tolerance" with >=), since no case sat on the boundary. Now each exercise has cases
    exactly on it; the answers that keep the text's rule still pass."""
    ge, gt = (lambda a, b: a >= b), (lambda a, b: a > b)
    for exercise_id, right, wrong in (("ex07_2", _depth(ge), _depth(gt)),
                                      ("ex08_2", _crossing(ge), _crossing(gt)),
                                      ("ex09_2", _calibration(gt), _calibration(ge))):
        assert run_checks(exercise_id, right).passed, exercise_id
        result = run_checks(exercise_id, wrong)
        assert not result.passed and result.cases_total - result.cases_passed == 2, (
            exercise_id, result.message)


def test_ex09_2_boundary_is_stated_and_a_strict_comparison_is_named():
    """A fresh student: the statement said "within", only the hint said "at most", and an
    answer with >= failed the boundary cases with no mistake named. Now the statement says
    where the boundary lies, and the wrong comparison is named on a boundary case."""
    chapter = nbformat.read(ROOT / "chapters" / "09_t2_discrepancy_correction_and_warm_up.ipynb",
                            as_version=4)
    (statement,) = [c.source for c in chapter.cells
                    if c.cell_type == "markdown" and "updates_until_calibrated(" in c.source
                    and "Exercise 2" in c.source]
    assert "*at most*" in statement and "exactly equal" in statement, statement
    result = run_checks("ex09_2", _calibration(lambda missing, tol: missing >= tol))
    gamma, tolerance = result.failing_case["gamma"], result.failing_case["tolerance"]
    assert any(gamma ** k == tolerance for k in range(1, 60)), result.failing_case  # on it
    assert "A known mistake: this waits until the missing part is strictly below" in (
        result.message), result.message


def test_ex05_2_the_recalled_worst_case_is_named():
    """A fresh student: the recalled ceil(D/N), which the hint mentions, named no mistake; nor
    did ceil((2(P-s)+1-j)/N), the position's 1-indexed form with the 0-indexed stage put in."""
    for recalled, words in (
        (lambda P, N, stage, position: -(-(2 * (P - stage) - 1) // N),
         "this is the recalled ceil((2(P-i)+1)/N), which ignores the position"),
        (lambda P, N, stage, position: math.ceil((2 * (P - stage) + 1) / N),
         "this is the recalled form with the 0-indexed stage"),
        # the position's form, with the 0-indexed stage put in for the 1-indexed i
        (lambda P, N, stage, position: math.ceil((2 * (P - stage) + 1 - position) / N),
         "this takes the position into account, but puts the 0-indexed stage in for i"),
    ):
        message = run_checks("ex05_2", recalled).message
        assert f"A known mistake: {words}" in message, message


def _pick_counting_none_as_zero(rows, budget_bytes):
    fitting = [r for r in rows if r["device_peak"] <= budget_bytes]
    if not fitting:
        return None
    return max(fitting, key=lambda r: (r["utilization"] or 0, -r["device_peak"]))["method"]


def test_ex10_2_shows_every_row_and_names_a_method_that_cannot_run():
    """A fresh student: an answer treating utilization None as 0 was told "returned '2bw',
    which is not right." with the rows cut off mid-dict ('utilizati...'), so the row that
    decides the case (2bw, peak 0, utilization None) was hidden, and no mistake was named.
    Now the rows are a table, one per line, and the mistake is named."""
    result = run_checks("ex10_2", _pick_counting_none_as_zero)
    assert not result.passed, result.message
    said = result.message.split("Hint:")[0]
    assert "..." not in said, said
    for row in result.failing_case["rows"]:
        line = next(s for s in said.splitlines() if s.split()[:1] == [row["method"]])
        assert line.split()[1:] == [str(row["device_peak"]), str(row["utilization"])], line
    assert "returned '2bw'" in said and "\n   returned" in said, said
    assert "A known mistake: this keeps a row whose utilization is missing" in said, said


def test_jail_uids_are_distinct_and_valid_for_any_pid(monkeypatch):
    """Each jail started by root gets its own uid (the fork-bomb test in
    tests/test_grading_attacks.py shows why), below 2**31 for every pid Linux hands out
    (pid_max is at most 2**22): a uid past it would stop the worker ("no usable uid")."""
    from pipemare_lite.book.exercises import sandbox

    for pid in (1, 32768, 2**22 - 1):
        monkeypatch.setattr(sandbox.os, "getpid", lambda pid=pid: pid)
        uids = [sandbox.worker_uid() for _ in range(256)]
        assert len(set(uids)) == 256 and all(65534 < u < 2**31 for u in uids), pid
