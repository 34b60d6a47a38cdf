"""Running paper-shape's cells (chapter 10): every distinct training run once, in 1+ processes.

:func:`pipemare_lite.experiments.paper_shape.run` plans cells (a row or a factor's value of
one study at one P, all its seeds) with :meth:`CellRunner.plan`, trains what is planned with
:meth:`CellRunner.run_planned`, then assembles each cell's JSON-ready row with
:meth:`CellRunner.row`. A run is identified by what it computes (study, P, lr, the row's
settings, seed, and whether it measures sharpness), so a cell that repeats another's runs
(the sync row at the sweep's P, the check cell's first seeds) reuses them.

Processes. ``jobs=1`` trains in this process; ``jobs > 1`` in that many spawned worker
processes, each with one torch thread. A run's numbers depend only on its settings, never
on the process or the order runs finish in (the check of the stored results relies on it).
The stage evidence needs the sync run of the same seed, so it is computed here, after
training, from the update norms the runs return.

Progress: a tqdm bar on ``log`` whose units are planned training steps weighted by the
run's cost per step (microbatches times stages, relative to the study's sync at P = 2), so
its ETA weighs a run by its cost; a line per finished run.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from pipemare_lite.experiments import paper_shape_design as design
from pipemare_lite.experiments import record, stage_evidence


@dataclass(frozen=True)
class Job:
    """One training run: what it computes (``key``) and what the log calls it."""

    quick: bool
    study: str
    P: int
    lr: float
    spec: tuple  # sorted items of design.run_settings(...)
    seed: int
    label: str
    measure_sharpness: bool = False

    @property
    def key(self) -> tuple:
        """What identifies the run's numbers."""
        return (self.study, self.P, self.lr, self.spec, self.seed, self.measure_sharpness)


_DATA: dict = {}  # per process: model name -> dataset


def run_job(job: Job) -> tuple[dict, list, list, float]:
    """Train one run (in whichever process); its outcome, update norms, losses, CPU seconds."""
    config = design.config_for(job.quick)
    study = config.study(job.study)
    cpu = time.process_time()
    with record.torch_threads(design.THREADS):
        if study.model not in _DATA:
            _DATA[study.model] = design.load_data(study)
        data, spec = _DATA[study.model], dict(job.spec)
        if job.measure_sharpness:
            history, sharpness = design.train_measuring_sharpness(
                study, data, spec, job.P, job.lr, job.seed)
        else:
            history = design.train(study, data, spec, job.P, job.lr, job.seed)
    result = design.outcome(job.seed, history, study, config.loss_blowup)
    if job.measure_sharpness:
        result["sharpness"] = sharpness
    return result, history.stage_update_norm, history.loss, time.process_time() - cpu


def _key_text(key: tuple) -> str:
    return json.dumps(key)


def _key_from(value) -> tuple:
    """A key read back from JSON (lists where the key had tuples)."""
    study, P, lr, spec, seed, measure = value
    return (study, P, lr, tuple(tuple(item) for item in spec), seed, measure)


def read_partial(path: Path | None) -> dict[tuple, tuple]:
    """Finished runs kept in a study's partial file: ``key -> (outcome, norms, losses, cpu)``
    (plain JSON; a torn last line, left by a run stopped mid-write, is ignored)."""
    done: dict[tuple, tuple] = {}
    if path is None or not Path(path).is_file():
        return done
    for line in Path(path).read_text().splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        done[_key_from(item["key"])] = tuple(item["result"])
    return done


def append_partial(path: Path, key: tuple, result: tuple) -> None:
    """Keep one finished run (JSON's float text round-trips every double exactly, so a
    resumed run's losses compare bitwise)."""
    with open(path, "a") as f:
        f.write(json.dumps({"key": json.loads(_key_text(key)), "result": list(result)}) + "\n")


@dataclass
class _Cell:
    study: object
    plan: object  # design.CellPlan
    lr: float
    spec: dict
    jobs: list
    owned: list  # the jobs this cell was the first to plan (their CPU counts here)


def _items(spec: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in spec.items() if k != "not_run"))


class CellRunner:
    """Plans cells, trains their runs (``jobs`` processes), assembles rows; a context manager
    that closes its worker processes and progress bar."""

    def __init__(self, config, quick: bool, *, jobs: int = 1, log=None, progress: bool = True,
                 studies: tuple[str, ...] | None = None, partial: Path | None = None):
        if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
            raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
        self.config, self.quick, self.jobs, self.log = config, quick, jobs, log
        self.data = {}
        for study in config.studies:
            if study.model not in self.data and (studies is None or study.name in studies):
                self.data[study.model] = design.load_data(study)
        # finished runs kept by an earlier, stopped run of the same study (resume)
        self.partial = partial
        self.done: dict[tuple, tuple[dict, list, list, float]] = read_partial(partial)
        self.resumed = len(self.done)
        self.planned: dict[tuple, Job] = {}
        self.units: dict[tuple, float] = {}
        self.utilizations: dict[tuple, dict] = {}
        self.runs, self.child_cpu = 0, 0.0
        self._pool, self._bar, self._progress = None, None, progress

    def __enter__(self) -> CellRunner:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
        if self._bar is not None:
            self._bar.close()

    def _steps(self, study) -> int:
        return design.planned_steps(study, self.data[study.model])

    # ------------------------------------------------------------------ planning
    def plan(self, cell, *, lr: float) -> _Cell:
        """Plan one cell (a :class:`~pipemare_lite.experiments.design.CellPlan`); its
        runs are trained by the next :meth:`run_planned`."""
        study = self.config.study(cell.study)
        steps = self._steps(study)
        spec = design.run_settings(self.config, study, cell.label, cell.P, steps,
                                        k_fraction=cell.k_fraction,
                                        warmup_fraction=cell.warmup_fraction)  # fmt: skip
        planned = _Cell(study, cell, lr, spec, [], [])
        if spec["not_run"]:
            return planned
        measure = cell.sweep == "curvature"
        # cost per step ~ actions: microbatches x stages (a P = 2 sync step is 1 unit)
        cost = spec["num_microbatches"] * (cell.P + 2) / (study.num_microbatches * 4)
        for seed in cell.seeds:
            job = Job(self.quick, study.name, cell.P, lr, _items(spec), seed, cell.label,
                      measure)  # fmt: skip
            planned.jobs.append(job)
            if job.key not in self.done and job.key not in self.planned:
                self.planned[job.key] = job
                self.units[job.key] = steps * cost * (2 if measure else 1)
                planned.owned.append(job.key)
        return planned

    # ------------------------------------------------------------------ training
    def run_planned(self) -> None:
        """Train every planned run (in order in one process, or across ``jobs`` workers);
        the costliest first, so that the last minutes are not one long run alone."""
        todo = sorted(self.planned.values(), key=lambda j: -self.units[j.key])
        self.planned = {}
        if self._progress and self._bar is None:
            from tqdm.auto import tqdm

            self._bar = tqdm(desc="paper-shape", unit="step", file=self.log, mininterval=2.0,
                             dynamic_ncols=True, total=0)  # fmt: skip
        if self._bar is not None:
            self._bar.total += round(sum(self.units[j.key] for j in todo))
            self._bar.refresh()
        if self.jobs == 1:
            for job in todo:
                self._finished(job, run_job(job), in_process=True)
            return
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(self.jobs,
                                             mp_context=multiprocessing.get_context("spawn"))
        from concurrent.futures import as_completed

        futures = {self._pool.submit(run_job, job): job for job in todo}
        for future in as_completed(futures):
            self._finished(futures[future], future.result(), in_process=False)

    def _finished(self, job: Job, result: tuple, *, in_process: bool) -> None:
        self.done[job.key] = result
        if self.partial is not None:
            append_partial(self.partial, job.key, result)
        self.runs += 1
        outcome, cpu = result[0], result[3]
        if not in_process:
            self.child_cpu += cpu
        how = ""
        if outcome["diverged_non_finite"]:
            how = f", diverged (non-finite) at step {outcome['divergence_step']}"
        elif outcome["diverged_loss_rule"]:
            how = ", diverged (loss rule)"
        text = (f"  {job.study} P={job.P} {job.label} lr={job.lr} seed {job.seed}"
                f"{' (sharpness)' if job.measure_sharpness else ''}: quality "
                f"{outcome['quality']:.4f}{how} ({cpu:.1f} CPU-s)")  # fmt: skip
        if self._bar is not None:
            self._bar.update(round(self.units[job.key]))
            self._bar.write(text, file=self.log)
        elif self.log is not None:
            print(text, file=self.log, flush=True)

    # ------------------------------------------------------------------ assembling
    def _sync_result(self, study, P: int, lr: float, seed: int) -> tuple:
        spec = design.run_settings(self.config, study, design.SYNC, P,
                                        self._steps(study))  # fmt: skip
        key = (study.name, P, lr, _items(spec), seed, False)
        if key not in self.done:
            raise RuntimeError(f"no sync run for {key}: plan the grid's 1F1B row first")
        return self.done[key]

    def row(self, cell: _Cell) -> dict:
        """The cell's JSON-ready row: settings, per-seed outcomes (with stage evidence for
        the asynchronous rows), summaries over seeds, peak bytes, simulated utilization."""
        spec, study, plan = cell.spec, cell.study, cell.plan
        row = {"study": study.name, "model": study.model, "sweep": plan.sweep, "P": plan.P,
               "label": plan.label, "lr": cell.lr, **spec}  # fmt: skip
        if spec["not_run"]:
            return {**row, "utilization": None, "memory_bytes": None, "forward_delay_max": None,
                    "summary": None, "diverged_seeds": 0, "seeds": [], "cpu_seconds": 0.0}
        seeds = []
        for job in cell.jobs:
            outcome, norms, losses, _ = self.done[job.key]
            outcome = dict(outcome)
            if plan.label != design.SYNC:
                sync = self._sync_result(study, plan.P, cell.lr, job.seed)[1]
                outcome["blowup_onset"] = stage_evidence.blowup_onset(
                    norms, sync, self.config.blowup_factor)
                outcome["excess"] = stage_evidence.excess(norms, sync)
            elif job.measure_sharpness:  # measuring must not have changed the training
                plain = self._sync_result(study, plan.P, cell.lr, job.seed)[2]
                outcome["losses_bitwise_equal_unmeasured"] = losses == plain
            seeds.append(outcome)
        memory: dict[str, int] = {}  # peak over seeds (a diverged seed may stop before it)
        for s in seeds:
            for kind, value in s["memory_bytes"].items():
                memory[kind] = max(memory.get(kind, 0), value)
        util_key = (spec["method"], plan.P, spec["num_microbatches"], self._steps(study),
                    spec["warmup_minibatches"])  # fmt: skip
        if util_key not in self.utilizations:
            self.utilizations[util_key] = design.utilization(*util_key)
        summary = {k: record.seed_summary([s[k] for s in seeds])
                   for k in design.SUMMARY_METRICS}  # fmt: skip
        summary["quality"]["interval"] = record.mean_interval(
            [s["quality"] for s in seeds], self.config.confidence)
        return {
            **row,
            "utilization": self.utilizations[util_key],
            "memory_bytes": memory,
            "forward_delay_max": seeds[0]["forward_delay_max"],
            "summary": summary,
            "diverged_seeds": sum(bool(s["diverged"]) for s in seeds),
            "diverged_non_finite": sum(bool(s["diverged_non_finite"]) for s in seeds),
            "diverged_loss_rule": sum(bool(s["diverged_loss_rule"]) for s in seeds),
            "seeds": seeds,
            "cpu_seconds": round(sum(self.done[k][3] for k in cell.owned), 2),
        }

    def sync_same_at_every_p(self, study, lr: float) -> bool | None:
        """Whether 1F1B's training losses are bitwise the same at every P of the study and
        at the sweep's P, for every seed (None: only one P was run)."""
        ps = sorted({*study.granularities, study.sweep_P})
        losses: dict[int, set] = {}
        for P in ps:
            for seed in self.config.seeds:
                losses.setdefault(seed, set()).add(
                    tuple(self._sync_result(study, P, lr, seed)[2]))
        return all(len(v) == 1 for v in losses.values()) if len(ps) > 1 else None
