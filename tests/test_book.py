"""The book build: executes chapters and builds the book site (Sphinx, myst-nb) offline.

Builds tiny fixture chapters (a plotly figure, a widget, a formula, a link to an engine
file, a failing cell) in a temporary folder, so the test does not depend on how long the
real chapters take. The site in a browser: tests/test_book_site_browser.py.
"""

from __future__ import annotations

import json
import os
import re
from importlib import resources
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from pipemare_lite import cli
from pipemare_lite.book import build as book

FIGURE_CELL = """import plotly.graph_objects as go
fig = go.Figure(go.Bar(x=["F", "B"], y=[3, 5]))
fig.update_layout(title="</script> must not end the page's script")
fig"""
WIDGET_CELL = "import ipywidgets\nipywidgets.IntSlider(value=3)"
#: The fixture's title cell: a promise with Markdown, HTML that must stay text, a formula.
PROMISE = "Measure its *bubble* with `gpipe` <i>now</i>: $x^2$."


def _chapter(folder: Path, name: str, *code: str, promise: str = "A promise.") -> Path:
    number = name[:2]
    nb = new_notebook(
        cells=[
            new_markdown_cell(f"# {number} · Fixture {name}\n\n{promise}"),
            *(new_code_cell(c) for c in code),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}},
    )
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One build of a one-chapter book: a figure, a widget, a formula, an engine link."""
    root = tmp_path_factory.mktemp("repo")
    chapters = root / "chapters"
    chapters.mkdir()
    (root / "pkg").mkdir()
    (root / "pkg" / "engine.py").write_text(
        '"""An engine file."""\n\n\ndef step():\n    return 1\n'
    )
    path = _chapter(
        chapters,
        "07_figure_fixture",
        FIGURE_CELL,
        "import os\nprint(os.getcwd())",
        WIDGET_CELL,
        FIGURE_CELL,
        promise=PROMISE,
    )
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(new_markdown_cell("The engine's [step](../pkg/engine.py) function."))
    nbformat.write(nb, path)
    out = root / "build" / "book"
    results = book.build_book(out=out, directory=chapters, timeout=120, log=lambda m: None)
    return chapters, out, results


def _pages(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*.html") if "_static" not in p.parts)


@pytest.mark.slow  # starts a kernel and Sphinx: several seconds
def test_index_links_every_executed_chapter(built):
    chapters, out, results = built
    assert [r.name for r in results] == ["07_figure_fixture"] and results[0].ok
    assert results[0].html == out / "chapters" / "07_figure_fixture.html"
    index = (out / "index.html").read_text()
    assert 'href="chapters/07_figure_fixture.html"' in index
    assert "Fixture 07_figure_fixture" in index  # title read from the first heading
    assert (out / "chapters" / "07_figure_fixture.html").is_file()
    timings = json.loads((out / "timings.json").read_text())
    assert set(timings) == {"07_figure_fixture.ipynb"} and timings["07_figure_fixture.ipynb"] > 0
    # the front page says how long the chapter ran, with the time this build measured
    assert f"ran in {timings['07_figure_fixture.ipynb']:.1f} s" in index


@pytest.mark.slow  # starts a kernel and Sphinx: several seconds
def test_pages_load_nothing_from_the_network(built):
    _, out, _ = built
    pages = _pages(out)
    assert len(pages) >= 4  # front page, chapter, source page, search, index
    for page in pages:
        text = page.read_text()
        sources = re.findall(r"<script[^>]*\bsrc=[\"']([^\"']+)", text)
        for link in re.findall(r"<link\b[^>]*>", text):  # what the page loads, not rel=next
            if re.search(r'rel="(stylesheet|preload|modulepreload|icon)"', link):
                sources.append(re.search(r'href="([^"]+)"', link).group(1))
        assert all("cdn." not in s and "://" not in s for s in sources), (page, sources)
        for source in sources:  # every script and stylesheet the page loads is in the site
            assert (page.parent / source.split("?")[0]).is_file(), (page, source)


@pytest.mark.slow  # starts a kernel and Sphinx: several seconds
def test_formulas_use_the_local_mathjax_copy(built):
    _, out, _ = built
    page = (out / "chapters" / "07_figure_fixture.html").read_text()
    assert f'src="../_static/{book.MATHJAX_PATH}"' in page
    assert (out / "_static" / "mathjax" / "MathJax.js").is_file()
    assert "\\(x^2\\)" in page  # the formula, for MathJax to typeset


@pytest.mark.slow  # starts a kernel and Sphinx: several seconds
def test_plotly_js_is_the_installed_copy_loaded_where_figures_are(built):
    _, out, _ = built
    shipped = Path(str(resources.files("plotly") / "package_data" / "plotly.min.js"))
    assert (out / "_static" / "plotly.min.js").read_bytes() == shipped.read_bytes()
    assert len(list(out.rglob("plotly*.js"))) == 1  # one copy for every page
    chapter = (out / "chapters" / "07_figure_fixture.html").read_text()
    assert re.search(r'<script src="\.\./_static/plotly\.min\.js[?"]', chapter)
    assert "plotly.min.js" not in (out / "index.html").read_text()  # no figure there


@pytest.mark.slow  # starts a kernel and Sphinx: several seconds
def test_figure_becomes_a_div_drawn_by_newplot(built):
    _, out, _ = built
    page = (out / "chapters" / "07_figure_fixture.html").read_text()
    divs = re.findall(r'<div[^>]*class="plotly-graph-div"[^>]*>', page)
    div_ids = [re.search(r'id="([^"]+)"', d).group(1) for d in divs]
    assert len(div_ids) == 2 and len(set(div_ids)) == 2
    for div_id in div_ids:
        assert f'document.getElementById("{div_id}")' in page
    assert page.count("Plotly.newPlot(d,f.data,f.layout,f.config)") == 2
    assert "<\\/script> must not end" in page  # the title survived, escaped
    assert "application/vnd.plotly.v1+json" not in page
    assert page.count("Copyright 2012") == 0  # no inline copy of plotly.js


@pytest.mark.slow  # starts a kernel and Sphinx: several seconds
def test_widget_becomes_a_note_on_opening_the_live_notebook(built):
    _, out, _ = built
    page = (out / "chapters" / "07_figure_fixture.html").read_text()
    assert page.count('class="pml-widget-note') == 1
    assert ".venv/bin/jupyter lab chapters/07_figure_fixture.ipynb" in page
    assert "The figure after this cell is its static copy" in page  # a figure follows it
    assert "application/vnd.jupyter.widget" not in page and "require.js" not in page


@pytest.mark.slow  # starts a kernel and Sphinx: several seconds
def test_chapter_page_offers_the_clean_notebook_for_download(built):
    chapters, out, _ = built
    page = (out / "chapters" / "07_figure_fixture.html").read_text()
    assert 'href="07_figure_fixture.ipynb" download' in page
    downloaded = out / "chapters" / "07_figure_fixture.ipynb"
    assert downloaded.read_bytes() == (chapters / "07_figure_fixture.ipynb").read_bytes()


@pytest.mark.slow  # starts a kernel and Sphinx: several seconds
def test_engine_links_open_the_published_source_page(built):
    _, out, _ = built
    page = (out / "chapters" / "07_figure_fixture.html").read_text()
    assert 'href="../pkg/engine.html"' in page
    source = (out / "pkg" / "engine.html").read_text()
    assert 'id="L-4"' in source and "step" in source
    assert 'href="../chapters/07_figure_fixture.html"' in source  # linked from the chapter


@pytest.mark.slow  # starts a kernel and Sphinx: several seconds
def test_front_page_renders_the_promise_markdown_and_keeps_html_as_text(built):
    _, out, _ = built
    index = (out / "index.html").read_text()
    assert "Measure its <em>bubble</em>" in index
    assert '<span class="pre">gpipe</span></code>' in index
    assert "&lt;i&gt;now" in index and "<i>now" not in index
    assert "*bubble*" not in index


@pytest.mark.slow  # starts a kernel and Sphinx: several seconds
def test_chapters_run_with_the_chapters_folder_as_working_directory(built):
    chapters, out, _ = built
    assert str(chapters) in (out / "chapters" / "07_figure_fixture.html").read_text()


@pytest.mark.slow  # starts a kernel and Sphinx: several seconds
def test_no_temporary_file_is_left_behind(built):
    _, out, _ = built
    leftovers = [p for p in out.parent.rglob("*") if p.name.startswith(".") and "tmp" in p.name]
    assert not leftovers, leftovers
    assert not list(out.parent.rglob(".mathjax-partial"))


@pytest.mark.slow  # starts kernels and Sphinx: several seconds
def test_failing_chapter_fails_the_build_with_its_name_and_error(tmp_path, capsys):
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    _chapter(chapters, "01_broken", "raise ValueError('the planted error')")
    _chapter(chapters, "02_fine", "print('fine')")
    out = tmp_path / "book"
    argv = ["book", "--out", str(out), "--chapters-dir", str(chapters), "--timeout", "60"]

    assert cli.main(argv) == 1
    printed = capsys.readouterr().out
    assert "01_broken" in printed and "the planted error" in printed
    assert "raise ValueError" in printed  # the cell that raised
    assert not (out / "chapters" / "02_fine.html").exists()  # stopped at the first failure
    assert "the planted error" in (out / "chapters" / "01_broken.html").read_text()

    record = tmp_path / "results" / "chapter_times.json"
    keep_going = argv + ["--keep-going", "--record-timings", str(record)]
    assert cli.main(keep_going) == 1  # failures still fail, the rest is built
    index = (out / "index.html").read_text()
    index = index[index.index("<article") :]  # the front page's text, not the sidebar
    assert (out / "chapters" / "02_fine.html").is_file()
    assert 'href="chapters/02_fine.html"' in index
    assert "failed" in index.split('href="chapters/01_broken.html"')[1].split("</li>")[0]
    # the recorded times: the chapter that ran, with the command that measured it
    recorded = json.loads(record.read_text())
    assert list(recorded) == ["02_fine.ipynb"] and 0 < recorded["02_fine.ipynb"] < 60
    meta = json.loads((record.parent / "chapter_times.meta.json").read_text())
    assert meta["command"].startswith("python -m pipemare_lite book --out ")
    assert "--keep-going" in meta["command"] and f"--record-timings {record}" in meta["command"]
    assert meta["measured_now"] == ["02_fine.ipynb"] and meta["failed_now"] == ["01_broken.ipynb"]


@pytest.mark.slow  # starts kernels and Sphinx twice: several seconds
def test_a_partial_build_keeps_earlier_chapters_and_forgets_deleted_ones(tmp_path):
    chapters, out = tmp_path / "chapters", tmp_path / "book"
    chapters.mkdir()
    _chapter(chapters, "00_first", "print(0)")
    second = _chapter(chapters, "03_second", "print(3)")
    book.build_book(out=out, directory=chapters, timeout=60, log=lambda m: None)
    first_times = json.loads((out / "timings.json").read_text())
    assert set(first_times) == {"00_first.ipynb", "03_second.ipynb"}

    second.unlink()
    _chapter(chapters, "05_third", "print(5)")
    book.build_book(out=out, chapters=["05"], directory=chapters, timeout=60, log=lambda m: None)
    times = json.loads((out / "timings.json").read_text())
    assert times["00_first.ipynb"] == first_times["00_first.ipynb"]  # not run again, kept
    assert set(times) == {"00_first.ipynb", "05_third.ipynb"}  # 03 deleted: gone
    assert not (out / "chapters" / "03_second.html").exists()
    index = (out / "index.html").read_text()
    index = index[index.index("<article") :]  # the front page's text, not the sidebar
    # grouped by part from the chapter numbers: 00 is synchronous, 05 asynchronous
    assert index.index("Synchronous pipelines") < index.index("00 · Fixture 00_first")
    assert index.index("Asynchronous pipelines") < index.index("05 · Fixture 05_third")
    assert "03_second" not in index


def test_build_refuses_an_output_folder_that_is_not_a_book(tmp_path):
    _chapter(tmp_path, "00_intro")
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    with pytest.raises(ValueError, match="not a book build"):
        book.build_book(out=out, directory=tmp_path, log=lambda m: None)
    assert (out / "thesis.tex").read_text() == "precious"


def test_offline_outputs_rewrites_figures_and_widgets():
    figure = {"data": [{"type": "bar", "y": [1, 2]}], "layout": {"height": 300}}
    widget = {"model_id": "abc", "version_major": 2, "version_minor": 0}
    cell = new_code_cell("x")
    cell.outputs = [
        nbformat.v4.new_output("display_data", {book.PLOTLY_MIMETYPE: figure, "text/html": "x"}),
        nbformat.v4.new_output("display_data", {book.WIDGET_MIMETYPE: widget, "text/plain": "w"}),
    ]
    nb = new_notebook(cells=[cell], metadata={"widgets": {"state": {}}})
    book.offline_outputs(nb, "p")
    first, second = (o["data"] for o in nb.cells[0].outputs)
    assert list(first) == ["text/html"] and 'id="p-fig-0-0"' in first["text/html"]
    assert "height:300px" in first["text/html"]
    assert list(second) == ["text/html"] and "widget" in second["text/html"].lower()
    assert "widgets" not in nb.metadata


def test_select_chapters_by_number_name_or_path(tmp_path):
    a = _chapter(tmp_path, "00_intro")
    b = _chapter(tmp_path, "03_more")
    assert book.select_chapters(None, tmp_path) == [a, b]
    assert book.select_chapters(["3"], tmp_path) == [b]
    assert book.select_chapters(["00_intro", "03_more.ipynb"], tmp_path) == [a, b]
    with pytest.raises(ValueError, match="no chapter '05'.*allowed: 00_intro, 03_more"):
        book.select_chapters(["05"], tmp_path)


def test_bad_timeout_is_rejected_early(tmp_path):
    with pytest.raises(ValueError, match="timeout must be a positive"):
        book.build_book(out=tmp_path, directory=tmp_path, timeout=0)


def test_readme_links_resolve_and_commands_exist():
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    local_links = [
        target for target in re.findall(r"\]\(([^)#]+)\)", readme) if "://" not in target
    ]
    assert local_links, "README links no file of the repository"
    for target in local_links:
        assert (root / target).exists(), f"README links {target}, which does not exist"
    makefile = (root / "Makefile").read_text()
    for target in ("book", "test"):
        assert f"make {target}" in readme
        assert re.search(rf"^{target}:", makefile, re.MULTILINE), f"Makefile has no {target}:"


def _result(name: str, seconds: float, error: str = "") -> book.ChapterResult:
    return book.ChapterResult(name, name, Path(f"{name}.html"), seconds, error)


def test_recorded_timings_merge_drop_failures_and_carry_their_meta(tmp_path):
    import platform

    from pipemare_lite import __version__
    from pipemare_lite.book import notebooks
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    for name in ("00_intro", "01_first", "02_second"):
        _chapter(chapters, name)
    record = tmp_path / "data" / "results" / "chapter_times.json"
    record.parent.mkdir(parents=True)
    record.write_text('{"01_first.ipynb": 7.0, "02_second.ipynb": 9.0, "09_gone.ipynb": 1.0}')

    results = [_result("00_intro", 3.14), _result("02_second", 5.0, error="boom")]
    written = book.record_timings(record, results, "python -m pipemare_lite book", chapters)
    assert written == (record, tmp_path / "data" / "results" / "chapter_times.meta.json")
    # measured now: replaced; failed now: dropped; not built now: kept; deleted chapter: gone
    assert json.loads(record.read_text()) == {"00_intro.ipynb": 3.1, "01_first.ipynb": 7.0}
    meta = json.loads(written[1].read_text())
    assert meta["command"] == "python -m pipemare_lite book"
    assert meta["package_version"] == __version__
    assert meta["python_version"] == platform.python_version()
    assert meta["platform"] == platform.platform() and meta["cpu_count"] == os.cpu_count()
    assert meta["date"][:4].isdigit() and meta["date"].endswith("+00:00")
    assert meta["measured_now"] == ["00_intro.ipynb"] and meta["failed_now"] == ["02_second.ipynb"]
    assert sorted(p.name for p in record.parent.iterdir()) == [
        "chapter_times.json",
        "chapter_times.meta.json",
    ]  # written through temporary files, none left behind

    # the chapter table of this repository layout reads the record and says where it is from
    table = notebooks.chapter_table(chapters)
    assert {r.file: r.seconds for r in table.written} == {
        "00_intro.ipynb": 3.1,
        "01_first.ipynb": 7.0,
        "02_second.ipynb": None,
    }
    assert table.timings == record.resolve() and table.meta == meta
    assert (
        "Run times from data/results/chapter_times.json, written by `python -m pipemare_lite book`"
        in (table.to_markdown())
    )
    assert f"{os.cpu_count()} CPU cores" in str(table)


def test_record_timings_needs_a_json_name(tmp_path):
    with pytest.raises(ValueError, match=r"needs a \.json file name, got '.*times\.txt'"):
        book.build_book(out=tmp_path, directory=tmp_path, record=tmp_path / "times.txt")
