"""Lines per package of pipemare_lite, against issue 11's readability goals (prints only).

Two counts per package:

- **physical**: every line of every ``.py`` file (what ``wc -l`` says);
- **code**: lines that hold code, i.e. not blank, not a comment, not part of a docstring.

The goals: the core (``schedules/``, ``analysis/``, ``engine/`` without ``distributed/``) at most
3,000 lines, ``engine/distributed/`` at most 1,200. The table prints both counts against them,
because the book asks for a docstring on every public function: a reader of the engine
reads the code lines, and the docstrings beside them.

Run: ``.venv/bin/python benchmarks/bench_line_counts.py [--files]``
"""

from __future__ import annotations

import argparse
import ast
import io
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pipemare_lite"
GOALS = {"core (schedules + analysis + engine)": 3000, "engine/distributed": 1200}
CORE = ("schedules", "analysis", "engine")
#: methods/ files that are chapter 12's plug-in methods, not part of the engine.
CHAPTER_12_METHODS = ("beyond", "delay_compensation", "nesterov", "weight_prediction")
_NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
             tokenize.ENDMARKER}


def docstring_lines(tree: ast.Module) -> set[int]:
    """Line numbers of the module's, classes' and functions' docstrings."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def count_lines(path: Path) -> tuple[int, int]:
    """(physical, code) lines of one Python file."""
    source = path.read_text(encoding="utf-8")
    docs = docstring_lines(ast.parse(source))
    code: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in _NOT_CODE:
            code.update(n for n in range(token.start[0], token.end[0] + 1) if n not in docs)
    return len(source.splitlines()), len(code)


def package_files(name: str) -> list[Path]:
    """The ``.py`` files of one package (``engine`` leaves out ``engine/distributed``)."""
    folder = PACKAGE / name
    files = sorted(folder.rglob("*.py")) if folder.is_dir() else [folder.with_suffix(".py")]
    if name == "engine":
        files = [f for f in files if "distributed" not in f.relative_to(folder).parts]
    return files


def table(names: list[str]) -> dict[str, tuple[int, int]]:
    """(physical, code) per package name, plus the core's sum."""
    rows = {}
    for name in names:
        counts = [count_lines(f) for f in package_files(name)]
        rows[name] = (sum(c[0] for c in counts), sum(c[1] for c in counts))
    core = [rows[n] for n in CORE]
    rows["core (schedules + analysis + engine)"] = (sum(c[0] for c in core),
                                                    sum(c[1] for c in core))
    # The goal counts the three packages above. methods/ sits beside them but a
    # reader following how `pipemare` runs reads its engine half too (versions, T1, T2,
    # hooks, registry): this row says how much that adds, against no goal of its own.
    engine_methods = [count_lines(f) for f in package_files("methods")
                      if f.stem not in CHAPTER_12_METHODS]
    core_physical, core_code = rows["core (schedules + analysis + engine)"]
    rows["core + methods/ without chapter 12's (no goal)"] = (
        core_physical + sum(c[0] for c in engine_methods),
        core_code + sum(c[1] for c in engine_methods))
    return rows


def main() -> None:
    """Print the table (and with ``--files``, each file of the core and of dist)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", action="store_true", help="also list every file")
    args = parser.parse_args()
    names = sorted(p.name for p in PACKAGE.iterdir()
                   if p.name != "__pycache__" and (p.is_dir() or p.suffix == ".py"))
    names = [n.removesuffix(".py") for n in names]
    names.insert(names.index("engine") + 1, "engine/distributed")
    print(f"{'package':48s} {'physical':>9s} {'code':>7s}   goal")
    for name, (physical, code) in table(names).items():
        goal = GOALS.get(name)
        verdict = "" if goal is None else (
            f"<= {goal}: physical {'met' if physical <= goal else 'not met'}, "
            f"code {'met' if code <= goal else 'not met'}")
        print(f"{name:48s} {physical:9d} {code:7d}   {verdict}")
    if args.files:
        for name in (*CORE, "engine/distributed"):
            for path in package_files(name):
                physical, code = count_lines(path)
                print(f"  {path.relative_to(PACKAGE.parent)!s:60s} {physical:6d} {code:6d}")


if __name__ == "__main__":
    main()
