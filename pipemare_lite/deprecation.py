"""Old spellings kept for one release: one warning class, one wording (issue 44, item 5).

docs/glossary.md gives each concept one name; the spellings it replaced sit in the table's
"deprecated" column and are still accepted until the next release. Every place that accepts
one goes through this module, so each warning reads the same::

    MethodOptions: 'lr_rescheduling' is deprecated, use 't1' (same meaning);
    'lr_rescheduling' will be removed in the next release (0.3)

- :func:`warn_renamed`: the one warning (a :data:`WARNING`, i.e. :class:`FutureWarning`,
  which Python shows to end users by default, unlike ``DeprecationWarning``).
- :func:`renamed_keywords`: a call's keywords with the old ones renamed (one warning each).
- :func:`accepts_old_keywords`: a function decorator, old keywords renamed on the way in.
- :func:`accepts_old_fields`: a dataclass decorator, old keywords at construction and old
  attribute names on read.

Torch-free. Stored files (results, checkpoints, schedule files) are read by their own
loaders, which accept their old keys the same way.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path

#: The one warning class of every old spelling.
WARNING = FutureWarning
#: The release that removes the old spellings.
REMOVED_IN = "0.3"

_PACKAGE = str(Path(__file__).resolve().parent) + os.sep  # pipemare_lite/, not a sibling


def renamed_message(old: str, new: str, where: str, note: str = "") -> str:
    """The wording of every old-spelling warning (see the module docstring); ``note``: one
    more sentence where the new name alone could mislead."""
    return (f"{where}: {old!r} is deprecated, use {new!r} (same meaning); {old!r} will "
            f"be removed in the next release ({REMOVED_IN})" + (f". {note}" if note else ""))


def _caller_level() -> int:
    """The stacklevel of the first frame outside this package (the user's line)."""
    frame, level = sys._getframe(2), 2  # warn_renamed's caller
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def warn_renamed(old: str, new: str, where: str, note: str = "") -> None:
    """Warn (:data:`WARNING`) that ``old`` is now ``new`` in ``where``, pointing at the
    first line outside pipemare_lite that used it."""
    warnings.warn(renamed_message(old, new, where, note), WARNING, stacklevel=_caller_level())


def renamed_keywords(kwargs: Mapping, renames: Mapping[str, str], where: str) -> dict:
    """``kwargs`` with every old keyword of ``renames`` (old -> new) under its new name,
    one warning per old keyword used. Both spellings at once raise TypeError naming both."""
    kwargs = dict(kwargs)
    for old, new in renames.items():
        if old not in kwargs:
            continue
        if new in kwargs:
            raise TypeError(f"{where} got both {old!r} and {new!r} (same meaning): give "
                            f"only {new!r} ({old!r} is its deprecated spelling)")
        warn_renamed(old, new, where)
        kwargs[new] = kwargs.pop(old)
    return kwargs


def accepts_old_keywords(renames: Mapping[str, str]):
    """Function decorator: the old keywords of ``renames`` (old -> new) still work, with one
    warning each; ``help()`` and ``inspect.signature`` show the new signature only."""
    def decorate(function):
        where = f"{function.__name__}()"

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            return function(*args, **renamed_keywords(kwargs, renames, where))

        return wrapper

    return decorate


def accepts_old_fields(renames: Mapping[str, str]):
    """Class decorator for a dataclass whose fields were renamed (``renames``: old -> new).

    The constructor still takes the old keywords and ``obj.old`` still reads the new
    field, each with one warning; ``help()`` and ``inspect.signature`` show the new
    signature only. ``dataclasses.replace(obj, old=...)`` is refused (it passes every field
    under its new name as well): replace with the new name.
    """
    def decorate(cls):
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            init(self, *args, **renamed_keywords(kwargs, renames, cls.__name__))

        cls.__init__ = __init__
        for old, new in renames.items():
            setattr(cls, old, _old_attribute(cls.__name__, old, new))
        return cls

    return decorate


def _old_attribute(owner: str, old: str, new: str) -> property:
    def read(self):
        warn_renamed(old, new, owner)
        return getattr(self, new)

    return property(read, doc=f"Deprecated spelling of :attr:`{new}` (removed in {REMOVED_IN}).")
