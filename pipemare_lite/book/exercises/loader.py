"""Load a student's exercise answers from their notebook, without running the notebook.

Grading (``tests/grading``) needs the student's functions, not their plots. So
:func:`load_from_notebook` reads the ``.ipynb`` and executes, in order, in one fresh
namespace:

1. the top-level ``import`` statements, of any code cell, that bind a name the code below
   uses (so a chapter's ``import torch`` costs nothing when no answer needs torch);
2. the definitions the answers need: a top-level ``def`` or ``class``, or an assignment of
   a literal constant, from any cell, when an answer (or a definition it needs, and so on)
   uses its name. A helper defined in a cell that also prints or plots is found too; the
   rest of that cell does not run;
3. every cell that defines one of the requested names at top level, minus its bare
   expressions.

Bare expressions at the top level (``check(...)``, ``print(...)``, a value to display) are
skipped: they bind nothing; so are the cells' own imports (step 1 runs the ones needed).
IPython magics (``%time``, ``!pip``) are skipped too. A cell that raises is reported with
:func:`warnings.warn` and loading goes on, so one broken exercise costs one exercise.
Introduced in chapter 00 ("For instructors"); grading runs it in a separate process
(:mod:`pipemare_lite.book.exercises.worker`). Torch-free (the student's own imports may import
torch).
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterable
from pathlib import Path


class NotebookLoadWarning(UserWarning):
    """A cell of a student's notebook failed while loading their definitions."""


def _python_source(cell_source: str) -> str:
    """The cell without IPython magics and shell escapes (line numbers kept)."""
    if cell_source.lstrip().startswith("%%"):
        return ""  # a cell magic: the whole cell is not Python
    lines = []
    # "\n" only: str.splitlines also splits on \x0b, \x0c, \x1c-\x1e, \x85, \u2028 and
    # \u2029, which Python's own parser leaves inside a line (a string literal holding one
    # was cut in two, and what followed taken for a magic)
    for line in cell_source.split("\n"):
        stripped = line.lstrip()
        is_magic = stripped.startswith(("%", "!"))
        lines.append(line[: len(line) - len(stripped)] + "pass" if is_magic else line)
    return "\n".join(lines)


def _bound_names(statement: ast.stmt) -> set[str]:
    """Names a top-level statement binds (def, class, assignment targets)."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {statement.name}
    targets: list[ast.expr] = []
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
        targets = [statement.target]
    names = set()
    for target in targets:
        names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _names_used(statement: ast.stmt) -> set[str]:
    """Every name a statement reads or binds (over-approximate: locals count too)."""
    return {node.id for node in ast.walk(statement) if isinstance(node, ast.Name)}


def _imports_any(statement: ast.Import | ast.ImportFrom, names: set[str]) -> bool:
    """True if the import binds one of ``names`` (``from m import *``: always)."""
    for alias in statement.names:
        if alias.name == "*":
            return True
        bound = alias.asname or alias.name.split(".")[0]
        if bound in names:
            return True
    return False


def _is_literal(node: ast.expr | None) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return False
    return True


def _is_pure_definition(statement: ast.stmt) -> bool:
    if isinstance(
        statement,
        (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Pass),
    ):
        return True
    if isinstance(statement, ast.Assign):
        return _is_literal(statement.value)
    if isinstance(statement, ast.AnnAssign):
        return statement.value is None or _is_literal(statement.value)
    # a docstring-like string constant binds nothing and runs nothing
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)


def _run(statements: list[ast.stmt], namespace: dict, label: str) -> None:
    module = ast.Module(body=statements, type_ignores=[])
    try:
        exec(compile(module, label, "exec"), namespace)  # noqa: S102 - the student's own code
    except (Exception, SystemExit) as exc:  # one broken cell must not hide the others
        warnings.warn(
            f"{label}: {type(exc).__name__}: {exc}", NotebookLoadWarning, stacklevel=3
        )


def load_from_notebook(path: str | Path, names: str | Iterable[str]) -> dict:
    """The objects called ``names`` that the notebook at ``path`` defines.

    Returns a dict name -> object holding only the names the notebook defines (a name the
    notebook never defines, or whose cell raised, is absent: the caller decides whether that
    is a failure).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: a name is not a Python identifier.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no notebook at {path}")
    wanted = {names} if isinstance(names, str) else set(names)
    bad = sorted(n for n in wanted if not isinstance(n, str) or not n.isidentifier())
    if bad:
        raise ValueError(f"names must be Python identifiers, got {bad!r}")

    import nbformat  # imported here: it is slow to import and check() never needs it

    notebook = nbformat.read(path, as_version=4)
    parsed: list[tuple[int, list[ast.stmt]]] = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        try:
            parsed.append((index, ast.parse(_python_source(cell.source)).body))
        except SyntaxError as exc:
            warnings.warn(
                f"{path.name} cell {index}: SyntaxError: {exc.msg} (line {exc.lineno})",
                NotebookLoadWarning,
                stacklevel=2,
            )

    answer_cells: list[tuple[int, list[ast.stmt]]] = []
    definitions: list[tuple[int, int, ast.stmt]] = []  # (cell, position, statement)
    for index, body in parsed:
        if any(_bound_names(s) & wanted for s in body):
            kept = [s for s in body if not isinstance(s, (ast.Expr, ast.Import, ast.ImportFrom))]
            answer_cells.append((index, kept))
            continue
        for position, statement in enumerate(body):
            if _is_pure_definition(statement) and _bound_names(statement):
                definitions.append((index, position, statement))
    used = {name for _, kept in answer_cells for s in kept for name in _names_used(s)}
    chosen: set[tuple[int, int]] = set()
    grew = True
    while grew:  # the definitions the answers need, and the ones those need, ...
        grew = False
        for index, position, statement in definitions:
            if (index, position) not in chosen and _bound_names(statement) & used:
                chosen.add((index, position))
                used |= _names_used(statement)
                grew = True
    to_run = [(index, [s]) for index, position, s in definitions if (index, position) in chosen]
    to_run = sorted(to_run + answer_cells, key=lambda item: item[0])
    namespace: dict = {"__name__": "__student_notebook__"}
    for _, body in parsed:
        for statement in body:
            is_import = isinstance(statement, (ast.Import, ast.ImportFrom))
            if is_import and _imports_any(statement, used):
                _run([statement], namespace, f"{path.name} (imports)")
    for index, statements in to_run:
        _run(statements, namespace, f"{path.name} cell {index}")
    return {name: namespace[name] for name in wanted if name in namespace}
