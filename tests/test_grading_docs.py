"""docs/instructors.md, held to what the grader does (issue 46, item 6).

Before: the docs said ``ex00_1``, ``ex04_3`` and ``ex05_1`` draw nothing at random (they do
now), and the nbgrader recipe mixed ``.venv/bin/python -m ...`` with a bare ``nbgrader``,
which failed with ``FileNotFoundError: 'alembic'`` unless ``.venv/bin`` was on PATH. Now the
recipe activates the venv first and runs here as written (the lines from ``source`` to
``nbgrader export``, with the one collecting step filled in).
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipemare_lite.book.exercises import list_exercises
from pipemare_lite.book.exercises.hidden import drawn_at_random

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "instructors.md"


def test_the_docs_say_every_function_exercise_draws_at_random():
    text = re.sub(r"\s+", " ", DOCS.read_text())
    assert "draw nothing at random" not in text
    assert "Every function exercise draws some of its cases at random" in text
    assert all(drawn_at_random(e) for e in list_exercises() if e.kind == "function")
    assert "salted afresh for every grading run and every student" in text


def _nbgrader_recipe() -> list[str]:
    """The lines of the docs' nbgrader recipe, from ``source`` to ``cd ..``."""
    blocks = re.findall(r"```bash\n(.*?)```", DOCS.read_text(), flags=re.S)
    (block,) = [b for b in blocks if "nbgrader generate_assignment" in b]
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("source .venv/bin/activate"))
    end = next(i for i, line in enumerate(lines) if line.strip() == "cd ..")
    return lines[start:end + 1]


def test_the_nbgrader_recipe_activates_the_venv_and_calls_tools_bare():
    recipe = _nbgrader_recipe()
    assert recipe[0].startswith("source .venv/bin/activate")
    commands = [line for line in recipe if line.strip() and not line.startswith("#")]
    assert not any(".venv/bin/python" in line for line in commands[1:]), commands
    assert any(line.startswith("python -m pipemare_lite assign student --format nbgrader")
               for line in commands)


@pytest.mark.slow
def test_the_nbgrader_recipe_runs_as_written(tmp_path):
    """The recipe in a bash shell, in a folder standing for the repository's root (its
    ``chapters`` and, as ``.venv``, this interpreter's venv linked in); the collecting step
    copies the released notebook as one student's submission. It ends with nbgrader's
    grades.csv holding that student."""
    pytest.importorskip("nbgrader")
    if shutil.which("bash") is None or not (Path(sys.prefix) / "bin" / "activate").exists():
        pytest.skip("needs bash and a virtual environment with bin/activate")
    (tmp_path / ".venv").symlink_to(sys.prefix)  # the recipe runs at the repository's root:
    (tmp_path / "chapters").symlink_to(ROOT / "chapters")  # what of it the recipe reads
    assignment = "04_interleaving_and_zero_bubble"
    collect = (f"mkdir -p submitted/alice/{assignment} && cp release/{assignment}/{assignment}"
               f".ipynb submitted/alice/{assignment}/")
    script = "\n".join(
        collect if line.startswith("# ... collect") else line for line in _nbgrader_recipe()
    )
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = "/usr/bin:/bin"  # nothing of the venv on PATH but what `source` puts there
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    rows = list(csv.DictReader((tmp_path / "course" / "grades.csv").open()))
    assert [r["student_id"] for r in rows] == ["alice"], rows
