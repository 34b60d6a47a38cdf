"""Catch the missing ``if __name__ == "__main__":`` guard before a launch (chapter 11).

:func:`pipemare_lite.engine.distributed.launch.launch` starts its ranks with ``forkserver`` or
``spawn``: each child imports the script that called it again (as ``__mp_main__``) to find
the worker. A script that calls ``launch()`` at its top level, outside the guard, would
launch again in every child: multiprocessing stops that child with a long bootstrap
traceback, and the launcher sees ranks that "exited with code 1" without a report.
:func:`check_main_guard` looks before anything starts: if the call comes from the top level
of the main script and that line is not inside ``if __name__ == "__main__":``, it raises,
saying what to write.
"""

from __future__ import annotations

import ast
import linecache
import sys
from pathlib import Path


class MainGuardError(RuntimeError):
    """launch() was called, directly or through ``fit(executor="dist")``, at the top level of
    a script without the ``__main__`` guard."""


#: ``__name__ == "__main__"`` either way round, as :func:`ast.unparse` spells it.
MAIN_TESTS = ("__name__ == '__main__'", "'__main__' == __name__")


def guarded_lines(source: str) -> list[range]:
    """The line ranges of the top-level ``if __name__ == "__main__":`` blocks of ``source``."""
    return [range(node.lineno, (node.end_lineno or node.lineno) + 1)
            for node in ast.parse(source).body
            if isinstance(node, ast.If) and ast.unparse(node.test) in MAIN_TESTS]


def check_main_guard(function: str = "launch()", start_method: str = "forkserver") -> None:
    """Raise :class:`MainGuardError` if the main script calls us outside its guard.

    Only the children of ``spawn`` and ``forkserver`` re-import the script; notebooks and
    ``python -c`` have no script file, and a call from inside a function is safe.
    """
    if start_method == "fork":
        return
    main = sys.modules.get("__main__")
    spec_name = getattr(getattr(main, "__spec__", None), "name", None) or ""
    if spec_name == "__main__" or spec_name.endswith(".__main__"):
        return  # ``python -m package``: multiprocessing never re-runs a package's __main__
    path = getattr(main, "__file__", None)
    if not path or not str(path).endswith(".py"):
        return
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals is not vars(main):
        frame = frame.f_back
    if frame is None or frame.f_code.co_name != "<module>":
        return  # called from a function of the script (or not from the script at all)
    try:
        blocks = guarded_lines(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return
    line = frame.f_lineno
    if any(line in block for block in blocks):
        return
    called = linecache.getline(str(path), line).strip()  # what the user wrote: fit(...)?
    raise MainGuardError(
        f"{Path(path).name} line {line} ({called}) starts one process per rank ({function}) "
        "at the top level of the script. "
        "Each rank starts by importing the script again, which would launch again; put the "
        'call under\n\n    if __name__ == "__main__":\n        ...\n\n'
        "(the worker function itself stays at the top level of a module)"
    )
