"""Each stage's learning rate over a run, and how close it is to its stability edge (chapter 08).

:func:`t1_figure` draws, from a table ``lrs[s][k]`` (e.g.
:func:`pipemare_lite.analysis.stage_lr.stage_lrs`, or the ``stage_lr`` a run recorded):

- left: every stage's learning rate against the update (log scale), the base schedule
  dashed, and a dotted line where T1's anneal ends (update W + K);
- right, when a curvature ``lam`` is given (one for all stages, or one per stage): every
  stage's step measured against chapter 06's bound for its delay,
  ``lr_s(k) * lam_s / (2 sin(pi / (2 (2 tau_s + 1))))``; above 1 the stage, seen as a
  quadratic with that curvature, is outside the stable region.

Stage s has the same shade as in chapter 07's figures (dark: stage 0, the stalest). Plain
lists in, a ``plotly.graph_objects.Figure`` out; nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pipemare_lite.analysis.theory import stability_bound
from pipemare_lite.figures.viz.stages import stage_color

BASE_COLOR = "#555555"


def edge_ratios(row: Sequence[float], lam: float, tau: int) -> list[float]:
    """``lr(k) * lam / stability_bound(tau)`` for every update: >= 1 is outside the bound."""
    bound = stability_bound(tau)
    return [value * lam / bound for value in row]


def _per_stage(lam, P: int) -> list[float]:
    if isinstance(lam, (int, float)):
        return [float(lam)] * P
    lams = [float(x) for x in lam]
    if len(lams) != P:
        raise ValueError(f"{len(lams)} curvatures for {P} stages; give one, or one per stage")
    return lams


def _lam_text(lam) -> str:
    return f"lam = {lam:.3g}" if isinstance(lam, (int, float)) else "lam_s of each stage"


def t1_traces(lrs: Sequence[Sequence[float]], delays: Sequence[int], *,
              base: Sequence[float] | None = None,
              lam: float | Sequence[float] | None = None) -> list[dict]:
    """The figure's traces as plain dicts, in a fixed order: the stages' lrs, the base, then
    (with ``lam``) the stages' edge ratios. A redraw with the same P restyles them in place."""
    if len(lrs) != len(delays):
        raise ValueError(f"{len(lrs)} rows of learning rates for {len(delays)} delays")
    P = len(lrs)
    updates = list(range(len(lrs[0]) if lrs else 0))
    traces = [{
        "type": "scatter", "name": f"stage {s} (tau {delays[s]})", "x": updates,
        "y": list(row), "mode": "lines", "legendgroup": f"stage {s}",
        "line": {"color": stage_color(s, P), "width": 2}, "xaxis": "x", "yaxis": "y",
        "hovertemplate": f"stage {s}, tau {delays[s]}<br>update %{{x}}: lr %{{y:.4g}}"
                         "<extra></extra>",
    } for s, row in enumerate(lrs)]
    if base is not None:
        traces.append({
            "type": "scatter", "name": "base schedule lr(k)", "x": updates, "y": list(base),
            "mode": "lines", "line": {"color": BASE_COLOR, "width": 2, "dash": "dash"},
            "xaxis": "x", "yaxis": "y",
            "hovertemplate": "base<br>update %{x}: lr %{y:.4g}<extra></extra>"})
    if lam is not None:
        lams = _per_stage(lam, P)
        traces += [{
            "type": "scatter", "name": f"stage {s}, lr * lam / bound", "x": updates,
            "y": edge_ratios(row, lams[s], delays[s]), "mode": "lines", "showlegend": False,
            "legendgroup": f"stage {s}", "line": {"color": stage_color(s, P), "width": 2},
            "xaxis": "x2", "yaxis": "y2",
            "hovertemplate": f"stage {s}, tau {delays[s]}<br>update %{{x}}: "
                             "lr*lam/bound %{y:.3g}<extra></extra>",
        } for s, row in enumerate(lrs)]
    return traces


def t1_figure(lrs: Sequence[Sequence[float]], delays: Sequence[int], *,
              base: Sequence[float] | None = None,
              lam: float | Sequence[float] | None = None, anneal_end: int | None = None,
              title: str | None = None) -> go.Figure:
    """Every stage's learning rate over the run (left) and its distance to the edge (right).

    Args:
        lrs: ``lrs[s][k]``, stage s's learning rate at update k.
        delays: each stage's delay tau_s (names the lines; places the bound).
        base: the base schedule ``lr(k)``, drawn dashed.
        lam: a curvature, or one per stage; with it, the right panel shows
            ``lr_s(k) * lam_s / bound(tau_s)``.
        anneal_end: the update where T1's factor reaches 1 (W + K), marked dotted.
    """
    fig = make_subplots(rows=1, cols=2 if lam is not None else 1, horizontal_spacing=0.1,
                        subplot_titles=("learning rate of each stage",
                                        f"lr * lam / bound(tau), {_lam_text(lam)}")
                        if lam is not None else None)
    fig.add_traces(t1_traces(lrs, delays, base=base, lam=lam))
    fig.update_xaxes(title_text="update k", gridcolor="#EEEEEE")
    fig.update_yaxes(type="log", gridcolor="#EEEEEE")
    fig.update_yaxes(title_text="learning rate (log)", row=1, col=1)
    fig.update_layout(shapes=t1_shapes(anneal_end, lam is not None),
                      title={"text": title or "each stage's learning rate with T1"},
                      legend={"title": {"text": "stage (dark: stalest)"}},
                      plot_bgcolor="white", height=440,
                      margin={"l": 70, "r": 20, "t": 80, "b": 50})
    if lam is not None:
        fig.update_yaxes(title_text="lr * lam / bound (log; above 1: outside)", row=1, col=2)
    return fig


def t1_shapes(anneal_end: int | None, edge_panel: bool) -> list[dict]:
    """The dotted end of the anneal (both panels) and the edge ``ratio = 1`` (right panel)."""
    shapes = []
    if anneal_end is not None:
        for axis in (("x", "y"), ("x2", "y2"))[: 2 if edge_panel else 1]:
            shapes.append({"type": "line", "xref": axis[0], "yref": f"{axis[1]} domain",
                           "x0": anneal_end, "x1": anneal_end, "y0": 0, "y1": 1,
                           "line": {"color": BASE_COLOR, "width": 1, "dash": "dot"}})
    if edge_panel:
        shapes.append({"type": "line", "xref": "x2 domain", "yref": "y2", "x0": 0, "x1": 1,
                       "y0": 1, "y1": 1, "line": {"color": "#B00020", "width": 2}})
    return shapes
