"""The engine's source files as pages of the book site (what the chapters' links open).

Each page holds the whole file, highlighted with the theme's own colours (light and dark),
one anchor per line (``#L-10``, where ``show_source`` links land) and a list of the chapters
that link to it. The page is an orphan: reached through links, not through the table of
contents.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path


def highlighted_source_html(code: str) -> str:
    """``code`` as Sphinx-style highlighted HTML with line numbers and ``L-n`` anchors."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    formatter = HtmlFormatter(
        cssclass="highlight", linenos="inline", lineanchors="L", anchorlinenos=True, wrapcode=True
    )
    body = highlight(code, PythonLexer(), formatter)
    return f'<div class="highlight-python notranslate">{body}</div>'


def source_page(relative_path: str, code: str, linked_from: Sequence[tuple[str, str]]) -> str:
    """The MyST Markdown of the page for one file.

    ``relative_path`` is the file's path from the repository root; ``linked_from`` lists
    ``(docname, title)`` of the chapters that link to it, e.g. ``("chapters/02_x", "02 ·
    GPipe")``. The page sits at the docname ``relative_path`` without ``.py``.
    """
    depth = relative_path.count("/")
    up = "../" * depth
    chapters = ", ".join(
        f"[{html.escape(title)}]({up}{docname}.ipynb)" for docname, title in linked_from
    )
    lines = sum(1 for _ in code.splitlines())
    return "\n".join(
        [
            "---",
            "orphan: true",
            "html_theme.sidebar_secondary.remove: true",
            "---",
            "",
            f"# {relative_path}",
            "",
            f"The engine's source file as this book was built from it ({lines} lines)."
            + (f" Linked from {chapters}." if chapters else ""),
            "",
            "```{raw} html",
            highlighted_source_html(code),
            "```",
            "",
        ]
    )


def write_source_pages(
    srcdir: Path, root: Path, links: dict[str, list[tuple[str, str]]]
) -> list[Path]:
    """Write one page per linked file under ``srcdir``; returns the pages written.

    ``links`` maps a file's path from ``root`` to the chapters linking it (see
    :func:`source_page`).
    """
    written = []
    for relative_path, linked_from in sorted(links.items()):
        code = (root / relative_path).read_text(encoding="utf-8")
        page = srcdir / Path(relative_path).with_suffix(".md")
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(source_page(relative_path, code, linked_from), encoding="utf-8")
        written.append(page)
    return written
