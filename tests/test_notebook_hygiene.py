"""Committed chapters are clean, runnable-looking notebooks; the tooling that keeps them so works.

1. Every ``chapters/*.ipynb`` passes :func:`pipemare_lite.book.notebooks.notebook_problems`
   (valid nbformat, kernel python3, no widget state, outputs only in checked cells, size cap,
   name, title, "Before you start", summary, a check() exercise, imports that resolve).
2. Each rule fires on a notebook planted with exactly that problem, and ``clean`` removes
   what it should and keeps checked outputs.
3. The test command's machinery: nbval's lax mode compares exactly the cells tagged
   ``nbval-check-output``, under xdist, and the root conftest prints each notebook's time.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from pipemare_lite.book import notebooks
from pipemare_lite.book.notebooks import CHECK_TAG

ROOT = Path(__file__).resolve().parents[1]
CHAPTER_FILES = sorted((ROOT / "chapters").glob("*.ipynb"))


@pytest.mark.parametrize("path", CHAPTER_FILES, ids=lambda p: p.name)
def test_committed_chapter_follows_the_authoring_rules(path):
    problems = notebooks.notebook_problems(path)
    assert not problems, f"{path.name} (see chapters/README.md):\n  " + "\n  ".join(problems)


def test_every_chapter_is_listed_in_the_chapter_table():
    table = notebooks.chapter_table(ROOT / "chapters")
    assert {r.file for r in table.written} == {p.name for p in CHAPTER_FILES}
    assert [r.number for r in table.rows] == sorted({r.number for r in table.rows})
    assert set(notebooks.PLANNED_CHAPTERS) <= {r.number for r in table.rows}


def test_chapter_table_marks_written_chapters_and_shows_measured_times(tmp_path):
    folder = tmp_path / "chapters"
    folder.mkdir()
    nbformat.write(_good_chapter("02"), folder / "02_planted_chapter.ipynb")
    nbformat.write(_good_chapter("14"), folder / "14_an_extra_chapter.ipynb")
    (folder / "notes.ipynb").write_text("{}")  # not a chapter name: ignored
    timings = tmp_path / "timings.json"
    timings.write_text('{"02_planted_chapter.ipynb": 12.4, "99_gone.ipynb": 3}')

    table = notebooks.chapter_table(folder, timings=timings)
    by_number = {r.number: r for r in table.rows}
    assert set(by_number) == set(notebooks.PLANNED_CHAPTERS) | {14}
    assert [r.number for r in table.written] == [2, 14]
    assert by_number[2].title == "A planted chapter" and by_number[2].seconds == 12.4
    assert by_number[14].seconds is None and by_number[3].file == ""
    assert by_number[3].title == notebooks.PLANNED_CHAPTERS[3]
    markdown = table.to_markdown()
    # the column holds the notebook's file name (or "planned"), and its header says so
    assert markdown.startswith("| # | chapter | notebook | last measured run |\n")
    assert "| 02 | A planted chapter | `02_planted_chapter.ipynb` | 12 s |" in markdown
    assert f"| 03 | {notebooks.PLANNED_CHAPTERS[3]} | planned |  |" in markdown
    assert "99_gone" not in markdown
    # the plain-text form (a text front end, nbval) has the same column headers
    header, first = str(table).splitlines()[:2]
    assert header.split() == ["#", "chapter", "notebook", "last", "measured", "run"]
    assert first.startswith("00  ") and header.index("notebook") == first.index("(planned)")
    # without a timings file (the book never built) the table still works
    assert notebooks.chapter_table(folder, timings=tmp_path / "none.json").rows[2].seconds is None


def test_readme_table_is_rewritten_between_its_markers_only(tmp_path):
    folder = tmp_path / "chapters"
    folder.mkdir()
    nbformat.write(_good_chapter("02"), folder / "02_planted_chapter.ipynb")
    start, end = notebooks.README_MARKERS
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\n{start}\nold table\n{end}\n\nAfter.\n")

    assert notebooks.update_readme(readme, folder) is True
    text = readme.read_text()
    assert text.startswith("# Title\n\n") and text.endswith(f"{end}\n\nAfter.\n")
    assert "old table" not in text
    link = "[02_planted_chapter.ipynb](chapters/02_planted_chapter.ipynb)"
    assert f"| 02 | A planted chapter | {link} |" in text
    assert f"| 01 | {notebooks.PLANNED_CHAPTERS[1]} | planned |" in text
    assert notebooks.update_readme(readme, folder) is False  # idempotent

    readme.write_text("no markers here")
    with pytest.raises(ValueError, match="needs exactly one"):
        notebooks.update_readme(readme, folder)


# --------------------------------------------------------------------------- planted problems


def _good_chapter(number: str = "05") -> nbformat.NotebookNode:
    checked = new_code_cell("print(2 + 2)", metadata={"tags": [CHECK_TAG]}, execution_count=2)
    checked.outputs = [new_output("stream", name="stdout", text="4\n")]
    return new_notebook(
        cells=[
            new_markdown_cell(f"# {number} · A planted chapter\n\nYou will count to four."),
            new_markdown_cell("## Before you start\n\nRuns in a second."),
            new_code_cell("from pipemare_lite.book.notebooks import chapter_table"),
            checked,
            new_code_cell("from pipemare_lite.book.exercises import check\ncheck('ex00_1', f)"),
            new_markdown_cell("## Summary\n\n- four"),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}},
    )


def _problems(tmp_path, nb, name: str = "05_planted_chapter.ipynb") -> list[str]:
    path = tmp_path / name
    nbformat.write(nb, path)
    return notebooks.notebook_problems(path)


def test_a_good_chapter_has_no_problems(tmp_path):
    assert _problems(tmp_path, _good_chapter()) == []


def _with_output_in_unchecked_cell(nb):
    nb.cells[2].outputs = [new_output("stream", name="stdout", text="x\n")]


def _with_execution_count(nb):
    nb.cells[2].execution_count = 3


def _with_widget_state(nb):
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}


def _with_other_kernel(nb):
    nb.metadata["kernelspec"]["name"] = "my-env"


def _without_title(nb):
    nb.cells[0].source = "Chapter five\n\nno heading"


def _with_wrong_title_number(nb):
    nb.cells[0].source = "# 06 · Wrong number"


def _without_before_you_start(nb):
    del nb.cells[1]


def _without_summary(nb):
    del nb.cells[-1]


def _without_exercise(nb):
    del nb.cells[4]


def _with_missing_import(nb):
    nb.cells[2].source = "from pipemare_lite.book.notebooks import no_such_function"


def _with_missing_module(nb):
    nb.cells[2].source = "%matplotlib inline\nimport pipemare_lite.no_such_module"


def _with_checked_cell_without_output(nb):
    nb.cells[3].outputs = []


def _with_checked_cell_without_execution_count(nb):
    nb.cells[3].execution_count = None


@pytest.mark.parametrize(
    "plant, expected",
    [
        (_with_output_in_unchecked_cell, "outputs, but no tag"),
        (_with_execution_count, "execution_count is set"),
        (_with_widget_state, "widget state"),
        (_with_other_kernel, "kernelspec name is 'my-env'"),
        (_without_title, "first cell must be a markdown title"),
        (_with_wrong_title_number, "title number 06 differs from file number 05"),
        (_without_before_you_start, "Before you start"),
        (_without_summary, "no summary"),
        (_without_exercise, "check()"),
        (_with_missing_import, "pipemare_lite.book.notebooks.no_such_function"),
        (_with_missing_module, "pipemare_lite.no_such_module"),
        (_with_checked_cell_without_output, "no stored output"),
        (_with_checked_cell_without_execution_count, "nbval calls it unrun"),
    ],
    ids=lambda v: v.__name__.lstrip("_") if callable(v) else "",
)
def test_each_rule_catches_its_planted_problem(tmp_path, plant, expected):
    nb = _good_chapter()
    plant(nb)
    problems = _problems(tmp_path, nb)
    assert len(problems) == 1 and expected in problems[0], problems


def test_bad_name_invalid_json_and_size_are_reported(tmp_path):
    assert any("NN_snake_case" in p for p in _problems(tmp_path, _good_chapter(), "5-Bad.ipynb"))
    broken = tmp_path / "05_broken.ipynb"
    broken.write_text('{"cells": 3}')
    assert any("not a valid notebook" in p for p in notebooks.notebook_problems(broken))
    big = _good_chapter()
    big.cells[0].source += "\n\n" + "x" * (notebooks.MAX_NOTEBOOK_BYTES + 1)
    assert any("the cap is" in p for p in _problems(tmp_path, big))


def test_chapter_00_needs_no_exercise(tmp_path):
    nb = _good_chapter("00")
    _without_exercise(nb)
    assert _problems(tmp_path, nb, "00_intro.ipynb") == []


# --------------------------------------------------------------------------- cleaning


def _dirty(nb):
    nb = copy.deepcopy(nb)
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.7"}
    nb.cells[2].execution_count = 7
    nb.cells[2].outputs = [new_output("execute_result", {"text/plain": "x"}, execution_count=7)]
    nb.cells[2].metadata["execution"] = {"iopub.status.idle": "2026-01-01T00:00:00Z"}
    nb.cells[3].execution_count = 8
    nb.cells[3].outputs.append(
        new_output("display_data", {"application/vnd.jupyter.widget-view+json": {"model_id": "m"}})
    )
    return nb


def test_clean_keeps_checked_outputs_and_strips_the_rest():
    good = _good_chapter()
    cleaned = notebooks.clean_notebook(_dirty(good))
    assert "widgets" not in cleaned.metadata
    assert cleaned.metadata["language_info"] == {"name": "python"}
    assert cleaned.metadata["kernelspec"]["name"] == "python3"
    assert [c.get("execution_count") for c in cleaned.cells] == [None, None, None, 2, None, None]
    assert cleaned.cells[2].outputs == [] and "execution" not in cleaned.cells[2].metadata
    assert cleaned.cells[3].outputs == good.cells[3].outputs  # the widget view is gone
    nbformat.validate(cleaned)


def test_clean_file_is_idempotent_and_the_cli_reports(tmp_path, capsys):
    path = tmp_path / "05_planted_chapter.ipynb"
    nbformat.write(_dirty(_good_chapter()), path)
    assert notebooks.main(["check", str(path)]) == 1
    assert notebooks.main(["clean", str(path)]) == 0
    assert "cleaned" in capsys.readouterr().out
    assert notebooks.clean_file(path) is False  # a second clean changes nothing
    assert notebooks.main(["check", str(path)]) == 0


def test_clean_file_replaces_the_file_instead_of_rewriting_it(tmp_path, monkeypatch):
    """A temporary file in the same folder moved over the chapter: never half-written."""
    path = tmp_path / "05_planted_chapter.ipynb"
    nbformat.write(_dirty(_good_chapter()), path)
    inode = path.stat().st_ino
    assert notebooks.clean_file(path) is True
    assert path.stat().st_ino != inode  # os.replace gave it a new inode
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temporary left

    # a failure while writing leaves the old chapter as it was
    nbformat.write(_dirty(_good_chapter()), path)
    before = path.read_text()

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        notebooks.clean_file(path)
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


# --------------------------------------------------------------------------- test command


@pytest.mark.slow
def test_nbval_lax_compares_only_tagged_cells_under_xdist_and_reports_times(tmp_path):
    """The flags of `make test` on two fixture notebooks: one with a wrong checked output.

    An untagged cell whose stored output is stale must pass (lax), a tagged one must fail;
    the root conftest must print a wall time for each notebook although xdist ran them.
    """
    wrong_but_unchecked = new_code_cell("print(1)", execution_count=1)
    wrong_but_unchecked.outputs = [new_output("stream", name="stdout", text="not one\n")]
    right = new_code_cell("print(6 * 7)", metadata={"tags": [CHECK_TAG]}, execution_count=2)
    right.outputs = [new_output("stream", name="stdout", text="42\n")]
    wrong = copy.deepcopy(right)
    wrong.outputs = [new_output("stream", name="stdout", text="41\n")]
    meta = {"kernelspec": {"name": "python3", "display_name": "Python 3"}}
    nbformat.write(new_notebook(cells=[wrong_but_unchecked, right], metadata=meta),
                   tmp_path / "01_passes.ipynb")  # fmt: skip
    nbformat.write(new_notebook(cells=[wrong], metadata=meta), tmp_path / "02_fails.ipynb")
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    shutil.copy(ROOT / "tests" / "nbval_sanitize.cfg", tmp_path / "sanitize.cfg")

    # only the two plugins `make test` relies on: starting three pytest processes with every
    # installed plugin is most of this test's time
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "xdist", "-p", "nbval",
         "-p", "no:cacheprovider", "-n", "2",
         "--dist", "loadscope", "--nbval-lax", "--nbval-current-env",
         "--nbval-sanitize-with", "sanitize.cfg", "--nbval-cell-timeout", "60",
         "01_passes.ipynb", "02_fails.ipynb"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "2 passed" in out and "1 failed" in out, out
    assert "02_fails.ipynb::Cell 0" in out.split("short test summary")[-1]
    times = out.split("chapter wall times")[-1]
    assert "01_passes.ipynb" in times and "02_fails.ipynb" in times, out


@pytest.mark.slow  # starts a kernel
def test_run_refreshes_checked_outputs_and_saves_the_notebook_clean(tmp_path, capsys):
    nb = _good_chapter()
    nb.cells[3].source = "print(6 * 7)"  # the stored output still says 4
    nb.cells.insert(4, new_code_cell("print('not kept')"))
    path = tmp_path / "05_planted_chapter.ipynb"
    nbformat.write(nb, path)
    path.with_name("helper.txt").write_text("read from the chapters folder")
    nb.cells[2].source = "print(open('helper.txt').read())"  # cwd must be the notebook's folder
    nbformat.write(nb, path)

    assert notebooks.main(["run", str(path)]) == 1  # check('ex00_1', f): f is undefined
    assert "FAIL" in capsys.readouterr().out
    assert nbformat.read(path, as_version=4).cells[3].outputs[0]["text"] == "4\n"  # not saved

    nb.cells[5].source = "x = 1"  # the exercise cell, now without check()
    nbformat.write(nb, path)
    assert notebooks.main(["run", str(path)]) == 0
    saved = nbformat.read(path, as_version=4)
    assert saved.cells[3].outputs[0]["text"] == "42\n"
    assert all(not c.get("outputs") for i, c in enumerate(saved.cells) if i != 3)
    problems = notebooks.notebook_problems(path, check_imports=False)
    assert problems == ["no exercise cell calling check()"]  # the one rule broken on purpose


def test_sanitize_rules_mask_ids_that_change_between_runs():
    """nbval reads the rules with its own parser; two runs differing only in ids compare equal."""
    from nbval.plugin import get_sanitize_patterns

    rules = get_sanitize_patterns((ROOT / "tests" / "nbval_sanitize.cfg").read_text())
    patterns = {regex for regex, _ in rules}

    def sanitize(text):
        for regex, replace in rules:
            text = re.sub(regex, replace, text)
        return text

    run_a = '{"type": "scatter", "uid": "a3f9c1", "x": [1, 2]} <div id="0c7e5a1b-2d3f">'
    run_b = '{"type": "scatter", "uid":"77be0d", "x": [1, 2]} <div id="9d1f0e2c-4b6a">'
    assert sanitize(run_a) == sanitize(run_b)
    assert '"uid": "UID"' in sanitize(run_a) and len(patterns) == len(rules)
    # the numbers a checked cell exists for are left alone
    assert sanitize("idle fraction 0.2727, uid of rank 3") == "idle fraction 0.2727, uid of rank 3"


def test_recorded_chapter_times_are_measured_and_match_chapter_00():
    """data/results/chapter_times.json: real chapters, within budget, with the machine it names."""
    import json

    record = ROOT / notebooks.RECORDED_TIMINGS
    if not record.is_file():
        pytest.skip("no recorded chapter times yet (book --record-timings)")
    times = json.loads(record.read_text())
    meta = json.loads(notebooks.meta_path(record).read_text())
    assert set(times) <= {p.name for p in CHAPTER_FILES}, "times of chapters that do not exist"
    assert all(0 < seconds <= 60 for seconds in times.values()), times  # the per-chapter budget
    assert meta["command"].startswith("python -m pipemare_lite book ")
    assert "--record-timings data/results/chapter_times.json" in meta["command"]
    for key in ("package_version", "torch_version", "python_version", "platform", "date"):
        assert meta[key], key
    assert set(meta["measured_now"]) <= set(times)
    # chapter 00 says the committed numbers come from a 2-core machine
    chapter_00 = nbformat.read(ROOT / "chapters" / "00_how_to_use_this_book.ipynb", as_version=4)
    prose = "\n".join(c.source for c in chapter_00.cells if c.cell_type == "markdown")
    assert "data/results/chapter_times.json" in prose
    assert f"{meta['cpu_count']}-core machine" in prose
