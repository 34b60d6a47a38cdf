"""Training with a pipeline method: ``fit()`` and ``python -m pipemare_lite.train`` (chapter 07).

``fit`` is the loop every chapter from 07 on uses to compare methods on real data::

    from pipemare_lite.models import mlp
    from pipemare_lite.datasets import digits
    history = fit(mlp(64, 64, 8, 10), digits(), method="async", num_stages=8,
                  num_microbatches=4, batch_size=32, epochs=3, lr=0.05)
    history.final_accuracy, history.diverged, history.forward_delay

What one run is. The model is cut into ``num_stages`` stages
(:func:`pipemare_lite.partition.partition`). Every epoch the training set is shuffled
(the order is a pure function of ``seed`` and the epoch number) and cut into minibatches of
``batch_size`` samples (a last partial minibatch is dropped) and each minibatch into
``num_microbatches`` microbatches. The whole run, all epochs, is ONE schedule of
``epochs * steps_per_epoch`` minibatches, so an asynchronous pipeline never flushes between
epochs, T1 anneals over the whole run by default, and warm-up covers the first ``warmup``
minibatches. A "step" is one minibatch: every stage makes one optimizer update per step.

What the history records (:class:`History`): the loss of every step (mean over its
microbatches, each computed with the weights the forward saw), the learning rate of every
stage at every update, the test loss and accuracy at the end of every epoch, the forward
delay of every stage measured from the executed trace (the version its forward read versus
the version its gradient was applied to), the peak bytes held per stage and kind as the
executor measured them, and the wall time.

Divergence. A non-finite loss stops the run. ``on_divergence="stop"`` (default) returns the
history with ``diverged=True`` and a readable ``divergence`` message naming the step, the
microbatch and the stages whose weights are non-finite by then; ``"raise"`` raises
:class:`DivergenceError` with the same message.

Checkpoints (:mod:`pipemare_lite.checkpoint`): with ``checkpoint_path`` and
``checkpoint_every=k`` the full state (executor state including in-flight microbatches,
optimizer and scheduler states, random states, history so far) is written atomically every
k steps; ``resume=True`` continues from it and gives the same trajectory bitwise as a run
that never stopped.

Executors. ``executor="local"`` runs all stages in this process
(:class:`pipemare_lite.executor.LocalExecutor`). Other executors plug in through
:data:`EXECUTORS` (see :func:`register_executor`): the distributed engine registers
``"dist"`` there.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from pipemare_lite.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from pipemare_lite.datasets import Dataset, microbatches
from pipemare_lite.partition import partition

OPTIMIZERS = ("sgd", "adam")
DIVERGENCE_ACTIONS = ("stop", "raise")
#: Bumped when the checkpoint layout changes; a mismatch is refused with a clear message.
CHECKPOINT_FORMAT = 1


class DivergenceError(RuntimeError):
    """Training produced a non-finite loss; the message says at which step and stage."""


# --------------------------------------------------------------------------- history


@dataclass
class History:
    """What a :func:`fit` run did, step by step (all plain values, JSON-ready).

    Attributes:
        config: the arguments of the run.
        loss: training loss per step (mean over the step's microbatches).
        stage_lr: ``stage_lr[s][k]``, learning rate of stage s at its update k.
        evals: ``{"epoch", "step", "loss", "accuracy"}`` on the test set, after each epoch.
        diverged: True when a non-finite loss stopped the run.
        divergence: the readable report when diverged, else None.
        forward_delay: per stage, mean measured forward delay in updates.
        forward_delay_max: per stage, largest measured forward delay.
        memory_bytes: peak bytes by kind (weights, stash, t2_buffer, optimizer,
            activations), each the sum over stages of that stage's peak: what P devices
            each holding one stage need at most.
        memory_bytes_by_stage: the per-stage peaks themselves.
        wall_seconds: wall time spent in training and evaluation (summed over resumes).
    """

    config: dict = field(default_factory=dict)
    loss: list[float] = field(default_factory=list)
    stage_lr: list[list[float]] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    diverged: bool = False
    divergence: str | None = None
    forward_delay: list[float] = field(default_factory=list)
    forward_delay_max: list[int] = field(default_factory=list)
    memory_bytes: dict[str, int] = field(default_factory=dict)
    memory_bytes_by_stage: list[dict[str, int]] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def steps(self) -> int:
        """How many steps (minibatches) finished."""
        return len(self.loss)

    @property
    def final_loss(self) -> float:
        """Test loss at the last evaluation (NaN if there was none)."""
        return self.evals[-1]["loss"] if self.evals else math.nan

    @property
    def final_accuracy(self) -> float:
        """Test accuracy at the last evaluation (NaN if there was none)."""
        return self.evals[-1]["accuracy"] if self.evals else math.nan

    def summary(self) -> dict:
        """The numbers the CLI prints with ``--json``."""
        return {
            "final_loss": self.final_loss,
            "final_accuracy": self.final_accuracy,
            "final_train_loss": self.loss[-1] if self.loss else math.nan,
            "diverged": self.diverged,
            "divergence": self.divergence,
            "steps": self.steps,
            "forward_delay": self.forward_delay,
            "forward_delay_max": self.forward_delay_max,
            "memory_bytes": self.memory_bytes,
            "memory_bytes_by_stage": self.memory_bytes_by_stage,
            "wall_seconds": self.wall_seconds,
            "evals": self.evals,
        }

    def to_dict(self) -> dict:
        """All fields as plain values (for checkpoints and JSON)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> History:
        """Inverse of :meth:`to_dict`."""
        return cls(**data)


# --------------------------------------------------------------------------- pieces


def classification_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy averaged over samples (and positions, for per-token logits)."""
    if output.dim() > 2:  # (B, T, V) logits against (B, T) targets
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))
    return F.cross_entropy(output, target)


def forward_through(stages: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """Run ``x`` through the stages in order, moving it to each stage's device."""
    for stage in stages:
        device = next((p.device for p in stage.parameters()), x.device)
        x = stage(x.to(device))
    return x


@torch.no_grad()
def evaluate(model, x: torch.Tensor, y: torch.Tensor, batch_size: int = 512) -> dict:
    """Mean loss and accuracy on ``(x, y)`` (per position for sequences).

    ``model`` is a module or a list of stages (possibly on different devices).
    """
    stages = list(model) if isinstance(model, (list, tuple)) else [model]
    total_loss, correct, count = 0.0, 0, 0
    for i in range(0, len(x), batch_size):
        xb, yb = x[i : i + batch_size], y[i : i + batch_size]
        out = forward_through(stages, xb).cpu()
        logits = out.reshape(-1, out.shape[-1])
        targets = yb.reshape(-1)
        total_loss += float(F.cross_entropy(logits, targets, reduction="sum"))
        correct += int((logits.argmax(-1) == targets).sum())
        count += targets.numel()
    return {"loss": total_loss / count, "accuracy": correct / count}


def make_optimizer_factory(
    name: str, lr: float, momentum: float = 0.0, weight_decay: float = 0.0
) -> Callable:
    """``factory(params) -> optimizer`` for ``sgd`` (with momentum) or ``adam``."""
    if name == "sgd":
        return lambda params: torch.optim.SGD(
            params, lr=lr, momentum=momentum, weight_decay=weight_decay
        )
    if name == "adam":
        return lambda params: torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"unknown optimizer {name!r}; allowed: {', '.join(OPTIMIZERS)}")


def epoch_order(num_samples: int, seed: int, epoch: int) -> torch.Tensor:
    """The shuffled sample order of one epoch: a pure function of ``(seed, epoch)``."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_samples, generator=generator)


class EpochMicrobatches(Sequence):
    """Lazy ``microbatches[m] -> (x, y)`` over the whole run, indexed by global microbatch.

    Microbatch m belongs to step ``k = m // N`` of epoch ``k // steps_per_epoch``; only the
    epoch's order is kept in memory.
    """

    def __init__(
        self, data: Dataset, batch_size: int, num_microbatches: int, seed: int, epochs: int
    ) -> None:
        self.x, self.y = data.x_train, data.y_train
        self.batch_size, self.num_microbatches, self.seed = batch_size, num_microbatches, seed
        self.steps_per_epoch = len(self.x) // batch_size
        self.epochs = epochs
        self._order: tuple[int, torch.Tensor] | None = None  # (epoch, its sample order)
        self._step: tuple[int, list] | None = None  # (step, its microbatches)

    def __len__(self) -> int:
        return self.epochs * self.steps_per_epoch * self.num_microbatches

    def __getitem__(self, m: int):
        if not 0 <= m < len(self):
            raise IndexError(f"microbatch {m} out of range 0..{len(self) - 1}")
        step, j = divmod(m, self.num_microbatches)
        if self._step is None or self._step[0] != step:
            epoch, position = divmod(step, self.steps_per_epoch)
            if self._order is None or self._order[0] != epoch:
                self._order = (epoch, epoch_order(len(self.x), self.seed, epoch))
            size = self.batch_size
            chosen = self._order[1][position * size : (position + 1) * size]
            self._step = (step, microbatches(self.x[chosen], self.y[chosen], self.num_microbatches))
        return self._step[1][j]


# --------------------------------------------------------------------------- executors


def _local_executor(schedule, stages, *, loss_fn, optimizer_factory, method_options, devices):
    from pipemare_lite.executor.local import LocalExecutor

    return LocalExecutor(
        schedule,
        stages,
        loss_fn=loss_fn,
        optimizer_factory=optimizer_factory,
        method_options=method_options,
        devices=devices,
    )


def _dist_executor(schedule, stages, **kwargs):
    # The distributed engine lives in pipemare_lite.executor.dist (one process per stage,
    # launched by torchrun). It is expected to offer the LocalExecutor contract: run(),
    # state_dict(), load_state_dict(), workers.
    try:
        from pipemare_lite.executor.dist import DistExecutor
    except ImportError as exc:
        raise ValueError(f"executor 'dist' is not available: {exc}") from exc
    return DistExecutor(schedule, stages, **kwargs)


#: name -> ``factory(schedule, stage_modules, *, loss_fn, optimizer_factory, method_options,
#: devices)`` returning an object with the LocalExecutor contract.
EXECUTORS: dict[str, Callable] = {"local": _local_executor, "dist": _dist_executor}


def register_executor(name: str, factory: Callable) -> None:
    """Make ``fit(..., executor=name)`` use ``factory`` (see :data:`EXECUTORS`)."""
    EXECUTORS[name] = factory


# --------------------------------------------------------------------------- checkpoint codec
# Executor states hold tuples, tuple-keyed dicts and ParamRef records. Checkpoints may hold
# only plain values (so they load with weights_only=True), so we spell those out and build
# them back; only the classes listed here are ever rebuilt.


def _record_classes() -> dict:
    from pipemare_lite.methods.versions import ParamRef

    return {"ParamRef": ParamRef}


def encode_state(value):
    """Turn an executor state into tensors, numbers, strings, None, lists and str-keyed dicts."""
    if isinstance(value, (torch.Tensor, bool, int, float, str, type(None))):
        return value
    if isinstance(value, list):
        return [encode_state(v) for v in value]
    if isinstance(value, tuple):
        return {"__tuple__": [encode_state(v) for v in value]}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: encode_state(v) for k, v in value.items()}
        return {"__items__": [[encode_state(k), encode_state(v)] for k, v in value.items()]}
    name = type(value).__name__
    if name in _record_classes() and hasattr(value, "__dataclass_fields__"):
        fields = {f: encode_state(getattr(value, f)) for f in value.__dataclass_fields__}
        return {"__record__": name, "fields": fields}
    raise TypeError(f"cannot store a {name} in a checkpoint: {value!r}")


def decode_state(value):
    """Inverse of :func:`encode_state`."""
    if isinstance(value, list):
        return [decode_state(v) for v in value]
    if isinstance(value, dict):
        if "__tuple__" in value:
            return tuple(decode_state(v) for v in value["__tuple__"])
        if "__items__" in value:
            return {_hashable(decode_state(k)): decode_state(v) for k, v in value["__items__"]}
        if "__record__" in value:
            cls = _record_classes()[value["__record__"]]
            return cls(**{k: decode_state(v) for k, v in value["fields"].items()})
        return {k: decode_state(v) for k, v in value.items()}
    return value


def _hashable(key):
    return tuple(_hashable(k) for k in key) if isinstance(key, (list, tuple)) else key


# --------------------------------------------------------------------------- fit


def _progress_enabled(progress: bool | None) -> bool:
    """Explicit choice wins; else off under pytest or PIPEMARE_PROGRESS=0, on in a tty/kernel."""
    if progress is not None:
        return bool(progress)
    if os.environ.get("PYTEST_CURRENT_TEST") or os.environ.get("PIPEMARE_PROGRESS") == "0":
        return False
    return "ipykernel" in sys.modules or sys.stderr.isatty()


def _non_finite_stages(stages: Sequence[nn.Module]) -> list[int]:
    return [
        s
        for s, stage in enumerate(stages)
        if any(not torch.isfinite(p).all() for p in stage.parameters())
    ]


class _DelayMeter:
    """Forward delay per stage measured from the executed trace, across run() calls.

    For each stage, walking its executed actions in order: F(m) records the version its
    forward read; the first U after B(m) (or W(m)) applies m's gradient to version v, and
    the delay is v - version_at_forward.
    """

    def __init__(self, num_stages: int) -> None:
        self.forward_version: list[dict[int, int]] = [{} for _ in range(num_stages)]
        self.waiting: list[list[int]] = [[] for _ in range(num_stages)]
        self.delays: list[list[int]] = [[] for _ in range(num_stages)]

    def feed(self, trace) -> None:
        versions = trace.extra["versions"]
        by_stage: dict[int, list] = {}
        for entry in sorted(trace.entries, key=lambda e: (e.rank, e.start)):
            by_stage.setdefault(entry.action.stage, []).append(entry.action)
        for s, actions in by_stage.items():
            for action in actions:
                if action.kind == "F":
                    self.forward_version[s][action.index] = versions[str(action)]
                elif action.kind in ("B", "W"):
                    self.waiting[s].append(action.index)
                elif action.kind == "U":
                    applied = versions[str(action)]
                    for m in self.waiting[s]:
                        self.delays[s].append(applied - self.forward_version[s].pop(m))
                    self.waiting[s] = []

    def mean(self) -> list[float]:
        return [sum(d) / len(d) if d else 0.0 for d in self.delays]

    def max(self) -> list[int]:
        return [max(d) if d else 0 for d in self.delays]

    def state(self) -> dict:
        return {
            "forward_version": [{str(k): v for k, v in d.items()} for d in self.forward_version],
            "waiting": self.waiting,
            "delays": self.delays,
        }

    def load(self, state: dict) -> None:
        self.forward_version = [{int(k): v for k, v in d.items()} for d in state["forward_version"]]
        self.waiting = [list(w) for w in state["waiting"]]
        self.delays = [list(d) for d in state["delays"]]


def _check_config(config: dict) -> None:
    for name in ("num_stages", "num_microbatches", "epochs", "batch_size"):
        value = config[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not (isinstance(config["lr"], (int, float)) and config["lr"] > 0):
        raise ValueError(f"lr must be a positive number, got {config['lr']!r}")
    if config["optimizer"] not in OPTIMIZERS:
        raise ValueError(
            f"unknown optimizer {config['optimizer']!r}; allowed: {', '.join(OPTIMIZERS)}"
        )
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
    if config["warmup"] < 0:
        raise ValueError(f"warmup must be >= 0 minibatches, got {config['warmup']}")


def fit(
    model: nn.Sequential,
    data: Dataset,
    *,
    method: str,
    num_stages: int,
    num_microbatches: int,
    epochs: int,
    lr: float,
    batch_size: int,
    optimizer: str = "sgd",
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    seed: int = 0,
    t1: bool | None = None,
    t1_anneal_updates: int | None = None,
    t2: bool | None = None,
    gamma: float | Sequence[float] = 0.9,
    warmup: int = 0,
    balance=None,
    devices: Sequence | None = None,
    progress: bool | None = None,
    on_divergence: str = "stop",
    on_step: Callable[[int, History], None] | None = None,
    checkpoint_path: str | os.PathLike | None = None,
    checkpoint_every: int | None = None,
    resume: bool = False,
    executor: str = "local",
) -> History:
    """Train ``model`` on ``data`` with a pipeline ``method``; return the :class:`History`.

    Args:
        model: an ``nn.Sequential``; it is trained in place (its stages share its modules).
        data: a :class:`~pipemare_lite.datasets.Dataset`.
        method: a name from :data:`pipemare_lite.methods.METHODS` (gpipe, 1f1b, pipedream,
            2bw, async, pipemare ...).
        num_stages: P, pipeline stages (at most ``len(model)``).
        num_microbatches: N, microbatches per minibatch (one update per minibatch).
        epochs, batch_size: passes over the training set and samples per minibatch.
        lr, optimizer, momentum, weight_decay: the per-stage optimizer (``sgd``/``adam``).
        seed: data order (and nothing else: build the model with its own seed).
        t1, t2: PipeMare's techniques on/off; None keeps the method's default (on for
            ``pipemare``, off otherwise).
        t1_anneal_updates: K, updates over which T1 anneals (None: the whole run).
        gamma: T2's decay (one value or one per stage).
        warmup: the first ``warmup`` minibatches run flushed (PipeMare-W; async methods).
        balance: how to partition (see :func:`pipemare_lite.partition.partition`).
        devices: one device per stage (default: where the model is).
        progress: tqdm bar; None shows it in terminals and notebooks, not under pytest or
            when the environment variable ``PIPEMARE_PROGRESS=0``.
        on_divergence: ``"stop"`` returns a history with ``diverged=True``; ``"raise"``
            raises :class:`DivergenceError`.
        on_step: called as ``on_step(step, history)`` after every step (e.g. live plots).
        checkpoint_path, checkpoint_every: save the full state every that many steps.
        resume: continue from ``checkpoint_path`` when it exists.
        executor: ``"local"`` or a name registered in :data:`EXECUTORS`.
    """
    from pipemare_lite.methods import build_method_schedule, get_method, method_options

    spec = get_method(method)
    config = {
        "method": method,
        "num_stages": num_stages,
        "num_microbatches": num_microbatches,
        "epochs": epochs,
        "lr": lr,
        "batch_size": batch_size,
        "optimizer": optimizer,
        "momentum": momentum,
        "weight_decay": weight_decay,
        "seed": seed,
        "t1": spec.options.lr_rescheduling if t1 is None else bool(t1),
        "t1_anneal_updates": t1_anneal_updates,
        "t2": spec.options.discrepancy_correction if t2 is None else bool(t2),
        "gamma": list(gamma) if isinstance(gamma, (list, tuple)) else gamma,
        "warmup": warmup,
        "balance": balance if not isinstance(balance, tuple) else list(balance),
        "on_divergence": on_divergence,
        "executor": executor,
        "dataset": data.name,
    }
    _check_config(config)
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; allowed: {', '.join(EXECUTORS)}")
    if (checkpoint_every is None) != (checkpoint_path is None):
        raise ValueError("checkpoint_path and checkpoint_every go together: give both or neither")
    if checkpoint_every is not None and checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be a positive integer, got {checkpoint_every}")
    if resume and checkpoint_path is None:
        raise ValueError("resume=True needs a checkpoint_path")

    steps_per_epoch = len(data.x_train) // batch_size
    if steps_per_epoch < 1:
        raise ValueError(
            f"batch size {batch_size} is larger than the training set ({len(data.x_train)})"
        )
    total_steps = epochs * steps_per_epoch
    if warmup > total_steps:
        raise ValueError(f"warmup={warmup} minibatches exceeds the run's {total_steps} steps")

    options = method_options(
        method,
        lr_rescheduling=config["t1"],
        rescheduling_horizon=t1_anneal_updates,
        discrepancy_correction=config["t2"],
        gamma=gamma,
        warmup_minibatches=warmup,
    )
    schedule = build_method_schedule(
        method, num_stages, num_microbatches, num_minibatches=total_steps, options=options
    )
    stages = partition(model, num_stages, balance=balance)
    engine = EXECUTORS[executor](
        schedule,
        stages,
        loss_fn=classification_loss,
        optimizer_factory=make_optimizer_factory(optimizer, lr, momentum, weight_decay),
        method_options=options,
        devices=devices,
    )
    feed = EpochMicrobatches(data, batch_size, num_microbatches, seed, epochs)
    history = History(config=config)
    delays = _DelayMeter(schedule.num_virtual_stages)
    pending_losses: dict[int, float] = {}
    step = 0
    peaks: list[dict[str, int]] = [{} for _ in stages]

    if resume and Path(checkpoint_path).exists():
        state = load_checkpoint(checkpoint_path)
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(
                f"{checkpoint_path}: checkpoint format {state.get('format')!r}, "
                f"this version reads {CHECKPOINT_FORMAT}"
            )
        differ = sorted(k for k in config if state["config"].get(k) != config[k])
        if differ:
            raise ValueError(
                f"{checkpoint_path} was written by a run with other settings: "
                + ", ".join(f"{k}={state['config'].get(k)!r} (now {config[k]!r})" for k in differ)
            )
        engine.load_state_dict(decode_state(state["executor"]))
        history = History.from_dict(state["history"])
        delays.load(state["delays"])
        pending_losses = {int(k): v for k, v in state["pending_losses"].items()}
        peaks = state["peaks"]
        step = state["step"]
        set_rng_state(state["rng"])

    def save() -> None:
        save_checkpoint(
            checkpoint_path,
            {
                "format": CHECKPOINT_FORMAT,
                "config": config,
                "step": step,
                "executor": encode_state(engine.state_dict()),
                "history": history.to_dict(),
                "delays": delays.state(),
                "pending_losses": {str(k): v for k, v in pending_losses.items()},
                "peaks": peaks,
                "rng": rng_state(),
            },
        )

    bar = None
    if _progress_enabled(progress) and os.environ.get("RANK", "0") == "0":
        from tqdm.auto import tqdm

        bar = tqdm(
            total=total_steps,
            initial=step,
            desc=f"{method} P={num_stages}",
            unit="step",
            leave=False,
        )
    started = time.perf_counter()
    try:
        while step < total_steps and not history.diverged:
            result = engine.run(feed, stop_after_updates=step + 1)
            step += 1
            _record(history, result, pending_losses, peaks, num_microbatches)
            delays.feed(result.trace)
            bad = [m for m, v in result.loss_by_microbatch.items() if not math.isfinite(v)]
            # weights are scanned only when the loss says something broke (cheap per step)
            broken = _non_finite_stages(stages) if bad else []
            if bad:
                history.diverged = True
                history.divergence = _divergence_report(
                    step,
                    steps_per_epoch,
                    bad[:1],
                    result.loss_by_microbatch,
                    broken,
                    num_microbatches,
                    len(stages),
                )
            if bar is not None:
                bar.update(1)
                if history.loss:
                    bar.set_postfix(loss=f"{history.loss[-1]:.3f}")
            epoch_done = step % steps_per_epoch == 0 or step == total_steps
            if epoch_done or history.diverged:
                history.evals.append(
                    {
                        "epoch": math.ceil(step / steps_per_epoch),
                        "step": step,
                        **evaluate(stages, data.x_test, data.y_test),
                    }
                )
            if on_step is not None:
                on_step(step, history)
            if checkpoint_every and (step % checkpoint_every == 0 or step == total_steps):
                history.wall_seconds += time.perf_counter() - started
                started = time.perf_counter()
                _finish(history, delays, peaks)
                save()
    finally:
        if bar is not None:
            bar.close()
    history.wall_seconds += time.perf_counter() - started
    _finish(history, delays, peaks)
    if history.diverged and on_divergence == "raise":
        raise DivergenceError(history.divergence)
    return history


def _record(history: History, result, pending_losses: dict, peaks: list, n: int) -> None:
    """Fold one run() call into the history: losses of complete steps, lrs, byte peaks."""
    pending_losses.update(result.loss_by_microbatch)
    while True:
        k = len(history.loss)
        wanted = range(k * n, (k + 1) * n)
        if not all(m in pending_losses for m in wanted):
            break
        history.loss.append(sum(pending_losses.pop(m) for m in wanted) / n)
    if not history.stage_lr:
        history.stage_lr = [[] for _ in result.learning_rates]
    for stage_rates, new in zip(history.stage_lr, result.learning_rates):
        stage_rates.extend(float(r) for r in new)
    for stage_peak, new in zip(peaks, result.peak_bytes):
        for kind, value in new.items():
            stage_peak[kind] = max(stage_peak.get(kind, 0), int(value))


def _finish(history: History, delays: _DelayMeter, peaks: list) -> None:
    history.forward_delay = delays.mean()
    history.forward_delay_max = delays.max()
    history.memory_bytes_by_stage = [dict(p) for p in peaks]
    kinds = sorted({k for p in peaks for k in p})
    history.memory_bytes = {k: sum(p.get(k, 0) for p in peaks) for k in kinds}


def _divergence_report(step, steps_per_epoch, bad, losses, broken, n, num_stages) -> str:
    """One readable sentence: when, which microbatch's loss, which stages' weights."""
    epoch = (step - 1) // steps_per_epoch + 1
    if bad:
        m = bad[0]
        what = f"loss {losses[m]} on microbatch {m} (of step {m // n + 1})"
    else:
        what = "the loss was still finite"
    if broken:
        where = f"non-finite weights on stage(s) {', '.join(map(str, broken))}"
    else:
        where = (
            f"all weights still finite: the loss overflowed on the last stage ({num_stages - 1})"
        )
    return (
        f"diverged at step {step} (epoch {epoch}): {what}; {where}. "
        "Try a smaller lr, T1 (lr rescheduling) or warm-up."
    )


# --------------------------------------------------------------------------- command line
# Shared by ``python -m pipemare_lite train`` and ``python -m pipemare_lite.train`` (the form
# torchrun launches: ``torchrun --nproc-per-node P -m pipemare_lite.train --executor dist``).

#: model name -> dataset it trains on by default.
DEFAULT_DATASET = {"mlp": "digits", "resnet": "digits", "transformer": "reverse"}


def json_ready(value):
    """``value`` with every NaN/inf replaced by None, so ``json.dumps`` writes strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def add_train_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the training options to ``parser`` (one definition for both entry points)."""
    from pipemare_lite.models import MODELS

    parser.add_argument(
        "--method",
        required=True,
        help="gpipe, 1f1b, pipedream, 2bw, async, "
        "pipemare, ... (see pipemare_lite.methods.METHODS)",
    )
    parser.add_argument("--model", choices=sorted(MODELS), default="mlp")
    parser.add_argument(
        "--dataset",
        default=None,
        help="digits, signals, reverse, sort (default: digits for mlp/resnet, "
        "reverse for transformer)",
    )
    parser.add_argument("--stages", type=int, default=4, help="pipeline stages P")
    parser.add_argument("--microbatches", type=int, default=4, help="microbatches per update N")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per minibatch")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd")
    parser.add_argument("--momentum", type=float, default=0.0)
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0, help="model init, data split and order")
    parser.add_argument(
        "--t1",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="T1 lr rescheduling (default: the method's)",
    )
    parser.add_argument(
        "--t1-anneal-updates",
        type=int,
        default=None,
        help="K: updates over which T1 anneals (default: whole run)",
    )
    parser.add_argument(
        "--t2",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="T2 discrepancy correction (default: the method's)",
    )
    parser.add_argument("--gamma", type=float, default=0.9, help="T2's EMA decay")
    parser.add_argument("--warmup", type=int, default=0, help="synchronous warm-up minibatches")
    parser.add_argument(
        "--width",
        type=int,
        default=64,
        help="hidden units (mlp), channels (resnet) or d_model (transformer)",
    )
    parser.add_argument(
        "--layers",
        type=int,
        default=None,
        help="mlp layers / resnet blocks / transformer blocks (default: one model unit per stage)",
    )
    parser.add_argument("--checkpoint", default=None, help="checkpoint file")
    parser.add_argument("--checkpoint-every", type=int, default=None, help="steps between saves")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    parser.add_argument(
        "--executor",
        choices=sorted(EXECUTORS),
        default="local",
        help="local: one process; dist: one process per stage (torchrun)",
    )
    parser.add_argument("--on-divergence", choices=DIVERGENCE_ACTIONS, default="stop")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def build_model_and_data(
    name: str, dataset: str | None, stages: int, width: int, layers: int | None, seed: int
):
    """The CLI's model and dataset: by default one model unit (layer/block) per stage."""
    from pipemare_lite.datasets import load
    from pipemare_lite.models import mlp, small_resnet, tiny_transformer

    dataset = dataset or DEFAULT_DATASET[name]
    data = load(dataset, seed=seed)
    if name == "transformer" and data.x_train.dtype != torch.int64:
        raise ValueError(f"the transformer needs a token dataset (reverse, sort), not {dataset!r}")
    if name != "transformer" and data.x_train.dtype == torch.int64:
        raise ValueError(f"model {name!r} needs a float dataset (digits, signals), not {dataset!r}")
    if name == "mlp":
        depth = layers if layers is not None else stages
        features = int(torch.tensor(data.input_shape).prod())
        return mlp(features, width, depth, data.num_classes, seed=seed), data
    blocks = layers if layers is not None else max(stages - 2, 1)
    if name == "resnet":
        if len(data.input_shape) != 3:
            raise ValueError(f"the resnet needs images (digits), not {dataset!r}")
        channels, size, _ = data.input_shape
        return small_resnet(width, blocks, data.num_classes, channels, size, seed=seed), data
    return tiny_transformer(
        data.num_classes, width, 2, blocks, data.input_shape[0], seed=seed
    ), data


def run_from_args(args: argparse.Namespace) -> int:
    """Train as the parsed arguments say; print a summary (or JSON); return the exit code."""
    model, data = build_model_and_data(
        args.model, args.dataset, args.stages, args.width, args.layers, args.seed
    )
    history = fit(
        model,
        data,
        method=args.method,
        num_stages=args.stages,
        num_microbatches=args.microbatches,
        batch_size=args.batch_size,
        epochs=args.epochs,
        lr=args.lr,
        optimizer=args.optimizer,
        momentum=args.momentum,
        weight_decay=args.weight_decay,
        seed=args.seed,
        t1=args.t1,
        t1_anneal_updates=args.t1_anneal_updates,
        t2=args.t2,
        gamma=args.gamma,
        warmup=args.warmup,
        progress=args.progress,
        on_divergence=args.on_divergence,
        checkpoint_path=args.checkpoint,
        checkpoint_every=args.checkpoint_every,
        resume=args.resume,
        executor=args.executor,
    )
    if os.environ.get("RANK", "0") != "0":  # under torchrun every rank trains; rank 0 reports
        return 0
    summary = history.summary()
    if args.json:
        print(json.dumps(json_ready(summary), allow_nan=False))
        return 0
    print(
        f"{args.method} on {data.name}, P={args.stages}, N={args.microbatches}: "
        f"{history.steps} steps in {history.wall_seconds:.1f} s"
    )
    print(f"  test loss {history.final_loss:.4f}  test accuracy {history.final_accuracy:.4f}")
    print(
        f"  forward delay per stage (mean, updates): "
        f"{', '.join(f'{d:.2f}' for d in history.forward_delay)}"
    )
    print(f"  peak bytes: {', '.join(f'{k} {v}' for k, v in history.memory_bytes.items())}")
    if history.diverged:
        print(f"  DIVERGED: {history.divergence}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m pipemare_lite.train``: the same options as ``pipemare-lite train``."""
    parser = add_train_arguments(
        argparse.ArgumentParser(
            prog="python -m pipemare_lite.train", description="train a model with a pipeline method"
        )
    )
    args = parser.parse_args(argv)
    try:
        return run_from_args(args)
    except (ValueError, KeyError) as exc:
        print(f"pipemare_lite.train: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
