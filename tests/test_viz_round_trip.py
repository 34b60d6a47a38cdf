"""The round-trip schematics (chapters 05, 07-09) say what the engine's schedules do."""

import pytest

from pipemare_lite.analysis.simulate import metrics, simulate
from pipemare_lite.analysis.staleness import microbatch_path, weight_versions
from pipemare_lite.figures.viz import activation_lifetimes_figure, round_trip_figure
from pipemare_lite.figures.viz.round_trip import (
    activation_lifetimes,
    backward_label,
    round_trip,
)
from pipemare_lite.schedules import build_schedule

P, N, K, M = 4, 4, 8, 18


@pytest.fixture(scope="module")
def schedules():
    return {name: build_schedule(name, P, N, num_minibatches=K)
            for name in ("1f1b", "pipedream", "async")}


def test_the_trip_reads_the_versions_the_staleness_analysis_finds(schedules):
    for name in ("pipedream", "async"):
        trip = round_trip(schedules[name], M)
        path = microbatch_path(weight_versions(schedules[name]), M)
        assert [s["stage"] for s in trip] == list(range(P))
        assert [(s["version_at_forward"], s["version_at_backward"]) for s in trip] == [
            (r.version_at_forward, r.version_at_backward) for r in path]
        for step in trip:  # forwards go down the stages before the backwards come back up
            assert step["forward"][1] <= step["backward"][0]
    # without a stash, every update the microbatch missed is a version its backward is ahead
    for step in round_trip(schedules["async"], M):
        assert len(step["updates"]) == step["version_at_backward"] - step["version_at_forward"]
    # with a stash the backward reads the forward's version although updates happened
    stashed = round_trip(schedules["pipedream"], M)
    assert any(step["updates"] for step in stashed)
    assert all(s["version_at_backward"] == s["version_at_forward"] for s in stashed)


def test_the_figure_labels_stash_no_stash_and_t2(schedules):
    fig = round_trip_figure({"stash": schedules["pipedream"], "no stash": schedules["async"],
                             "T2": schedules["async"]}, M, t2=["T2"])
    assert [a.text for a in fig.layout.annotations][:3] == ["stash", "no stash", "T2"]
    backwards = [t for t in fig.data if t.type == "bar" and t.name.startswith("B")]
    stash, no_stash, t2 = (list(t.text) for t in backwards)
    first = round_trip(schedules["async"], M)[0]
    gap = first["version_at_backward"] - first["version_at_forward"]
    assert gap > 0
    assert no_stash[0] == f"B v{first['version_at_backward']}"
    assert t2[0] == f"B v{first['version_at_backward']}−{gap}δ"
    assert stash[0] == f"B v{round_trip(schedules['pipedream'], M)[0]['version_at_forward']}"
    assert backward_label(3, 3, t2=True) == "v3"  # nothing to correct
    assert backward_label(3, 4, t2=True) == "v4−δ"
    with pytest.raises(ValueError, match="at least one"):
        round_trip_figure({}, 0)
    with pytest.raises(TypeError, match="expected a Schedule"):
        round_trip_figure({"x": "1f1b"}, 0)


def test_async_holds_twice_1f1b_activations_and_the_figure_says_so(schedules):
    fig = activation_lifetimes_figure({"1F1B": schedules["1f1b"],
                                       "async": schedules["async"]}, stage=0)
    titles = [a.text for a in fig.layout.annotations]
    peak_1f1b = metrics(simulate(schedules["1f1b"])).peak_inflight[0]
    peak_async = metrics(simulate(schedules["async"])).peak_inflight[0]
    assert (peak_1f1b, peak_async) == (P, 2 * P)  # P - s and 2(P - s) at s = 0
    assert f"at most {peak_1f1b} " in titles[0] and f"at most {peak_async} " in titles[1]
    # the bars agree with the count: the most lifetimes that overlap at one moment
    for name in ("1f1b", "async"):
        lives = activation_lifetimes(schedules[name], 0)
        most = max(sum(start <= t < end for _, start, end in lives) for _, t, _ in lives)
        assert most == metrics(simulate(schedules[name])).peak_inflight[0]
