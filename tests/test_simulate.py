"""The simulator and metrics: hand-computed timelines, costs, and the metric definitions."""

from __future__ import annotations

import json
import math

import pytest

from pipemare_lite.analysis.simulate import (
    OpCosts,
    metrics,
    simulate,
    simulate_and_measure,
    steady_state_utilization,
)
from pipemare_lite.analysis.timeline import TimedAction, Timeline
from pipemare_lite.schedules import Action, Schedule, ScheduleError, build_schedule, gpipe


def times(timeline):
    return {str(e.action): (e.start, e.end) for e in timeline.entries}


def test_gpipe_two_stages_by_hand():
    t = times(simulate(gpipe(2, 2)))  # F = 1, B = 2
    assert t["0F0"] == (0, 1) and t["0F1"] == (1, 2)
    assert t["1F0"] == (1, 2) and t["1F1"] == (2, 3)
    assert t["1B0"] == (3, 5) and t["1B1"] == (5, 7)
    assert t["0B0"] == (5, 7) and t["0B1"] == (7, 9)
    assert t["0U0"] == (9, 9)


def test_slow_stage_multiplier_by_hand():
    # stage 1 twice as slow: rank 1 runs F 1-3, 3-5 and B 5-9, 9-13; rank 0's B follow
    t = times(simulate(gpipe(2, 2), OpCosts(stage_multipliers=(1, 2))))
    assert t["1B1"] == (9, 13) and t["0B0"] == (9, 11) and t["0B1"] == (13, 15)


def test_comm_latency_between_ranks_only():
    t = times(simulate(gpipe(2, 1), OpCosts(comm=0.5)))
    assert t["1F0"] == (1.5, 2.5)  # waits for 0F0 plus the latency
    assert t["1B0"] == (2.5, 4.5)  # its own F ran on the same rank: no latency
    assert t["0B0"] == (5.0, 7.0)


def test_update_cost_is_charged():
    timeline = simulate(gpipe(1, 2), OpCosts(update=0.5))
    assert times(timeline)["0U0"] == (6.0, 6.5) and timeline.makespan == 6.5


def test_per_rank_multipliers_apply_to_every_chunk():
    schedule = build_schedule("interleaved", 2, 4, chunks=2)
    per_rank = simulate(schedule, OpCosts(stage_multipliers=(1.0, 3.0)))
    per_stage = simulate(schedule, OpCosts(stage_multipliers=(1.0, 3.0, 1.0, 3.0)))
    assert times(per_rank) == times(per_stage)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"forward": -1}, r"OpCosts.forward=-1: allowed: a finite number >= 0"),
        ({"backward": math.nan}, r"OpCosts.backward=nan"),
        ({"comm": True}, r"OpCosts.comm=True: allowed: a number >= 0"),
        ({"backward": 0}, r"OpCosts.backward=0: allowed: a finite number > 0"),
        ({"weight_grad": 0.0}, r"OpCosts.weight_grad=0: allowed: a finite number > 0"),
        ({"stage_multipliers": (1, 0)}, r"stage_multipliers=\(1, 0\): allowed: a non-empty"),
    ],
)
def test_bad_costs_are_refused(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        OpCosts(**kwargs)


def test_free_updates_and_comm_are_allowed():
    costs = OpCosts(update=0, comm=0)
    assert costs.update == 0 and costs.comm == 0


def test_multiplier_count_must_match():
    with pytest.raises(ValueError, match=r"has 3 entries; allowed: 2 \(one per virtual stage\)"):
        simulate(gpipe(2, 2), OpCosts(stage_multipliers=(1, 1, 1)))


def test_simulate_validates_hand_made_schedules():
    rows = (("0F0", "0B0", "0U0"), ("1B0", "1F0", "1U0"))
    ranks = tuple(tuple(Action.parse(a) for a in row) for row in rows)
    bad = Schedule(name="custom", num_ranks=2, num_microbatches=1, ranks=ranks)
    with pytest.raises(ScheduleError, match="deadlocks"):
        simulate(bad)


def hand_timeline():
    """A measured-style trace with 2 ranks, numbers chosen by hand."""
    schedule = gpipe(2, 2)
    at = {str(a): a for row in schedule.ranks for a in row}
    spans = {
        "0F0": (0, 1), "0F1": (1, 2), "0B0": (6, 8), "0B1": (8, 10), "0U0": (10, 10),
        "1F0": (1, 2), "1F1": (2, 3), "1B0": (3, 5), "1B1": (5, 7), "1U0": (7, 7),
    }  # fmt: skip
    entries = tuple(TimedAction(int(k[0]), at[k], s, e) for k, (s, e) in spans.items())
    return Timeline(schedule=schedule, entries=entries, unit="s", source="measured")


def test_metrics_definitions_on_a_hand_timeline():
    m = metrics(hand_timeline())
    assert m.makespan == 10
    assert m.busy_per_rank == (6, 6)
    assert m.utilization_per_rank == (0.6, 0.6)
    assert m.utilization == pytest.approx(0.6)
    assert m.idle_fraction == pytest.approx(0.4)
    assert m.bubble_ratio == pytest.approx(8 / 12)  # idle 8 over busy 12
    assert m.peak_inflight == (2, 2)
    assert m.full_pipeline_window is None  # rank 0's first B starts after every last F
    json.dumps(m.as_dict())


def test_peak_inflight_releases_at_weight_gradient_when_split():
    schedule = build_schedule("zb-h1", 2, 2)
    # rank 1: F0 I0 F1 I1 W0 W1 (it defers one W): both activations held until the Ws
    assert [str(a) for a in schedule.ranks[1]] == ["1F0", "1I0", "1F1", "1I1", "1W0", "1W1", "1U0"]
    assert metrics(simulate(schedule)).peak_inflight == (2, 2)


@pytest.mark.parametrize("name", ["async", "pipedream", "2bw"])
def test_no_flush_schedules_are_fully_busy_in_steady_state(name):
    m = metrics(simulate(build_schedule(name, 4, 4, num_minibatches=6)))
    assert m.full_pipeline_window is not None
    assert m.full_pipeline_utilization == pytest.approx(1.0)
    assert m.utilization < 1.0  # the single fill and drain still cost something


def test_flushed_schedules_pay_the_bubble_in_steady_state():
    m = metrics(simulate(build_schedule("gpipe", 4, 4, num_minibatches=6)))
    assert m.full_pipeline_utilization < 0.8


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("P,M", [(4, 8), (3, 5), (5, 2)])
@pytest.mark.parametrize("F,B", [(1, 2), (1, 1), (2, 3)])
def test_steady_state_utilization_is_one_more_minibatch(name, P, M, F, B):
    # a flushed schedule pays its fill and drain every minibatch: M/(M+P-1) at any K,
    # the utilization of one minibatch, even though its full-pipeline window reads 1
    costs = OpCosts(forward=F, backward=B)

    def build(k):
        return build_schedule(name, P, M, num_minibatches=k)

    for K in (1, 2, 4):
        assert steady_state_utilization(build, costs, minibatches=K) == pytest.approx(
            M / (M + P - 1))
    # the definition by hand: minibatch 3's work over the time it adds to 2
    two, three = (simulate_and_measure(build(k), costs)[1] for k in (2, 3))
    added = (sum(three.busy_per_rank) - sum(two.busy_per_rank)) / (P * (three.makespan
                                                                       - two.makespan))
    assert steady_state_utilization(build, costs) == pytest.approx(added)
    one = simulate_and_measure(build(1), costs)[1]
    assert one.utilization == pytest.approx(M / (M + P - 1))
    if name == "1f1b" and M >= P:
        assert one.full_pipeline_utilization == pytest.approx(1.0)  # not a steady state


@pytest.mark.parametrize("name", ["async", "pipedream", "2bw", "zb-h2"])
def test_steady_state_utilization_is_one_without_a_fill_per_minibatch(name):
    costs = OpCosts(forward=1, backward=2, input_grad=1, weight_grad=1)
    for K in (1, 3):
        assert steady_state_utilization(
            lambda k: build_schedule(name, 4, 8, num_minibatches=k), costs, K) == pytest.approx(1)


def test_steady_state_utilization_bad_input():
    with pytest.raises(ValueError, match=r"minibatches=0: allowed: an integer >= 1"):
        steady_state_utilization(lambda k: build_schedule("1f1b", 2, 2, num_minibatches=k),
                                 minibatches=0)
    with pytest.raises(ValueError, match=r"build\(3\) returned '1f1b' with 1 minibatches"):
        steady_state_utilization(lambda k: build_schedule("1f1b", 2, 2), minibatches=3)


def test_the_old_metrics_name_warns_and_reads_the_window():
    m = metrics(simulate(build_schedule("1f1b", 4, 8)))
    with pytest.warns(FutureWarning, match="use 'full_pipeline_utilization'.*long run"):
        assert m.steady_state_utilization == m.full_pipeline_utilization == 1.0
    assert "steady_state_utilization" not in m.as_dict()


def test_simulate_and_measure_returns_both():
    timeline, m = simulate_and_measure(gpipe(3, 3))
    assert m == metrics(timeline) and timeline.source == "simulated"


@pytest.mark.parametrize(
    "name, P, M, extra",
    [("naive", 3, 1, {}), ("gpipe", 4, 5, {"num_minibatches": 2}), ("1f1b", 4, 3, {}),
     ("interleaved", 2, 4, {"chunks": 2}), ("zb-h1", 4, 6, {}),
     ("pipedream", 3, 2, {"num_minibatches": 3}), ("2bw", 3, 3, {"num_minibatches": 3}),
     ("async", 4, 2, {"num_minibatches": 4, "warmup": 1})],
)
def test_the_plain_rule_gives_the_fast_simulators_times(name, P, M, extra):
    from pipemare_lite.analysis.simulate import simulate_step_by_step
    from pipemare_lite.schedules import build_schedule

    schedule = build_schedule(name, P, M, **extra)
    for costs in (OpCosts(), OpCosts(forward=1, backward=3, input_grad=2, weight_grad=1,
                                     update=0.5, comm=0.25, stage_multipliers=(1.0,) * P)):
        plain = simulate_step_by_step(schedule, costs)
        fast = simulate(schedule, costs)
        assert len(plain) == len(fast.entries)
        for e in fast.entries:
            assert plain[e.action] == pytest.approx((e.start, e.end), abs=1e-12)


def test_depends_on_names_the_pipeline_rule():
    from pipemare_lite.analysis.simulate import depends_on
    from pipemare_lite.schedules import Action, build_schedule

    schedule = build_schedule("1f1b", 3, 4)
    assert depends_on(Action(0, "F", 2), schedule) == []
    assert depends_on(Action(1, "F", 2), schedule) == [Action(0, "F", 2)]
    assert depends_on(Action(1, "B", 2), schedule) == [Action(1, "F", 2), Action(2, "B", 2)]
    assert depends_on(Action(2, "B", 2), schedule) == [Action(2, "F", 2)]
    assert depends_on(Action(1, "U", 0), schedule) == [Action(1, "B", m) for m in range(4)]
    split = build_schedule("zb-h1", 3, 4)
    assert depends_on(Action(1, "I", 0), split) == [Action(1, "F", 0), Action(2, "I", 0)]
    assert depends_on(Action(1, "W", 0), split) == [Action(1, "I", 0)]


def test_p2p_messages_counts_cross_rank_dependencies():
    from pipemare_lite.analysis.simulate import p2p_messages

    # interleaved: 2(vP - 1) messages per microbatch (chapter 04), M microbatches
    for P, M, v in [(4, 8, 1), (4, 8, 2), (2, 4, 3), (4, 4, 4)]:
        schedule = build_schedule("interleaved", P, M, chunks=v)
        assert p2p_messages(schedule) == 2 * (v * P - 1) * M, (P, M, v)
    # the split backward adds none (W waits for its own I), nor do updates; K minibatches
    assert p2p_messages(build_schedule("zb-h1", 4, 8)) == p2p_messages(build_schedule("1f1b", 4, 8))
    assert p2p_messages(build_schedule("gpipe", 3, 2, num_minibatches=3)) == 3 * 2 * 2 * 2
    assert p2p_messages(build_schedule("naive", 1, 1)) == 0
