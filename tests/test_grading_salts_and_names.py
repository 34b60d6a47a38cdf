"""Issue 46, items 5 and 6: cases salted per run and student; CSV cells and notebook names.

Before (main at 22858bf): the graded cases were a pure function of the instructor's secret
(the same for every student, every run, every term), a student folder named `` =1+1`` reached
the CSV as a formula, and ``01_x.ipynb\\n`` or ``٠١_x.ipynb`` (Arabic-Indic digits) counted as
chapter notebooks.
"""

from __future__ import annotations

import csv

from pipemare_lite.book.exercises import get_exercise, list_exercises
from pipemare_lite.book.exercises import grading as grading_module
from pipemare_lite.book.exercises.grading import (
    ExerciseGrade,
    SubmissionReport,
    csv_cell,
    submission_notebooks,
    write_reports,
)
from pipemare_lite.book.exercises.hidden import graded_cases
from tests.notebook_files import write_notebook

SECRET = b"the instructor's"


def _shape(cases: list[dict]) -> list[tuple]:
    """What a draw must keep: the number of cases, their keys and the types of the values."""
    return [tuple((k, type(v).__name__) for k, v in case.items()) for case in cases]


def test_salted_cases_differ_per_salt_and_keep_their_distribution():
    """Every function exercise: another salt draws other random cases (same fixed cases,
    same number, same keys and types); the same salt draws the same; no salt is the draw of
    before (so a stored grade can be re-derived)."""
    for exercise in list_exercises():
        if exercise.kind != "function":
            continue
        one = graded_cases(exercise, SECRET, b"run 1\0alice")
        again = graded_cases(exercise, SECRET, b"run 1\0alice")
        other = [graded_cases(exercise, SECRET, b"run %d\0bob" % k) for k in range(2, 6)]
        assert repr(one) == repr(again), exercise.id
        assert any(repr(o) != repr(one) for o in other), exercise.id
        assert all(_shape(o) == _shape(one) for o in other), exercise.id
        unsalted = graded_cases(exercise, SECRET)
        assert _shape(unsalted) == _shape(one) and repr(unsalted) != repr(one), exercise.id


def test_salted_draws_stay_in_the_unsalted_range():
    """Same distributions: over many salts, ex02_2's drawn P and M stay within what its
    generator can draw (the range of 200 draws of the unsalted generator with other secrets)."""
    exercise = get_exercise("ex02_2")
    salted = [c for k in range(50) for c in graded_cases(exercise, SECRET, b"%d" % k)]
    unsalted = [c for k in range(200) for c in graded_cases(exercise, b"%d" % k)]
    for key in ("P", "M"):
        low, high = min(c[key] for c in unsalted), max(c[key] for c in unsalted)
        assert all(low <= c[key] <= high for c in salted), key


def test_grade_class_salts_every_student_and_every_run(tmp_path, monkeypatch):
    """Each student of a run gets the run's salt and their name; another run another salt."""
    for name in ("alice", "bob"):
        write_notebook(tmp_path / "class" / name / "01_naive.ipynb", "x = 1\n")
    seen = []

    def fake(path, chosen, *, salt, **options):
        seen.append((path.name, salt))
        return SubmissionReport(path.name, path, [], [])

    monkeypatch.setattr(grading_module, "grade_submission", fake)
    grading_module.grade_class(tmp_path / "class", ["ex01_2"], sandboxed=False)
    grading_module.grade_class(tmp_path / "class", ["ex01_2"], sandboxed=False)
    salts = [salt for _, salt in seen]
    assert len(set(salts)) == 4, seen
    assert salts[0].endswith(b"\0alice") and salts[1].endswith(b"\0bob")
    assert salts[0][:-6] == salts[1][:-4]  # one run, one run salt


def test_csv_cells_starting_like_a_formula_after_whitespace_are_escaped(tmp_path):
    """Before: `` =1+1`` (a leading space) reached the CSV as it was, and a spreadsheet
    computes it. Now any cell that starts like a formula after leading whitespace gets a
    ``'``."""
    for text in (" =1+1", "\t=1+1", "  +1", "\u00a0@SUM(A1)", " -2", "=1", "\n=HYPERLINK(1)"):
        assert str(csv_cell(text)).startswith("'"), text
    assert csv_cell("alice") == "alice" and csv_cell(" bob") == " bob" and csv_cell(3) == 3
    grade = ExerciseGrade("ex01_2", "Exercise 1.2", "passed", 1, 1, 7, 7, "ok")
    report = SubmissionReport(" =1+1", tmp_path, [grade], [])
    written = write_reports([report], tmp_path / "out")
    for name in ("grades.csv", "grades_detail.csv"):
        rows = list(csv.reader(written[name].open()))
        assert rows[1][0] == "' =1+1", rows


def test_notebook_names_are_two_ascii_digits_and_nothing_after(tmp_path):
    """Before: ``$`` matched before a trailing newline and ``\\d`` took any Unicode digit, so
    ``01_x.ipynb\\n`` and ``٠٢_x.ipynb`` were chapter notebooks. Now ``[0-9][0-9]`` and
    ``\\Z``, ASCII only."""
    folder = tmp_path / "names"
    folder.mkdir()
    for name in ("01_x.ipynb\n", "\u0660\u0662_x.ipynb", "03_x.ipynb.bak", "04_\u00e9.ipynb",
                 "\uff10\uff15_x.ipynb", "06_ok.ipynb"):
        (folder / name).write_text("{}")
    assert {k: p.name for k, p in submission_notebooks(folder).items()} == {6: "06_ok.ipynb"}
    found, _refused = grading_module.read_submission(folder)
    assert sorted(found) == [6]
