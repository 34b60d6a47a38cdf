"""show_source: the real source of engine objects, as text and as linked HTML."""

from __future__ import annotations

from pathlib import Path

import pytest

import pipemare_lite.figures.viz.colors as colors_module
from pipemare_lite.book.show import SOURCE_BASE_ENV, MarkdownText, show_source, source_view
from pipemare_lite.figures.viz.colors import shade

ROOT = Path(__file__).resolve().parents[1]


def test_view_is_the_file_slice():
    view = source_view(shade)
    assert view.relative_path == "pipemare_lite/figures/viz/colors.py"
    file_lines = (ROOT / view.relative_path).read_text().splitlines()
    assert view.code.splitlines() == file_lines[view.first_line - 1 : view.last_line]
    assert view.code.startswith("def shade(")
    assert view.name == "pipemare_lite.figures.viz.colors.shade"


def test_module_starts_at_line_one():
    view = source_view(colors_module)
    assert view.first_line == 1
    assert view.last_line == len((ROOT / view.relative_path).read_text().splitlines())


def test_plain_text_outside_jupyter(capsys):
    show_source(shade)
    out = capsys.readouterr().out
    first, second = out.splitlines()[:2]
    assert first.startswith("# pipemare_lite.figures.viz.colors.shade")
    assert "pipemare_lite/figures/viz/colors.py, lines" in first
    assert second.startswith("def shade(")


def test_html_has_a_link_and_highlighted_code(monkeypatch):
    monkeypatch.chdir(ROOT / "tests")
    page = source_view(shade)._repr_html_()
    assert 'href="../pipemare_lite/figures/viz/colors.py"' in page
    assert "shade" in page and "<pre" in page
    monkeypatch.setenv(SOURCE_BASE_ENV, "https://example.org/src/")
    view = source_view(shade)
    assert view.link == f"https://example.org/src/pipemare_lite/figures/viz/colors.py#L{view.first_line}"


def test_objects_without_python_source_are_refused():
    with pytest.raises(TypeError, match="no Python source for <built-in function len>"):
        source_view(len)


def test_markdown_text_renders_and_reads_as_text():
    table = MarkdownText("| # | claim |\n|---|---|\n| 1 | it holds |")
    assert table._repr_markdown_() == table.text
    # the plain-text form (what a text front end and nbval see) is the table, headers included
    assert repr(table) == str(table) == table.text and "Markdown object" not in repr(table)
