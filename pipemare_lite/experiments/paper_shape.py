"""PipeMare's experiment in miniature, designed before it was run (chapters 07-10).

PipeMare (Yang et al., arXiv:1910.05124, MLSys 2021) trains ResNets (SGD with momentum) and
Transformers (Adam) cut into one pipeline stage per layer, with standard decaying lr
schedules, and reports: asynchronous pipeline training without fixes degrades or diverges,
and more so as the stages get finer (larger delays); T1 (lr rescheduling) recovers most of
it; T2 (discrepancy correction) and a synchronous warm-up close the rest; all of it with
one weight copy plus one buffer (no stash) and near-full pipeline utilization. This module
asks whether that shape appears in models small enough for a laptop CPU, and says plainly
where it does not. Everything below, thresholds included, was fixed before any row other
than the synchronous lr sweep was run (what was looked at before: see the last section).

The ResNet setting (the granularity sweep)
------------------------------------------
- model: :func:`~pipemare_lite.training.models.small_resnet` with 8 channels and 14 residual
  blocks: stem + 14 blocks + head = 16 units. The same network at every granularity P in
  {2, 4, 8, 16}, cut into P stages of 16/P consecutive units: at P = 16 one unit per stage
  (the paper's fine-grained setting). The network is held fixed so that P changes the
  pipeline (its delays) and nothing else; a network of P units at each P would confound
  depth with delay (and the ResNet has no 2-unit form). Sync results are therefore the
  same at every P (checked bitwise by the run), and every P is judged against one sync.
- data: the 8x8 digits (1,347 train / 450 test, one fixed split), batch 16 cut into N = 2
  microbatches of 8, 5 epochs = 420 steps (updates per stage).
- N = 2 so that the delays are large. Measured max forward delay of stage 0 (updates),
  from the executed schedule: async and PipeMare P = 2: 2, P = 4: 4, P = 8: 8, P = 16: 16;
  PipeDream 1, 2, 4, 8 (it updates as 1F1B runs); 2BW 1 at every P. The run records every
  row's measured delays per stage.
- optimizer: SGD, momentum 0.9; base schedule: cosine annealing over the run (the paper's
  family of decaying schedules; no lr warm-up), stepped once per update of each stage; T1
  multiplies on top of it.

The Transformer setting (the paper's second model)
--------------------------------------------------
:func:`~pipemare_lite.training.models.tiny_transformer` (d = 32, 2 heads, 6 blocks: embedding + 6
blocks + head = 8 units) on the ``sort`` task (2,048 train / 512 test sequences of 8 tokens,
vocabulary 16), Adam, cosine schedule, batch 32 cut into N = 2, 2 epochs = 128 steps, at
P = 2 (4 units per stage) and P = 8 (one unit per stage; stage 0's measured delay: 8).

The learning rate: chosen on sync only, by a rule fixed in advance
------------------------------------------------------------------
For each model, 1F1B is trained at every lr of a fixed grid (ResNet 0.01, 0.02, 0.05, 0.1,
0.2; Transformer 0.001, 0.003, 0.01, 0.03), every seed, at the coarsest P (sync numerics do
not depend on P). The chosen lr is the **largest** grid lr at which no seed diverged and the
mean final test accuracy over seeds is within ``fine_margin`` = 0.01 of the best lr's mean:
the lr a practitioner tuning sync would ship. Every other row uses it, untuned.

The rows (at every P of the model)
----------------------------------
1F1B (sync); PipeDream (weight stashing); 2BW (two versions); async (no fix); async + T1;
async + T2; async + T1 + T2; PipeMare-W (T1 + T2 + warm-up). Fixed settings: T1 anneals
over K = 1/4 of the run's updates (counted from the first asynchronous update); T2's gamma
= 0.9 (the library default); PipeMare-W's warm-up runs the first 1/5 of the run flushed
(synchronous). 2BW needs N >= P - 1 microbatches: it runs with the smallest N that divides
the batch and is >= max(2, P - 1), and only where its microbatches keep >= 4 samples
(ResNet P = 2, 4; Transformer P = 2, 8); elsewhere its cells are marked "not run" (cost:
>= 8x the microbatches of the other rows). Its N is recorded in its row.

Sweeps at the finest ResNet granularity (P = 16)
------------------------------------------------
- T1 horizon: async + T1 with K in {1/16, 1/4, 1/2, 1} of the run (1/4 is the row above);
- T2 decay: async + T1 + T2 with gamma in {0, 0.5, 0.9, 0.99} (0.9 is the row above).

Seeds
-----
Every cell is trained with seeds 0, 1, 2 (the seed sets the initial weights and the data
order; the data split is fixed, so all rows are judged on one test set). Tables report mean
and [min, max] over seeds. The check cell (1F1B at the finest P) has 8 seeds, so that the
re-run check of :mod:`pipemare_lite.experiments.record` has a useful margin.

Reported per run (per seed)
---------------------------
final test accuracy and loss; divergence (a non-finite loss stops the run) and the step it
happened at; steps to reach the target test accuracy (ResNet 0.90, Transformer 0.80, fixed
in advance; evaluated every 14 resp. 8 steps; None if never); peak bytes by kind as the
executor measured them, summed over stages (weights, stash, T2 buffer, optimizer state,
activations); measured forward delays; the training loss and test curve; and the per-stage
evidence below. Per cell: simulated pipeline utilization of the row's schedule over the
whole run (:mod:`pipemare_lite.analysis.simulate`, F = 1, B = 2 cost units).

Per-stage evidence: where does async go wrong?
----------------------------------------------
The engine records every stage's update norm ``u_s(k) = ||w_s after update k - w_s
before||_2`` (float64; non-finite exactly when the update leaves a non-finite weight).
From it, per run: (a) the first update at which each stage turned non-finite; (b) each
stage's *blow-up onset*: the first update k with ``u_s(k) >= 10 * u_s^sync(k)`` (the
1F1B run of the same seed and lr: the same schedule of base lrs, so the ratio isolates
the pipeline) or non-finite; (c) each stage's *excess* ``rms_k u_s(k) / rms_k u_s^sync(k)``
over the updates both runs made; and (d) ``u_s`` as RMS over windows of the evaluation
period, for the figures. Comparing update indices is conservative for "the stalest stage
goes first": stage 0 makes its k-th update after every later stage made its k-th.

The claims and their tests (a verdict counts only where seed ranges separate)
------------------------------------------------------------------------------
A diverged seed counts as accuracy 0. For "X is at least Y - d": **held** when the worst
seed of X is >= the best seed of Y - d; **did not hold** when the best seed of X is < the
worst seed of Y - d; otherwise **not separable from noise**. Material difference d = 0.01.

1. async degrades at fine granularity: at the finest P, async < 1F1B - 0.01.
2. ... and more as stages get finer: async at the coarsest P > async at the finest P.
3. T1 recovers most of it: async + T1 above the midpoint of async and 1F1B (finest P).
4. T2 helps on its own: async + T2 > async (finest P).
5. T2 adds to T1: async + T1 + T2 > async + T1 (finest P).
6. warm-up adds to T1 + T2: PipeMare-W > async + T1 + T2 (finest P).
7. PipeMare-W reaches sync quality: PipeMare-W >= 1F1B - 0.01 (finest P).
8. memory: PipeMare-W's weights + stash + T2 buffer + optimizer bytes < PipeDream's, and
   its stash is 0 (measured bytes; no noise: held or did not hold).
9. utilization: async's simulated utilization > 1F1B's, near (N + P - 1) / N times it.
10. the stalest stages fail first: in async at the finest P, in every seed where some
    stage has a blow-up onset, the earliest onsets are all in the stalest quarter of the
    stages (held if so in every such seed, did not hold if in none, else not separable);
    and the stalest quarter's mean excess exceeds the freshest quarter's in every seed.
11-13. the Transformer with Adam at its finest P: claims 1, 3 and 7.

"Strictly above" comparisons (2-6) read: held when the worst seed of X > the best seed of
Y; did not hold when the best seed of X <= the worst seed of Y.

Budget and the quick variant
----------------------------
Sized from measured costs (about 1.1-1.5 CPU-s per ResNet epoch at P = 2-16, 2.6 CPU-s per
Transformer run): the full run is about 20 minutes on one idle core (one process, one torch
thread per run; the progress bar on stderr shows an ETA). Amended after the first quick run
measured 2-3 CPU-s per ResNet epoch with the evaluations and update norms (about 1,900
CPU-s for the full run): ``reproduce`` trains in 2 processes on a 2-core machine
(``--jobs``, one torch thread each; the numbers do not depend on it), about 16 minutes
of wall time when the machine is idle. (The stored run's own wall and CPU times are in its
``.meta.json``.) ``--quick`` (<= 3 minutes): the
ResNet at P in {4, 16} for 1 epoch with the lr grid 0.01, 0.02, 0.05; the Transformer at
P = 8 for 1 epoch with the grid 0.003, 0.01; no K or gamma sweep; the claims whose cells
it lacks are left out.

What was looked at before this design was fixed
-----------------------------------------------
The sync lr sweep at 3 and 5 epochs (ResNet) and at 1-4 epochs on the reverse and sort
tasks (Transformer: reverse was solved at every lr, so sort was chosen); costs of single
runs; one-epoch runs of the same 16-unit ResNet used to measure costs: at lr 0.005, async
at P = 16, 8, 4, 2 reached 0.29, 0.62, 0.66, 0.84 and PipeDream at P = 16 0.57; async at
P = 16 and lr 0.05 diverged (2BW and async + T2 one-epoch runs were timed, their accuracy
not read). They set no number above except that N = 2 gives large delays.

:func:`check` re-runs one seed of the check cell and compares it with the stored seeds,
bitwise on the machine that wrote the file and within the widened seed range elsewhere
(:func:`pipemare_lite.experiments.record.check_rerun`).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, replace

from pipemare_lite.experiments import record, stage_evidence

#: The rows of every granularity: label, method name, and fit() switches.
ROWS = (
    ("1F1B (sync)", "1f1b", {}),
    ("PipeDream (stash)", "pipedream", {}),
    ("2BW", "2bw", {}),
    ("async", "async", {"t1": False, "t2": False}),
    ("async + T1", "async", {"t1": True, "t2": False}),
    ("async + T2", "async", {"t1": False, "t2": True}),
    ("async + T1 + T2", "async", {"t1": True, "t2": True}),
    ("PipeMare-W (T1 + T2 + warm-up)", "pipemare", {"t1": True, "t2": True, "warmup": True}),
)
LABELS = tuple(label for label, _, _ in ROWS)
SYNC = LABELS[0]

#: torch threads of every run: one, so the numbers do not depend on the machine's cores
THREADS = 1

#: the row :func:`check` re-runs (a sweep of its own with more seeds: a margin from 3 seeds
#: is too wide to reject anything); sync at the finest P, so a wrong delay moves it far
CHECK_ROW = SYNC
#: compared within the widened seed range on a foreign machine ...
CHECK_METRICS = ("final_accuracy", "final_loss")
#: ... and exactly everywhere (no CPU changes step counts, bytes or measured delays)
CHECK_EXACT = ("steps", "memory_bytes", "diverged", "forward_delay_max")
#: per row, summarised over seeds (mean, min, max)
SUMMARY_METRICS = ("final_accuracy", "final_loss", "steps_to_target", "divergence_step")


@dataclass(frozen=True)
class ModelSetting:
    """One model's part of the experiment (see the module docstring)."""

    name: str
    dataset: str
    data_args: dict
    architecture: dict
    optimizer: str
    momentum: float | None
    batch_size: int
    num_microbatches: int
    epochs: int
    granularities: tuple[int, ...]
    lr_grid: tuple[float, ...]
    target_accuracy: float
    eval_every: int


RESNET = ModelSetting(
    name="resnet", dataset="digits", data_args={"seed": 0},
    architecture={"channels": 8, "blocks": 14}, optimizer="sgd", momentum=0.9,
    batch_size=16, num_microbatches=2, epochs=5, granularities=(2, 4, 8, 16),
    lr_grid=(0.01, 0.02, 0.05, 0.1, 0.2), target_accuracy=0.90, eval_every=14,
)  # fmt: skip
TRANSFORMER = ModelSetting(
    name="transformer", dataset="sort", data_args={"num_train": 2048, "num_test": 512, "seed": 0},
    architecture={"d_model": 32, "heads": 2, "layers": 6}, optimizer="adam", momentum=None,
    batch_size=32, num_microbatches=2, epochs=2, granularities=(2, 8),
    lr_grid=(0.001, 0.003, 0.01, 0.03), target_accuracy=0.80, eval_every=8,
)  # fmt: skip


@dataclass(frozen=True)
class PaperShapeConfig:
    """Every setting of the experiment (the JSON stores it)."""

    resnet: ModelSetting = RESNET
    transformer: ModelSetting = TRANSFORMER
    seeds: tuple[int, ...] = (0, 1, 2)
    check_seeds: tuple[int, ...] = tuple(range(8))
    fine_margin: float = 0.01
    material: float = 0.01
    t1_fraction: float = 0.25
    warmup_fraction: float = 0.2
    gamma: float = 0.9
    k_fractions: tuple[float, ...] = (1 / 16, 1 / 4, 1 / 2, 1.0)
    gammas: tuple[float, ...] = (0.0, 0.5, 0.9, 0.99)
    blowup_factor: float = 10.0
    two_bw_min_samples: int = 4

    def settings(self) -> tuple[ModelSetting, ...]:
        """The models in the order they run."""
        return (self.resnet, self.transformer)


FULL = PaperShapeConfig()
QUICK = replace(
    FULL,
    resnet=replace(RESNET, epochs=1, granularities=(4, 16), lr_grid=(0.01, 0.02, 0.05),
                   eval_every=7),
    transformer=replace(TRANSFORMER, epochs=1, granularities=(8,), lr_grid=(0.003, 0.01)),
    k_fractions=(),
    gammas=(),
)  # fmt: skip


def config_for(quick: bool) -> PaperShapeConfig:
    """The quick or the full configuration."""
    return QUICK if quick else FULL


def command_for(quick: bool) -> str:
    """The exact command that regenerates the stored files."""
    return "python -m pipemare_lite reproduce paper-shape" + (" --quick" if quick else "")


def setting_named(config: PaperShapeConfig, name: str) -> ModelSetting:
    """The :class:`ModelSetting` called ``name`` (``resnet`` or ``transformer``)."""
    for setting in config.settings():
        if setting.name == name:
            return setting
    raise ValueError(f"unknown model {name!r}; allowed: resnet, transformer")


# --------------------------------------------------------------------------- one run


def load_data(setting: ModelSetting):
    """The model's dataset, with its fixed split."""
    from pipemare_lite.training.datasets import digits, sequence_task

    if setting.dataset == "digits":
        return digits(**setting.data_args)
    return sequence_task(setting.dataset, **setting.data_args)


def build_model(setting: ModelSetting, data, seed: int):
    """The model with its initial weights drawn from ``seed``."""
    from pipemare_lite.training.models import small_resnet, tiny_transformer

    if setting.name == "resnet":
        return small_resnet(num_classes=data.num_classes, in_channels=1, image_size=8,
                            seed=seed, **setting.architecture)  # fmt: skip
    return tiny_transformer(vocab=data.num_classes, seq_len=data.input_shape[0], seed=seed,
                            **setting.architecture)  # fmt: skip


def planned_steps(setting: ModelSetting, data) -> int:
    """Steps (updates per stage) of a run that does not diverge."""
    return setting.epochs * (len(data.x_train) // setting.batch_size)


def row_definition(label: str) -> tuple[str, dict]:
    """The method and switches of a row label."""
    for name, method, switches in ROWS:
        if name == label:
            return method, switches
    raise ValueError(f"unknown row {label!r}; the rows are {list(LABELS)}")


def run_settings(
    config: PaperShapeConfig, setting: ModelSetting, label: str, P: int, total_steps: int,
    *, k_fraction: float | None = None, gamma: float | None = None,
) -> dict:
    """How a row runs at granularity P: method, T1/T2, N, K, gamma, warm-up, or why not.

    ``k_fraction`` and ``gamma`` replace the fixed T1 horizon and T2 decay (the sweeps).
    """  # fmt: skip
    method, switches = row_definition(label)
    t1, t2 = bool(switches.get("t1")), bool(switches.get("t2"))
    n, not_run = setting.num_microbatches, None
    if method == "2bw":  # two versions suffice only with N >= P - 1
        n = min(d for d in range(1, setting.batch_size + 1)
                if setting.batch_size % d == 0 and d >= max(n, P - 1))  # fmt: skip
        if setting.batch_size // n < config.two_bw_min_samples:
            not_run = (f"2BW needs N >= P - 1 = {P - 1}: {n} microbatches of "
                       f"{setting.batch_size // n} samples, over the budget")  # fmt: skip
    warmup = round(config.warmup_fraction * total_steps) if switches.get("warmup") else 0
    k_fraction = config.t1_fraction if k_fraction is None else k_fraction
    return {
        "method": method,
        "t1": t1,
        "t2": t2,
        "num_microbatches": n,
        "t1_k_fraction": k_fraction if t1 else None,
        "t1_horizon": max(1, round(k_fraction * total_steps)) if t1 else None,
        "gamma": (config.gamma if gamma is None else gamma) if t2 else None,
        "warmup_minibatches": warmup,
        "not_run": not_run,
    }


def train(setting: ModelSetting, data, spec: dict, P: int, lr: float, seed: int):
    """One seed of one cell: a :func:`~pipemare_lite.training.fit.fit` run; returns its History."""
    from pipemare_lite.training.fit import fit

    return fit(
        build_model(setting, data, seed),
        data,
        method=spec["method"],
        num_stages=P,
        num_microbatches=spec["num_microbatches"],
        batch_size=setting.batch_size,
        epochs=setting.epochs,
        lr=lr,
        optimizer=setting.optimizer,
        momentum=setting.momentum,
        lr_schedule="cosine",
        seed=seed,
        t1=spec["t1"],
        t2=spec["t2"],
        t1_anneal_updates=spec["t1_horizon"],
        gamma=spec["gamma"] if spec["gamma"] is not None else 0.9,
        warmup=spec["warmup_minibatches"],
        eval_every=setting.eval_every,
        progress=False,
    )


def outcome(seed: int, history, setting: ModelSetting) -> dict:
    """One seed's JSON-ready numbers; ``blowup_onset`` and ``excess`` need the sync run of
    the same seed and are filled in by the runner (None here, and for sync rows)."""
    norms = history.stage_update_norm
    width = setting.eval_every
    reached = next((e["step"] for e in history.evals
                    if e["accuracy"] >= setting.target_accuracy), None)  # fmt: skip
    return {
        "seed": seed,
        "final_accuracy": history.final_accuracy,
        "final_loss": history.final_loss,
        "diverged": history.diverged,
        "divergence_step": history.divergence_step,
        "divergence": history.divergence,
        "steps": history.steps,
        "steps_to_target": reached,
        "memory_bytes": history.memory_bytes,
        "forward_delay_max": history.forward_delay_max,
        "evals": [[e["step"], e["accuracy"], e["loss"]] for e in history.evals],
        "train_loss_windows": _rounded(stage_evidence.window_mean(history.loss, width)),
        "update_norm_windows": [_rounded(stage_evidence.window_rms(n, width)) for n in norms],
        "first_non_finite_update": stage_evidence.first_non_finite(norms),
        "blowup_onset": None,
        "excess": None,
    }


def _rounded(values: list[float]) -> list[float]:
    """Six significant digits: curves for figures, not numbers to compare bitwise."""
    return [float(f"{v:.6g}") if math.isfinite(v) else v for v in values]


def utilization(method: str, P: int, N: int, steps: int, warmup: int) -> dict:
    """Simulated utilization of the method's schedule over the planned run (F=1, B=2)."""
    from pipemare_lite.analysis.simulate import OpCosts, simulate_and_measure
    from pipemare_lite.methods import build_method_schedule, method_options

    schedule = build_method_schedule(
        method, P, N, num_minibatches=steps,
        options=method_options(method, warmup_minibatches=warmup),
    )  # fmt: skip
    _, result = simulate_and_measure(schedule, OpCosts(forward=1.0, backward=2.0))
    return {
        "utilization": result.utilization,
        "steady_state_utilization": result.steady_state_utilization,
    }


# --------------------------------------------------------------------------- the run


def cells(config: PaperShapeConfig, setting: ModelSetting, phase: str) -> list[tuple]:
    """(sweep, P, label, k_fraction, gamma, seeds) of the model's cells, in table order.

    ``phase`` "lr": the sync lr sweep (one cell per grid lr, at the coarsest P); "rest":
    every other cell, run at the chosen lr.
    """
    coarsest, finest = setting.granularities[0], setting.granularities[-1]
    if phase == "lr":
        return [("lr", coarsest, SYNC, None, None, config.seeds) for _ in setting.lr_grid]
    out = [("grid", P, label, None, None, config.seeds)
           for P in setting.granularities for label in LABELS]  # fmt: skip
    if setting.name == "resnet":
        out += [("k", finest, "async + T1", k, None, config.seeds) for k in config.k_fractions]
        out += [("gamma", finest, "async + T1 + T2", None, g, config.seeds)
                for g in config.gammas]  # fmt: skip
        out.append(("check", finest, SYNC, None, None, config.check_seeds))
    return out


def choose_lr(sweep: list[dict], margin: float) -> float:
    """The largest lr where no sync seed diverged and the mean accuracy is within ``margin``
    of the best lr's mean accuracy (``sweep``: entries with ``lr``, ``diverged_seeds`` and
    the ``final_accuracy`` summary over seeds)."""
    finite = [r for r in sweep
              if r["diverged_seeds"] == 0 and r["final_accuracy"]["mean"] is not None]  # fmt: skip
    if not finite:
        raise RuntimeError("sync diverged at every lr of the grid; widen the grid downwards")
    best = max(r["final_accuracy"]["mean"] for r in finite)
    return max(r["lr"] for r in finite if r["final_accuracy"]["mean"] >= best - margin)


def run(quick: bool = False, *, jobs: int = 1, log=sys.stderr, progress: bool = True) -> dict:
    """Run the experiment (module docstring): lr sweeps, rows, sweeps, claims.

    ``jobs``: processes that train at once (each with one torch thread); the numbers do not
    depend on it, only the wall time does.
    """
    from pipemare_lite.experiments.paper_shape_claims import claims
    from pipemare_lite.experiments.paper_shape_runner import CellRunner

    config = config_for(quick)
    started, cpu = time.perf_counter(), time.process_time()
    with CellRunner(config, quick, jobs=jobs, log=log, progress=progress) as runner:
        sweeps = {s.name: [runner.plan(s, *c, lr=lr) for c, lr in
                           zip(cells(config, s, "lr"), s.lr_grid)]
                  for s in config.settings()}  # fmt: skip
        runner.run_planned()
        models, chosen = {}, {}
        for setting in config.settings():
            rows = [runner.row(cell) for cell in sweeps[setting.name]]
            sweep = [{"lr": r["lr"], "final_accuracy": r["summary"]["final_accuracy"],
                      "diverged_seeds": r["diverged_seeds"]} for r in rows]  # fmt: skip
            chosen[setting.name] = choose_lr(sweep, config.fine_margin)
            models[setting.name] = {"lr_sweep": sweep, "sweep_rows": rows}
        rest = {s.name: [runner.plan(s, *c, lr=chosen[s.name]) for c in cells(config, s, "rest")]
                for s in config.settings()}  # fmt: skip
        runner.run_planned()
        all_rows = []
        for setting in config.settings():
            part = models[setting.name]
            rows = part.pop("sweep_rows") + [runner.row(cell) for cell in rest[setting.name]]
            all_rows += rows
            data = runner.data[setting.name]
            lr = chosen[setting.name]
            part.update(
                dataset={"name": data.name, "train": len(data.x_train),
                         "test": len(data.x_test), "provenance": data.provenance},
                planned_steps=planned_steps(setting, data),
                chosen_lr=lr,
                lr_rule=f"largest lr of the grid where no seed of 1F1B diverged and its mean "
                f"test accuracy over seeds is within {config.fine_margin} of the best lr's "
                f"(swept at P = {setting.granularities[0]})",
                sync_bitwise_same_at_every_P=runner.sync_same_at_every_p(setting, lr),
                cpu_seconds=round(sum(r["cpu_seconds"] for r in rows), 1),
            )  # fmt: skip
            models[setting.name] = {k: part[k] for k in (
                "dataset", "planned_steps", "lr_sweep", "chosen_lr", "lr_rule",
                "sync_bitwise_same_at_every_P", "cpu_seconds")}  # fmt: skip
        runs, child_cpu = runner.runs, runner.child_cpu
    results = {
        "experiment": "paper-shape",
        "quick": quick,
        "command": command_for(quick),
        "config": asdict(config),
        "torch_threads": THREADS,
        "models": models,
        "rows": all_rows,
        "runs": runs,
        "jobs": jobs,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "cpu_seconds": round(time.process_time() - cpu + child_cpu, 1),  # workers' too
    }
    results["claims"] = claims(results)
    return results


# --------------------------------------------------------------------------- the check


def find_row(results: dict, *, model: str, sweep: str, P: int, label: str,
             k_fraction: float | None = None, gamma: float | None = None) -> dict:
    """The stored row of one cell (``k_fraction``/``gamma`` pick a sweep's cell)."""
    for row in results["rows"]:
        if (row["model"], row["sweep"], row["P"], row["label"]) != (model, sweep, P, label):
            continue
        if k_fraction is not None and row["t1_k_fraction"] != k_fraction:
            continue
        if gamma is not None and row["gamma"] != gamma:
            continue
        return row
    raise ValueError(f"no stored row {model}/{sweep}/P={P}/{label!r}")


def check_row(results: dict) -> dict:
    """The stored check cell: 1F1B at the finest ResNet P, over ``check_seeds``."""
    P = config_for(results["quick"]).resnet.granularities[-1]
    return find_row(results, model="resnet", sweep="check", P=P, label=CHECK_ROW)


def rerun(results: dict, seed: int | None = None, *, method: str | None = None,
          switches: dict | None = None) -> dict:
    """Re-run one seed (default: the first) of the stored check cell, as :func:`run` ran it.

    ``method``/``switches`` replace the row's own, to perturb the method (a test of the
    check); the outcome holds only what training produced, so only its numbers can tell.
    """
    config = config_for(results["quick"])
    setting = config.resnet
    seed = config.check_seeds[0] if seed is None else seed
    P = setting.granularities[-1]
    with record.torch_threads(results.get("torch_threads", THREADS)):
        data = load_data(setting)
        spec = run_settings(config, setting, CHECK_ROW, P, planned_steps(setting, data))
        if method is not None:
            spec["method"] = method
        if switches:
            spec.update(switches)
        history = train(setting, data, spec, P, results["models"]["resnet"]["chosen_lr"], seed)
    return outcome(seed, history, setting)


def compare(results: dict, meta: dict, again: dict, *,
            fingerprint: dict | None = None) -> record.CheckReport:
    """Check a re-run seed of the check cell against its stored seeds (bitwise or range).

    ``fingerprint``: this machine's (default: measured now); pass another one to see what
    the check does on a foreign machine.
    """
    row = check_row(results)
    if fingerprint is None:
        fingerprint = record.machine_fingerprint(results.get("torch_threads", THREADS))
    test_size = results["models"]["resnet"]["dataset"]["test"]
    return record.check_rerun(
        row["seeds"],
        again,
        stored_fingerprint=meta["fingerprint"],
        fingerprint=fingerprint,
        metrics=CHECK_METRICS,
        exact_keys=CHECK_EXACT,
        floors={"final_accuracy": 1 / test_size},  # one test sample
        what=f"paper-shape{' (quick)' if results['quick'] else ''} resnet {CHECK_ROW!r} "
        f"P={row['P']} seed {again['seed']} at lr {row['lr']}",
    )


def check(results: dict, meta: dict) -> record.CheckReport:
    """Re-run the first seed of the check cell and compare it with the stored seeds."""
    return compare(results, meta, rerun(results))


def markdown(results: dict) -> str:
    """The stored results as the tables chapter 10 shows (see paper_shape_table)."""
    from pipemare_lite.experiments.paper_shape_table import markdown as table

    return table(results)
