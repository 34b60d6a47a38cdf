"""``pipemare-lite reproduce NAME [--quick]``: re-run a stored experiment (chapter 10).

Writes ``<out>/<name>.json`` (``<name>_quick.json`` with ``--quick``), a ``.meta.json``
beside it (command, package and library versions, seed, date, time taken) and a ``.md``
table. Results files are plain JSON: nothing ever executes code from them. Non-finite
numbers (a diverged run's loss) are stored as null; the row's ``diverged`` flag says why.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import platform
import sys
import time
from pathlib import Path

from pipemare_lite.files import atomic_write_text


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the experiment name and options."""
    from pipemare_lite.experiments import EXPERIMENTS

    parser.add_argument("experiment", choices=sorted(EXPERIMENTS))
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the small variant (one epoch); written to <name>_quick.json",
    )
    parser.add_argument("--out", default="data/results", help="directory for the results")


def write_json(path: Path, data: dict) -> None:
    """Strict JSON (no NaN), indented, with a trailing newline, written atomically."""
    from pipemare_lite.train import json_ready

    atomic_write_text(path, json.dumps(json_ready(data), indent=1, allow_nan=False) + "\n")


def run(args: argparse.Namespace) -> int:
    """Run the experiment, write results, meta and table; print the table."""
    import numpy
    import sklearn
    import torch

    from pipemare_lite import __version__
    from pipemare_lite.experiments import EXPERIMENTS

    module = importlib.import_module(EXPERIMENTS[args.experiment])
    started, cpu = time.perf_counter(), time.process_time()
    results = module.run(quick=args.quick)
    stem = args.experiment.replace("-", "_") + ("_quick" if args.quick else "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / f"{stem}.json", results)
    table = module.markdown(results)
    atomic_write_text(out / f"{stem}.md", table)
    command = f"python -m pipemare_lite reproduce {args.experiment}"
    meta = {
        "command": command + (" --quick" if args.quick else ""),
        "package_version": __version__,
        "torch_version": torch.__version__,
        "numpy_version": numpy.__version__,
        "sklearn_version": sklearn.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "torch_threads": 1,
        "seed": results["config"]["seed"],
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "cpu_seconds": round(time.process_time() - cpu, 1),
    }
    write_json(out / f"{stem}.meta.json", meta)
    print(table)
    print(f"wrote {out / (stem + '.json')} (+ .meta.json, .md)", file=sys.stderr)
    return 0
