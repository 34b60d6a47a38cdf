"""Chapter 04's one-picture-per-idea diagrams (issue 45) are drawn from the engine's
schedules: every box is an action the simulator timed, where and when it ran it."""

from __future__ import annotations

import pytest

from pipemare_lite.analysis.simulate import OpCosts, simulate
from pipemare_lite.figures.viz import rank_trip_figure
from pipemare_lite.figures.viz.rank_trip import paired_actions, rank_trip
from pipemare_lite.schedules import build_schedule

HALF = OpCosts(forward=0.5, backward=1, input_grad=0.5, weight_grad=0.5)  # a chunk of a V
FULL = OpCosts(forward=1, input_grad=1, weight_grad=1)


def _timed(schedule, costs, microbatch):
    """The plain reference: (rank, "F s4") -> (start, end) for the microbatch's actions."""
    return {(e.rank, f"{e.action.kind} s{e.action.stage}"): (e.start, e.end)
            for e in simulate(schedule, costs).entries
            if e.action.index == microbatch and e.action.kind != "U"}


@pytest.mark.parametrize("name, kwargs, costs", [
    ("1f1b", {}, None), ("interleaved", {"chunks": 2}, OpCosts(forward=0.5, backward=1)),
    ("zb-h1", {}, FULL), ("zb-h2", {"num_minibatches": 2}, FULL), ("zb-v", {}, HALF),
    ("dualpipev", {"num_minibatches": 2}, HALF),
])
def test_every_box_is_an_action_where_and_when_the_simulator_ran_it(name, kwargs, costs):
    schedule = build_schedule(name, 4, 8, **kwargs)
    for microbatch in (0, 6):
        figure = rank_trip_figure({name: schedule}, microbatch, costs=costs)
        drawn = {}
        for trace in figure.data:
            if trace.type == "bar":
                for base, length, rank, text in zip(trace.base, trace.x, trace.y, trace.text):
                    drawn[rank, text] = pytest.approx((base, base + length))
        assert drawn == _timed(schedule, costs, microbatch)


def test_interleaving_passes_the_ranks_twice_and_the_v_turns_on_the_last_rank():
    looped = rank_trip(build_schedule("interleaved", 4, 8, chunks=2), 0)
    v = rank_trip(build_schedule("zb-v", 4, 8), 0, HALF)
    forwards = [a["rank"] for a in looped if a["kind"] == "F"]
    assert forwards == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [a["rank"] for a in v if a["kind"] == "F"] == [0, 1, 2, 3, 3, 2, 1, 0]
    schedule = build_schedule("zb-v", 4, 8)
    assert all(a["rank"] == schedule.rank_of(a["stage"]) for a in v)


def test_the_split_backward_sends_i_up_at_once_and_leaves_w_for_later():
    trip = rank_trip(build_schedule("zb-h1", 4, 8), 0, FULL)
    inputs = {a["stage"]: a for a in trip if a["kind"] == "I"}
    weights = {a["stage"]: a for a in trip if a["kind"] == "W"}
    assert [a["stage"] for a in trip if a["kind"] == "I"] == [3, 2, 1, 0]  # straight back up
    assert all(weights[s]["start"] >= inputs[s]["end"] for s in range(4))
    assert max(w["end"] for w in weights.values()) > max(i["end"] for i in inputs.values())


def test_zb_h2_starts_the_next_minibatch_earlier_than_zb_h1():
    first = {name: rank_trip(build_schedule(name, 4, 8, num_minibatches=2), 8, FULL)[0]
             for name in ("zb-h1", "zb-h2")}
    assert first["zb-h2"]["start"] < first["zb-h1"]["start"]


def test_dualpipev_pairs_a_forward_with_another_microbatchs_backward():
    schedule = build_schedule("dualpipev", 4, 8)
    pairs = paired_actions(schedule, 6, HALF)
    forwards = {(a["rank"], a["end"]) for a in rank_trip(schedule, 6, HALF) if a["kind"] == "F"}
    assert len(pairs) >= 4
    for pair in pairs:
        assert pair["microbatch"] != 6 and pair["kind"] in ("B", "I")
        assert (pair["rank"], pair["start"]) in forwards  # right after one of its forwards


def test_bad_arguments_are_refused_early():
    schedule = build_schedule("1f1b", 2, 2)
    with pytest.raises(ValueError, match="microbatch=5"):
        rank_trip(schedule, 5)
    with pytest.raises(ValueError, match="no entry for the panels"):
        rank_trip_figure({"a": schedule, "b": schedule}, costs={"a": OpCosts()})
    with pytest.raises(TypeError, match="expected a Schedule"):
        rank_trip_figure({"a": "1f1b"})


def test_chapter_04_draws_one_trip_per_idea():
    import nbformat

    nb = nbformat.read("chapters/04_interleaving_and_zero_bubble.ipynb", as_version=4)
    calls = [c.source for c in nb.cells
             if c.cell_type == "code" and "rank_trip_figure({" in c.source]
    ideas = ["interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipev"]
    assert len(calls) == len(ideas)
    for call, idea in zip(calls, ideas):  # in the chapter's order, each showing its idea
        assert idea in call or (idea == "zb-v" and "zbv" in call) or (
            idea == "zb-h1" and '"ZB-H1": zb' in call), (idea, call)
    assert "partners=True" in calls[-1]
