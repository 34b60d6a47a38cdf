"""``reproduce beyond-pipemare``: chapter 12's methods against PipeMare on chapter 07's network.

The eight-unit MLP on digits at the finest granularity, P = 8 (one unit per stage),
every method over the same seeds, three groups:

- **SGD with momentum** (N = 2 microbatches of 8 per update, 2 epochs): 1F1B (the synchronous
  reference), async, PipeMare (T1 + T2), weight prediction (``wpred``), the Nesterov-style
  look-ahead (``nesterov``);
- **local accumulation as staleness control**: async with N = 1, 4, 8 microbatches of 8 per
  update (the N = 2 row above is the fourth point): a larger N means fewer updates and a
  smaller delay counted in updates;
- **the optimizer under 2BW's one-step delay** (N = 8, the least 2BW allows at P = 8,
  4 epochs): 1F1B and 2BW with AdamW and with Muon (``torch.optim.Muon``, via
  :class:`~pipemare_lite.training.optimizers.MuonWithAdamW`), and 2BW + delay compensation
  (``dc``) with AdamW.

Every row runs on a **cosine base schedule** (annealed to 0 over the run). PipeMare's T1, like
any lr rescheduling, is meant for a decaying base: on a constant base its anneal hands every
stage back a learning rate that the delays make unstable (chapter 08). The first version of
this experiment used a constant base and so judged PipeMare by a setting it is not meant
for (changed 2026-12-04, before the re-run; the other methods get the same base).

Per seed: final test accuracy and loss, its **quality** (the accuracy, 0 for a diverged
seed: :func:`pipemare_lite.experiments.record.seed_quality`, the book's one convention),
steps, the measured delays, peak bytes by kind, and the CPU seconds of the run (one
thread: the extra compute, machine-dependent, never checked). The methods come from the plugin
:mod:`pipemare_lite.methods.beyond`.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass

from pipemare_lite.experiments import record

THREADS = 1
SEEDS = (0, 1, 2)
QUICK_SEEDS = (0, 1)
P = 8
MICROBATCH = 8  # samples per microbatch in every row
PLUGIN = "pipemare_lite.methods.beyond"


@dataclass(frozen=True)
class Row:
    """One row: a label, the method, the optimizer and its lr, N and epochs."""

    label: str
    group: str
    method: str
    optimizer: str
    lr: float
    momentum: float | None
    num_microbatches: int
    epochs: int
    lr_schedule: str = "cosine"


SGD = dict(optimizer="sgd", lr=0.005, momentum=0.9)
ROWS = (
    Row("1F1B", "sgd", "1f1b", **SGD, num_microbatches=2, epochs=2),
    Row("async", "sgd", "async", **SGD, num_microbatches=2, epochs=2),
    Row("PipeMare (T1+T2)", "sgd", "pipemare", **SGD, num_microbatches=2, epochs=2),
    Row("wpred", "sgd", "wpred", **SGD, num_microbatches=2, epochs=2),
    Row("nesterov", "sgd", "nesterov", **SGD, num_microbatches=2, epochs=2),
    Row("async N=1", "accumulation", "async", **SGD, num_microbatches=1, epochs=2),
    Row("async N=4", "accumulation", "async", **SGD, num_microbatches=4, epochs=2),
    Row("async N=8", "accumulation", "async", **SGD, num_microbatches=8, epochs=2),
    Row("1F1B AdamW", "optimizer", "1f1b", "adamw", 0.003, None, 8, 4),
    Row("2BW AdamW", "optimizer", "2bw", "adamw", 0.003, None, 8, 4),
    Row("2BW+dc AdamW", "optimizer", "dc", "adamw", 0.003, None, 8, 4),
    Row("1F1B Muon", "optimizer", "1f1b", "muon", 0.02, None, 8, 4),
    Row("2BW Muon", "optimizer", "2bw", "muon", 0.02, None, 8, 4),
)
#: the row and the metrics the stored-results check re-runs
CHECK_ROW = "nesterov"
CHECK_METRICS = ("final_accuracy", "final_loss")
CHECK_EXACT = ("steps", "memory_bytes", "forward_delay_max")


def command_for(quick: bool) -> str:
    """The command that regenerates the stored file."""
    return "python -m pipemare_lite reproduce beyond-pipemare" + (" --quick" if quick else "")


def row_named(label: str) -> Row:
    """The :class:`Row` called ``label``."""
    for row in ROWS:
        if row.label == label:
            return row
    raise ValueError(f"no row {label!r}; allowed: {', '.join(r.label for r in ROWS)}")


def train(row: Row, seed: int, *, method: str | None = None) -> dict:
    """One seed of one row (``method`` replaces the row's, to perturb it in a test)."""
    import pipemare_lite.methods.beyond  # noqa: F401  (registers wpred, nesterov, dc)
    from pipemare_lite.training.datasets import digits
    from pipemare_lite.training.loop import fit
    from pipemare_lite.training.models import mlp

    data = digits()  # loaded (and the plugin imported) before the clock starts
    cpu = time.process_time()
    with record.torch_threads(THREADS):
        history = fit(mlp(in_features=64, hidden=128, depth=8, out_features=10, seed=seed),
                      data, method=method or row.method, num_stages=P,
                      num_microbatches=row.num_microbatches,
                      batch_size=MICROBATCH * row.num_microbatches, epochs=row.epochs,
                      lr=row.lr, optimizer=row.optimizer, momentum=row.momentum, seed=seed,
                      lr_schedule=row.lr_schedule, progress=False)
    return {
        "seed": seed,
        "final_accuracy": history.final_accuracy,
        "quality": record.seed_quality(history.final_accuracy, history.diverged),
        "final_loss": history.final_loss,
        "diverged": history.diverged,
        "steps": history.steps,
        "memory_bytes": history.memory_bytes,
        "forward_delay_max": history.forward_delay_max,
        "cpu_seconds": round(time.process_time() - cpu, 2),
    }


def _job(args: tuple) -> tuple[str, dict]:
    label, seed = args
    return label, train(row_named(label), seed)


def run(quick: bool = False, *, jobs: int = 1, log=sys.stderr, progress: bool = True) -> dict:
    """Every row over the seeds (``jobs`` processes, one torch thread each)."""
    seeds = QUICK_SEEDS if quick else SEEDS
    started, cpu = time.perf_counter(), time.process_time()
    from pipemare_lite.training.datasets import digits

    test_size = len(digits().x_test)
    todo = [(row.label, seed) for row in ROWS for seed in seeds]
    if jobs == 1:
        done = [_job(t) for t in todo]
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            done = list(pool.map(_job, todo))
    rows = []
    for row in ROWS:
        per_seed = [result for label, result in done if label == row.label]
        rows.append({
            **asdict(row),
            "seeds": per_seed,
            "summary": {k: record.seed_summary([s[k] for s in per_seed])
                        for k in ("final_accuracy", "quality", "final_loss", "cpu_seconds")},
            "diverged_seeds": sum(s["diverged"] for s in per_seed),
        })
    return {
        "experiment": "beyond-pipemare",
        "quick": quick,
        "command": command_for(quick),
        "config": {"P": P, "microbatch": MICROBATCH, "seeds": list(seeds),
                   "model": "mlp(64, 128, depth 8, 10), digits", "plugin": PLUGIN,
                   "test_size": test_size},
        "torch_threads": THREADS,
        "rows": rows,
        "jobs": jobs,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "cpu_seconds": round(time.process_time() - cpu
                             + sum(s["cpu_seconds"] for r in rows for s in r["seeds"]), 1),
    }


def find_row(results: dict, label: str) -> dict:
    """The stored row called ``label``."""
    for row in results["rows"]:
        if row["label"] == label:
            return row
    raise ValueError(f"no stored row {label!r}")


def compare(results: dict, meta: dict, again: dict, *,
            fingerprint: dict | None = None) -> record.CheckReport:
    """Check a re-run seed of the check row against its stored seeds (bitwise or range)."""
    row = find_row(results, CHECK_ROW)
    if fingerprint is None:
        fingerprint = record.machine_fingerprint(results.get("torch_threads", THREADS))
    seeds = [{k: v for k, v in s.items() if k != "cpu_seconds"} for s in row["seeds"]]
    again = {k: v for k, v in again.items() if k != "cpu_seconds"}  # a timing: never compared
    return record.check_rerun(
        seeds, again, stored_fingerprint=meta["fingerprint"], fingerprint=fingerprint,
        metrics=CHECK_METRICS, exact_keys=CHECK_EXACT,
        floors={"final_accuracy": 1 / results["config"]["test_size"]},  # one test sample
        what=f"beyond-pipemare{' (quick)' if results['quick'] else ''} {CHECK_ROW!r} "
        f"seed {again['seed']}",
    )


def check(results: dict, meta: dict) -> record.CheckReport:
    """Re-run the first seed of the check row and compare it with the stored seeds."""
    seed = results["config"]["seeds"][0]
    return compare(results, meta, train(row_named(CHECK_ROW), seed))


def _cell(summary: dict, digits: int = 3) -> str:
    mean, lo, hi = summary["mean"], summary["min"], summary["max"]
    return f"{mean:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def markdown(results: dict) -> str:
    """The table the chapter shows: accuracy, delays, memory by kind (KiB), CPU ratio."""
    base = {r["group"]: r for r in results["rows"] if r["method"] == "async"
            and r["num_microbatches"] == 2}
    async_cpu = (base.get("sgd") or results["rows"][0])["summary"]["cpu_seconds"]["mean"]
    lines = [
        "# Beyond PipeMare: chapter 07's MLP at P = 8",
        "",
        f"Regenerate: `{results['command']}`; seeds {results['config']['seeds']}; "
        "quality (test accuracy, a diverged seed counted as 0) mean [min, max] over seeds; every "
        "row on a cosine base lr; memory: peak bytes summed over stages (KiB); "
        "CPU: mean CPU seconds of a run relative to async (N = 2), a timing (noisy on a "
        "shared machine; the AdamW and Muon rows train 4 epochs, the others 2).",
        "",
        "| row | optimizer | N | steps | quality | diverged | stage-0 delay | "
        "memory by kind (KiB) | CPU vs async |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in results["rows"]:
        first = row["seeds"][0]
        kinds = ", ".join(f"{k} {v / 2**10:.0f}" for k, v in sorted(first["memory_bytes"].items())
                          if v)
        cpu = row["summary"]["cpu_seconds"]["mean"] / async_cpu
        lines.append(f"| {row['label']} | {row['optimizer']} | {row['num_microbatches']} | "
                     f"{first['steps']} | {_cell(row['summary']['quality'])} | "
                     f"{row['diverged_seeds']} | {first['forward_delay_max'][0]} | {kinds} | "
                     f"{cpu:.2f} |")
    return "\n".join(lines) + "\n"
