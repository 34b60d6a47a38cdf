"""Static twins of the explorers: one figure, one precomputed slider step per value."""

from __future__ import annotations

import subprocess
import sys

import plotly.graph_objects as go
import pytest

from pipemare_lite.figures.widgets import schedule_explorer_static, staleness_explorer_static
from pipemare_lite.figures.widgets.static import MAX_STEPS


def visible_traces(fig: go.Figure, step) -> list:
    mask = step.args[0]["visible"]
    assert len(mask) == len(fig.data)
    return [t for t, shown in zip(fig.data, mask) if shown]


def test_schedule_static_has_one_step_per_m_with_the_right_boxes():
    P = 4
    fig = schedule_explorer_static("gpipe", stages=P, microbatches=range(1, 17))
    steps = fig.layout.sliders[0].steps
    assert [s.label for s in steps] == [str(m) for m in range(1, 17)]
    for step in steps:
        M = int(step.label)
        shown = visible_traces(fig, step)
        forwards = sum(len(t.x) for t in shown if t.name.startswith("F") and t.meta != "legend")
        assert forwards == P * M
        idle = (P - 1) / (M + P - 1)  # GPipe's bubble, in the step's title
        assert f"idle fraction {idle:.3f}" in step.args[1]["title.text"]
        assert step.args[1]["xaxis.range"][1] == pytest.approx(1.02 * (M + P - 1) * 3)
    # only the first step is visible before the reader touches the slider
    assert [t.visible for t in fig.data] == steps[0].args[0]["visible"]
    assert len(fig.to_json()) < 2_000_000
    go.Figure(fig.to_dict())


def test_schedule_static_skips_sizes_the_engine_refuses():
    fig = schedule_explorer_static("interleaved", stages=4, microbatches=range(1, 17), chunks=2)
    assert [s.label for s in fig.layout.sliders[0].steps] == ["4", "8", "12", "16"]
    with pytest.raises(ValueError, match="multiple"):
        schedule_explorer_static("interleaved", stages=4, microbatches=[3, 5])
    with pytest.raises(ValueError, match="at most"):
        schedule_explorer_static(microbatches=range(1, MAX_STEPS + 2))


def test_staleness_static_has_one_heatmap_per_p():
    fig = staleness_explorer_static("async", stages=range(2, 9), microbatches=4, minibatches=6)
    steps = fig.layout.sliders[0].steps
    assert [s.label for s in steps] == [str(p) for p in range(2, 9)]
    for step in steps:
        P = int(step.label)
        (heat,) = visible_traces(fig, step)
        assert len(heat.z) == P and len(heat.z[0]) == 4 * 6
        assert step.args[1]["yaxis.range"] == [P - 0.5, -0.5]
        assert f"P={P}" in step.args[1]["title.text"]
    assert len(fig.to_json()) < 2_000_000


def test_figures_and_widgets_import_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"  # any 'import torch' now fails
        "import pipemare_lite.figures.viz, pipemare_lite.figures.widgets, pipemare_lite.book.show\n"
        "print('ok')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_staleness_static_dropdown_switches_every_heatmap_to_another_quantity():
    from pipemare_lite.analysis.staleness import weight_versions
    from pipemare_lite.schedules import build_schedule

    fig = staleness_explorer_static("async", stages=[2, 3], microbatches=2, minibatches=4)
    (menu,) = fig.layout.updatemenus
    labels = [b.label for b in menu.buttons]
    assert labels[0].startswith("forward delay") and len(labels) == 3
    (discrepancy,) = [b for b in menu.buttons if b.label.startswith("F-to-B discrepancy")]
    z = discrepancy.args[0]["z"]
    assert len(z) == 2  # one z per heatmap, so the slider's visibility is untouched
    for P, grid in zip([2, 3], z):
        table = weight_versions(build_schedule("async", P, 2, num_minibatches=4))
        by_hand = [[r.version_at_backward - r.version_at_forward for r in table.rows
                    if r.stage == s] for s in range(P)]
        assert [list(row) for row in grid] == by_hand
