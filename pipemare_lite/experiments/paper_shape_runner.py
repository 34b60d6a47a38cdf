"""Running paper-shape's cells (chapter 10): every distinct training run once, in 1+ processes.

:func:`pipemare_lite.experiments.paper_shape.run` plans cells (a row at one P, all its
seeds) with :meth:`CellRunner.plan`, trains what is planned with
:meth:`CellRunner.run_planned`, then assembles each cell's JSON-ready row with
:meth:`CellRunner.row`. A run is identified by what it computes (model, P, lr, the row's
settings, seed), so a cell that repeats another's runs (the sync row at the sweep's P, the
sweeps' default values, the check cell's first seeds) reuses them.

Processes. ``jobs=1`` trains in this process; ``jobs > 1`` in that many spawned worker
processes, each with one torch thread. A run's numbers depend only on its settings, never
on the process or the order runs finish in (the check of the stored results relies on it).
The stage evidence needs the sync run of the same seed, so it is computed here, after
training, from the update norms the runs return.

Progress: a tqdm bar on ``log`` whose units are planned training steps (times the row's
microbatches per step relative to the model's N), so its ETA weighs a run by its cost; a
line per finished run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pipemare_lite.experiments import paper_shape, record, stage_evidence


@dataclass(frozen=True)
class Job:
    """One training run: what it computes (``key``) and what the log calls it."""

    quick: bool
    model: str
    P: int
    lr: float
    spec: tuple  # sorted items of paper_shape.run_settings(...)
    seed: int
    label: str

    @property
    def key(self) -> tuple:
        """What identifies the run's numbers."""
        return (self.model, self.P, self.lr, self.spec, self.seed)


_DATA: dict = {}  # per process: model name -> dataset


def run_job(job: Job) -> tuple[dict, list, list, float]:
    """Train one run (in whichever process); its outcome, update norms, losses, CPU seconds."""
    config = paper_shape.config_for(job.quick)
    setting = paper_shape.setting_named(config, job.model)
    cpu = time.process_time()
    with record.torch_threads(paper_shape.THREADS):
        if job.model not in _DATA:
            _DATA[job.model] = paper_shape.load_data(setting)
        history = paper_shape.train(setting, _DATA[job.model], dict(job.spec), job.P, job.lr,
                                    job.seed)  # fmt: skip
    result = paper_shape.outcome(job.seed, history, setting)
    return result, history.stage_update_norm, history.loss, time.process_time() - cpu


@dataclass
class _Cell:
    setting: object
    sweep: str
    P: int
    label: str
    lr: float
    spec: dict
    jobs: list
    owned: list  # the jobs this cell was the first to plan (their CPU counts here)


class CellRunner:
    """Plans cells, trains their runs (``jobs`` processes), assembles rows; a context manager
    that closes its worker processes and progress bar."""

    def __init__(self, config, quick: bool, *, jobs: int = 1, log=None, progress: bool = True):
        if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
            raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
        self.config, self.quick, self.jobs, self.log = config, quick, jobs, log
        self.data = {s.name: paper_shape.load_data(s) for s in config.settings()}
        self.done: dict[tuple, tuple[dict, list, list, float]] = {}
        self.planned: dict[tuple, Job] = {}
        self.units: dict[tuple, int] = {}
        self.utilizations: dict[tuple, dict] = {}
        self.runs, self.child_cpu = 0, 0.0
        self._pool, self._bar, self._progress = None, None, progress

    def __enter__(self) -> CellRunner:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown()
        if self._bar is not None:
            self._bar.close()

    # ------------------------------------------------------------------ planning
    def plan(self, setting, sweep: str, P: int, label: str, k_fraction, gamma, seeds, *,
             lr: float) -> _Cell:
        """Plan one cell; its runs are trained by the next :meth:`run_planned`."""
        steps = paper_shape.planned_steps(setting, self.data[setting.name])
        spec = paper_shape.run_settings(self.config, setting, label, P, steps,
                                        k_fraction=k_fraction, gamma=gamma)  # fmt: skip
        cell = _Cell(setting, sweep, P, label, lr, spec, [], [])
        if spec["not_run"]:
            return cell
        items = tuple(sorted((k, v) for k, v in spec.items() if k != "not_run"))
        for seed in seeds:
            job = Job(self.quick, setting.name, P, lr, items, seed, label)
            cell.jobs.append(job)
            if job.key not in self.done and job.key not in self.planned:
                self.planned[job.key] = job
                self.units[job.key] = steps * spec["num_microbatches"] // setting.num_microbatches
                cell.owned.append(job.key)
        return cell

    # ------------------------------------------------------------------ training
    def run_planned(self) -> None:
        """Train every planned run (in order in one process, or across ``jobs`` workers)."""
        todo = list(self.planned.values())
        self.planned = {}
        if self._progress and self._bar is None:
            from tqdm.auto import tqdm

            self._bar = tqdm(desc="paper-shape", unit="step", file=self.log, mininterval=2.0,
                             dynamic_ncols=True, total=0)  # fmt: skip
        if self._bar is not None:
            self._bar.total += sum(self.units[j.key] for j in todo)
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
        self.runs += 1
        outcome, cpu = result[0], result[3]
        if not in_process:
            self.child_cpu += cpu
        text = (f"  {job.model} P={job.P} {job.label} lr={job.lr} seed {job.seed}: accuracy "
                f"{outcome['final_accuracy']:.4f}"
                + (f", diverged at step {outcome['divergence_step']}" if outcome["diverged"]
                   else "") + f" ({cpu:.1f} CPU-s)")  # fmt: skip
        if self._bar is not None:
            self._bar.update(self.units[job.key])
            self._bar.write(text, file=self.log)
        elif self.log is not None:
            print(text, file=self.log, flush=True)

    # ------------------------------------------------------------------ assembling
    def _sync_norms(self, job: Job):
        steps = paper_shape.planned_steps(
            paper_shape.setting_named(self.config, job.model), self.data[job.model])
        setting = paper_shape.setting_named(self.config, job.model)
        spec = paper_shape.run_settings(self.config, setting, paper_shape.SYNC, job.P, steps)
        items = tuple(sorted((k, v) for k, v in spec.items() if k != "not_run"))
        key = (job.model, job.P, job.lr, items, job.seed)
        if key not in self.done:
            raise RuntimeError(f"no sync run for {key}: plan the grid's 1F1B row first")
        return self.done[key][1]

    def row(self, cell: _Cell) -> dict:
        """The cell's JSON-ready row: settings, per-seed outcomes (with stage evidence for
        the asynchronous rows), summaries over seeds, peak bytes, simulated utilization."""
        spec, setting = cell.spec, cell.setting
        row = {"model": setting.name, "sweep": cell.sweep, "P": cell.P, "label": cell.label,
               "lr": cell.lr, **spec}  # fmt: skip
        if spec["not_run"]:
            return {**row, "utilization": None, "memory_bytes": None, "forward_delay_max": None,
                    "summary": None, "diverged_seeds": 0, "seeds": [], "cpu_seconds": 0.0}
        seeds = []
        for job in cell.jobs:
            outcome, norms, _, _ = self.done[job.key]
            outcome = dict(outcome)
            if cell.label != paper_shape.SYNC:
                sync = self._sync_norms(job)
                outcome["blowup_onset"] = stage_evidence.blowup_onset(
                    norms, sync, self.config.blowup_factor)
                outcome["excess"] = stage_evidence.excess(norms, sync)
            seeds.append(outcome)
        memory: dict[str, int] = {}  # peak over seeds (a diverged seed may stop before it)
        for s in seeds:
            for kind, value in s["memory_bytes"].items():
                memory[kind] = max(memory.get(kind, 0), value)
        steps = paper_shape.planned_steps(setting, self.data[setting.name])
        util_key = (spec["method"], cell.P, spec["num_microbatches"], steps,
                    spec["warmup_minibatches"])  # fmt: skip
        if util_key not in self.utilizations:
            self.utilizations[util_key] = paper_shape.utilization(*util_key)
        return {
            **row,
            "utilization": self.utilizations[util_key],
            "memory_bytes": memory,
            "forward_delay_max": seeds[0]["forward_delay_max"],
            "summary": {k: record.seed_summary([s[k] for s in seeds])
                        for k in paper_shape.SUMMARY_METRICS},  # fmt: skip
            "diverged_seeds": sum(bool(s["diverged"]) for s in seeds),
            "seeds": seeds,
            "cpu_seconds": round(sum(self.done[k][3] for k in cell.owned), 2),
        }

    def sync_same_at_every_p(self, setting, lr: float) -> bool:
        """Whether 1F1B's training losses are bitwise the same at every P, for every seed."""
        steps = paper_shape.planned_steps(setting, self.data[setting.name])
        losses = {}
        for P in setting.granularities:
            spec = paper_shape.run_settings(self.config, setting, paper_shape.SYNC, P, steps)
            items = tuple(sorted((k, v) for k, v in spec.items() if k != "not_run"))
            for seed in self.config.seeds:
                losses.setdefault(seed, set()).add(
                    tuple(self.done[(setting.name, P, lr, items, seed)][2]))
        return all(len(v) == 1 for v in losses.values())
