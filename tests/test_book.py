"""The book build: executes chapters, renders offline HTML with live plotly figures, indexes them.

Builds tiny fixture chapters (a plotly figure, a failing cell) in a temporary folder, so the
test does not depend on how long the real chapters take.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from pipemare_lite import book, cli

FIGURE_CELL = """import plotly.graph_objects as go
fig = go.Figure(go.Bar(x=["F", "B"], y=[3, 5]))
fig.update_layout(title="</script> must not end the page's script")
fig"""


def _chapter(folder: Path, name: str, *code: str) -> Path:
    number = name[:2]
    nb = new_notebook(
        cells=[
            new_markdown_cell(f"# {number} · Fixture {name}\n\nA promise."),
            *(new_code_cell(c) for c in code),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}},
    )
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One build of a one-chapter book with a plotly figure (one kernel start)."""
    chapters = tmp_path_factory.mktemp("chapters")
    _chapter(chapters, "07_figure_fixture", FIGURE_CELL, "import os\nprint(os.getcwd())")
    out = tmp_path_factory.mktemp("book")
    results = book.build_book(out=out, directory=chapters, timeout=120, log=lambda m: None)
    return chapters, out, results


@pytest.mark.slow  # starts a kernel: a few seconds
def test_index_links_every_executed_chapter(built):
    chapters, out, results = built
    assert [r.name for r in results] == ["07_figure_fixture"] and results[0].ok
    index = (out / "index.html").read_text()
    assert 'href="07_figure_fixture.html"' in index
    assert "Fixture 07_figure_fixture" in index  # title read from the first heading
    assert (out / "07_figure_fixture.html").is_file()
    timings = json.loads((out / "timings.json").read_text())
    assert set(timings) == {"07_figure_fixture.ipynb"} and timings["07_figure_fixture.ipynb"] > 0


@pytest.mark.slow  # starts a kernel: a few seconds
def test_pages_load_no_script_from_the_network(built):
    _, out, _ = built
    for page in (out / "index.html", out / "07_figure_fixture.html"):
        sources = re.findall(r"<script[^>]*\bsrc=[\"']([^\"']+)", page.read_text())
        assert all("cdn." not in s and "://" not in s for s in sources), sources
    page = (out / "07_figure_fixture.html").read_text()
    sources = re.findall(r"<script[^>]*\bsrc=[\"']([^\"']+)", page)
    assert sources[0] == book.PLOTLY_JS
    for source in sources:  # every script the page loads was copied beside it
        assert (out / source.split("?")[0]).is_file(), source


@pytest.mark.slow  # starts a kernel: a few seconds
def test_formulas_use_the_local_mathjax_copy(built):
    _, out, _ = built
    if book.mathjax_source() is None:
        pytest.skip("jupyter-server-mathjax is not installed")
    page = (out / "07_figure_fixture.html").read_text()
    assert f'src="{book.MATHJAX_URL}"' in page
    assert (out / "mathjax" / "MathJax.js").is_file()


@pytest.mark.slow  # starts a kernel: a few seconds
def test_plotly_js_is_the_installed_copy(built):
    _, out, _ = built
    shipped = Path(str(resources.files("plotly") / "package_data" / "plotly.min.js"))
    assert (out / "plotly.min.js").read_bytes() == shipped.read_bytes()


@pytest.mark.slow  # starts a kernel: a few seconds
def test_figure_becomes_a_div_drawn_by_newplot(built):
    _, out, _ = built
    page = (out / "07_figure_fixture.html").read_text()
    divs = re.findall(r'<div[^>]*class="plotly-graph-div"[^>]*>', page)
    div_ids = [re.search(r'id="([^"]+)"', d).group(1) for d in divs]
    assert len(div_ids) == 1
    assert f'Plotly.newPlot("{div_ids[0]}"' in page
    assert "<\\/script> must not end" in page  # the title survived, escaped
    assert "application/vnd.plotly.v1+json" not in page


@pytest.mark.slow  # starts a kernel: a few seconds
def test_chapters_run_with_the_chapters_folder_as_working_directory(built):
    chapters, out, _ = built
    assert str(chapters) in (out / "07_figure_fixture.html").read_text()


@pytest.mark.slow  # starts a kernel: a few seconds
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
    assert not (out / "02_fine.html").exists()  # stopped at the first failure

    record = tmp_path / "results" / "chapter_times.json"
    keep_going = argv + ["--keep-going", "--record-timings", str(record)]
    assert cli.main(keep_going) == 1  # failures still fail, the rest is built
    index = (out / "index.html").read_text()
    assert (out / "02_fine.html").is_file() and 'href="02_fine.html"' in index
    assert "failed" in index.split('href="01_broken.html"')[1].split("</li>")[0]
    # the recorded times: the chapter that ran, with the command that measured it
    recorded = json.loads(record.read_text())
    assert list(recorded) == ["02_fine.ipynb"] and 0 < recorded["02_fine.ipynb"] < 60
    meta = json.loads((record.parent / "chapter_times.meta.json").read_text())
    assert meta["command"].startswith("python -m pipemare_lite book --out ")
    assert "--keep-going" in meta["command"] and f"--record-timings {record}" in meta["command"]
    assert meta["measured_now"] == ["02_fine.ipynb"] and meta["failed_now"] == ["01_broken.ipynb"]


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


#: the start of the skip reason conftest.py looks for to print its end-of-run warning
NO_BROWSER = "no headless chromium installed"


def _browser_or_skip() -> str:
    """The browser's path; a skip only where installing one was impossible (.ci/run).

    ``.ci/run`` installs Debian's chromium when it is missing and, where it cannot, says why
    in ``PIPEMARE_NO_BROWSER``. Under ``CI=true`` without that reason the browser was
    expected, so its absence is a failure, not a skip.
    """
    found = [shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome")]
    browser = next((b for b in found if b), None)
    if browser is not None:
        return browser
    reason = os.environ.get("PIPEMARE_NO_BROWSER", "")
    if os.environ.get("CI", "").lower() in ("1", "true", "yes") and not reason:
        pytest.fail(
            "CI=true but no chromium is on PATH: run CI through .ci/run (it installs "
            "Debian's chromium), or set PIPEMARE_NO_BROWSER to why it cannot be installed"
        )
    pytest.skip(f"{NO_BROWSER}: {reason or 'install Debian chromium (apt-get install chromium)'}")


@pytest.mark.slow  # a headless browser (CI installs one: .ci/run)
def test_a_browser_draws_the_figure_offline(built):
    """End to end: the page, opened from disk, draws the plotly figure (an SVG appears)."""
    browser = _browser_or_skip()
    _, out, _ = built
    page = (out / "07_figure_fixture.html").resolve()
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
         "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert 'class="main-svg"' in done.stdout, done.stderr[-2000:]


def test_a_missing_browser_skips_only_where_installing_was_impossible(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("PIPEMARE_NO_BROWSER", raising=False)
    monkeypatch.setenv("CI", "true")  # CI expects .ci/run to have installed one
    with pytest.raises(pytest.fail.Exception, match="CI=true but no chromium"):
        _browser_or_skip()
    monkeypatch.setenv("PIPEMARE_NO_BROWSER", "no apt-get here")
    with pytest.raises(pytest.skip.Exception, match=f"{NO_BROWSER}: no apt-get here"):
        _browser_or_skip()
    monkeypatch.delenv("PIPEMARE_NO_BROWSER")
    monkeypatch.delenv("CI")  # a laptop without chromium: a skip that says how to install
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        _browser_or_skip()
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    assert _browser_or_skip() == "/usr/bin/chromium"


def test_inline_markdown_renders_emphasis_and_code_after_escaping_html():
    assert (
        book.inline_markdown("its idle time (the *bubble*)")
        == "its idle time (the <em>bubble</em>)"
    )
    assert book.inline_markdown("**all** M, _then_ `2 * 3 * 4`") == (
        "<strong>all</strong> M, <em>then</em> <code>2 * 3 * 4</code>"
    )
    # HTML in a promise is text, also inside emphasis and code
    assert book.inline_markdown('*<b>x</b>* `<script>` & "q"') == (
        "<em>&lt;b&gt;x&lt;/b&gt;</em> <code>&lt;script&gt;</code> &amp; &quot;q&quot;"
    )
    # what is not emphasis stays as written; a link keeps its text
    assert book.inline_markdown("P * M and snake_case_name") == "P * M and snake_case_name"
    assert book.inline_markdown("see [chapter 02](02_x.ipynb)") == "see chapter 02"


def test_index_renders_the_promise_markdown(tmp_path):
    chapters, out = tmp_path / "chapters", tmp_path / "book"
    chapters.mkdir()
    out.mkdir()
    path = _chapter(chapters, "02_markdown_promise")
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].source = "# 02 · The `gpipe` schedule\n\nMeasure its *bubble* <i>now</i>."
    nbformat.write(nb, path)
    (out / "02_markdown_promise.html").write_text("<html></html>")
    result = book.ChapterResult("02_markdown_promise", "t", out / "x.html", 1.25)
    index = book.write_index(out, [result], chapters).read_text()
    assert "The <code>gpipe</code> schedule" in index
    assert "Measure its <em>bubble</em> &lt;i&gt;now&lt;/i&gt;." in index
    assert "*bubble*" not in index


def test_index_and_timings_are_replaced_not_rewritten(tmp_path):
    chapters, out = tmp_path / "chapters", tmp_path / "book"
    chapters.mkdir()
    out.mkdir()
    _chapter(chapters, "03_timed")
    (out / "03_timed.html").write_text("<html></html>")
    (out / "timings.json").write_text('{"03_timed.ipynb": 9.0}\n')
    inode = (out / "timings.json").stat().st_ino
    result = book.ChapterResult("03_timed", "t", out / "03_timed.html", 2.04)
    book.write_index(out, [result], chapters)
    assert (out / "timings.json").stat().st_ino != inode
    assert json.loads((out / "timings.json").read_text()) == {"03_timed.ipynb": 2.0}
    assert sorted(p.name for p in out.iterdir()) == ["03_timed.html", "index.html", "timings.json"]


def _result(name: str, seconds: float, error: str = "") -> book.ChapterResult:
    return book.ChapterResult(name, name, Path(f"{name}.html"), seconds, error)


def test_recorded_timings_merge_drop_failures_and_carry_their_meta(tmp_path):
    import os
    import platform

    from pipemare_lite import __version__, notebooks

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
