"""Figures that survive every export: plotly JSON plus an HTML fallback, in a real kernel.

The renderer on its own; then a notebook run in a Jupyter kernel the way a reader runs it
(no PLOTLY_RENDERER set), exported with ``nbconvert --to html``, opened in Chromium with
the network cut off: every figure must be drawn.
"""

from __future__ import annotations

import json
import os

import pytest
from nbformat.v4 import new_code_cell, new_notebook

from pipemare_lite.figures.viz import renderer
from pipemare_lite.figures.viz.figure_html import NO_PLOTLY_NOTE, PLOTLY_MIMETYPE, figure_html
from tests.browser import chromium, watch

FIGURE = {"data": [{"type": "bar", "y": [1, 2]}], "layout": {"title": {"text": "</script>"}}}


def test_figure_html_escapes_the_figure_and_explains_a_missing_plotly():
    html = figure_html(FIGURE, "fig-1")
    assert html.startswith('<div id="fig-1" class="plotly-graph-div" style="height:450px;')
    assert "<\\/script>" in html and "</script>" not in html.split("<script>", 1)[1][:-9]
    assert json.dumps(NO_PLOTLY_NOTE) in html  # shown where window.Plotly is missing


@pytest.mark.parametrize("bad", ["", "a b", 'a"b', "<x>"])
def test_figure_html_rejects_an_unusable_id(bad):
    with pytest.raises(ValueError, match="div_id must be"):
        figure_html(FIGURE, bad)


def test_renderer_adds_html_and_plotly_js_to_the_first_figure_only(monkeypatch):
    monkeypatch.setattr(renderer, "_PLOTLY_JS_SENT", [])  # as in a fresh kernel
    render = renderer.FigureWithFallbackRenderer()
    first = render.to_mimebundle(dict(FIGURE))
    second = render.to_mimebundle(dict(FIGURE))
    for bundle in (first, second):
        assert set(bundle) == {PLOTLY_MIMETYPE, "text/html"}
        assert bundle[PLOTLY_MIMETYPE]["data"][0]["y"] == [1, 2]
        assert 'class="plotly-graph-div"' in bundle["text/html"]
    assert len(first["text/html"]) > 1_000_000  # plotly.js itself, once
    assert len(second["text/html"]) < 10_000
    assert "cdn" not in second["text/html"].lower()


def test_renderer_is_not_chosen_outside_jupyter_or_when_a_renderer_was_chosen(monkeypatch):
    monkeypatch.delenv("PLOTLY_RENDERER", raising=False)
    assert renderer.use_in_jupyter() is False  # pytest is not a Jupyter kernel
    monkeypatch.setenv("PLOTLY_RENDERER", "plotly_mimetype")
    assert renderer.use_in_jupyter() is False


CELLS = [
    "import plotly.graph_objects as go\nimport pipemare_lite.figures.viz\n"
    "import plotly.io as pio\nprint(pio.renderers.default)",
    'go.Figure(go.Bar(x=["F", "B"], y=[3, 5]))',
    "go.Figure(go.Scatter(y=[1, 4, 2]))",
]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook above, run in a kernel of this environment as a reader's kernel runs."""
    from nbclient import NotebookClient

    from pipemare_lite.book.execute import _kernel_manager

    nb = new_notebook(cells=[new_code_cell(c) for c in CELLS])
    env = {k: v for k, v in os.environ.items() if k != "PLOTLY_RENDERER"}
    connection = tmp_path_factory.mktemp("kernel") / "kernel.json"  # its HMAC key: private
    client = NotebookClient(nb, km=_kernel_manager(connection), timeout=120,
                            kernel_name="python3")
    client.execute(env=env)
    return nb


@pytest.mark.slow  # starts a kernel
def test_in_a_jupyter_kernel_figures_carry_json_and_html(executed):
    assert executed.cells[0].outputs[0]["text"].strip() == renderer.RENDERER_NAME
    bundles = [cell.outputs[0]["data"] for cell in executed.cells[1:]]
    for bundle in bundles:
        assert PLOTLY_MIMETYPE in bundle and "plotly-graph-div" in bundle["text/html"]
    assert "window.Plotly" in bundles[0]["text/html"] and len(bundles[0]["text/html"]) > 10**6
    assert len(bundles[1]["text/html"]) < 10_000
    assert "widgets" not in executed.metadata  # no widget state


@pytest.mark.slow  # starts a kernel and a browser
def test_nbconvert_export_draws_every_figure_offline(executed, tmp_path):
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter(template_name="lab").from_notebook_node(executed)
    page = tmp_path / "exported.html"
    page.write_text(body, encoding="utf-8")
    with chromium() as context:
        # offline, as the reader may be: nbconvert's own CDN scripts fail, our figures must not
        context.route("http*://**", lambda route: route.abort())
        tab = context.new_page()
        problems = watch(tab)
        tab.goto(page.as_uri(), wait_until="load")
        tab.wait_for_function(
            "() => [...document.querySelectorAll('.plotly-graph-div')]"
            ".every(d => d.querySelector('svg.main-svg'))",
            timeout=60_000,
        )
        assert tab.locator(".plotly-graph-div").count() == 2
        assert not problems.page_errors, problems.page_errors
        assert NO_PLOTLY_NOTE not in tab.inner_text("body")
