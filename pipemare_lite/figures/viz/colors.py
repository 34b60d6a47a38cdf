"""The book's one colour scheme, shared by every figure (introduced in chapter 02).

A reader who learns the colours once can read every figure of the book:

- **Microbatches** get one colour each, :func:`microbatch_color`. Microbatch ``m`` has the
  same colour in a Gantt chart, a staleness heatmap's path view and a widget, in every
  chapter. The palette has 12 colours and repeats (microbatch 12 looks like microbatch 0);
  boxes also carry the microbatch number as text, so the colour is a help, not the key
  (with interleaving the number is primed per model chunk: ``3``, ``3′``, ``3″``).
- **Operation kinds** are told apart by fill pattern and shade, never by hue, because the
  hue already belongs to the microbatch (:data:`OP_STYLE`): a forward ``F`` is solid, a
  full backward ``B`` is hatched ``/`` and darker, the split backward's input gradient
  ``I`` is hatched ``\\`` and its weight gradient ``W`` is dotted and paler; an update
  ``U`` is a thin black mark; idle time is light grey. Legend swatches for F/B/I/W are
  neutral grey with the kind's pattern.
- **Memory kinds** (weights, optimizer state, stashes, activations ...) get one colour
  each, :func:`memory_kind_color`, the same in every memory figure.
- **Methods** (gpipe, 1f1b, pipedream, async, pipemare ...) get one colour each,
  :func:`method_color`, used by loss curves and comparison plots.

This module is pure data and small helpers; it imports neither plotly nor torch.
"""

from __future__ import annotations

import zlib

#: One colour per microbatch, chosen to be distinct from each other and readable under
#: black text (Tableau-10 plus two extra hues). Index with :func:`microbatch_color`.
MICROBATCH_PALETTE: tuple[str, ...] = (
    "#4E79A7",  # blue
    "#F28E2B",  # orange
    "#59A14F",  # green
    "#E15759",  # red
    "#B07AA1",  # purple
    "#EDC948",  # yellow
    "#76B7B2",  # teal
    "#FF9DA7",  # pink
    "#9C755F",  # brown
    "#BAB0AC",  # grey-beige
    "#8CD17D",  # light green
    "#A0CBE8",  # light blue
)

#: How each operation kind is drawn. ``pattern`` is a plotly bar ``marker.pattern.shape``
#: ("" = solid); ``opacity`` scales the microbatch colour; ``label`` is the legend entry.
OP_STYLE: dict[str, dict] = {
    "F": {"label": "F forward", "pattern": "", "opacity": 1.0, "shade": 0.0},
    "B": {"label": "B backward", "pattern": "/", "opacity": 1.0, "shade": 0.35},
    "I": {"label": "I input grad", "pattern": "\\", "opacity": 1.0, "shade": 0.35},
    "W": {"label": "W weight grad", "pattern": ".", "opacity": 0.75, "shade": 0.15},
    "U": {"label": "U update", "pattern": "", "opacity": 1.0, "shade": 0.0},
}

#: Colour of an update mark and of idle time in Gantt charts.
UPDATE_COLOR = "#222222"
IDLE_COLOR = "#E6E6E6"

#: One colour per memory kind (keys as produced by :mod:`pipemare_lite.analysis.memory`).
MEMORY_KIND_COLORS: dict[str, str] = {
    "weights": "#4E79A7",
    "gradients": "#A0CBE8",
    "optimizer": "#F28E2B",
    "optimizer_state": "#F28E2B",
    "stash": "#E15759",
    "stashed_weights": "#E15759",
    "weight_versions": "#E15759",
    "delta": "#B07AA1",
    "t2_buffer": "#B07AA1",
    "activations": "#59A14F",
    "inflight_activations": "#59A14F",
}

#: One colour per training method (loss curves, comparison tables).
METHOD_COLORS: dict[str, str] = {
    "sequential": "#000000",
    "naive": "#7F7F7F",
    "gpipe": "#4E79A7",
    "1f1b": "#76B7B2",
    "interleaved": "#A0CBE8",
    "zb-h1": "#8CD17D",
    "sync": "#4E79A7",
    "pipedream": "#F28E2B",
    "2bw": "#EDC948",
    "async": "#E15759",
    "pipemare": "#59A14F",
    "t1": "#B07AA1",
    "t2": "#9C755F",
    "t1+t2": "#59A14F",
    "pipemare-w": "#2E6B30",
}

# Colours for names not listed above (picked by a stable hash, so a name keeps its colour).
_FALLBACK = ("#17BECF", "#BCBD22", "#8C564B", "#E377C2", "#7F7F7F", "#1F77B4", "#D62728")


def microbatch_color(m: int) -> str:
    """The colour of microbatch ``m`` (global index; the palette repeats every 12)."""
    if m < 0:
        raise ValueError(f"microbatch index must be >= 0, got {m}")
    return MICROBATCH_PALETTE[m % len(MICROBATCH_PALETTE)]


def _stable_pick(name: str) -> str:
    return _FALLBACK[zlib.crc32(name.encode()) % len(_FALLBACK)]


def memory_kind_color(kind: str) -> str:
    """The colour of a memory kind; unknown kinds get a fixed colour derived from the name."""
    return MEMORY_KIND_COLORS.get(kind, _stable_pick(kind))


def method_color(name: str) -> str:
    """The colour of a method (case-insensitive); unknown names get a stable colour."""
    return METHOD_COLORS.get(name.lower(), _stable_pick(name.lower()))


def shade(color: str, amount: float) -> str:
    """``color`` (``#RRGGBB``) darkened towards black by ``amount`` in [0, 1]."""
    if not (0.0 <= amount <= 1.0):
        raise ValueError(f"shade amount must be in [0, 1], got {amount}")
    if len(color) != 7 or not color.startswith("#"):
        raise ValueError(f"expected a colour like '#4E79A7', got {color!r}")
    rgb = [int(color[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c * (1.0 - amount)):02X}" for c in rgb)


def op_color(kind: str, microbatch: int) -> str:
    """The fill colour of a box of kind ``kind`` for ``microbatch`` (microbatch hue, op shade)."""
    if kind not in OP_STYLE:
        raise ValueError(f"unknown op kind {kind!r}; allowed: {', '.join(OP_STYLE)}")
    if kind == "U":
        return UPDATE_COLOR
    return shade(microbatch_color(microbatch), OP_STYLE[kind]["shade"])


def microbatch_colorscale(amount: float = 0.0) -> list[list]:
    """A stepwise plotly colorscale mapping ``m % 12`` to :func:`microbatch_color` (shaded).

    Use with ``cmin=-0.5, cmax=len(MICROBATCH_PALETTE) - 0.5`` and ``marker.color = m % 12``:
    numeric colours validate and serialise much faster than thousands of colour strings.
    """
    n = len(MICROBATCH_PALETTE)
    scale: list[list] = []
    for k, color in enumerate(MICROBATCH_PALETTE):
        c = shade(color, amount)
        scale.append([k / n, c])
        scale.append([(k + 1) / n, c])
    return scale


#: Stability maps: stable and unstable regions, and the closed-form bound line.
STABLE_COLOR = "#A6D96A"
UNSTABLE_COLOR = "#F4A582"
BOUND_COLOR = "#000000"
#: Roots inside / outside the unit circle, and the marked setting on a stability map.
ROOT_STABLE_COLOR = "#2166AC"
ROOT_UNSTABLE_COLOR = "#B2182B"
POINT_COLOR = "#FFD700"
