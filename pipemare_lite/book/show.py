"""Show the engine's real source inside a chapter (used from chapter 01 on).

Chapters never keep a second copy of the code they teach: they call
``show_source(simulate)`` and the reader sees the function as it is in the installed
package, with a link to its file and line numbers. In Jupyter it is highlighted HTML (and
the book build keeps it); anywhere else it is printed as plain text.

Links are relative to the current directory (a chapter runs in ``chapters/``, so they read
``../pipemare_lite/...``). Set ``PIPEMARE_LITE_SOURCE_BASE`` to a URL or folder to link
there instead (e.g. a rendered book that lives elsewhere). Torch-free.

:class:`MarkdownText` is the same idea for a table a chapter builds as Markdown: rendered in
Jupyter, and the table's own text in a plain-text front end, never
``<IPython.core.display.Markdown object>``.
"""

from __future__ import annotations

import html
import inspect
import os
from dataclasses import dataclass
from pathlib import Path

#: Environment variable that overrides where source links point.
SOURCE_BASE_ENV = "PIPEMARE_LITE_SOURCE_BASE"
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class SourceView:
    """The source of one object: what :func:`show_source` displays.

    Attributes:
        name: the object's qualified name (``pipemare_lite.analysis.simulate.simulate``).
        path: the file's absolute path.
        relative_path: the path from the project root (``pipemare_lite/analysis/simulate.py``).
        first_line, last_line: 1-based line numbers of the shown code in the file.
        code: the source text.
    """

    name: str
    path: Path
    relative_path: str
    first_line: int
    last_line: int
    code: str

    @property
    def link(self) -> str:
        """Where the file link points (see the module docstring)."""
        base = os.environ.get(SOURCE_BASE_ENV)
        if base:
            return base.rstrip("/") + "/" + self.relative_path + f"#L{self.first_line}"
        try:
            target = os.path.relpath(self.path, Path.cwd())
        except ValueError:  # another drive on Windows
            target = str(self.path)
        return Path(target).as_posix()

    @property
    def header(self) -> str:
        """``pipemare_lite/analysis/simulate.py, lines 10-42``."""
        return f"{self.relative_path}, lines {self.first_line}-{self.last_line}"

    def __str__(self) -> str:
        return f"# {self.name}  ({self.header})\n{self.code}"

    __repr__ = __str__  # text/plain in Jupyter is the source itself, not a dataclass dump

    def _repr_html_(self) -> str:
        try:
            from pygments import highlight
            from pygments.formatters import HtmlFormatter
            from pygments.lexers import PythonLexer
        except ImportError:  # pygments ships with Jupyter; plain <pre> otherwise
            body = f"<pre>{html.escape(self.code)}</pre>"
        else:
            formatter = HtmlFormatter(noclasses=True, linenos="inline",
                                      linenostart=self.first_line, style="default")
            body = highlight(self.code, PythonLexer(), formatter)
        link = html.escape(self.link, quote=True)
        return (
            '<div class="pml-source">'
            f'<div style="font-size:90%;margin-bottom:2px"><code>{html.escape(self.name)}</code>'
            f' from <a href="{link}" target="_blank"><code>{html.escape(self.header)}</code></a>'
            f"</div>{body}</div>"
        )


@dataclass(frozen=True)
class MarkdownText:
    """Markdown for a chapter to show as a cell's value (chapter 10's verdict table):
    Jupyter renders it; a plain-text front end, ``print`` and an output check read the
    Markdown source itself (a pipe table reads well as text)."""

    text: str

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__  # text/plain: the table, not IPython's "<... Markdown object>"

    def _repr_markdown_(self) -> str:
        return self.text


def source_view(obj) -> SourceView:
    """The :class:`SourceView` of a function, class, method or module (TypeError if none)."""
    target = inspect.unwrap(obj) if callable(obj) else obj
    try:
        lines, start = inspect.getsourcelines(target)
        path = Path(inspect.getsourcefile(target) or "").resolve()
    except (TypeError, OSError) as error:
        raise TypeError(
            f"no Python source for {obj!r}: show_source() takes a function, class, method or "
            f"module written in Python ({error})"
        ) from None
    start = max(start, 1)  # modules report line 0
    try:
        relative = path.relative_to(_PACKAGE_ROOT).as_posix()
    except ValueError:
        relative = path.name
    module = getattr(target, "__module__", None) or getattr(target, "__name__", "")
    qualname = getattr(target, "__qualname__", None)
    name = f"{module}.{qualname}" if qualname and not inspect.ismodule(target) else module
    return SourceView(
        name=name,
        path=path,
        relative_path=relative,
        first_line=start,
        last_line=start + len(lines) - 1,
        code="".join(lines).rstrip("\n"),
    )


def _in_jupyter() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def show_source(obj) -> None:
    """Display ``obj``'s real source with a link to its file.

    In a Jupyter kernel: highlighted HTML with line numbers (the plain-text form travels
    along for text-only front ends and output checks). Elsewhere: printed as plain text.
    """
    view = source_view(obj)
    if _in_jupyter():
        from IPython.display import display

        display(view)
    else:
        print(view)
