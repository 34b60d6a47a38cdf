"""The map: where asynchronous pipeline training works, across learning rates (issue 43;
chapter 10). Designed, and this docstring written, before any of its runs.

Why. ``paper-shape`` (:mod:`.paper_shape`) judges every asynchronous method at one learning
rate per study: the largest grid lr within 0.01 of sync's best, which was the top of its
grid in 3 of 4 studies, the edge of what synchronous training tolerates. A verdict at one
lr is a point. This experiment makes the lr a factor: every method at every lr of a grid
that spans what sync tolerates, at two granularities, with chapter 06's stability bound
asked *before* the runs where each method should stop working.

Studies (each runs and is stored on its own: ``reproduce lr-map --study NAME``)
----------------------------------------------------------------------------------
``resnet_lr_map``: paper-shape's ``resnet`` network and data (:func:`small_resnet`, 8
channels, 14 blocks = 16 units; digits 1,348 / 449; batch 16 = N 2; SGD momentum 0.9 on a
cosine base; **5 epochs = 420 updates**). Factors: **P in {8, 16}** and **lr in {0.005, 0.01,
0.02, 0.05, 0.1}**. The grid holds sync's best lr of paper-shape's sweep at this length
(0.02), one below it (0.01), the largest it tolerated (0.05, within 0.015 of the best), one
where it fell apart (0.1: 0.563) and one further below (0.005) where the asynchronous rows
should train if they train anywhere. Rows: 1F1B (sync's numbers do not depend on P:
run at P = 8 only and compared with both P), async, async + T1, async + T1 + T2, PipeMare-W
and **PipeMare-W with the momentum-aware T1** (:mod:`pipemare_lite.methods.
momentum_rescheduling`, ``pipemare-m``), T1 annealed over the whole asynchronous phase,
gamma 0.9, warm-up 1/5 of the run (paper-shape's fixed settings). Seeds 0, 1, 2 in every
cell (the budget; 8 would be 2.7x). Sharpness: 1F1B seed 0 at each (P, lr) trained again
measuring each stage's sharpness (chapter 07's :func:`stage_sharpness`, 10 power iterations
on 256 fixed training samples) every 84 updates; these runs must equal 1F1B's bitwise.

``transformer_long``: paper-shape's ``transformer`` network and data (d 32, 2 heads, 6
blocks = 8 units, ``sort``; Adam on a cosine base, no lr warm-up; batch 32 = N 2) at P = 8,
**32 epochs = 2,048 updates** (2x the stored study's 1,024: the map's second axis here is the
run length, the stored study giving the first point), at **lr 0.03**, the stored study's lr,
where PipeMare-W collapsed at the switch (an lr axis, 0.01 with 3 seeds, was planned and cut
for the budget before any run: a Transformer run measured 0.08 CPU-s per update on the
loaded machine, not 0.03). Rows: 1F1B, PipeMare-W, PipeMare-W with the momentum-aware T1,
**8** seeds (0-7) each. Every run measures each stage's
Adam-preconditioned sharpness (the top eigenvalue of ``D^(1/2) H_s D^(1/2)``, ``D = 1 /
(sqrt(v_hat) + eps)`` from the stage optimizer's own second moment: :func:`adam_scales`) at
the switch W (the end of the warm-up: update 410 of 2,048) and 16 updates later, on the run
itself (the sync run measures at the same updates).

``resnet_long_lr_map`` (amendment of 2026-12-06, written before any of its runs): the map
at paper-shape's long ResNet length, **20 epochs = 1,680 updates**, where the stored
long study changed the run length and the lr at once. **P = 16** (that study's P), **lr in
{0.01, 0.02, 0.05}** (its grid: sync's best 0.01, the issue's probe at 0.02, the stored
study's 0.05), rows 1F1B, async, async + T1, async + T1 + T2, PipeMare-W and the
momentum-aware PipeMare-W, seeds 0, 1, 2, evaluation every 42 updates. No sharpness runs
(``sharpness = "none"``: a P = 16 sharpness run over 1,680 updates costs about 6 minutes
per lr; the classifier is scored on ``resnet_lr_map``, whose sharpness runs exist).

Seeds of the claim cells (amendment of 2026-12-06, before these runs): the issue asks for 8
seeds in the cells that decide a claim. In ``resnet_lr_map`` those are the lrs at or below
sync's best (0.005, 0.01, 0.02: where an asynchronous row trained in any seed of the first
three); every row and P there runs seeds 0-7; 0.05 and 0.1 keep 3 (every asynchronous
seed but PipeMare-W's diverged there). In ``transformer_long`` the lr axis cut for the
budget is restored at 3 seeds: **lr in {0.003, 0.01, 0.03}** (one below sync's best of
paper-shape's sweep, the best, the largest tolerated), 0.03 keeping its 8 seeds. Runs
already stored are reused, not run again (the key of a run names its row, P, lr, seed and
whether it measures; a study reuses a stored run only where its length, evaluation,
sharpness plan and base are unchanged). The pre-registered test (a) stays at lr 0.03,
where it was registered; at the other lrs its comparison is reported beside it, as
exploration.

Quality, divergence, intervals: as paper-shape (its docstring): a seed's quality is its
final test accuracy, 0 when it diverged (non-finite loss, or the last window's mean training
loss above 3x the first window's); 95 % Student-t intervals of row means; claims compare
means through a 95 % Welch interval of their difference (:data:`~.paper_shape_claims.
VERDICT_RULE`); **uninformative** where every seed of every compared row diverged (a
difference of 0 - 0 says nothing).

What is reported
----------------
1. **The phase diagram**: per study, row, P and lr, the mean quality minus sync's mean at
   the same lr (sync's own cells: its quality), the interval, and the diverged seeds.
2. **Verdicts by lr** (ResNet, at each P and lr): async materially worse than 1F1B (d =
   0.01); async + T1 above the midpoint of async and 1F1B; T2 adds to T1 (T1 + T2 > T1);
   the warm-up adds (PipeMare-W > T1 + T2); PipeMare-W reaches sync within delta = 0.01, a
   one-sided non-inferiority test at 5 % (the 90 % interval of PipeMare-W - 1F1B above
   -delta). Transformer, at each lr: PipeMare-W reaches sync within delta; and the
   pre-registered test below.
3. **The prediction, scored as a classifier.** For every asynchronous cell and seed of
   ``resnet_lr_map``: stage s at update k runs at ``lr_s(k)`` (the cosine base times the
   row's factor: 1 for async; ``tau_s ** -p_k`` for T1 rows; PipeMare-W synchronous for W
   updates, with delay 0, then T1's factor; ``tau_eff ** -p_k`` for the momentum-aware row)
   with delay ``tau_s`` (measured from the schedule) and sharpness ``lam_s(k)`` (the
   sharpness run of the same P and lr, the latest measurement at or before k). Chapter 06's
   heavy-ball bound with momentum 0.9 predicts the seed **diverges** iff some stage at some
   update has ``lr_s(k) lam_s(k) >= b(tau_s, 0.9)``; the predicted onset is the first such
   update, the predicted stage the one that crosses first (the largest ratio on a tie).
   Measured: the seed's divergence flag; its **loss onset**, the first update of the first
   window (42 updates) whose mean training loss exceeds 2x the smallest earlier window mean
   (None: never); its first stage, the stage with the earliest non-finite update norm
   (non-finite runs only). Reported: the 2x2 confusion table (predicted / measured
   diverged), and in the true positives the predicted vs measured stage. **The theory fails**
   as a classifier if its accuracy is no better than always answering the majority class; it
   **holds** if precision and recall of "diverges" are both >= 0.8; else it is "partly".
   For the Transformer the same rule with Adam's preconditioned sharpness at the switch,
   ``lr_s(W) (1 - beta1) lam~_s >= b(tau_s, beta1)`` (Adam is heavy-ball with momentum
   beta1 and step ``lr (1 - beta1)`` on the preconditioned problem), against a **collapse
   at the switch**: a loss onset within 10 % of the run after W.
4. **The momentum-aware T1's pre-registered test.** Hypothesis (from chapter 06's bound:
   with momentum 0.9 a delay of one update costs 38x the stable step, and T1 divides by at
   most the delay): replacing T1's ``tau`` by ``b(0, m) / b(tau, m)`` removes PipeMare-W's
   collapse at the switch under Adam, at no cost on the ResNet. Tests, fixed now: (a)
   Transformer, lr 0.03, 8 seeds: PipeMare-W (momentum-aware) > PipeMare-W, and fewer seeds
   with a collapse at the switch; (b) ResNet, every (P, lr) cell where PipeMare-W trained
   (no seed diverged): PipeMare-W (momentum-aware) >= PipeMare-W - 0.01 (non-inferiority at
   5 %). Reported whatever the answer, with intervals; "removes the collapse" holds only if
   (a) holds, "at no cost" only if (b) holds in every such cell.

Budget and what was looked at before: single runs cost about 0.05 CPU-s per update (P = 16
ResNet) and 0.03 (Transformer); measured before the design: the ResNet sync lr sweep at 420
updates (stored in paper-shape), the issue's probes (async + T1 at P = 16 over 1,680 updates
trains at 0.02 and 0.01, diverges in 2 of 3 seeds at 0.05; the Transformer's collapse at the
switch at 0.03). ``--quick``: ``resnet_lr_map`` at P = 8 for 1 epoch, lr {0.01, 0.05}, 2
seeds; ``transformer_long`` for 4 epochs (256 updates), lr 0.03, 2 seeds; minutes.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from pipemare_lite.experiments import paper_shape_design as design
from pipemare_lite.experiments import record
from pipemare_lite.experiments.sweep import read_partial, rewrite_partial, run_pending

SYNC, ASYNC, T1, T1T2, PMW = design.SYNC, design.ASYNC, design.T1, design.T1T2, design.PMW
PMW_M = "PipeMare-W, momentum-aware T1"

#: label, method, switches (as paper-shape's rows), plus the momentum-aware row
ROWS = (
    (SYNC, "1f1b", {}),
    (ASYNC, "async", {}),
    (T1, "async", {"t1": True}),
    (T1T2, "async", {"t1": True, "t2": True}),
    (PMW, "pipemare", {"t1": True, "t2": True, "warmup": True}),
    (PMW_M, "pipemare-m", {"t2": "in the method", "warmup": True}),
)

#: the settings paper-shape fixed and this experiment keeps (gamma, warm-up, loss rule)
BASE = design.FULL
ONSET_FACTOR = 2.0  # a window's mean loss above this times the smallest earlier one
COLLAPSE_WINDOW = 0.1  # a loss onset within this fraction of the run after W: at the switch
SHARPNESS_AFTER_SWITCH = 16  # updates after W of the second Adam-sharpness measurement


@dataclass(frozen=True)
class MapStudy:
    """One study of the map (module docstring): a paper-shape study's model and data, with
    its own length, granularities, lr grid, rows and seeds."""

    name: str
    base: str  # the paper-shape study whose model, data and optimizer it takes
    epochs: int
    granularities: tuple[int, ...]
    lr_grid: tuple[float, ...]
    rows: tuple[str, ...]
    seeds: tuple[int, ...]
    #: lr -> seeds, where a cell runs more (or other) seeds than ``seeds``
    seeds_at: tuple[tuple[float, tuple[int, ...]], ...] = ()
    eval_every: int = 42
    sharpness: str = "hessian"  # "hessian": sync sharpness runs; "adam": at the switch;
    #                             "none": no sharpness measured
    sharpness_every: int = 42

    def study(self) -> design.Study:
        """The paper-shape :class:`~.paper_shape_design.Study` the runs train with."""
        return replace(BASE.study(self.base), name=self.name, epochs=self.epochs,
                       granularities=self.granularities, lr_grid=self.lr_grid, rows=self.rows,
                       eval_every=self.eval_every, curvature_every=self.sharpness_every,
                       curvature_seeds=(), claim_rows=(), horizon_cells=(), warmup_cells=(),
                       check_cell=False, lr_warmup_fraction=0.0)

    def seeds_for(self, lr: float) -> tuple[int, ...]:
        """The seeds of the cells at ``lr``."""
        return dict(self.seeds_at).get(lr, self.seeds)


ALL_ROWS = tuple(label for label, _, _ in ROWS)
STUDIES = (
    MapStudy("resnet_lr_map", "resnet", epochs=5, granularities=(8, 16),
             lr_grid=(0.005, 0.01, 0.02, 0.05, 0.1), rows=ALL_ROWS, seeds=(0, 1, 2),
             seeds_at=tuple((lr, tuple(range(8))) for lr in (0.005, 0.01, 0.02)),
             sharpness_every=84),
    MapStudy("transformer_long", "transformer", epochs=32, granularities=(8,),
             lr_grid=(0.003, 0.01, 0.03), rows=(SYNC, PMW, PMW_M), seeds=(0, 1, 2),
             seeds_at=((0.03, tuple(range(8))),), eval_every=64, sharpness="adam"),
    MapStudy("resnet_long_lr_map", "resnet", epochs=20, granularities=(16,),
             lr_grid=(0.01, 0.02, 0.05), rows=ALL_ROWS, seeds=(0, 1, 2), sharpness="none"),
)
QUICK_STUDIES = (
    replace(STUDIES[0], epochs=1, granularities=(8,), lr_grid=(0.01, 0.05), seeds=(0, 1),
            seeds_at=(), rows=(SYNC, ASYNC, T1, PMW, PMW_M), eval_every=14,
            sharpness_every=14),
    replace(STUDIES[1], epochs=4, lr_grid=(0.03,), seeds=(0, 1), seeds_at=(), eval_every=16),
    replace(STUDIES[2], epochs=1, lr_grid=(0.02,), seeds=(0,), rows=(SYNC, T1, PMW),
            eval_every=14),
)


def studies_for(quick: bool) -> tuple[MapStudy, ...]:
    """The quick or the full studies."""
    return QUICK_STUDIES if quick else STUDIES


def map_study(name: str, quick: bool) -> MapStudy:
    """The study called ``name`` (ValueError naming the allowed ones)."""
    for study in studies_for(quick):
        if study.name == name:
            return study
    allowed = ", ".join(s.name for s in studies_for(quick))
    raise ValueError(f"unknown lr-map study {name!r}; allowed: {allowed}")


def command_for(quick: bool, study: str | None = None) -> str:
    """The exact command that regenerates the stored files (one study, or all)."""
    return ("python -m pipemare_lite reproduce lr-map" + (" --quick" if quick else "")
            + (f" --study {study}" if study else ""))


# --------------------------------------------------------------------------- one run


def row_definition(label: str) -> tuple[str, dict]:
    """The method and switches of a row label."""
    for name, method, switches in ROWS:
        if name == label:
            return method, switches
    raise ValueError(f"unknown row {label!r}; the rows are {list(ALL_ROWS)}")


def run_settings(label: str, study: design.Study, total_steps: int) -> dict:
    """How a row runs (the keys :func:`~.paper_shape_design.train` reads)."""
    method, switches = row_definition(label)
    warmup = round(BASE.warmup_fraction * total_steps) if switches.get("warmup") else 0
    return {
        "method": method, "t1": bool(switches.get("t1") is True),
        "t2": bool(switches.get("t2") is True), "num_microbatches": study.num_microbatches,
        "t1_k_fraction": None, "t1_horizon": None,
        "gamma": BASE.gamma if switches.get("t2") else None,
        "warmup_minibatches": warmup, "warmup_fraction": BASE.warmup_fraction if warmup else None,
        "lr_warmup": 0, "not_run": None,
    }  # fmt: skip


def loss_onset(window_means: list[float], width: int, factor: float = ONSET_FACTOR):
    """The first update of the first window whose mean training loss is non-finite or above
    ``factor`` times the smallest earlier window mean (None: no such window)."""
    smallest = math.inf
    for index, value in enumerate(window_means):
        if value is None or not math.isfinite(value) or value > factor * smallest:
            return index * width
        smallest = min(smallest, value)
    return None


@dataclass(frozen=True)
class Job:
    """One training run of the map."""

    quick: bool
    study: str
    label: str
    P: int
    lr: float
    seed: int
    measure: bool = False  # the ResNet's sync sharpness run

    @property
    def key(self) -> str:
        """What identifies the run's numbers (also its line in the partial file)."""
        return f"{self.label}|P={self.P}|lr={self.lr}|seed={self.seed}|measure={self.measure}"


_DATA: dict = {}


def run_job(job: Job) -> dict:
    """Train one run (in whichever process) and return its JSON-ready outcome."""
    mstudy = map_study(job.study, job.quick)
    study = mstudy.study()
    cpu = time.process_time()
    with record.torch_threads(design.THREADS):
        if study.model not in _DATA:
            _DATA[study.model] = design.load_data(study)
        data = _DATA[study.model]
        spec = run_settings(job.label, study, design.planned_steps(study, data))
        extra = {}
        if job.measure:
            history, extra["sharpness"] = design.train_measuring_sharpness(
                study, data, spec, job.P, job.lr, job.seed)
        elif mstudy.sharpness == "adam":
            history, extra["adam_sharpness"] = train_measuring_adam_sharpness(
                study, data, spec, job.P, job.lr, job.seed)
        else:
            history = design.train(study, data, spec, job.P, job.lr, job.seed)
    outcome = design.outcome(job.seed, history, study, BASE.loss_blowup)
    outcome["loss_onset"] = loss_onset(outcome["train_loss_windows"], study.eval_every)
    outcome["losses_digest"] = _digest(history.loss)
    return {**outcome, **extra, "cpu_seconds": round(time.process_time() - cpu, 2)}


def _digest(values) -> str:
    """A short hash of a run's float losses: equal runs, equal digests (bitwise checks)."""
    import hashlib

    return hashlib.sha256(json.dumps([float(v).hex() for v in values]).encode()).hexdigest()[:16]


def train_measuring_adam_sharpness(study, data, spec, P, lr, seed):
    """:func:`~.paper_shape_design.train` that measures each stage's Adam-preconditioned
    sharpness at the switch W and ``SHARPNESS_AFTER_SWITCH`` updates later, on this run's
    own weights and optimizer state; returns ``(history, [[step, [lam~_s]], ...])``.

    The measurement forks the RNG and touches no gradient or optimizer state, so the
    training is the run :func:`train` makes (the sync rows' digests must agree)."""
    import torch

    from pipemare_lite.training.curvature import adam_scales, stage_sharpness
    from pipemare_lite.training.executors import EXECUTORS, local_executor

    switch = _switch_update(spec, study, data)
    at = {switch, switch + SHARPNESS_AFTER_SWITCH}
    x, y = data.x_train[: study.curvature_samples], data.y_train[: study.curvature_samples]
    seen: dict = {}
    name = "lr-map-observed"

    def observed(*args, **kwargs):
        seen["engine"] = local_executor(*args, **kwargs)
        return seen["engine"]

    measured: list = []

    def measure(step: int, *_) -> None:
        if step not in at:
            return
        workers = seen["engine"].workers
        stages = [w.module for w in workers]
        scales = [adam_scales(w.optimizer, [p for p in w.module.parameters() if p.requires_grad])
                  for w in workers]
        with torch.random.fork_rng(devices=[]):
            values = stage_sharpness(stages, x, y, iterations=study.curvature_iterations,
                                     scales=scales)
        measured.append([step, [float(f"{v:.6g}") for v in values]])

    EXECUTORS[name] = observed
    try:
        from pipemare_lite.training.loop import fit

        history = fit(
            design.build_model(study, data, seed), data, method=spec["method"], num_stages=P,
            num_microbatches=spec["num_microbatches"], batch_size=study.batch_size,
            epochs=study.epochs, lr=lr, optimizer=study.optimizer, momentum=study.momentum,
            lr_schedule=study.lr_schedule, lr_warmup=spec["lr_warmup"], seed=seed,
            t1=spec["t1"], t2=spec["t2"], gamma=spec["gamma"] or BASE.gamma,
            warmup=spec["warmup_minibatches"], eval_every=study.eval_every, progress=False,
            on_step=measure, executor=name)
    finally:
        EXECUTORS.pop(name, None)
    return history, measured


def _switch_update(spec: dict, study, data) -> int:
    """W: the first asynchronous update (a sync row measures at the same update as the
    warm-up rows of its study)."""
    return spec["warmup_minibatches"] or round(BASE.warmup_fraction
                                               * design.planned_steps(study, data))


# --------------------------------------------------------------------------- planning


def jobs_of(mstudy: MapStudy, quick: bool) -> list[Job]:
    """Every run of one study, costliest first."""
    jobs = []
    for lr in mstudy.lr_grid:
        for label in mstudy.rows:
            for P in (mstudy.granularities[:1] if label == SYNC else mstudy.granularities):
                jobs += [Job(quick, mstudy.name, label, P, lr, s) for s in mstudy.seeds_for(lr)]
        if mstudy.sharpness == "hessian":
            jobs += [Job(quick, mstudy.name, SYNC, P, lr, mstudy.seeds_for(lr)[0], True)
                     for P in mstudy.granularities]
    return sorted(jobs, key=lambda j: -(j.P + 2) * (2 if j.measure else 1))


def partial_path(out: Path, quick: bool, study: str) -> Path:
    """Where a study's finished runs are kept while it runs (one JSON object a line)."""
    return Path(out) / f"lr_map{'_quick' if quick else ''}.{study}.partial.jsonl"


#: the design fields a stored run's numbers depend on beyond its key (row, P, lr, seed, measure)
RUN_FIELDS = ("base", "epochs", "eval_every", "sharpness", "sharpness_every")


def reusable_runs(stored: dict | None, mstudy: MapStudy) -> dict[str, dict]:
    """The stored study's runs this design would run again identically, by key: all of them
    where the fields in :data:`RUN_FIELDS` are unchanged (a study that gained seeds, lrs or
    rows), none otherwise."""
    if not stored:
        return {}
    design_now = asdict(mstudy)
    if any(stored["design"].get(f) != design_now[f] for f in RUN_FIELDS):
        return {}
    return {Job(False, mstudy.name, r["label"], r["P"], r["lr"], r["seed"], r["measure"]).key:
            r["outcome"] for r in stored["runs"]}


def run_study(mstudy: MapStudy, quick: bool, *, jobs: int, out: Path, log=sys.stderr,
              stored: dict | None = None) -> dict:
    """Train a study's runs (reusing the ``stored`` study's runs this design keeps, resuming
    from its partial file) and assemble its results."""
    from pipemare_lite.files import json_ready

    started = time.perf_counter()
    partial = partial_path(out, quick, mstudy.name)
    partial.parent.mkdir(parents=True, exist_ok=True)
    reused = reusable_runs(stored, mstudy)
    done = {**reused, **read_partial(partial)}
    if partial.is_file():  # a run stopped mid-line leaves a torn tail: keep whole lines only
        rewrite_partial(partial, done)
    todo = [j for j in jobs_of(mstudy, quick) if j.key not in done]
    print(f"lr-map {mstudy.name}: {len(done)} runs already done, {len(todo)} to run "
          f"({jobs} processes)", file=log, flush=True)

    def report(job: Job, outcome: dict) -> None:
        state = "diverged" if outcome["diverged"] else f"quality {outcome['quality']:.3f}"
        print(f"  [{len(done)}] {job.key}: {state} ({outcome['cpu_seconds']} CPU-s)",
              file=log, flush=True)

    # the sweep tool's runner: each finished run appended to the partial file as it ends
    run_pending(todo, run_job, key=lambda job: job.key, jobs=jobs, partial=partial, done=done,
                report=report)
    study = mstudy.study()
    runs = [{**asdict(j), "outcome": done[j.key]} for j in jobs_of(mstudy, quick)]
    for run in runs:
        run.pop("quick")
        run["outcome"] = json.loads(json.dumps(json_ready(run["outcome"])))
    return {
        "design": asdict(mstudy),
        "planned_steps": design.planned_steps(study, design.load_data(study)),
        "num_microbatches": study.num_microbatches,
        "momentum": study.momentum,
        "optimizer": study.optimizer,
        "runs": runs,
        "command": command_for(quick, mstudy.name),
        # the wall time of every invocation that trained this study's runs (a reused study
        # adds this one's to the stored study's)
        "wall_seconds": round(time.perf_counter() - started
                              + (stored.get("wall_seconds", 0.0) if reused else 0.0), 1),
        "cpu_seconds": round(sum(r["outcome"]["cpu_seconds"] for r in runs), 1),
    }


def run(quick: bool = False, *, jobs: int = 1, study: str | None = None, out="data/results",
        previous: dict | None = None, log=sys.stderr, progress: bool = True) -> dict:
    """Run one study (``study``) or all, merged into ``previous`` stored results; the
    assessment (phase cells, verdicts by lr, prediction, pre-registered test) is recomputed
    from every stored study (:mod:`.lr_map_assess`)."""
    from pipemare_lite.experiments.lr_map_assess import assess

    chosen = [map_study(study, quick)] if study else list(studies_for(quick))
    results = dict(previous or {})
    if results.get("quick", quick) != quick:
        results = {}
    results.update(experiment="lr-map", quick=quick, torch_threads=design.THREADS,
                   command=command_for(quick),
                   config={"seeds": sorted({s for st in studies_for(quick)
                                            for lr in st.lr_grid for s in st.seeds_for(lr)}),
                           "base": {"gamma": BASE.gamma, "warmup_fraction":
                                    BASE.warmup_fraction, "loss_blowup": BASE.loss_blowup,
                                    "confidence": BASE.confidence, "material": BASE.material},
                           "onset_factor": ONSET_FACTOR, "collapse_window": COLLAPSE_WINDOW})
    results.setdefault("studies", {})
    for mstudy in chosen:
        results["studies"][mstudy.name] = run_study(
            mstudy, quick, jobs=jobs, out=Path(out), log=log,
            stored=results["studies"].get(mstudy.name))
        results["studies"][mstudy.name]["fingerprint"] = record.machine_fingerprint(
            design.THREADS)
    results["cpu_seconds"] = round(sum(s["cpu_seconds"] for s in results["studies"].values()), 1)
    results["assessment"] = assess(results)
    return results


def finished_partial_files(out, quick: bool, study: str | None) -> list[Path]:
    """The partial files a finished run may delete (after the results are written)."""
    names = [study] if study else [s.name for s in studies_for(quick)]
    return [partial_path(Path(out), quick, n) for n in names]



def reassess(results: dict) -> dict:
    """The stored results with the assessment recomputed from the stored runs."""
    from pipemare_lite.experiments.lr_map_assess import assess

    return {**results, "assessment": assess(results)}


def markdown(results: dict) -> str:
    """The stored results as tables (:func:`.lr_map_assess.markdown`)."""
    from pipemare_lite.experiments.lr_map_assess import markdown as tables

    return tables(results)


# --------------------------------------------------------------------------- the check

#: what ``--check`` re-runs: 1F1B at the ResNet map's first P, at sync's best lr (quick: the
#: grid's first), seed 0
CHECK_STUDY, CHECK_LABEL = "resnet_lr_map", SYNC
CHECK_METRICS = ("final_accuracy", "final_loss")
CHECK_EXACT = ("steps", "memory_bytes", "diverged", "forward_delay_max")


def _check_cell(quick: bool) -> tuple[int, float]:
    study = map_study(CHECK_STUDY, quick)
    return study.granularities[0], (study.lr_grid[0] if quick else 0.02)


def check_row(results: dict) -> dict:
    """The stored check cell: its settings and every seed's outcome."""
    P, lr = _check_cell(results["quick"])
    runs = [r for r in results["studies"][CHECK_STUDY]["runs"]
            if r["label"] == CHECK_LABEL and r["P"] == P and r["lr"] == lr and not r["measure"]]
    if not runs:
        raise KeyError(f"no stored {CHECK_LABEL!r} runs at P={P}, lr={lr} in {CHECK_STUDY}")
    return {"P": P, "lr": lr, "seeds": [r["outcome"] for r in runs]}


def rerun(results: dict, seed: int | None = None) -> dict:
    """Re-run one seed (default: the first stored) of the check cell, as the study ran it."""
    row = check_row(results)
    seed = row["seeds"][0]["seed"] if seed is None else seed
    return run_job(Job(results["quick"], CHECK_STUDY, CHECK_LABEL, row["P"], row["lr"], seed))


def compare(results: dict, meta: dict, again: dict, *,
            fingerprint: dict | None = None) -> record.CheckReport:
    """A re-run seed of the check cell against its stored seeds: bitwise where the kernel
    fingerprint equals the study's writer's, else within the stored seeds' prediction interval."""
    row = check_row(results)
    stored = results["studies"][CHECK_STUDY].get("fingerprint") or meta["fingerprint"]
    if fingerprint is None:
        fingerprint = record.machine_fingerprint(design.THREADS)
    def numbers(outcome: dict) -> dict:  # what training computed: not the CPU time it took
        return {k: v for k, v in outcome.items() if k != "cpu_seconds"}

    return record.check_rerun(
        [numbers(s) for s in row["seeds"]], numbers(again), stored_fingerprint=stored,
        fingerprint=fingerprint,
        metrics=CHECK_METRICS, exact_keys=CHECK_EXACT, floors={"final_accuracy": 1 / 449},
        what=f"lr-map{' (quick)' if results['quick'] else ''} {CHECK_STUDY} {CHECK_LABEL!r} "
        f"P={row['P']} lr={row['lr']} seed {again['seed']}")


def check(results: dict, meta: dict) -> record.CheckReport:
    """Re-run the first seed of the check cell and compare it with the stored seeds."""
    return compare(results, meta, rerun(results))
