"""``pipemare-lite sweep``: methods x seeds x settings, in parallel, resumable, with intervals.

Each run is :func:`pipemare_lite.training.loop.fit` on the command line's model and data
(``--model``, ``--dataset``, ``--width``, ``--layers``, ``--stages`` as ``train`` builds
them); ``--set KEY=VALUE[,VALUE...]`` gives any ``fit`` keyword (one value: every run; several:
a grid axis). Finished runs, each with its history, are appended to ``--out`` (JSON lines)
as they end, and a sweep started again runs only what is missing. The table is
:func:`pipemare_lite.experiments.sweep.table_text`: means over seeds with 95 % intervals, and
each method against the first (difference of means, 95 % Welch interval).

Exit status: 0 the sweep ran (diverged runs included: they count as quality 0), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the sweep's options."""
    from pipemare_lite.cli.commands.train import model_help

    parser.add_argument(
        "--methods", nargs="+", default=None, metavar="METHOD[:KEY=VALUE,...]",
        help="(required) the methods to compare, the first is the baseline; a variant adds "
        "fit settings "
        "after a colon, e.g. async:t1=true,t2=true (a --plugin's methods too)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2],
                        help="seeds (model init, data split and order)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE[,VALUE...]", dest="settings",
        help="a fit() keyword, e.g. --set lr=0.02,0.05 (several values: a grid axis) or --set "
        "lr_schedule=cosine; values are read as JSON where they parse (numbers, true, null), "
        "else as text; repeatable")
    parser.add_argument("--model", default="mlp", metavar="NAME", help=model_help())
    parser.add_argument("--dataset", default=None,
                        help="digits, signals, reverse, sort (default: the model's, as train)")
    parser.add_argument("--width", type=int, default=64, help="hidden width / channels")
    parser.add_argument("--layers", type=int, default=None,
                        help="layers/blocks (default: one unit per stage, as train)")
    parser.add_argument("--stages", type=int, default=4, help="pipeline stages P")
    parser.add_argument("--microbatches", type=int, default=4, help="microbatches per update N")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per minibatch")
    parser.add_argument("--epochs", type=int, default=1, help="passes over the training set")
    parser.add_argument("--lr", type=float, default=0.05,
                        help="base learning rate (--set lr=... makes it an axis)")
    parser.add_argument(
        "--jobs", type=int, default=min(2, os.cpu_count() or 1),
        help="training processes at once, one torch thread each (the numbers do not depend "
        "on it, only the wall time)")
    parser.add_argument("--out", default="sweep.jsonl", metavar="FILE",
                        help="finished runs, one JSON line each with its history; resumed from")
    parser.add_argument("--json", action="store_true",
                        help="print the cells and comparisons as one JSON object")


def parse_value(text: str):
    """A ``--set`` value: JSON where it parses (``0.05``, ``true``, ``null``), else text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_settings(items: list[str]) -> tuple[dict, dict]:
    """``--set`` items -> ``(axes, fixed)``: a key with several values is an axis."""
    axes, fixed = {}, {}
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key or not values:
            raise ValueError(f"--set {item!r}: write KEY=VALUE or KEY=VALUE,VALUE,...")
        if key in axes or key in fixed:
            raise ValueError(f"--set {key} given twice")
        parsed = [parse_value(v) for v in values.split(",")]
        (axes if len(parsed) > 1 else fixed)[key] = parsed if len(parsed) > 1 else parsed[0]
    return axes, fixed


def parse_methods(items: list[str]) -> dict[str, dict]:
    """``--methods`` items -> ``{label: fit settings}``: ``async:t1=true`` is async with T1."""
    table = {}
    for item in items:
        name, _, rest = item.partition(":")
        settings = {"method": name}
        for part in filter(None, rest.split(",")):
            key, sep, value = part.partition("=")
            if not sep or not key:
                raise ValueError(f"--methods {item!r}: write METHOD or METHOD:KEY=VALUE,...")
            settings[key] = parse_value(value)
        if item in table:
            raise ValueError(f"--methods {item!r} given twice")
        table[item] = settings
    return table


@dataclass(frozen=True)
class CommandLineModel:
    """``seed -> (model, data)`` as ``train`` builds them (picklable: runs in workers)."""

    name: str
    dataset: str | None
    stages: int
    width: int
    layers: int | None

    def __call__(self, seed: int):
        from pipemare_lite.cli.commands.train import build_model_and_data

        return build_model_and_data(self.name, self.dataset, self.stages, self.width,
                                    self.layers, seed)


def run(args: argparse.Namespace) -> int:
    """Run the sweep; print its table (or JSON); 0 when it ran."""
    from pipemare_lite.cli.commands.train import build_model_and_data, model_balance
    from pipemare_lite.experiments.sweep import sweep
    from pipemare_lite.files import json_ready
    from pipemare_lite.plugins import load_plugins

    loaded = load_plugins(args.plugin)  # before the methods' names are looked up
    if not args.methods:
        raise ValueError("--methods: name at least one method (e.g. --methods 1f1b async)")
    for name in ("stages", "microbatches", "batch_size", "epochs", "width", "jobs"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, "
                             f"got {getattr(args, name)}")
    axes, fixed = parse_settings(args.settings)
    methods = parse_methods(args.methods)
    model = CommandLineModel(args.model, args.dataset, args.stages, args.width, args.layers)
    build_model_and_data(args.model, args.dataset, args.stages, args.width, args.layers,
                         args.seeds[0])  # a model that does not fit its data: named now
    defaults = {"num_stages": args.stages, "num_microbatches": args.microbatches,
                "batch_size": args.batch_size, "epochs": args.epochs, "lr": args.lr}
    balance = model_balance(args.model, args.stages)
    if balance is not None:
        defaults["balance"] = balance
    fixed = {k: v for k, v in {**defaults, **fixed}.items() if k not in axes}
    result = sweep(model, None, methods=methods, seeds=args.seeds, settings=axes,
                   out=args.out, jobs=args.jobs, plugins=loaded, **fixed)
    if args.json:
        print(json.dumps(json_ready({"cells": result.cells, "comparisons": result.comparisons,
                                     "axes": list(result.axes), "out": args.out}),
                         allow_nan=False))
    else:
        print(result)
        print(f"\nruns (with their histories): {args.out}")
    return 0
