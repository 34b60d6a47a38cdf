"""Training with a pipeline method: ``fit()`` and ``python -m pipemare_lite.training`` (chapter
07).

``fit`` is the loop every chapter from 07 on uses to compare methods on real data::

    from pipemare_lite.training.models import mlp
    from pipemare_lite.training.datasets import digits
    history = fit(mlp(64, 64, 8, 10), digits(), method="async", num_stages=8,
                  num_microbatches=4, batch_size=32, epochs=3, lr=0.05)
    history.final_accuracy, history.diverged, history.forward_delay

What one run is. The model is cut into ``num_stages`` stages
(:func:`pipemare_lite.training.partition.partition`: an ``nn.Sequential`` between its
children, any other ``nn.Module`` by torch's ``pipeline()``); the training set is fed in
shuffled minibatches of ``batch_size`` samples (a ``DataLoader``: its own batches, in its
own order; :mod:`pipemare_lite.training.batches`), each cut into ``num_microbatches``
microbatches (:mod:`pipemare_lite.training.data_feed`). The whole run, all epochs, is ONE
schedule of ``epochs * steps_per_epoch`` minibatches, so an asynchronous pipeline never
flushes between epochs, T1 anneals over the whole run by default, and warm-up covers the
first ``warmup`` minibatches. A "step" is one minibatch: every stage makes one optimizer
update per step. :func:`fit` reads as that algorithm: set up, then per step train,
record, evaluate at the end of an epoch, save a checkpoint when due; finish.

What it returns: a :class:`~pipemare_lite.training.history.History` (losses per step, learning rates
per stage and update, test loss and accuracy per epoch, forward delays measured from the
executed trace, peak bytes per device (rank) and kind with each stage's as a breakdown, wall
time).

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
attribute holds the history up to there). ``blow_up=BlowUpRule(...)`` also counts a finite
blow-up (:mod:`pipemare_lite.training.blow_up`: the loss above a factor of its running
minimum for a window of steps), with a report naming the rule, the step and the numbers.

Reading the losses. By default the losses are read to the host after every step (one
device sync a step on a GPU) and divergence is checked at once. ``loss_reads_every=K``
keeps them on their device and reads K steps' with one read (``"end"``: only at
evaluations, checkpoints and the end); each read replays the per-step checks over its
steps in order (:meth:`TrainingRun.read_losses`), so it finds the same first bad step
with the same report, the history cut there, while the weights have trained up to K - 1
steps further (:class:`~pipemare_lite.training.config.FitConfig`).

Checkpoints (:mod:`pipemare_lite.training.checkpoint`): with ``checkpoint_path`` and
``checkpoint_every=k`` the full state (executor state including in-flight microbatches,
optimizer and scheduler states, random states, history so far) is written atomically every
k steps; ``resume=True`` continues from it and gives the same trajectory bitwise as a run
that never stopped. Every setting must be the checkpoint's but ``epochs``: the length may
change (a finished run extended) where nothing depends on it, and then equals bitwise a run
asked for the new length from the start; where something does (a cosine lr schedule, T1's
default horizon, the drain at the end of a schedule that does not flush) the resume is
refused saying which (:mod:`pipemare_lite.training.run_length`).

Executors. ``executor="local"`` runs all stages in this process
(:class:`pipemare_lite.engine.LocalExecutor`), ``"dist"`` this rank's stages with one process
per rank; others plug in through :data:`~pipemare_lite.training.executors.EXECUTORS`
(:func:`~pipemare_lite.training.executors.register_executor`).

The command line (``pipemare-lite train``, ``python -m pipemare_lite.training``, torchrun) lives
in :mod:`pipemare_lite.cli.commands.train`.
"""

from __future__ import annotations

import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import torch
from torch import nn

from pipemare_lite.files import check_writable
from pipemare_lite.schedules.repeat import long_schedule, materialized
from pipemare_lite.schedules.validation import LIMITS, ScheduleError
from pipemare_lite.training import run_schedule
from pipemare_lite.training.batches import (
    BatchMicrobatches,
    batch_size_of,
    check_batches,
    check_eval_data,
    check_last_batch,
    run_evaluation,
    tensor_dataset_parts,
)
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
from pipemare_lite.training.config import FitConfig
from pipemare_lite.training.data_feed import EpochMicrobatches
from pipemare_lite.training.datasets import Dataset, check_dataset
from pipemare_lite.training.evaluation import classification_loss
from pipemare_lite.training.executors import EXECUTORS
from pipemare_lite.training.history import (
    DivergenceError,
    History,
    HistoryRecorder,
    divergence_report,
)
from pipemare_lite.training.lr_schedules import make_lr_schedule
from pipemare_lite.training.optimizers import (
    make_optimizer_factory,
    with_grad_clipping,
)
from pipemare_lite.training.partition import partition
from pipemare_lite.training.provenance import changed_code
from pipemare_lite.training.run_length import first_difference, horizon_refusal

__all__ = ["fit", "TrainingRun", "CHECKPOINT_FORMAT", "RECORDED_SETTINGS", "NoCheckpointWarning"]


class NoCheckpointWarning(UserWarning):
    """``fit(resume=True)`` found no checkpoint at ``checkpoint_path`` and starts from step 0."""

#: Bumped when the checkpoint layout changes; a mismatch is refused with a clear message.
CHECKPOINT_FORMAT = 1
#: The settings a run records (in its history and checkpoints) in this order, followed by
#: the dataset's name and ``threads`` (torch's thread count when the run started); resuming a
#: checkpoint with any of them changed is refused, but for ``threads`` (recorded only: another
#: count changes the numbers' last bits, not what was asked).
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


# --------------------------------------------------------------------------- fit


def fit(model: nn.Module, data, config: FitConfig | None = None, /, *, eval_data=None,
        **settings) -> History:
    """Train ``model`` on ``data`` with a pipeline ``method``; return the :class:`History`.

    Introduced in chapter 07; chapters 08 (T1) and 09 (T2, warm-up) switch its options.

    ``model`` is trained in place (its stages share its modules): an ``nn.Sequential``
    (cut between its children), a list of stage modules, or any ``nn.Module`` cut by
    torch's own splitter at the submodules named in ``balance``
    (:func:`~pipemare_lite.training.partition.partition`). ``data`` is a
    :class:`~pipemare_lite.training.datasets.Dataset`, a ``TensorDataset`` of ``(inputs,
    targets)``, or a ``DataLoader`` (any iterable of ``(inputs, targets)`` batches with a
    length; then ``batch_size`` is the loader's); ``eval_data`` batches or a function
    ``eval_data(model) -> dict`` measured at each evaluation (default: a ``Dataset``'s test
    split, else none): see :mod:`pipemare_lite.training.batches`. The settings are a
    :class:`~pipemare_lite.training.config.FitConfig` (``config``), its fields given as
    keywords (``fit(model, data, method="1f1b", num_stages=4, num_microbatches=8,
    epochs=3, batch_size=64, lr=0.05)``), or both (the keywords replace the config's):
    see :class:`FitConfig` for each one.

    The losses are read from their device after every step by default (one host read, one
    device sync on a GPU, per step). ``loss_reads_every=K`` reads them once per K steps
    (``"end"``: only at evaluations, checkpoints and the end), bitwise the same history;
    divergence is then found at the read, at the same step with the same report, but the
    run may have trained up to K - 1 steps beyond it (its weights after the divergence are
    not the per-step run's).
    """
    config = FitConfig.of(config, settings)  # every setting checked here, before any work
    _warn_about_threads()
    config = _check_data(data, config)
    check_eval_data(eval_data)
    schedule = run_schedule.resolve(config.schedule, method=config.method)  # a bad file first
    recorded = _run_config(config, schedule, data)  # as the history and checkpoints record it
    _check_sizes(recorded, _num_samples(data, recorded["batch_size"]))
    if not isinstance(data, Dataset) and tensor_dataset_parts(data) is None:
        check_last_batch(data, recorded["num_microbatches"], recorded["executor"])
    checkpoint_path, resume = config.checkpoint_path, config.resume
    if checkpoint_path is not None:  # not at the first save, steps into the run
        check_writable(checkpoint_path, "checkpoint_path")
    run = TrainingRun(
        model, data, recorded, gamma=config.gamma, balance=config.balance,
        devices=config.devices, optimizer=config.optimizer, lr_schedule=config.lr_schedule,
        loss_fn=config.loss_fn, schedule=schedule, checkpoints=checkpoint_path is not None,
        record=_run_recording(config.record, checkpoint_path), eval_data=eval_data,
        loss_reads_every=config.loss_reads_every,
    )
    if resume and Path(checkpoint_path).exists():
        run.resume_from(checkpoint_path)
    elif resume:  # said, not silent: a mistyped path would otherwise start over unnoticed
        warnings.warn(f"resume=True: no checkpoint at {checkpoint_path}; training from step 0",
                      NoCheckpointWarning, stacklevel=2)
    # the finite rule (training/blow_up.py), checked where the losses are read
    run.blow_up = config.blow_up.watch() if config.blow_up is not None else None
    try:
        with _progress_bar(config.progress, run) as show_progress:
            run.start_clock()
            while run.step < run.total_steps and not run.history.diverged:
                run.train_one_step()  # (loss_reads_every=1: read and checked here)
                evaluating = run.ends_period(config.eval_every or run.steps_per_epoch)
                saving = bool(config.checkpoint_every) and run.ends_period(
                    config.checkpoint_every)
                if (run.losses_due() or saving or run.step == run.total_steps
                        or (evaluating and run.evaluates)):  # their records complete
                    run.read_losses()
                show_progress(run.history)
                if evaluating or run.history.diverged:
                    run.evaluate()
                if config.on_step is not None:
                    config.on_step(run.step, run.history)
                if saving:
                    run.save_to(checkpoint_path)
            run.collect()  # the end: every rank's records and weights (executor 'dist')
    finally:
        close = getattr(run.engine, "close", None)  # executors holding threads (dist)
        if close is not None:
            close()
    history = run.finish()
    if history.diverged and config.on_divergence == "raise":
        raise DivergenceError(history.divergence, history)
    return history


# --------------------------------------------------------------------------- fit's steps


def _callable_name(value) -> str:
    """How the history records a factory or loss function: ``module.qualified_name``."""
    kind = value if hasattr(value, "__qualname__") else type(value)
    return f"{getattr(kind, '__module__', '?')}.{kind.__qualname__}"


_THREADS_WARNED = False


def _warn_about_threads() -> None:
    """Warn once per process when torch's default thread count (one per core) is in force:
    the command line and launch() use one thread, which is faster for small stages and what
    bitwise comparisons need (docs/glossary.md, "Threads"). fit() itself leaves it alone."""
    global _THREADS_WARNED
    threads = torch.get_num_threads()
    if _THREADS_WARNED or threads == 1 or "OMP_NUM_THREADS" in os.environ:
        return
    _THREADS_WARNED = True
    import warnings

    warnings.warn(
        f"fit() runs with torch's default of {threads} threads; the command line and "
        "launch() use 1 (--threads 1), which is faster for small stages and gives the numbers "
        "they give: call torch.set_num_threads(1) first, or set OMP_NUM_THREADS to keep "
        "your choice (warned once)", UserWarning, stacklevel=3)


def _check_data(data, config: FitConfig) -> FitConfig:
    """Refuse data fit() cannot train on, naming what is allowed; return ``config`` with a
    loader's batch size filled in (:mod:`pipemare_lite.training.batches`)."""
    import dataclasses

    if isinstance(data, Dataset):
        check_dataset(data, classification_targets=config.loss_fn is None)
    elif tensor_dataset_parts(data) is None:
        check_batches(data)
        size = batch_size_of(data)
        if config.batch_size not in (None, size):
            raise ValueError(f"batch_size={config.batch_size} but the data's batches hold "
                             f"{size} samples; leave batch_size out with a DataLoader")
        return dataclasses.replace(config, batch_size=size)
    if config.batch_size is None:
        raise ValueError("batch_size is required (a positive integer) with a Dataset or "
                         "TensorDataset: the samples per minibatch")
    return config


def _num_samples(data, batch_size: int) -> int:
    """Training samples per epoch (a loader's: its batches times ``batch_size``)."""
    if isinstance(data, Dataset):
        return len(data.x_train)
    parts = tensor_dataset_parts(data)
    return len(parts[0]) if parts is not None else len(data) * batch_size


def _data_name(data) -> str:
    """How the history names the data: a ``Dataset``'s name, else its type."""
    return data.name if isinstance(data, Dataset) else type(data).__name__


def _run_recording(record, checkpoint_path):
    """The engine's :class:`~pipemare_lite.engine.recording.Recording` for ``record``; a run
    that saves checkpoints keeps every forward's saved tensors (a checkpoint may fall between
    a forward and its backward)."""
    from dataclasses import replace

    from pipemare_lite.engine.recording import recording

    chosen = recording(record)  # ValueError naming the levels
    return chosen if checkpoint_path is None else replace(chosen, saved_tensors=True)


def _run_config(settings: FitConfig, choice, data: Dataset) -> dict:
    """The recorded settings of a run: ``settings`` with the method's defaults and the
    schedule's sizes filled in (``choice``: the resolved schedule or None)."""
    arguments = settings.settings()
    from pipemare_lite.methods import MethodOptions, get_method
    from pipemare_lite.training.optimizers import MUON_DEFAULT_MOMENTUM

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
    config["t1"] = defaults.t1 if t1 is None else bool(t1)
    config["t2"] = defaults.t2 if t2 is None else bool(t2)
    config["gamma"] = list(gamma) if isinstance(gamma, (list, tuple)) else gamma
    config["balance"] = balance if not isinstance(balance, tuple) else list(balance)
    if isinstance(balance, dict):  # {name: SplitPoint} of a traced split, as JSON can hold it
        config["balance"] = {name: getattr(point, "name", point) for name, point in
                             balance.items()}
    config["dataset"] = _data_name(data)
    config["threads"] = torch.get_num_threads()  # the CLI's --threads, or torch's default
    if config["chunks"] is None:  # the builder's: 2 for interleaved and the V schedules
        from pipemare_lite.schedules.registry import default_chunks

        builder = choice.name if choice is not None else spec.builder  # a file set its own
        config["chunks"] = default_chunks(builder)
    return config


def _check_sizes(config: dict, num_samples: int) -> None:
    """Refuse sizes that need the schedule (its sizes filled in) or the data, naming them."""
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
    batch_size = config["batch_size"]
    if num_samples // batch_size < 1:
        raise ValueError(f"batch size {batch_size} is larger than the training set ({num_samples})")
    total_steps = config["epochs"] * (num_samples // batch_size)
    if config["warmup"] > total_steps:
        raise ValueError(
            f"warmup={config['warmup']} minibatches exceeds the run's {total_steps} steps"
        )


class TrainingRun:
    """The moving parts of one fit() run and its steps (chapter 07).

    Set-up cuts the model into stages, builds the method's schedule for the whole run and
    the executor that runs it; then each :meth:`train_one_step` lets the executor run until
    every stage has made one more update, and the recorder folds what it reports into the
    history.
    """

    def __init__(
        self, model: nn.Module, data, config: dict, *, gamma, balance, devices,
        optimizer="sgd", lr_schedule=None, loss_fn=None, schedule=None, checkpoints=False,
        record="history", eval_data=None, loss_reads_every=1,
    ) -> None:
        from pipemare_lite.methods import (
            MethodOptions,
            build_method_schedule,
            get_method,
            method_options,
        )
        from pipemare_lite.training.provenance import run_provenance

        self.config, self.data = config, data
        self.eval_data, self.loss_fn = eval_data, loss_fn
        #: steps between reads of the losses (FitConfig.loss_reads_every; "end": none)
        self.loss_reads_every = loss_reads_every
        self._unread_steps = 0  # steps run since the last read of their losses
        #: the finite blow-up rule's watch (None: non-finite losses only), set by fit()
        self.blow_up = None
        method, num_stages, n = config["method"], config["num_stages"], config["num_microbatches"]
        self.steps_per_epoch = _num_samples(data, config["batch_size"]) // config["batch_size"]
        self.total_steps = config["epochs"] * self.steps_per_epoch
        most = LIMITS["num_minibatches"][1]  # one minibatch per step: say it in epochs
        if self.total_steps > most:
            raise ScheduleError(
                f"epochs={config['epochs']} x {self.steps_per_epoch} steps per epoch = "
                f"{self.total_steps} steps, more than a schedule runs (num_minibatches "
                f"allowed: 1..{most}); allowed here: epochs <= {most // self.steps_per_epoch}")
        # bad schedule options fail here, before the (possibly long) schedule is built
        scheduler_factory = self._lr_schedule_factory(lr_schedule)
        options = (MethodOptions if method is None else partial(method_options, method))(
            t1=config["t1"],
            t1_anneal_updates=config["t1_anneal_updates"],
            t2=config["t2"],
            gamma=gamma,
            warmup=config["warmup"],
        )
        chunks = config["chunks"]
        registered = (schedule.name if schedule is not None else  # for the plugins' hashes
                      None if method is None else get_method(method).builder)
        chosen = schedule

        def run_of(total_steps: int):
            """The whole run as one schedule of ``total_steps`` minibatches (periodic rows)."""
            if chosen is None:  # pipemare_lite.schedules.repeat
                return long_schedule(
                    lambda k: build_method_schedule(method, num_stages, n, chunks=chunks,
                                                    num_minibatches=k, options=options),
                    total_steps, warmup=options.warmup)
            # a registered or hand-written schedule (pipemare_lite.training.run_schedule)
            return run_schedule.schedule_for_run(chosen, num_stages, n, total_steps, chunks,
                                                 config["warmup"])

        self._schedule_of = run_of  # a resume that changes the length compares two of them
        schedule = run_of(self.total_steps)
        if config["executor"] not in ("local", "dist"):  # registered ones get a Schedule
            schedule = materialized(schedule)
        self.feed = _training_feed(data, config, schedule.num_virtual_stages)
        self.stages = partition(model, num_stages * chunks, balance=balance,
                                sample=self.feed[0][0])
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
        self.recorder = HistoryRecorder(
            History(config=config), n, len(self.stages), schedule.num_virtual_stages,
            num_ranks=schedule.num_ranks,
        )
        self.history.provenance = run_provenance(  # versions, plugins' sources, the rows
            schedule, schedule_name=registered, method=method, executor=config["executor"])
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
        """Run the pipeline until every stage made one more update; record; spot divergence
        (with ``loss_reads_every`` other than 1 the losses wait: :meth:`read_losses`)."""
        if self.loss_reads_every != 1:
            result = self.engine.run(self.feed, stop_after_updates=self.step + 1,
                                     read_losses=False)
            self.step += 1
            self.recorder.record(result)  # everything but the losses
            self._unread_steps += 1
            return
        result = self.engine.run(self.feed, stop_after_updates=self.step + 1)
        self.step += 1
        self.recorder.record(result)
        losses = result.loss_by_microbatch
        bad = _first_non_finite(losses)
        if bad is not None:  # weights are scanned only when the loss says something broke
            self.collect()  # every rank sees the same losses, so all of them gather here
            self._diverged_at(self.step, bad, losses[bad], _non_finite_stages(self.stages))
        elif self.blow_up is not None:
            self.blow_up.check(self.history)

    def _diverged_at(self, step: int, microbatch: int, loss: float,
                     non_finite_stages: list[int]) -> None:
        """Mark the history diverged: ``microbatch``'s ``loss`` is non-finite, found after
        step ``step``, when ``non_finite_stages`` held non-finite weights."""
        self.history.diverged = True
        self.history.divergence_step = microbatch // self.config["num_microbatches"] + 1
        self.history.divergence = divergence_report(
            microbatch,
            loss,
            self.config["num_microbatches"],
            self.steps_per_epoch,
            step,
            non_finite_stages,
            len(self.stages),
        )

    def losses_due(self) -> bool:
        """Whether ``loss_reads_every`` steps have run since the last read of the losses."""
        every = self.loss_reads_every
        return isinstance(every, int) and every > 1 and self._unread_steps >= every

    @property
    def evaluates(self) -> bool:
        """Whether an evaluation measures something (evaluation data, or a ``Dataset``'s
        test split: :func:`~pipemare_lite.training.batches.run_evaluation`)."""
        return self.eval_data is not None or isinstance(self.data, Dataset)

    def read_losses(self) -> None:
        """Read the losses of the steps run since the last read (one host read: the
        executor's ``read_losses``) and check them as :meth:`train_one_step` checks one
        step's, step by step in order: the same first non-finite loss or blow-up, the same
        report, the history's losses stopping where the per-step run's stop. A late finding
        also cuts the per-update records (lrs, update norms) at that step's updates; the
        weights, delays and byte peaks have moved on. Nothing to do when none waits."""
        if not self._unread_steps:
            return
        first = self.step - self._unread_steps + 1
        self._unread_steps = 0
        for step, run in enumerate(self.engine.read_losses(), start=first):
            self.recorder.add_losses(run.losses)
            bad = _first_non_finite(run.losses)
            if bad is None and (self.blow_up is None or not self.blow_up.check(self.history)):
                continue
            # every rank read the same losses, so all of them come here (collectives)
            non_finite, updates = self.engine.stage_health(run)  # as that step ended
            self.collect()
            if bad is not None:
                self._diverged_at(step, bad, run.losses[bad], non_finite)
            _cut_updates(self.history, updates)
            return

    def ends_period(self, steps: int) -> bool:
        """Whether the last step closes a period of ``steps`` steps or ends the run.

        The periods: an epoch (then fit evaluates) and ``checkpoint_every`` (then it saves).
        """
        return self.step % steps == 0 or self.step == self.total_steps

    def collect(self) -> None:
        """Fold in what the executor holds back between steps, if it does: executor
        ``"dist"`` returns only the losses per step and keeps the other records and the
        weights on their ranks until this call gathers them (a collective: every rank calls
        it at the same steps: evaluation, checkpoint, divergence, the end)."""
        gather = getattr(self.engine, "gather", None)
        if gather is not None:
            self.recorder.record(gather())

    def evaluate(self) -> None:
        """Append the test loss and accuracy after this step to the history (nothing when
        there is no evaluation data: :func:`~pipemare_lite.training.batches.run_evaluation`)."""
        self.collect()  # the weights of every stage, on every rank
        measured = run_evaluation(self.stages, self.data, self.eval_data, self.loss_fn)
        if measured is None:
            return
        self.history.evals.append(
            {"epoch": math.ceil(self.step / self.steps_per_epoch), "step": self.step,
             **measured}
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
        self.collect()
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
            raise CheckpointError(
                f"{path}: checkpoint format {state.get('format')!r}, "
                f"this version reads {CHECKPOINT_FORMAT}"
            )
        missing = [k for k in ("config", "step", "executor", "rng") if k not in state]
        if missing or not isinstance(state["config"], dict):  # (CheckpointError: a refusal)
            raise CheckpointError(
                f"checkpoint {path} is not a training checkpoint of fit(): "
                + (f"it lacks {', '.join(missing)}" if missing else "its config is no dict")
            )
        config, saved = self.config, {**_SETTINGS_ADDED_LATER, **state["config"]}
        saved["threads"] = config["threads"]  # recorded, not compared (RECORDED_SETTINGS)
        # the length may change where nothing depended on it (training/run_length.py)
        differ = sorted(k for k in config if k != "epochs" and saved.get(k) != config[k])
        if differ:
            raise CheckpointError(
                f"{path} was written by a run with other settings: "
                + ", ".join(f"{k}={saved.get(k)!r} (now {config[k]!r})" for k in differ)
            )
        now = self.history.provenance
        saved = (state.get("history") or {}).get("provenance") or {}  # none: written before
        old_epochs, judged_by = state["config"].get("epochs"), now
        if old_epochs != config["epochs"] and saved.get("schedule") is not None:
            # the code that ran is judged by the schedule of its own length; whether this
            # one continues it is _continue_with_length's question
            from pipemare_lite.training.provenance import schedule_digest

            if isinstance(old_epochs, int) and old_epochs >= 1:
                old_steps = old_epochs * self.steps_per_epoch
                judged_by = dict(now, schedule=schedule_digest(self._schedule_of(old_steps)))
        changed = changed_code(saved, judged_by)
        if changed:  # (a refusal of the file: one line under the distributed executor too)
            raise CheckpointError(f"{path} was written by other code: {'; '.join(changed)}. "
                                  "Resume with the plugins and schedule it ran, or start a "
                                  "new run")
        if "model_layout" in state:  # checkpoints before it: load_state_dict's check only
            check_model_layout(path, state["model_layout"], model_layout(self.stages))
        try:
            executor_state = decode_state(state["executor"])
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise CheckpointError(f"checkpoint {path} holds an executor state this version "
                                  f"cannot read ({type(exc).__name__}: {exc})") from exc
        if old_epochs != config["epochs"]:
            self._continue_with_length(path, state, executor_state)
        try:
            self.engine.load_state_dict(executor_state)
            self.recorder.load(state)
            self.history.config = self.config  # equal to the saved one, threads as now
            self.history.provenance = dict(now, **(
                {} if saved.get("environment") in (None, now["environment"])
                else {"resumed_from": saved["environment"]}))
            self.step = state["step"]
            set_rng_state(state["rng"])
        except (KeyError, TypeError, RuntimeError, ValueError, IndexError) as exc:
            raise CheckpointError(
                f"checkpoint {path} does not fit this run ({type(exc).__name__}: "
                f"{str(exc).strip()[:300]}); it holds another model or another structure"
            ) from exc

    def _continue_with_length(self, path, state: dict, executor_state: dict) -> None:
        """Let a checkpoint of another length continue as this run where the rule of
        :mod:`pipemare_lite.training.run_length` allows (the executor's state then names
        this run's schedule); else raise :class:`CheckpointError` saying why."""
        from pipemare_lite.schedules.repeat import schedule_key

        old_epochs, new_epochs = state["config"].get("epochs"), self.config["epochs"]
        if not isinstance(old_epochs, int) or isinstance(old_epochs, bool) or old_epochs < 1:
            raise CheckpointError(f"checkpoint {path} records epochs={old_epochs!r}, not a "
                                  "positive integer: it was not written by fit()")
        old_steps, new_steps = old_epochs * self.steps_per_epoch, self.total_steps
        where = (f"checkpoint {path} (step {state['step']} of a {old_steps}-step run, "
                 f"epochs={old_epochs}) cannot continue as a run of {new_steps} steps "
                 f"(epochs={new_epochs})")
        if state["step"] > new_steps:
            raise CheckpointError(f"{where}: it is past that run's end; ask for at least "
                                  f"{-(-state['step'] // self.steps_per_epoch)} epochs")
        refusal = horizon_refusal(self.config, old_steps, new_steps)
        if refusal is not None:
            raise CheckpointError(f"{where}: {refusal}")
        schedule = getattr(self.engine, "schedule", None)
        if schedule is None or "positions" not in executor_state:
            raise CheckpointError(f"{where}: executor {self.config['executor']!r} does not "
                                  "say where each rank stands in its schedule")
        differs = first_difference(self._schedule_of(old_steps), schedule,
                                   executor_state["positions"])
        if differs is not None:
            rank, index, ran, other = differs
            raise CheckpointError(
                f"{where}: its schedule does not continue there (rank {rank}'s action "
                f"{index} was {ran}, a {new_steps}-step run's is {other}): a schedule that "
                "does not flush drains its pipeline at the run's end; extend from a "
                "checkpoint saved before the drain (--checkpoint-every), or start a new run")
        executor_state["schedule"] = schedule_key(schedule)  # the same actions, run on


def _training_feed(data, config: dict, num_virtual_stages: int):
    """``feed[m] -> (x, y)`` for the whole run: shuffled minibatches of a ``Dataset`` or a
    ``TensorDataset`` (the run's seed), or a loader's own batches."""
    n = config["num_microbatches"]
    if isinstance(data, Dataset):
        x, y = data.x_train, data.y_train
    elif tensor_dataset_parts(data) is not None:
        x, y = tensor_dataset_parts(data)
    else:  # a rank with the first and the last stage reads a target ~2S microbatches late
        keep = 2 + math.ceil(2 * num_virtual_stages / n)
        return BatchMicrobatches(data, n, config["epochs"], keep_steps=keep)
    return EpochMicrobatches((x, y), config["batch_size"], n, config["seed"], config["epochs"])


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


def _first_non_finite(losses: dict[int, float]) -> int | None:
    """The first microbatch (in the order reported) whose loss is not finite, or None."""
    return next((m for m, v in losses.items() if not math.isfinite(v)), None)


def _cut_updates(history: History, updates: dict[int, int]) -> None:
    """Keep each stage's first ``updates[stage]`` per-update records (lrs of every group,
    update norms): what a run stopped after that many updates recorded."""
    for s, count in updates.items():
        for per_stage in (history.stage_lr, history.stage_update_norm):
            if s < len(per_stage):
                del per_stage[s][count:]
        if s < len(history.stage_lr_by_group):
            for rates in history.stage_lr_by_group[s]:
                del rates[count:]


def _non_finite_stages(stages: Sequence[nn.Module]) -> list[int]:
    """The stages holding a NaN or inf weight (scanned only once a loss is non-finite)."""
    return [
        s
        for s, stage in enumerate(stages)
        if any(not torch.isfinite(p).all() for p in stage.parameters())
    ]

