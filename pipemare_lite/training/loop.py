"""Training with a pipeline method: ``fit()`` and ``python -m pipemare_lite.training`` (chapter
07).

``fit`` is the loop every chapter from 07 on uses to compare methods on real data::

    from pipemare_lite.training.models import mlp
    from pipemare_lite.training.datasets import digits
    history = fit(mlp(64, 64, 8, 10), digits(), method="async", num_stages=8,
                  num_microbatches=4, batch_size=32, epochs=3, lr=0.05)
    history.final_accuracy, history.diverged, history.forward_delay

What one run is. The model is cut into ``num_stages`` stages
(:func:`pipemare_lite.training.partition.partition`); the training set is fed in shuffled
minibatches
of ``batch_size`` samples, each cut into ``num_microbatches`` microbatches
(:mod:`pipemare_lite.training.data_feed`). The whole run, all epochs, is ONE schedule of
``epochs * steps_per_epoch`` minibatches, so an asynchronous pipeline never flushes between
epochs, T1 anneals over the whole run by default, and warm-up covers the first ``warmup``
minibatches. A "step" is one minibatch: every stage makes one optimizer update per step.
:func:`fit` reads as that algorithm: set up, then per step train, record, evaluate at the
end of an epoch, save a checkpoint when due; finish.

What it returns: a :class:`~pipemare_lite.training.history.History` (losses per step, learning rates
per stage and update, test loss and accuracy per epoch, forward delays measured from the
executed trace, peak bytes per stage and kind, wall time).

Optimizers, schedules, losses, clipping, the torch way. ``optimizer`` is a name
(:data:`OPTIMIZERS`: sgd, adam, adamw, and muon where torch has it; see
:mod:`pipemare_lite.training.optimizers`) or a factory ``params -> torch.optim.Optimizer``;
``lr_schedule`` a name (:data:`LR_SCHEDULES`: constant, cosine, step; with ``lr_warmup``
updates of linear warm-up; see :mod:`pipemare_lite.training.lr_schedules`) or a factory ``optimizer
-> torch.optim.lr_scheduler.LRScheduler``; every stage builds its own from the factories.
The scheduler is stepped once per optimizer update of its stage, and T1 multiplies on top of
it: stage i's update k uses ``lr(k) * tau_i ** (-p_k)``. ``loss_fn(output, target)`` is the
training loss (default: cross-entropy); ``clip_grad_norm`` clips each stage's own gradient
norm before its update (per stage: what a pipeline can do without communication). Options
that contradict each other (``momentum`` with adam, ``lr`` with an optimizer factory,
``lr_step_size`` with cosine ...) are refused, naming them. At their defaults none of these
options changes a number.

Divergence. A non-finite loss stops the run. ``on_divergence="stop"`` (default) returns the
history with ``diverged=True`` and a readable ``divergence`` message naming the step, the
microbatch and the stages whose weights are non-finite by then; ``"raise"`` raises
:class:`~pipemare_lite.training.history.DivergenceError` with the same message (its ``history``
attribute holds the history up to there).

Checkpoints (:mod:`pipemare_lite.training.checkpoint`): with ``checkpoint_path`` and
``checkpoint_every=k`` the full state (executor state including in-flight microbatches,
optimizer and scheduler states, random states, history so far) is written atomically every
k steps; ``resume=True`` continues from it and gives the same trajectory bitwise as a run
that never stopped.

Executors. ``executor="local"`` runs all stages in this process
(:class:`pipemare_lite.engine.LocalExecutor`). Other executors plug in through
:data:`EXECUTORS` (see :func:`register_executor`): the distributed engine registers
``"dist"`` there.

The command line (``pipemare-lite train``, ``python -m pipemare_lite.training``, torchrun) lives
in :mod:`pipemare_lite.cli.commands.train`; its names, and those of the modules above, are
importable from here too.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import torch
from torch import nn

from pipemare_lite.files import check_writable
from pipemare_lite.schedules.lazy import lazy_schedule, materialized
from pipemare_lite.training import run_schedule
from pipemare_lite.training.checkpoint import (
    CheckpointError,
    check_model_layout,
    decode_state,
    encode_state,
    load_checkpoint,
    model_layout,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from pipemare_lite.training.data_feed import EpochMicrobatches, epoch_order
from pipemare_lite.training.datasets import Dataset, check_dataset
from pipemare_lite.training.evaluation import classification_loss, evaluate, forward_through
from pipemare_lite.training.history import (
    DivergenceError,
    History,
    HistoryRecorder,
    divergence_report,
)
from pipemare_lite.training.lr_schedules import LR_SCHEDULES, make_lr_schedule
from pipemare_lite.training.optimizers import (
    OPTIMIZERS,
    check_optimizer_options,
    make_optimizer_factory,
    with_grad_clipping,
)
from pipemare_lite.training.partition import partition

__all__ = [  # fit and what it uses, wherever it lives
    "CHECKPOINT_FORMAT", "DIVERGENCE_ACTIONS", "EXECUTORS", "LR_SCHEDULES",
    "OPTIMIZERS", "RECORDED_SETTINGS", "DivergenceError", "EpochMicrobatches", "History",
    "classification_loss", "decode_state",
    "encode_state", "epoch_order", "evaluate", "fit", "forward_through",
    "make_optimizer_factory", "register_executor",
]

DIVERGENCE_ACTIONS = ("stop", "raise")
#: Bumped when the checkpoint layout changes; a mismatch is refused with a clear message.
CHECKPOINT_FORMAT = 1
#: The settings a run records (in its history and checkpoints) in this order, followed by
#: the dataset's name; resuming a checkpoint with any of them changed is refused.
RECORDED_SETTINGS = (
    "method", "num_stages", "num_microbatches", "epochs", "lr", "batch_size", "optimizer",
    "momentum", "weight_decay", "seed", "t1", "t1_anneal_updates", "t2", "gamma", "warmup",
    "balance", "chunks", "on_divergence", "executor", "lr_schedule", "lr_warmup",
    "lr_step_size", "lr_gamma", "loss_fn", "clip_grad_norm", "schedule",
)
#: What a checkpoint written before a setting existed is taken to have had.
_SETTINGS_ADDED_LATER = {
    "lr_schedule": "constant", "lr_warmup": 0, "lr_step_size": None, "lr_gamma": None,
    "loss_fn": None, "clip_grad_norm": None, "schedule": None,
}


# --------------------------------------------------------------------------- executors


def _local_executor(schedule, stages, *, loss_fn, optimizer_factory, method_options, devices,
                    lr_scheduler_factory=None, record="full"):
    from pipemare_lite.engine.local import LocalExecutor

    return LocalExecutor(
        schedule,
        stages,
        loss_fn=loss_fn,
        optimizer_factory=optimizer_factory,
        method_options=method_options,
        devices=devices,
        lr_scheduler_factory=lr_scheduler_factory,
        record=record,
    )


def _dist_executor(schedule, stages, **kwargs):
    # The distributed engine (one process per stage, launched by torchrun) offers fit() the
    # LocalExecutor's run() (and, with checkpoints=True, its checkpoints) through
    # pipemare_lite.training.dist_fit.fit_executor.
    try:
        from pipemare_lite.training.dist_fit import fit_executor
    except ImportError as exc:
        raise ValueError(f"executor 'dist' is not available: {exc}") from exc
    return fit_executor(schedule, stages, **kwargs)


#: name -> ``factory(schedule, stage_modules, *, loss_fn, optimizer_factory, method_options,
#: devices, record)`` returning an object with the LocalExecutor contract (``record``: a
#: :class:`~pipemare_lite.engine.recording.Recording`, which the factory may exceed: results
#: may hold more than asked); fit adds ``lr_scheduler_factory=`` only when the run has an lr
#: schedule.
EXECUTORS: dict[str, Callable] = {"local": _local_executor, "dist": _dist_executor}


def register_executor(name: str, factory: Callable) -> None:
    """Make ``fit(..., executor=name)`` use ``factory`` (see :data:`EXECUTORS`; chapter 11)."""
    EXECUTORS[name] = factory


# --------------------------------------------------------------------------- fit


def fit(
    model: nn.Sequential,
    data: Dataset,
    *,
    method: str | None = None,
    num_stages: int | None = None,
    num_microbatches: int | None = None,
    epochs: int,
    lr: float | None = None,
    batch_size: int,
    optimizer: str | Callable = "sgd",
    momentum: float | None = None,
    weight_decay: float = 0.0,
    lr_schedule: str | Callable | None = None,
    lr_warmup: int = 0,
    lr_step_size: int | None = None,
    lr_gamma: float | None = None,
    loss_fn: Callable | None = None,
    clip_grad_norm: float | None = None,
    seed: int = 0,
    t1: bool | None = None,
    t1_anneal_updates: int | None = None,
    t2: bool | None = None,
    gamma: float | Sequence[float] = 0.9,
    warmup: int = 0,
    balance=None,
    chunks: int | None = None,
    devices: Sequence | None = None,
    progress: bool | None = None,
    on_divergence: str = "stop",
    on_step: Callable[[int, History], None] | None = None,
    eval_every: int | None = None,
    checkpoint_path: str | os.PathLike | None = None,
    checkpoint_every: int | None = None,
    resume: bool = False,
    executor: str = "local",
    schedule=None,
    record: str = "history",
) -> History:
    """Train ``model`` on ``data`` with a pipeline ``method``; return the :class:`History`.

    Introduced in chapter 07; chapters 08 (T1) and 09 (T2, warm-up) switch its options.

    Args:
        model: an ``nn.Sequential``; it is trained in place (its stages share its modules).
        data: a :class:`~pipemare_lite.training.datasets.Dataset`.
        method: a name from :data:`pipemare_lite.methods.METHODS` (gpipe, 1f1b, pipedream,
            2bw, async, pipemare ...), or one added with
            :func:`~pipemare_lite.methods.register_method` (docs/write-a-method.md; other
            processes need the plugin too: :mod:`pipemare_lite.plugins`); optional with
            ``schedule``.
        num_stages: P, pipeline stages (at most ``len(model)``); a given schedule's own.
        num_microbatches: N, microbatches per minibatch (one update per minibatch); a given
            schedule's own.
        epochs, batch_size: passes over the training set and samples per minibatch.
        lr, optimizer, momentum, weight_decay: the per-stage optimizer: a name from
            :data:`OPTIMIZERS` (``sgd``, ``adam``, ``adamw``, ``muon``: Muon on 2-D weights,
            AdamW on the rest; see :mod:`pipemare_lite.training.optimizers`) with its base ``lr``
            (required), ``momentum`` (sgd: default 0; muon: default 0.95; refused with
            adam/adamw) and ``weight_decay``; or a factory ``params -> Optimizer`` that sets
            its own hyper-parameters (then ``lr``, ``momentum`` and ``weight_decay`` must
            stay unset); a factory with a parameter named ``stage`` is given the stage it
            builds for (``factory(params, stage=s)``).
        lr_schedule: the base schedule ``lr(k)`` of update k: None or ``"constant"``,
            ``"cosine"`` (annealed to 0 over the run's ``epochs * steps_per_epoch`` updates,
            the warm-up excluded), ``"step"``; or a factory ``optimizer -> LRScheduler``.
            Stepped once per optimizer update per stage (a factory with a ``stage``
            parameter is told the stage); T1 and a method's ``lr_factor`` multiply on top
            of it, for each update only.
        lr_warmup: updates of linear lr warm-up before the named schedule,
            ``lr * (k + 1) / (lr_warmup + 1)`` (not PipeMare-W's flushed ``warmup``).
        lr_step_size, lr_gamma: ``"step"`` only: multiply the lr by ``lr_gamma`` (default
            0.1) every ``lr_step_size`` updates (default: one epoch's).
        loss_fn: ``loss_fn(output, target)``, a mean over the microbatch's samples, the
            training loss (default: cross-entropy, per position for sequences). The test
            loss in ``evals`` stays the cross-entropy, so runs compare on one measure.
        clip_grad_norm: clip each stage's gradient before its update so that the L2 norm
            over that stage's parameters is at most this (per stage: no communication).
        seed: data order (and nothing else: build the model with its own seed).
        t1, t2: PipeMare's techniques on/off; None keeps the method's default (on for
            ``pipemare``, off otherwise).
        t1_anneal_updates: K, updates over which T1 anneals (None: the whole run).
        gamma: T2's decay (one value or one per stage).
        warmup: the first ``warmup`` minibatches run flushed (PipeMare-W; async methods).
        balance: how to partition (see :func:`pipemare_lite.training.partition.partition`).
        chunks: v, model chunks per rank, for ``interleaved`` only (default 2 there, 1
            elsewhere): the model is cut into ``num_stages * chunks`` pieces.
        devices: one device per stage (default: where the model is).
        progress: tqdm bar; None shows it in terminals and notebooks, not under pytest or
            when the environment variable ``PIPEMARE_PROGRESS=0``.
        on_divergence: ``"stop"`` returns a history with ``diverged=True``; ``"raise"``
            raises :class:`DivergenceError`.
        on_step: called as ``on_step(step, history)`` after every step (e.g. live plots).
        eval_every: also measure test loss and accuracy every that many steps (default: at
            the end of each epoch only); evaluation never changes the training trajectory.
        checkpoint_path, checkpoint_every: save the full state every that many steps.
        resume: continue from ``checkpoint_path`` when it exists.
        executor: ``"local"`` or a name registered in :data:`EXECUTORS`.
        schedule: run this schedule instead of the method's
            (:mod:`pipemare_lite.training.run_schedule`, docs/write-a-schedule.md): a name
            registered with
            :func:`~pipemare_lite.schedules.registry.register_schedule`, a
            :class:`~pipemare_lite.schedules.Schedule` or a ``.csv``/``.json`` file, covering
            the whole run or one minibatch (repeated once per step). With a method too, the
            method's options (T1, T2) apply and its weight mode must be the schedule's.
        record: what the engine records (:mod:`pipemare_lite.engine.recording`):
            ``"history"`` (default) what the history holds, update norms and peak bytes
            included; ``"losses"`` the cheapest run (no update norms, no bytes: the history's
            ``stage_update_norm`` and ``memory_bytes`` stay empty); ``"full"`` the trace too
            (which fit does not keep). The trained numbers are the same at every level.
    """
    arguments = dict(locals())
    arguments["schedule"] = run_schedule.resolve(schedule, method=method)  # a bad file first
    _check_torch_options(arguments)
    config = _run_config(arguments)  # the settings, as the history and checkpoints record them
    _check_arguments(
        config, len(data.x_train), checkpoint_path, checkpoint_every, resume, eval_every
    )
    check_dataset(data, classification_targets=loss_fn is None)
    if checkpoint_path is not None:  # not at the first save, steps into the run
        check_writable(checkpoint_path, "checkpoint_path")
    run = TrainingRun(
        model, data, config, gamma=gamma, balance=balance, devices=devices,
        optimizer=optimizer, lr_schedule=lr_schedule, loss_fn=loss_fn,
        schedule=arguments["schedule"], checkpoints=checkpoint_path is not None,
        record=_run_recording(record, checkpoint_path),
    )
    if resume and Path(checkpoint_path).exists():
        run.resume_from(checkpoint_path)
    try:
        with _progress_bar(progress, run) as show_progress:
            run.start_clock()
            while run.step < run.total_steps and not run.history.diverged:
                run.train_one_step()
                show_progress(run.history)
                if run.ends_period(eval_every or run.steps_per_epoch) or run.history.diverged:
                    run.evaluate()
                if on_step is not None:
                    on_step(run.step, run.history)
                if checkpoint_every and run.ends_period(checkpoint_every):
                    run.save_to(checkpoint_path)
    finally:
        close = getattr(run.engine, "close", None)  # executors holding threads (dist)
        if close is not None:
            close()
    history = run.finish()
    if history.diverged and on_divergence == "raise":
        raise DivergenceError(history.divergence, history)
    return history


# --------------------------------------------------------------------------- fit's steps


def _callable_name(value) -> str:
    """How the history records a factory or loss function: ``module.qualified_name``."""
    kind = value if hasattr(value, "__qualname__") else type(value)
    return f"{getattr(kind, '__module__', '?')}.{kind.__qualname__}"


def _run_recording(record, checkpoint_path):
    """The engine's :class:`~pipemare_lite.engine.recording.Recording` for ``record``; a run
    that saves checkpoints keeps every forward's saved tensors (a checkpoint may fall between
    a forward and its backward)."""
    from dataclasses import replace

    from pipemare_lite.engine.recording import recording

    chosen = recording(record)  # ValueError naming the levels
    return chosen if checkpoint_path is None else replace(chosen, saved_tensors=True)


def _check_torch_options(arguments: dict) -> None:
    """Refuse bad or contradictory optimizer, schedule, loss and clipping options early."""
    optimizer, lr = arguments["optimizer"], arguments["lr"]
    if callable(optimizer):
        given = [f"{name}={arguments[name]!r}" for name, unset in
                 (("lr", None), ("momentum", None), ("weight_decay", 0.0))
                 if arguments[name] != unset]
        if given:
            raise ValueError(f"{', '.join(given)} conflict with an optimizer factory, which "
                             "sets its own hyper-parameters; give them to the factory")
    else:
        if not isinstance(optimizer, str):
            raise ValueError(f"optimizer must be a name ({', '.join(OPTIMIZERS)}) or a factory "
                             f"params -> torch.optim.Optimizer, got {optimizer!r}")
        check_optimizer_options(optimizer, arguments["momentum"], arguments["weight_decay"])
        if lr is None:
            raise ValueError(f"lr is required with optimizer {optimizer!r} (a positive number)")
        if not (isinstance(lr, (int, float)) and not isinstance(lr, bool) and 0 < lr < math.inf):
            raise ValueError(f"lr must be a positive number (finite), got {lr!r}")
    schedule = arguments["lr_schedule"]
    if callable(schedule):
        given = [f"{name}={arguments[name]!r}" for name, unset in
                 (("lr_warmup", 0), ("lr_step_size", None), ("lr_gamma", None))
                 if arguments[name] != unset]
        if given:
            raise ValueError(f"{', '.join(given)} conflict with an lr_schedule factory; build "
                             "the warm-up or decay into the factory")
    elif schedule is not None and schedule not in LR_SCHEDULES:
        raise ValueError(f"unknown lr_schedule {schedule!r}; allowed: {', '.join(LR_SCHEDULES)} "
                         "or a factory optimizer -> torch.optim.lr_scheduler.LRScheduler")
    loss_fn = arguments["loss_fn"]
    if loss_fn is not None and not callable(loss_fn):
        raise ValueError(f"loss_fn must be a function loss_fn(output, target), got {loss_fn!r}")
    clip = arguments["clip_grad_norm"]
    if clip is not None and not (
        isinstance(clip, (int, float)) and not isinstance(clip, bool) and 0 < clip < math.inf
    ):
        raise ValueError(f"clip_grad_norm must be a positive finite number or None, got {clip!r}")


def _run_config(arguments: dict) -> dict:
    """fit()'s recorded settings from its arguments, with the method's defaults filled in."""
    from pipemare_lite.methods import MethodOptions, get_method
    from pipemare_lite.training.optimizers import MUON_DEFAULT_MOMENTUM

    choice = arguments["schedule"]
    if arguments["method"] is None and choice is None:
        raise ValueError("give a method (one of the names in pipemare_lite.methods.METHODS) "
                         "or a schedule")
    # an unknown method fails first
    spec = None if arguments["method"] is None else get_method(arguments["method"])
    config = {name: arguments[name] for name in RECORDED_SETTINGS}
    if choice is not None:
        run_schedule.check_method(choice, config["method"], spec and spec.weight_mode)
        run_schedule.fill_sizes(choice, config)
        config["schedule"] = choice.label
    for name in ("num_stages", "num_microbatches"):
        if config[name] is None:
            raise ValueError(f"{name} is required (a positive integer) without a given schedule")
    optimizer = config["optimizer"]
    if callable(optimizer):
        config["optimizer"] = _callable_name(optimizer)
    elif config["momentum"] is None:  # recorded as what the optimizer uses
        config["momentum"] = MUON_DEFAULT_MOMENTUM if optimizer == "muon" else 0.0
    schedule = config["lr_schedule"]
    config["lr_schedule"] = (
        _callable_name(schedule) if callable(schedule) else (schedule or "constant")
    )
    if config["loss_fn"] is not None:
        config["loss_fn"] = _callable_name(config["loss_fn"])
    t1, t2, gamma, balance = (config[k] for k in ("t1", "t2", "gamma", "balance"))
    defaults = spec.options if spec is not None else MethodOptions()
    config["t1"] = defaults.lr_rescheduling if t1 is None else bool(t1)
    config["t2"] = defaults.discrepancy_correction if t2 is None else bool(t2)
    config["gamma"] = list(gamma) if isinstance(gamma, (list, tuple)) else gamma
    config["balance"] = balance if not isinstance(balance, tuple) else list(balance)
    config["dataset"] = arguments["data"].name
    if config["chunks"] is None:  # interleaving needs >= 2 chunks to differ from 1F1B
        config["chunks"] = 2 if spec is not None and spec.name == "interleaved" else 1
    return config


def _check_arguments(
    config: dict, num_samples: int, checkpoint_path, checkpoint_every, resume: bool,
    eval_every: int | None = None,
) -> None:
    """Refuse bad settings before any work, naming the bad value and what is allowed."""
    for name in ("num_stages", "num_microbatches", "epochs", "batch_size", "chunks"):
        value = config[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if config["on_divergence"] not in DIVERGENCE_ACTIONS:
        raise ValueError(
            f"on_divergence must be one of {', '.join(DIVERGENCE_ACTIONS)}, "
            f"got {config['on_divergence']!r}"
        )
    if config["batch_size"] % config["num_microbatches"]:
        raise ValueError(
            f"batch size {config['batch_size']} does not split evenly into "
            f"{config['num_microbatches']} microbatches; use a multiple of "
            f"{config['num_microbatches']}"
        )
    if config["chunks"] > 1 and config["method"] != "interleaved" and not config["schedule"]:
        raise ValueError(
            f"chunks={config['chunks']} needs method 'interleaved'; "
            f"{config['method']!r} runs one chunk per rank"
        )
    if config["warmup"] < 0:
        raise ValueError(f"warmup must be >= 0 minibatches, got {config['warmup']}")
    seed = config["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an integer in 0..2**32-1, got {seed!r}")
    _check_gamma(config["gamma"])
    k = config["t1_anneal_updates"]
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
        raise ValueError(f"t1_anneal_updates must be an integer >= 0 (updates; 0: T1 off) or "
                         f"None (the whole run), got {k!r}")
    if config["executor"] not in EXECUTORS:
        raise ValueError(
            f"unknown executor {config['executor']!r}; allowed: {', '.join(EXECUTORS)}"
        )
    if (checkpoint_every is None) != (checkpoint_path is None):
        raise ValueError("checkpoint_path and checkpoint_every go together: give both or neither")
    if eval_every is not None and (not isinstance(eval_every, int) or eval_every < 1):
        raise ValueError(f"eval_every must be a positive integer or None, got {eval_every!r}")
    if checkpoint_every is not None and checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be a positive integer, got {checkpoint_every}")
    if resume and checkpoint_path is None:
        raise ValueError("resume=True needs a checkpoint_path")
    batch_size = config["batch_size"]
    if num_samples // batch_size < 1:
        raise ValueError(f"batch size {batch_size} is larger than the training set ({num_samples})")
    total_steps = config["epochs"] * (num_samples // batch_size)
    if config["warmup"] > total_steps:
        raise ValueError(
            f"warmup={config['warmup']} minibatches exceeds the run's {total_steps} steps"
        )


def _check_gamma(gamma) -> None:
    """T2's decay: a number in [0, 1) (``DiscrepancyCorrection``'s range; 1 would freeze
    delta at 0), or one per stage; checked whether or not T2 is on, so a bad value is found
    before a run that later turns T2 on (a resume, a sweep) and not after training."""
    values = gamma if isinstance(gamma, (list, tuple)) else [gamma]
    for stage, value in enumerate(values):
        where = f"gamma[{stage}]" if isinstance(gamma, (list, tuple)) else "gamma"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                0 <= value < 1):
            raise ValueError(f"{where} must be a number in [0, 1) (T2's EMA decay), "
                             f"got {value!r}")


class TrainingRun:
    """The moving parts of one fit() run and its steps (chapter 07).

    Set-up cuts the model into stages, builds the method's schedule for the whole run and
    the executor that runs it; then each :meth:`train_one_step` lets the executor run until
    every stage has made one more update, and the recorder folds what it reports into the
    history.
    """

    def __init__(
        self, model: nn.Sequential, data: Dataset, config: dict, *, gamma, balance, devices,
        optimizer="sgd", lr_schedule=None, loss_fn=None, schedule=None, checkpoints=False,
        record="history",
    ) -> None:
        from pipemare_lite.methods import MethodOptions, build_method_schedule, method_options

        self.config, self.data = config, data
        method, num_stages, n = config["method"], config["num_stages"], config["num_microbatches"]
        self.steps_per_epoch = len(data.x_train) // config["batch_size"]
        self.total_steps = config["epochs"] * self.steps_per_epoch
        # bad schedule options fail here, before the (possibly long) schedule is built
        scheduler_factory = self._lr_schedule_factory(lr_schedule)
        options = (MethodOptions if method is None else partial(method_options, method))(
            lr_rescheduling=config["t1"],
            rescheduling_horizon=config["t1_anneal_updates"],
            discrepancy_correction=config["t2"],
            gamma=gamma,
            warmup_minibatches=config["warmup"],
        )
        chunks = config["chunks"]
        # the whole run is one schedule, made lazily (pipemare_lite.schedules.lazy)
        if schedule is None:
            schedule = lazy_schedule(
                lambda k: build_method_schedule(method, num_stages, n, chunks=chunks,
                                                num_minibatches=k, options=options),
                self.total_steps, warmup_minibatches=options.warmup_minibatches)
        else:  # a registered or hand-written schedule (pipemare_lite.training.run_schedule)
            schedule = run_schedule.schedule_for_run(schedule, num_stages, n, self.total_steps,
                                                     chunks, config["warmup"])
        if config["executor"] != "local":  # the others plan the whole run's messages up front
            schedule = materialized(schedule)
        self.stages = partition(model, num_stages * chunks, balance=balance)
        engine_options = dict(
            loss_fn=loss_fn or classification_loss,
            optimizer_factory=self._optimizer_factory(optimizer),
            method_options=options,
            devices=devices,
            record=record,
        )
        if scheduler_factory is not None:  # left out when None: registered executors may
            engine_options["lr_scheduler_factory"] = scheduler_factory  # not know it
        if config["executor"] == "dist" and checkpoints:
            engine_options["checkpoints"] = True  # the ranks keep what a checkpoint needs
        self.engine = EXECUTORS[config["executor"]](schedule, self.stages, **engine_options)
        self.feed = EpochMicrobatches(
            data, config["batch_size"], n, config["seed"], config["epochs"]
        )
        self.recorder = HistoryRecorder(
            History(config=config), n, len(self.stages), schedule.num_virtual_stages
        )
        self.step = 0
        self._clock = time.perf_counter()

    def _optimizer_factory(self, optimizer) -> Callable:
        """Each stage's ``factory(params) -> optimizer``: named or given, clipped if asked."""
        config = self.config
        factory = optimizer if callable(optimizer) else make_optimizer_factory(
            optimizer, config["lr"], config["momentum"], config["weight_decay"]
        )
        if config["clip_grad_norm"] is not None:
            factory = with_grad_clipping(factory, config["clip_grad_norm"])
        return factory

    def _lr_schedule_factory(self, lr_schedule) -> Callable | None:
        """Each stage's base ``factory(optimizer) -> LRScheduler`` (None: constant lr).

        Every stage makes one update per step, so a named schedule spans ``total_steps``
        updates.
        """
        if callable(lr_schedule):
            return lr_schedule
        config = self.config
        return make_lr_schedule(
            lr_schedule or "constant", self.total_steps, warmup=config["lr_warmup"],
            step_size=config["lr_step_size"], gamma=config["lr_gamma"],
            updates_per_epoch=self.steps_per_epoch,
        )

    @property
    def history(self) -> History:
        """The history so far."""
        return self.recorder.history

    def train_one_step(self) -> None:
        """Run the pipeline until every stage made one more update; record; spot divergence."""
        result = self.engine.run(self.feed, stop_after_updates=self.step + 1)
        self.step += 1
        self.recorder.record(result)
        losses = result.loss_by_microbatch
        bad = [m for m, v in losses.items() if not math.isfinite(v)]
        if bad:  # weights are scanned only when the loss says something broke
            self.history.diverged = True
            self.history.divergence_step = bad[0] // self.config["num_microbatches"] + 1
            self.history.divergence = divergence_report(
                bad[0],
                losses[bad[0]],
                self.config["num_microbatches"],
                self.steps_per_epoch,
                self.step,
                _non_finite_stages(self.stages),
                len(self.stages),
            )

    def ends_period(self, steps: int) -> bool:
        """Whether the last step closes a period of ``steps`` steps or ends the run.

        The periods: an epoch (then fit evaluates) and ``checkpoint_every`` (then it saves).
        """
        return self.step % steps == 0 or self.step == self.total_steps

    def evaluate(self) -> None:
        """Append the test loss and accuracy after this step to the history."""
        self.history.evals.append(
            {
                "epoch": math.ceil(self.step / self.steps_per_epoch),
                "step": self.step,
                **evaluate(self.stages, self.data.x_test, self.data.y_test),
            }
        )

    def start_clock(self) -> None:
        """Count wall time from now on (set-up and loading are not training)."""
        self._clock = time.perf_counter()

    def finish(self) -> History:
        """Add the wall time since the last count and the measured delays and bytes."""
        now = time.perf_counter()
        self.history.wall_seconds += now - self._clock
        self._clock = now
        return self.recorder.finish()

    def save_to(self, path) -> None:
        """Write the full state atomically (:mod:`pipemare_lite.training.checkpoint`)."""
        self.finish()
        executor_state = self.engine.state_dict()  # collective with executor 'dist'
        if os.environ.get("RANK", "0") != "0":  # every rank has it; rank 0 writes the file
            return
        save_checkpoint(
            path,
            {
                "format": CHECKPOINT_FORMAT,
                "config": self.config,
                "step": self.step,
                "model_layout": model_layout(self.stages),
                "executor": encode_state(executor_state),
                **self.recorder.state(),
                "rng": rng_state(),
            },
        )

    def resume_from(self, path) -> None:
        """Continue from a checkpoint written by a run with the same settings."""
        state = load_checkpoint(path)
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(
                f"{path}: checkpoint format {state.get('format')!r}, "
                f"this version reads {CHECKPOINT_FORMAT}"
            )
        missing = [k for k in ("config", "step", "executor", "rng") if k not in state]
        if missing or not isinstance(state["config"], dict):
            raise CheckpointError(
                f"checkpoint {path} is not a training checkpoint of fit(): "
                + (f"it lacks {', '.join(missing)}" if missing else "its config is no dict")
            )
        config, saved = self.config, {**_SETTINGS_ADDED_LATER, **state["config"]}
        differ = sorted(k for k in config if saved.get(k) != config[k])
        if differ:
            raise ValueError(
                f"{path} was written by a run with other settings: "
                + ", ".join(f"{k}={saved.get(k)!r} (now {config[k]!r})" for k in differ)
            )
        if "model_layout" in state:  # checkpoints before it: load_state_dict's check only
            check_model_layout(path, state["model_layout"], model_layout(self.stages))
        try:
            self.engine.load_state_dict(decode_state(state["executor"]))
            self.recorder.load(state)
            self.step = state["step"]
            set_rng_state(state["rng"])
        except (KeyError, TypeError, RuntimeError, ValueError, IndexError) as exc:
            raise CheckpointError(
                f"checkpoint {path} does not fit this run ({type(exc).__name__}: "
                f"{str(exc).strip()[:300]}); it holds another model or another structure"
            ) from exc


@contextmanager
def _progress_bar(progress: bool | None, run: TrainingRun) -> Iterator[Callable]:
    """Yield ``show(history)``: one tick of a tqdm bar (rank 0 only), or nothing when off."""
    if not _progress_enabled(progress) or os.environ.get("RANK", "0") != "0":
        yield lambda history: None
        return
    from tqdm.auto import tqdm

    label = f"{run.config['method'] or run.config['schedule']} P={run.config['num_stages']}"
    bar = tqdm(total=run.total_steps, initial=run.step, desc=label, unit="step", leave=False)

    def show(history: History) -> None:
        bar.update(1)
        if history.loss:
            bar.set_postfix(loss=f"{history.loss[-1]:.3f}")

    try:
        yield show
    finally:
        bar.close()


def _progress_enabled(progress: bool | None) -> bool:
    """Explicit choice wins; else off under pytest or PIPEMARE_PROGRESS=0, on in a tty/kernel."""
    if progress is not None:
        return bool(progress)
    if os.environ.get("PYTEST_CURRENT_TEST") or os.environ.get("PIPEMARE_PROGRESS") == "0":
        return False
    return "ipykernel" in sys.modules or sys.stderr.isatty()


def _non_finite_stages(stages: Sequence[nn.Module]) -> list[int]:
    """The stages holding a NaN or inf weight (scanned only once a loss is non-finite)."""
    return [
        s
        for s, stage in enumerate(stages)
        if any(not torch.isfinite(p).all() for p in stage.parameters())
    ]

