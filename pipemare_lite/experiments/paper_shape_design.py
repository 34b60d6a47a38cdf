"""The design of the paper-shape experiment, fixed before it ran (chapters 07-10).

What :mod:`pipemare_lite.experiments.paper_shape` runs, and why, is told in that module's
docstring; this module holds the design itself: the rows (label, method, switches), the
studies (model, data, run length, lr grid, seeds), the full and quick configurations, the
cells each phase plans, one seed's training and its outcome. The runner
(:mod:`.paper_shape_runner`) and the tables (:mod:`.paper_shape_table`) read it; neither
it nor they import the experiment's driver.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from pipemare_lite.experiments import record, stage_evidence

#: The rows: label, method name, and fit() switches.
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
SYNC, PIPEDREAM, TWO_BW, ASYNC, T1, T2, T1T2, PMW = LABELS

#: torch threads of every run: one, so the numbers do not depend on the machine's cores
THREADS = 1

#: the row :func:`check` re-runs: sync at the finest P of ``resnet`` (a wrong delay moves it far)
CHECK_ROW = SYNC
#: compared within the stored seeds' prediction interval on a foreign machine ...
CHECK_METRICS = ("final_accuracy", "final_loss")
#: ... and exactly everywhere (no CPU changes step counts, bytes or measured delays)
CHECK_EXACT = ("steps", "memory_bytes", "diverged", "forward_delay_max")
#: per row, summarised over seeds
SUMMARY_METRICS = ("quality", "final_loss", "steps_to_target", "divergence_step")


@dataclass(frozen=True)
class Study:
    """One model setting with its run length, lr sweep, rows and seeds (module docstring)."""

    name: str
    model: str  # "resnet" or "transformer": the network and data
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
    rows: tuple[str, ...]
    target_accuracy: float
    eval_every: int
    lr_schedule: str = "cosine"  # the base schedule; T1 multiplies on top of it
    lr_warmup_fraction: float = 0.0
    sweep_P: int = 2
    #: rows trained with ``claim_seeds`` (the others with the config's ``seeds``)
    claim_rows: tuple[str, ...] = ()
    #: (label, K as a fraction of the run) cells beside the rows, at the finest P
    horizon_cells: tuple[tuple[str, float], ...] = ()
    #: PipeMare-W's warm-up as a fraction of the run, beside the row's
    warmup_cells: tuple[float, ...] = ()
    #: 1F1B seeds re-trained with the stages' sharpness measured every ``curvature_every``
    curvature_seeds: tuple[int, ...] = ()
    curvature_every: int = 0
    curvature_samples: int = 256
    curvature_iterations: int = 10
    check_cell: bool = False


RESNET = dict(
    model="resnet", dataset="digits", data_args={"seed": 0},
    architecture={"channels": 8, "blocks": 14}, optimizer="sgd", momentum=0.9,
    batch_size=16, num_microbatches=2, target_accuracy=0.90,
)  # fmt: skip
TRANSFORMER = dict(
    model="transformer", dataset="sort", data_args={"num_train": 2048, "num_test": 512, "seed": 0},
    architecture={"d_model": 32, "heads": 2, "layers": 6}, optimizer="adam", momentum=None,
    batch_size=32, num_microbatches=2, target_accuracy=0.80,
)  # fmt: skip
TRANSFORMER_ROWS = (SYNC, PIPEDREAM, ASYNC, T1, T1T2, PMW)

STUDIES = (
    Study(name="resnet", **RESNET, epochs=5, granularities=(2, 4, 8, 16),
          lr_grid=(0.01, 0.02, 0.05, 0.1, 0.2), rows=LABELS, eval_every=14, check_cell=True),
    Study(name="resnet_long", **RESNET, epochs=20, granularities=(16,),
          lr_grid=(0.01, 0.02, 0.05), rows=tuple(x for x in LABELS if x != TWO_BW),
          eval_every=42, claim_rows=(SYNC, T1T2, PMW),
          horizon_cells=((T1, 1 / 16), (T1, 1 / 4), (PMW, 1 / 4)), warmup_cells=(1 / 20,),
          curvature_seeds=(0, 1, 2), curvature_every=168),
    Study(name="transformer", **TRANSFORMER, epochs=16, granularities=(8,),
          lr_grid=(0.003, 0.01, 0.03), rows=TRANSFORMER_ROWS, eval_every=32,
          claim_rows=(SYNC, PMW)),
    Study(name="transformer_warm", **TRANSFORMER, epochs=16, granularities=(8,),
          lr_grid=(0.003, 0.01, 0.03), rows=TRANSFORMER_ROWS, eval_every=32,
          claim_rows=(SYNC, PMW), lr_warmup_fraction=0.1),
)  # fmt: skip


@dataclass(frozen=True)
class PaperShapeConfig:
    """Every setting of the experiment (the JSON stores it)."""

    studies: tuple[Study, ...] = STUDIES
    seeds: tuple[int, ...] = (0, 1, 2)
    claim_seeds: tuple[int, ...] = tuple(range(8))
    check_seeds: tuple[int, ...] = tuple(range(8))
    fine_margin: float = 0.01
    material: float = 0.01
    confidence: float = 0.95
    warmup_fraction: float = 0.2
    gamma: float = 0.9
    blowup_factor: float = 10.0
    loss_blowup: float = 3.0
    onset_tolerance: float = 0.1
    two_bw_min_samples: int = 4
    notes: dict = field(default_factory=dict)

    def study(self, name: str) -> Study:
        """The :class:`Study` called ``name``."""
        for study in self.studies:
            if study.name == name:
                return study
        raise ValueError(f"unknown study {name!r}; allowed: "
                         f"{', '.join(s.name for s in self.studies)}")  # fmt: skip


FULL = PaperShapeConfig()
QUICK = replace(
    FULL,
    studies=(
        replace(STUDIES[0], epochs=1, granularities=(4, 16), lr_grid=(0.01, 0.02), eval_every=7),
        replace(STUDIES[1], epochs=1, lr_grid=(0.01, 0.02), rows=(SYNC, ASYNC, T1, T1T2, PMW),
                eval_every=14, claim_rows=(), horizon_cells=((T1, 1 / 4),), warmup_cells=(),
                curvature_seeds=(0,), curvature_every=28),
        replace(STUDIES[2], epochs=2, lr_grid=(0.01,), rows=(SYNC, ASYNC, T1, PMW), eval_every=16,
                claim_rows=()),
    ),
)  # fmt: skip


def config_for(quick: bool) -> PaperShapeConfig:
    """The quick or the full configuration."""
    return QUICK if quick else FULL


def command_for(quick: bool) -> str:
    """The exact command that regenerates the stored files."""
    return "python -m pipemare_lite reproduce paper-shape" + (" --quick" if quick else "")


# --------------------------------------------------------------------------- one run


def load_data(study: Study):
    """The study's dataset, with its fixed split."""
    from pipemare_lite.training.datasets import digits, sequence_task

    if study.dataset == "digits":
        return digits(**study.data_args)
    return sequence_task(study.dataset, **study.data_args)


def build_model(study: Study, data, seed: int):
    """The model with its initial weights drawn from ``seed``."""
    from pipemare_lite.training.models import small_resnet, tiny_transformer

    if study.model == "resnet":
        return small_resnet(num_classes=data.num_classes, in_channels=1, image_size=8,
                            seed=seed, **study.architecture)  # fmt: skip
    return tiny_transformer(vocab=data.num_classes, seq_len=data.input_shape[0], seed=seed,
                            **study.architecture)  # fmt: skip


def planned_steps(study: Study, data) -> int:
    """Steps (updates per stage) of a run that does not diverge."""
    return study.epochs * (len(data.x_train) // study.batch_size)


def row_definition(label: str) -> tuple[str, dict]:
    """The method and switches of a row label."""
    for name, method, switches in ROWS:
        if name == label:
            return method, switches
    raise ValueError(f"unknown row {label!r}; the rows are {list(LABELS)}")


def run_settings(
    config: PaperShapeConfig, study: Study, label: str, P: int, total_steps: int,
    *, k_fraction: float | None = None, warmup_fraction: float | None = None,
) -> dict:
    """How a row runs: method, T1/T2, N, K (None: the whole asynchronous phase), gamma,
    warm-up, lr warm-up, or why it does not run. ``k_fraction`` and ``warmup_fraction``
    are the factor cells' values."""  # fmt: skip
    method, switches = row_definition(label)
    t1, t2 = bool(switches.get("t1")), bool(switches.get("t2"))
    n, not_run = study.num_microbatches, None
    if method == "2bw":  # two versions suffice only with N >= P - 1
        n = min(d for d in range(1, study.batch_size + 1)
                if study.batch_size % d == 0 and d >= max(n, P - 1))  # fmt: skip
        if study.batch_size // n < config.two_bw_min_samples:
            not_run = (f"2BW needs N >= P - 1 = {P - 1}: {n} microbatches of "
                       f"{study.batch_size // n} samples, over the budget")  # fmt: skip
    warmup, fraction = 0, None
    if switches.get("warmup"):
        fraction = config.warmup_fraction if warmup_fraction is None else warmup_fraction
        warmup = round(fraction * total_steps)
    return {
        "method": method,
        "t1": t1,
        "t2": t2,
        "num_microbatches": n,
        "t1_k_fraction": k_fraction if t1 else None,
        "t1_horizon": max(1, round(k_fraction * total_steps)) if t1 and k_fraction else None,
        "gamma": config.gamma if t2 else None,
        "warmup_minibatches": warmup,
        "warmup_fraction": fraction,
        "lr_warmup": round(study.lr_warmup_fraction * total_steps),
        "not_run": not_run,
    }


def train(study: Study, data, spec: dict, P: int, lr: float, seed: int, *, model=None,
          on_step=None):
    """One seed of one cell: a :func:`~pipemare_lite.training.loop.fit` run; its History.

    ``model``: the seed's model when the caller built it (default: built here).
    """
    from pipemare_lite.training.loop import fit

    return fit(
        build_model(study, data, seed) if model is None else model,
        data,
        method=spec["method"],
        num_stages=P,
        num_microbatches=spec["num_microbatches"],
        batch_size=study.batch_size,
        epochs=study.epochs,
        lr=lr,
        optimizer=study.optimizer,
        momentum=study.momentum,
        lr_schedule=study.lr_schedule,
        lr_warmup=spec["lr_warmup"],
        seed=seed,
        t1=spec["t1"],
        t2=spec["t2"],
        t1_anneal_updates=spec["t1_horizon"],
        gamma=spec["gamma"] if spec["gamma"] is not None else 0.9,
        warmup=spec["warmup_minibatches"],
        eval_every=study.eval_every,
        progress=False,
        on_step=on_step,
    )


def loss_blew_up(window_means: list[float], factor: float) -> bool:
    """The loss rule of divergence: the last window's mean training loss above ``factor``
    times the first window's (a non-finite last window counts too)."""
    if not window_means:
        return False
    first, last = window_means[0], window_means[-1]
    return not math.isfinite(last) or (math.isfinite(first) and last > factor * first)


def outcome(seed: int, history, study: Study, loss_blowup: float) -> dict:
    """One seed's JSON-ready numbers; ``blowup_onset`` and ``excess`` need the sync run of
    the same seed and are filled in by the runner (None here, and for sync rows)."""
    norms = history.stage_update_norm
    width = study.eval_every
    reached = next((e["step"] for e in history.evals
                    if e["accuracy"] >= study.target_accuracy), None)  # fmt: skip
    windows = stage_evidence.window_mean(history.loss, width)
    blew_up = not history.diverged and loss_blew_up(windows, loss_blowup)
    diverged = bool(history.diverged) or blew_up
    return {
        "seed": seed,
        "quality": record.seed_quality(history.final_accuracy, diverged),
        "final_accuracy": history.final_accuracy,
        "final_loss": history.final_loss,
        "diverged": diverged,
        "diverged_non_finite": bool(history.diverged),
        "diverged_loss_rule": blew_up,
        "divergence_step": history.divergence_step,
        "divergence": history.divergence,
        "steps": history.steps,
        "steps_to_target": reached,
        "memory_bytes": history.memory_bytes,
        "forward_delay_max": history.forward_delay_max,
        "evals": [[e["step"], e["accuracy"], e["loss"]] for e in history.evals],
        "train_loss_windows": _rounded(windows),
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
        options=method_options(method, warmup=warmup),
    )  # fmt: skip
    _, result = simulate_and_measure(schedule, OpCosts(forward=1.0, backward=2.0))
    return {
        "utilization": result.utilization,
        # the stored files' key: over this long run the full-pipeline window leaves out
        # only the run's one fill and drain
        "steady_state_utilization": result.full_pipeline_utilization,
    }


def train_measuring_sharpness(study: Study, data, spec: dict, P: int, lr: float,
                              seed: int) -> tuple:
    """:func:`train` of a synchronous cell that also measures every stage's sharpness
    (:func:`~pipemare_lite.training.curvature.stage_sharpness`) before the first step and
    every ``study.curvature_every`` steps; returns ``(history, [[step, [lam_0, ...]], ...])``.

    At a step boundary a synchronous pipeline's stages hold the current weights, and the
    measurement touches no gradient and no random state of the run, so the training is
    bitwise the run :func:`train` makes (the runner checks it).
    """
    from pipemare_lite.training.curvature import stage_sharpness
    from pipemare_lite.training.partition import partition

    if row_definition(SYNC)[0] != spec["method"]:
        raise ValueError(f"sharpness is measured on the synchronous row, not {spec['method']!r}")
    x, y = data.x_train[: study.curvature_samples], data.y_train[: study.curvature_samples]
    model = build_model(study, data, seed)
    measured: list = []

    def measure(step: int, *_) -> None:
        if step % study.curvature_every == 0:
            values = stage_sharpness(partition(model, P), x, y,
                                     iterations=study.curvature_iterations)  # fmt: skip
            measured.append([step, [float(f"{v:.6g}") for v in values]])

    measure(0)
    history = train(study, data, spec, P, lr, seed, model=model, on_step=measure)
    return history, measured


# --------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class CellPlan:
    """One cell: a row (or a factor's value) of one study at one P, with its seeds."""

    study: str
    sweep: str  # "lr", "grid", "horizon", "warmup", "curvature", "check"
    P: int
    label: str
    seeds: tuple[int, ...]
    k_fraction: float | None = None
    warmup_fraction: float | None = None


def cells(config: PaperShapeConfig, study: Study, phase: str) -> list[CellPlan]:
    """The study's cells in table order. ``phase`` "lr": the sync lr sweep (one cell per
    grid lr, at ``study.sweep_P``); "rest": every other cell, run at the chosen lr."""
    if phase == "lr":
        return [CellPlan(study.name, "lr", study.sweep_P, SYNC, config.seeds)
                for _ in study.lr_grid]  # fmt: skip
    finest = study.granularities[-1]
    out = [CellPlan(study.name, "grid", P, label,
                    config.claim_seeds if label in study.claim_rows else config.seeds)
           for P in study.granularities for label in study.rows]  # fmt: skip
    out += [CellPlan(study.name, "horizon", finest, label, config.seeds, k_fraction=k)
            for label, k in study.horizon_cells]  # fmt: skip
    out += [CellPlan(study.name, "warmup", finest, PMW, config.seeds, warmup_fraction=w)
            for w in study.warmup_cells]  # fmt: skip
    if study.curvature_seeds:
        out.append(CellPlan(study.name, "curvature", finest, SYNC, study.curvature_seeds))
    if study.check_cell:
        out.append(CellPlan(study.name, "check", finest, SYNC, config.check_seeds))
    return out


def choose_lr(sweep: list[dict], margin: float) -> float:
    """The largest lr where no sync seed diverged and the mean accuracy is within ``margin``
    of the best lr's mean accuracy (``sweep``: entries with ``lr``, ``diverged_seeds`` and
    the ``quality`` summary over seeds)."""
    finite = [r for r in sweep
              if r["diverged_seeds"] == 0 and r["quality"]["mean"] is not None]  # fmt: skip
    if not finite:
        raise RuntimeError("sync diverged at every lr of the grid; widen the grid downwards")
    best = max(r["quality"]["mean"] for r in finite)
    return max(r["lr"] for r in finite if r["quality"]["mean"] >= best - margin)
