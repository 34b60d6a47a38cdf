"""Issue 46, the open results of the independent hostile pass: odd answers and odd folders.

Each test says what the submission did before (main at 048a9a6, re-run there) and asserts
what it does now: a clear grade and a message, never a crash, a silent choice or a student
missing from the CSV. The jail is bubblewrap; without it the graded tests skip loudly
(``tests/sandbox_required.py``).
"""

from __future__ import annotations

import csv
import math

import numpy as np

from pipemare_lite.book.exercises.grading import (
    class_submissions,
    grade_class,
    grade_submission,
    write_reports,
)
from pipemare_lite.book.exercises.loader import _python_source, load_from_notebook
from pipemare_lite.book.exercises.plain import from_plain, to_plain
from tests.notebook_files import write_notebook
from tests.sandbox_required import _sandbox_or_fail, requires_sandbox  # noqa: F401

HONEST_01_2 = ("def naive_utilization(stage_costs):\n"
               "    return [c / sum(stage_costs) for c in stage_costs]\n")
#: Generous limits: these tests grade while the machine may be busy.
SLOW = {"timeout": 300, "budget": 900}


@requires_sandbox
def test_a_numpy_nan_answer_is_a_wrong_answer_not_a_crash(tmp_path):
    """Before: numpy's NaN (``np.float64('nan')``, whose repr is ``np.float64(nan)``) was
    sent tagged with that repr, which the grader refused: "crashed: the worker's report
    could not be read" (re-run at 048a9a6, ex01_2 and ex02_2). Now it travels as a float
    NaN and is judged: failed, with the feedback's "it is NaN"."""
    folder = write_notebook(
        tmp_path / "nan" / "01_naive.ipynb",
        "import numpy as np\ndef naive_utilization(stage_costs):\n"
        "    return [np.float64('nan')] * len(stage_costs)\n").parent
    write_notebook(folder / "02_gpipe.ipynb",
                   "import numpy as np\ndef idle_fraction(P, M):\n    return np.float64('-inf')\n")
    report = grade_submission(folder, ["ex01_2", "ex02_2"], **SLOW)
    for grade in report.grades:
        assert grade.status == "failed" and grade.points == 0, grade.message
        assert "could not be read" not in grade.message
    assert "NaN" in report.grades[0].message, report.grades[0].message


def test_numpy_floats_that_are_not_finite_round_trip():
    for value in (np.float64("nan"), np.float64("inf"), np.float32("-inf"), float("nan")):
        back = from_plain(to_plain(value))
        assert type(back) is float and (math.isnan(back) if math.isnan(value) else back == value)
    assert from_plain(to_plain([np.float64(0.5)])) == [0.5]


@requires_sandbox
def test_two_notebooks_of_one_chapter_are_refused_by_name(tmp_path):
    """Before: ``01_a.ipynb`` and ``01_b.ipynb`` in one folder: the grader graded the first
    by name and never said so (re-run at 048a9a6: ``01_a``'s wrong answer, 0 points, no
    word of ``01_b``). Now neither is graded, and the message names both."""
    folder = write_notebook(tmp_path / "twice" / "01_a.ipynb",
                            "def naive_utilization(stage_costs):\n    return []\n").parent
    write_notebook(folder / "01_b.ipynb", HONEST_01_2)
    write_notebook(folder / "02_gpipe.ipynb",
                   "def idle_fraction(P, M):\n    return (P - 1) / (M + P - 1)\n")
    report = grade_submission(folder, ["ex01_2", "ex02_2"], **SLOW)
    first, second = report.grades
    assert first.status == "missing" and first.points == 0
    assert "01_a.ipynb and 01_b.ipynb are both chapter 01's notebook" in first.message
    assert second.points == 1  # the other chapter is graded as usual
    assert any("01_a.ipynb and 01_b.ipynb" in w for w in report.warnings), report.warnings


@requires_sandbox
def test_a_folder_without_a_chapter_notebook_gets_a_csv_row_saying_so(tmp_path):
    """Before: a student folder whose notebook was misnamed (``naive.ipynb``) was not a
    submission: the student had no row in grades.csv and no report, silently (re-run at
    048a9a6: rows for ``alice`` only). Now every student folder is graded: ``bob`` gets a
    row of zeros with the note, and a report that says what the folder holds."""
    class_dir = tmp_path / "class"
    write_notebook(class_dir / "alice" / "01_naive.ipynb", HONEST_01_2)
    write_notebook(class_dir / "bob" / "naive.ipynb", HONEST_01_2)
    (class_dir / ".git").mkdir()
    assert [p.name for p in class_submissions(class_dir)] == ["alice", "bob"]
    reports = grade_class(class_dir, ["ex01_2"], **SLOW)
    written = write_reports(reports, tmp_path / "reports")
    rows = {r["student"]: r for r in csv.DictReader(written["grades.csv"].open())}
    assert rows["alice"]["total"] == "1" and rows["alice"]["note"] == ""
    assert rows["bob"]["total"] == "0"
    assert rows["bob"]["note"] == "no chapter notebook (NN_name.ipynb) in the folder"
    assert "naive\\.ipynb" in written["bob"].read_text()


#: An answer cell whose string literals hold characters that ``str.splitlines`` splits on
#: and Python does not; after the first, the rest of the line looks like a magic.
ODD_SEPARATORS = (
    'SEPARATORS = "a\x0b%b\x0c!c\x1cd\x1de\x1ef\x85g\u2028h\u2029i"\n'
    "def naive_utilization(stage_costs):\n"
    "    assert len(SEPARATORS) == 19\n"
    "    return [c / sum(stage_costs) for c in stage_costs]\n"
)


def test_the_loader_splits_lines_where_python_does(tmp_path):
    """Before: the loader cut a cell with ``str.splitlines``, which also splits on
    ``\\x0b``, ``\\x0c``, ``\\x1c``-``\\x1e``, ``\\x85``, ``\\u2028`` and ``\\u2029``: the
    string literal above was cut in two, ``%b"`` taken for a magic and the cell lost
    (re-run at 048a9a6: ``naive_utilization`` missing, a SyntaxError warning). Now only
    ``\\n`` ends a line, as for Python."""
    assert _python_source(ODD_SEPARATORS) == ODD_SEPARATORS
    assert _python_source("x = 1\n%time y = 2\n") == "x = 1\npass\n"
    path = write_notebook(tmp_path / "01_naive.ipynb", ODD_SEPARATORS)
    answer = load_from_notebook(path, ["naive_utilization"])["naive_utilization"]
    assert answer([1.0, 3.0]) == [0.25, 0.75]


@requires_sandbox
def test_an_answer_with_odd_separators_is_graded(tmp_path):
    folder = write_notebook(tmp_path / "odd" / "01_naive.ipynb", ODD_SEPARATORS).parent
    (grade,) = grade_submission(folder, ["ex01_2"], **SLOW).grades
    assert grade.points == 1, grade.message
