"""Every setting of a ``fit()`` run but the model and the data: :class:`FitConfig` (chapter 07).

``fit(model, data, method="1f1b", epochs=3, ...)`` builds one from its keyword arguments;
``fit(model, data, config)`` takes one made before (``dataclasses.replace(config, seed=1)``
for a sweep; ``fit(model, data, config, seed=1)`` does the same). A config is checked once,
when it is made, in :meth:`FitConfig.__post_init__`: a bad value is refused naming it and
what is allowed, before any work. What needs the schedule or the data (sizes a schedule
file sets, a batch larger than the training set) is checked by ``fit()`` once it has them.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipemare_lite.spelling import did_you_mean
from pipemare_lite.training.blow_up import BlowUpRule
from pipemare_lite.training.executors import EXECUTORS
from pipemare_lite.training.lr_schedules import LR_SCHEDULES
from pipemare_lite.training.optimizers import OPTIMIZERS, check_optimizer_options

#: What ``on_divergence`` may be.
DIVERGENCE_ACTIONS = ("stop", "raise")


@dataclass(frozen=True)
class FitConfig:
    """The settings of one ``fit()`` run (introduced in chapter 07).

    Attributes:
        method: a name from :data:`pipemare_lite.methods.METHODS` (gpipe, 1f1b, pipedream,
            2bw, async, pipemare ...), or one added with
            :func:`~pipemare_lite.methods.register_method` (docs/write-a-method.md; other
            processes need the plugin too: :mod:`pipemare_lite.plugins`); optional with
            ``schedule``.
        num_stages: P, pipeline stages (at most ``len(model)``); a given schedule's own.
        num_microbatches: N, microbatches per minibatch (one update per minibatch); a given
            schedule's own.
        epochs, batch_size: passes over the training set and samples per minibatch
            (``batch_size``: required with a ``Dataset`` or ``TensorDataset``; a
            ``DataLoader``'s own when left out).
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
            training loss (default: cross-entropy, per position for sequences); targets of
            any dtype (floats for a regression, e.g. ``F.mse_loss``). The test loss in
            ``evals`` stays the cross-entropy for class-label targets, so runs compare on
            one measure; other targets are measured with ``loss_fn``, accuracy None
            (:mod:`pipemare_lite.training.batches`).
        clip_grad_norm: clip each stage's gradient before its update so that the L2 norm
            over that stage's parameters is at most this (per stage: no communication).
        seed: data order (and nothing else: build the model with its own seed).
        t1, t2: PipeMare's techniques on/off; None keeps the method's default (on for
            ``pipemare``, off otherwise).
        t1_anneal_updates: K, updates over which T1 anneals (None: the whole run).
        gamma: T2's decay (one value or one per stage).
        warmup: the first ``warmup`` minibatches run flushed (PipeMare-W; async methods).
        balance: how to partition (see :func:`pipemare_lite.training.partition.partition`);
            for a model that is no ``nn.Sequential``, the submodules where stages 1..P-1
            begin (``["layer2", "layer3"]``): torch's ``pipeline()`` traces and cuts it.
        chunks: v, model chunks per rank: the model is cut into ``num_stages * chunks``
            pieces. Default: the builder's
            (:func:`~pipemare_lite.schedules.registry.default_chunks`: 2 for
            ``interleaved``, the V schedules ``zb-v`` and ``dualpipev`` and a registered
            builder that declared ``chunks``; 1 elsewhere), or a given schedule's own. Other
            than 1 only with ``interleaved`` or a schedule; the placement (which rank holds
            which piece) is always the schedule's.
        devices: one device per stage (default: where the model is).
        progress: tqdm bar; None shows it in terminals and notebooks, not under pytest or
            when the environment variable ``PIPEMARE_PROGRESS=0``.
        on_divergence: ``"stop"`` returns a history with ``diverged=True``; ``"raise"``
            raises :class:`DivergenceError`.
        blow_up: a :class:`~pipemare_lite.training.blow_up.BlowUpRule` that also counts a
            finite blow-up as divergence (loss above ``factor`` times its running minimum
            for ``window`` steps in a row); None (default): only a non-finite loss does.
        on_step: called as ``on_step(step, history)`` after every step (e.g. live plots).
        eval_every: also measure test loss and accuracy every that many steps (default: at
            the end of each epoch only); evaluation never changes the training trajectory.
        checkpoint_path, checkpoint_every: save the full state every that many steps.
        resume: continue from ``checkpoint_path`` when it exists (a warning says so when it
            does not: the run starts from step 0); without ``checkpoint_every`` the run
            reads the checkpoint and saves none. ``epochs`` may differ from the
            checkpoint's where nothing depends on the length
            (:mod:`pipemare_lite.training.run_length`; refused, saying why, elsewhere).
        executor: ``"local"``, ``"dist"`` or a name registered in
            :data:`~pipemare_lite.training.executors.EXECUTORS`.
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
        loss_reads_every: how often the training losses are read from their device to the
            host. 1 (default): after every step, one read a step (one device sync on a
            GPU), divergence found at once. K > 1: the losses stay tensors on the last
            stage's device and are read with ONE read per K steps (executor ``"dist"``: one
            broadcast per K steps instead of one per step); ``"end"``: read only when the
            run needs them complete, at an evaluation that measures something, a
            checkpoint and the end. Evaluations, checkpoints and the end always read first.
            The losses and the history are the same bitwise as with 1; divergence (a
            non-finite loss, ``blow_up``) is checked at each read over every step read, in
            step order, so it finds the same first bad step with the same report (the
            stages with non-finite weights then, the lrs and update norms cut to that
            step). But the run has by then trained up to K - 1 steps beyond it: the weights
            after a divergence, the evaluation made then, the measured delays and byte
            peaks cover those steps too, and are not the per-step run's. ``on_step`` and
            the progress bar see the losses as of the last read. At ``record="losses"``
            nothing else is read per step, so a run then reads the host only at its reads;
            executors ``"local"`` and ``"dist"`` only. Costs: the steps between two reads
            keep their losses (N values a step) and, per stage, a finite-weights flag on
            the device (two small kernels per parameter a step, no sync), so ``"end"``
            without evaluations keeps every step's until the end.
    """

    epochs: int
    batch_size: int | None = None
    method: str | None = None
    num_stages: int | None = None
    num_microbatches: int | None = None
    lr: float | None = None
    optimizer: str | Callable = "sgd"
    momentum: float | None = None
    weight_decay: float = 0.0
    lr_schedule: str | Callable | None = None
    lr_warmup: int = 0
    lr_step_size: int | None = None
    lr_gamma: float | None = None
    loss_fn: Callable | None = None
    clip_grad_norm: float | None = None
    seed: int = 0
    t1: bool | None = None
    t1_anneal_updates: int | None = None
    t2: bool | None = None
    gamma: float | Sequence[float] = 0.9
    warmup: int = 0
    balance: object = None
    chunks: int | None = None
    devices: Sequence | None = None
    progress: bool | None = None
    on_divergence: str = "stop"
    on_step: Callable | None = None
    eval_every: int | None = None
    checkpoint_path: str | os.PathLike | None = None
    checkpoint_every: int | None = None
    resume: bool = False
    executor: str = "local"
    schedule: object = None
    record: str = "history"
    blow_up: object = None
    loss_reads_every: int | str = 1

    def __post_init__(self) -> None:
        _check_torch_options(self.settings())
        _check_settings(self)

    def settings(self) -> dict:
        """``{field: value}`` (values as given, not copied)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def of(cls, config: FitConfig | None, settings: dict) -> FitConfig:
        """``config`` with ``settings`` replaced, or a new config of ``settings``; an unknown
        setting is refused naming the known ones."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise TypeError(f"fit() got unknown settings {', '.join(unknown)}; allowed: "
                            f"{', '.join(sorted(known))}.{did_you_mean(unknown[0], known)}")
        if config is None:
            if "epochs" not in settings:
                raise TypeError("fit() needs epochs (a positive integer)")
            return cls(**settings)
        if not isinstance(config, cls):
            raise TypeError(f"fit()'s third argument is a FitConfig, got {config!r}")
        return dataclasses.replace(config, **settings) if settings else config


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


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_blow_up(rule) -> None:
    """Refuse a ``blow_up`` that is neither None nor a rule (the rule checks its numbers)."""
    if rule is not None and not isinstance(rule, BlowUpRule):
        raise ValueError("blow_up must be None (non-finite losses only) or a "
                         f"pipemare_lite.training.blow_up.BlowUpRule, got {rule!r}")


def _check_settings(config: FitConfig) -> None:
    """Refuse bad settings that need neither the schedule nor the data."""
    if not _positive_int(config.epochs):
        raise ValueError(f"epochs must be a positive integer, got {config.epochs!r}")
    # None: the schedule's own (batch_size: a DataLoader's own)
    for name in ("batch_size", "num_stages", "num_microbatches", "chunks"):
        value = getattr(config, name)
        if value is not None and not _positive_int(value):
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if config.on_divergence not in DIVERGENCE_ACTIONS:
        raise ValueError(
            f"on_divergence must be one of {', '.join(DIVERGENCE_ACTIONS)}, "
            f"got {config.on_divergence!r}"
        )
    _check_blow_up(config.blow_up)
    warmup = config.warmup
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be >= 0 minibatches, got {warmup!r}")
    seed = config.seed
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an integer in 0..2**32-1, got {seed!r}")
    _check_gamma(config.gamma)
    k = config.t1_anneal_updates
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
        raise ValueError(f"t1_anneal_updates must be an integer >= 0 (updates; 0: T1 off) or "
                         f"None (the whole run), got {k!r}")
    if config.executor not in EXECUTORS:
        raise ValueError(
            f"unknown executor {config.executor!r}; allowed: {', '.join(EXECUTORS)}"
        )
    path, every = config.checkpoint_path, config.checkpoint_every
    if every is not None and path is None:
        raise ValueError("checkpoint_every needs a checkpoint_path to save to")
    if path is not None and every is None and not config.resume:
        raise ValueError("checkpoint_path without checkpoint_every saves nothing: give "
                         "checkpoint_every (steps between saves), or resume=True to continue "
                         "from it without saving")
    eval_every = config.eval_every
    if eval_every is not None and (not isinstance(eval_every, int) or eval_every < 1):
        raise ValueError(f"eval_every must be a positive integer or None, got {eval_every!r}")
    if every is not None and (not isinstance(every, int) or every < 1):
        raise ValueError(f"checkpoint_every must be a positive integer, got {every}")
    if config.resume and path is None:
        raise ValueError("resume=True needs a checkpoint_path")
    _check_loss_reads(config.loss_reads_every, config.executor)


#: ``loss_reads_every``'s value for "read only at evaluations, checkpoints and the end".
LOSS_READS_AT_END = "end"


def _check_loss_reads(every, executor: str) -> None:
    """``loss_reads_every``: a positive integer (steps) or ``"end"``; other than 1 only
    where the executor can keep losses unread (local, dist)."""
    if every != LOSS_READS_AT_END and not _positive_int(every):
        raise ValueError(f"loss_reads_every must be a positive integer (steps between reads "
                         f"of the losses; 1: every step) or {LOSS_READS_AT_END!r} (read only "
                         f"at evaluations, checkpoints and the end), got {every!r}")
    if every != 1 and executor not in ("local", "dist"):
        raise ValueError(f"loss_reads_every={every!r} needs executor 'local' or 'dist' "
                         f"(executor {executor!r} reads the losses of every step)")


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
