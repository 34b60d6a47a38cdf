"""The Sphinx project behind the book site: what it holds, and building it into HTML.

The book build executes chapters (:mod:`pipemare_lite.book.build`) and hands each executed
notebook to :class:`SiteProject`, which keeps it, made ready for the page
(:func:`pipemare_lite.book.site.pages.site_notebook`), in a Sphinx source folder beside the
output (``build/book.sphinx/src`` for ``build/book``). :meth:`SiteProject.build` then writes
the front page, the table of contents (grouped by :data:`pipemare_lite.book.notebooks.BOOK_PARTS`
from the chapter numbers alone), the source pages, and runs Sphinx with ``myst-nb``
(``nb_execution_mode = "off"``: the notebooks arrive executed) and ``sphinx-book-theme``.

Offline: plotly.js (from the installed plotly package) is loaded by the pages that draw a
figure, MathJax 2 (from ``jupyter-server-mathjax``) by the pages with formulas, both local
copies; nothing on a page refers to the network. A chapter built earlier stays in the site
until its notebook is deleted, so ``--chapters 03`` rebuilds one chapter of a full site.
"""

from __future__ import annotations

import filecmp
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import nbformat

from pipemare_lite.book.notebooks import BOOK_PARTS, TIMINGS_FILE, book_part, chapter_info
from pipemare_lite.book.site.pages import site_notebook
from pipemare_lite.book.site.sources import write_source_pages
from pipemare_lite.files import atomic_write_text

PLOTLY_JS = "plotly.min.js"
MATHJAX_DIR = "mathjax"
#: MathJax 2 entry point inside ``_static``, with the one configuration the package ships
MATHJAX_PATH = f"{MATHJAX_DIR}/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"
#: A file in the output folder saying the folder is a book build (safe to replace).
SITE_MARKER = ".pipemare-book"
#: Where the build records which chapters the site holds, how long they ran, which failed.
STATE_FILE = "chapters.json"


def plotly_js_source() -> Path:
    """The ``plotly.min.js`` shipped inside the installed ``plotly`` package."""
    path = Path(str(resources.files("plotly") / "package_data" / PLOTLY_JS))
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is the plotly package installed completely?")
    return path


def mathjax_source() -> Path:
    """MathJax 2's folder inside the installed ``jupyter_server_mathjax`` package."""
    try:
        folder = Path(str(resources.files("jupyter_server_mathjax") / "static"))
    except ModuleNotFoundError:
        folder = None
    if folder is None or not (folder / "MathJax.js").is_file():
        raise FileNotFoundError(
            "MathJax not found: the book site typesets formulas with the local MathJax of the "
            "jupyter-server-mathjax package (a dependency in pyproject.toml); run `make setup`"
        )
    return folder


def copy_assets(static: Path) -> None:
    """Copy plotly.js and MathJax into ``static`` (the site's ``_static`` folder).

    MathJax is about 12 MB in 600 files: copied once, then reused while it is the same.
    """
    static.mkdir(parents=True, exist_ok=True)
    plotly = plotly_js_source()
    if not (static / PLOTLY_JS).is_file() or not filecmp.cmp(plotly, static / PLOTLY_JS, False):
        shutil.copyfile(plotly, static / PLOTLY_JS)
    source = mathjax_source()
    target = static / MATHJAX_DIR
    if (target / "MathJax.js").is_file() and filecmp.cmp(
        source / "MathJax.js", target / "MathJax.js", shallow=False
    ):
        return
    # copy beside, then swap: an interrupted copy never looks like a complete one
    partial = static / f".{MATHJAX_DIR}-partial"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(source, partial)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)


@dataclass(frozen=True)
class SiteChapter:
    """A chapter the site holds: file stem, run time (None if it failed), status, and the
    repository files it links to (paths from the root, e.g.
    ``pipemare_lite/analysis/simulate.py``)."""

    name: str
    seconds: float | None
    failed: bool
    sources: tuple[str, ...] = ()

    @property
    def docname(self) -> str:
        """Its Sphinx document name (``chapters/02_gpipe_and_the_bubble``)."""
        return f"chapters/{self.name}"


_CODE_SPAN = re.compile(r"(`[^`]*`)")


def markdown_without_html(text: str) -> str:
    """``text`` with ``<`` escaped outside code spans: Markdown stays, HTML becomes text."""
    pieces = _CODE_SPAN.split(text)
    return "".join(p if i % 2 else p.replace("<", "\\<") for i, p in enumerate(pieces))


def front_page(chapters: list[SiteChapter], folder: Path) -> str:
    """The MyST Markdown of the front page and the table of contents, grouped in parts.

    Each chapter shows its title, its promise (the first paragraph of its title cell) and
    its run time from this build; a part without chapters is left out.
    """
    lines = [
        "---",
        "html_theme.sidebar_secondary.remove: true",  # its headings are the sidebar's parts
        "---",
        "",
        "# pipemare-lite",
        "",
        "Pipeline-parallel training, from GPipe and 1F1B to PipeMare's asynchronous pipelines:",
        "every chapter is a notebook that ran, top to bottom, to make its page. Times are the",
        "wall-clock run times the book build measured. Figures are live on these pages; the",
        "widgets are live only in Jupyter (each chapter's page says how to open it).",
        "",
    ]
    toctrees = []
    for part in BOOK_PARTS:
        members = [c for c in chapters if book_part(int(c.name[:2])) == part]
        if not members:
            continue
        lines += [f"## {part.title}", ""]
        for chapter in members:
            info = chapter_info(folder / f"{chapter.name}.ipynb")
            title = markdown_without_html(f"{chapter.name[:2]} · {info.title}")
            if chapter.failed:
                status = "**failed** when this book was built (the page shows the error)"
            else:
                status = f"ran in {chapter.seconds:.1f} s"
            lines.append(f"- **[{title}]({chapter.docname}.ipynb)** · {status}")
            if info.promise:
                lines.append(f"  <br>{markdown_without_html(info.promise)}")
        lines.append("")
        entries = "\n".join(c.docname for c in members)
        toctrees.append(f"```{{toctree}}\n:hidden:\n:caption: {part.title}\n\n{entries}\n```\n")
    return "\n".join(lines + toctrees)


_CONF = '''"""Sphinx configuration of the pipemare-lite book site (written by the book build)."""

project = "pipemare-lite"
author = "pipemare-lite contributors"
copyright = "pipemare-lite contributors"
extensions = ["myst_nb"]
exclude_patterns = ["_static", "_extra", "**/.ipynb_checkpoints"]
nb_execution_mode = "off"  # the book build has run every notebook
nb_merge_streams = False  # merged by the build (book/site/streams.py: in linear time)
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3
myst_update_mathjax = False
html_theme = "sphinx_book_theme"
html_title = "pipemare-lite"
html_static_path = ["_static"]
html_extra_path = ["_extra"]
html_css_files = ["book.css"]
html_js_files = ["book.js"]
html_copy_source = False
html_show_sourcelink = False
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": False,
    "use_fullscreen_button": True,
    "navbar_persistent": [],  # the sidebar has the search field; no second one in a header
}
html_context = {"default_mode": "auto"}  # light or dark as the reader's system prefers
mathjax_path = __MATHJAX_PATH__
mathjax2_config = {
    "tex2jax": {
        "inlineMath": [["\\\\(", "\\\\)"]],
        "displayMath": [["\\\\[", "\\\\]"]],
        "processEscapes": True,
    },
    # the package ships the STIX-Web fonts only (as Jupyter's own MathJax setup uses)
    "HTML-CSS": {
        "availableFonts": [],
        "webFont": "STIX-Web",
        "imageFont": None,
        # MathJax's font-loading probe fetches url('about:blank'), which Chromium refuses
        # (a console error) on pages opened from disk; a local() source fetches nothing
        "styles": {"@font-face": {"font-family": "MathJax_Blank", "src": "local('MathJax_Blank')"}},
    },
}


def _plotly_where_figures_are(app, pagename, templatename, context, doctree):
    """One local plotly.js, loaded by the pages that draw a figure."""
    if "plotly-graph-div" in context.get("body", ""):
        app.builder.add_js_file("__PLOTLY_JS__")


def setup(app):
    app.connect("html-page-context", _plotly_where_figures_are)
'''

_JS = """// pipemare-lite book site
// Search result snippets are fetched from the result pages, which a page opened from disk
// may not do (Chromium refuses file:// fetches): there, results come without snippets.
DOCUMENTATION_OPTIONS.SHOW_SEARCH_SUMMARY = window.location.protocol !== "file:";
"""

_CSS = """/* pipemare-lite book site: the few things the theme does not style */
.pml-chapter-meta { font-size: 0.9em; color: var(--pst-color-text-muted); }
.pml-failed { color: #b00020; }
.cell_output .plotly-graph-div { margin: 0.5rem 0; }
/* source pages: quiet line numbers, and the line a chapter links to stands out */
.highlight a[href^="#L-"] { text-decoration: none; }
.highlight a[href^="#L-"] .linenos { color: var(--pst-color-text-muted); }
.highlight a[id^="L-"]:target + a .linenos { background: var(--pst-color-accent); color: white; }
"""


def conf_text() -> str:
    """The ``conf.py`` of the site."""
    return _CONF.replace("__PLOTLY_JS__", PLOTLY_JS).replace("__MATHJAX_PATH__", repr(MATHJAX_PATH))


@dataclass
class SphinxRun:
    """What one Sphinx build did: seconds, its warnings, and how many pages it wrote."""

    seconds: float
    warnings: list[str]
    pages: int


class SiteProject:
    """The Sphinx source folder of the book site that builds into ``out``.

    ``chapters`` is the folder of the chapter notebooks, ``root`` the repository root that
    chapter links to ``.py`` files resolve against.
    """

    def __init__(self, out: str | Path, chapters: Path, root: Path):
        self.out = Path(out)
        self.chapters = Path(chapters)
        self.root = Path(root)
        self.base = self.out.with_name(f"{self.out.name}.sphinx")
        self.src = self.base / "src"
        self.doctrees = self.base / "doctrees"
        self.state_path = self.base / STATE_FILE

    # ---------------------------------------------------------------- state

    def site_chapters(self) -> list[SiteChapter]:
        """The chapters the site holds, in book order (those whose notebook still exists)."""
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            state = {}
        held = []
        for name, entry in sorted(state.items()):
            staged = self.src / "chapters" / f"{name}.ipynb"
            if (self.chapters / f"{name}.ipynb").is_file() and staged.is_file():
                held.append(
                    SiteChapter(
                        name,
                        entry.get("seconds"),
                        bool(entry.get("failed")),
                        tuple(entry.get("sources", ())),
                    )
                )
        return held

    def _save_state(self, chapters: list[SiteChapter]) -> None:
        state = {
            c.name: {"seconds": c.seconds, "failed": c.failed, "sources": list(c.sources)}
            for c in chapters
        }
        self.base.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.state_path, json.dumps(state, indent=1) + "\n")

    def add_chapter(self, path: Path, executed, seconds: float, error: str) -> Path:
        """Keep executed notebook ``executed`` of chapter file ``path`` for the site.

        Returns where its page will be. A failed chapter is kept too: its page shows the
        error at the cell that raised it.
        """
        failed = bool(error)
        nb, linked = site_notebook(executed, path, self.root, None if failed else seconds, failed)
        staged = self.src / "chapters" / path.name
        staged.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(staged, nbformat.writes(nb) + "\n")
        download = self.src / "_extra" / "chapters" / path.name  # the notebook readers get
        download.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, download)
        kept = [c for c in self.site_chapters() if c.name != path.stem]
        kept.append(
            SiteChapter(
                path.stem, None if failed else round(seconds, 1), failed, tuple(sorted(linked))
            )
        )
        self._save_state(sorted(kept, key=lambda c: c.name))
        return self.out / "chapters" / f"{path.stem}.html"

    def _prune(self) -> list[SiteChapter]:
        """Forget chapters whose notebook was deleted; returns those that stay."""
        held = self.site_chapters()
        names = {c.name for c in held}
        for folder in (self.src / "chapters", self.src / "_extra" / "chapters"):
            for staged in folder.glob("*.ipynb") if folder.is_dir() else []:
                if staged.stem not in names:
                    staged.unlink()
        self._save_state(held)
        return held

    # ---------------------------------------------------------------- writing the project

    def _source_links(self, held: list[SiteChapter]) -> dict[str, list[tuple[str, str]]]:
        """Every repository file the held chapters link to, with the chapters linking it."""
        links: dict[str, list[tuple[str, str]]] = {}
        for chapter in held:
            info = chapter_info(self.chapters / f"{chapter.name}.ipynb")
            title = f"{chapter.name[:2]} · {info.title}"
            for relative_path in chapter.sources:
                links.setdefault(relative_path, []).append((chapter.docname, title))
        return links

    def write_project(self) -> list[SiteChapter]:
        """Front page, conf.py, assets and source pages; returns the chapters the site holds."""
        held = self._prune()
        copy_assets(self.src / "_static")
        atomic_write_text(self.src / "_static" / "book.css", _CSS)
        atomic_write_text(self.src / "_static" / "book.js", _JS)
        atomic_write_text(self.src / "conf.py", conf_text())
        atomic_write_text(self.src / "index.md", front_page(held, self.chapters))
        (self.src / "_extra").mkdir(parents=True, exist_ok=True)
        for old in [p for p in self.src.iterdir() if p.is_dir()]:
            if old.name not in {"_static", "_extra", "chapters"}:
                shutil.rmtree(old)  # last build's source pages: written again below
        links = {p: v for p, v in self._source_links(held).items() if (self.root / p).is_file()}
        write_source_pages(self.src, self.root, links)
        return held

    # ---------------------------------------------------------------- building

    def check_output(self) -> None:
        """Refuse an ``out`` that is a file, or a folder of something else than a book.

        The build replaces the whole folder, so it must be new, empty or an earlier build.
        """
        out = self.out
        if not out.exists():
            return
        if not out.is_dir():
            raise ValueError(f"--out {str(out)!r} is a file; give a folder for the book")
        earlier_book = (out / SITE_MARKER).is_file() or (out / TIMINGS_FILE).is_file()
        if not earlier_book and any(out.iterdir()):
            raise ValueError(
                f"--out {str(out)!r} holds files that are not a book build; the build replaces "
                "the whole folder, so give an empty or new folder (or an earlier book build)"
            )

    def build(self) -> SphinxRun:
        """Write the project, run Sphinx beside ``out`` and swap the new site in.

        Sphinx writes into ``<out>.sphinx/next`` (myst-nb's ``jupyter_execute`` lands beside
        it, in ``<out>.sphinx``: nothing outside ``--out`` and its ``.sphinx`` folder). Only
        a complete site replaces ``out``, in one ``rename`` exchange where the system has it
        (Linux ``renameat2(RENAME_EXCHANGE)``; elsewhere two renames microseconds apart), so
        a served site never lacks its pages and a build stopped before the swap leaves the
        previous site as it was. Sphinx runs in its own process group; whatever stops this
        build (SIGINT, SIGTERM: :class:`~pipemare_lite.book.execute.BuildInterrupted`) stops
        the whole group first.
        """
        self.check_output()
        held = self.write_project()
        fresh, old = self.base / "next", self.base / "previous"
        for leftover in (fresh, old):  # an interrupted build's
            shutil.rmtree(leftover, ignore_errors=True)
        warnings_file = self.base / "sphinx-warnings.txt"
        command = [
            sys.executable, "-m", "sphinx", "-b", "html", "-q",
            "-d", str(self.doctrees), "-w", str(warnings_file),
            str(self.src), str(fresh),
        ]  # fmt: skip
        start = time.perf_counter()
        returncode, stderr = run_in_own_group(command)
        seconds = time.perf_counter() - start
        if returncode != 0:
            raise RuntimeError(
                f"Sphinx failed (exit {returncode}) building {self.src}:\n{stderr[-4000:]}"
            )
        text = warnings_file.read_text(encoding="utf-8") if warnings_file.is_file() else ""
        warnings = [line for line in text.splitlines() if line.strip()]
        timings = {f"{c.name}.ipynb": c.seconds for c in held if not c.failed}
        atomic_write_text(fresh / TIMINGS_FILE, json.dumps(timings, indent=1) + "\n")
        (fresh / SITE_MARKER).write_text(
            "Written by `python -m pipemare_lite book`; the next build replaces this folder.\n"
        )
        pages = sum(1 for p in fresh.rglob("*.html") if "_static" not in p.parts)
        self.check_output()  # still a book (or nothing) just before it is replaced
        swap_in(fresh, self.out, old)
        return SphinxRun(seconds, warnings, pages)


def run_in_own_group(command: list[str]) -> tuple[int, str]:
    """Run ``command`` in a new process group; returns (exit status, stderr).

    Its output is read through a file, not a pipe, so nothing blocks on a full pipe. If
    anything interrupts the wait (a signal's exception), the whole group gets SIGTERM, then
    SIGKILL after 5 s, before the exception goes on: no Sphinx is left writing.
    """
    import os
    import signal
    import tempfile

    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errors:
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors,
                                 start_new_session=True)
        try:
            returncode = child.wait()
        except BaseException:
            for signum, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, None)):
                try:
                    os.killpg(child.pid, signum)
                except ProcessLookupError:
                    break
                try:
                    child.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
            raise
        errors.seek(0)
        return returncode, errors.read()


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux ``renameat2`` with RENAME_EXCHANGE); False where
    the system cannot."""
    import ctypes
    import os

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    done = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return done == 0


def swap_in(fresh: Path, out: Path, old: Path) -> None:
    """Make ``fresh`` the folder at ``out``; the previous ``out`` (if any) goes to ``old``
    and is deleted. SIGINT and SIGTERM wait until the swap is done."""
    import signal

    blocked = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        if out.is_dir() and _exchange(fresh, out):
            fresh.rename(old)  # fresh now holds the previous site
        else:
            if out.exists():
                out.rename(old)
            fresh.rename(out)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
    shutil.rmtree(old, ignore_errors=True)

