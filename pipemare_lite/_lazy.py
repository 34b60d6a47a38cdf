"""Names a package exports but imports on first use (PEP 562), so that importing the
package stays light: ``import pipemare_lite`` and ``pipemare_lite.training.history`` load
no torch until a name that needs it is read.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable


def lazy_exports(package: str, names: dict[str, str]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package``: ``names`` maps each exported name to the
    module that defines it; a name is imported when first read, then kept in the package.
    A subpackage or module of ``package`` not yet imported is imported when first read too
    (``pml.training.datasets`` works after ``import pipemare_lite as pml``)."""
    def __getattr__(name: str):
        module = names.get(name)
        if module is None and importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")  # a subpackage, on first use
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}; it exports: "
                                 f"{', '.join(names)}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later reads skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return __getattr__, __dir__
