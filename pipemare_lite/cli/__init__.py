"""Command line: ``python -m pipemare_lite ...`` or ``pipemare-lite ...``.

Each subcommand lives in ``pipemare_lite/cli/commands/<name>.py`` and provides
``configure(parser)`` and ``run(args) -> int``. Subcommand modules are imported only when
called, so ``schedule`` stays torch-free and ``--version`` is instant.

Plugins (:mod:`pipemare_lite.plugins`) load the same way for every subcommand: ``--plugin
MODULE`` (repeatable) and the environment variable ``PIPEMARE_PLUGINS`` are imported before
the subcommand's parser is built, so its help and its checks know the plugin's methods and
schedules; a module that cannot be imported is one line of error and exit code 2.
``gpu_check.py`` is what ``gpu-check`` runs: a diagnostic built on the engine, not a part of it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from pipemare_lite import __version__
from pipemare_lite.plugins import ENV_VAR, load_plugins

#: The project's input errors: every check of a user's value raises ValueError (or a
#: subclass, e.g. ScheduleError) naming the value and what is allowed. The CLI prints these
#: as one line and exits with 2; anything else (a KeyError included) is a bug in the code
#: and keeps its traceback.
INPUT_ERRORS = (ValueError,)

#: subcommand -> one-line help. The module is pipemare_lite.cli.commands.<name with - as _>.
SUBCOMMANDS = {
    "schedule": "build a pipeline schedule, simulate it and print the timeline and metrics",
    "train": "train a model with a pipeline method on the local (or distributed) executor",
    "reproduce": "re-run a stored experiment and write data/results/",
    "sweep": "run methods x seeds x settings (parallel, resumable): means with intervals",
    "assign": "write student copies (solutions stubbed) or executed solution copies",
    "grade": "grade a folder of student submissions into per-student reports and a class CSV",
    "book": "execute every chapter, then build the book site (HTML, offline)",
    "gpu-check": "check the GPU paths (local executor on GPUs, NCCL) and write a JSON report",
}


def _module(name: str):
    return importlib.import_module(f"pipemare_lite.cli.commands.{name.replace('-', '_')}")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The top-level parser; only the chosen subcommand's module is imported."""
    parser = argparse.ArgumentParser(
        prog="pipemare-lite",
        description="pipemare-lite: pipeline-parallel training, from GPipe to PipeMare.",
    )
    parser.add_argument("--version", action="version", version=f"pipemare-lite {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = next((a for a in (argv or []) if not a.startswith("-")), None)
    for name, help_text in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            _module(name).configure(p)
        if not any("--plugin" in action.option_strings for action in p._actions):
            add_plugin_option(p)  # (``train`` declares its own, with the same meaning)
    return parser


def add_plugin_option(parser: argparse.ArgumentParser) -> None:
    """``--plugin MODULE`` (repeatable), as every subcommand has it."""
    parser.add_argument(
        "--plugin", action="append", default=[], metavar="MODULE",
        help=f"import MODULE first (it may register methods and schedules); repeatable; "
             f"{ENV_VAR}=MODULE[,MODULE...] does the same")


def plugins_in(argv: list[str]) -> list[str]:
    """The ``--plugin`` values in ``argv`` (``--plugin M`` and ``--plugin=M``), in order."""
    found = []
    for i, arg in enumerate(argv):
        if arg == "--plugin" and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif arg.startswith("--plugin="):
            found.append(arg.split("=", 1)[1])
    return found


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``pipemare-lite`` script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    if chosen in SUBCOMMANDS:  # every subcommand: --plugin and PIPEMARE_PLUGINS first
        try:
            load_plugins(plugins_in(argv))
        except INPUT_ERRORS as exc:
            print(f"pipemare-lite {chosen}: error: {exc}", file=sys.stderr)
            return 2
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 0
    try:
        status = int(_module(args.command).run(args) or 0)
        sys.stdout.flush()  # inside the try: a reader gone by now is caught below too
        return status
    except INPUT_ERRORS as exc:  # bad input: a message, not a traceback
        print(f"pipemare-lite {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`... | head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return 141  # 128 + SIGPIPE, what a shell reports for a pipe's early end
    except MemoryError:
        pass  # reported below, once the frames holding the memory are gone
    print(out_of_memory_line(f"pipemare-lite {args.command}"), file=sys.stderr)
    return 2


def out_of_memory_line(prog: str) -> str:
    """The one line a command prints for a ``MemoryError`` (exit status 2: the request was
    too large for this process), with the address-space limit when one is set."""
    limit = ""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            limit = f" (this process may use {soft / 2**30:,.2f} GiB: ulimit -v)"
    except (ImportError, OSError, ValueError):  # no resource module (Windows)
        pass
    return (f"{prog}: error: out of memory{limit}; ask for less (fewer stages, microbatches, "
            "minibatches or a smaller model) or give the process more memory")


if __name__ == "__main__":
    sys.exit(main())
