"""``pipemare-lite reproduce NAME [--quick] [--check]``: re-run a stored experiment (chapter 10).

Writes ``<out>/<name>.json`` (``<name>_quick.json`` with ``--quick``), a ``.meta.json``
beside it (command, package version, seeds, date, time taken, and the machine's
fingerprint: :func:`pipemare_lite.experiments.record.machine_fingerprint`) and a ``.md``
table. Results files are plain JSON: nothing ever executes code from them. Non-finite
numbers (a diverged run's loss) are stored as null; the seed's ``diverged`` flag says why.

``--check`` writes nothing: it re-runs the experiment's check row against the stored file
and prints which mode it used (bitwise on the machine that wrote it, seed range elsewhere);
exit status 1 when the check fails.
"""

from __future__ import annotations

import argparse
import importlib
import json
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
    parser.add_argument(
        "--check",
        action="store_true",
        help="re-run one row and compare it with the stored results in --out (writes nothing)",
    )


def write_json(path: Path, data: dict) -> None:
    """Strict JSON (no NaN), indented, with a trailing newline, written atomically."""
    from pipemare_lite.train import json_ready

    atomic_write_text(path, json.dumps(json_ready(data), indent=1, allow_nan=False) + "\n")


def _stem(args: argparse.Namespace) -> str:
    return args.experiment.replace("-", "_") + ("_quick" if args.quick else "")


def _check(module, args: argparse.Namespace) -> int:
    """Re-run the stored experiment's check row; print the report; 0 when it passed."""
    out, stem = Path(args.out), _stem(args)
    results = json.loads((out / f"{stem}.json").read_text())
    meta = json.loads((out / f"{stem}.meta.json").read_text())
    report = module.check(results, meta)
    print(report)
    return 0 if report.passed else 1


def run(args: argparse.Namespace) -> int:
    """Run the experiment, write results, meta and table; print the table."""
    from pipemare_lite import __version__
    from pipemare_lite.experiments import EXPERIMENTS, record

    module = importlib.import_module(EXPERIMENTS[args.experiment])
    if args.check:
        return _check(module, args)
    started, cpu = time.perf_counter(), time.process_time()
    results = module.run(quick=args.quick)
    stem = _stem(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / f"{stem}.json", results)
    table = module.markdown(results)
    atomic_write_text(out / f"{stem}.md", table)
    command = f"python -m pipemare_lite reproduce {args.experiment}"
    meta = record.meta_record(
        command=command + (" --quick" if args.quick else ""),
        package_version=__version__,
        seeds=results["config"]["seeds"],
        threads=results["torch_threads"],
        extra={
            "wall_seconds": round(time.perf_counter() - started, 1),
            "cpu_seconds": round(time.process_time() - cpu, 1),
        },
    )
    write_json(out / f"{stem}.meta.json", meta)
    print(table)
    print(f"wrote {out / (stem + '.json')} (+ .meta.json, .md)", file=sys.stderr)
    return 0
