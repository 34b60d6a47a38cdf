"""The exercises of chapters 00-12, checked against the engine.

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

from pipemare_lite.book.exercises import EXERCISES, check, run_checks
from pipemare_lite.schedules import build_schedule

# --- plain solutions, written from the definitions ----------------------------------------


def gpipe_action_count(P, M):
    return 2 * P * M


def naive_utilization(stage_costs):
    # one rank computes at a time: the run is all stages' work end to end
    return [cost / sum(stage_costs) for cost in stage_costs]


def naive_order(P):
    return [[f"{r}F0", f"{r}B0"] for r in range(P)]


def naive_start_times(P, F, B):
    # stage r's forward waits for r forwards above it; the last stage's backward starts when
    # all P forwards are done, and each stage's backward waits for the one below it
    return [[r * F, P * F + (P - 1 - r) * B] for r in range(P)]


def count_p2p_messages(schedule):
    last = schedule.num_virtual_stages - 1
    messages = 0
    for rank, _, action in schedule.actions():
        if action.kind == "F" and action.stage > 0:
            messages += schedule.rank_of(action.stage - 1) != rank
        if action.kind in ("B", "I") and action.stage < last:
            messages += schedule.rank_of(action.stage + 1) != rank
    return messages


def v_messages_per_microbatch(P, v):
    return 2 * v * (P - 1)  # every hop changes rank but the v - 1 turns


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


def smallest_m_below(P, target):
    exact = Fraction(str(target))  # 0.1 means 1/10; the float 0.1 is slightly above it
    return next(M for M in itertools.count(1) if Fraction(P - 1, M + P - 1) < exact)


M_FOR_10_PERCENT = smallest_m_below(8, 0.1)


def delayed_gd(alpha, lam, tau, steps):
    w = [1.0] * (tau + 1)  # w[-tau..0]: a constant past
    for _ in range(steps):
        w.append(w[-1] - alpha * lam * w[-1 - tau])
    return w[tau:]


def delayed_gd_coefficients(alpha, lam, tau, momentum):
    # z^(tau+2) - (1+m) z^(tau+1) + m z^tau + alpha lam z: the recurrence times z^(1-t+tau),
    # one factor z more than needed when tau >= 1 (accepted: it adds a root at 0)
    coefficients = [1.0, -(1.0 + momentum), momentum] + [0.0] * tau
    coefficients[tau + 1] += alpha * lam
    return coefficients


def max_stable_step(tau, momentum):
    import numpy as np

    def stable(x):
        return np.max(np.abs(np.roots(delayed_gd_coefficients(x, 1.0, tau, momentum)))) < 1

    low, high = 0.0, 4.0  # plain bisection: the stable steps form one interval here
    while high - low > 1e-9:
        middle = (low + high) / 2
        low, high = (middle, high) if stable(middle) else (low, middle)
    return low


def first_to_blow_up(lr, sharpness, delays):
    # each stage's recurrence w[t+1] = w[t] - lr lam w[t-tau]; growth = largest |root|
    import numpy as np

    growth = []
    for lam, tau in zip(sharpness, delays):
        polynomial = np.zeros(tau + 2)
        polynomial[0], polynomial[1] = 1.0, -1.0
        polynomial[-1] += lr * lam
        growth.append(max(abs(np.roots(polynomial))) if lam > 0 else 1.0)
    unstable = [s for s, g in enumerate(growth) if g > 1.0]
    return max(unstable, key=lambda s: (growth[s], -s)) if unstable else None


def _exact_bound(tau):
    return 2 * math.sin(math.pi / (2 * (2 * tau + 1)))


def largest_stable_depth(step, num_microbatches, bound=_exact_bound):
    # solved: the largest delay strictly inside (the bound inverted, then checked against the
    # bound itself), then the largest P with ceil((2P - 1) / N) <= it, i.e. 2P - 1 <= N tau
    if step >= 2:
        return 0
    tau = math.ceil((math.pi / (2 * math.asin(step / 2)) - 1) / 2) - 1
    while tau > 0 and step >= bound(tau):
        tau -= 1
    while step < bound(tau + 1):
        tau += 1
    return (num_microbatches * tau + 1) // 2


def t1_factor(update, tau, horizon):
    # p falls linearly from 1 to 0 over the horizon and stays 0; K = 0 switches T1 off
    p = 0.0 if horizon == 0 else 1.0 - min(update / horizon, 1.0)
    return tau ** -p


def first_update_outside(lr, lam, tau, horizon):
    bound = 2 * math.sin(math.pi / (2 * (2 * tau + 1)))
    for k in range(horizon + 1):
        if lr * lam * t1_factor(k, tau, horizon) >= bound:
            return k
    return None


def weight_memory_by_kind(method, param_bytes, num_microbatches, optimizer):
    P, W = len(param_bytes), sum(param_bytes)
    stash = {"pipedream": sum(-(-(P - 1 - s) // num_microbatches) * b
                              for s, b in enumerate(param_bytes)),
             "2bw": W}.get(method, 0)
    return {"weights": W, "stash": stash, "t2_buffer": W if method == "pipemare" else 0,
            "optimizer": {"sgd": 0, "momentum": 1, "adam": 2}[optimizer] * W}


def pick_for_budget(rows, budget_bytes):
    fitting = [(r["utilization"], -r["device_peak"], -i, r["method"])
               for i, r in enumerate(rows)
               if r["utilization"] is not None and r["device_peak"] <= budget_bytes]
    return max(fitting)[3] if fitting else None


def gpipe_comm_rows(P, N):
    # all forwards, then all backwards; a receive just before its action, a send just after
    rows = []
    for r in range(P):
        row = []
        for m in range(N):
            row += [f"{r}RECV_F{m}"] * (r > 0) + [f"{r}F{m}"] + [f"{r}SEND_F{m}"] * (r < P - 1)
        for m in range(N):
            row += [f"{r}RECV_B{m}"] * (r < P - 1) + [f"{r}B{m}"] + [f"{r}SEND_B{m}"] * (r > 0)
        rows.append(row + [f"{r}U0"])
    return rows


def utilization_from_trace(entries, num_ranks):
    busy = sum(end - start for _rank, _action, start, end in entries)
    makespan = max(e[3] for e in entries) - min(e[2] for e in entries)
    return busy / (num_ranks * makespan)


def t2_step(delta, w_old, w_new, gamma, distance):
    # the running average of the changes, then back from the current weights by d averages
    averaged = [gamma * d + (1 - gamma) * (new - old) for d, old, new in zip(delta, w_old, w_new)]
    return averaged, [w - distance * d for w, d in zip(w_new, averaged)]


def updates_until_calibrated(gamma, tolerance):
    # delta_k = c (1 - gamma^k): the missing part gamma^k shrinks by gamma per update
    k, missing = 1, gamma
    while missing > tolerance:
        k, missing = k + 1, missing * gamma
    return k


def look_ahead_factor(mu, s):
    return sum(mu ** k for k in range(1, s + 1))


def smallest_accumulation(P, max_delay):
    return -(-(2 * P - 1) // max_delay)  # ceil((2P - 1) / N) <= d  iff  N >= (2P - 1) / d


SOLUTIONS = {
    "ex00_1": gpipe_action_count,
    "ex01_1": naive_order,
    "ex01_2": naive_utilization,
    "ex01_3": naive_start_times,
    "ex02_1": gpipe_order,
    "ex02_2": idle_fraction,
    "ex02_3": smallest_m_below,
    "ex03_1": one_f_one_b_order,
    "ex03_2": peak_activations_1f1b,
    "ex04_1": p2p_messages_per_microbatch,
    "ex04_2": interleaved_idle_fraction,
    "ex04_3": count_p2p_messages,
    "ex04_4": v_messages_per_microbatch,
    "ex06_1": delayed_gd,
    "ex06_2": delayed_gd_coefficients,
    "ex06_3": max_stable_step,
    "ex05_1": version_hooks,
    "ex05_2": async_forward_delay,
    "ex05_3": pipedream_stash_copies,
    "ex07_1": first_to_blow_up,
    "ex07_2": largest_stable_depth,
    "ex08_1": t1_factor,
    "ex08_2": first_update_outside,
    "ex10_1": weight_memory_by_kind,
    "ex10_2": pick_for_budget,
    "ex11_1": gpipe_comm_rows,
    "ex11_2": utilization_from_trace,
    "ex09_1": t2_step,
    "ex09_2": updates_until_calibrated,
    "ex12_1": look_ahead_factor,
    "ex12_2": smallest_accumulation,
}

# --- typical mistakes ---------------------------------------------------------------------

WRONG = {
    "ex00_1": lambda P, M: P * M,  # forgot the backwards
    "ex01_1": lambda P: [[f"{r}B0", f"{r}F0"] for r in range(P)],
    "ex01_2": lambda stage_costs: [1 / len(stage_costs)] * len(stage_costs),  # equal stages
    "ex02_1": lambda P, M: [  # backwards in reverse order
        [f"{r}F{m}" for m in range(M)] + [f"{r}B{m}" for m in reversed(range(M))]
        for r in range(P)
    ],
    "ex02_2": lambda P, M: (P - 1) / M,  # the bubble ratio, not the idle fraction
    "ex02_3": lambda P, target: next(  # "<=" where "below" means "<"
        M for M in itertools.count(1) if Fraction(P - 1, M + P - 1) <= Fraction(str(target))
    ),
    "ex03_1": gpipe_order,
    "ex03_2": lambda P, M: [P - s for s in range(P)],  # forgot that M may be < P
    "ex04_1": lambda P, v: v * P - 1,  # forgot the backward
    "ex04_2": lambda P, M, v: (P - 1) / (M + P - 1),  # ignored v
    "ex01_3": lambda P, F, B: [[r * F, P * F + (P - 1 - r) * F] for r in range(P)],  # F hops
    "ex04_4": lambda P, v: 2 * (v * P - 1),  # the round-robin count: the turns counted
    "ex04_3": lambda schedule: sum(  # forwards only
        a.kind == "F" and a.stage > 0 and schedule.rank_of(a.stage - 1) != r
        for r, _, a in schedule.actions()
    ),
    # off by one: the gradient of the weight tau + 1 updates back
    "ex06_1": lambda alpha, lam, tau, steps: delayed_gd(alpha, lam, tau + 1, steps),
    # forgot the momentum terms
    "ex06_2": lambda alpha, lam, tau, momentum: delayed_gd_coefficients(alpha, lam, tau, 0.0),
    # the approximation pi / (2 tau + 1), and no momentum at all
    "ex06_3": lambda tau, momentum: math.pi / (2 * tau + 1),
    "ex05_1": lambda params, weights: (lambda t: t.clone(), lambda t: t),  # always F's weights
    # the recalled worst case, ignoring the position in the minibatch
    "ex05_2": lambda P, N, stage, position: -(-(2 * (P - stage) - 1) // N),
    "ex05_3": lambda P, N: [P - 1 - s for s in range(P)],  # one copy per in-flight microbatch
    # always the first stage
    "ex07_1": lambda lr, sharpness, delays: 0,
    # the delay in microbatches, not updates (N ignored)
    "ex07_2": lambda step, num_microbatches: largest_stable_depth(step, 1),
    # the delay's full division kept for ever (no anneal)
    "ex08_1": lambda update, tau, horizon: 1 / tau,
    # the bound of delay 1 for every stage
    "ex08_2": lambda lr, lam, tau, horizon: first_update_outside(lr, lam, 1, horizon),
    # PipeDream's stash with an update per microbatch (N ignored)
    "ex10_1": lambda method, param_bytes, n, optimizer: weight_memory_by_kind(
        method, param_bytes, 1, optimizer),
    # the smallest peak that fits
    "ex10_2": lambda rows, budget: min(
        (r for r in rows if r["utilization"] is not None and r["device_peak"] <= budget),
        key=lambda r: r["device_peak"], default={"method": None})["method"],
    # no update at the end of the row
    "ex11_1": lambda P, N: [row[:-1] for row in gpipe_comm_rows(P, N)],
    # busy time over the last end: the makespan measured from 0
    "ex11_2": lambda entries, num_ranks: sum(e[3] - e[2] for e in entries) / (
        num_ranks * max(e[3] for e in entries)),
    # the backward extrapolated from the weights before the update
    "ex09_1": lambda delta, w_old, w_new, gamma, distance: (
        t2_step(delta, w_old, w_new, gamma, distance)[0],
        [w - distance * d for w, d in zip(w_old, t2_step(delta, w_old, w_new, gamma, 0)[0])]),
    # one update too few: gamma^k < tolerance checked before counting the update
    "ex09_2": lambda gamma, tolerance: updates_until_calibrated(gamma, tolerance) - 1,
    # weight prediction's scale, not the momentum's
    "ex12_1": lambda mu, s: float(s),
    # rounded the delay down
    "ex12_2": lambda P, max_delay: max(1, (2 * P - 1) // max_delay),
}


def test_solutions_cover_every_exercise():
    assert set(SOLUTIONS) == set(EXERCISES) == set(WRONG)


@pytest.mark.parametrize("exercise_id", sorted(SOLUTIONS))
def test_plain_solution_passes(exercise_id, capsys):
    assert check(exercise_id, SOLUTIONS[exercise_id]).passed is True
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
    failing = result.failing_case  # the case the message shows (every case runs)
    assert failing in exercise.cases()
    call = exercise.describe_case(failing)  # the call, or a harness case in words
    assert call in said
    said = said.replace(call, "")
    # the count of cases passed is no answer (it may equal the expected value by chance)
    said = re.sub(r"\d+ of \d+ cases passed", "", said)
    expected = exercise.reference(*failing.values())
    for text in _texts_of(expected):
        assert not re.search(rf"(?<![\w.]){re.escape(text)}(?![\w])", said), (text, said)
    if (exercise.harness is None and isinstance(expected, list) and expected
            and isinstance(expected[0], list)):
        # schedule rows: every action it names is one the student wrote
        written = {a for row in answer(*failing.values()) for a in row}
        assert set(re.findall(r"\d+[FBIWU]\d+", said)) <= written, said


def test_smallest_m_is_the_engines_on_every_case():
    from pipemare_lite.analysis.simulate import OpCosts, metrics, simulate
    from pipemare_lite.schedules import build_schedule

    def measured(P, M):  # exact: the simulated times are sums of integer costs
        run = metrics(simulate(build_schedule("gpipe", P, M), OpCosts()))
        return 1 - Fraction(sum(run.busy_per_rank)) / (P * Fraction(run.makespan))

    exercise = EXERCISES["ex02_3"]
    for case in exercise.cases():
        P, target = case["P"], Fraction(str(case["target"]))
        smallest = next(M for M in itertools.count(1) if measured(P, M) < target)
        assert exercise.reference(**case) == smallest, case
    assert M_FOR_10_PERCENT == exercise.reference(8, 0.1)
    boundary = [c for c in exercise.cases() if c["P"] > 1
                and measured(c["P"], exercise.reference(**c) - 1) == Fraction(str(c["target"]))]
    assert len(boundary) >= 3  # cases where "<=" and "<" differ: the boundary is tested


def test_known_mistakes_are_named_without_the_answer():
    named = {
        "ex02_2": (lambda P, M: (P - 1) / M, "bubble ratio"),
        "ex03_2": (lambda P, M: [max(0, min(P - 1 - s, M)) for s in range(P)], "P-1-s"),
        "ex02_3": (WRONG["ex02_3"], "strictly less"),
        "ex04_1": (lambda P, v: v * P - 1, "forward only"),
        "ex00_1": (lambda P, M: P * M, "one kind of action"),
    }
    for exercise_id, (answer, words) in named.items():
        message = run_checks(exercise_id, answer).message
        assert "A known mistake:" in message and words in message, message
    # a wrong answer that matches no known mistake gets no such line
    assert "known mistake" not in run_checks("ex02_2", lambda P, M: 0.5).message


def test_numbers_say_too_high_or_too_low_and_the_first_case_shown_is_representative():
    low = run_checks("ex02_2", lambda P, M: (P - 1) / (M + P - 1) / 2)
    assert "too low" in low.message
    high = run_checks("ex04_2", lambda P, M, v: (P - 1) / (M + P - 1))
    assert "too high" in high.message
    # wrong everywhere, P = 1 included: the case shown is not the degenerate one
    result = run_checks("ex01_2", lambda stage_costs: [0.5 / len(stage_costs)] * len(stage_costs))
    assert len(result.failing_case["stage_costs"]) > 1, result.failing_case
    assert f"0 of {result.cases_total} cases passed" in result.message


def test_hints_do_not_state_the_answer():
    assert "one forward and one backward" not in " ".join(EXERCISES["ex00_1"].hints)
    assert "forwards before backwards" not in " ".join(EXERCISES["ex01_1"].hints)
    for exercise in EXERCISES.values():
        for mistake in exercise.mistakes:
            assert "min(P - s" not in mistake.message and "2(vP" not in mistake.message


def test_hints_form_a_ladder_that_ends_in_the_whole_method():
    """Every exercise has at least two hints: ``check`` shows the first (a nudge), and the
    last, asked for with ``hint(id, k)``, spells out the whole method in words, so a stuck
    student always has a way on. "Substantive" mechanically: the last rung says it is the
    whole method, is longer than the first and than 30 words, and is words, not code."""
    from pipemare_lite.book.exercises import hint

    for exercise in EXERCISES.values():
        rungs = exercise.hints
        assert len(rungs) >= 2, (exercise.id, "one hint only: add rungs up to the whole method")
        last = rungs[-1]
        assert last.startswith("The whole method"), (exercise.id, last[:60])
        assert len(last.split()) > max(30, len(rungs[0].split())), (exercise.id, last)
        assert not re.search(r"\bdef |\blambda\b|\bimport |\n|  ", last), (exercise.id, last)
        assert len(set(rungs)) == len(rungs), exercise.id
        # the first rung is what check() prints: the message points to the next one
        message = run_checks(exercise.id, NotImplemented if exercise.kind == "constant"
                             else (lambda *a: object())).message
        if "Hint:" in message:
            assert f"hint({exercise.id!r}, 2)" in message and rungs[0] in message, message
    text = hint("ex07_2", 3)
    assert text.startswith("Hint 3 of 3 (ex07_2): The whole method") and "Next" not in text
    assert "Next: hint('ex12_2', 3)" in hint("ex12_2", 2)
    with pytest.raises(ValueError, match="ex07_2 has hints 1 to 3"):
        hint("ex07_2", 4)


def test_checks_import_no_torch():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # any import of torch now fails
        from pipemare_lite.book.exercises import list_exercises, run_checks
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


def test_engine_closed_forms_agree_with_the_simulator_backed_exercises():
    # a student who derives the closed form must pass the check, which uses the simulator:
    # the engine's closed forms give the reference's value on every case. (Before issue 18
    # this passed the engine functions themselves to run_checks; an answer that *is* the
    # engine's function is now rejected, see the next test.)
    from pipemare_lite.analysis import formulas

    closed_forms = {
        "ex02_2": formulas.idle_fraction_gpipe,
        "ex03_2": lambda P, M: [formulas.peak_inflight_1f1b(P, M, s) for s in range(P)],
        "ex04_2": formulas.idle_fraction_interleaved,
    }
    for exercise_id, closed_form in closed_forms.items():
        exercise = EXERCISES[exercise_id]
        for arguments in exercise.cases():
            got = closed_form(*arguments.values())
            assert exercise.compare(got, exercise.reference(*arguments.values())) is None, (
                exercise_id, arguments)
    for case in EXERCISES["ex02_3"].cases():
        assert formulas.microbatches_for_idle_below(**case) == EXERCISES["ex02_3"].reference(**case)


def test_answers_that_only_wrap_the_engine_are_rejected():
    from pipemare_lite.analysis import formulas
    from pipemare_lite.analysis.formulas import idle_fraction_gpipe
    from pipemare_lite.analysis.simulate import simulate_and_measure

    def via_the_simulator(P, M):
        return simulate_and_measure(build_schedule("gpipe", P, M))[1].idle_fraction

    def via_a_helper(P, M):
        return helper(P, M)

    def helper(P, M):
        return formulas.idle_fraction_gpipe(P, M)

    def via_getattr(P, M):  # invisible to the code's names: caught while it runs
        return getattr(formulas, "idle_fraction_" + "gpipe")(P, M)

    for answer in (idle_fraction_gpipe, via_the_simulator, via_a_helper, via_getattr):
        result = run_checks("ex02_2", answer)
        assert result.status == "failed" and "uses the engine's" in result.message, answer
    assert run_checks("ex02_2", idle_fraction).passed  # the plain formula still passes



# --- chapter 06: answers that only call the engine are rejected ---------------------------


def _engine_wrappers():
    from pipemare_lite.analysis import theory

    radius = theory.spectral_radius
    return {
        "ex06_1": [theory.simulate_delayed_gd,
                   lambda a, lam, tau, n: list(theory.simulate_delayed_gd(a, lam, tau, n)),
                   lambda a, lam, tau, n: theory.simulate_discrepancy_gd(a, lam, tau, 0.0, n)],
        "ex06_2": [theory.characteristic_polynomial,
                   lambda a, lam, tau, m: theory.discrepancy_polynomial(a, lam, tau, 0.0,
                                                                        momentum=m)],
        "ex06_3": [
            lambda tau, m: theory.largest_stable_step(lambda x: radius(x, 1.0, tau, m), 5.0),
            # through a helper of the student's, and an alias
            lambda tau, m: _alias_search(tau, m),
        ],
    }


def _alias_search(tau, m):
    from pipemare_lite.analysis.theory import largest_stable_step as search
    from pipemare_lite.analysis.theory import spectral_radius

    return search(lambda x: spectral_radius(x, 1.0, tau, m), 5.0)


def _bisect(stable, low=0.0, high=4.0):
    while high - low > 1e-9:
        middle = (low + high) / 2
        low, high = (middle, high) if stable(middle) else (low, middle)
    return low


@pytest.mark.parametrize("exercise_id", ["ex06_1", "ex06_2", "ex06_3"])
def test_answers_that_call_the_engine_are_rejected(exercise_id):
    for answer in _engine_wrappers()[exercise_id]:
        result = run_checks(exercise_id, answer)
        assert result.status == "failed", result.message
        assert "uses the engine's" in result.message and "yourself" in result.message


def test_an_answer_may_use_the_polynomial_the_chapter_showed_before():
    # ex06_3 comes after the engine's characteristic_polynomial is shown: using it is fine
    import numpy as np

    from pipemare_lite.analysis.theory import characteristic_polynomial

    def max_stable_step(tau, momentum):
        return _bisect(lambda x: max(abs(np.roots(characteristic_polynomial(x, 1, tau,
                                                                             momentum)))) < 1)

    assert run_checks("ex06_3", max_stable_step).passed


def test_chapter_06_cases_start_with_what_the_chapter_asks():
    # the largest stable step for tau = 5 with momentum 0.9 comes first; never momentum 0,
    # whose answer the chapter prints above the exercise (issue 45)
    assert EXERCISES["ex06_3"].cases()[0] == {"tau": 5, "momentum": 0.9}
    assert all(case["momentum"] > 0 for case in EXERCISES["ex06_3"].cases())
    # heavy ball with no delay: two terms share the power z^1
    assert {"alpha": 0.5, "lam": 1.0, "tau": 0, "momentum": 0.9} in EXERCISES["ex06_2"].cases()


def test_largest_stable_step_reference_is_the_closed_form_where_one_exists():
    # recalled bound 2 sin(pi/(2(2 tau+1))) without momentum; Jury's 1 - m for tau = 1
    reference = EXERCISES["ex06_3"].reference
    for tau in (0, 2, 5, 9):
        assert reference(tau, 0.0) == pytest.approx(2 * math.sin(math.pi / (2 * (2 * tau + 1))),
                                                    abs=1e-8)
    assert reference(1, 0.5) == pytest.approx(0.5, abs=1e-8)
    assert reference(0, 0.9) == pytest.approx(2 * 1.9, abs=1e-8)


# --- chapter 05: the measured references, and answers that only call the engine -----------


def test_engine_closed_forms_agree_with_the_measured_references():
    # the engine's own closed forms are right, but a student may not hand them in (below)
    from pipemare_lite.analysis.memory import peak_stash_copies
    from pipemare_lite.analysis.staleness import exact_forward_delay

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
    from pipemare_lite.analysis.staleness import exact_forward_delay

    return exact_forward_delay("async", P, N, stage, position)


def _through_an_alias(P, N, stage, position):
    return renamed("async", P, N, stage, position)


def _through_a_module(P, N, stage, position):
    return staleness.expected_forward_delay("async", P, N, stage, position)


def _my_helper(P, N, stage, position):
    return _calls_engine_directly(P, N, stage, position)


def _through_a_helper(P, N, stage, position):
    return _my_helper(P, N, stage, position)


def _reads_the_versions_table(P, N, stage, position):
    # the chapter measures with weight_versions before ex05_2: an answer may not
    from pipemare_lite.analysis.staleness import steady_state_minibatches, weight_versions

    schedule = build_schedule("async", P, N, num_minibatches=math.ceil((2 * P - 1) / N) + 3)
    steady = steady_state_minibatches(schedule)
    return next(r.forward_delay for r in weight_versions(schedule).rows
                if r.stage == stage and r.minibatch in steady and r.microbatch % N == position)


def _measures_instead_of_deriving(P, N):
    from pipemare_lite.analysis.memory import peak_stash_copies

    return peak_stash_copies(build_schedule("pipedream", P, N, num_minibatches=40))


def _through_the_memory_model(P, N):
    # the memory model of chapters 01 and 03, in units of one weight copy per stage
    from pipemare_lite.analysis.memory import MemoryProfile, memory_by_kind

    profile = MemoryProfile(param_bytes=[1] * P, activation_bytes=[0] * P)
    schedule = build_schedule("pipedream", P, N, num_minibatches=40)
    return [kinds["stash"] for kinds in memory_by_kind(schedule, profile)]


from pipemare_lite.analysis import staleness  # noqa: E402  (used by _through_a_module)
from pipemare_lite.analysis.staleness import exact_forward_delay as renamed  # noqa: E402


@pytest.mark.parametrize("exercise_id, answer, named", [
    ("ex05_2", _calls_engine_directly, "`exact_forward_delay`"),
    ("ex05_2", _through_an_alias, "`exact_forward_delay`"),
    ("ex05_2", _through_a_module, "`expected_forward_delay`"),
    ("ex05_2", _through_a_helper, "`exact_forward_delay`"),
    ("ex05_2", lambda P, N, stage, position: renamed("async", P, N, stage, position),
     "`exact_forward_delay`"),
    ("ex05_2", _reads_the_versions_table, "`weight_versions`"),
    ("ex05_3", _measures_instead_of_deriving, "`peak_stash_copies`"),
    ("ex05_3", _through_the_memory_model, "`memory_by_kind`"),
], ids=lambda v: getattr(v, "__name__", str(v)))
def test_an_answer_that_calls_the_engines_solution_fails(exercise_id, answer, named):
    # each of these returns the right numbers: without the check they would pass
    case = EXERCISES[exercise_id].cases()[0]
    assert answer(*case.values()) == EXERCISES[exercise_id].reference(**case)
    result = run_checks(exercise_id, answer)
    assert result.status == "failed", result.message
    assert f"uses the engine's {named}" in result.message and "yourself" in result.message


def test_an_answer_may_read_the_schedule_it_derives_from():
    # the builders are the chapter's instruments from its first cell: counting the updates
    # before a forward in the engine's own order is a derivation, and passes
    def async_forward_delay(P, N, stage, position):
        k = math.ceil((2 * P - 1) / N) + 1  # a minibatch of the steady state
        row = build_schedule("async", P, N, num_minibatches=k + 3).ranks[stage]
        m = k * N + position
        forward = next(i for i, a in enumerate(row) if a.kind == "F" and a.index == m)
        return k - sum(a.kind == "U" for a in row[:forward])  # applied to k, read k - delay

    assert run_checks("ex05_2", async_forward_delay).passed


def test_a_helper_that_only_shares_an_engine_name_is_fine():
    def peak_stash_copies(P, N):  # the student's own function, named like the engine's
        return [-(-(P - 1 - s) // N) for s in range(P)]

    def answer(P, N):
        return peak_stash_copies(P, N)

    assert run_checks("ex05_3", answer).passed


def test_version_hooks_without_a_view_fail_on_linear_and_pass_on_conv():
    # a pack hook that only recognises the parameters themselves misses Linear's weight.t()
    def parameters_only(params, weights):
        index_of = {id(p): i for i, p in enumerate(params)}
        return ((lambda t: ("w", index_of[id(t)]) if id(t) in index_of else t),
                (lambda t: weights[t[1]] if isinstance(t, tuple) else t))

    result = run_checks("ex05_1", parameters_only)
    # every case runs: the stages with a Linear fail when the backward must read the stash
    # (the view passed through reads the live weight); with the live weights, and on the
    # Conv2d stage (which saves the parameter itself), it is right (5 of the 8 fixed cases)
    cases = EXERCISES["ex05_1"].cases()
    right = [c["model"] == "conv" or c["backward_reads"] == "live" for c in cases]
    assert sum(right[:8]) == 5
    assert result.status == "failed" and result.cases_passed == sum(right), result.message
    assert result.failing_case == {"model": "linear", "backward_reads": "stash", "seed": 5}
    assert "on a linear stage" in result.message
    from pipemare_lite.book.exercises.harness import gradients_with_hooks
    from pipemare_lite.book.exercises.references import stage_worker_gradients

    for reads in ("stash", "live"):
        got = gradients_with_hooks(parameters_only, "conv", reads)
        expected = stage_worker_gradients("conv", reads)
        assert EXERCISES["ex05_1"].compare(got, expected) is None


def test_version_hooks_that_call_the_engines_hooks_are_rejected():
    from pipemare_lite.engine.stage import StageWorker
    from pipemare_lite.methods.versions import param_ref

    def through_param_ref(params, weights):
        index_of = {id(p): i for i, p in enumerate(params)}

        def pack(t):
            ref = param_ref(t, index_of)
            return t if ref is None else ref

        return pack, lambda t: t

    def through_a_worker(params, weights):
        return StageWorker._packer, StageWorker._unpacker

    for answer, named in ((through_param_ref, "`param_ref`"), (through_a_worker, "`StageWorker`")):
        result = run_checks("ex05_1", answer)
        assert result.status == "failed" and f"uses the engine's {named}" in result.message, (
            result.message)


def test_the_gradient_comparator_names_what_is_wrong_without_the_values():
    from pipemare_lite.book.exercises.compare import compare_gradients

    right = ([[1.0, 2.0]], [[[0.5]], [0.25]])
    assert compare_gradients(right, right) is None
    assert compare_gradients(([[1.0, 2.0 + 1e-13]], [[[0.5]], [0.25]]), right) is None
    assert "input gradient" in compare_gradients(([[1.0, 2.5]], right[1]), right)
    assert "parameter 1 without" in compare_gradients((right[0], [[[0.5]], None]), right)
    assert "parameter 0 a gradient" in compare_gradients((right[0], [[[0.4]], [0.25]]), right)
    assert "one gradient per parameter" in compare_gradients((right[0], [[[0.5]]]), right)
    assert "expected an input gradient" in compare_gradients("hooks", right)
    for problem in (compare_gradients(([[1.0, 2.5]], right[1]), right),
                    compare_gradients((right[0], [[[0.4]], [0.25]]), right)):
        assert "0.5" not in problem and "0.25" not in problem and "2.0" not in problem


# --- chapter 07: stages on chapter 06's map ------------------------------------------------


def _furthest_outside(lr, sharpness, delays):
    ratios = [lr * lam / (2 * math.sin(math.pi / (2 * (2 * tau + 1))))
              for lam, tau in zip(sharpness, delays)]
    return ratios.index(max(ratios)) if max(ratios) >= 1 else None


def _pipedream_delay_depth(step, num_microbatches):
    # solved like the right answer, but with PipeDream's delay ceil((P - 1) / N) <= tau
    tau = math.ceil((math.pi / (2 * math.asin(step / 2)) - 1) / 2) - 1
    while tau > 0 and step >= _exact_bound(tau):
        tau -= 1
    while step < _exact_bound(tau + 1):
        tau += 1
    return num_microbatches * tau + 1


def test_chapter_07_known_mistakes_are_named():
    named = {
        "ex07_1": (_furthest_outside, "furthest outside"),
        "ex07_2": (_pipedream_delay_depth, "PipeDream's delay"),
    }
    for exercise_id, (answer, words) in named.items():
        message = run_checks(exercise_id, answer).message
        assert "A known mistake:" in message and words in message, message


def test_chapter_07_answers_that_call_the_engine_are_rejected():
    from pipemare_lite.analysis import stage_stability

    wrappers = {
        "ex07_1": [stage_stability.fastest_growing_stage,
                   lambda lr, lam, tau: max(
                       (p for p in stage_stability.stage_points(lr, lam, tau) if p.radius > 1),
                       key=lambda p: p.radius, default=None)],
        "ex07_2": [stage_stability.largest_stable_pipeline,
                   lambda step, n: stage_stability.largest_stable_pipeline(step, n)],
    }
    for exercise_id, answers in wrappers.items():
        for answer in answers:
            result = run_checks(exercise_id, answer)
            assert result.status == "failed", result.message
            assert "uses the engine's" in result.message


def test_chapter_07_may_use_chapter_06_instruments_but_ex07_2_is_solved_not_searched():
    # the bound, the roots and chapter 05's delay formula are shown before chapter 07; ex07_2
    # asks for the delay solved for P, so trying P = 1, 2, ... (the old ask), with the
    # engine's functions or by hand, is stopped as a search, with a message that says so
    from pipemare_lite.analysis.staleness import expected_forward_delay
    from pipemare_lite.analysis.theory import spectral_radius, stability_bound

    def first_to_blow_up(lr, sharpness, delays):
        radii = [spectral_radius(lr, lam, tau) for lam, tau in zip(sharpness, delays)]
        best = max(radii)
        return radii.index(best) if best > 1 else None

    def solved_with_the_engines_bound(step, n):  # the solution above, on the engine's bound
        return largest_stable_depth(step, n, bound=stability_bound)

    def searched_with_the_engine(step, n):
        P = 0
        while step < stability_bound(expected_forward_delay("async", P + 1, n, 0)):
            P += 1
        return P

    def searched_by_hand(step, n):
        P = 0
        while step < _exact_bound(-(-(2 * P + 1) // n)):
            P += 1
        return P

    assert run_checks("ex07_1", first_to_blow_up).passed
    assert run_checks("ex07_2", solved_with_the_engines_bound).passed
    for answer in (searched_with_the_engine, searched_by_hand):
        searched = run_checks("ex07_2", answer)
        assert searched.status == "failed" and 0 < searched.cases_passed, searched.message
        assert "lines of Python on this one case and was stopped" in searched.message
        assert "A known mistake: trying candidates one by one" in searched.message
        if answer is searched_by_hand:  # cheap lines: it gets as far as the small steps
            assert searched.failing_case["step"] < 0.01, searched.message


def test_chapter_07_cases_start_with_the_chapter_setting_and_travel():
    import pickle

    growth = EXERCISES["ex07_1"].cases()
    assert growth[0]["delays"] == [8, 7, 6, 5, 4, 3, 2, 1]  # P = 8, N = 2
    assert any(EXERCISES["ex07_1"].reference(**c) is None for c in growth)
    depth = EXERCISES["ex07_2"].cases()
    assert depth[0] == {"step": 0.25, "num_microbatches": 2}
    assert any(EXERCISES["ex07_2"].reference(**c) == 0 for c in depth)
    assert pickle.loads(pickle.dumps(growth)) == growth


# --- chapter 08: T1 -------------------------------------------------------------------------


def test_chapter_08_known_mistakes_are_named():
    def inverted(update, tau, horizon):
        return tau ** -min(update / horizon, 1.0) if horizon else 1.0

    def unclamped(update, tau, horizon):
        return tau ** -(1.0 - update / horizon) if horizon else 1.0

    def without_t1(lr, lam, tau, horizon):
        return 0 if lr * lam >= 2 * math.sin(math.pi / (2 * (2 * tau + 1))) else None

    named = {
        "ex08_1": [(inverted, "the wrong way"), (unclamped, "stay 1")],
        "ex08_2": [(without_t1, "ignores T1")],
    }
    for exercise_id, answers in named.items():
        for answer, words in answers:
            message = run_checks(exercise_id, answer).message
            assert "A known mistake:" in message and words in message, message


# --- chapter 10 ---------------------------------------------------------------------------


def _no_t2_buffer(method, param_bytes, num_microbatches, optimizer):
    return {**weight_memory_by_kind(method, param_bytes, num_microbatches, optimizer),
            "t2_buffer": 0}


def _strictly_below(rows, budget_bytes):
    return pick_for_budget(rows, budget_bytes - 1)


def test_chapter_10_known_mistakes_are_named():
    named = {
        "ex10_1": [(WRONG["ex10_1"], "one copy per in-flight microbatch"),
                   (_no_t2_buffer, "T2 buffer")],
        "ex10_2": [(WRONG["ex10_2"], "smallest memory that fits"),
                   (_strictly_below, "equals the budget")],
    }
    for exercise_id, cases in named.items():
        for answer, words in cases:
            message = run_checks(exercise_id, answer).message
            assert "A known mistake:" in message and words in message, message


def test_chapter_08_answers_that_call_the_engine_are_rejected():
    from pipemare_lite.analysis import stage_lr
    from pipemare_lite.methods import lr_rescheduling

    wrappers = {
        "ex08_1": [stage_lr.rescheduling_factor, lr_rescheduling.rescheduling_factor,
                   lambda update, tau, horizon: stage_lr.stage_lrs(
                       1.0, [tau], update + 1, horizon=horizon)[0][update]],
        "ex08_2": [lambda lr, lam, tau, horizon: stage_lr.first_unstable_update(
            stage_lr.stage_lrs(lr, [tau], horizon + 1, horizon=horizon)[0], lam, tau)],
    }
    for exercise_id, answers in wrappers.items():
        for answer in answers:
            result = run_checks(exercise_id, answer)
            assert result.status == "failed", result.message
            assert "uses the engine's" in result.message


def test_chapter_10_answers_that_call_the_engine_are_rejected():
    from pipemare_lite.analysis.memory import MemoryProfile
    from pipemare_lite.experiments import paper_arithmetic
    from pipemare_lite.methods import tradeoff

    def via_weight_memory(method, param_bytes, n, optimizer):
        profile = MemoryProfile(param_bytes, [0] * len(param_bytes), optimizer)
        return paper_arithmetic.weight_memory(method, profile, n)

    def via_pick(rows, budget):
        table = [tradeoff.TradeoffRow(r["method"], r["method"], {}, r["device_peak"],
                                      r["utilization"],
                                      None if r["utilization"] is not None else "no")
                 for r in rows]
        return tradeoff.pick_method(table, budget)

    for exercise_id, answer in (("ex10_1", via_weight_memory), ("ex10_2", via_pick)):
        result = run_checks(exercise_id, answer)
        assert result.status == "failed" and "uses the engine's" in result.message, result.message


def test_chapter_10_may_use_the_memory_model():
    # the memory model is the instrument the chapter shows before exercise 1
    from pipemare_lite.analysis.memory import MemoryProfile, memory_by_kind
    from pipemare_lite.schedules import build_schedule

    def weight_memory_by_kind(method, param_bytes, n, optimizer):
        P = len(param_bytes)
        name = "async" if method == "pipemare" else method
        schedule = build_schedule(name, P, n, num_minibatches=-(-(2 * P - 1) // n) + 2)
        peaks = memory_by_kind(schedule, MemoryProfile(param_bytes, [0] * P, optimizer),
                               t2=method == "pipemare")
        return {k: sum(d[k] for d in peaks) for k in ("weights", "stash", "t2_buffer", "optimizer")}

    assert run_checks("ex10_1", weight_memory_by_kind).passed


def test_chapter_10_cases_start_with_the_chapter_setting():
    weights = EXERCISES["ex10_1"].cases()
    assert weights[0]["method"] == "pipedream" and len(weights[0]["param_bytes"]) == 4
    # the network chapter 10 runs and asks a prediction on (was a profile it never had)
    from pipemare_lite.training.models import mlp
    from pipemare_lite.training.partition import partition

    model = mlp(in_features=64, hidden=32, depth=4, out_features=10, seed=0)
    assert weights[0]["param_bytes"] == [sum(p.nbytes for p in stage.parameters())
                                         for stage in partition(model, 4)]
    assert {c["method"] for c in weights} == {"1f1b", "pipedream", "2bw", "async", "pipemare"}
    picks = EXERCISES["ex10_2"].cases()
    answers = [EXERCISES["ex10_2"].reference(**c) for c in picks]
    assert None in answers and len({a for a in answers if a}) >= 3


# --- chapter 11: real processes ------------------------------------------------------------


def _receives_after(P, N):
    rows = gpipe_comm_rows(P, N)
    for row in rows:  # swap each receive with the action after it
        i = 0
        while i < len(row) - 1:
            if "RECV" in row[i] and "_" not in row[i + 1]:
                row[i], row[i + 1] = row[i + 1], row[i]
                i += 1
            i += 1
    return rows


def _mean_of_spans(entries, num_ranks):
    shares = []
    for rank in range(num_ranks):
        mine = [e for e in entries if e[0] == rank]
        busy = sum(e[3] - e[2] for e in mine)
        shares.append(busy / (max(e[3] for e in mine) - min(e[2] for e in mine)))
    return sum(shares) / num_ranks


def test_chapter_11_known_mistakes_are_named():
    named = {
        "ex11_1": (_receives_after, "after the action"),
        "ex11_2": (_mean_of_spans, "own span"),
    }
    for exercise_id, (answer, words) in named.items():
        message = run_checks(exercise_id, answer).message
        assert "A known mistake:" in message and words in message, message


def test_chapter_11_answers_that_call_the_engine_are_rejected():
    from pipemare_lite.analysis.simulate import metrics
    from pipemare_lite.schedules.comm_rows import comm_row_strings, comm_rows

    def rows_by_engine(P, N):
        return [[str(x) for x in row]
                for row in comm_rows(build_schedule("gpipe", P, N), receives_ahead=0)]

    def by_metrics(entries, num_ranks):
        from pipemare_lite.analysis.timeline import TimedAction, Timeline
        from pipemare_lite.analysis.utilization import measured_costs  # noqa: F401
        from pipemare_lite.schedules.actions import Action

        timed = tuple(TimedAction(r, Action.parse(a), s, e) for r, a, s, e in entries)
        return metrics(Timeline(build_schedule("naive", num_ranks, 1), timed)).utilization

    wrappers = {
        "ex11_1": [rows_by_engine,
                   lambda P, N: comm_row_strings(build_schedule("gpipe", P, N), receives_ahead=0)],
        "ex11_2": [by_metrics],
    }
    for exercise_id, answers in wrappers.items():
        for answer in answers:
            result = run_checks(exercise_id, answer)
            assert result.status == "failed", result.message
            assert "uses the engine's" in result.message


def test_chapter_08_may_use_the_engine_factor_and_chapter_06_bound():
    from pipemare_lite.analysis.stage_lr import rescheduling_factor
    from pipemare_lite.analysis.theory import stability_bound

    def first_update_outside(lr, lam, tau, horizon):
        return next((k for k in range(horizon + 1)
                     if lr * lam * rescheduling_factor(k, tau, horizon) >= stability_bound(tau)),
                    None)

    assert run_checks("ex08_2", first_update_outside).passed


def test_chapter_08_cases_start_with_the_chapter_setting():
    factor = EXERCISES["ex08_1"].cases()
    assert factor[0] == {"update": 0, "tau": 8, "horizon": 168}  # stage 0 of P = 8, N = 2
    assert any(c["horizon"] == 0 for c in factor) and any(c["update"] > c["horizon"]
                                                          for c in factor)
    outside = [EXERCISES["ex08_2"].reference(**c) for c in EXERCISES["ex08_2"].cases()]
    assert None in outside and 0 in outside and any(k not in (None, 0) for k in outside)


def test_chapter_11_cases_cover_the_edges_and_travel():
    import pickle

    rows = EXERCISES["ex11_1"].cases()
    assert rows[0] == {"P": 2, "N": 4} and {"P": 1, "N": 3} in rows
    traces = EXERCISES["ex11_2"].cases()
    assert all(min(e[2] for e in c["entries"]) > 0 for c in traces)  # never from 0
    assert {c["num_ranks"] for c in traces} >= {1, 2, 4}
    assert pickle.loads(pickle.dumps(traces)) == traces


# --- chapter 09: T2 on real tensors, and its buffer's start ---------------------------------


def _swapped_gamma(delta, w_old, w_new, gamma, distance):
    return t2_step(delta, w_old, w_new, 1 - gamma, distance)


def _stale_average(delta, w_old, w_new, gamma, distance):
    averaged, _ = t2_step(delta, w_old, w_new, gamma, distance)
    return averaged, [w - distance * d for w, d in zip(w_new, delta)]


def _forward_extrapolation(delta, w_old, w_new, gamma, distance):
    return t2_step(delta, w_old, w_new, gamma, -distance)


def test_chapter_09_known_mistakes_are_named():
    named = {
        ("ex09_1", _swapped_gamma): "swapped",
        ("ex09_1", _stale_average): "average from before the update",
        ("ex09_1", _forward_extrapolation): "further ahead",
        ("ex09_1", WRONG["ex09_1"]): "weights before the update",
        ("ex09_2", lambda gamma, tolerance: math.ceil(1 / (1 - gamma))): "memory",
    }
    for (exercise_id, answer), words in named.items():
        message = run_checks(exercise_id, answer).message
        assert "A known mistake:" in message and words in message, message
        assert "update" in message or exercise_id == "ex09_2"


def test_chapter_09_answers_that_call_the_engine_are_rejected():
    from pipemare_lite.methods.discrepancy import DiscrepancyCorrection

    def through_the_engine(delta, w_old, w_new, gamma, distance):
        import torch

        params = [torch.nn.Parameter(w.clone()) for w in w_new]
        t2 = DiscrepancyCorrection(params, gamma)
        t2.delta = [gamma * d for d in delta]
        t2.after_update([w + (n - o) * 0 for w, o, n in zip(w_old, w_old, w_new)])
        return t2.delta, t2.backward_weights(distance)

    result = run_checks("ex09_1", through_the_engine)
    assert result.status == "failed" and "uses the engine's" in result.message, result.message


def test_chapter_09_t2_is_checked_on_real_tensors_of_every_model():
    import pickle

    import torch

    from pipemare_lite.book.exercises.harness import T2_MODELS, t2_on_tensors, t2_sequence

    cases = EXERCISES["ex09_1"].cases()
    assert cases[0] == {"model": "linear", "gamma": 0.9, "distances": [0, 1, 2, 2, 3, 3]}
    assert {c["model"] for c in cases} == set(T2_MODELS)
    assert any(c["gamma"] == 0.0 for c in cases) and any(0 in c["distances"] for c in cases)
    pickle.dumps(cases)
    weights, changes = t2_sequence("mlp", 3)
    assert all(w.dtype == torch.float64 for w in weights) and len(changes) == 3
    # by hand, gamma 0: delta is the last change, the backward goes back d of them
    steps = t2_on_tensors(t2_step, "linear", 0.0, [2])
    w0, (c0,) = t2_sequence("linear", 1)
    assert torch.allclose(torch.tensor(steps[0][0][0], dtype=torch.float64), c0[0])
    assert torch.allclose(torch.tensor(steps[0][1][0], dtype=torch.float64),
                          w0[0] + c0[0] - 2 * c0[0])
    assert steps == EXERCISES["ex09_1"].reference("linear", 0.0, [2])


def test_chapter_09_calibration_cases_avoid_fragile_counts():
    from pipemare_lite.book.exercises.ch09 import _near_boundary

    cases = EXERCISES["ex09_2"].cases()
    assert cases[0] == {"gamma": 0.9, "tolerance": 0.01}
    # near the boundary only where it is exact: tolerance = gamma ** k in floating point (the
    # boundary cases), where the engine's buffer counts k (reaching the tolerance counts)
    exact = [c for c in cases if any(c["gamma"] ** k == c["tolerance"] for k in range(1, 60))]
    assert len(exact) == 2
    for case in exact:
        k = next(k for k in range(1, 60) if case["gamma"] ** k == case["tolerance"])
        assert EXERCISES["ex09_2"].reference(case["gamma"], case["tolerance"]) == k
    others = [c for c in cases if c not in exact]
    assert not any(_near_boundary(c["gamma"], c["tolerance"]) for c in others)
    # the closed form ceil(log tol / log gamma) agrees with the engine's buffer on the others
    for case in others:
        g, tol = case["gamma"], case["tolerance"]
        closed = 1 if g == 0 else max(1, math.ceil(math.log(tol) / math.log(g)))
        assert EXERCISES["ex09_2"].reference(g, tol) == closed


# --- chapter 12: beyond PipeMare ------------------------------------------------------------


def test_chapter_12_known_mistakes_are_named_and_the_engine_is_rejected():
    from pipemare_lite.methods.nesterov import look_ahead_factor as engine

    message = run_checks("ex12_1", lambda mu, s: sum(mu ** k for k in range(s))).message
    assert "A known mistake:" in message and "k = 0" in message, message
    message = run_checks("ex12_2", lambda P, d: math.ceil(2 * P / d)).message
    assert "A known mistake:" in message and "2P ticks" in message, message
    result = run_checks("ex12_1", engine)
    assert result.status == "failed" and "uses the engine's" in result.message
    # ex12_2 asks for the delay solved for N: trying N = 1, 2, ... (the old ask), with the
    # engine's delay formula or by hand, is stopped on the deep pipelines
    from pipemare_lite.analysis.staleness import expected_forward_delay

    def with_the_engine(P, max_delay):
        N = 1
        while expected_forward_delay("async", P, N, 0) > max_delay:
            N += 1
        return N

    def searched_by_hand(P, max_delay):
        N = 1
        while -(-(2 * P - 1) // N) > max_delay:
            N += 1
        return N

    for answer in (with_the_engine, searched_by_hand):
        searched = run_checks("ex12_2", answer)
        assert searched.status == "failed", searched.message
        if answer is searched_by_hand:  # cheap lines: it gets as far as the deep pipelines
            assert searched.failing_case["P"] >= 10**5, searched.message
        assert "A known mistake: trying candidates one by one" in searched.message
    # the budget is the boundary the text states: "at most" includes it
    boundary = [c for c in EXERCISES["ex12_2"].cases() if (2 * c["P"] - 1) % c["max_delay"] == 0
                and c["max_delay"] < 2 * c["P"] - 1]
    assert len(boundary) >= 2
    assert run_checks("ex12_2", smallest_accumulation).passed
