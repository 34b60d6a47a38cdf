"""Exercises are numbered in the order a reader meets them, in every chapter.

A chapter's ``check("exNN_k", ...)`` cells come in increasing k (1, 2, 3 ... with none
left out: the registry's exercises of that chapter, in the registry's order); an
``**Exercise k**`` (or ``### Exercise k``) header announces the next ``check`` cell, so it
carries that cell's k; the "Exercises" summary section names them in increasing order.
Chapter 01 once asked ex01_2 before ex01_1, and chapter 04 ex04_2 before ex04_1 (a fresh
student's report). ``test_exercises_order.py`` is the other ordering rule: no answer is
shown before its exercise.

Chapters are found by their file names, so a new chapter is covered without editing this
file.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from pipemare_lite.book.exercises import list_exercises

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))

CHECK = re.compile(r"""\bcheck\(\s*["'](ex(\d\d)_(\d+))["']""")
HEADER = re.compile(r"\*\*Exercise (\d+)\b|^#+ Exercise (\d+)\b", re.MULTILINE)
MENTION = re.compile(r"\b[Ee]xercises? (\d+)\b")


def exercise_events(notebook) -> list[tuple[int, str, str]]:
    """(cell index, "header" or "check", the header's k or the check's id) in reading order."""
    events = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "markdown":
            events += [(index, "header", m.group(1) or m.group(2))
                       for m in HEADER.finditer(cell.source)]
        elif cell.cell_type == "code":
            events += [(index, "check", m.group(1)) for m in CHECK.finditer(cell.source)]
    return events


def numbering_problems(notebook, chapter: int) -> list[str]:
    """What is out of order in one chapter's exercises ([] when nothing is)."""
    problems = []
    events = exercise_events(notebook)
    checked = []
    for _, kind, value in events:
        if kind == "check" and value not in checked:
            checked.append(value)
    expected = [e.id for e in list_exercises(chapter)]
    if checked != expected:
        problems.append(f"check() cells ask {checked}; the chapter's exercises in order are "
                        f"{expected}")
    pending = None  # the last header not yet followed by a check cell
    for index, kind, value in events:
        if kind == "header":
            pending = (index, value)
        elif pending is not None:
            header_index, k = pending
            if value != f"ex{chapter:02d}_{k}":
                problems.append(f"cell {header_index} says **Exercise {k}** but the next "
                                f"check cell (cell {index}) checks {value}")
            pending = None
    if pending is not None:
        problems.append(f"cell {pending[0]} says **Exercise {pending[1]}** and no check follows")
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "markdown" and cell.source.startswith("## Exercises"):
            named = [int(k) for k in MENTION.findall(cell.source)]
            if named != sorted(named):
                problems.append(f"the Exercises section (cell {index}) names exercises in the "
                                f"order {named}")
    return problems


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem[:2] for p in CHAPTERS])
def test_exercises_are_numbered_in_reading_order(path):
    notebook = nbformat.read(path, as_version=4)
    problems = numbering_problems(notebook, int(path.name[:2]))
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_the_rule_catches_swapped_exercises():
    # chapter 01 as it was: exercise 2 asked first, the summary naming 2, 1, 3
    cells = [
        nbformat.v4.new_markdown_cell("**Exercise 2** (before reading on). Write naive_order."),
        nbformat.v4.new_code_cell('check("ex01_2", naive_order)'),
        nbformat.v4.new_markdown_cell("**Exercise 1** (before reading on). Write ..."),
        nbformat.v4.new_code_cell('check("ex01_1", naive_utilization)'),
        nbformat.v4.new_markdown_cell("**Exercise 3**. Write naive_start_times."),
        nbformat.v4.new_code_cell('check("ex01_3", naive_start_times)'),
        nbformat.v4.new_markdown_cell("## Exercises\n\n(exercise 2, then exercise 1, then 3)"),
    ]
    problems = numbering_problems(nbformat.v4.new_notebook(cells=cells), 1)
    assert len(problems) == 2 and "check() cells ask" in problems[0], problems
    assert "order [2, 1]" in problems[1]
    # a header that does not match the cell it announces
    cells[0].source, cells[2].source = cells[2].source, cells[0].source
    problems = numbering_problems(nbformat.v4.new_notebook(cells=cells), 1)
    assert any("says **Exercise 1** but the next check cell (cell 1) checks ex01_2" in p
               for p in problems), problems
