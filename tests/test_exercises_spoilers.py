"""Issue 30, "Exercises": an exercise rewritten so that the student derives or predicts
before the book shows the answer. For each, the text a student has read when they reach the
exercise's code cell (every cell above it) must not state the answer. Before, chapter 12
said "in s updates the last step is repeated mu + mu**2 + ... + mu**s times" just above
ex12_1, whose answer is that sum (this test failed on that text).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: exercise id -> patterns of its answer that must not appear above its code cell
SPOILERS = {
    "ex12_1": [r"mu\s*\+\s*mu\s*\*\*\s*2", r"mu\s*\+\s*\.\.\.\s*\+\s*mu", r"sum\(\s*mu",
               r"\(1\s*-\s*mu\s*\*\*\s*s\)"],
}


def _text_above(exercise_id: str) -> tuple[str, str]:
    """The text of every cell above the exercise's code cell, and that cell's own text
    before the solution markers (its def line)."""
    chapter = int(exercise_id[2:4])
    (path,) = (ROOT / "chapters").glob(f"{chapter:02d}_*.ipynb")
    cells = json.loads(path.read_text())["cells"]
    for index, cell in enumerate(cells):
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and f'check("{exercise_id}"' in source:
            above = "\n".join("".join(c["source"]) for c in cells[:index])
            return above, source.split("### BEGIN SOLUTION")[0]
    raise AssertionError(f"{exercise_id}: no check cell in {path.name}")


@pytest.mark.parametrize("exercise_id", sorted(SPOILERS))
def test_the_answer_is_not_on_screen_before_the_exercise(exercise_id):
    above, stub = _text_above(exercise_id)
    for pattern in SPOILERS[exercise_id]:
        assert not re.search(pattern, above + stub), (exercise_id, pattern)


def test_ex12_1_asks_for_a_prediction_first():
    above, _stub = _text_above("ex12_1")
    statement = above.split("**Exercise 1**")[-1]
    assert "predict" in statement.lower() and "look_ahead_factor" in statement
