"""The T1 explorer (chapter 08) and its static twin: what each control changes."""

from __future__ import annotations

import pytest

from pipemare_lite.analysis.stage_lr import first_unstable_update, stage_lrs
from pipemare_lite.analysis.theory import stability_bound
from pipemare_lite.figures.viz import t1_figure
from pipemare_lite.figures.widgets import t1_explorer, t1_explorer_static
from pipemare_lite.figures.widgets.t1 import t1_delays


def _lines(w):
    return [t for t in w.figure.data if t.xaxis in (None, "x") and t.name.startswith("stage")]


def test_controls_redraw_each_stage_from_the_formula():
    w = t1_explorer(lr=0.05, total_updates=40, P=4, N=2, K=20, lam=10.0)
    assert w.error is None and w.delays == [4, 3, 2, 1] == t1_delays(4, 2)
    assert w.lrs == stage_lrs(0.05, [4, 3, 2, 1], 40, horizon=20)
    lines = _lines(w)
    assert len(lines) == 4 and lines[0].y[0] == pytest.approx(0.05 / 4)
    assert lines[0].y[20] == pytest.approx(0.05) and lines[3].y[0] == pytest.approx(0.05)
    ratios = [t for t in w.figure.data if t.xaxis == "x2"]
    assert list(ratios[0].y) == pytest.approx([v * 10.0 / stability_bound(4) for v in w.lrs[0]])
    first = first_unstable_update(w.lrs[0], 10.0, 4)
    assert first is not None and f"<td>{first}</td>" in w.table.value
    # lr * lam = 0.5: above the bounds of tau 4 and 3, below those of tau 2 and 1
    assert "2 of 4 stages leave" in w.figure.layout.title.text
    w.set(K=40)
    assert _lines(w)[0].y[20] == pytest.approx(0.05 * 4 ** -0.5)
    assert w.figure.layout.shapes[0].x0 == 40
    w.set(schedule="cosine")
    assert w.lrs == stage_lrs(0.05, [4, 3, 2, 1], 40, horizon=40, schedule="cosine")
    base = [t for t in w.figure.data if t.name == "base schedule lr(k)"][0]
    assert base.y[0] == pytest.approx(0.05) and base.y[-1] < 0.001
    w.set(P=8, N=4)
    assert w.delays == [4, 4, 3, 3, 2, 2, 1, 1] and len(_lines(w)) == 8
    w.set(lam=0.1)
    assert "0 of 8 stages leave" in w.figure.layout.title.text and "never" in w.table.value


def test_without_annealing_t1_is_off():
    w = t1_explorer(lr=0.05, total_updates=10, P=3, N=1, K=0)
    assert all(v == 0.05 for row in w.lrs for v in row)


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ValueError, match="K=50: allowed 0..40"):
        t1_explorer(lr=0.05, total_updates=40, K=50)
    with pytest.raises(ValueError, match="unknown base schedule 'linear'"):
        t1_explorer(lr=0.05, total_updates=40, schedule="linear")
    with pytest.raises(ValueError, match="P=17, N=2: allowed P in 1..16"):
        t1_explorer(lr=0.05, total_updates=40, P=17)
    with pytest.raises(ValueError, match="lr must be a positive number"):
        t1_explorer(lr=0.0, total_updates=40)
    with pytest.raises(ValueError, match="horizons must hold"):
        t1_explorer_static(lr=0.05, total_updates=40, horizons=[])


def test_static_twin_has_one_step_per_horizon():
    fig = t1_explorer_static(lr=0.05, total_updates=40, horizons=[0, 20, 40], P=4, N=2)
    steps = fig.layout.sliders[0].steps
    assert [s.label for s in steps] == ["0", "20", "40"]
    ys = steps[1].args[0]["y"]
    assert len(ys) == 8 and ys[0] == pytest.approx(stage_lrs(0.05, [4, 3, 2, 1], 40,
                                                             horizon=20)[0])
    assert list(steps[1].args[2]) == [0, 1, 2, 3, 5, 6, 7, 8]  # the base (trace 4) does not move
    assert all(v == pytest.approx(0.05) for v in fig.data[0].y)  # K = 0 first: no T1


def test_t1_figure_without_curvature_has_one_panel():
    fig = t1_figure([[0.1, 0.1], [0.2, 0.2]], [2, 1], anneal_end=1)
    assert len(fig.data) == 2 and all(t.xaxis in (None, "x") for t in fig.data)
    with pytest.raises(ValueError, match="2 rows of learning rates for 1 delays"):
        t1_figure([[0.1], [0.2]], [1])


def test_t1_figure_takes_one_curvature_per_stage():
    fig = t1_figure([[0.1, 0.1], [0.2, 0.2]], [2, 1], lam=[3.0, 1.0])
    ratios = [t for t in fig.data if t.xaxis == "x2"]
    assert list(ratios[0].y) == pytest.approx([0.3 / stability_bound(2)] * 2)
    assert list(ratios[1].y) == pytest.approx([0.2 / stability_bound(1)] * 2)
    with pytest.raises(ValueError, match="3 curvatures for 2 stages"):
        t1_figure([[0.1], [0.2]], [2, 1], lam=[1.0, 2.0, 3.0])
