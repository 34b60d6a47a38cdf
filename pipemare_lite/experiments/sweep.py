"""Sweeps: a grid of methods x seeds x settings, run in parallel processes and resumable,
summarised with confidence intervals (chapter 10's statistics, for one's own methods).

    import pipemare_lite as pml

    result = pml.sweep(model, data, methods=["1f1b", "async", "pipemare"], seeds=range(4),
                       settings={"lr": [0.02, 0.05]}, out="runs.jsonl", jobs=2,
                       num_stages=4, num_microbatches=4, batch_size=32, epochs=2)
    print(result)          # means with 95 % intervals, and each method against the first

The same from the command line: ``python -m pipemare_lite sweep --methods 1f1b async pipemare
--seeds 0 1 2 3 --set lr=0.02,0.05 --stages 4 --epochs 2 --jobs 2 --out runs.jsonl``.

What it computes is what the book's stored experiments compute, with the same functions of
:mod:`pipemare_lite.experiments.record`: a seed's **quality** is its final test accuracy, 0
when it diverged (:func:`~.record.seed_quality`); each cell (method x settings) shows the
mean over seeds with its two-sided 95 % Student-t interval (:func:`~.record.mean_interval`,
cut to the quantity's range and said so: :func:`~.record.interval_text`); each method is
compared with the baseline (the first method) at the same settings through the difference
of the means and its 95 % Welch interval (:func:`~.record.difference_interval`, as
:mod:`~.paper_shape_claims` compares rows), judged "higher" or "lower" only where the
interval excludes 0 (:func:`~.paper_shape_claims.judge`), else "not separable".

The runner (:func:`run_pending`, :func:`read_partial`) is the one the book's lr-map
experiment uses (:func:`~.lr_map.run_study`): finished runs are appended to a partial file,
one JSON object a line ``{"key": ..., "outcome": ...}``, as each finishes; a run started
again skips every key already there (a torn last line, from a run stopped mid-write, is
ignored and dropped). Processes are spawned (one torch thread each): a model or data given
as a function must then be picklable (defined at module level, not a lambda).
"""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from pipemare_lite.experiments.record import (
    difference_interval,
    interval_text,
    mean_interval,
    seed_quality,
    torch_threads,
)

#: the range each summarised quantity can take (intervals are cut to it, and say so)
RANGES = {"quality": (0.0, 1.0), "final_loss": (0.0, math.inf)}

#: torch threads per run: one, so that runs in parallel processes do not compete for cores
THREADS = 1


# ------------------------------------------------------------------ the resumable runner


def partial_line(key: str, outcome: dict) -> str:
    """One line of a partial file: strict JSON (non-finite numbers as null) and a newline."""
    from pipemare_lite.files import json_ready

    return json.dumps({"key": key, "outcome": json_ready(outcome)}, allow_nan=False) + "\n"


def read_partial(path: Path) -> dict[str, dict]:
    """Finished runs from a partial file (a torn last line is ignored); plain JSON only."""
    done = {}
    if Path(path).is_file():
        for line in Path(path).read_text().splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                continue
            done[item["key"]] = item["outcome"]
    return done


def rewrite_partial(path: Path, done: dict[str, dict]) -> None:
    """Write ``done`` as the whole partial file, atomically: a torn tail is dropped."""
    from pipemare_lite.files import atomic_write_text

    atomic_write_text(path, "".join(partial_line(k, o) for k, o in done.items()))


def run_pending(todo: list, run: Callable, *, key: Callable, jobs: int, partial: Path,
                done: dict[str, dict], report: Callable | None = None,
                initializer: Callable | None = None, initargs: tuple = ()) -> dict[str, dict]:
    """Run every job of ``todo`` through ``run(job) -> outcome``, in ``jobs`` spawned
    processes (in this process when ``jobs`` is 1), recording each as it finishes.

    Each finished job is put in ``done`` under ``key(job)``, appended to ``partial`` (one
    :func:`partial_line`), then passed to ``report(job, outcome)``. ``run``, the jobs and
    ``initializer`` (called once in each process, e.g. to load plugins) must be picklable
    when ``jobs`` > 1. Returns ``done``.
    """
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}")

    def finished(job, outcome: dict) -> None:
        done[key(job)] = outcome
        with open(partial, "a") as f:
            f.write(partial_line(key(job), outcome))
        if report is not None:
            report(job, outcome)

    if jobs == 1:
        if initializer is not None:
            initializer(*initargs)
        for job in todo:
            finished(job, run(job))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=initializer, initargs=initargs) as pool:
            futures = {pool.submit(run, job): job for job in todo}
            for future in as_completed(futures):
                finished(futures[future], future.result())
    return done


# ------------------------------------------------------------------------- one grid run


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep: a method (label and its fit settings), a seed, the settings."""

    label: str
    method_settings: tuple  # ((name, value), ...) of the method's own fit settings
    seed: int
    settings: tuple  # ((name, value), ...): the grid's axes and the fixed fit settings
    model: object = field(compare=False, repr=False)
    data: object = field(compare=False, repr=False)

    @property
    def key(self) -> str:
        """The run's settings as one JSON string: its line in the partial file."""
        return json.dumps({"method": self.label, "method_settings": dict(self.method_settings),
                           "seed": self.seed, "settings": dict(self.settings)},
                          sort_keys=True, default=repr)


def _built(thing, seed: int):
    """A model or data given as a function of the seed, built; else a copy (a model is
    trained in place, so each run gets its own)."""
    import copy

    return thing(seed) if callable(thing) and not hasattr(thing, "parameters") \
        else copy.deepcopy(thing)


def run_one(run: SweepRun) -> dict:
    """Train one run (in whichever process) and return its outcome with its history."""
    from pipemare_lite.training.loop import fit

    cpu = time.process_time()
    with torch_threads(THREADS):
        if run.data is None:  # one function builds both
            model, data = run.model(run.seed)
        else:
            model, data = _built(run.model, run.seed), _built(run.data, run.seed)
        history = fit(model, data, **dict(run.method_settings), **dict(run.settings),
                      seed=run.seed, progress=False)
    return {
        "label": run.label, "seed": run.seed, "settings": dict(run.settings),
        "method_settings": dict(run.method_settings),
        "quality": seed_quality(history.final_accuracy, history.diverged)
        if history.final_accuracy is not None or history.diverged else None,
        "final_accuracy": history.final_accuracy, "final_loss": history.final_loss,
        "diverged": history.diverged, "steps": history.steps,
        "cpu_seconds": round(time.process_time() - cpu, 2),
        "history": history.to_dict(),
    }  # fmt: skip


def _load_plugins(names: tuple[str, ...]) -> None:
    from pipemare_lite.plugins import load_plugins

    load_plugins(names)


# ----------------------------------------------------------------------------- the grid


def _method_table(methods) -> dict[str, dict]:
    """label -> the method's fit settings: a name stands for ``{"method": name}``."""
    if isinstance(methods, str) or not isinstance(methods, (Iterable, dict)):
        raise ValueError(f"methods must be a list of method names or a dict label -> fit "
                         f"settings, got {methods!r}")
    table = dict(methods) if isinstance(methods, dict) else {m: {"method": m} for m in methods}
    for label, settings in table.items():
        if not isinstance(label, str) or not isinstance(settings, dict) or "method" not in \
                settings and "schedule" not in settings:
            raise ValueError(f"method {label!r}: its settings must be a dict with 'method' (or "
                             f"'schedule'), got {settings!r}")
    if not table:
        raise ValueError("methods is empty: give at least one method")
    return table


def _check_settings(names: Iterable[str]) -> None:
    """Every name must be a fit() keyword that the sweep does not set itself."""
    import dataclasses

    from pipemare_lite.training.config import FitConfig

    known = {f.name for f in dataclasses.fields(FitConfig)}
    for name in names:
        if name in ("seed", "progress"):
            raise ValueError(f"setting {name!r} is the sweep's own (seeds= sets the seed)")
        if name not in known:
            raise ValueError(f"{name!r} is not a fit() keyword; allowed: "
                             f"{', '.join(sorted(known))}")


def _check_values(table: dict, axes: list, fixed: dict) -> None:
    """Every combination's settings as fit() checks them, here, before any process starts
    (a bad value or an unknown method is named at once, not by a worker minutes later)."""
    from pipemare_lite.methods.registry import get_method
    from pipemare_lite.training.config import FitConfig

    for method_settings in table.values():
        if isinstance(method_settings.get("method"), str):
            get_method(method_settings["method"])  # ValueError naming the known ones
        for combo in itertools.product(*axes):
            FitConfig.of(None, {**fixed, **dict(combo), **method_settings, "seed": 0,
                                "progress": False})


def grid(methods, seeds, settings: dict | None = None, fixed: dict | None = None, *,
         model=None, data=None) -> list[SweepRun]:
    """Every run of methods x seeds x the product of ``settings``' value lists, each with the
    ``fixed`` fit settings too; methods outermost, seeds innermost."""
    table = _method_table(methods)
    settings, fixed = dict(settings or {}), dict(fixed or {})
    seeds = list(seeds)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise ValueError(f"seeds must be a non-empty list of integers, got {seeds!r}")
    for name, values in settings.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable) or \
                not list(values):
            raise ValueError(f"settings[{name!r}] must be a non-empty list of values, "
                             f"got {values!r}")
    both = sorted(set(settings) & set(fixed))
    if both:
        raise ValueError(f"{both} given both as a grid axis and as a fixed setting")
    _check_settings([*settings, *fixed, *(k for m in table.values() for k in m)])
    axes = [[(name, v) for v in values] for name, values in settings.items()]
    _check_values(table, axes, fixed)
    runs = []
    for label, method_settings in table.items():
        for combo in itertools.product(*axes):
            for seed in seeds:
                runs.append(SweepRun(label, tuple(sorted(method_settings.items())), seed,
                                     tuple(sorted({**fixed, **dict(combo)}.items())),
                                     model, data))
    return runs


@dataclass
class SweepResult:
    """What :func:`sweep` returns: every run's outcome (with its history), the cells'
    summaries and the comparisons; ``str()`` is the table the command line prints."""

    runs: list[dict]
    cells: list[dict]
    comparisons: list[dict]
    axes: tuple[str, ...]

    def __str__(self) -> str:
        return table_text(self)


def sweep(model, data=None, *, methods, seeds=(0, 1, 2), settings: dict | None = None,
          out=None, jobs: int = 1, plugins: Iterable[str] | None = None, log=True,
          **fit_settings) -> SweepResult:
    """Train every method x seed x settings combination and summarise it (module doc).

    Args:
        model: a function ``seed -> nn.Module`` (a fresh model per run: the seed sets its
            initialisation), or a module (each run trains a copy: seeds then change only the
            data order).
        data: what ``fit`` takes, or a function ``seed -> data``; None: ``model(seed)``
            returns ``(model, data)``.
        methods: method names (``["1f1b", "async"]``), or ``{label: fit settings}`` for
            variants (``{"async + T1": {"method": "async", "t1": True}}``); the first is the
            baseline of the comparisons. A plugin's methods work once it is loaded.
        seeds: the seeds (``fit``'s ``seed``; with a model function also the model's).
        settings: grid axes, ``{fit keyword: [values]}``; every combination runs.
        out: the JSON-lines file of finished runs (resumed from; default: none kept).
        jobs: processes at once (spawned, one torch thread each).
        plugins: modules each process imports first (default: those loaded here).
        log: where progress lines go: True standard error, None nowhere, or a file.
        fit_settings: fixed ``fit`` keywords for every run (``epochs``, ``num_stages``...).
    """
    from pipemare_lite.plugins import loaded_plugins

    runs = grid(methods, seeds, settings, fit_settings, model=model, data=data)
    if jobs > 1 and (_unpicklable(model) or _unpicklable(data)):
        raise ValueError("with jobs > 1 the model and data go to other processes: give "
                         "picklable ones (a function defined at module level, not a lambda "
                         "or a local function), or jobs=1")
    partial = Path(out) if out is not None else None
    if partial is None:
        import tempfile

        scratch = tempfile.TemporaryDirectory()
        partial = Path(scratch.name) / "sweep.partial.jsonl"
    partial.parent.mkdir(parents=True, exist_ok=True)
    done = read_partial(partial)
    if partial.is_file():  # keep whole lines only (a run stopped mid-line leaves a torn tail)
        rewrite_partial(partial, done)
    todo = [r for r in runs if r.key not in done]

    def say(text: str) -> None:
        if log is True:
            print(text, file=sys.stderr, flush=True)
        elif log not in (None, False):
            print(text, file=log, flush=True)

    say(f"sweep: {len(runs) - len(todo)} of {len(runs)} runs already done, {len(todo)} to "
        f"run ({jobs} processes)")

    axes = tuple(settings or {})

    def report(run: SweepRun, outcome: dict) -> None:
        state = "diverged" if outcome["diverged"] else f"final loss {outcome['final_loss']:.4g}"
        where = "".join(f" {k}={dict(run.settings)[k]}" for k in axes)
        say(f"  [{len(done)}] {run.label} seed {run.seed}{where}: {state} "
            f"({outcome['cpu_seconds']} CPU-s)")

    names = tuple(loaded_plugins() if plugins is None else plugins)
    run_pending(todo, run_one, key=lambda r: r.key, jobs=jobs, partial=partial, done=done,
                report=report, initializer=_load_plugins, initargs=(names,))
    outcomes = [done[r.key] for r in runs]
    return summarise(outcomes, list(_method_table(methods)), axes)


def _unpicklable(thing) -> bool:
    import pickle

    try:
        pickle.dumps(thing)
    except Exception:  # lambdas, local functions, open handles: any pickling failure
        return True
    return False


# --------------------------------------------------------------------------- the summary


def summarise(outcomes: list[dict], labels: list[str], axes: tuple[str, ...],
              confidence: float = 0.95) -> SweepResult:
    """Cells (method x values of ``axes``) with their means and intervals, and each method
    against ``labels[0]`` at the same values (module doc)."""
    groups: dict[tuple[str, str], list[dict]] = {}  # (label, the axes' values as JSON)
    for outcome in outcomes:
        at = json.dumps({a: outcome["settings"].get(a) for a in axes}, sort_keys=True)
        groups.setdefault((outcome["label"], at), []).append(outcome)
    cells = []
    for (label, at), members in groups.items():
        cell = {"label": label, "at": json.loads(at), "n": len(members),
                "diverged": sum(bool(m["diverged"]) for m in members)}
        for metric in ("quality", "final_loss"):
            values = [m[metric] for m in members]
            if any(v is None or not math.isfinite(v) for v in values):
                cell[metric] = None  # no accuracy measured, or a non-finite loss: no interval
                continue
            low, high = mean_interval(values, confidence)
            cell[metric] = {"mean": math.fsum(values) / len(values), "low": low, "high": high}
        cells.append(cell)
    comparisons = []
    for (label, at), members in groups.items():
        base = groups.get((labels[0], at))
        values = [m["quality"] for m in members]
        if label == labels[0] or base is None or None in values or \
                None in (base_values := [m["quality"] for m in base]):
            continue
        d = difference_interval([(1, values), (-1, base_values)], confidence)
        comparisons.append({"label": label, "baseline": labels[0], "at": json.loads(at), **d,
                            "word": _word(d["low"], d["high"])})
    return SweepResult(outcomes, cells, comparisons, axes)


def _word(low: float, high: float) -> str:
    """higher / lower where the interval excludes 0, else not separable (the claims' rule)."""
    from pipemare_lite.experiments.paper_shape_claims import HELD, judge

    if judge(low, high, 0.0) == HELD:
        return "higher"
    if judge(-high, -low, 0.0) == HELD:
        return "lower"
    return "not separable from the seed noise"


def _show(summary: dict | None, metric: str) -> str:
    if summary is None:
        return "-"
    text = interval_text(summary["low"], summary["high"], *RANGES[metric])
    return f"{summary['mean']:.3f} ({text})"


def table_text(result: SweepResult) -> str:
    """The sweep as text: per settings, each method's n, quality and final loss with 95 %
    intervals and its diverged seeds; then each method against the baseline."""
    lines = ["quality: final test accuracy, 0 for a diverged seed; mean (95 % t-interval of "
             "the mean) over seeds"]
    order = list(dict.fromkeys(json.dumps(c["at"], sort_keys=True) for c in result.cells))
    width = max([6, *(len(c["label"]) for c in result.cells)])
    for at in order:
        cells = [c for c in result.cells if json.dumps(c["at"], sort_keys=True) == at]
        where = ", ".join(f"{k}={v}" for k, v in json.loads(at).items())
        lines += ["", f"settings: {where or '(one cell)'}",
                  f"{'method':<{width}} {'n':>3}  {'quality':<22} {'final loss':<22} diverged"]
        for c in cells:
            lines.append(f"{c['label']:<{width}} {c['n']:>3}  "
                         f"{_show(c['quality'], 'quality'):<22} "
                         f"{_show(c['final_loss'], 'final_loss'):<22} {c['diverged']}")
        here = [d for d in result.comparisons if json.dumps(d["at"], sort_keys=True) == at]
        if here:
            lines.append(f"against {here[0]['baseline']} (difference of mean quality, 95 % "
                         "Welch interval):")
            for d in here:
                text = interval_text(d["low"], d["high"], -1.0, 1.0, sign="+")
                lines.append(f"  {d['label']} - {d['baseline']}: {d['estimate']:+.3f} ({text}): "
                             f"{d['word']}")
    return "\n".join(lines)
