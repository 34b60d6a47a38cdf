"""Solutions one deliberate step away (issue 45): collapsed in Jupyter, folded on the site,
open in the student copies. The browser test (``test_book_site_browser``) clicks one open."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from pipemare_lite.book.exercises.assign import student_notebook
from pipemare_lite.book.notebooks import clean_notebook
from pipemare_lite.book.site.pages import site_notebook
from pipemare_lite.book.solutions import (
    FOLD_TAG,
    PROMPT_SHOW,
    collapse_solutions,
    is_collapsed,
    is_solution_cell,
    split_check,
)

ROOT = Path(__file__).resolve().parents[1]
#: Chapters 07-10 get the mark when their owner next runs ``notebooks clean`` (issue 45);
#: then this list is every chapter.
COLLAPSED_CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", COLLAPSED_CHAPTERS, ids=lambda p: p.name[:2])
def test_jupyter_opens_every_solution_cell_collapsed_and_nothing_else(path):
    nb = nbformat.read(path, as_version=4)
    solutions = [c for c in nb.cells if is_solution_cell(c)]
    if path.name.startswith("00"):
        assert len(solutions) >= 1
    else:
        assert len(solutions) >= 2, path.name
    for cell in nb.cells:
        # JupyterLab and Notebook 7 read exactly this key to open a cell's source collapsed
        hidden = cell.metadata.get("jupyter", {}).get("source_hidden", False)
        assert hidden is is_solution_cell(cell), (path.name, cell.get("id"))


def test_clean_collapses_a_new_solution_cell_and_leaves_the_others():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("def f(x):\n    ### BEGIN SOLUTION\n    return x\n"
                                  "    ### END SOLUTION\n\n\ncheck('ex00_1', f)"),
        nbformat.v4.new_code_cell("print(1)"),
    ]
    clean_notebook(nb)
    assert is_collapsed(nb.cells[0]) and not is_collapsed(nb.cells[1])
    assert collapse_solutions(nb) == 0  # idempotent


def test_student_copies_show_their_stubs_open():
    nb = nbformat.read(ROOT / "chapters" / "02_gpipe_and_the_bubble.ipynb", as_version=4)
    student = student_notebook(nb, "02_gpipe_and_the_bubble.ipynb")
    stubs = [c for c in student.cells if "NotImplementedError" in c.source]
    assert len(stubs) == 3
    assert not any(is_collapsed(c) for c in student.cells)
    assert all("jupyter" not in c.metadata for c in stubs)


def test_split_check_takes_the_top_level_check_after_the_solution():
    source = ("def f(x):\n    ### BEGIN SOLUTION\n    y = x\n    ### END SOLUTION\n"
              "    return y\n\n\ncheck('ex09_1', f)")
    solution, check = split_check(source)
    assert solution.endswith("    return y") and check == "check('ex09_1', f)"
    assert split_check("x = 1\n### BEGIN SOLUTION\n### END SOLUTION") [1] == ""


def test_the_site_folds_each_solution_after_its_check_verdict(tmp_path):
    path = ROOT / "chapters" / "02_gpipe_and_the_bubble.ipynb"
    nb = nbformat.read(path, as_version=4)
    verdict = {"output_type": "stream", "name": "stdout", "text": "✅ ex02_1: all passed\n"}
    first = next(c for c in nb.cells if is_solution_cell(c))
    first.outputs = [nbformat.from_dict(verdict)]
    page, _ = site_notebook(nb, path, ROOT, seconds=1.0, failed=False)
    folded = [i for i, c in enumerate(page.cells) if FOLD_TAG in c.metadata.get("tags", [])]
    assert len(folded) == sum(is_solution_cell(c) for c in nb.cells) == 3
    for i in folded:
        solution, check = page.cells[i], page.cells[i - 1]
        assert check.cell_type == "code" and check.source.startswith("check(\"ex02_")
        assert "check(" not in solution.source and solution.outputs == []
        assert solution.metadata["mystnb"]["code_prompt_show"] == PROMPT_SHOW
    assert page.cells[folded[0] - 1].outputs[0]["text"].startswith("✅ ex02_1")
    # the chapter itself is untouched (the site works on a copy)
    assert sum(FOLD_TAG in c.metadata.get("tags", []) for c in nb.cells) == 0


def test_readme_student_path_starts_from_the_student_copies():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    path = readme[readme.index("## For students"):]
    path = path[: path.index("\n## ", 3)]
    commands = [line for line in path.splitlines() if line.startswith((".venv", "make "))]
    assert commands[0].startswith("make student") and "student/" in commands[1]
    # and it says why: the book's copies carry the solutions, the student copies stubs
    assert "Why:" in path and "NotImplementedError" in path and "solution" in path
