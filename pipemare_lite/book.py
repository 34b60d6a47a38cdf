"""The book build: execute every chapter and render it to HTML that works offline.

    python -m pipemare_lite book --out build/book [--chapters 00 03] [--timeout 300]
        [--record-timings data/results/chapter_times.json]

Each chapter runs in a fresh ``python3`` kernel of *this* Python environment (never a
kernelspec that happens to point elsewhere), with ``chapters/`` as the working directory and
a per-cell timeout. Pages are rendered with nbconvert's ``lab`` template, minus everything
that would reach the network: plotly.js is copied from the installed ``plotly`` package
into the output folder and every page loads that copy; each plotly figure output
(``application/vnd.plotly.v1+json``) becomes a ``<div>`` plus a ``Plotly.newPlot`` call.
Formulas are typeset by a local copy of MathJax 2 (from ``jupyter-server-mathjax``).
Widgets are not live in HTML: their output is replaced by a note, and chapters show a
static fallback figure after each widget.
"""

from __future__ import annotations

import datetime
import filecmp
import html
import json
import os
import platform
import re
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path

import nbformat

from pipemare_lite.files import atomic_write_text
from pipemare_lite.notebooks import (
    TIMINGS_FILE,
    chapter_info,
    chapters_dir,
    list_chapters,
    meta_path,
)

PLOTLY_MIMETYPE = "application/vnd.plotly.v1+json"
WIDGET_MIMETYPE = "application/vnd.jupyter.widget-view+json"
PLOTLY_JS = "plotly.min.js"
MATHJAX_DIR = "mathjax"
#: MathJax 2 entry point inside MATHJAX_DIR, with the one configuration the package ships
MATHJAX_URL = f"{MATHJAX_DIR}/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"

# The lab template without its network scripts: require.js (which would also hide plotly.js's
# global behind AMD), MathJax and mermaid from a CDN, and the widget manager from unpkg.
# MathJax comes from the local copy when there is one.
_PAGE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}
<script src="__PLOTLY_JS__"></script>
{%- endblock html_head_js_requirejs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}
{%- if resources.local_mathjax -%}{{ mathjax(resources.local_mathjax) }}{%- endif -%}
{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block body_header -%}
{{ super() }}
<nav class="pml-nav"><a href="index.html">&larr; pipemare-lite: contents</a></nav>
{%- endblock body_header -%}
""".replace("__PLOTLY_JS__", PLOTLY_JS)

_WIDGET_NOTE = (
    '<div class="pml-widget-note"><em>Interactive widget: live when you run this chapter in '
    "Jupyter. The static figure after it shows the same thing in the HTML book.</em></div>"
)


def plotly_js_source() -> Path:
    """The ``plotly.min.js`` shipped inside the installed ``plotly`` package."""
    path = Path(str(resources.files("plotly") / "package_data" / PLOTLY_JS))
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is the plotly package installed completely?")
    return path


def mathjax_source() -> Path | None:
    """MathJax 2's folder from the installed ``jupyter_server_mathjax`` package, if present."""
    try:
        folder = Path(str(resources.files("jupyter_server_mathjax") / "static"))
    except ModuleNotFoundError:
        return None
    return folder if (folder / "MathJax.js").is_file() else None


def copy_assets(out: Path) -> bool:
    """Copy plotly.js (required) and MathJax (if installed) into ``out``; True with MathJax.

    MathJax is about 10 MB in 600 files: copied once, then reused while its version matches.
    """
    shutil.copyfile(plotly_js_source(), out / PLOTLY_JS)
    source = mathjax_source()
    if source is None:
        return False
    target = out / MATHJAX_DIR
    if (target / "MathJax.js").is_file() and filecmp.cmp(
        source / "MathJax.js", target / "MathJax.js", shallow=False
    ):
        return True
    # copy beside, then swap: an interrupted copy never looks like a complete one
    partial = out / f".{MATHJAX_DIR}-partial"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(source, partial)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return True


def figure_html(figure: dict, div_id: str) -> str:
    """A ``<div>`` plus the script that draws a plotly figure JSON into it (local plotly.js)."""
    # "</" inside a JSON string would close the <script> element early
    as_js = json.dumps(
        {
            "data": figure.get("data", []),
            "layout": figure.get("layout", {}),
            "config": {"responsive": True, **figure.get("config", {})},
        }
    ).replace("</", "<\\/")
    height = figure.get("layout", {}).get("height")
    style = f"height:{int(height)}px;" if isinstance(height, int | float) else "height:450px;"
    return (
        f'<div id="{div_id}" class="plotly-graph-div" style="{style}width:100%;"></div>\n'
        f"<script>(function(){{var f={as_js};"
        f'Plotly.newPlot("{div_id}", f.data, f.layout, f.config);}})();</script>'
    )


def offline_outputs(nb, page_id: str):
    """Rewrite outputs for the static page, in place: plotly JSON to HTML, widgets to a note."""
    for c, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for o, output in enumerate(cell.get("outputs", [])):
            data = output.get("data")
            if not data:
                continue
            if PLOTLY_MIMETYPE in data:
                output["data"] = {
                    "text/html": figure_html(data[PLOTLY_MIMETYPE], f"{page_id}-fig-{c}-{o}")
                }
            elif WIDGET_MIMETYPE in data:
                output["data"] = {"text/html": _WIDGET_NOTE}
    nb.metadata.pop("widgets", None)
    return nb


def _kernel_manager():
    """A kernel manager whose ``python3`` is this interpreter, as ``--nbval-current-env`` does."""
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
    from jupyter_client.manager import KernelManager

    class CurrentEnvironmentSpecs(KernelSpecManager):
        """Answers every kernel name with this interpreter's ipykernel."""

        def get_kernel_spec(self, kernel_name):
            return KernelSpec(
                argv=[
                    sys.executable,
                    "-m",
                    "ipykernel_launcher",
                    "-f",
                    "{connection_file}",
                    # its transport warning is noise in every build log
                    "--IPKernelApp.log_level=ERROR",
                ],
                display_name="Python 3 (pipemare-lite)",
                language="python",
                name=kernel_name,
            )

    return KernelManager(kernel_name="python3", kernel_spec_manager=CurrentEnvironmentSpecs())


@dataclass
class ChapterResult:
    """One chapter of a build: where its page is, how long it ran, and its error if it failed."""

    name: str
    title: str
    html: Path
    seconds: float
    error: str = ""

    @property
    def ok(self) -> bool:
        """True when every cell ran."""
        return not self.error


def execute_chapter(path: Path, timeout: int) -> tuple[object, float, str]:
    """Run one chapter top to bottom; returns (executed notebook, seconds, error text or "")."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        km=_kernel_manager(),
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        record_timing=False,
    )
    start = time.perf_counter()
    error = ""
    # figures as plain plotly JSON (what the page turns into a live plot), whatever renderer
    # the environment would pick (a "browser" renderer would open windows)
    env = {**os.environ, "PLOTLY_RENDERER": "plotly_mimetype"}
    try:
        client.execute(env=env)
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as exc:
        error = str(exc).strip() or type(exc).__name__
    return nb, time.perf_counter() - start, error


def render_page(nb, title: str, page_id: str, mathjax: bool = False) -> str:
    """HTML for one executed chapter: lab styling, local plotly.js (and MathJax), no network."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        template_name="lab",
        extra_loaders=[DictLoader({"pipemare_book.html.j2": _PAGE_TEMPLATE})],
        template_file="pipemare_book.html.j2",
    )
    nb = offline_outputs(nb, page_id)
    nb.metadata["title"] = title
    extra = {"local_mathjax": MATHJAX_URL if mathjax else ""}
    body, _ = exporter.from_notebook_node(nb, resources=extra)
    return body


def select_chapters(names: Sequence[str] | None, directory: Path) -> list[Path]:
    """Chapters to build: all, or those named by number (``03``), stem or file name or path."""
    every = list_chapters(directory)
    if not names:
        return every
    chosen = []
    for name in names:
        as_path = Path(name)
        if as_path.suffix == ".ipynb" and as_path.is_file():
            chosen.append(as_path.resolve())
            continue
        key = as_path.name.removesuffix(".ipynb")
        if key.isdigit():
            hits = [p for p in every if p.name[:2] == key.zfill(2)]
        else:
            hits = [p for p in every if p.stem == key]
        if not hits:
            allowed = ", ".join(p.stem for p in every) or "(none: the folder has no chapters)"
            raise ValueError(f"no chapter {name!r} in {directory}; allowed: {allowed}")
        chosen += hits
    return list(dict.fromkeys(chosen))


def build_book(
    out: str | Path = "build/book",
    chapters: Sequence[str] | None = None,
    timeout: int = 300,
    keep_going: bool = False,
    directory: str | Path | None = None,
    log=None,
    record: str | Path | None = None,
    command: str = "python -m pipemare_lite book",
) -> list[ChapterResult]:
    """Execute chapters, render them, write ``index.html``; returns one result per chapter.

    Stops at the first chapter that fails (its page is still written, showing the error)
    unless ``keep_going``; the caller turns failures into a non-zero exit either way.
    With ``record`` (a ``.json`` path), the measured run times also go there, with a
    ``.meta.json`` naming ``command`` and the machine (:func:`record_timings`).
    """
    log = log or (lambda message: print(message, flush=True))
    if timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds per cell, got {timeout}")
    if record is not None and Path(record).suffix != ".json":
        raise ValueError(f"--record-timings needs a .json file name, got {str(record)!r}")
    folder = Path(directory).resolve() if directory is not None else chapters_dir().resolve()
    paths = select_chapters(chapters, folder)
    if not paths:
        raise ValueError(f"no chapter notebooks (NN_snake_case.ipynb) in {folder}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    mathjax = copy_assets(out)
    if not mathjax:
        log("[book] jupyter-server-mathjax not installed: formulas stay as LaTeX source")

    results: list[ChapterResult] = []
    for path in paths:
        title = chapter_info(path).title
        log(f"[book] running {path.name} ...")
        nb, seconds, error = execute_chapter(path, timeout)
        page = out / f"{path.stem}.html"
        atomic_write_text(page, render_page(nb, title, path.stem[:2], mathjax))
        results.append(ChapterResult(path.stem, title, page, seconds, error))
        log(f"[book] {path.name}: {'ok' if not error else 'FAILED'} in {seconds:.1f} s")
        if error:
            log(f"[book] {path.name} failed:\n{error}")
            if not keep_going:
                break
    write_index(out, results, folder)
    if record is not None:
        for written in record_timings(record, results, command, folder):
            log(f"[book] wrote {written}")
    return results


def _version(distribution: str) -> str | None:
    """Installed version of ``distribution`` without importing it (torch is slow to import)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def record_timings(
    path: str | Path, results: Sequence[ChapterResult], command: str, folder: Path
) -> tuple[Path, Path]:
    """Store the measured chapter run times in ``path`` and a ``.meta.json`` beside it.

    ``path`` maps chapter file names to seconds (what :func:`pipemare_lite.notebooks.
    chapter_table` reads). Chapters measured now replace their old entries, a chapter that
    failed now loses its entry (its old time no longer describes it), entries of chapters
    not built now are kept while the chapter exists. The meta file says how and where the
    numbers were measured: the command, package, torch and Python versions, platform, CPU
    count, load average, date, and which chapters this run measured. Both files are written
    atomically.
    """
    from pipemare_lite import __version__

    path = Path(path)
    if path.suffix != ".json":
        raise ValueError(f"--record-timings needs a .json file name, got {str(path)!r}")
    try:
        recorded = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except ValueError:
        recorded = {}
    if not isinstance(recorded, dict):
        recorded = {}
    existing = {p.name for p in list_chapters(folder)}
    for r in results:
        recorded.pop(f"{r.name}.ipynb", None)
        if r.ok:
            recorded[f"{r.name}.ipynb"] = round(r.seconds, 1)
    recorded = {k: v for k, v in sorted(recorded.items()) if k in existing}
    atomic_write_text(path, json.dumps(recorded, indent=1) + "\n")
    meta = {
        "command": command,
        "package_version": __version__,
        "torch_version": _version("torch"),
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        # other work on the machine slows the chapters: say how busy it was when recorded
        "load_average_1_5_15_min": [round(x, 2) for x in os.getloadavg()]
        if hasattr(os, "getloadavg")
        else None,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "measured_now": [f"{r.name}.ipynb" for r in results if r.ok],
        "failed_now": [f"{r.name}.ipynb" for r in results if not r.ok],
        "seconds_are": "wall-clock time of one fresh-kernel run of each chapter, top to bottom",
    }
    meta_file = meta_path(path)
    atomic_write_text(meta_file, json.dumps(meta, indent=1) + "\n")
    return path, meta_file


_CODE_SPAN = re.compile(r"`([^`]+)`")
_STRONG = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_EMPHASIS = re.compile(r"(?<![\w*])([*_])(?=\S)(.+?)(?<=\S)\1(?![\w*])")
_LINK = re.compile(r"\[([^\]]+)\]\([^)\s]*\)")


def inline_markdown(text: str) -> str:
    """HTML for one line of chapter Markdown (a title or promise) in the index page.

    Escapes HTML first, so a ``<`` in the text can never become a tag, then renders the
    inline Markdown chapters use in their first cell: code spans, ``**strong**``,
    ``*emphasis*`` / ``_emphasis_``; a link keeps only its text (the index links pages
    itself). Nothing inside a code span is interpreted.
    """
    pieces = _CODE_SPAN.split(html.escape(text, quote=True))
    out = []
    for i, piece in enumerate(pieces):
        if i % 2:  # the inside of a code span: literal
            out.append(f"<code>{piece}</code>")
            continue
        piece = _LINK.sub(r"\1", piece)
        piece = _STRONG.sub(r"<strong>\1</strong>", piece)
        out.append(_EMPHASIS.sub(r"<em>\2</em>", piece))
    return "".join(out)


def write_index(out: Path, results: Sequence[ChapterResult], folder: Path) -> Path:
    """``index.html`` listing every page built now or earlier, and ``timings.json`` beside it.

    Pages from earlier builds (``--chapters`` builds a few) stay listed while their chapter
    still exists; chapters that failed now are listed as failed.
    """
    timings_path = out / TIMINGS_FILE
    try:
        timings = json.loads(timings_path.read_text()) if timings_path.is_file() else {}
    except ValueError:
        timings = {}
    for r in results:
        timings.pop(f"{r.name}.ipynb", None)
        if r.ok:
            timings[f"{r.name}.ipynb"] = round(r.seconds, 1)
    existing = {p.name for p in list_chapters(folder)}
    timings = {
        k: v
        for k, v in sorted(timings.items())
        if k in existing and (out / k.replace(".ipynb", ".html")).is_file()
    }
    atomic_write_text(timings_path, json.dumps(timings, indent=1) + "\n")

    failed = {f"{r.name}.ipynb": r for r in results if not r.ok}
    rows = []
    for path in list_chapters(folder):
        if path.name not in timings and path.name not in failed:
            continue
        info = chapter_info(path)
        title, promise = inline_markdown(info.title), inline_markdown(info.promise)
        number = path.name[:2]
        if path.name in failed:
            status = '<span class="failed">failed: see the page for the error</span>'
        else:
            status = f"ran in {timings[path.name]:.1f} s"
        rows.append(
            f'<li><a href="{path.stem}.html">{number} · {title}</a> '
            f'<span class="time">{status}</span><br><span class="promise">{promise}</span></li>'
        )
    index = out / "index.html"
    atomic_write_text(index, _INDEX.replace("__ROWS__", "\n".join(rows)))
    return index


_INDEX = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>pipemare-lite: pipeline-parallel training, from GPipe to PipeMare</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 48rem; margin: 3rem auto; padding: 0 1rem;
       line-height: 1.5; color: #222; }
li { margin: 0.4rem 0; }
.time { color: #666; font-size: 0.9em; margin-left: 0.5rem; }
.failed { color: #b00020; }
.promise { color: #444; font-size: 0.95em; }
</style>
</head>
<body>
<h1>pipemare-lite</h1>
<p>Pipeline-parallel training, from GPipe to PipeMare: the chapters as executed by the last
book build. Times are wall-clock run times measured by that build on this machine. Figures
are live; widgets are live only in Jupyter (<code>.venv/bin/jupyter lab chapters/</code>).</p>
<ol start="0" style="list-style: none; padding-left: 0">
__ROWS__
</ol>
</body>
</html>
"""
