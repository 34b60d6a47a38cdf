"""The exercises of chapters 00-05, checked against the engine.

Plain solutions written here from the definitions (the order rules, the closed forms) must
pass every exercise; stubs must be "not attempted yet"; typical wrong answers must fail
with a hint and without showing the expected value.
"""

from __future__ import annotations

import itertools
import math
import re
import subprocess
import sys
import textwrap
from fractions import Fraction

import pytest

from pipemare_lite.exercises import EXERCISES, check, run_checks

# --- plain solutions, written from the definitions ----------------------------------------


def gpipe_action_count(P, M):
    return 2 * P * M


def naive_utilization(P):
    return 1 / P


def naive_order(P):
    return [[f"{r}F0", f"{r}B0"] for r in range(P)]


def gpipe_order(P, M):
    return [[f"{r}F{m}" for m in range(M)] + [f"{r}B{m}" for m in range(M)] for r in range(P)]


def idle_fraction(P, M):
    return (P - 1) / (M + P - 1)


def one_f_one_b_order(P, M):
    rows = []
    for r in range(P):
        warmup = min(P - 1 - r, M)  # clamped when M is small
        row = [f"{r}F{m}" for m in range(warmup)]
        for m in range(M - warmup):  # steady state: the next forward, the oldest backward
            row += [f"{r}F{warmup + m}", f"{r}B{m}"]
        row += [f"{r}B{m}" for m in range(M - warmup, M)]
        rows.append(row)
    return rows


def peak_activations_1f1b(P, M):
    return [min(P - s, M) for s in range(P)]


def interleaved_idle_fraction(P, M, v):
    return (P - 1) / (v * M + P - 1)


def p2p_messages_per_microbatch(P, v):
    return 2 * (v * P - 1)


def version_hooks(params, weights):
    index_of = {id(p): i for i, p in enumerate(params)}

    def pack(t):  # a parameter, or a view of one (Linear saves weight.t()), becomes a marker
        base = t if id(t) in index_of else t._base
        if base is None or id(base) not in index_of:
            return t
        view = None if base is t else (t.size(), t.stride(), t.storage_offset())
        return ("weight", index_of[id(base)], view)

    def unpack(packed):
        if not (isinstance(packed, tuple) and packed[0] == "weight"):
            return packed
        _, i, view = packed
        return weights[i] if view is None else weights[i].as_strided(*view)

    return pack, unpack


def async_forward_delay(P, N, stage, position):
    # count the updates before the forward of a microbatch m = kN + position deep in the run:
    # update j runs in the tick of B((j+1)N - 1), on this stage tick (j+1)N - 1 + 2P-1-stage;
    # F(m) runs at tick m + stage, and inside a tick F comes before B and U
    k = 10 * P + 10
    m = k * N + position
    before = sum(1 for j in range(k) if (j + 1) * N - 1 + 2 * P - 1 - stage < m + stage)
    return k - before  # the gradient of minibatch k is applied to version k


def pipedream_stash_copies(P, N):
    return [-(-(P - 1 - s) // N) for s in range(P)]  # ceil((P-1-s)/N) without math


M_FOR_10_PERCENT = next(M for M in itertools.count(1) if idle_fraction(8, M) < 0.1)

SOLUTIONS = {
    "ex00_1": gpipe_action_count,
    "ex01_1": naive_utilization,
    "ex01_2": naive_order,
    "ex02_1": gpipe_order,
    "ex02_2": idle_fraction,
    "ex02_3": M_FOR_10_PERCENT,
    "ex03_1": one_f_one_b_order,
    "ex03_2": peak_activations_1f1b,
    "ex04_1": interleaved_idle_fraction,
    "ex04_2": p2p_messages_per_microbatch,
    "ex05_1": version_hooks,
    "ex05_2": async_forward_delay,
    "ex05_3": pipedream_stash_copies,
}

# --- typical mistakes ---------------------------------------------------------------------

WRONG = {
    "ex00_1": lambda P, M: P * M,  # forgot the backwards
    "ex01_1": lambda P: 1 / (P + 1),
    "ex01_2": lambda P: [[f"{r}B0", f"{r}F0"] for r in range(P)],
    "ex02_1": lambda P, M: [  # backwards in reverse order
        [f"{r}F{m}" for m in range(M)] + [f"{r}B{m}" for m in reversed(range(M))]
        for r in range(P)
    ],
    "ex02_2": lambda P, M: (P - 1) / M,  # the bubble ratio, not the idle fraction
    "ex02_3": M_FOR_10_PERCENT - 1,
    "ex03_1": gpipe_order,
    "ex03_2": lambda P, M: [P - s for s in range(P)],  # forgot that M may be < P
    "ex04_1": lambda P, M, v: (P - 1) / (M + P - 1),  # ignored v
    "ex04_2": lambda P, v: v * P - 1,  # forgot the backward
    "ex05_1": lambda params, weights: (lambda t: t.clone(), lambda t: t),  # always F's weights
    # the recalled worst case, ignoring the position in the minibatch
    "ex05_2": lambda P, N, stage, position: -(-(2 * (P - stage) - 1) // N),
    "ex05_3": lambda P, N: [P - 1 - s for s in range(P)],  # one copy per in-flight microbatch
}


def test_solutions_cover_every_exercise():
    assert set(SOLUTIONS) == set(EXERCISES) == set(WRONG)


@pytest.mark.parametrize("exercise_id", sorted(SOLUTIONS))
def test_plain_solution_passes(exercise_id, capsys):
    assert check(exercise_id, SOLUTIONS[exercise_id]) is True
    out = capsys.readouterr().out
    assert out.startswith("✅"), out
    if EXERCISES[exercise_id].kind == "function":
        assert f"passed {len(EXERCISES[exercise_id].cases())} cases" in out


@pytest.mark.parametrize("exercise_id", sorted(SOLUTIONS))
def test_stub_is_not_attempted_yet(exercise_id):
    exercise = EXERCISES[exercise_id]

    def stub(*args):
        raise NotImplementedError(exercise.label)

    answer = NotImplemented if exercise.kind == "constant" else stub
    result = run_checks(exercise_id, answer)
    assert result.status == "not attempted" and "not attempted yet" in result.message


def _texts_of(expected) -> set[str]:
    """Ways the expected value could be printed."""
    if isinstance(expected, float):
        return {repr(expected), f"{expected:.6g}", f"{expected:.4f}", f"{expected:.3f}",
                f"{expected:.1%}"}
    if isinstance(expected, list) and expected and isinstance(expected[0], list):
        return {repr(expected)} | {repr(row) for row in expected}
    return {repr(expected), str(expected)}


@pytest.mark.parametrize("exercise_id", sorted(WRONG))
def test_wrong_answer_fails_with_hint_and_hides_the_expected_value(exercise_id):
    exercise = EXERCISES[exercise_id]
    answer = WRONG[exercise_id]
    result = run_checks(exercise_id, answer)
    assert result.status == "failed" and "Hint:" in result.message, result.message
    # what the message says besides the exercise id, the failing call and the hint
    said = result.message.split("Hint:")[0].replace(exercise_id, "")
    if exercise.kind == "constant":
        assert not re.search(rf"(?<!\d){M_FOR_10_PERCENT}(?!\d)", said), said
        return
    failing = exercise.cases()[result.cases_passed]
    call = f"{exercise.function_name}(" + ", ".join(f"{k}={v!r}" for k, v in failing.items())
    if exercise.case_text is not None:  # an answer the check does not call on the case
        call = exercise.case_text(failing)
    assert call in said
    said = said.replace(call, "")
    expected = exercise.reference(*failing.values())
    for text in _texts_of(expected):
        assert not re.search(rf"(?<![\w.]){re.escape(text)}(?![\w])", said), (text, said)
    if isinstance(expected, list) and expected and isinstance(expected[0], list):
        # every action it names is one the student wrote
        written = {a for row in answer(*failing.values()) for a in row}
        assert set(re.findall(r"\d+[FBIWU]\d+", said)) <= written, said


def test_hashed_constant_is_the_engines_smallest_m():
    from pipemare_lite.schedules import build_schedule
    from pipemare_lite.simulate import OpCosts, metrics, simulate

    def measured(M):  # exact: the simulated times are sums of integer costs
        run = metrics(simulate(build_schedule("gpipe", 8, M), OpCosts()))
        return 1 - Fraction(sum(run.busy_per_rank)) / (8 * Fraction(run.makespan))

    smallest = next(M for M in itertools.count(1) if measured(M) < Fraction(1, 10))
    assert run_checks("ex02_3", smallest).passed
    assert not run_checks("ex02_3", smallest - 1).passed
    assert not run_checks("ex02_3", smallest + 1).passed


def test_constant_diagnosis_points_the_way_without_the_answer():
    too_small = run_checks("ex02_3", 10).message
    assert "idle fraction of" in too_small and "%" in too_small
    boundary = run_checks("ex02_3", M_FOR_10_PERCENT - 1).message  # exactly 10%
    assert "10.0%: not below 10%" in boundary
    too_large = run_checks("ex02_3", 100).message
    assert "is it the smallest such M" in too_large
    assert "positive int" in run_checks("ex02_3", "sixty").message


def test_checks_import_no_torch():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # any import of torch now fails
        from pipemare_lite.exercises import list_exercises, run_checks
        for exercise in list_exercises():
            if exercise.needs_torch:  # checked on real tensors (chapter 05's hooks)
                continue
            answer = exercise.reference if exercise.kind == "function" else 1
            result = run_checks(exercise.id, answer)
            assert result.status in ("passed", "failed"), result.message
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_engine_closed_forms_pass_the_simulator_backed_exercises():
    # a student who derives the closed form must pass the check, which uses the simulator
    from pipemare_lite import formulas

    closed_forms = {
        "ex01_1": lambda P: 1 - formulas.idle_fraction_naive(P),
        "ex02_2": formulas.idle_fraction_gpipe,
        "ex03_2": lambda P, M: [formulas.peak_inflight_1f1b(P, M, s) for s in range(P)],
        "ex04_1": formulas.idle_fraction_interleaved,
    }
    for exercise_id, answer in closed_forms.items():
        result = run_checks(exercise_id, answer)
        assert result.passed, result.message
    assert run_checks("ex02_3", formulas.microbatches_for_idle_below(8, 0.1)).passed


# --- chapter 05: answers that only call the engine's own function are refused -------------


def test_engine_closed_forms_agree_with_the_measured_references():
    # the engine's own closed forms are right, but a student may not hand them in (below)
    from pipemare_lite.memory import peak_stash_copies
    from pipemare_lite.schedules import build_schedule
    from pipemare_lite.staleness import exact_forward_delay

    for case in EXERCISES["ex05_2"].cases():
        expected = EXERCISES["ex05_2"].reference(**case)
        assert exact_forward_delay("async", *case.values()) == expected, case
    for case in EXERCISES["ex05_3"].cases():
        P, N = case["P"], case["N"]
        assert EXERCISES["ex05_3"].reference(**case) == [
            math.ceil((P - 1 - s) / N) for s in range(P)]
        longer = peak_stash_copies(build_schedule("pipedream", P, N, num_minibatches=4 * P + 4))
        assert longer == EXERCISES["ex05_3"].reference(**case)  # the long run's value


def _calls_engine_directly(P, N, stage, position):
    from pipemare_lite.staleness import exact_forward_delay

    return exact_forward_delay("async", P, N, stage, position)


def _through_an_alias(P, N, stage, position):
    return renamed("async", P, N, stage, position)


def _through_a_module(P, N, stage, position):
    return staleness.expected_forward_delay("async", P, N, stage, position)


def _my_helper(P, N, stage, position):
    return _calls_engine_directly(P, N, stage, position)


def _through_a_helper(P, N, stage, position):
    return _my_helper(P, N, stage, position)


def _measures_instead_of_deriving(P, N):
    from pipemare_lite.memory import peak_stash_copies
    from pipemare_lite.schedules import build_schedule

    return peak_stash_copies(build_schedule("pipedream", P, N, num_minibatches=40))


from pipemare_lite import staleness  # noqa: E402  (used by _through_a_module)
from pipemare_lite.staleness import exact_forward_delay as renamed  # noqa: E402


@pytest.mark.parametrize("exercise_id, answer, named", [
    ("ex05_2", _calls_engine_directly, "exact_forward_delay"),
    ("ex05_2", _through_an_alias, "exact_forward_delay"),
    ("ex05_2", _through_a_module, "expected_forward_delay"),
    ("ex05_2", _through_a_helper, "exact_forward_delay"),
    ("ex05_2", lambda P, N, stage, position: renamed("async", P, N, stage, position),
     "exact_forward_delay"),
    ("ex05_3", _measures_instead_of_deriving, "build_schedule, peak_stash_copies"),
], ids=lambda v: getattr(v, "__name__", str(v)))
def test_an_answer_that_calls_the_engines_solution_fails(exercise_id, answer, named):
    # each of these returns the right numbers: without the check they would pass
    case = EXERCISES[exercise_id].cases()[0]
    assert answer(*case.values()) == EXERCISES[exercise_id].reference(**case)
    result = run_checks(exercise_id, answer)
    assert result.status == "failed", result.message
    assert f"uses the engine's own {named}: derive it yourself" in result.message


def test_a_helper_that_only_shares_an_engine_name_is_fine():
    def build_schedule(P, N):  # the student's own function, named like the engine's
        return [-(-(P - 1 - s) // N) for s in range(P)]

    def answer(P, N):
        return build_schedule(P, N)

    assert run_checks("ex05_3", answer).passed


def test_version_hooks_without_a_view_fail_on_linear_and_pass_on_layernorm():
    # a pack hook that only recognises the parameters themselves misses Linear's weight.t()
    def parameters_only(params, weights):
        index_of = {id(p): i for i, p in enumerate(params)}
        return ((lambda t: ("w", index_of[id(t)]) if id(t) in index_of else t),
                (lambda t: weights[t[1]] if isinstance(t, tuple) else t))

    result = run_checks("ex05_1", parameters_only)
    assert result.status == "failed" and result.cases_passed == 0, result.message
    assert "on a linear stage" in result.message
    from pipemare_lite.exercises.references import gradients_with_hooks, stage_worker_gradients

    for reads in ("stash", "live"):  # LayerNorm and Conv2d save the parameter itself...
        got = gradients_with_hooks(parameters_only, "conv", reads)
        expected = stage_worker_gradients("conv", reads)
        assert EXERCISES["ex05_1"].compare(got, expected) is None
