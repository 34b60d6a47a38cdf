"""A plotly figure as a ``<div>`` plus the script that draws it: the figure's HTML form.

Every figure of the book is plotly JSON, which JupyterLab draws itself.
Everything else needs HTML: the book site (where the page loads one local plotly.js) and a
notebook exported with ``nbconvert --to html`` or shown by a previewer (where the first
figure's HTML carries plotly.js, see :mod:`pipemare_lite.figures.viz.renderer`). Both use
:func:`figure_html`, so the book draws exactly what an export draws. Torch-free.
"""

from __future__ import annotations

import json

#: The MIME type of plotly's JSON figure outputs.
PLOTLY_MIMETYPE = "application/vnd.plotly.v1+json"

#: Shown in place of the figure where plotly.js is not on the page (a notebook whose first
#: figure, which carries plotly.js, was not run or was cleared).
NO_PLOTLY_NOTE = (
    "This figure needs plotly.js, which travels with the first figure of the notebook: "
    "run the notebook top to bottom (Restart Kernel and Run All Cells), then export it again."
)


def figure_json(figure: dict) -> str:
    """The figure's data, layout and config as JSON that is safe inside a ``<script>``."""
    as_json = json.dumps(
        {
            "data": figure.get("data", []),
            "layout": figure.get("layout", {}),
            "config": {"responsive": True, **figure.get("config", {})},
        }
    )
    # "</" inside a JSON string would close the <script> element early
    return as_json.replace("</", "<\\/")


def figure_html(figure: dict, div_id: str) -> str:
    """A ``<div>`` and the script that draws plotly JSON ``figure`` into it with ``Plotly``.

    The div's height is the layout's (450 px if it has none), so the page does not jump
    while plotly.js draws. Where ``window.Plotly`` is missing the div says why instead of
    staying an empty box. ``div_id`` must be unique on the page.
    """
    if not div_id or any(c.isspace() or c in "\"'<>&" for c in div_id):
        raise ValueError(
            f"div_id must be a non-empty HTML id without spaces or quotes, got {div_id!r}"
        )
    height = figure.get("layout", {}).get("height")
    style = f"height:{int(height)}px;" if isinstance(height, int | float) else "height:450px;"
    note = json.dumps(NO_PLOTLY_NOTE)
    return (
        f'<div id="{div_id}" class="plotly-graph-div" style="{style}width:100%;"></div>\n'
        f"<script>(function(){{var f={figure_json(figure)};"
        f'var d=document.getElementById("{div_id}");'
        f"if(window.Plotly){{Plotly.newPlot(d,f.data,f.layout,f.config);}}"
        f"else{{d.style.height='auto';d.textContent={note};}}}})();</script>"
    )


def plotly_js_html(source: str) -> str:
    """A ``<script>`` element that defines ``window.Plotly`` from plotly.js's ``source``."""
    if "</script" in source.lower():
        raise ValueError("plotly.js source contains '</script', which would end the element")
    return f"<script>{source}</script>"

