"""The adapter: how the grading tests find your answers. You fill this in; the tests never change.

The tests read, from this module, one name per exercise (``naive_utilization``,
``gpipe_order``, ``M_FOR_10_PERCENT`` ...; the list is in
``pipemare_lite/exercises/registry.py``). Two ways to provide them:

1. Load them from your notebooks (the default below): put this file next to your completed
   chapter notebooks (``NN_name.ipynb``), or set ``NOTEBOOK_DIR`` to their folder. Only the
   cells that define the answers run, with the imports they use and the cells that hold
   nothing but definitions (put a helper function there, or in the exercise's own cell).
2. Or paste your functions and constants at the end of this file; they take precedence.

Then the instructor runs ``make grade STUDENT=path/to/this/adapter.py``.

Left in ``tests/grading/`` (beside ``test_grading.py``) this file reads the book's own
chapters, which hold the reference solutions: the suite without ``--student`` is a self-test.
"""

from __future__ import annotations

from pathlib import Path

from pipemare_lite.exercises import list_exercises, load_from_notebook

#: The folder with the chapter notebooks to grade: by default, the folder of this file.
NOTEBOOK_DIR = Path(__file__).resolve().parent
if (NOTEBOOK_DIR / "test_grading.py").is_file():  # the template itself: a self-test
    NOTEBOOK_DIR = NOTEBOOK_DIR.parents[1] / "chapters"

for _notebook in sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb")):
    _names = [exercise.function_name for exercise in list_exercises(int(_notebook.name[:2]))]
    if _names:
        globals().update(load_from_notebook(_notebook, _names))

# 2. Paste your answers here instead, e.g.
#
# def gpipe_order(P, M):
#     ...
#
# M_FOR_10_PERCENT = ...
