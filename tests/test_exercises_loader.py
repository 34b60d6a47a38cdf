"""load_from_notebook: a student's definitions from their notebook, without their plots."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from pipemare_lite.book.exercises import load_from_notebook, run_checks
from pipemare_lite.book.exercises.assign import student_notebook
from pipemare_lite.book.exercises.loader import NotebookLoadWarning

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "assign" / "02_exercise_fixture.ipynb"
NAMES = ["gpipe_order", "idle_fraction", "M_FOR_10_PERCENT", "stage_names"]


def test_loads_functions_constants_and_helpers_without_running_check_calls(capsys):
    answers = load_from_notebook(FIXTURE, NAMES)
    assert set(answers) == set(NAMES)
    assert answers["gpipe_order"](2, 1) == [["0F0", "0B0"], ["1F0", "1B0"]]
    assert answers["idle_fraction"](4, 4) == pytest.approx(3 / 7)
    assert answers["stage_names"](2) == ["stage 0", "stage 1"]
    # the constant cell computes its value with idle_fraction, defined in an earlier cell
    assert answers["M_FOR_10_PERCENT"] == min(
        m for m in range(1, 1000) if answers["idle_fraction"](8, m) < 0.1
    )
    assert capsys.readouterr().out == ""  # check(...) and print(...) were skipped


def test_student_copy_loads_as_not_attempted(tmp_path):
    path = tmp_path / FIXTURE.name
    nbformat.write(student_notebook(nbformat.read(FIXTURE, as_version=4), FIXTURE.name), path)
    answers = load_from_notebook(path, NAMES)
    assert answers["M_FOR_10_PERCENT"] is NotImplemented
    for exercise_id, name in [("ex02_1", "gpipe_order"), ("ex02_2", "idle_fraction")]:
        assert run_checks(exercise_id, answers[name]).status == "not attempted"


def test_missing_names_are_absent_and_a_broken_cell_warns(tmp_path):
    notebook = new_notebook()
    notebook.cells = [
        new_code_cell("import math\nimport module_nobody_has as unused\n%matplotlib inline"),
        new_code_cell("def naive_utilization(P):\n    return 1 / P\nraise RuntimeError('oops')"),
        new_code_cell("def naive_order(P:\n    pass"),  # a syntax error
        new_code_cell("def uses_math(x):\n    return math.sqrt(x)"),
    ]
    path = tmp_path / "01_student.ipynb"
    nbformat.write(notebook, path)
    with pytest.warns(NotebookLoadWarning) as caught:
        answers = load_from_notebook(path, ["naive_utilization", "naive_order", "uses_math"])
    messages = " ".join(str(w.message) for w in caught)
    assert "RuntimeError: oops" in messages and "SyntaxError" in messages
    assert "module_nobody_has" not in messages  # an import no answer uses is not run
    assert "naive_order" not in answers
    assert answers["naive_utilization"](4) == 0.25  # defined before the cell raised
    assert answers["uses_math"](9) == 3.0  # imports from other cells are available


def test_bad_arguments_are_reported():
    with pytest.raises(FileNotFoundError, match="no notebook"):
        load_from_notebook(FIXTURE.with_name("missing.ipynb"), ["x"])
    with pytest.raises(ValueError, match="identifiers"):
        load_from_notebook(FIXTURE, ["not a name"])


def test_a_helper_defined_in_a_cell_that_also_prints_is_found(tmp_path, capsys):
    # issue 18: the helper passed in the notebook, then grading failed with NameError
    notebook = new_notebook()
    notebook.cells = [
        new_code_cell("def bubble(P):\n    return P - 1\n\nprint('a helper, and a print')\n"
                      "SLOTS = 2\nunrelated = open('/nonexistent')  # must not run"),
        new_code_cell(
            "def idle_fraction(P, M):\n    return bubble(P) * SLOTS / (SLOTS * (M + bubble(P)))"
        ),
    ]
    path = tmp_path / "02_student.ipynb"
    nbformat.write(notebook, path)
    answers = load_from_notebook(path, ["idle_fraction"])
    assert run_checks("ex02_2", answers["idle_fraction"]).passed
    assert capsys.readouterr().out == ""  # the print (and the open) did not run
