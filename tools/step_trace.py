"""Which files of the package one training step enters, in order: a map for a reader who
follows ``pml.fit`` into the engine (issue 32's closing note prints it).

Trains a 2-stage PipeMare run on the ``signals`` data for three steps and profiles the
second (the first builds the workers; a step in the middle is every step's shape): each
line is a file the step entered, its first function there, and how many calls the step
made into that file. Prints only; reads nothing from disk.

Run: ``.venv/bin/python tools/step_trace.py [--method 1f1b]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import pipemare_lite as pml
from pipemare_lite.training.datasets import signals
from pipemare_lite.training.models import mlp

PACKAGE = Path(pml.__file__).resolve().parent


def trace_second_step(method: str) -> dict[str, list]:
    """``{file: [first function, calls]}`` of the second step, in order of first entry."""
    entered: dict[str, list] = {}

    def profile(frame, event, arg):
        if event != "call":
            return
        path = Path(frame.f_code.co_filename)
        if PACKAGE in path.parents:
            seen = entered.setdefault(str(path.relative_to(PACKAGE.parent)),
                                      [frame.f_code.co_qualname, 0])
            seen[1] += 1

    def on_step(step: int, history) -> None:  # profile from the end of step 1 to step 2's
        sys.setprofile(profile if step == 1 else None)

    torch.manual_seed(0)
    data = signals(num_train=48, num_test=16)
    pml.fit(mlp(data.input_shape[0], 16, 2, data.num_classes), data, method=method,
            num_stages=2, num_microbatches=2, batch_size=16, epochs=1, lr=0.05,
            progress=False, on_step=on_step, record="history")
    sys.setprofile(None)
    return entered


def main(argv: list[str] | None = None) -> None:
    """Print the files one step enters (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", default="pipemare", help="a method name (default pipemare)")
    args = parser.parse_args(argv)
    entered = trace_second_step(args.method)
    print(f"one {args.method} step (2 stages, N = 2), files in order of first entry:")
    for path, (function, calls) in entered.items():
        print(f"  {path:<48} {function:<40} {calls:>5} calls")


if __name__ == "__main__":
    main()
