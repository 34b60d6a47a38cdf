"""The book site in real Chromium: a small site (chapters 02 and 03) built by the real build.

One module fixture runs ``build_book`` on two real chapters into ``build/test-book/`` and
opens every page once: no console error, no failed request, every plotly figure drawn as
SVG, every internal link (with its #anchor) resolving, a screenshot of each page in
``build/test-book/_screenshots/``. Then the search box finds a word of chapter 03, and the
table of contents, previous/next and download links are checked in the DOM.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from pipemare_lite.book import build as book
from tests.browser import chromium, chromium_path, watch

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "build" / "test-book"
SCREENSHOTS = SITE / "_screenshots"
CHAPTERS = ("02", "03")
#: A word of chapter 03 ("steady state" of 1F1B) that chapter 02 does not use.
CHAPTER_03_TERM = "steady"

pytestmark = pytest.mark.slow

_ALL_FIGURES_DRAWN = """() => [...document.querySelectorAll('.plotly-graph-div')]
    .every(div => div.querySelector('svg.main-svg'))"""
# MathJax 2 typesets asynchronously; its queue runs this after the page's formulas
_MATHJAX_DONE = """() => new Promise(done => {
    if (!window.MathJax || !MathJax.Hub) { done(true); return; }
    MathJax.Hub.Queue(() => done(true));
})"""


@dataclass
class VisitedPage:
    """What one page showed in Chromium."""

    path: Path
    problems: list[str]
    figures: int
    drawn: int
    links: list[str]
    ids: set[str]
    screenshot: Path
    seconds: float


def _visit(context, path: Path) -> VisitedPage:
    page = context.new_page()
    problems = watch(page)
    start = time.perf_counter()
    page.goto(path.as_uri(), wait_until="load")
    try:
        page.wait_for_function(_ALL_FIGURES_DRAWN, timeout=60_000)
    except Exception as error:  # the count below says which figures stayed empty
        problems.page_errors.append(f"figures not drawn within 60 s: {error}")
    page.evaluate(_MATHJAX_DONE)
    figures = page.locator(".plotly-graph-div").count()
    drawn = page.locator(".plotly-graph-div:has(svg.main-svg)").count()
    links = page.eval_on_selector_all("a[href]", "as => as.map(a => a.href)")
    ids = set(page.eval_on_selector_all("[id], a[name]", "es => es.map(e => e.id || e.name)"))
    relative = path.relative_to(SITE).as_posix()
    shot = SCREENSHOTS / (relative.replace("/", "__").removesuffix(".html") + ".png")
    page.screenshot(path=str(shot), full_page=True)
    seconds = time.perf_counter() - start
    page.close()
    return VisitedPage(path, problems.all(), figures, drawn, links, ids, shot, seconds)


@pytest.fixture(scope="module")
def site():
    """The small site, built now, and every page of it as Chromium showed it."""
    chromium_path()  # skip (fail under CI) before a minute of building
    for folder in (SITE, SITE.with_name(f"{SITE.name}.sphinx")):
        shutil.rmtree(folder, ignore_errors=True)
    start = time.perf_counter()
    results = book.build_book(out=SITE, chapters=list(CHAPTERS), timeout=300, log=lambda m: None)
    built_in = time.perf_counter() - start
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    pages = sorted(p for p in SITE.rglob("*.html") if "_static" not in p.parts)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with chromium() as context:
        visited = {p: _visit(context, p) for p in pages}
    print(
        f"\nsmall site: built in {built_in:.1f} s, {len(pages)} pages checked in Chromium in "
        f"{time.perf_counter() - start:.1f} s; screenshots in {SCREENSHOTS}"
    )
    return visited


def test_the_small_site_has_its_pages(site):
    names = {p.relative_to(SITE).as_posix() for p in site}
    assert {"index.html", "search.html", "genindex.html"} <= names
    assert {
        "chapters/02_gpipe_and_the_bubble.html",
        "chapters/03_1f1b_and_activation_memory.html",
    } <= names
    # the engine's source pages that the chapters link to
    assert {"pipemare_lite/schedules/builders/gpipe.html",
            "pipemare_lite/analysis/simulate.html"} <= names


def test_every_page_loads_without_console_error_or_failed_request(site):
    problems = {p.relative_to(SITE).as_posix(): v.problems for p, v in site.items() if v.problems}
    assert not problems, problems


def test_every_plotly_figure_on_every_page_is_drawn(site):
    for path, page in site.items():
        assert page.drawn == page.figures, f"{path}: {page.drawn} of {page.figures} drawn"
    for number in CHAPTERS:  # the chapters have figures: the check above is not empty
        chapter = next(v for p, v in site.items() if p.name.startswith(f"{number}_"))
        assert chapter.figures >= 2, f"chapter {number} shows {chapter.figures} figures"


def test_every_internal_link_resolves_anchors_included(site):
    ids_by_page = {path.resolve(): page.ids for path, page in site.items()}
    broken, checked = [], 0
    for path, page in site.items():
        for href in page.links:
            parts = urlsplit(href)
            if parts.scheme in {"http", "https", "mailto", "javascript"}:
                continue
            assert parts.scheme == "file", f"{path.name}: unexpected link {href}"
            target = Path(unquote(parts.path))
            if target.is_dir():
                target = target / "index.html"
            checked += 1
            if not target.is_file():
                broken.append(f"{path.relative_to(SITE)} -> {href} (no such file)")
            elif parts.fragment and target.suffix == ".html":
                ids = ids_by_page.get(target.resolve())
                if ids is None:
                    broken.append(f"{path.relative_to(SITE)} -> {href} (page not in the site)")
                elif unquote(parts.fragment) not in ids:
                    broken.append(f"{path.relative_to(SITE)} -> {href} (no such anchor)")
    assert checked > 100, f"only {checked} internal links found"
    assert not broken, "\n".join(broken)


def test_a_screenshot_of_each_page_is_in_the_build_folder(site):
    for page in site.values():
        assert page.screenshot.is_file() and page.screenshot.stat().st_size > 10_000, page.path
    assert (SCREENSHOTS / "index.png").is_file()
    assert (SCREENSHOTS / "chapters__02_gpipe_and_the_bubble.png").is_file()


def test_search_box_finds_a_term_of_chapter_03(site):
    with chromium() as context:
        page = context.new_page()
        problems = watch(page)
        page.goto((SITE / "index.html").as_uri(), wait_until="load")
        page.keyboard.press("Control+k")  # the theme's search shortcut opens the dialog
        field = page.locator("#pst-search-dialog input[name=q]")
        field.fill(CHAPTER_03_TERM)
        with page.expect_navigation():
            field.press("Enter")
        results = page.locator("#search-results ul.search li a")
        results.first.wait_for(timeout=60_000)
        hrefs = results.evaluate_all("as => as.map(a => a.href)")
        assert any("chapters/03_1f1b_and_activation_memory.html" in h for h in hrefs), hrefs
        assert not any("chapters/02_" in h for h in hrefs), hrefs  # 02 never says it
        assert not problems.all(), problems.all()


def test_sidebar_parts_previous_next_and_download_link(site):
    with chromium() as context:
        page = context.new_page()
        page.goto((SITE / "chapters" / "02_gpipe_and_the_bubble.html").as_uri())
        sidebar = page.locator("#pst-primary-sidebar")
        assert sidebar.locator(".caption-text").all_inner_texts() == ["Synchronous pipelines"]
        entries = sidebar.locator("nav a.reference.internal").all_inner_texts()
        assert [e[:2] for e in entries if e[:2].isdigit()] == ["02", "03"]
        assert page.locator("a.left-prev").get_attribute("href") == "../index.html"
        assert page.locator("a.right-next").get_attribute("href") == (
            "03_1f1b_and_activation_memory.html"
        )
        download = page.locator("a.pml-download")
        assert download.get_attribute("href") == "02_gpipe_and_the_bubble.ipynb"
        downloaded = SITE / "chapters" / "02_gpipe_and_the_bubble.ipynb"
        assert (
            downloaded.read_bytes()
            == (ROOT / "chapters" / "02_gpipe_and_the_bubble.ipynb").read_bytes()
        )  # the clean chapter, the one to run live
        # the live widget's place: a note on opening the live notebook, no widget model
        note = page.locator(".pml-widget-note")
        assert note.count() >= 1 and "jupyter lab chapters/02_" in note.first.inner_text()
        assert page.locator(".jupyter-widgets, .widget-area").count() == 0
        # an engine link opens the source page at the lines it shows
        source_link = page.locator(
            'a[href^="../pipemare_lite/schedules/builders/gpipe.html#L-"]').first
        with page.expect_navigation():
            source_link.click()
        assert page.url.split("#")[1].startswith("L-")
        assert page.locator(f"#{page.url.split('#')[1]}").count() == 1


def test_solutions_are_folded_after_their_check_and_open_with_a_click(site):
    """Issue 45: a solution one deliberate step away. On chapter 02's page every exercise's
    solution is a closed ``<details>`` saying "try it first", right after the check's
    verdict; its code is not shown until the bar is clicked."""
    from pipemare_lite.book.solutions import PROMPT_SHOW

    with chromium() as context:
        page = context.new_page()
        page.goto((SITE / "chapters" / "02_gpipe_and_the_bubble.html").as_uri())
        folds = page.locator("details.hide")
        assert folds.count() == 3  # exercises 2.1-2.3
        for k in range(folds.count()):
            fold = folds.nth(k)
            assert fold.get_attribute("open") is None
            assert PROMPT_SHOW in fold.locator("summary").inner_text()
            # the cell just before it is the check, with its verdict
            before = fold.evaluate(
                "d => d.closest('.cell').previousElementSibling.innerText")
            assert "check(" in before and "ex02_" in before, before
        code = folds.nth(2).locator(".cell_input")
        assert not code.is_visible()
        folds.nth(2).locator("summary").click()
        assert code.is_visible() and "smallest_m_below" in code.inner_text()
