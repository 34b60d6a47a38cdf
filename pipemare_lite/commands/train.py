"""``pipemare-lite train``: train a model with a pipeline method (chapter 07).

The options are defined once in :func:`pipemare_lite.train.add_train_arguments` and shared
with ``python -m pipemare_lite.train`` (the form ``torchrun`` launches).
"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the training options."""
    from pipemare_lite.train import add_train_arguments

    add_train_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Train and print a summary (``--json``: one JSON object)."""
    from pipemare_lite.train import run_from_args

    return run_from_args(args)
