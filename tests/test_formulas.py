"""Closed forms == simulator over grids of sizes and costs (and the paper's numbers)."""

from __future__ import annotations

import itertools

import pytest

from pipemare_lite.analysis import formulas as f
from pipemare_lite.analysis.simulate import OpCosts, metrics, simulate
from pipemare_lite.schedules import build_schedule

GRID = [(P, M) for P in (1, 2, 3, 5, 8) for M in (1, 2, 3, 7, 16)]
COSTS = [(1.0, 2.0), (1.0, 1.0), (0.5, 3.0), (2.0, 1.5)]


def measure(name, P, M, costs=None, **kwargs):
    return metrics(simulate(build_schedule(name, P, M, **kwargs), costs))


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("P,M", GRID)
def test_gpipe_and_1f1b_bubble(name, P, M):
    m = measure(name, P, M)
    assert m.idle_fraction == pytest.approx(f.idle_fraction_gpipe(P, M))
    assert m.idle_fraction == pytest.approx(f.idle_fraction_1f1b(P, M))
    assert m.bubble_ratio == pytest.approx(f.bubble_ratio_gpipe(P, M))
    assert m.utilization == pytest.approx(f.utilization_gpipe(P, M))


@pytest.mark.parametrize("F,B", COSTS)
@pytest.mark.parametrize("comm", [0.0, 0.5])
@pytest.mark.parametrize("P,M", [(2, 3), (4, 8), (5, 2)])
def test_gpipe_makespan_with_costs_and_comm(F, B, comm, P, M):
    m = measure("gpipe", P, M, OpCosts(forward=F, backward=B, comm=comm), num_minibatches=2)
    assert m.makespan == pytest.approx(2 * f.makespan_gpipe(P, M, F, B, comm))


@pytest.mark.parametrize("F,B", COSTS)
@pytest.mark.parametrize("P,M", [(2, 3), (4, 8), (5, 2)])
def test_1f1b_makespan_equals_gpipe_without_comm(F, B, P, M):
    m = measure("1f1b", P, M, OpCosts(forward=F, backward=B))
    assert m.makespan == pytest.approx(f.makespan_gpipe(P, M, F, B))


@pytest.mark.parametrize("P,groups,v", list(itertools.product((1, 2, 3, 4), (1, 2, 3), (1, 2, 3))))
@pytest.mark.parametrize("F,B", COSTS[:2])
def test_interleaved(P, groups, v, F, B):
    M = P * groups
    m = measure("interleaved", P, M, OpCosts(forward=F, backward=B), chunks=v)
    assert m.makespan == pytest.approx(f.makespan_interleaved(P, M, v, F, B))
    assert m.idle_fraction == pytest.approx(f.idle_fraction_interleaved(P, M, v))


@pytest.mark.parametrize("F,I,W", list(itertools.product((0.5, 1.0, 2.0), repeat=3)))
@pytest.mark.parametrize("P,M", [(1, 3), (2, 2), (3, 5), (4, 4), (4, 9), (6, 12)])
def test_zb_h1_makespan(F, I, W, P, M):
    m = measure("zb-h1", P, M, OpCosts(forward=F, input_grad=I, weight_grad=W))
    assert m.makespan == pytest.approx(f.makespan_zb_h1(P, M, F, I, W))
    assert m.idle_fraction == pytest.approx(f.idle_fraction_zb_h1(P, M, F, I, W))


def test_zb_h1_is_a_third_of_1f1b_bubble_with_equal_costs():
    P, M = 6, 12
    zb = f.makespan_zb_h1(P, M, 1, 1, 1) - 3 * M
    one_f_one_b = f.makespan_gpipe(P, M, 1, 2) - 3 * M
    assert zb * 3 == one_f_one_b
    with pytest.raises(ValueError, match=r"M=3 < P=4; allowed: M >= P"):
        f.makespan_zb_h1(4, 3)


@pytest.mark.parametrize("P,M", GRID)
def test_peaks(P, M):
    assert measure("gpipe", P, M).peak_inflight == tuple(
        f.peak_inflight_gpipe(P, M) for _ in range(P)
    )
    assert measure("1f1b", P, M).peak_inflight == tuple(
        f.peak_inflight_1f1b(P, M, s) for s in range(P)
    )
    assert measure("zb-h1", P, M).peak_inflight == tuple(
        f.peak_inflight_zb_h1(P, M, s) for s in range(P)
    )
    K = 3
    assert measure("async", P, M, num_minibatches=K).peak_inflight == tuple(
        f.peak_inflight_async(P, M * K, s) for s in range(P)
    )


@pytest.mark.parametrize("name", ["pipedream", "async", "2bw"])
@pytest.mark.parametrize("P,M,K", [(2, 2, 3), (4, 4, 3), (3, 5, 2), (5, 4, 4)])
@pytest.mark.parametrize("F,B", COSTS[:3])
def test_no_flush_makespan_and_steady_state(name, P, M, K, F, B):
    m = measure(name, P, M, OpCosts(forward=F, backward=B), num_minibatches=K)
    assert m.makespan == pytest.approx(f.makespan_no_flush(P, M * K, F, B))
    if m.full_pipeline_utilization is not None:
        assert 1 - m.full_pipeline_utilization == pytest.approx(
            f.idle_fraction_async_steady_state(P, M)
        )


def test_async_steady_state_exists_for_long_runs():
    m = measure("async", 6, 4, num_minibatches=8)
    assert m.full_pipeline_utilization == pytest.approx(1.0)


@pytest.mark.parametrize("P", [1, 3, 6])
def test_naive(P):
    assert measure("naive", P, 4).idle_fraction == pytest.approx(f.idle_fraction_naive(P))


def test_paper_speedups():
    assert round(f.async_speedup_over_gpipe(107, 32), 2) == 4.31
    assert f.async_speedup_over_gpipe(107, 8) == 14.25
    # speed-up = async steady-state utilization (1) over GPipe's simulated utilization
    gpipe_utilization = measure("gpipe", 107, 8).utilization
    assert 1 / gpipe_utilization == pytest.approx(f.async_speedup_over_gpipe(107, 8))


@pytest.mark.parametrize("P", [1, 2, 4, 8, 33])
@pytest.mark.parametrize("target", [0.5, 0.25, 0.2, 0.1, 0.05, 1 / 3])
def test_microbatches_for_idle_below(P, target):
    M = f.microbatches_for_idle_below(P, target)
    assert f.idle_fraction_gpipe(P, M) < target
    if M > 1:
        assert f.idle_fraction_gpipe(P, M - 1) >= target - 1e-12
        assert measure("gpipe", P, M - 1).idle_fraction >= target - 1e-9


@pytest.mark.parametrize(
    "call,pattern",
    [
        (lambda: f.idle_fraction_gpipe(0, 4), r"P=0: allowed: an integer >= 1"),
        (lambda: f.bubble_ratio_gpipe(4, 2.5), r"M=2.5: allowed: an integer >= 1"),
        (lambda: f.peak_inflight_1f1b(4, 4, 4), r"s=4: allowed: 0..3"),
        (lambda: f.microbatches_for_idle_below(4, 0), r"target=0: allowed: a number in \(0, 1\]"),
    ],
)
def test_bad_arguments(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()
