"""``pipemare-lite train`` and ``python -m pipemare_lite.train``: training from the shell.

Both entry points share one set of options (:func:`add_train_arguments`); the second is the
form ``torchrun`` launches, one process per stage::

    pipemare-lite train --method pipemare --stages 4 --epochs 2
    torchrun --nproc-per-node 4 -m pipemare_lite.train --executor dist --method pipemare ...

The options map one to one onto :func:`pipemare_lite.train.fit` (introduced in chapter 07);
:func:`build_model_and_data` picks the model and dataset by name. Under torchrun every rank
trains and rank 0 reports.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

from pipemare_lite.cli import INPUT_ERRORS

#: model name -> dataset it trains on by default.
DEFAULT_DATASET = {"mlp": "digits", "resnet": "digits", "transformer": "reverse"}


def json_ready(value):
    """``value`` with every NaN/inf replaced by None, so ``json.dumps`` writes strict JSON.

    Used by ``--json`` and by the results ``pipemare-lite reproduce`` stores (chapter 07).
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def add_train_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the training options to ``parser`` (one definition for both entry points).

    Each option is one argument of :func:`pipemare_lite.train.fit` (chapter 07).
    """
    from pipemare_lite.models import MODELS
    from pipemare_lite.train import DIVERGENCE_ACTIONS, EXECUTORS, OPTIMIZERS

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
    parser.add_argument(
        "--chunks", type=int, default=None,
        help="model chunks per rank v (interleaved only; default 2 there)",
    )
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
    """The CLI's model and dataset: by default one model unit (layer/block) per stage.

    Models and datasets are introduced in chapter 07; a model that does not fit the
    dataset (a transformer on images, an MLP on tokens) is refused with the allowed names.
    """
    import torch

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
    """Train as the parsed arguments say; print a summary (or JSON); return the exit code.

    The training is :func:`pipemare_lite.train.fit` (chapter 07).
    """
    from pipemare_lite.train import fit

    for name in ("stages", "microbatches", "chunks"):  # before they size the model
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name} must be a positive integer, got {value}")
    pieces = args.stages * (args.chunks or (2 if args.method == "interleaved" else 1))
    model, data = build_model_and_data(
        args.model, args.dataset, pieces, args.width, args.layers, args.seed
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
        chunks=args.chunks,
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
    """``python -m pipemare_lite.train``: the same options as ``pipemare-lite train``.

    The entry point torchrun launches (chapter 11); bad input exits with code 2 and a message.
    """
    parser = add_train_arguments(
        argparse.ArgumentParser(
            prog="python -m pipemare_lite.train", description="train a model with a pipeline method"
        )
    )
    args = parser.parse_args(argv)
    try:
        return run_from_args(args)
    except INPUT_ERRORS as exc:  # bad input only: a bug keeps its traceback
        print(f"pipemare_lite.train: error: {exc}", file=sys.stderr)
        return 2


def configure(parser: argparse.ArgumentParser) -> None:
    """``pipemare-lite train``: add the training options (chapter 07)."""
    add_train_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """``pipemare-lite train``: train and print a summary (``--json``: one JSON object)."""
    return run_from_args(args)
