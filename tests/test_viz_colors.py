"""The shared colour scheme: distinct, stable, and the same for a name every time."""

from __future__ import annotations

import pytest

from pipemare_lite.analysis.memory import KINDS
from pipemare_lite.figures.viz.colors import (
    MICROBATCH_PALETTE,
    UPDATE_COLOR,
    memory_kind_color,
    method_color,
    microbatch_color,
    op_color,
    shade,
)


def test_palette_colours_are_distinct_and_repeat_with_period_12():
    assert len(set(MICROBATCH_PALETTE)) == len(MICROBATCH_PALETTE) == 12
    assert [microbatch_color(m) for m in range(24)] == list(MICROBATCH_PALETTE) * 2


def test_every_memory_kind_of_the_model_has_its_own_colour():
    colours = [memory_kind_color(kind) for kind in KINDS]
    assert len(set(colours)) == len(KINDS)
    assert memory_kind_color("something new") == memory_kind_color("something new")


def test_method_colours_are_fixed_and_case_blind():
    assert method_color("PipeMare") == method_color("pipemare")
    assert method_color("gpipe") != method_color("async")
    assert method_color("my run") == method_color("my run")  # stable fallback


def test_shade_and_op_colour():
    assert shade("#4E79A7", 0.0) == "#4E79A7"
    assert shade("#4E79A7", 1.0) == "#000000"
    assert shade("#808080", 0.5) == "#404040"
    assert op_color("F", 3) == microbatch_color(3)
    assert op_color("U", 3) == UPDATE_COLOR
    with pytest.raises(ValueError, match="shade amount"):
        shade("#4E79A7", 1.5)
    with pytest.raises(ValueError, match="unknown op kind 'X'"):
        op_color("X", 0)


def test_stage_markers_stand_out_on_both_regions_of_the_stability_map():
    """Issue 30: the last stage's filled marker had the stable region's green (it looked
    hollow, i.e. 'outside')."""
    import math

    from plotly.colors import hex_to_rgb, unlabel_rgb

    from pipemare_lite.figures.viz.colors import STABLE_COLOR, UNSTABLE_COLOR
    from pipemare_lite.figures.viz.stages import stage_color

    backgrounds = [hex_to_rgb(STABLE_COLOR), hex_to_rgb(UNSTABLE_COLOR)]
    for P in range(1, 17):
        for s in range(P):
            color = unlabel_rgb(stage_color(s, P))
            distance = min(math.dist(color, b) for b in backgrounds)
            assert distance > 100, (P, s, color, distance)
