"""The map of chapter 10: where each method reaches synchronous quality, by lr and P.

One panel per method; a cell per (P, learning rate) coloured by the method's mean quality
minus 1F1B's at the same lr (white: as good as sync; red: worse), its text the difference and
the diverged seeds; a cross (✕) in the cells where chapter 06's bound predicted divergence for
most seeds (computed from the sync runs' sharpness alone, before any asynchronous run: see
:mod:`pipemare_lite.experiments.lr_map_assess`). Reads the stored assessment only.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots


def phase_map_figure(assessment: dict, study: str, *, rows: list[str] | None = None,
                     title: str | None = None, y_name: str = "P") -> go.Figure:
    """The phase diagram of ``study`` from a stored ``assessment`` (``lr_map_assess.assess``).

    ``rows``: the methods to draw, in order (default: every non-sync row of the study).
    ``y_name``: what the cells' ``P`` holds (``"updates"`` for the Transformer's run-length
    axis, :func:`~pipemare_lite.experiments.lr_map_assess.transformer_by_length`).
    """
    cells = [c for c in assessment["phase"] if c["study"] == study]
    if not cells:
        raise ValueError(f"no phase cells for study {study!r} in the assessment")
    labels = rows or list(dict.fromkeys(c["label"] for c in cells if c["minus_sync"]))
    lrs = sorted({c["lr"] for c in cells})
    Ps = sorted({c["P"] for c in cells})
    predicted: dict[tuple, list[bool]] = {}
    for p in assessment.get("predictions", ()):
        if p["study"] == study:
            predicted.setdefault((p["label"], p["P"], p["lr"]), []).append(p["predicted"])
    fig = make_subplots(rows=1, cols=len(labels), subplot_titles=labels, shared_yaxes=True,
                        horizontal_spacing=0.03)
    x = [f"lr {lr:g}" for lr in lrs]
    y = [f"{y_name} = {P}" for P in Ps]
    for col, label in enumerate(labels, start=1):
        at = {(c["P"], c["lr"]): c for c in cells if c["label"] == label}
        flagged = {(P, lr) for (lab, P, lr), votes in predicted.items()
                   if lab == label and sum(votes) * 2 > len(votes)}
        z, text = [], []
        for P in Ps:
            z.append([at[P, lr]["minus_sync"]["estimate"] if (P, lr) in at else None
                      for lr in lrs])
            text.append([_cell_text(at.get((P, lr)), (P, lr) in flagged) for lr in lrs])
        fig.add_trace(go.Heatmap(
            z=z, x=x, y=y, text=text, texttemplate="%{text}", zmin=-1.0, zmax=0.1, zmid=0.0,
            colorscale=[[0.0, "#b2182b"], [0.5, "#f4a582"], [0.909, "#ffffff"],
                        [1.0, "#4393c3"]],
            showscale=col == len(labels),
            colorbar={"title": "quality − 1F1B"},
            hovertemplate=f"{label}<br>%{{y}}, %{{x}}<br>%{{text}}<extra></extra>"),
            row=1, col=col)
    fig.update_layout(
        title=title or f"{study}: quality minus 1F1B's at the same lr (diverged seeds / seeds); "
                       "✕: chapter 06's bound predicted divergence",
        height=330, margin={"t": 80, "l": 60, "r": 20, "b": 40})
    return fig


def _cell_text(cell: dict | None, flagged: bool) -> str:
    if cell is None:
        return "not run"
    return (f"{cell['minus_sync']['estimate']:+.2f}<br>{cell['diverged']}/{cell['n']} div."
            + ("<br>✕" if flagged else ""))
