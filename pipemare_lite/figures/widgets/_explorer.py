"""What every explorer widget shares: named controls, one update handler, an error line.

An explorer is an ``ipywidgets.VBox`` whose ``controls`` dict maps a name to its control
widget and whose :meth:`Explorer.update` redraws everything from the controls' values. Each
control calls ``update`` when its value changes; tests call it directly. A bad combination
(e.g. a schedule the engine refuses) shows the engine's own error text in the widget and
leaves the last good figures in place, instead of raising inside a callback where the
reader would never see it. No state is stored outside the live objects.
"""

from __future__ import annotations

import html

import ipywidgets as widgets
import plotly.graph_objects as go

#: Errors that mean "the reader chose an impossible combination", shown, not raised.
USER_ERRORS = (ValueError, KeyError)


def figure_widget() -> go.FigureWidget:
    """An empty plotly FigureWidget that skips re-validating our (tested) traces: faster."""
    return go.FigureWidget(_validate=False)


#: Attribute of a FigureWidget that remembers which trace properties show_figure set.
_SET_KEYS = "_pipemare_set_keys"


def _flatten(props: dict, prefix: str = "") -> dict:
    """``{"marker": {"color": c}}`` -> ``{"marker.color": c}`` (plotly's restyle paths)."""
    flat = {}
    for key, value in props.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _same_traces(target: go.FigureWidget, data: list[dict]) -> bool:
    return len(target.data) == len(data) and all(
        old.type == new.get("type", "scatter") and old.name == new.get("name")
        for old, new in zip(target.data, data)
    )


def show_figure(target: go.FigureWidget, data, layout: dict) -> None:
    """Make ``target`` show ``data`` (trace dicts or objects) with ``layout`` (a plain dict).

    When the traces are the same kinds as before (the common case: a slider moved), their
    properties are restyled in place, which is several times faster than rebuilding them;
    properties the new traces lack are unset. Shapes and annotations are cleared first, so
    lines from the previous figure never stay behind.
    """
    data = [d if isinstance(d, dict) else d.to_plotly_json() for d in data]
    new = [_flatten(d) for d in data]
    keys = set().union(*new) - {"type", "uid"}
    if data and _same_traces(target, data):
        # unset what the previous traces had and these lack (we remember what we set)
        stale = getattr(target, _SET_KEYS, set()) - keys
        target.plotly_restyle(
            {key: [n.get(key) for n in new] for key in keys | stale},
            trace_indexes=list(range(len(data))),
        )
    else:
        target.data = []
        target.add_traces(data)
    setattr(target, _SET_KEYS, keys)
    layout = {k: v for k, v in layout.items() if k != "template"}
    layout.setdefault("shapes", [])
    layout.setdefault("annotations", [])
    target.layout.update(layout, overwrite=True)


def show_plotly_figure(target: go.FigureWidget, figure: go.Figure) -> None:
    """:func:`show_figure` for a finished ``go.Figure`` (small figures: heatmaps, paths)."""
    show_figure(target, figure.data, figure.layout.to_plotly_json())


def error_html(message: str) -> str:
    """The error line of an explorer: the engine's message, visibly marked."""
    return (
        '<div style="color:#B00020;border-left:4px solid #B00020;padding:4px 8px;'
        f'background:#FDECEA"><b>Not possible:</b> {html.escape(message)}</div>'
    )


class Explorer(widgets.VBox):
    """Base class: ``controls`` (name -> widget), ``update()``, ``error`` (last error or None)."""

    def __init__(self, controls: dict, children: list, **kwargs) -> None:
        self.controls = dict(controls)
        self.message = widgets.HTML(value="")
        self.error: str | None = None
        self._updating = False
        super().__init__(children=[*children[:1], self.message, *children[1:]], **kwargs)
        for control in self.controls.values():
            control.observe(self._on_change, names="value")

    def _on_change(self, change) -> None:
        if not self._updating:
            self.update()

    def set(self, **values) -> None:
        """Set several controls at once, then redraw once: ``w.set(stages=8, microbatches=16)``."""
        unknown = sorted(set(values) - set(self.controls))
        if unknown:
            raise ValueError(
                f"unknown control(s) {', '.join(unknown)}; allowed: {', '.join(self.controls)}"
            )
        self._updating = True  # silence the per-control redraws
        try:
            for name, value in values.items():
                self.controls[name].value = value
        finally:
            self._updating = False
        self.update()

    def values(self) -> dict:
        """The current value of every control, by name."""
        return {name: control.value for name, control in self.controls.items()}

    def update(self) -> None:
        """Redraw from the controls; shows (does not raise) errors the reader can fix."""
        self._updating = True
        try:
            self._redraw(**self.values())
        except USER_ERRORS as error:
            self.error = str(error.args[0]) if error.args else repr(error)
            self.message.value = error_html(self.error)
        else:
            self.error = None
            self.message.value = ""
        finally:
            self._updating = False

    def _redraw(self, **values) -> None:  # pragma: no cover - abstract
        raise NotImplementedError
