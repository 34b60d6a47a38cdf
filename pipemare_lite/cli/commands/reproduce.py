"""``pipemare-lite reproduce NAME [--quick] [--check]``, ``reproduce --list``.

``--list`` prints the experiments with a line each, and the command that regenerates each
stored file.

Writes ``<out>/<name>.json`` (``<name>_quick.json`` with ``--quick``), a ``.meta.json``
beside it (command, package version, seeds, date, time taken, and the machine's
fingerprint: :func:`pipemare_lite.experiments.record.machine_fingerprint`) and a ``.md``
table. Results files are plain JSON: nothing ever executes code from them. Non-finite
numbers (a diverged run's loss) are stored as null; the seed's ``diverged`` flag says why.

``--check`` writes nothing: it re-runs the experiment's check row against the stored file
and prints which mode it used (bitwise on the machine that wrote it, elsewhere each metric
within the stored seeds' prediction interval for one new seed: a failure names the quantity
and by how much it missed).
Exit status: 0 the check passed, 1 it failed (the numbers differ), 2 bad input (the CLI's
rule), :data:`STORED_UNUSABLE` (3) the stored files are missing, unreadable or lack what the
check reads (named, before any training: the check is first dry-run on the stored seed).
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
        "--study", metavar="NAME",
        help="run one study of an experiment that has several (lr-map), merged into its "
        "stored file; a study that was stopped resumes from its finished runs")
    parser.add_argument(
        "--jobs", type=int, default=min(2, os.cpu_count() or 1),
        help="training processes at once, one torch thread each (default: 2 where there are "
        "2 cores); the numbers do not depend on it, only the wall time",
    )  # fmt: skip
    parser.add_argument(
        "--reassess", action="store_true",
        help="recompute the verdicts and predictions of the stored file from its stored runs "
        "(no training), after a change of how they are judged; the meta records it")
    parser.add_argument(
        "--check",
        action="store_true",
        help="re-run one row and compare it with the stored results in --out (writes "
        "nothing); exit 1 when the numbers differ, 3 when the stored files are missing or "
        "damaged",
    )


def write_json(path: Path, data: dict) -> None:
    """Strict JSON (no NaN), indented, with a trailing newline, written atomically."""
    from pipemare_lite.files import json_ready

    atomic_write_text(path, json.dumps(json_ready(data), indent=1, allow_nan=False) + "\n")


def _stem(args: argparse.Namespace) -> str:
    return args.experiment.replace("-", "_") + ("_quick" if args.quick else "")


#: ``reproduce --check``'s exit status when the stored files cannot be checked against
#: (missing, not JSON, or without what the check reads); 1 means the check ran and failed.
STORED_UNUSABLE = 3

#: What reading a damaged stored file can raise (its structure is not what the code reads).
_DAMAGE = (KeyError, TypeError, IndexError, AttributeError, ValueError)


class StoredResultsError(Exception):
    """Stored results that cannot be checked against; the message names the file."""


def _read_stored(path: Path, command: str):
    """The JSON object in ``path``, or StoredResultsError naming the file and the fault."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        message = f"no stored results at {path}; write them with: {command}"
        raise StoredResultsError(message) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise StoredResultsError(f"cannot read stored results {path}: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:  # JSONDecodeError
        raise StoredResultsError(f"stored results {path} are not valid JSON ({exc}); "
                                 f"regenerate them with: {command}") from None
    except RecursionError:
        raise StoredResultsError(f"stored results {path} are nested too deeply to be ours; "
                                 f"regenerate them with: {command}") from None
    if not isinstance(data, dict):
        raise StoredResultsError(f"stored results {path} hold a JSON {type(data).__name__}, "
                                 f"not an object; regenerate them with: {command}")
    return data


def _stored_check_seed(module, results: dict) -> dict:
    """The stored check row's first seed (what the dry run compares with itself)."""
    if hasattr(module, "check_row"):
        row = module.check_row(results)
    else:
        row = module.find_row(results, module.CHECK_ROW)
    return row["seeds"][0]


def _check(module, args: argparse.Namespace) -> int:
    """Re-run the stored experiment's check row; print the report; 0 when it passed.

    The stored files are read and dry-run first (the stored seed compared with itself in
    seed-range mode, which reads every value the real comparison reads): a damaged file
    is named with exit status :data:`STORED_UNUSABLE` before minutes of training.
    """
    out, stem = Path(args.out), _stem(args)
    command = command_for(args.experiment, args.quick)
    files = f"{out / stem}.json (+ .meta.json)"
    try:
        results = _read_stored(out / f"{stem}.json", command)
        meta = _read_stored(out / f"{stem}.meta.json", command)
        try:
            module.compare(results, meta, _stored_check_seed(module, results),
                           fingerprint={"dry run": "seed-range mode"})
        except _DAMAGE as exc:
            raise StoredResultsError(
                f"stored results {files} lack what the check reads ({type(exc).__name__}: "
                f"{str(exc)[:200]}); regenerate them with: {command}") from None
        try:
            report = module.check(results, meta)
        except (KeyError, TypeError, IndexError, AttributeError) as exc:
            raise StoredResultsError(
                f"stored results {files}: the re-run could not read them "
                f"({type(exc).__name__}: {str(exc)[:200]}); regenerate them with: {command}"
            ) from None
    except StoredResultsError as exc:
        print(f"pipemare-lite reproduce: stored results unusable: {exc}", file=sys.stderr)
        return STORED_UNUSABLE
    print(report)
    return 0 if report.passed else 1


def _reassess(module, args: argparse.Namespace) -> int:
    """Recompute a stored file's verdicts from its stored runs; rewrite it, its table and
    its meta (the meta keeps how the runs were made and records the reassessment)."""
    import datetime

    from pipemare_lite import __version__

    if not hasattr(module, "reassess"):
        raise ValueError(f"--reassess: experiment {args.experiment!r} has nothing to reassess")
    out, stem = Path(args.out), _stem(args)
    command = command_for(args.experiment, args.quick)
    try:
        results = _read_stored(out / f"{stem}.json", command)
        meta = _read_stored(out / f"{stem}.meta.json", command)
    except StoredResultsError as exc:
        print(f"pipemare-lite reproduce: stored results unusable: {exc}", file=sys.stderr)
        return STORED_UNUSABLE
    results = module.reassess(results)
    meta["reassessed"] = {
        "command": f"{command} --reassess", "package_version": __version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "what": "verdicts and predictions recomputed from the stored runs; no run repeated"}
    write_json(out / f"{stem}.json", results)
    write_json(out / f"{stem}.meta.json", meta)
    table = module.markdown(json.loads((out / f"{stem}.json").read_text()))
    atomic_write_text(out / f"{stem}.md", table)
    print(table)
    print(f"reassessed {out / (stem + '.json')} (+ .meta.json, .md)", file=sys.stderr)
    return 0


def command_for(experiment: str, quick: bool, study: str | None = None) -> str:
    """The exact command that regenerates an experiment's stored files (``study``: the one
    study the last run wrote, for experiments stored study by study)."""
    return (f"python -m pipemare_lite reproduce {experiment}" + (" --quick" if quick else "")
            + (f" --study {study}" if study else ""))


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
    if args.reassess:
        return _reassess(module, args)
    started, cpu = time.perf_counter(), time.process_time()
    if not isinstance(args.jobs, int) or args.jobs < 1:
        raise ValueError(f"--jobs must be a positive integer, got {args.jobs!r}")
    stem = _stem(args)
    out = Path(args.out)
    studies = getattr(module, "studies_for", None)
    if args.study is not None and studies is None:
        raise ValueError(f"--study: experiment {args.experiment!r} has no studies to choose from")
    if studies is not None:  # run and store study by study, resumable
        if args.study is not None:
            module.map_study(args.study, args.quick)  # ValueError naming the studies, early
        previous = None
        if (out / f"{stem}.json").is_file():
            previous = _read_stored(out / f"{stem}.json", command_for(args.experiment,
                                                                      args.quick))
        results = module.run(quick=args.quick, jobs=args.jobs, study=args.study, out=out,
                             previous=previous)
    else:
        results = module.run(quick=args.quick, jobs=args.jobs)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / f"{stem}.json", results)
    meta = record.meta_record(
        command=command_for(args.experiment, args.quick, args.study),
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
    for finished in getattr(module, "finished_partial_files", lambda *a: [])(out, args.quick,
                                                                             args.study):
        finished.unlink(missing_ok=True)  # folded into the results file
    print(table)
    print(f"wrote {out / (stem + '.json')} (+ .meta.json, .md)", file=sys.stderr)
    return 0
