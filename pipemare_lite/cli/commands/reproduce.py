"""``pipemare-lite reproduce NAME [--quick] [--check]``, ``reproduce --list``.

``--list`` prints the experiments with a line each, and the command that regenerates each
stored file.

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
import os
import sys
import time
from pathlib import Path

from pipemare_lite.files import atomic_write_text


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the experiment name and options."""
    from pipemare_lite.experiments import EXPERIMENTS

    parser.add_argument("experiment", nargs="?", choices=sorted(EXPERIMENTS),
                        help="the experiment to run (see --list)")
    parser.add_argument("--list", action="store_true",
                        help="list the experiments and the commands that regenerate them")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the small variant (minutes, not tens of minutes); written to <name>_quick.json",
    )
    parser.add_argument("--out", default="data/results", help="directory for the results")
    parser.add_argument(
        "--jobs", type=int, default=min(2, os.cpu_count() or 1),
        help="training processes at once, one torch thread each (default: 2 where there are "
        "2 cores); the numbers do not depend on it, only the wall time",
    )  # fmt: skip
    parser.add_argument(
        "--check",
        action="store_true",
        help="re-run one row and compare it with the stored results in --out (writes nothing)",
    )


def write_json(path: Path, data: dict) -> None:
    """Strict JSON (no NaN), indented, with a trailing newline, written atomically."""
    from pipemare_lite.cli.commands.train import json_ready

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


def command_for(experiment: str, quick: bool) -> str:
    """The exact command that regenerates an experiment's stored files."""
    return f"python -m pipemare_lite reproduce {experiment}" + (" --quick" if quick else "")


def _list(out: Path) -> int:
    """Print each experiment, its description and its stored files' commands."""
    from pipemare_lite.experiments import DESCRIPTIONS, EXPERIMENTS

    for name in sorted(EXPERIMENTS):
        print(f"{name}: {DESCRIPTIONS.get(name, '')}")
        for quick in (False, True):
            stem = name.replace("-", "_") + ("_quick" if quick else "")
            stored = "stored" if (out / f"{stem}.json").exists() else "not stored"
            print(f"  {out / stem}.json ({stored}): {command_for(name, quick)}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the experiment, write results, meta and table; print the table."""
    from pipemare_lite import __version__
    from pipemare_lite.experiments import EXPERIMENTS, record

    if args.list:
        return _list(Path(args.out))
    if args.experiment is None:
        raise ValueError(f"name an experiment ({', '.join(sorted(EXPERIMENTS))}) or use --list")
    module = importlib.import_module(EXPERIMENTS[args.experiment])
    if args.check:
        return _check(module, args)
    started, cpu = time.perf_counter(), time.process_time()
    if not isinstance(args.jobs, int) or args.jobs < 1:
        raise ValueError(f"--jobs must be a positive integer, got {args.jobs!r}")
    results = module.run(quick=args.quick, jobs=args.jobs)
    stem = _stem(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / f"{stem}.json", results)
    meta = record.meta_record(
        command=command_for(args.experiment, args.quick),
        package_version=__version__,
        seeds=results["config"]["seeds"],
        threads=results["torch_threads"],
        extra={
            "wall_seconds": round(time.perf_counter() - started, 1),
            # the experiment's own count includes its worker processes
            "cpu_seconds": results.get("cpu_seconds", round(time.process_time() - cpu, 1)),
            "jobs": args.jobs,
        },
    )
    write_json(out / f"{stem}.meta.json", meta)
    # from the results as stored (tuples read back as lists), so the table is what a reader
    # of the JSON would compute; last: the results and meta are safe if it fails
    table = module.markdown(json.loads((out / f"{stem}.json").read_text()))
    atomic_write_text(out / f"{stem}.md", table)
    print(table)
    print(f"wrote {out / (stem + '.json')} (+ .meta.json, .md)", file=sys.stderr)
    return 0
