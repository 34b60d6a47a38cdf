"""Your adapter: pre-grade your notebooks on your own machine, as the instructor will.

Keep this file next to your chapter notebooks (``NN_name.ipynb``) and run::

    python adapter.py                 # every exercise of the notebooks here
    python adapter.py ex02_1 ex02_2   # some exercises

It grades the notebooks in this folder as the instructor's grader does (the same code from
``pipemare_lite``, in a separate process, on every case of ``check()``; the instructor's
grader runs the same fixed cases and redraws the random ones, so an answer that computes
rather than remembers scores the same) and prints your points and the feedback per exercise.
Only the cells that define your answers run, with the
imports and the helper functions they use; put a helper in its own cell or next to the
answer. Changing this file changes nothing in your grade: the grader never runs the copy
handed in with your notebooks, only the notebooks.

Importing this file (``import adapter``) gives your answers as module attributes, loaded
the same way (handy for trying them in a console). Left in ``tests/grading/`` of the book's
repository it reads the book's own chapters, which hold the reference solutions.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pipemare_lite.book.exercises import list_exercises, load_from_notebook

#: The folder with the chapter notebooks: by default, the folder of this file.
NOTEBOOK_DIR = Path(__file__).resolve().parent
if (NOTEBOOK_DIR / "test_grading.py").is_file():  # the template itself: the book's chapters
    NOTEBOOK_DIR = NOTEBOOK_DIR.parents[1] / "chapters"


def _load_answers() -> dict:
    answers = {}
    for notebook in sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb")):
        names = [exercise.function_name for exercise in list_exercises(int(notebook.name[:2]))]
        if names:
            answers.update(load_from_notebook(notebook, names))
    return answers


def main(argv: list[str]) -> int:
    """Pre-grade the notebooks in :data:`NOTEBOOK_DIR`; 0 when every exercise passed."""
    from pipemare_lite.book.exercises.grading import grade_submission, submission_notebooks

    chapters = set(submission_notebooks(NOTEBOOK_DIR))
    chosen = argv or [e.id for e in list_exercises() if e.chapter in chapters]
    # your own notebooks on your own machine: no jail needed, and check()'s own cases (the
    # instructor's grader draws its random cases anew from a secret you do not have)
    report = grade_submission(NOTEBOOK_DIR, chosen, sandboxed=False, hidden_cases=False)
    print(report.to_markdown())
    return 0 if report.points == report.max_points else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
else:
    globals().update(_load_answers())
