"""Writing small notebooks for the exercise and grading tests (tests only)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook


def write_notebook(path: Path, *cells: str) -> Path:
    """A notebook at ``path`` (folders made) with one code cell per source, dedented."""
    notebook = new_notebook()
    notebook.cells = [new_code_cell(textwrap.dedent(c)) for c in cells]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, path)
    return path
