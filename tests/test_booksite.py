"""The book site's parts, without a kernel or Sphinx: pages, links, source pages, front page.

The built site is tested in tests/test_book.py and, in Chromium, in
tests/test_book_site_browser.py.
"""

from __future__ import annotations

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from pipemare_lite.book.notebooks import BOOK_PARTS, book_part
from pipemare_lite.book.site import pages, project, sources
from pipemare_lite.figures.viz.figure_html import PLOTLY_MIMETYPE

FIGURE = {"data": [{"type": "bar", "y": [1, 2]}], "layout": {"height": 300}}
WIDGET = {"model_id": "abc", "version_major": 2, "version_minor": 0}


def _repo(tmp_path):
    """A repository layout: chapters/ and a package with one file."""
    (tmp_path / "chapters").mkdir()
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "mod.py").write_text("def f():\n    return 1\n")
    return tmp_path


def _chapter(folder, name, promise="A promise."):
    nb = new_notebook(cells=[new_markdown_cell(f"# {name[:2]} · Title {name}\n\n{promise}")])
    nbformat.write(nb, folder / f"{name}.ipynb")
    return folder / f"{name}.ipynb"


@pytest.mark.parametrize(
    ("number", "title"),
    [
        (0, "Synchronous pipelines"),
        (4, "Synchronous pipelines"),
        (5, "Asynchronous pipelines"),
        (7, "Asynchronous pipelines"),
        (8, "PipeMare's fixes"),
        (10, "PipeMare's fixes"),
        (11, "Real processes and beyond"),
        (12, "Real processes and beyond"),
        (13, "Real processes and beyond"),  # a chapter past the plan joins the last part
    ],
)
def test_book_part_comes_from_the_chapter_number(number, title):
    assert book_part(number).title == title


def test_book_parts_cover_every_planned_chapter_once_in_order():
    numbers = [n for part in BOOK_PARTS for n in range(part.first, part.last + 1)]
    assert numbers == list(range(13))


@pytest.mark.parametrize("bad", [-1, "3", 2.0, True])
def test_book_part_rejects_what_is_not_a_chapter_number(bad):
    with pytest.raises(ValueError, match="chapter number must be an integer >= 0"):
        book_part(bad)


def test_front_page_groups_chapters_in_parts_and_leaves_out_empty_parts(tmp_path):
    for name in ("00_intro", "02_gpipe", "06_theory", "12_beyond"):
        _chapter(tmp_path, name)
    held = [
        project.SiteChapter("00_intro", 1.0, False),
        project.SiteChapter("02_gpipe", None, True),
        project.SiteChapter("06_theory", 2.5, False),
        project.SiteChapter("12_beyond", 3.25, False),
    ]
    text = project.front_page(held, tmp_path)
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == [
        "## Synchronous pipelines",
        "## Asynchronous pipelines",
        "## Real processes and beyond",
    ]  # no chapter of PipeMare's fixes yet: no such part
    captions = [line for line in text.splitlines() if line.startswith(":caption:")]
    assert captions == [f":caption: {h[3:]}" for h in headings]
    sync = text.split("```{toctree}")[1]
    assert "chapters/00_intro\nchapters/02_gpipe\n```" in sync
    assert "[00 · Title 00_intro](chapters/00_intro.ipynb)** · ran in 1.0 s" in text
    assert "**failed** when this book was built" in text.split("02 · Title")[1].split("\n")[0]
    assert "· ran in 3.2 s" in text  # 3.25 rounded as Python rounds
    assert "A promise." in text


def test_front_page_keeps_markdown_and_turns_html_into_text():
    assert project.markdown_without_html("the *bubble* <i>now</i> `a<b>`") == (
        "the *bubble* \\<i>now\\</i> `a<b>`"
    )


def test_offline_outputs_rewrites_figures_and_widgets():
    cell = new_code_cell("x")
    cell.outputs = [
        new_output("display_data", {PLOTLY_MIMETYPE: FIGURE, "text/html": "<script>big</script>"}),
        new_output("display_data", {pages.WIDGET_MIMETYPE: WIDGET, "text/plain": "w"}),
    ]
    later = new_code_cell("static")
    later.outputs = [new_output("display_data", {PLOTLY_MIMETYPE: FIGURE})]
    nb = new_notebook(cells=[cell, later], metadata={"widgets": {"state": {}}})
    pages.offline_outputs(nb, "p")
    first, second = (o["data"] for o in nb.cells[0].outputs)
    assert list(first) == ["text/html"] and 'id="p-fig-0-0"' in first["text/html"]
    assert "<script>big</script>" not in first["text/html"]  # the notebook's own HTML form
    assert list(second) == ["text/html"] and "static copy" in second["text/html"]
    assert 'id="p-fig-1-0"' in nb.cells[1].outputs[0]["data"]["text/html"]
    assert "widgets" not in nb.metadata


def test_widget_note_without_a_static_copy_does_not_promise_one():
    cell = new_code_cell("w")
    cell.outputs = [new_output("display_data", {pages.WIDGET_MIMETYPE: WIDGET})]
    nb = new_notebook(cells=[cell])
    pages.offline_outputs(nb, "05")
    note = nb.cells[0].outputs[0]["data"]["text/html"]
    assert "static copy" not in note and "jupyter lab chapters/05.ipynb" in note


def test_links_to_repository_python_files_point_at_source_pages(tmp_path):
    root = _repo(tmp_path)
    text = (
        "See [mod](../pkg/sub/mod.py), [anchored](../pkg/sub/mod.py#L2), "
        "[gone](../pkg/gone.py), [outside](../../elsewhere.py), [web](https://x.org/a.py) "
        "and [a chapter](01_x.ipynb)."
    )
    html = (
        '<a href="../pkg/sub/mod.py" target="_blank"><code>pkg/sub/mod.py, lines 1-2</code></a>'
        ' <a href="../pkg/sub/mod.py">plain</a>'
    )
    code = new_code_cell("show_source(f)")
    code.outputs = [new_output("display_data", {"text/html": html})]
    nb = new_notebook(cells=[new_markdown_cell(text), code])
    linked = pages.rewrite_source_links(nb, root / "chapters", root)
    assert linked == {"pkg/sub/mod.py"}
    assert nb.cells[0].source == (
        "See [mod](../pkg/sub/mod.md), [anchored](../pkg/sub/mod.md), "
        "[gone](../pkg/gone.py), [outside](../../elsewhere.py), [web](https://x.org/a.py) "
        "and [a chapter](01_x.ipynb)."
    )
    rewritten = nb.cells[1].outputs[0]["data"]["text/html"]
    assert '<a href="../pkg/sub/mod.html#L-1"><code>pkg/sub/mod.py, lines 1-2</code></a>' in (
        rewritten
    )
    assert '<a href="../pkg/sub/mod.html">plain</a>' in rewritten


def test_site_notebook_is_a_copy_with_the_chapter_line_under_the_title(tmp_path):
    root = _repo(tmp_path)
    path = _chapter(root / "chapters", "02_gpipe")
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(new_markdown_cell("[mod](../pkg/sub/mod.py)"))
    site, linked = pages.site_notebook(nb, path, root, seconds=4.26, failed=False)
    assert linked == {"pkg/sub/mod.py"}
    assert len(nb.cells) == 2 and nb.cells[1].source == "[mod](../pkg/sub/mod.py)"  # untouched
    meta = site.cells[1].source
    assert 'href="02_gpipe.ipynb" download' in meta and "in 4.3 s" in meta
    assert ".venv/bin/jupyter lab chapters/02_gpipe.ipynb" in meta
    failed, _ = pages.site_notebook(nb, path, root, seconds=None, failed=True)
    assert "failed when the book was built" in failed.cells[1].source


def test_source_page_has_line_anchors_and_names_the_chapters_linking_it():
    text = sources.source_page(
        "pkg/sub/mod.py", "def f():\n    return 1\n", [("chapters/02_x", "02 · X")]
    )
    assert text.startswith("---\norphan: true\n")
    assert "# pkg/sub/mod.py" in text and "(2 lines)" in text
    assert "[02 · X](../../chapters/02_x.ipynb)" in text
    assert 'id="L-1"' in text and 'id="L-2"' in text and 'id="L-3"' not in text
    assert '<span class="k">def</span>' in text  # highlighted with the theme's classes


def test_conf_reaches_no_network_and_runs_nothing():
    conf = project.conf_text()
    assert 'nb_execution_mode = "off"' in conf
    # one print loop, one output block: chapter 04's peak-memory loop arrived as two stdout
    # outputs (the kernel flushed between prints) and the site drew two boxes (second pass);
    # the build merges them (tests/test_site_streams.py), not myst-nb (slow on long lines)
    assert "nb_merge_streams = False" in conf
    assert f"mathjax_path = {project.MATHJAX_PATH!r}" in conf
    assert "://" not in conf
    compile(conf, "conf.py", "exec")  # valid Python


def test_output_folder_must_be_new_empty_or_an_earlier_book(tmp_path):
    site = project.SiteProject(tmp_path / "new", tmp_path, tmp_path)
    site.check_output()  # does not exist yet: fine
    (tmp_path / "new").mkdir()
    site.check_output()  # empty: fine
    (tmp_path / "new" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a book build"):
        site.check_output()
    (tmp_path / "new" / project.SITE_MARKER).write_text("")
    site.check_output()  # an earlier build
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="is a file"):
        project.SiteProject(tmp_path / "file", tmp_path, tmp_path).check_output()


def test_a_missing_browser_skips_only_where_installing_was_impossible(monkeypatch):
    import shutil

    from tests import browser

    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("PIPEMARE_NO_BROWSER", raising=False)
    monkeypatch.setenv("CI", "true")  # CI expects .ci/run to have installed one
    with pytest.raises(pytest.fail.Exception, match="no Chromium on PATH"):
        browser.chromium_path()
    monkeypatch.setenv("PIPEMARE_NO_BROWSER", "no apt-get here")
    with pytest.raises(pytest.skip.Exception, match=f"{browser.NO_BROWSER}.*no apt-get here"):
        browser.chromium_path()
    monkeypatch.delenv("PIPEMARE_NO_BROWSER")
    monkeypatch.delenv("CI")  # a laptop without chromium: a loud skip that says how to install
    with pytest.warns(UserWarning), pytest.raises(pytest.skip.Exception, match="apt-get install"):
        browser.chromium_path()
