"""Interactive explorers for the chapters: thin ipywidgets factories over
:mod:`pipemare_lite.figures.viz`.

- :func:`schedule_explorer`: schedule, P, M, v and F:B:W costs -> Gantt
  chart plus measured numbers beside their closed forms;
- :func:`staleness_explorer`: method, P, N, warm-up -> delay heatmap and one
  microbatch's path through the weight versions;
- :func:`stability_explorer`: step, delay, curvature, momentum, discrepancy
  and T2 -> iterates, characteristic roots and the stability map;
- :func:`granularity_explorer`: P, method and lr -> the trained runs' losses
  and every stage on the stability map (twin: :func:`granularity_explorer_static`);
- :func:`t1_explorer`: P, N, T1's horizon K, the base schedule and a curvature
  -> every stage's learning rate over the run and its distance to the stability edge
  (twin: :func:`t1_explorer_static`);
- :func:`tradeoff_explorer`: P, N, a memory budget and the methods whose
  quality is accepted -> every method's busiest device and the pick (twin:
  :func:`tradeoff_explorer_static`);
- :func:`trace_explorer`: a measured run and the simulator fed its costs ->
  both Gantt charts and utilization per rank (twin: :func:`trace_explorer_static`);
- :func:`t2_explorer`: step, delay, sensitivity and T2's gamma -> the stability
  map without and with T2 and the gamma sweep (twin: :func:`t2_explorer_static`).

The first explorer runs in chapter 00; each module names the chapter that introduces it, and
docs/module-map.md lists them all with the chapters that use them.

Each returns an ``ipywidgets.VBox`` with ``controls`` (name -> control widget) and
``update()``. The HTML book has no kernel, so each explorer has a static twin,
:func:`schedule_explorer_static`, :func:`staleness_explorer_static` and
:func:`stability_explorer_static`: one plotly figure
whose slider steps were computed in advance. Nothing here imports torch.
"""

from pipemare_lite.figures.widgets.granularity import (
    GranularityExplorer,
    granularity_explorer,
    granularity_explorer_static,
)
from pipemare_lite.figures.widgets.schedule import ScheduleExplorer, schedule_explorer
from pipemare_lite.figures.widgets.stability import StabilityExplorer, stability_explorer
from pipemare_lite.figures.widgets.staleness import StalenessExplorer, staleness_explorer
from pipemare_lite.figures.widgets.static import (
    schedule_explorer_static,
    stability_explorer_static,
    staleness_explorer_static,
)
from pipemare_lite.figures.widgets.t1 import T1Explorer, t1_explorer, t1_explorer_static
from pipemare_lite.figures.widgets.t2 import T2Explorer, t2_explorer, t2_explorer_static
from pipemare_lite.figures.widgets.trace import (
    TraceExplorer,
    trace_explorer,
    trace_explorer_static,
)
from pipemare_lite.figures.widgets.tradeoff import (
    TradeoffExplorer,
    tradeoff_explorer,
    tradeoff_explorer_static,
)

__all__ = [
    "schedule_explorer",
    "staleness_explorer",
    "stability_explorer",
    "schedule_explorer_static",
    "staleness_explorer_static",
    "stability_explorer_static",
    "ScheduleExplorer",
    "StalenessExplorer",
    "StabilityExplorer",
    "granularity_explorer",
    "granularity_explorer_static",
    "GranularityExplorer",
    "t1_explorer",
    "t1_explorer_static",
    "T1Explorer",
    "tradeoff_explorer",
    "tradeoff_explorer_static",
    "TradeoffExplorer",
    "trace_explorer",
    "trace_explorer_static",
    "TraceExplorer",
    "t2_explorer",
    "t2_explorer_static",
    "T2Explorer",
]
