"""The handout folder works on its own: notebooks, adapter, README, linked engine files."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from pipemare_lite.book.exercises import list_exercises
from pipemare_lite.book.exercises.assign import build_student

ROOT = Path(__file__).resolve().parents[1]
ADAPTER = ROOT / "pipemare_lite" / "book" / "exercises" / "student_adapter.py"


def test_handout_has_adapter_readme_and_every_linked_file(tmp_path):
    written = build_student(ROOT / "chapters", tmp_path)
    assert (tmp_path / "adapter.py").read_text() == ADAPTER.read_text()
    readme = (tmp_path / "README.md").read_text()
    assert "python adapter.py" in readme and "hand in" in readme.lower()
    for exercise in list_exercises():
        if any(p.name.startswith(f"{exercise.chapter:02d}_") for p in written):
            assert f"`{exercise.signature}` | {exercise.points} |" in readme
    for path in written:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "markdown":
                continue
            assert "](../" not in cell.source, (path.name, cell.source)
            for target in re.findall(r"\]\((engine_source/[^)#\s]+)", cell.source):
                assert (tmp_path / target).is_file(), target
    assert not (tmp_path / "pipemare_lite").exists()  # would shadow the installed package


def test_the_grading_template_is_the_students_adapter():
    # tests/grading/adapter.py is what the repository documents: a link to the one copy the
    # package ships, so the two can never drift
    template = ROOT / "tests" / "grading" / "adapter.py"
    assert template.is_symlink() and template.resolve() == ADAPTER.resolve()


def test_adapter_pre_grades_the_notebooks_next_to_it(tmp_path):
    (student,) = build_student(ROOT / "chapters", tmp_path, ["01"])
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    run = [sys.executable, "adapter.py"]
    done = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    maximum = sum(e.points for e in list_exercises(1))
    assert done.returncode == 1 and f"0 / {maximum} points" in done.stdout, done.stderr
    assert "not attempted" in done.stdout
    shutil.copyfile(ROOT / "chapters" / student.name, student)  # as if solved
    done = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and f"{maximum} / {maximum} points" in done.stdout, done.stdout


def test_the_handout_ships_no_engine_file_that_answers_an_exercise(tmp_path):
    """Issue 31: the handout's engine_source/ held formulas.py, whose one-line functions
    answered ex02_2, ex04_2 and ex12_1, and simulate.py with ex04_3's logic. Now a file that
    defines any exercise's engine answer is left out; its links point to LEFT_OUT.md."""
    from pipemare_lite.book.exercises.handout import answering_files

    package = ROOT / "pipemare_lite"
    left_out = answering_files(package)
    assert "pipemare_lite/analysis/formulas.py" in left_out
    answered = {e for ids in left_out.values() for e in ids}
    assert {"ex02_2", "ex04_2", "ex12_1", "ex04_3"} <= answered
    assert "ex04_3" in left_out["pipemare_lite/analysis/simulate.py"]
    build_student(ROOT / "chapters", tmp_path)
    shipped = {str(p.relative_to(tmp_path / "engine_source")) for p in
               (tmp_path / "engine_source").rglob("*.py")}
    assert not shipped & set(left_out), shipped & set(left_out)
    for exercise in list_exercises():
        for name in exercise.engine_answers:
            function = name.rsplit(".", 1)[1]
            for path in (tmp_path / "engine_source").rglob("*.py"):
                assert f"\ndef {function}(" not in path.read_text(), (exercise.id, path)
    note = (tmp_path / "engine_source" / "LEFT_OUT.md").read_text()
    assert "formulas.py" in note
