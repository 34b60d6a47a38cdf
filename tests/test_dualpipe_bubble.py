"""DualPipeV's bubble, the engine's (P-1) and DeepSeek's 2(P-1) (issue 48, item 3).

The engine runs an overlapped pair as F then B, so the forward fills the wait for the
gradient: idle (P-1)F per rank and minibatch (formulas.makespan_dualpipe_v). Run as ONE
operation F&B that waits for both inputs (analysis.overlap), the same order idles exactly
DeepSeek-V3's (P-1)(F&B + B - 3W) on its last rank, at every F&B tried. Torch-free.
"""

from __future__ import annotations

import pytest

from pipemare_lite.analysis.formulas import makespan_dualpipe_v
from pipemare_lite.analysis.overlap import (
    deepseek_bubble_dualpipe_v,
    overlapped_pairs,
    simulate_overlapped,
)
from pipemare_lite.analysis.simulate import OpCosts, simulate_and_measure, simulate_step_by_step
from pipemare_lite.schedules import build_schedule

UNIT = OpCosts(forward=1, backward=2, input_grad=1, weight_grad=1)


@pytest.mark.parametrize("P", [2, 3, 4, 5, 6, 8])
@pytest.mark.parametrize("extra", [0, 3])
def test_engine_p_minus_1_and_deepseek_2_p_minus_1(P, extra):
    M = 2 * P + extra
    schedule = build_schedule("dualpipev", P, M)
    engine = simulate_and_measure(schedule, UNIT)[1]
    assert engine.makespan == makespan_dualpipe_v(P, M) == 6 * M + P - 1
    assert [engine.makespan - b for b in engine.busy_per_rank] == [P - 1] * P
    atomic = simulate_overlapped(schedule, UNIT, overlapped=3.0)  # F&B = F + B
    assert list(atomic.idle_per_rank) == [2 * (P - 1)] * P
    assert deepseek_bubble_dualpipe_v(P, 3.0, 2.0, 1.0) == 2 * (P - 1)
    # the pairs on rank r: two in each of step 4's M - 2P + r + 1 rounds ((F0 B1), (F1 B0)),
    # one in each of step 5's P - r - 1 (B1, (F1 B0))
    assert list(atomic.pairs_per_rank) == [2 * (M - 2 * P + r + 1) + P - r - 1
                                           for r in range(P)]


@pytest.mark.parametrize("P", [2, 3, 4, 6])
@pytest.mark.parametrize("overlapped", [2.0, 2.5, 2.75])
def test_with_overlap_gain_the_last_rank_idles_deepseeks_count(P, overlapped):
    schedule = build_schedule("dualpipev", P, 3 * P)
    run = simulate_overlapped(schedule, UNIT, overlapped=overlapped)
    assert max(run.idle_per_rank) == run.idle_per_rank[-1] == \
        pytest.approx(deepseek_bubble_dualpipe_v(P, overlapped, 2.0, 1.0))


def test_without_pairs_the_overlapped_rule_is_the_plain_simulator():
    for name in ("1f1b", "gpipe"):  # no forward is followed by another stage's I, W
        schedule = build_schedule(name, 3, 6, num_minibatches=2)
        assert all(len(op) == 1 for row in schedule.ranks for op in overlapped_pairs(row))
        run = simulate_overlapped(schedule, UNIT)
        assert run.times == simulate_step_by_step(schedule, UNIT)


def test_a_bad_overlapped_cost_is_refused():
    with pytest.raises(ValueError, match=r"overlapped=0: allowed: a number > 0"):
        simulate_overlapped(build_schedule("dualpipev", 2, 4), UNIT, overlapped=0)
