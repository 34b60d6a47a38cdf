"""``pipemare-lite train`` and ``python -m pipemare_lite.training``: training from the shell.

Both entry points share one set of options (:func:`add_train_arguments`); the second is the
form ``torchrun`` launches, one process per stage::

    pipemare-lite train --method pipemare --stages 4 --epochs 2
    torchrun --nproc-per-node 4 -m pipemare_lite.training --executor dist --method pipemare ...

The options map one to one onto :func:`pipemare_lite.training.loop.fit`;
:func:`build_model_and_data` picks the model and dataset by name. Under torchrun every rank
trains and rank 0 reports (and alone writes ``--out`` and ``--jsonl``).

Outputs: a summary (``--json``: one JSON object); ``--out FILE`` the whole history as JSON
(:func:`history_document`, written atomically at the end, also when the run diverged);
``--jsonl FILE`` one JSON line per step, flushed as it happens, for live plots
(:func:`step_record`).

Divergence: a non-finite loss, or (unless ``--no-blow-up``) a finite blow-up by
:mod:`pipemare_lite.training.blow_up`'s rule, the loss above ``--blow-up-factor`` (1000) times
its running minimum for ``--blow-up-window`` (5) steps in a row.

Exit status: 0 when training ran (a run that diverged with ``--on-divergence stop``
included: its summary says so), 2 for bad input, :data:`DIVERGED_EXIT_CODE` (3) when it
diverged with ``--on-divergence raise`` (the message, not a traceback, goes to stderr).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import warnings

from pipemare_lite.cli import INPUT_ERRORS
from pipemare_lite.files import json_ready
from pipemare_lite.plugins import ENV_VAR as PLUGINS_ENV
from pipemare_lite.plugins import load_plugins
from pipemare_lite.spelling import did_you_mean

#: model name -> dataset it trains on by default.
DEFAULT_DATASET = {"mlp": "digits", "resnet": "digits", "transformer": "reverse"}
#: Exit status of a run that diverged under ``--on-divergence raise`` (2 is bad input).
DIVERGED_EXIT_CODE = 3
#: The ``format`` field of an ``--out`` file.
HISTORY_FORMAT = "pipemare-lite history 1"


class _DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows each default, unless the help text already says it (or it is None)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default is None or action.default is False or "default" in text:
            return text
        return super()._get_help_string(action)


def add_train_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the training options to ``parser`` (one definition for both entry points).

    Each option is one argument of :func:`pipemare_lite.training.loop.fit`; ``--help``
    shows the defaults and the exit codes.
    """
    from pipemare_lite.methods import METHODS
    from pipemare_lite.schedules.actions import WEIGHT_MODES
    from pipemare_lite.training.blow_up import DEFAULT_FACTOR, DEFAULT_WINDOW
    from pipemare_lite.training.config import DIVERGENCE_ACTIONS
    from pipemare_lite.training.executors import EXECUTORS
    from pipemare_lite.training.lr_schedules import LR_SCHEDULES
    from pipemare_lite.training.optimizers import OPTIMIZERS

    parser.formatter_class = _DefaultsHelpFormatter
    parser.epilog = (f"exit status: 0 trained (a diverged run under --on-divergence stop "
                     f"too), 2 bad input, {DIVERGED_EXIT_CODE} diverged under "
                     "--on-divergence raise")
    parser.add_argument(
        "--method",
        default=None,
        help=f"pipeline method, one of: {', '.join(METHODS)} (or one a --plugin registers; "
        "required unless --schedule)",
    )
    parser.add_argument(
        "--plugin", action="append", default=[], metavar="MODULE",
        help="import MODULE first, in every process (repeatable), e.g. one that calls "
        f"register_method; also read from {PLUGINS_ENV} (comma-separated modules; torchrun: every "
        "rank)",
    )
    parser.add_argument(
        "--schedule", default=None, metavar="NAME|FILE",
        help="run this schedule instead of the method's: a registered name or a .csv/.json "
        "file (one minibatch, repeated each step, or the whole run; "
        "docs/write-a-schedule.md); with --method too, its T1/T2 defaults apply",
    )
    parser.add_argument("--weight-mode", default=None, choices=WEIGHT_MODES,
                        help="a --schedule CSV file: what its backwards read (default: derived "
                        "when it flushes)")
    parser.add_argument("--model", default="mlp", metavar="NAME", help=model_help())
    parser.add_argument(
        "--dataset",
        default=None,
        help="digits, signals, reverse, sort (default: digits for mlp/resnet, "
        "reverse for transformer)",
    )
    parser.add_argument("--stages", type=int, default=None,
                        help="pipeline stages P (default: 4), or a --schedule file's own")
    parser.add_argument(
        "--chunks", type=int, default=None,
        help="model chunks per rank v (default: the builder's: 2 for interleaved, zb-v, "
             "dualpipev and a registered V; 1 elsewhere; a --schedule file's own)",
    )
    parser.add_argument("--microbatches", type=int, default=None,
                        help="microbatches per update N (default: 4), or a --schedule file's own")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per minibatch")
    parser.add_argument("--epochs", type=int, default=1,
                        help="passes over the training set; with --resume it may differ from "
                        "the checkpoint's (see --resume)")
    parser.add_argument("--lr", type=float, default=0.05, help="base learning rate")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd",
                        help="per-stage optimizer (muon: Muon on 2-D weights, AdamW on the rest)")
    parser.add_argument("--momentum", type=float, default=None,
                        help="sgd or muon momentum (default: 0 for sgd, 0.95 for muon; "
                        "refused with adam/adamw)")
    parser.add_argument("--weight-decay", type=float, default=0.0, help="weight decay")
    parser.add_argument("--lr-schedule", choices=LR_SCHEDULES, default="constant",
                        help="base lr schedule, stepped once per update of each stage; "
                        "cosine anneals to 0 over the run's epochs x steps-per-epoch updates "
                        "(its horizon: so a cosine run's --epochs cannot change on --resume)")
    parser.add_argument("--lr-warmup", type=int, default=0,
                        help="updates of linear lr warm-up before the schedule "
                        "(not --warmup, which runs minibatches flushed)")
    parser.add_argument("--lr-step-size", type=int, default=None,
                        help="step schedule: updates between decays (default: one epoch)")
    parser.add_argument("--lr-gamma", type=float, default=None,
                        help="step schedule: decay factor (default: 0.1)")
    parser.add_argument("--clip-grad-norm", type=float, default=None,
                        help="clip each stage's gradient L2 norm (over that stage's "
                        "parameters) to this before its update (default: no clipping)")
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
    parser.add_argument("--warmup", type=int, default=0,
                        help="synchronous (flushed) warm-up minibatches, PipeMare-W")
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
    parser.add_argument(
        "--resume", action="store_true",
        help="continue from --checkpoint (every other setting as it was). --epochs may "
        "differ, extending a finished run or cutting one short, where nothing depends on "
        "the length: the result is then bitwise equal to a run asked for the new --epochs "
        "from the start. Refused, saying why: --lr-schedule cosine (its horizon is the "
        "length); T1 without --t1-anneal-updates (it anneals over the whole run); a "
        "finished run of a method that does not flush (its pipeline drained at the end; "
        "a checkpoint saved before the end can continue); a checkpoint past the new end. "
        "constant and step schedules (--lr-step-size, by default one epoch) and "
        "--lr-warmup continue (pipemare_lite.training.run_length)")
    parser.add_argument(
        "--executor",
        choices=sorted(EXECUTORS),
        default="local",
        help="local: one process; dist: one process per stage (started here, on this "
        "machine, with a store on 127.0.0.1 only; or by torchrun)",
    )
    parser.add_argument("--op-timeout", type=float, default=120.0, metavar="SECONDS",
                        help="--executor dist: seconds any single wait on a message or on "
                        "the ranks' meeting between two steps may take before the run stops; "
                        "a rank that hangs is then named within this + 0.3 s; a rank whose "
                        "process is stopped (SIGSTOP, SIGTSTP) sooner, within half of this "
                        "(at most 10 s) + 0.25 s (started here, not by torchrun). The "
                        "rendezvous port is one the OS picks free (MASTER_PORT is not read). "
                        "On a machine so loaded that a rank gets no CPU for this long, raise "
                        "it: such a rank looks hung")
    parser.add_argument(
        "--devices", default=None, metavar="LIST",
        help="local executor: the stages' devices, one for all (cuda:0) or one per stage "
             "(cpu,cuda:0,cuda:1), or auto (stage s on cuda:(s mod GPUs), else cpu); default: cpu")
    parser.add_argument("--on-divergence", choices=DIVERGENCE_ACTIONS, default="stop",
                        help=f"stop: report it and exit 0; raise: exit {DIVERGED_EXIT_CODE}")
    parser.add_argument("--blow-up", action=argparse.BooleanOptionalAction, default=True,
                        help="also count a finite blow-up as divergence: the loss above "
                        "--blow-up-factor times its running minimum for --blow-up-window "
                        "steps in a row (pipemare_lite.training.blow_up); --no-blow-up: "
                        "only a non-finite loss (default: on)")
    parser.add_argument("--blow-up-factor", type=float, default=DEFAULT_FACTOR,
                        metavar="FACTOR", help="the blow-up rule's factor (> 1)")
    parser.add_argument("--blow-up-window", type=int, default=DEFAULT_WINDOW, metavar="STEPS",
                        help="the blow-up rule's window (steps in a row, >= 1)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar (default: in a terminal)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads of this process (per rank under torchrun); the "
                        "tiny stages of the book run fastest on one, and more threads than "
                        "free cores make a run many times slower")
    parser.add_argument("--record", choices=("losses", "history", "full"), default="history",
                        help="what the engine records: history (the history's update norms "
                        "and peak bytes), losses (cheapest: neither) or full (also every "
                        "action's times and weight version and every forward's saved "
                        "tensors, as the chapters draw them; slowest); never changes what is "
                        "trained")
    parser.add_argument("--loss-reads-every", type=_loss_reads, default=1, metavar="K|end",
                        help="read the training losses from their device every K steps (one "
                        "host read, one device sync, per K steps) or only at evaluations, "
                        "checkpoints and the end ('end'); divergence is then found at the "
                        "read, at the same step with the same report, but the run may have "
                        "trained up to K-1 steps beyond it; --jsonl lines carry loss null "
                        "for steps not read yet (default: 1, every step)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", default=None, metavar="FILE",
                        help="write the whole history (per-step loss, per-stage lr of every "
                        "param group, evals, delays, bytes) as JSON, atomically")
    parser.add_argument("--jsonl", default=None, metavar="FILE",
                        help="stream one JSON line per step (flushed) for live plots; "
                        "appended to with --resume")
    return parser


def _loss_reads(text: str):
    """``--loss-reads-every``'s value: a positive integer or ``end``."""
    from pipemare_lite.training.config import LOSS_READS_AT_END

    if text == LOSS_READS_AT_END:
        return text
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: allowed: a positive integer (steps between reads) or "
            f"{LOSS_READS_AT_END!r}")
    return value


def step_record(step: int, history) -> dict:
    """One ``--jsonl`` line: what step ``step`` (counted from 1) did.

    Keys: ``step``; ``loss`` (the step's training loss, None until all of its microbatches
    reported); ``lr`` (``lr[stage][group]``, the learning rate each stage's update ``step``
    used); ``eval`` (the test loss and accuracy, only on steps that evaluated); ``diverged``
    and, when true, ``divergence``.
    """
    record = {
        "step": step,
        "loss": history.loss[step - 1] if len(history.loss) >= step else None,
        "lr": [[rates[step - 1] for rates in groups if len(rates) >= step]
               for groups in history.stage_lr_by_group],
    }
    if history.evals and history.evals[-1]["step"] == step:
        record["eval"] = {k: history.evals[-1][k] for k in ("loss", "accuracy")}
    record["diverged"] = history.diverged
    if history.diverged:
        record["divergence"] = history.divergence
    return json_ready(record)


def history_document(history, args: argparse.Namespace) -> dict:
    """What ``--out`` writes: the history's fields plus how the run was asked for.

    Keys: ``format``, ``version``, ``arguments`` (the parsed command-line options), the
    final ``steps``/``final_loss``/``final_accuracy``, then every
    :class:`~pipemare_lite.training.history.History` field (``config``, ``loss`` per step,
    ``stage_lr``, ``stage_lr_by_group``, ``evals``, ``diverged``, ``divergence``,
    ``forward_delay``, ``forward_delay_max``, ``memory_bytes``, ``memory_bytes_by_stage``,
    ``wall_seconds``). Strict JSON: NaN and inf become null. Read it back with
    :meth:`pipemare_lite.training.history.History.read_json`.
    """
    from pipemare_lite import __version__

    return json_ready({
        "format": HISTORY_FORMAT,
        "version": __version__,
        "arguments": dict(vars(args)),
        "steps": history.steps,
        "final_loss": history.final_loss,
        "final_accuracy": history.final_accuracy,
        **history.to_dict(),
    })


def _write_history(path: str, history, args: argparse.Namespace) -> None:
    from pipemare_lite.files import atomic_write

    text = json.dumps(history_document(history, args), allow_nan=False, indent=1)
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8") + b"\n"))


def _check_output_paths(args: argparse.Namespace) -> None:
    """Refuse ``--out``/``--jsonl``/``--checkpoint`` paths that cannot be written, before
    any training (``--out`` is written only at the end of the run)."""
    from pipemare_lite.files import check_writable

    if args.out is not None and args.out == args.jsonl:
        raise ValueError(f"--out and --jsonl both name {args.out!r}; give two files")
    for option in ("out", "jsonl", "checkpoint"):
        path = getattr(args, option)
        if path is not None:
            check_writable(path, f"--{option}")


#: option -> (check, what is allowed): the numeric options refused by their --name before
#: any model is built (fit() checks them too, by its argument names).
_NUMERIC_OPTIONS = {
    "seed": (lambda v: 0 <= v < 2**32, "an integer in 0..2**32-1"),
    "lr": (lambda v: 0 < v < math.inf, "a positive finite number"),
    "momentum": (lambda v: v is None or 0 <= v < 1, "a number in [0, 1)"),
    "weight_decay": (lambda v: 0 <= v < math.inf, "a finite number >= 0"),
    "gamma": (lambda v: 0 <= v < 1, "a number in [0, 1) (T2's EMA decay)"),
    "t1_anneal_updates": (lambda v: v is None or v >= 0,
                          "an integer >= 0 (updates; 0: T1 off), or unset: the whole run"),
    "batch_size": (lambda v: v >= 1, "a positive integer"),
    "epochs": (lambda v: v >= 1, "a positive integer"),
    "width": (lambda v: v >= 1, "a positive integer"),
    "layers": (lambda v: v is None or v >= 1, "a positive integer"),
    "warmup": (lambda v: v >= 0, "an integer >= 0 (minibatches)"),
    "lr_warmup": (lambda v: v >= 0, "an integer >= 0 (updates)"),
    "lr_step_size": (lambda v: v is None or v >= 1, "a positive integer (updates)"),
    "lr_gamma": (lambda v: v is None or 0 < v < math.inf, "a positive finite number"),
    "clip_grad_norm": (lambda v: v is None or 0 < v < math.inf, "a positive finite number"),
    "checkpoint_every": (lambda v: v is None or v >= 1, "a positive integer (steps)"),
    "op_timeout": (lambda v: v is None or 0 < v < math.inf, "a positive number of seconds"),
    "blow_up_factor": (lambda v: v is None or 1 < v < math.inf, "a finite number > 1"),
    "blow_up_window": (lambda v: v is None or v >= 1, "an integer >= 1 (steps)"),
}


def check_numeric_options(args: argparse.Namespace) -> None:
    """Raise ValueError naming the first ``--option`` whose value is out of range."""
    for name, (ok, allowed) in _NUMERIC_OPTIONS.items():
        value = getattr(args, name, None)
        if not ok(value):
            raise ValueError(f"--{name.replace('_', '-')} {value!r}: allowed: {allowed}")


#: The most model units (mlp layers, resnet or transformer blocks) the CLI builds: each
#: is a Python module, and 100,000 of them take minutes to make before any check could run.
MAX_MODEL_UNITS = 4096
#: Bytes per parameter a run holds at least: the weights, their gradients and up to two
#: optimizer slots (momentum; Adam's two moments), 4 bytes each (float32).
BYTES_PER_PARAMETER = 16


def memory_limit_bytes() -> int:
    """Half of this machine's physical memory: the most a model's estimate may need."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):  # no sysconf (Windows): 8 GiB
        return 8 * 2**30


def check_model_size(name: str, model) -> None:
    """Raise ValueError stating the estimate and the limit when ``model`` (built on the
    meta device: shapes only) would need more than :func:`memory_limit_bytes`."""
    parameters = sum(p.numel() for p in model.parameters())
    need, limit = parameters * BYTES_PER_PARAMETER, memory_limit_bytes()
    if need > limit:
        raise ValueError(
            f"model {name!r} has {parameters:,} parameters: about {need / 2**30:,.1f} GiB "
            f"for weights, gradients and optimizer state ({BYTES_PER_PARAMETER} bytes each), "
            f"more than the limit of {limit / 2**30:,.1f} GiB (half of this machine's memory); "
            "use a smaller --width or fewer --layers"
        )


def model_help() -> str:
    """``--model``'s help (``train``, ``sweep``): the book's models and the plugin way."""
    from pipemare_lite.training.models import MODELS

    return (f"model, one of: {', '.join(sorted(MODELS))} (or one a --plugin module registers "
            "with pml.register_model)")


def build_model_and_data(
    name: str, dataset: str | None, stages: int, width: int, layers: int | None, seed: int
):
    """The CLI's model and dataset: by default one model unit (layer/block) per stage.

    A model a ``--plugin`` registered
    (:func:`~pipemare_lite.training.models.register_model`) is built by its function. A
    model that does not fit the
    dataset (a transformer on images, an MLP on tokens) is refused with the allowed names;
    so is one with more than :data:`MAX_MODEL_UNITS` units or whose parameters would need
    more than :func:`memory_limit_bytes` (measured on the meta device, before allocating).
    """
    import torch

    from pipemare_lite.training.models import MODEL_PLUGINS, MODELS

    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; allowed: {', '.join(sorted(MODELS))}, or a "
                         "model that a --plugin module registers with pml.register_model."
                         + did_you_mean(name, MODELS))
    if name in MODEL_PLUGINS:  # a user's model from a --plugin module: it sizes itself
        plugin = MODEL_PLUGINS[name]
        data = _load_data(dataset or plugin.dataset, seed)
        return plugin.build(data=data, num_stages=stages, seed=seed), data
    units = layers if layers is not None else (stages if name == "mlp" else max(stages - 2, 1))
    if units > MAX_MODEL_UNITS:
        option = "--layers" if layers is not None else "--stages (one model unit per stage)"
        raise ValueError(f"{option}: a {name} of {units:,} layers/blocks; the limit is "
                         f"{MAX_MODEL_UNITS:,}")
    dataset = dataset or DEFAULT_DATASET[name]
    data = _load_data(dataset, seed)
    if name == "transformer" and data.x_train.dtype != torch.int64:
        raise ValueError(f"the transformer needs a token dataset (reverse, sort), not {dataset!r}")
    if name != "transformer" and data.x_train.dtype == torch.int64:
        raise ValueError(f"model {name!r} needs a float dataset (digits, signals), not {dataset!r}")
    with torch.device("meta"):  # shapes only: nothing allocated
        check_model_size(name, _model(name, data, stages, width, layers, seed, dataset))
    return _model(name, data, stages, width, layers, seed, dataset), data


def _load_data(dataset: str, seed: int):
    from pipemare_lite.training.datasets import load

    try:
        return load(dataset, seed=seed)
    except ImportError as exc:  # digits without scikit-learn (the engine alone): one line
        raise ValueError(f"--dataset {dataset}: {exc} (e.g. --dataset signals)") from exc


def model_balance(name: str, stages: int):
    """``fit``'s ``balance`` for ``--model name``: a plugin model's split points, else None."""
    from pipemare_lite.training.models import MODEL_PLUGINS

    return MODEL_PLUGINS[name].balance(stages) if name in MODEL_PLUGINS else None


def _model(name: str, data, stages: int, width: int, layers: int | None, seed: int,
           dataset: str):
    from pipemare_lite.training.models import mlp, small_resnet, tiny_transformer

    if name == "mlp":
        depth = layers if layers is not None else stages
        features = math.prod(data.input_shape)
        return mlp(features, width, depth, data.num_classes, seed=seed)
    blocks = layers if layers is not None else max(stages - 2, 1)
    if name == "resnet":
        if len(data.input_shape) != 3:
            raise ValueError(f"the resnet needs images (digits), not {dataset!r}")
        channels, size, _ = data.input_shape
        return small_resnet(width, blocks, data.num_classes, channels, size, seed=seed)
    return tiny_transformer(data.num_classes, width, 2, blocks, data.input_shape[0], seed=seed)


def _schedule_sizes(args: argparse.Namespace):
    """Resolve ``--schedule``; fill in stages, microbatches and chunks (a file's own, else
    4, 4 and the method's). Returns what ``fit(schedule=...)`` gets."""
    from pipemare_lite.training import run_schedule

    if args.method is None and args.schedule is None:
        raise ValueError("give --method (a pipeline method) or --schedule (a name or a file)")
    choice = run_schedule.resolve(args.schedule, args.weight_mode, args.method)
    if choice is not None and choice.given is not None:
        given = choice.given
        for option, value in (("stages", given.num_ranks),
                              ("microbatches", given.num_microbatches),
                              ("chunks", given.chunks)):
            if getattr(args, option) not in (None, value):
                raise ValueError(f"--{option}={getattr(args, option)} disagrees with "
                                 f"--schedule {args.schedule}, which has {value}")
            setattr(args, option, value)
    if choice is not None and choice.name is not None and args.chunks is None:
        from pipemare_lite.schedules.registry import default_chunks

        args.chunks = default_chunks(choice.name)  # a V builder's 2: the model has 2P pieces
    args.stages = 4 if args.stages is None else args.stages
    args.microbatches = 4 if args.microbatches is None else args.microbatches
    if choice is None:
        return None
    return choice.given if choice.given is not None else choice.name


def stage_devices(text: str | None, stages: int, executor: str = "local") -> list[str] | None:
    """``--devices``: None (the model's device), or one device per (virtual) stage.

    ``text`` is one device for every stage (``cuda:0``), a comma-separated one per stage, or
    ``auto`` (:func:`pipemare_lite.engine.placement.local_stage_devices`: stage s on
    ``cuda:(s mod G)`` with G GPUs, the CPU without). Bad names, a count that is neither 1 nor
    ``stages``, a CUDA device this machine lacks, and the dist executor (each rank takes its
    own device there) are refused with the value named.
    """
    if text is None:
        return None
    import torch

    if executor != "local":
        raise ValueError(f"--devices={text}: only for the local executor; with --executor "
                         f"{executor} each rank takes its own device (LOCAL_RANK)")
    if text.strip() == "auto":
        from pipemare_lite.engine.placement import local_stage_devices

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return list(local_stage_devices(stages, cuda_devices=gpus))
    names = [name.strip() for name in text.split(",")]
    if len(names) not in (1, stages):
        raise ValueError(f"--devices={text}: {len(names)} devices for {stages} stages; allowed: "
                         f"one device, {stages} comma-separated devices, or auto")
    devices = []
    for name in names:
        try:
            device = torch.device(name)
        except (RuntimeError, ValueError):
            raise ValueError(f"--devices={text}: {name!r} is not a device; allowed: cpu, cuda, "
                             "cuda:N, mps, or auto") from None
        if device.type == "cuda" and (not torch.cuda.is_available() or (
                device.index or 0) >= torch.cuda.device_count()):
            raise ValueError(f"--devices={text}: {name!r} is not on this machine (CUDA "
                             f"devices: {torch.cuda.device_count()})")
        devices.append(str(device))
    return devices * stages if len(devices) == 1 else devices


def run_from_args(args: argparse.Namespace, prog: str = "pipemare-lite train") -> int:
    """Train as the parsed arguments say; print a summary (or JSON); return the exit code.

    The training is :func:`pipemare_lite.training.loop.fit`. A run that diverges under
    ``--on-divergence raise`` prints ``<prog>: diverged at step ...`` (the report) to
    stderr, still writes ``--out``, and returns :data:`DIVERGED_EXIT_CODE`.
    """
    from pipemare_lite.training.history import DivergenceError
    from pipemare_lite.training.loop import NoCheckpointWarning, fit

    load_plugins(getattr(args, "plugin", None) or ())  # before the method's name is looked up
    check_numeric_options(args)
    if args.executor == "dist" and getattr(args, "op_timeout", None) is not None:  # read by
        # init_from_env under torchrun
        from pipemare_lite.engine.distributed.launch import OP_TIMEOUT_ENV

        os.environ[OP_TIMEOUT_ENV] = repr(float(args.op_timeout))
    schedule = _schedule_sizes(args)
    from pipemare_lite.schedules.validation import LIMITS

    for name, limit in (("stages", "num_ranks"), ("microbatches", "num_microbatches"),
                        ("chunks", "chunks")):  # before they size the model
        value, (low, high) = getattr(args, name), LIMITS[limit]
        if value is not None and value < 1:
            raise ValueError(f"--{name} must be a positive integer, got {value}")
        if value is not None and value > high:
            raise ValueError(f"--{name} {value}: allowed: integers {low}..{high}")
    threads = getattr(args, "threads", None)
    if threads is not None and threads < 1:
        raise ValueError(f"--threads must be a positive integer, got {threads}")
    _check_output_paths(args)
    if args.executor == "dist" and _outside_any_job():
        return _launch_ranks(args, prog)
    interleaved = args.method == "interleaved" and args.schedule is None
    pieces = args.stages * (args.chunks or (2 if interleaved else 1))
    model, data = build_model_and_data(
        args.model, args.dataset, pieces, args.width, args.layers, args.seed
    )
    reporter = os.environ.get("RANK", "0") == "0"  # under torchrun every rank trains
    stream = None
    if args.jsonl is not None and reporter:
        stream = open(args.jsonl, "a" if args.resume else "w", encoding="utf-8")  # noqa: SIM115

    def write_step(step: int, history) -> None:
        from pipemare_lite.files import WriteError

        try:
            stream.write(json.dumps(step_record(step, history), allow_nan=False) + "\n")
            stream.flush()
        except OSError as exc:  # the disk filled up mid-run: name the file
            raise WriteError(exc.errno, f"cannot write {args.jsonl}: "
                             f"{exc.strerror or exc}") from exc

    threads = _set_threads(getattr(args, "threads", None))  # restored when the run ends
    if args.resume and reporter and args.checkpoint and not os.path.exists(args.checkpoint):
        print(f"{prog}: --resume: no checkpoint at {args.checkpoint}; training from step 0",
              file=sys.stderr)
    try:
        with warnings.catch_warnings():  # (said above, once, by rank 0)
            warnings.simplefilter("ignore", NoCheckpointWarning)
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
                lr_schedule=args.lr_schedule,
                lr_warmup=args.lr_warmup,
                lr_step_size=args.lr_step_size,
                lr_gamma=args.lr_gamma,
                clip_grad_norm=args.clip_grad_norm,
                seed=args.seed,
                t1=args.t1,
                t1_anneal_updates=args.t1_anneal_updates,
                t2=args.t2,
                gamma=args.gamma,
                warmup=args.warmup,
                chunks=args.chunks,
                progress=args.progress,
                on_divergence=args.on_divergence,
                blow_up=blow_up_rule(args),
                on_step=write_step if stream is not None else None,
                checkpoint_path=args.checkpoint,
                checkpoint_every=args.checkpoint_every,
                resume=args.resume,
                executor=args.executor,
                schedule=schedule,
                devices=stage_devices(getattr(args, "devices", None), pieces, args.executor),
                record=getattr(args, "record", "history"),
                loss_reads_every=getattr(args, "loss_reads_every", 1),
                balance=model_balance(args.model, pieces),
            )
    except DivergenceError as error:
        if reporter:
            if args.out is not None:
                _write_history(args.out, error.history, args)
            print(f"{prog}: {error}", file=sys.stderr)
        return DIVERGED_EXIT_CODE
    finally:
        _set_threads(threads)
        if stream is not None:
            stream.close()
    if not reporter:
        return 0
    if args.out is not None:
        _write_history(args.out, history, args)
    summary = history.summary()
    if args.json:
        print(json.dumps(json_ready(summary), allow_nan=False))
        return 0
    print(
        f"{args.method or history.config['schedule']} on {data.name}, P={args.stages}, "
        f"N={args.microbatches}: "
        f"{history.steps} steps in {history.wall_seconds:.1f} s"
    )
    accuracy = history.final_accuracy  # None for targets that are no class labels
    print(f"  test loss {history.final_loss:.4f}  test accuracy "
          f"{'-' if accuracy is None else f'{accuracy:.4f}'}")
    print(
        f"  forward delay per stage (mean, updates): "
        f"{', '.join(f'{d:.2f}' for d in history.forward_delay)}"
    )
    print(f"  peak bytes: {', '.join(f'{k} {v}' for k, v in history.memory_bytes.items())}")
    if history.diverged:
        print(f"  DIVERGED: {history.divergence}")
    return 0


def blow_up_rule(args: argparse.Namespace):
    """The :class:`~pipemare_lite.training.blow_up.BlowUpRule` the options ask for (None:
    ``--no-blow-up``, non-finite losses only)."""
    from pipemare_lite.training.blow_up import DEFAULT_FACTOR, DEFAULT_WINDOW, BlowUpRule

    if not getattr(args, "blow_up", True):
        return None
    factor = getattr(args, "blow_up_factor", None)
    window = getattr(args, "blow_up_window", None)
    return BlowUpRule(DEFAULT_FACTOR if factor is None else factor,
                      DEFAULT_WINDOW if window is None else window)


def _outside_any_job() -> bool:
    """True when neither torchrun nor :func:`~pipemare_lite.engine.distributed.launch.launch`
    started this process (no ``RANK`` in the environment, no job joined)."""
    from pipemare_lite.engine.distributed.rank import current

    return "RANK" not in os.environ and current() is None


def _launch_ranks(args: argparse.Namespace, prog: str) -> int:
    """``--executor dist`` started from a shell without torchrun: one process per rank on
    this machine, by :func:`~pipemare_lite.engine.distributed.launch.launch`, whose store
    listens on 127.0.0.1 only (torchrun's listens on every interface, whatever address it
    is given). Each rank runs this same command (rank 0 reports); returns rank 0's exit
    status, or 1 with the launcher's report when a rank failed."""
    import math

    from pipemare_lite.engine.distributed.launch import LaunchError, launch

    try:  # one process per rank (--stages); a rank's chunks share its process
        codes = launch(_train_rank, args.stages, args=(args, prog), timeout=math.inf,
                       op_timeout=args.op_timeout, num_threads=getattr(args, "threads", 1),
                       imports=tuple(getattr(args, "plugin", None) or ()))
    except LaunchError as exc:
        refusals = {text.split("\n", 1)[0] for text in exc.errors.values()}
        if (len(refusals) == 1 and len(exc.errors) == args.stages
                and next(iter(refusals)).startswith(f"{RefusedSettings.__name__}: ")):
            # every rank refused the same settings before its first action: bad input
            reason = next(iter(refusals)).split(": ", 1)[1]
            print(f"{prog}: error: {reason}", file=sys.stderr)
            return 2
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    return codes[0]


class RefusedSettings(ValueError):
    """A launched rank refused the command's settings while it set up its run (before its
    first action), as every rank does alike: :func:`_launch_ranks` then says it in one line
    and exits 2, as bad input does, instead of every rank's traceback."""


def _train_rank(info, args: argparse.Namespace, prog: str) -> int:
    """One rank of :func:`_launch_ranks`: the command itself, inside the launched job.

    A refused checkpoint (:class:`~pipemare_lite.training.checkpoint.CheckpointError`: other
    settings, another format, another model) is refused alike by every rank, which reads
    the same file: rank 0 says it in one line and every rank exits 2, as bad input does.
    Settings refused while the run is set up (``--epochs`` too long for the schedule's
    limits, say) raise :class:`RefusedSettings`.
    """
    from pipemare_lite.training.checkpoint import CheckpointError

    try:
        return run_from_args(args, prog=prog)
    except CheckpointError as exc:
        return _refused_checkpoint(exc, info.rank, prog)
    except INPUT_ERRORS as exc:
        if info.board.position.index >= 0:  # during the run: that rank's failure
            raise
        raise RefusedSettings(str(exc)) from exc


def _refused_checkpoint(exc: Exception, rank: int, prog: str) -> int:
    """Rank 0 prints the refusal in one line; every rank returns 2."""
    if rank == 0:
        print(f"{prog}: error: {exc}", file=sys.stderr, flush=True)
    return 2


def _set_threads(threads: int | None) -> int | None:
    """Give torch ``threads`` threads in this process (None: leave them as they are);
    returns the count before (None when unchanged), to restore it."""
    if threads is None:
        return None
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    return previous


def main(argv: list[str] | None = None) -> int:
    """``python -m pipemare_lite.training``: the same options as ``pipemare-lite train``.

    The entry point torchrun launches; bad input exits with code 2 and a message.
    ``--plugin`` modules are imported before the parser is built, so ``--help`` lists the
    methods they register.
    """
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--plugin", action="append", default=[])
    try:
        load_plugins(early.parse_known_args(argv)[0].plugin)
    except INPUT_ERRORS as exc:
        print(f"pipemare_lite.training: error: {exc}", file=sys.stderr)
        return 2
    parser = add_train_arguments(
        argparse.ArgumentParser(
            prog="python -m pipemare_lite.training",
            description="train a model with a pipeline method",
        )
    )
    args = parser.parse_args(argv)
    return _run_reporting_faults(args, "pipemare_lite.training")


def _run_reporting_faults(args: argparse.Namespace, prog: str) -> int:
    """:func:`run_from_args`; bad input exits 2 with a message, and a distributed rank's
    pipeline failure exits 1 with a message and every rank's position (a bug keeps its
    traceback). See :mod:`pipemare_lite.engine.distributed.torchrun`."""
    from pipemare_lite.engine.distributed.faults import PipelineFault
    from pipemare_lite.files import WriteError
    from pipemare_lite.training.checkpoint import CheckpointError

    try:
        return run_from_args(args, prog=prog)
    except CheckpointError as exc:  # every rank refuses the same file: one line, rank 0
        return _refused_checkpoint(exc, int(os.environ.get("RANK", "0")), prog)
    except WriteError as exc:  # a disk that filled up mid-run: one line, no traceback
        from pipemare_lite.engine.distributed.rank import current

        info = current()
        if info is not None:  # its peers stop with this as the cause
            info.board.fail(exc)
        print(f"{prog}: error: {exc.strerror}", file=sys.stderr)
        return 1
    except PipelineFault as exc:
        from pipemare_lite.engine.distributed.torchrun import report_failure

        if not report_failure(exc, prog):  # under torchrun also which rank was lost
            raise
        return 1
    except INPUT_ERRORS as exc:  # bad input only: a bug keeps its traceback
        from pipemare_lite.engine.distributed.rank import current

        info = current()
        if info is None:  # refused before this rank joined a job: the command's bad input
            print(f"{prog}: error: {exc}", file=sys.stderr)
            return 2
        # after joining, every argument was checked: one rank's ValueError is that rank's
        # failure; report it on the side channel (its peers stop with it as the cause)
        info.board.fail(exc)
        print(f"{prog}: rank {info.rank} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except MemoryError:
        pass  # reported below, once the frames holding the memory are gone
    from pipemare_lite.cli import out_of_memory_line

    print(out_of_memory_line(prog), file=sys.stderr)
    return 2


def configure(parser: argparse.ArgumentParser) -> None:
    """``pipemare-lite train``: add the training options."""
    add_train_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """``pipemare-lite train``: train and print a summary (``--json``: one JSON object).

    An output that cannot be written mid-run (a full disk) ends it with one line naming
    the file, exit status 1."""
    from pipemare_lite.files import WriteError

    try:
        return run_from_args(args)
    except WriteError as exc:
        print(f"pipemare-lite train: error: {exc.strerror}", file=sys.stderr)
        return 1
