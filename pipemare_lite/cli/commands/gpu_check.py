"""``pipemare-lite gpu-check``: confirm the GPU paths and write a JSON report.

What it runs is :func:`pipemare_lite.cli.gpu_check.check`; ``scripts/gpu_check.sh`` wraps
it.
Exit status: 0 when every run agreed with the CPU reference (bitwise or close), 1 when one
differed, 2 for bad input (no GPU without ``--dry-run``).
"""

from __future__ import annotations

import argparse
import json
import os


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options: ``--dry-run``, ``--out``, ``--stages``, ``--steps``, ``--timeout``,
    ``--method`` (``--plugin``, as every subcommand has it, loads a method's module)."""
    parser.add_argument("--dry-run", action="store_true",
                        help="run the same checks on the CPU (gloo, small): no GPU needed")
    parser.add_argument("--out", default="gpu_check_report.json",
                        help="where to write the JSON report (default: %(default)s)")
    parser.add_argument("--stages", type=int, default=None,
                        help="pipeline stages (default: the number of GPUs, at least 2)")
    parser.add_argument("--steps", type=int, default=None, help="updates per run")
    parser.add_argument("--method", action="append", default=None, metavar="NAME",
                        help="a method to check (repeatable; one a --plugin registers too); "
                             "default: 1f1b and pipemare")
    parser.add_argument("--timeout", type=float, default=240.0,
                        help="seconds the distributed runs may take (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    """Run the check, print one line per method, write the report; 0 if all agreed."""
    from dataclasses import replace

    from pipemare_lite.cli.gpu_check import METHODS, CheckConfig, check, dry_run_config
    from pipemare_lite.methods import get_method

    if args.stages is not None and args.stages < 2:
        raise ValueError(f"--stages must be >= 2, got {args.stages}")
    if args.steps is not None and args.steps < 1:
        raise ValueError(f"--steps must be >= 1, got {args.steps}")
    if os.path.isdir(args.out):
        raise ValueError(f"--out {args.out!r} is a folder; give a file path")
    methods = tuple(dict.fromkeys(getattr(args, "method", None) or METHODS))
    for name in methods:
        get_method(name)  # unknown: ValueError naming the method and how to load a plugin
    config = dry_run_config() if args.dry_run else CheckConfig()
    changes = {k: v for k, v in (("stages", args.stages), ("steps", args.steps)) if v}
    report = check(dry_run=args.dry_run, config=replace(config, **changes),
                   timeout=args.timeout, methods=methods)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1)
    print(f"gpu-check: {'ok' if report['ok'] else 'DIFFERENT results'} in "
          f"{report['seconds']:.0f} s; report written to {args.out}")
    return 0 if report["ok"] else 1
