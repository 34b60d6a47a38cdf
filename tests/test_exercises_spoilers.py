"""Issue 30, "Exercises": an exercise rewritten so that the student derives or predicts
before the book shows the answer. For each, the text a student has read when they reach the
exercise's code cell (every cell above it) must not state the answer. Before, chapter 12
said "in s updates the last step is repeated mu + mu**2 + ... + mu**s times" just above
ex12_1, whose answer is that sum (this test failed on that text).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: exercise id -> patterns of its answer that must not appear above its code cell
SPOILERS = {
    # 1F1B's peak per stage (the builder's docstring, shown by show_source above the exercise,
    # stated it; chapter 03's closed form is peak_inflight_1f1b)
    "ex03_2": [r"min\(\s*P\s*-\s*s\s*,\s*M\s*\)", r"at most \**\s*P\s*-\s*s\b",
               r"peak_inflight_1f1b"],
    # PipeDream's delay, whose worst case is the count of copies (chapter 05 derived it, and
    # printed the engine's count, above the exercise)
    "ex05_3": [r"ceil\(\(\s*P\s*-\s*1\s*-\s*s", r"ceil\(\(\s*w\s*-\s*j\s*\)",
               r"peak_stash_copies\(", r"expected_forward_delay\(\s*builder"],
    # T1's formula (chapter 08 printed it twice above the exercise, which transcribed it)
    "ex08_1": [r"min\(\s*k\s*/\s*K", r"p_k\s*=", r"1\s*[−-]\s*k\s*/\s*K", r"τ_?i?\^\(−p_k\)",
               r"rescheduling_(factor|exponent)"],
    # T2's two formulas (chapter 09 printed them just above the exercise, and its sources box
    # and picture text gave the backward's)
    "ex09_1": [r"\\delta_\{k\+1\}", r"\(1\s*-\s*\\gamma\)", r"\\hat w\s*=",
               r"w\s*[−-]\s*\(?(d|τ_F)[^\n]{0,12}(δ|\\delta)", r"minus d\s*·\s*δ",
               r"gamma\s*\*\s*d\s*\+\s*\(1\s*-\s*gamma\)"],
    # PipeDream's copies, and the executor's bytes for the exercise's first case (chapter 10
    # printed both above the exercise)
    "ex10_1": [r"⌈\(P\s*−\s*1\s*−\s*s\)\s*/\s*N⌉", r"ceil\(\(\s*P\s*-\s*1\s*-\s*s\)",
               r"stash_formula", r"for stage in [\w.]*peak_bytes"],
    "ex12_1": [r"mu\s*\+\s*mu\s*\*\*\s*2", r"mu\s*\+\s*\.\.\.\s*\+\s*mu", r"sum\(\s*mu",
               r"\(1\s*-\s*mu\s*\*\*\s*s\)"],
}


def _cells_around(exercise_id: str) -> tuple[list[str], str, list[str]]:
    """The sources of the cells above the exercise's code cell, that cell's, and those below."""
    chapter = int(exercise_id[2:4])
    (path,) = (ROOT / "chapters").glob(f"{chapter:02d}_*.ipynb")
    cells = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]
    for index, source in enumerate(cells):
        if f'check("{exercise_id}"' in source and "### BEGIN SOLUTION" in source:
            return cells[:index], source, cells[index + 1:]
    raise AssertionError(f"{exercise_id}: no check cell in {path.name}")


def shown_sources(sources: list[str]) -> str:
    """What the ``show_source(name)`` calls among these cells print: each named object's
    source, docstring included, found through the cells' own ``from module import name``."""
    imported: dict[str, tuple[str, str]] = {}
    for source in sources:
        try:
            tree = ast.parse(re.sub(r"^[%!].*$", "", source, flags=re.M))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    imported[alias.asname or alias.name] = (node.module, alias.name)
    shown = []
    for source in sources:
        for name in re.findall(r"show_source\(\s*([A-Za-z_]\w*)", source):
            if name in imported:
                module, attribute = imported[name]
                shown.append(inspect.getsource(
                    getattr(importlib.import_module(module), attribute)))
    return "\n".join(shown)


def _text_above(exercise_id: str) -> tuple[str, str]:
    """The text of every cell above the exercise's code cell with the sources those cells
    show (``show_source``), and that cell's own text before the solution markers (its def
    line)."""
    above, cell, _below = _cells_around(exercise_id)
    return ("\n".join(above) + "\n" + shown_sources(above),
            cell.split("### BEGIN SOLUTION")[0])


@pytest.mark.parametrize("exercise_id", sorted(SPOILERS))
def test_the_answer_is_not_on_screen_before_the_exercise(exercise_id):
    above, stub = _text_above(exercise_id)
    for pattern in SPOILERS[exercise_id]:
        assert not re.search(pattern, above + stub), (exercise_id, pattern)


def test_ex12_1_asks_for_a_prediction_first():
    above, _stub = _text_above("ex12_1")
    statement = above.split("**Exercise 1**")[-1]
    assert "predict" in statement.lower() and "look_ahead_factor" in statement


#: Rewritten with the ones above: the statement asks for a prediction before the function,
#: and the book shows the answer after the exercise (the reveal), not nowhere.
PREDICT_THEN_REVEAL = ("ex05_3", "ex08_1", "ex09_1", "ex10_1")


@pytest.mark.parametrize("exercise_id", PREDICT_THEN_REVEAL)
def test_the_statement_asks_for_a_prediction_and_the_answer_follows(exercise_id):
    above, _cell, below = _cells_around(exercise_id)
    statement = above[-1]
    assert "predict" in statement.lower(), exercise_id
    revealed = [pattern for pattern in SPOILERS[exercise_id]
                if re.search(pattern, "\n".join(below))]
    assert revealed, f"{exercise_id}: the book never shows the answer after the exercise"
