"""Old import paths the book or README once showed, kept for one release (issue 32).

Each old module path is an alias in ``sys.modules`` (registered when ``pipemare_lite`` is
imported, before any of its packages). Reading a name from an alias warns with a
``DeprecationWarning`` that names the new path, then reads it from the new module, so
``from pipemare_lite.training.fit import fit`` still works for a release. An alias lives
only in ``sys.modules``, never as an attribute of its package: ``pipemare_lite.training``
can export the function ``fit`` while the old module path ``pipemare_lite.training.fit``
keeps resolving (Python finds a module already in ``sys.modules`` without touching the
package's attributes). Nothing is imported until a name is read: the aliases cost no torch
import.
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings

#: The release after which the old paths are removed.
REMOVED_IN = "0.3"

#: old module path -> new module path (or paths, searched in order, for a split module)
MOVED: dict[str, str | tuple[str, ...]] = {
    "pipemare_lite.training.fit": "pipemare_lite.training.loop",
    "pipemare_lite.engine.dist": "pipemare_lite.engine.distributed",
    **{f"pipemare_lite.engine.dist.{name}": f"pipemare_lite.engine.distributed.{name}"
       for name in ("checkpoint", "faults", "launch", "lost", "main_guard", "torchrun",
                    "transport")},
    # the executor module was split by concern: its old names come from their new homes
    "pipemare_lite.engine.dist.executor": ("pipemare_lite.engine.distributed",
                                           "pipemare_lite.training.partition"),
    **{f"pipemare_lite.schedules.{name}": f"pipemare_lite.schedules.builders.{name}"
       for name in ("naive", "gpipe", "one_f_one_b", "interleaved", "zero_bubble",
                    "pipedream", "async_pipeline")},
    "pipemare_lite.schedules.validate": "pipemare_lite.schedules.validation",
    "pipemare_lite.figures.viz.gantt": "pipemare_lite.figures.viz.gantt_chart",
    "pipemare_lite.analysis.tradeoff": "pipemare_lite.methods.tradeoff",
}


class MovedModule(types.ModuleType):
    """A module path that moved: every name read from it comes from the new module."""

    def __init__(self, old: str, new: str | tuple[str, ...]) -> None:
        self.__moved_to__ = (new,) if isinstance(new, str) else tuple(new)
        super().__init__(old, f"Moved to {' and '.join(self.__moved_to__)} "
                              f"(this path goes in {REMOVED_IN}).")
        self.__path__ = []  # a package path, so that old.sub aliases import too

    def __getattr__(self, name: str):
        if name.startswith("__"):  # introspection (inspect, pickle, pytest) reads dunders
            raise AttributeError(name)  # of every module: never warn or import for those
        for new in self.__moved_to__:
            module = importlib.import_module(new)
            if hasattr(module, name):
                warnings.warn(f"{self.__name__} moved to {new}; import {name} from there "
                              f"({self.__name__} goes in pipemare-lite {REMOVED_IN})",
                              DeprecationWarning, stacklevel=_caller_level())
                value = getattr(module, name)
                setattr(self, name, value)  # one warning per name, not one per read
                return value
        raise AttributeError(f"module {self.__name__!r} (moved to "
                             f"{' and '.join(self.__moved_to__)}) has no attribute {name!r}")


def _caller_level() -> int:
    """The ``stacklevel`` that points the warning at the user's import line (so it shows in
    a notebook): frames of this file count, the import machinery's do not (``warnings``
    skips them itself)."""
    frame, level = sys._getframe(2), 1  # the frame that called __getattr__
    while frame is not None:
        name = frame.f_code.co_filename
        if "importlib" in name and "_bootstrap" in name:
            frame = frame.f_back
            continue
        level += 1
        if name != __file__:
            return level
        frame = frame.f_back
    return level


def register() -> None:
    """Put an alias for every old path into ``sys.modules`` (a real module wins)."""
    for old, new in MOVED.items():
        sys.modules.setdefault(old, MovedModule(old, new))
