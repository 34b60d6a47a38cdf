"""The handout folder around the student copies: adapter, README, linked engine files.

:func:`write_handout` completes what ``assign student`` writes (for instructors:
docs/instructors.md) so that the folder works on its own, outside the
book's repository:

- ``adapter.py``: the students' pre-grade script (a copy of
  :mod:`pipemare_lite.book.exercises.student_adapter`): ``python adapter.py`` grades the
  notebooks next to it exactly as the instructor's grader does;
- ``README.md``: what is in the folder, how to work, pre-grade and hand in, and the
  exercises with their points;
- ``engine_source/pipemare_lite/...``: the engine files the chapters link to, copied from
  the installed package (the same version the notebooks import), with the notebooks'
  ``../pipemare_lite/...`` links rewritten to point there. (Not ``pipemare_lite/`` itself:
  a folder of that name next to the notebooks would shadow the installed package.) A file
  that defines an engine function answering an exercise (``Exercise.engine_answers``, of
  any chapter) is left out (issue 31: ``formulas.py`` answered ex02_2, ex04_2 and ex12_1 in
  one line each, ``simulate.py`` held ex04_3's logic); its links point to
  ``engine_source/LEFT_OUT.md``, which lists them. (Students who have the package can still
  open its files; the handout just does not hand them the answers.)

Torch-free.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat

import pipemare_lite
from pipemare_lite.book.exercises.registry import list_exercises

#: Where the linked engine files go inside the handout.
ENGINE_SOURCE = "engine_source"
_LINK_RE = re.compile(r"\]\(\.\./(pipemare_lite/[^)\s#]+)(#[^)\s]*)?\)")

README = """# Pipeline-parallel training: your exercises

This folder is your copy of the book's chapters with every exercise left for you.

- `NN_name.ipynb`: the chapters. Each exercise is a cell with
  `raise NotImplementedError` where your code goes, followed by `check(...)`.
- `adapter.py`: pre-grades your notebooks exactly as your instructor's grader will.
- `engine_source/`: the files of the book's engine (`pipemare_lite`) that the chapters link
  to, the same version as the one you have installed.

## Before you start

The notebooks import the engine, the Python package `pipemare_lite` (version {version}),
which also runs the checks. Install it as your instructor tells you, then check:

```bash
python -c "import pipemare_lite; print(pipemare_lite.__version__)"
jupyter lab          # in this folder
```

Everything runs on a laptop CPU; each chapter takes well under a minute.

## Working on an exercise

1. Replace `raise NotImplementedError(...)` with your code and run the cell.
2. `check(...)` answers ✅ (every case passed), ❌ (a failing input, what your function
   returned, too high or too low for a number, how many cases passed, the name of a common
   mistake when yours is one, and a first hint; never the expected value) or ⏳ (not
   attempted). Stuck? `hint("ex07_2", 2)` (`from pipemare_lite.book.exercises import hint`)
   shows the next hint; the last one spells out the whole method in words.
3. Each exercise comes *before* the engine's own version of the same thing. Write the
   computation yourself: an answer that calls the engine function that computes it (or
   the simulator, where the exercise asks you to predict what it measures) is rejected,
   by `check` and by the grader.

Grading runs only the cells that define your answers, with the imports and the helper
functions they use (from any cell); it does not run plots or the rest of a chapter. So an
answer must not depend on a variable computed in another cell: pass it as an argument or
compute it inside the function.

## Pre-grade, then hand in

```bash
python adapter.py                  # every exercise of the notebooks in this folder
python adapter.py ex02_1 ex02_3    # some of them
```

It prints your points and the feedback per exercise: what your instructor will see. Hand
in your notebooks (`NN_name.ipynb`, keep the names). `adapter.py` is not needed: the grader
never runs the copy you hand in, and changing it changes nothing in your grade.

## The exercises

| exercise | you write | points |
| --- | --- | --- |
{table}
"""


#: Where the links to left-out engine files point.
LEFT_OUT = "LEFT_OUT.md"


def answering_files(package: Path) -> dict[str, list[str]]:
    """``"pipemare_lite/analysis/formulas.py" -> [exercise ids]``: the engine files that
    define a function answering an exercise (found on disk, nothing imported)."""
    found: dict[str, list[str]] = {}
    for exercise in list_exercises():
        for name in exercise.engine_answers:
            parts = name.split(".")
            for cut in range(len(parts), 0, -1):
                relative = "/".join(parts[:cut]) + ".py"
                if (package.parent / relative).is_file():
                    ids = found.setdefault(relative, [])
                    if exercise.id not in ids:
                        ids.append(exercise.id)
                    break
    return found


def _rewrite_links(notebook, left_out: dict[str, list[str]] | None = None) -> set[str]:
    """Point ``../pipemare_lite/...`` links at the copies (or, for a file in ``left_out``,
    at the note saying why it is not there); return the files copied."""
    linked: set[str] = set()
    left_out = left_out or {}
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue

        def swap(match: re.Match) -> str:
            if match.group(1) in left_out:
                return f"]({ENGINE_SOURCE}/{LEFT_OUT})"
            linked.add(match.group(1))
            return f"]({ENGINE_SOURCE}/{match.group(1)}{match.group(2) or ''})"

        cell.source = _LINK_RE.sub(swap, cell.source)
    return linked


def write_handout(out_dir: str | Path, notebooks: list[Path]) -> list[Path]:
    """Add adapter, README and linked engine files to ``out_dir``; rewrite the links of
    ``notebooks`` (student copies already in ``out_dir``). Returns the files written.

    Raises:
        FileNotFoundError: a notebook links to an engine file that the installed package
            does not have (the link would be broken).
    """
    out_dir = Path(out_dir)
    package = Path(pipemare_lite.__file__).resolve().parent
    written: list[Path] = []
    linked: set[str] = set()
    left_out = answering_files(package)
    for path in notebooks:
        notebook = nbformat.read(path, as_version=4)
        linked |= _rewrite_links(notebook, left_out)
        nbformat.write(notebook, path)
    note = out_dir / ENGINE_SOURCE / LEFT_OUT
    note.parent.mkdir(parents=True, exist_ok=True)
    note.write_text(
        "# Engine files left out of this handout\n\n"
        "These files of `pipemare_lite` define functions that answer exercises, so they are "
        "not in this folder (the chapters show them after the exercises):\n\n"
        + "".join(f"- `{f}` (answers {', '.join(ids)})\n" for f, ids in sorted(left_out.items()))
    )
    written.append(note)
    for relative in sorted(linked):
        source = package.parent / relative
        if not source.is_file():
            raise FileNotFoundError(f"a chapter links to {relative}, which is not in {package}")
        target = out_dir / ENGINE_SOURCE / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        written.append(target)
    adapter = out_dir / "adapter.py"
    shutil.copyfile(package / "book" / "exercises" / "student_adapter.py", adapter)
    written.append(adapter)
    chapters = {int(p.name[:2]) for p in notebooks if p.name[:2].isdigit()}
    rows = [
        f"| {e.label} (`{e.id}`) | `{e.signature}` | {e.points} |"
        for e in list_exercises()
        if e.chapter in chapters
    ]
    readme = out_dir / "README.md"
    readme.write_text(README.format(version=pipemare_lite.__version__, table="\n".join(rows)))
    written.append(readme)
    return written
