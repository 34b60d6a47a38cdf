"""Figures that survive every export: plotly JSON for Jupyter plus an HTML fallback.

plotly's default in a Jupyter kernel (``plotly_mimetype``) writes only plotly JSON, which
JupyterLab, Notebook 7 and VS Code draw, but ``nbconvert --to html``, nbviewer and other
previews show as an empty box. The renderer here writes both: the JSON (what the live
front ends draw, they prefer it) and ``text/html`` from
:func:`pipemare_lite.figures.viz.figure_html.figure_html`. plotly's own ``notebook`` renderer would
do the second half too, but its HTML loads MathJax from a CDN; ours reaches no network: the
first figure of a kernel carries plotly.js itself (about 4.8 MB, as plotly's ``notebook``
renderer does), later figures use it.

:func:`use_in_jupyter` (called when :mod:`pipemare_lite.figures.viz` is imported)
makes it the default, but only in a Jupyter kernel whose renderer nobody chose: an
explicit ``PLOTLY_RENDERER`` (the tests and the book build set ``plotly_mimetype`` to keep
plain JSON) or a renderer plotly picked for another front end (VS Code, Colab) stays.
Torch-free.
"""

from __future__ import annotations

import os
import uuid

import plotly.io as pio
from plotly.io._base_renderers import PlotlyRenderer

from pipemare_lite.figures.viz.figure_html import PLOTLY_MIMETYPE, figure_html, plotly_js_html

#: The name under which :func:`use_in_jupyter` registers the renderer with plotly.
RENDERER_NAME = "pipemare_lite"


class FigureWithFallbackRenderer(PlotlyRenderer):
    """plotly's JSON bundle plus ``text/html``; the first figure it renders embeds plotly.js.

    "First" is per process (per kernel): plotly renders with a copy of the renderer, so
    the renderer keeps no state itself. A figure cell re-run later relies on that first
    figure's copy; where it is missing, the figure says so
    (:data:`pipemare_lite.figures.viz.figure_html.NO_PLOTLY_NOTE`) instead of staying empty.
    """

    def to_mimebundle(self, fig_dict):
        """``{plotly JSON, text/html}`` for one figure (plotly calls this for each display)."""
        bundle = super().to_mimebundle(fig_dict)
        html = figure_html(bundle[PLOTLY_MIMETYPE], f"pml-{uuid.uuid4().hex[:12]}")
        if not _PLOTLY_JS_SENT:
            from plotly.offline import get_plotlyjs

            html = plotly_js_html(get_plotlyjs()) + "\n" + html
            _PLOTLY_JS_SENT.append(True)
        bundle["text/html"] = html
        return bundle


#: Not empty once this process has sent plotly.js with a figure.
_PLOTLY_JS_SENT: list[bool] = []


def _in_jupyter_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__module__.startswith("ipykernel.")


def use_in_jupyter() -> bool:
    """Make :class:`FigureWithFallbackRenderer` plotly's default in a Jupyter kernel.

    Only where plotly chose ``plotly_mimetype`` by itself (no ``PLOTLY_RENDERER`` in the
    environment): True when it is now the default. Registering twice is harmless.
    """
    if "PLOTLY_RENDERER" in os.environ or not _in_jupyter_kernel():
        return False
    if pio.renderers.default == RENDERER_NAME:
        return True
    if pio.renderers.default != "plotly_mimetype":
        return False
    pio.renderers[RENDERER_NAME] = FigureWithFallbackRenderer()
    pio.renderers.default = RENDERER_NAME
    return True
