"""Every public function and class of pipemare_lite has a docstring; engine modules name a chapter.

(Private helper modules, ``_name.py``, need docstrings too but no chapter.)

The engine's docstrings are part of the book: a reader who meets ``bubble_fraction`` in a
chapter can ``help()`` it and find the chapter that introduces the idea.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re

import pytest

import pipemare_lite
from pipemare_lite.book.module_map import MODULE_CHAPTERS, NO_CHAPTER

#: Tooling around the book (CLI, book build, classroom build), not the engine it teaches:
#: no chapter to name. The module map says which (``-``), nothing else does.
NOT_ENGINE = {name for name, chapter in MODULE_CHAPTERS.items() if chapter == NO_CHAPTER}
CHAPTER_MENTION = re.compile(r"\bchapters?\s+\d{1,2}\b", re.IGNORECASE)


def _module_names() -> list[str]:
    names = ["pipemare_lite"]
    for info in pkgutil.walk_packages(pipemare_lite.__path__, prefix="pipemare_lite."):
        if info.name != "pipemare_lite.__main__":  # running it would exit the interpreter
            names.append(info.name)
    return sorted(names)


MODULES = _module_names()


def _has_own_docstring(obj) -> bool:
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
    if not doc or not doc.strip():
        return False
    # dataclasses and NamedTuples invent "Name(field, ...)" when the author wrote none
    generated = doc.startswith(f"{obj.__name__}(")
    return not (
        inspect.isclass(obj)
        and generated
        and (dataclasses.is_dataclass(obj) or issubclass(obj, tuple))
    )


@pytest.mark.parametrize("name", MODULES)
def test_public_functions_and_classes_have_docstrings(name):
    module = importlib.import_module(name)
    assert module.__doc__ and module.__doc__.strip(), f"module {name} has no docstring"
    missing = [
        attr
        for attr, obj in vars(module).items()
        if not attr.startswith("_")
        and (inspect.isfunction(obj) or inspect.isclass(obj))
        and getattr(obj, "__module__", None) == name
        and not _has_own_docstring(obj)
    ]
    assert not missing, f"{name}: no docstring on {', '.join(missing)}"


def _is_private(name: str) -> bool:
    return name.rsplit(".", 1)[-1].startswith("_")


@pytest.mark.parametrize(
    "name", [m for m in MODULES if m not in NOT_ENGINE and not _is_private(m)]
)
def test_engine_modules_name_the_chapter_that_introduces_them(name):
    if name == "pipemare_lite":
        pytest.skip("the package docstring is a map of modules, not a concept")
    doc = importlib.import_module(name).__doc__ or ""
    assert CHAPTER_MENTION.search(doc), (
        f"{name}: say in the module docstring which chapter introduces it "
        "(e.g. 'introduced in chapter 03')"
    )


def test_the_checker_sees_a_missing_docstring():
    @dataclasses.dataclass
    class Undocumented:
        x: int

    def documented():
        """Here."""

    assert not _has_own_docstring(Undocumented)
    assert _has_own_docstring(documented)
    assert not _has_own_docstring(lambda: None)
