"""Solutions one deliberate step away: collapsed in Jupyter, folded on the site (issue 45;
the reader meets it in chapter 00, whose demo exercise is the first folded solution).

A chapter's exercise cell holds the statement's function, its solution between
``### BEGIN SOLUTION`` and ``### END SOLUTION``, and the ``check(...)`` call. Shown as they
are, the solution sits right under the statement, and a reader who meant to try first reads
it anyway. So:

- in the committed notebooks every solution cell carries ``{"jupyter": {"source_hidden":
  true}}``, the cell metadata with which JupyterLab and Notebook 7 open a cell with its
  source collapsed (a click on the bar shows it); its output, the check's verdict, stays
  visible. ``notebooks clean`` sets it (:func:`collapse_solutions`);
- the student copies (``make student``) have stubs there instead, shown open
  (:func:`expand_solution`);
- on the book site (:func:`fold_for_site`) the cell becomes two: the ``check(...)`` call
  with its verdict first, then the solution folded under "Solution: try it first (click
  to show)" (myst-nb's ``hide-input``: a native ``<details>``, no script needed).

Torch-free, and imports nothing of the exercises package (the site and the clean tool
use it).
"""

from __future__ import annotations

import copy

import nbformat

BEGIN_MARKER = "### BEGIN SOLUTION"
END_MARKER = "### END SOLUTION"
#: What the folded solution's bar says on the site, closed and open.
PROMPT_SHOW = "Solution: try it first (click to show)"
PROMPT_HIDE = "Hide the solution"
#: The myst-nb tag that folds a cell's source on the site.
FOLD_TAG = "hide-input"


def is_solution_cell(cell) -> bool:
    """True for a code cell with a solution region."""
    return cell.get("cell_type") == "code" and BEGIN_MARKER in cell.get("source", "")


def is_collapsed(cell) -> bool:
    """True when Jupyter opens ``cell`` with its source collapsed."""
    return bool(cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"))


def collapse_solutions(nb) -> int:
    """Mark every solution cell of ``nb`` to open collapsed in Jupyter; in place.

    Returns how many cells were changed (0 when all were already collapsed).
    """
    changed = 0
    for cell in nb.cells:
        if is_solution_cell(cell) and not is_collapsed(cell):
            cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
            changed += 1
    return changed


def expand_solution(cell) -> None:
    """Drop the collapsed mark from ``cell`` (a student's stub must be seen); in place."""
    jupyter = cell.get("metadata", {}).get("jupyter")
    if isinstance(jupyter, dict):
        jupyter.pop("source_hidden", None)
        if not jupyter:
            cell.metadata.pop("jupyter")


def split_check(source: str) -> tuple[str, str]:
    """``(solution, check)``: the cell's source up to, and from, its first top-level
    ``check(`` line after the last end marker (``check`` is ``""`` when there is none)."""
    lines = source.splitlines()
    end = max((i for i, line in enumerate(lines) if line.strip() == END_MARKER), default=-1)
    for i in range(end + 1, len(lines)):
        if lines[i].startswith("check("):
            return "\n".join(lines[:i]).rstrip(), "\n".join(lines[i:]).strip()
    return source, ""


def fold_for_site(nb) -> int:
    """On a copy for the site: each solution cell becomes its ``check`` call (with the
    cell's outputs, so the verdict shows) followed by the solution, folded; in place.

    Returns the number of solutions folded.
    """
    cells, folded = [], 0
    for cell in nb.cells:
        if not is_solution_cell(cell):
            cells.append(cell)
            continue
        solution, check = split_check(cell.source)
        if check:
            check_cell = nbformat.v4.new_code_cell(check)
            check_cell.outputs = cell.get("outputs", [])
            check_cell.execution_count = cell.get("execution_count")
            cells.append(check_cell)
            cell = copy.deepcopy(cell)
            cell.source, cell.outputs, cell.execution_count = solution, [], None
        tags = cell.metadata.setdefault("tags", [])
        if FOLD_TAG not in tags:
            tags.append(FOLD_TAG)
        cell.metadata["mystnb"] = {"code_prompt_show": PROMPT_SHOW,
                                   "code_prompt_hide": PROMPT_HIDE}
        cells.append(cell)
        folded += 1
    nb.cells = cells
    return folded
