"""Figures of the book: pure functions that return ``plotly.graph_objects.Figure``.

Every figure shares one colour scheme (:mod:`pipemare_lite.figures.viz.colors`): one colour per
microbatch, one pattern per op kind, one colour per memory kind and per method. Nothing
here imports torch, and nothing keeps state: call a function, get a figure.

- :func:`gantt`, :func:`gantt_pair`: who computes what, when;
- :func:`staleness_heatmap`, :func:`delay_bars`, :func:`path_figure`: weight staleness;
- :func:`memory_bars`: memory per device, by kind;
- :func:`stability_map`, :func:`roots_figure`, :func:`trajectory_figure`,
  :func:`gamma_sweep_figure`: delayed gradient descent on a quadratic;
- :func:`loss_curves`: training runs side by side;
- :func:`update_norm_figure`, :func:`stage_map_figure`: per-stage evidence;
- :func:`t1_figure`: each stage's learning rate over a run, and its distance to the
  stability edge of its delay;
- :func:`tradeoff_figure`: every method's busiest device against a budget;
- :func:`phase_map_figure`: chapter 10's map, each method's quality against sync's by lr and P;
- :func:`round_trip_figure`, :func:`activation_lifetimes_figure`: schematics of one
  microbatch's round trip (the version each F and B reads) and of how long activations live;
- :func:`rank_trip_figure`: one microbatch's actions on the ranks that run them (chapter 04's
  ideas, one picture each).

The first figure is drawn in chapter 01; each module names the chapter that introduces it,
and docs/module-map.md lists them all with the chapters that use them.

In a Jupyter kernel, importing this package makes figures carry an HTML fallback besides
their plotly JSON, so exported notebooks show them too (:mod:`pipemare_lite.figures.viz.renderer`).
"""

from pipemare_lite.figures.viz.curves import divergence_step, loss_curves
from pipemare_lite.figures.viz.gantt_chart import gantt, gantt_pair, gantt_traces, idle_intervals
from pipemare_lite.figures.viz.lr_schedules import t1_figure
from pipemare_lite.figures.viz.memory import memory_bars
from pipemare_lite.figures.viz.phase_map import phase_map_figure
from pipemare_lite.figures.viz.rank_trip import rank_trip_figure
from pipemare_lite.figures.viz.renderer import use_in_jupyter
from pipemare_lite.figures.viz.round_trip import activation_lifetimes_figure, round_trip_figure
from pipemare_lite.figures.viz.stability import (
    gamma_sweep_figure,
    roots_figure,
    stability_map,
    trajectory_figure,
)
from pipemare_lite.figures.viz.stages import stage_map_figure, update_norm_figure
from pipemare_lite.figures.viz.staleness import delay_bars, path_figure, staleness_heatmap
from pipemare_lite.figures.viz.tradeoff import tradeoff_figure

__all__ = [
    "gantt",
    "gantt_pair",
    "gantt_traces",
    "idle_intervals",
    "staleness_heatmap",
    "delay_bars",
    "path_figure",
    "memory_bars",
    "phase_map_figure",
    "stability_map",
    "roots_figure",
    "trajectory_figure",
    "gamma_sweep_figure",
    "loss_curves",
    "divergence_step",
    "update_norm_figure",
    "stage_map_figure",
    "t1_figure",
    "tradeoff_figure",
    "round_trip_figure",
    "activation_lifetimes_figure",
    "rank_trip_figure",
]

use_in_jupyter()
