"""Plugins: a user's module imported in every process of a run, before it starts
(introduced in chapter 11, where runs get one process per rank).

A method (or schedule, executor ...) registered by a module exists only in the processes
that imported that module: the ranks of ``launch()`` and of ``torchrun`` are other
processes. Three ways to import it everywhere:

- command line: ``pipemare-lite train --plugin my_methods --method wpred ...`` (repeatable);
- Python: ``launch(fit_worker, 2, args=(...,), imports=["my_methods"])``;
- environment: ``PIPEMARE_PLUGINS=my_methods,other`` (comma-separated), read by every rank,
  e.g. ``PIPEMARE_PLUGINS=my_methods torchrun ... -m pipemare_lite.training --method wpred``.

A module is a dotted name importable from ``sys.path`` (the working directory is on it for
``python -m``; set ``PYTHONPATH`` for torchrun ranks otherwise). Torch-free.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable

#: The environment variable naming plugin modules (comma-separated).
ENV_VAR = "PIPEMARE_PLUGINS"

_LOADED: list[str] = []


class PluginError(ValueError):
    """A plugin module could not be imported (bad input: the CLI exits with code 2)."""


def env_plugins() -> list[str]:
    """The modules named in ``PIPEMARE_PLUGINS`` (empty when unset)."""
    return [name.strip() for name in os.environ.get(ENV_VAR, "").split(",") if name.strip()]


def load_plugins(modules: Iterable[str] = (), *, from_env: bool = True) -> list[str]:
    """Import ``modules`` (and, with ``from_env``, those in ``PIPEMARE_PLUGINS``) once each.

    Returns every plugin imported in this process so far. A module that cannot be imported
    raises :class:`PluginError` naming it and the ways plugins are given (the ImportError
    as its cause); an error inside the module propagates as it is.
    """
    names = list(modules) + (env_plugins() if from_env else [])
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a plugin is a module's dotted name, got {name!r}")
        if name in _LOADED:
            continue
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise PluginError(
                f"plugin {name!r} could not be imported in {this_process()}: {exc} "
                f"(plugins come from --plugin, launch(imports=...) and {ENV_VAR}; the module "
                "must be importable on sys.path, e.g. through PYTHONPATH)"
            ) from exc
        _LOADED.append(name)
    return list(_LOADED)


def this_process() -> str:
    """``process PID`` (and ``, rank R`` under launch() or torchrun): where a name is looked up."""
    rank = os.environ.get("RANK")  # set by launch() and torchrun
    return f"process {os.getpid()}" + (f", rank {rank}" if rank is not None else "")


def not_registered_here(kind: str, register: str) -> str:
    """Why a ``kind`` ("schedule", "method") is unknown in this process and how to load its
    module: one sentence for both registries' errors."""
    return (f"plugins imported here: {', '.join(_LOADED) or 'none'}; a {kind} added with "
            f"{register}() exists only in the processes that imported its module: load it in "
            "every process with --plugin MODULE (command line), launch(..., "
            f"imports=['MODULE']) (Python) or {ENV_VAR}=MODULE[,MODULE...] (every rank, "
            "torchrun's too, reads it)")


def loaded_plugins() -> list[str]:
    """The plugin modules this process imported through :func:`load_plugins`."""
    return list(_LOADED)
