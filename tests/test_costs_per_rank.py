"""The simulator across chunk counts, and memory per device with its per-stage breakdown
(issue 48, item 2). Torch-free.

- ``OpCosts(costs_per="rank")``: a cost is that of a rank's whole share of the model, each of
  its v chunks costing 1/v of it. Then every synchronous schedule at the same P and M gives
  each rank the same work, M (F + B), whatever v, and makespans compare: 1F1B's is
  (M + P - 1)(F + B), interleaved's M (F + B) + (P - 1)(F + B) / v (Megatron's bubble over v).
  The default, ``"chunk"``, is the old model, unchanged.
- :func:`memory_by_kind` is per rank (a rank's stages held together), :func:`memory_by_stage`
  the breakdown: equal with one stage per rank, the rank's at most the stages' sum on a V.
"""

from __future__ import annotations

import pytest

from pipemare_lite.analysis.memory import MemoryProfile, memory_by_kind, memory_by_stage
from pipemare_lite.analysis.simulate import (
    OpCosts,
    metrics,
    simulate,
    simulate_and_measure,
    simulate_step_by_step,
)
from pipemare_lite.schedules import build_schedule

F_, B_, W_ = 1.0, 2.0, 1.0
SYNC = [("1f1b", 1), ("interleaved", 2), ("interleaved", 4), ("zb-h1", 1), ("zb-v", 2),
        ("dualpipev", 2)]


def _costs(per: str, comm: float = 0.0) -> OpCosts:
    return OpCosts(forward=F_, backward=B_, input_grad=B_ - W_, weight_grad=W_, comm=comm,
                   costs_per=per)


@pytest.mark.parametrize("P,M", [(2, 4), (4, 8), (3, 12)])
def test_with_costs_per_rank_every_rank_does_the_same_work_whatever_v(P, M):
    for name, v in SYNC:
        if name == "interleaved" and M % P:
            continue
        m = simulate_and_measure(build_schedule(name, P, M, chunks=v), _costs("rank"))[1]
        assert m.busy_per_rank == pytest.approx([M * (F_ + B_)] * P), (name, v)


@pytest.mark.parametrize("P,M,v", [(4, 8, 2), (4, 8, 4), (2, 6, 3), (3, 9, 3)])
def test_costs_per_rank_makespans_are_the_closed_forms(P, M, v):
    unit = F_ + B_
    one = simulate_and_measure(build_schedule("1f1b", P, M), _costs("rank"))[1]
    assert one.makespan == pytest.approx((M + P - 1) * unit)
    inter = simulate_and_measure(build_schedule("interleaved", P, M, chunks=v),
                                 _costs("rank"))[1]
    assert inter.makespan == pytest.approx(M * unit + (P - 1) * unit / v)
    # per chunk (the default) the same schedule is v times longer; fractions are the same
    chunk = simulate_and_measure(build_schedule("interleaved", P, M, chunks=v),
                                 _costs("chunk"))[1]
    assert chunk.makespan == pytest.approx(v * inter.makespan)
    assert chunk.utilization == pytest.approx(inter.utilization)


@pytest.mark.parametrize("name,v", SYNC + [("async", 1)])
def test_costs_per_rank_is_a_multiplier_of_one_over_v_and_the_plain_rule_agrees(name, v):
    schedule = build_schedule(name, 2, 4, chunks=v, num_minibatches=2)
    S = schedule.num_virtual_stages
    by_rank = simulate(schedule, _costs("rank", comm=0.25))
    plain = OpCosts(forward=F_, backward=B_, input_grad=B_ - W_, weight_grad=W_, comm=0.25,
                    stage_multipliers=[1 / v] * S)
    assert [(e.start, e.end) for e in by_rank.entries] == \
        [(e.start, e.end) for e in simulate(schedule, plain).entries]
    step = simulate_step_by_step(schedule, _costs("rank", comm=0.25))
    assert {e.action: (e.start, e.end) for e in by_rank.entries} == step
    if v == 1:  # one chunk: the two models are the same
        assert metrics(by_rank) == metrics(simulate(schedule, _costs("chunk", comm=0.25)))


def test_costs_per_is_checked():
    with pytest.raises(ValueError, match=r"costs_per='stage': allowed: 'chunk', 'rank'"):
        OpCosts(costs_per="stage")


def test_cli_costs_per_rank(capsys):
    import json

    from pipemare_lite.cli import main

    spans = {}
    for name in ("1f1b", "zb-v"):
        assert main(["schedule", name, "-P", "4", "-M", "8", "--costs", "1,2,1",
                     "--costs-per", "rank", "--json"]) == 0
        spans[name] = json.loads(capsys.readouterr().out)["makespan"]
    assert spans == {"1f1b": 33.0, "zb-v": 25.5}


@pytest.mark.parametrize("name,v", SYNC + [("pipedream", 1), ("async", 1)])
def test_memory_per_rank_with_the_per_stage_breakdown(name, v):
    schedule = build_schedule(name, 3, 6, chunks=v, num_minibatches=2)
    S = schedule.num_virtual_stages
    profile = MemoryProfile([100 + 10 * s for s in range(S)], [7 + s for s in range(S)],
                            "momentum")
    ranks, stages = memory_by_kind(schedule, profile), memory_by_stage(schedule, profile)
    assert len(ranks) == 3 and len(stages) == S
    for r, rank in enumerate(ranks):
        mine = [stages[s] for s in schedule.stages_of(r)]
        for kind in ("weights", "optimizer", "t2_buffer"):  # held all the time: they add
            assert rank[kind] == sum(m[kind] for m in mine)
        for kind in ("activations", "stash", "total"):  # at most the stages' peaks summed
            assert rank[kind] <= sum(m[kind] for m in mine)
        if v == 1:
            assert rank == stages[schedule.stages_of(r)[0]]
    # the activations in units: the simulator's peak in-flight per rank and per stage
    ones = MemoryProfile([0] * S, [1] * S)
    peak = simulate_and_measure(schedule)[1].peak_inflight
    assert [d["activations"] for d in memory_by_kind(schedule, ones)] == list(peak)
    if name == "zb-v":  # a V rank's two stages do not peak together
        by_stage = [d["activations"] for d in memory_by_stage(schedule, ones)]
        assert any(peak[r] < sum(by_stage[s] for s in schedule.stages_of(r))
                   for r in range(3))
