"""Schedule explorer: pick a schedule and sizes, see its Gantt and its numbers (chapters 02-05).

Controls for the schedule, P, M, v (interleaving), the placement of the chunks (as built,
round robin "loop" or "v"), the number of minibatches and the cost of F, B and W (and
communication); a Gantt chart of the simulated timeline; a table that
puts every measured number (makespan, idle fraction, bubble ratio, peak activations) next
to its closed form from :mod:`pipemare_lite.analysis.formulas`, with the sizes substituted.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import ipywidgets as widgets

from pipemare_lite.analysis import formulas
from pipemare_lite.analysis.simulate import OpCosts, metrics, simulate
from pipemare_lite.figures.viz.gantt_chart import gantt_layout, gantt_trace_specs
from pipemare_lite.figures.widgets._explorer import Explorer, figure_widget, show_figure
from pipemare_lite.schedules.builders.common import on_placement
from pipemare_lite.schedules.registry import ASYNC_NAMES, SCHEDULE_NAMES, build_schedule

#: The placement control's choices: the builder's own, or its order moved to a style.
PLACEMENTS = ("as built", "loop", "v")
#: Schedules with two chunks per rank on a V whatever the v slider says.
V_SHAPED = ("zb-v", "dualpipev")


@dataclass(frozen=True)
class FormulaRow:
    """One line of the metrics table: a measured value beside its closed form."""

    quantity: str
    measured: str
    expression: str  # the formula with the sizes substituted, or why there is none
    expected: str


def explorer_costs(forward: float, backward: float, weight: float, comm: float = 0.0) -> OpCosts:
    """Costs from the F:B:W sliders: B is the input-gradient half, W the weight half.

    A schedule that does not split its backward pays B + W for one full backward, so every
    schedule does the same work and only the order differs.
    """
    return OpCosts(forward=forward, backward=backward + weight, input_grad=backward,
                   weight_grad=weight, update=0.0, comm=comm)


def chunk_share(schedule: str, chunks: int) -> int:
    """What each op's cost is divided by: v for interleaving, else 1.

    The sliders give the cost of a rank's whole share of the model (one stage); cut into v
    chunks, each chunk's forward, input-gradient and weight-gradient cost 1/v of it (the
    chapter's ``per_chunk_costs``), so every v does the same work and only the order and the
    bubble change (issue 45: unscaled, raising v multiplied the work). Communication
    latency is per message and is not divided.
    """
    return chunks if schedule == "interleaved" else 1


def _fmt(x: float) -> str:
    return f"{x:.4g}"


@dataclass(frozen=True)
class ClosedForms:
    """The closed forms that apply to one schedule and size (None where there is none)."""

    makespan_text: str
    makespan: float | None
    idle_text: str
    idle: float | None
    peaks: list[int] | None = None


def _flushed(name, P, M, v, K, F, B, I, W) -> ClosedForms:
    """Naive, GPipe, 1F1B, interleaved, ZB-H1: K flushed minibatches back to back."""
    if name == "naive":
        return ClosedForms(f"K P M (F+B) = {K}*{P}*{M}*({_fmt(F)}+{_fmt(B)})", K * P * M * (F + B),
                           f"(P-1)/P = {P - 1}/{P}", formulas.idle_fraction_naive(P), [1] * P)
    if name in ("gpipe", "1f1b"):
        peaks = ([formulas.peak_inflight_gpipe(P, M)] * P if name == "gpipe"
                 else [formulas.peak_inflight_1f1b(P, M, s) for s in range(P)])
        return ClosedForms(f"K (M+P-1)(F+B) = {K}*({M}+{P}-1)({_fmt(F)}+{_fmt(B)})",
                           K * formulas.makespan_gpipe(P, M, F, B),
                           f"(P-1)/(M+P-1) = {P - 1}/{M + P - 1}",
                           formulas.idle_fraction_gpipe(P, M), peaks)
    if name == "interleaved":
        if M % P:
            raise ValueError(f"it needs M a multiple of P (M={M}, P={P})")
        return ClosedForms(f"K (vM+P-1)(F+B), F and B per chunk = {K}*({v}*{M}+{P}-1)"
                           f"({_fmt(F)}+{_fmt(B)})",
                           K * formulas.makespan_interleaved(P, M, v, F, B),
                           f"(P-1)/(vM+P-1) = {P - 1}/{v * M + P - 1}",
                           formulas.idle_fraction_interleaved(P, M, v),
                           [formulas.peak_inflight_interleaved(P, M, v, s) for s in range(P)])
    if name in ("zb-h2", *V_SHAPED):
        return _balanced_zero_bubble(name, P, M, K, F, I, W)
    # zb-h1
    return ClosedForms(f"K [M(F+I+W) + (P-1) max(F+I-W, F, I)] with K={K}",
                       K * formulas.makespan_zb_h1(P, M, F, I, W),
                       "1 - M(F+I+W) / makespan", formulas.idle_fraction_zb_h1(P, M, F, I, W),
                       [formulas.peak_inflight_zb_h1(P, M, s) for s in range(P)])


def _balanced_zero_bubble(name, P, M, K, F, I, W) -> ClosedForms:
    """ZB-H2, ZB-V, DualPipeV: closed forms for F = I = W (the papers' zero-bubble case)."""
    if not (F == I == W):
        raise ValueError(f"the closed form assumes F = I = W (here {_fmt(F)}, {_fmt(I)}, "
                         f"{_fmt(W)})")
    if name == "zb-h2":
        return ClosedForms(f"(3KM + P-1) F = (3*{K}*{M}+{P}-1)*{_fmt(F)}",
                           formulas.makespan_zb_h2(P, M, K, F),
                           f"(P-1)/(3KM+P-1) = {P - 1}/{3 * K * M + P - 1}",
                           formulas.idle_fraction_zb_h2(P, M, K),
                           [formulas.peak_inflight_zb_h2(P, M)] * P)
    if name == "zb-v":
        return ClosedForms(f"(6KM + P-1) F = (6*{K}*{M}+{P}-1)*{_fmt(F)}",
                           formulas.makespan_zb_v(P, M, K, F),
                           f"(P-1)/(6KM+P-1) = {P - 1}/{6 * K * M + P - 1}",
                           formulas.idle_fraction_zb_v(P, M, K),
                           [formulas.peak_inflight_zb_v(P, M)] * P)
    return ClosedForms(f"K (6M + P-1) F = {K}*(6*{M}+{P}-1)*{_fmt(F)}",
                       formulas.makespan_dualpipe_v(P, M, K, F),
                       f"(P-1)/(6M+P-1) = {P - 1}/{6 * M + P - 1}",
                       formulas.idle_fraction_dualpipe_v(P, M, K),
                       [formulas.peak_inflight_dualpipe_v(P, M)] * P)


def _no_flush(name, P, M, K, F, B) -> ClosedForms:
    """PipeDream, 2BW, async: one fill and one drain for all T = K M microbatches."""
    T = K * M
    peaks = ([formulas.peak_inflight_async(P, T, s) for s in range(P)] if name == "async"
             else [min(P - s, T) for s in range(P)])  # 1F1B-ordered without flush
    return ClosedForms(f"(T+P-1)(F+B) with T = KM = {T}", formulas.makespan_no_flush(P, T, F, B),
                       f"(P-1)/(T+P-1) = {P - 1}/{T + P - 1}", (P - 1) / (T + P - 1), peaks)


def closed_forms(schedule, costs: OpCosts) -> ClosedForms:
    """The closed forms for ``schedule`` under ``costs``; texts say why when none applies."""
    name = schedule.name
    if name == "custom":
        return ClosedForms("n/a: no closed form for a moved or hand-written schedule", None,
                           "n/a: no closed form for a moved or hand-written schedule", None)
    P, M, v, K = (schedule.num_ranks, schedule.num_microbatches, schedule.chunks,
                  schedule.num_minibatches)
    F, B, I, W = costs.forward, costs.backward, costs.input_grad, costs.weight_grad
    if costs.comm:
        return ClosedForms("n/a: the closed forms assume comm = 0", None,
                           "n/a: the closed forms assume comm = 0", None)
    try:
        if name in ASYNC_NAMES:
            return _no_flush(name, P, M, K, F, B)
        return _flushed(name, P, M, v, K, F, B, I, W)
    except ValueError as error:  # a formula that does not cover these sizes says why
        return ClosedForms(f"n/a: {error}", None, f"n/a: {error}", None)


def formula_rows(schedule, measured, costs: OpCosts) -> list[FormulaRow]:
    """Measured metrics of ``schedule`` beside the closed forms that apply to it."""
    forms = closed_forms(schedule, costs)

    def value(x):
        return "" if x is None else _fmt(x)

    bubble = None if forms.idle is None else forms.idle / (1 - forms.idle)
    rows = [
        FormulaRow("makespan", _fmt(measured.makespan), forms.makespan_text,
                   value(forms.makespan)),
        FormulaRow("idle fraction", _fmt(measured.idle_fraction), forms.idle_text,
                   value(forms.idle)),
        FormulaRow("bubble ratio (idle / busy)", _fmt(measured.bubble_ratio),
                   "idle / (1 - idle)", value(bubble)),
        FormulaRow("peak in-flight activations per rank",
                   ", ".join(map(str, measured.peak_inflight)),
                   "per-stage closed form" if forms.peaks else "n/a (no closed form here)",
                   ", ".join(map(str, forms.peaks)) if forms.peaks else ""),
    ]
    v = schedule.chunks
    if schedule.name == "interleaved" and v > 1:
        # a (chunk, microbatch) pair holds 1/v of a stage's activations: the memory a rank
        # needs, in full-stage microbatches, is its peak count / v
        # (the chapter's formula holds whatever the costs, comm included)
        P, M = schedule.num_ranks, schedule.num_microbatches
        peaks = [formulas.peak_inflight_interleaved(P, M, v, s) for s in range(P)]
        rows.append(FormulaRow(
            "peak activation memory per rank (full-stage microbatches)",
            ", ".join(_fmt(k / v) for k in measured.peak_inflight),
            "min(2(P-1-r) + (v-1)P + 1, vM) / v",
            ", ".join(_fmt(k / v) for k in peaks)))
        rows.append(FormulaRow("cost per chunk (the sliders' stage cost / v)",
                               f"F {_fmt(costs.forward)}, B {_fmt(costs.backward)}",
                               f"F/v, (B+W)/v with v = {v}", ""))
    if schedule.name in ASYNC_NAMES and measured.full_pipeline_utilization is not None:
        P, N = schedule.num_ranks, schedule.num_microbatches
        rows.append(FormulaRow("steady-state idle fraction",
                               _fmt(1 - measured.full_pipeline_utilization), "0 (no flush)",
                               _fmt(formulas.idle_fraction_async_steady_state(P, N))))
    return rows


def metrics_table_html(rows: list[FormulaRow]) -> str:
    """The metrics table: quantity | measured | closed form | its value."""
    body = "".join(
        f"<tr><td>{html.escape(r.quantity)}</td><td><b>{html.escape(r.measured)}</b></td>"
        f"<td><code>{html.escape(r.expression)}</code></td><td>{html.escape(r.expected)}</td></tr>"
        for r in rows
    )
    return (
        '<table style="border-collapse:collapse" border="1" cellpadding="4">'
        "<tr><th>quantity</th><th>measured (simulated)</th><th>closed form</th>"
        f"<th>closed-form value</th></tr>{body}</table>"
    )


class ScheduleExplorer(Explorer):
    """The widget returned by :func:`schedule_explorer` (see there)."""

    def __init__(self, schedule: str, stages: int, microbatches: int, chunks: int,
                 minibatches: int, forward: float, backward: float, weight: float,
                 split_backward: bool = True, placement: str = "as built") -> None:
        style = {"description_width": "initial"}
        self.split_backward = split_backward

        def cost(value, description):
            return widgets.FloatSlider(value=value, min=0.1, max=4.0, step=0.1,
                                       description=description, style=style)

        controls = {
            "schedule": widgets.Dropdown(options=SCHEDULE_NAMES, value=schedule,
                                         description="schedule"),
            "stages": widgets.IntSlider(value=stages, min=1, max=16, description="P stages",
                                        style=style),
            "microbatches": widgets.IntSlider(value=microbatches, min=1, max=64,
                                              description="M microbatches", style=style),
            "chunks": widgets.IntSlider(value=chunks, min=1, max=4,
                                        description="v chunks (interleaved)", style=style),
            "placement": widgets.Dropdown(options=PLACEMENTS, value=placement,
                                          description="placement", style=style),
            "minibatches": widgets.IntSlider(value=minibatches, min=1, max=4,
                                             description="minibatches", style=style),
            "forward": cost(forward, "F cost"),
            "backward": cost(
                backward, "B cost (input grad)" if split_backward else "B cost (backward)"
            ),
            "weight": cost(weight, "W cost (weight grad)"),
            "comm": widgets.FloatSlider(value=0.0, min=0.0, max=2.0, step=0.1,
                                        description="comm latency", style=style),
        }
        if not split_backward:  # one B slider while the backward is not split
            controls["weight"].layout.display = "none"
        self.figure = figure_widget()
        self.summary = widgets.HTML()
        self.schedule = self.timeline = self.metrics = None
        c = controls
        super().__init__(
            controls,
            [
                widgets.VBox([
                    widgets.HBox([c["schedule"], c["minibatches"], c["placement"]]),
                    widgets.HBox([c["stages"], c["microbatches"], c["chunks"]]),
                    widgets.HBox([c["forward"], c["backward"], c["weight"], c["comm"]]),
                ]),
                self.figure,
                self.summary,
            ],
        )
        self.update()

    def _redraw(self, schedule, stages, microbatches, chunks, minibatches, forward, backward,
                weight, comm, placement) -> None:
        interleaved = schedule == "interleaved"
        self.controls["chunks"].disabled = not interleaved  # v only means something there
        built = build_schedule(schedule, stages, microbatches,
                               chunks=chunks if interleaved else 1,
                               num_minibatches=minibatches)
        if placement != "as built":  # the same order per rank, chunks moved (may deadlock)
            built = on_placement(built, placement)
        share = chunk_share(schedule, chunks)  # interleaving: a chunk costs 1/v of a stage
        if self.split_backward:
            costs = explorer_costs(forward / share, backward / share, weight / share, comm)
        else:  # B is the whole backward; a split schedule halves it into I and W
            costs = explorer_costs(forward / share, backward / 2 / share,
                                   backward / 2 / share, comm)
        timeline = simulate(built, costs)
        measured = metrics(timeline)
        show_figure(self.figure, gantt_trace_specs(timeline), gantt_layout(timeline))
        self.summary.value = metrics_table_html(formula_rows(built, measured, costs))
        self.schedule, self.timeline, self.metrics = built, timeline, measured


def schedule_explorer(
    schedule: str = "1f1b",
    stages: int = 4,
    microbatches: int = 8,
    chunks: int = 2,
    *,
    minibatches: int = 1,
    forward: float = 1.0,
    backward: float | None = None,
    weight: float = 1.0,
    split_backward: bool = True,
    placement: str = "as built",
) -> ScheduleExplorer:
    """A widget to explore pipeline schedules.

    Controls (``w.controls[name]``): ``schedule``, ``stages`` (P), ``microbatches`` (M),
    ``chunks`` (v, interleaved only), ``placement`` (``"as built"``, or the built order
    moved to ``"loop"`` or ``"v"``: :func:`~pipemare_lite.schedules.on_placement`; an order
    that cannot run there shows the deadlock report), ``minibatches``,
    ``forward``/``backward``/``weight``
    (F, B = input-gradient and W = weight-gradient costs of one stage; an unsplit backward
    costs B + W; with interleaving each of the v chunks costs 1/v of them, see
    :func:`chunk_share`, and the table shows the peak activation memory in stages)
    and ``comm``. With ``split_backward=False`` (before chapter 04 splits the
    backward) there is one ``backward`` slider for the whole backward (default 2) and the W
    slider is hidden; a split schedule then costs I = W = B/2. With ``split_backward=True``
    (the default) ``backward`` is the input-gradient half (default 1).

    Attributes: ``figure`` (the Gantt FigureWidget), ``summary`` (an HTML table,
    measured vs closed form), ``message``/``error`` (the engine's refusal for an impossible
    combination), ``schedule``, ``timeline``, ``metrics`` (what is drawn). ``w.update()``
    redraws; moving a control does it too.
    """
    if schedule not in SCHEDULE_NAMES:
        raise ValueError(f"unknown schedule {schedule!r}; allowed: {', '.join(SCHEDULE_NAMES)}")
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; allowed: {', '.join(PLACEMENTS)}")
    if backward is None:
        backward = 1.0 if split_backward else 2.0
    return ScheduleExplorer(schedule, stages, microbatches, chunks, minibatches, forward,
                            backward, weight, split_backward, placement)
