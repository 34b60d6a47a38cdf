"""The trade-off table (chapter 10): rows against the memory model, the simulator and the
formulas; the pick for a budget; the figure, the explorer and its static twin."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from pipemare_lite.analysis.formulas import idle_fraction_zb_h1, utilization_gpipe
from pipemare_lite.analysis.memory import KINDS, MemoryProfile, memory_by_kind
from pipemare_lite.figures.viz import tradeoff_figure
from pipemare_lite.figures.widgets import tradeoff_explorer, tradeoff_explorer_static
from pipemare_lite.methods.registry import METHODS
from pipemare_lite.methods.tradeoff import (
    SCHEDULE_OF,
    TRADEOFF_METHODS,
    TradeoffRow,
    fits,
    long_enough,
    pick_method,
    tradeoff_table,
)
from pipemare_lite.schedules import build_schedule

PROFILE = MemoryProfile([4000, 2000, 2000, 400], [900, 600, 600, 100], "momentum")


def test_schedule_map_is_the_registrys():
    assert set(SCHEDULE_OF) == set(TRADEOFF_METHODS)
    for method, (builder, t2) in SCHEDULE_OF.items():
        spec = METHODS[method]
        assert (spec.builder, spec.options.t2) == (builder, t2)
        assert spec.options.warmup == 0


@pytest.mark.parametrize("N", [1, 2, 3, 4, 8])
def test_rows_are_the_memory_model_and_the_simulators(N):
    P = len(PROFILE.param_bytes)
    rows = {r.method: r for r in tradeoff_table(PROFILE, N)}
    for method, (name, t2) in SCHEDULE_OF.items():
        row = rows[method]
        if method == "2bw" and N < P - 1:
            assert row.not_possible and "2bw" in row.not_possible and row.utilization is None
            assert not fits(row, 10**12)
            continue
        flushed = METHODS[method].weight_mode == "sync"
        K = 2 if flushed else long_enough(P, N)
        peaks = memory_by_kind(build_schedule(name, P, N, num_minibatches=K), PROFILE, t2=t2)
        assert row.memory == {k: sum(d[k] for d in peaks) for k in KINDS}
        assert row.device_peak == max(d["peak_total"] for d in peaks)
        busiest = max(peaks, key=lambda d: d["peak_total"])
        assert row.device_memory == {k: busiest[k] for k in KINDS}
        expected = {"gpipe": utilization_gpipe(P, N), "1f1b": utilization_gpipe(P, N),
                    "zb-h1": 1 - idle_fraction_zb_h1(P, N) if N >= P else row.utilization}
        assert row.utilization == pytest.approx(expected.get(method, 1.0))


def test_long_enough_reaches_the_steady_state_peaks():
    P = len(PROFILE.param_bytes)
    for N in (1, 2, 4):
        for name in ("pipedream", "async"):
            short = memory_by_kind(build_schedule(name, P, N, num_minibatches=long_enough(P, N)),
                                   PROFILE)
            longer = memory_by_kind(build_schedule(name, P, N,
                                                   num_minibatches=3 * long_enough(P, N)), PROFILE)
            assert short == longer


def _rows(spec):
    return [TradeoffRow(m, m.upper(), {}, peak, u, None if u is not None else "no",
                        dict.fromkeys(KINDS, 0)) for m, peak, u in spec]


def test_pick_method_rules():
    rows = _rows([("gpipe", 100, 0.5), ("zb-h1", 100, 0.8), ("pipedream", 300, 1.0),
                  ("async", 500, 1.0), ("2bw", 50, None)])
    assert pick_method(rows, 99) is None  # 2bw cannot run, however small its peak
    assert pick_method(rows, 100) == "zb-h1"  # a peak equal to the budget fits
    assert pick_method(rows, 299) == "zb-h1"
    assert pick_method(rows, 10**6) == "pipedream"  # a tie goes to the smaller peak
    assert pick_method(rows, 10**6, ["gpipe", "async"]) == "async"
    assert pick_method(rows, 10**6, []) is None
    tie = _rows([("gpipe", 100, 0.5), ("1f1b", 100, 0.5)])
    assert pick_method(tie, 100) == "gpipe"  # full tie: the earlier row
    with pytest.raises(ValueError, match="candidates"):
        pick_method(rows, 100, ["nope"])
    with pytest.raises(ValueError, match="budget_bytes=-1"):
        pick_method(rows, -1)
    with pytest.raises(ValueError, match="unknown method 'x'"):
        tradeoff_table(PROFILE, 2, methods=("x",))


def test_figure_fades_what_does_not_fit_and_marks_the_pick():
    rows = tradeoff_table(PROFILE, 2)
    budget = sorted(r.device_peak for r in rows if r.not_possible is None)[2]
    pick = pick_method(rows, budget)
    fig = tradeoff_figure(rows, budget, pick=pick)
    bars = [t for t in fig.data if t.type == "bar"]
    assert {t.name for t in bars} >= {"weights", "optimizer state", "in-flight activations"}
    for i, row in enumerate(rows):
        faded = bars[0].marker.opacity[i] < 1
        assert faded == (row.not_possible is None and row.device_peak > budget)
        assert (bars[0].marker.line.width[i] > 0) == (row.method == pick)
    labels = fig.data[-1].text
    assert "cannot run" in labels[[r.method for r in rows].index("2bw")]
    assert fig.layout.shapes[0].y0 == pytest.approx(budget / 2**10)  # KiB axis
    with pytest.raises(ValueError, match="at least one row"):
        tradeoff_figure([], 1)


def _tables():
    return {(P, N): tradeoff_table(MemoryProfile([4000] * P, [500] * P, "adam"), N)
            for P in (2, 4) for N in (2, 4)}


def test_explorer_moves_the_budget_and_switches_tables():
    tables = _tables()
    w = tradeoff_explorer(tables, P=4, N=4)
    assert w.error is None
    rows = tables[4, 4]
    for budget in sorted({r.device_peak for r in rows}):
        w.set(budget=float(budget))
        assert w.error is None and w.pick == pick_method(rows, budget)
        label = next((r.label for r in rows if r.method == w.pick), "nothing fits")
        assert f"pick: <b>{label}</b>" in w.summary.value
    w.set(candidates=("gpipe", "1f1b"))
    assert w.pick in ("gpipe", "1f1b", None)
    w.set(P=2, N=2)
    assert w.error is None and "P=2, N=2" in w.figure.layout.title.text
    assert w.pick == pick_method(tables[2, 2], w.controls["budget"].value, ("gpipe", "1f1b"))
    with pytest.raises(ValueError, match="no table for P=8"):
        tradeoff_explorer(tables, P=8, N=2)


def test_static_twin_has_one_step_per_budget():
    rows = _tables()[4, 4]
    budgets = [r.device_peak for r in rows if r.not_possible is None][:3] + [1.0]
    fig = tradeoff_explorer_static(rows, budgets=budgets)
    steps = fig.layout.sliders[0].steps
    assert len(steps) == len(budgets)
    for budget, step in zip(budgets, steps):
        assert f"pick {pick_method(rows, budget) or 'none'}" in step.args[1]["title.text"]
        assert len(step.args[0]["marker.opacity"]) == len(fig.data)
    go.Figure(fig.to_dict())
    with pytest.raises(ValueError, match="budgets"):
        tradeoff_explorer_static(rows, budgets=[])


@pytest.mark.parametrize("N", [2, 8, 12])
def test_the_schedule_rows_are_the_memory_model_and_the_closed_forms(N):
    from pipemare_lite.analysis import formulas as f
    from pipemare_lite.methods.tradeoff import SCHEDULE_ROWS, split_profile

    P = len(PROFILE.param_bytes)
    from pipemare_lite.methods.tradeoff import TRADEOFF_ROWS

    assert [r.method for r in tradeoff_table(PROFILE, N)] == list(TRADEOFF_METHODS)
    rows = {r.method: r for r in tradeoff_table(PROFILE, N, methods=TRADEOFF_ROWS)}
    assert list(rows)[:6] == ["gpipe", "1f1b", "zb-h1", "zb-h2", "zb-v", "dualpipev"]
    halves = split_profile(PROFILE, 2)  # each stage cut in two: the same model
    assert [a + b for a, b in zip(halves.param_bytes[::2], halves.param_bytes[1::2])] == \
        PROFILE.param_bytes
    for name in SCHEDULE_ROWS:
        row = rows[name]
        if name == "dualpipev" and N < 2 * P:
            assert "num_microbatches >= 2P" in row.not_possible and row.utilization is None
            continue
        schedule = build_schedule(name, P, N, num_minibatches=2)
        profile = halves if schedule.chunks == 2 else PROFILE
        peaks = memory_by_kind(schedule, profile)
        assert row.memory == {k: sum(d[k] for d in peaks) for k in KINDS}
        assert row.device_peak == max(d["peak_total"] for d in peaks)
    if N >= 2 * P - 1:  # one more minibatch: the work alone for ZB-H2 and ZB-V
        assert rows["zb-h2"].utilization == pytest.approx(1.0)
        assert rows["zb-v"].utilization == pytest.approx(1.0)
    if N >= 2 * P:  # DualPipeV pays its (P-1) F every minibatch
        assert rows["dualpipev"].utilization == pytest.approx(
            1 - f.idle_fraction_dualpipe_v(P, N))
