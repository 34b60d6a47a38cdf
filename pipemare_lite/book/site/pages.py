"""Turn an executed chapter into the notebook the book site renders (what Sphinx reads).

The site shows a chapter as it ran, with six changes made here, on a copy:

- each cell's prints merged into one block per stream (:mod:`.streams`: myst-nb's own
  merge takes time growing with the square of a line's length);
- every plotly figure becomes its HTML form (:func:`pipemare_lite.figures.viz.figure_html.
  figure_html`), drawn by the one plotly.js every page loads; a figure's own HTML fallback
  (which may embed plotly.js) is dropped;
- a live widget's output becomes a note on how to open the live notebook (the chapter's
  static copy of the widget follows it); no widget state is kept;
- links to the repository's Python files (``../pipemare_lite/analysis/simulate.py``, in the text
  and in ``show_source`` outputs) point at the highlighted source pages the site publishes;
- under the title, a line with the notebook's download link, its measured run time and
  the command that opens it live;
- every exercise's solution folded ("try it first", opened by a click) after its
  ``check(...)`` verdict (:mod:`pipemare_lite.book.solutions`).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

from pipemare_lite.book.site.streams import merge_cell_streams
from pipemare_lite.book.solutions import fold_for_site
from pipemare_lite.figures.viz.figure_html import PLOTLY_MIMETYPE, figure_html

WIDGET_MIMETYPE = "application/vnd.jupyter.widget-view+json"

#: A Markdown link or an HTML ``href`` to a relative ``.py`` file (with an optional #anchor).
_MARKDOWN_LINK = re.compile(r"\]\((?!\w+:)([^)\s#]+\.py)(#[^)\s]*)?\)")
_HTML_HREF = re.compile(r"""href=(["'])(?!\w+:)([^"'#]+\.py)(#[^"']*)?\1""")
#: show_source's header: ``<a href="...py" ...><code>pipemare_lite/x.py, lines 10-42</code>``
_SOURCE_HEADER = re.compile(
    r"""<a href=(["'])(?!\w+:)([^"'#]+\.py)\1(?: target="_blank")?>"""
    r"""(<code>[^<]*?, lines (\d+)-\d+</code></a>)"""
)


def live_command(chapter: Path) -> str:
    """The command that opens ``chapter`` live, from the repository root."""
    return f".venv/bin/jupyter lab chapters/{chapter.name}"


def widget_note(chapter: Path, static_copy_follows: bool) -> str:
    """What replaces a live widget on the page: where to find the live one."""
    after = (
        " The figure after this cell is its static copy, computed when the book was built."
        if static_copy_follows
        else ""
    )
    return (
        '<div class="pml-widget-note admonition note"><p class="admonition-title">'
        "Interactive widget</p><p>The widget is live only in a running notebook: download "
        f'<a href="{html.escape(chapter.name)}" download>{html.escape(chapter.name)}</a> '
        "or, in the repository, run "
        f"<code>{html.escape(live_command(chapter))}</code>, then run the chapter.{after}</p>"
        "</div>"
    )


def _has_figure(cell) -> bool:
    return any(PLOTLY_MIMETYPE in o.get("data", {}) for o in cell.get("outputs", []))


def offline_outputs(nb, page_id: str, chapter: Path | None = None):
    """Figures to HTML, widgets to a note, widget state dropped; in place, returns ``nb``.

    ``page_id`` prefixes the figures' div ids (unique per page); ``chapter`` (the notebook
    file) lets the widget note name it.
    """
    chapter = chapter or Path(f"{page_id}.ipynb")
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    for c, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for o, output in enumerate(cell.get("outputs", [])):
            data = output.get("data")
            if not data:
                continue
            if PLOTLY_MIMETYPE in data:
                html_form = figure_html(data[PLOTLY_MIMETYPE], f"{page_id}-fig-{c}-{o}")
                output["data"] = {"text/html": html_form}
            elif WIDGET_MIMETYPE in data:
                later = code_cells[code_cells.index(cell) + 1 :]
                follows = bool(later) and _has_figure(later[0])
                output["data"] = {"text/html": widget_note(chapter, follows)}
        cell.metadata.pop("widgets", None)
    nb.metadata.pop("widgets", None)
    return nb


@dataclass(frozen=True)
class SourceLink:
    """A link from a chapter to a Python file of the repository, as the site resolves it."""

    relative_path: str  # from the repository root, e.g. ``pipemare_lite/analysis/simulate.py``

    @property
    def docname(self) -> str:
        """The source page's Sphinx document name: the path without ``.py``."""
        return self.relative_path.removesuffix(".py")


def resolve_source_link(target: str, chapters: Path, root: Path) -> SourceLink | None:
    """The repository file a chapter's relative link names, or None if it is not one.

    ``target`` is relative to ``chapters`` (where the notebook lives); it counts only when it
    is an existing ``.py`` file inside ``root``.
    """
    path = (chapters / target).resolve()
    try:
        relative = path.relative_to(root.resolve())
    except ValueError:
        return None
    if path.suffix != ".py" or not path.is_file():
        return None
    return SourceLink(relative.as_posix())


def rewrite_source_links(nb, chapters: Path, root: Path) -> set[str]:
    """Point links to repository ``.py`` files at the site's source pages; in place.

    Markdown links become links to the source page's document (Sphinx resolves and checks
    them); ``href``s in HTML outputs (``show_source``) become links to the page, with the
    shown lines' anchor (``#L-10``) when the header says which lines. Returns the linked
    files' paths from ``root``. Links to anything else are left as they are.
    """
    linked: set[str] = set()

    def markdown(match: re.Match) -> str:
        link = resolve_source_link(match.group(1), chapters, root)
        if link is None:
            return match.group(0)
        linked.add(link.relative_path)
        return f"](../{link.docname}.md)"

    def header(match: re.Match) -> str:
        link = resolve_source_link(match.group(2), chapters, root)
        if link is None:
            return match.group(0)
        linked.add(link.relative_path)
        return f'<a href="../{link.docname}.html#L-{match.group(4)}">{match.group(3)}'

    def href(match: re.Match) -> str:
        link = resolve_source_link(match.group(2), chapters, root)
        if link is None:
            return match.group(0)
        linked.add(link.relative_path)
        return f'href="../{link.docname}.html"'

    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = _MARKDOWN_LINK.sub(markdown, cell.source)
            continue
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            data = output.get("data", {})
            if "text/html" in data:
                text = data["text/html"]
                text = "".join(text) if isinstance(text, list) else text
                text = _SOURCE_HEADER.sub(header, text)
                data["text/html"] = _HTML_HREF.sub(href, text)
    return linked


def chapter_meta_cell(chapter: Path, seconds: float | None, failed: bool):
    """The line under a chapter's title: download link, run time, how to open it live."""
    name = html.escape(chapter.name)
    if failed:
        ran = (
            '<strong class="pml-failed">This chapter failed when the book was built</strong>: '
            "the error is shown at the cell that raised it."
        )
    elif seconds is None:
        ran = "Not run by this build."
    else:
        ran = f"Ran top to bottom in {seconds:.1f} s when this book was built."
    return nbformat.v4.new_markdown_cell(
        f'<p class="pml-chapter-meta"><a class="pml-download" href="{name}" download>'
        f"Download the notebook ({name})</a>. {ran} To run it live, in the repository: "
        f"<code>{html.escape(live_command(chapter))}</code></p>"
    )


def site_notebook(nb, chapter: Path, root: Path, seconds: float | None, failed: bool):
    """The notebook the site renders for executed ``nb`` (of file ``chapter``); a copy.

    Returns ``(notebook, linked source paths)``. ``root`` is the repository root that
    links to ``.py`` files are resolved against.
    """
    nb = nbformat.reads(nbformat.writes(nb), as_version=4)  # a deep copy
    merge_cell_streams(nb)  # here, in linear time; not myst-nb's (.site.streams)
    offline_outputs(nb, chapter.stem[:2], chapter)
    fold_for_site(nb)  # each solution folded under its check (pipemare_lite.book.solutions)
    linked = rewrite_source_links(nb, chapter.parent, root)
    at = 1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0
    nb.cells.insert(at, chapter_meta_cell(chapter, seconds, failed))
    return nb, linked
