"""PipeMare's findings in miniature: "the paper's shape" on CPU (chapter 10).

PipeMare (Yang et al., 2019/2021) reports, on ResNets and Transformers cut into one stage
per layer: asynchronous pipeline training without fixes degrades or diverges; T1 (learning
rate rescheduling) recovers most of the loss; T2 (discrepancy correction) and warm-up close
the rest; and all of it at one weight copy (no stash) and near-full pipeline utilization.
This experiment asks whether that *shape* shows up in a model small enough for a laptop.

Setup, fixed before any asynchronous run was looked at:

- model: :func:`pipemare_lite.models.small_resnet` with 6 residual blocks (stem + 6 blocks
  + head = 8 units), cut one unit per stage: P = 8 stages, fine-grained as in the paper;
- data: the 8x8 digits (real data, shipped with scikit-learn), N = 4 microbatches of 8,
  SGD with momentum 0.9 (the paper's optimizer for ResNets), a fixed number of epochs;
- learning rate: swept on the synchronous method (1F1B) only, over a fixed grid; the chosen
  lr is the *largest* one where sync is fine (did not diverge and ends within
  ``fine_margin`` of the best sync test accuracy). Largest, because that is the lr a
  practitioner tuning sync would ship, and where asynchrony has the least slack;
- methods at that lr: 1F1B (sync), async (no fix), async + T1, async + T1 + T2, PipeMare
  with warm-up (T1 + T2, the first quarter of the run synchronous), PipeDream (stash).
  T1 anneals over the first half of the run (its factor is 1 during a synchronous warm-up
  and its update count starts at the first asynchronous update: the library's T1
  semantics); T2's gamma is the library default (0.9).
  None of these were tuned;
- reported: test accuracy and loss after the last epoch, divergence, peak bytes by kind
  as the executor measured them (summed over stages), and pipeline utilization of the
  method's schedule over the whole run from the simulator (F = 1, B = 2 cost units).

The verdict compares the outcome with the paper's claims using thresholds also fixed up
front (:func:`shape_checks`) and says plainly which held.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass, replace

#: The rows of the table: label, method name, and fit() switches.
VARIANTS = (
    ("sync (1F1B)", "1f1b", {}),
    ("async", "async", {"t1": False, "t2": False}),
    ("async + T1", "async", {"t1": True, "t2": False}),
    ("async + T1 + T2", "async", {"t1": True, "t2": True}),
    ("PipeMare-W (T1 + T2 + warm-up)", "pipemare", {"t1": True, "t2": True, "warmup": True}),
    ("PipeDream (stash)", "pipedream", {}),
)


@dataclass(frozen=True)
class PaperShapeConfig:
    """Every setting of the experiment (the JSON stores it)."""

    channels: int = 16
    blocks: int = 6
    num_stages: int = 8
    num_microbatches: int = 4
    batch_size: int = 32
    epochs: int = 4
    momentum: float = 0.9
    seed: int = 0
    lr_grid: tuple[float, ...] = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2)
    sync_method: str = "1f1b"
    fine_margin: float = 0.02
    warmup_fraction: float = 0.25
    t1_anneal_fraction: float = 0.5
    gamma: float = 0.9


FULL = PaperShapeConfig()
QUICK = replace(FULL, epochs=1, lr_grid=(0.01, 0.02, 0.05))


def config_for(quick: bool) -> PaperShapeConfig:
    """The quick (one epoch, three lrs) or full configuration."""
    return QUICK if quick else FULL


def _data(config: PaperShapeConfig):
    from pipemare_lite.datasets import digits

    return digits(seed=config.seed)


def _steps(config: PaperShapeConfig, data) -> int:
    return config.epochs * (len(data.x_train) // config.batch_size)


def run_variant(config: PaperShapeConfig, label: str, lr: float, data=None) -> dict:
    """Train one row of the table at ``lr``; returns its JSON-ready result."""
    from pipemare_lite.models import small_resnet
    from pipemare_lite.train import fit

    data = data if data is not None else _data(config)
    method, switches = next((m, s) for name, m, s in VARIANTS if name == label)
    total = _steps(config, data)
    warmup = round(config.warmup_fraction * total) if switches.get("warmup") else 0
    anneal = max(1, round(config.t1_anneal_fraction * total))
    model = small_resnet(config.channels, config.blocks, data.num_classes, 1, 8, seed=config.seed)
    history = fit(
        model,
        data,
        method=method,
        num_stages=config.num_stages,
        num_microbatches=config.num_microbatches,
        batch_size=config.batch_size,
        epochs=config.epochs,
        lr=lr,
        momentum=config.momentum,
        seed=config.seed,
        t1=switches.get("t1"),
        t2=switches.get("t2"),
        t1_anneal_updates=anneal,
        gamma=config.gamma,
        warmup=warmup,
        progress=False,
    )
    return {
        "label": label,
        "method": method,
        "t1": history.config["t1"],
        "t2": history.config["t2"],
        "warmup_minibatches": warmup,
        "lr": lr,
        "final_accuracy": history.final_accuracy,
        "final_loss": history.final_loss,
        "diverged": history.diverged,
        "divergence": history.divergence,
        "steps": history.steps,
        "memory_bytes": history.memory_bytes,
        "forward_delay_max": history.forward_delay_max,
        "train_loss": history.loss,
        "evals": history.evals,
        "utilization": _utilization(config, method, history.steps, warmup),
    }


def _utilization(config: PaperShapeConfig, method: str, steps: int, warmup: int) -> dict:
    """Simulated utilization of the method's schedule over the whole run (F=1, B=2)."""
    from pipemare_lite.methods import build_method_schedule, method_options
    from pipemare_lite.simulate import OpCosts, simulate_and_measure

    schedule = build_method_schedule(
        method,
        config.num_stages,
        config.num_microbatches,
        num_minibatches=max(steps, 1),
        options=method_options(method, warmup_minibatches=warmup),
    )
    _, result = simulate_and_measure(schedule, OpCosts(forward=1.0, backward=2.0))
    return {
        "utilization": result.utilization,
        "steady_state_utilization": result.steady_state_utilization,
    }


def choose_lr(sweep: list[dict], margin: float) -> float:
    """The largest lr whose sync run did not diverge and is within ``margin`` of the best."""
    finite = [r for r in sweep if not r["diverged"] and math.isfinite(r["final_accuracy"])]
    if not finite:
        raise RuntimeError("sync diverged at every lr of the grid; widen the grid downwards")
    best = max(r["final_accuracy"] for r in finite)
    fine = [r["lr"] for r in finite if r["final_accuracy"] >= best - margin]
    return max(fine)


def shape_checks(rows: dict[str, dict], margin: float) -> list[dict]:
    """The paper's claims, each with the threshold fixed up front and whether it held."""
    acc = {k: (0.0 if r["diverged"] else r["final_accuracy"]) for k, r in rows.items()}
    sync, plain = acc["sync (1F1B)"], acc["async"]
    t1 = acc["async + T1"]
    gap = sync - plain
    mem = {
        k: sum(v for kind, v in r["memory_bytes"].items() if kind != "activations")
        for k, r in rows.items()
    }
    util = {k: r["utilization"]["utilization"] for k, r in rows.items()}
    return [
        {
            "claim": "async without fixes degrades or diverges at an lr where sync is fine",
            "test": f"async diverged, or its accuracy < sync - {margin}",
            "held": rows["async"]["diverged"] or plain < sync - margin,
            "detail": f"sync {sync:.4f}, async {plain:.4f}"
            + (" (diverged)" if rows["async"]["diverged"] else ""),
        },
        {
            "claim": "T1 recovers most of the damage",
            "test": "async+T1 did not diverge and closes >= half of the sync-async gap",
            "held": gap > margin and not rows["async + T1"]["diverged"] and t1 - plain >= gap / 2,
            "detail": f"gap {gap:.4f}, recovered {t1 - plain:.4f}"
            + (" (no gap to recover)" if gap <= margin else ""),
        },
        {
            "claim": "T2 and warm-up close the rest",
            "test": f"PipeMare-W within {margin} of sync, and >= async+T1",
            "held": acc["PipeMare-W (T1 + T2 + warm-up)"] >= sync - margin
            and acc["PipeMare-W (T1 + T2 + warm-up)"] >= t1,
            "detail": f"PipeMare-W {acc['PipeMare-W (T1 + T2 + warm-up)']:.4f}, "
            f"async+T1+T2 {acc['async + T1 + T2']:.4f}, async+T1 {t1:.4f}",
        },
        {
            "claim": "PipeMare needs less weight memory than PipeDream's stashing",
            "test": "weights+stash+t2_buffer+optimizer bytes: PipeMare-W < PipeDream",
            "held": mem["PipeMare-W (T1 + T2 + warm-up)"] < mem["PipeDream (stash)"],
            "detail": f"PipeMare-W {mem['PipeMare-W (T1 + T2 + warm-up)']} B, "
            f"PipeDream {mem['PipeDream (stash)']} B, sync {mem['sync (1F1B)']} B",
        },
        {
            "claim": "async pipelines keep utilization near 1, sync pays the bubble",
            "test": "utilization: async > sync",
            "held": util["async"] > util["sync (1F1B)"],
            "detail": f"async {util['async']:.3f}, sync {util['sync (1F1B)']:.3f}",
        },
    ]


def run(quick: bool = False, *, log=sys.stderr) -> dict:
    """Sweep lr on sync, run every variant at the chosen lr, check the shape."""
    import torch

    config = config_for(quick)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the numbers do not depend on the machine's cores
    try:
        data = _data(config)
        sync_label = VARIANTS[0][0]
        sweep = []
        for lr in config.lr_grid:
            print(f"  sync lr sweep: lr={lr}", file=log, flush=True)
            sweep.append(run_variant(config, sync_label, lr, data))
        lr = choose_lr(sweep, config.fine_margin)
        rows = {sync_label: next(r for r in sweep if r["lr"] == lr)}
        for label, _, _ in VARIANTS[1:]:
            print(f"  {label} at lr={lr}", file=log, flush=True)
            rows[label] = run_variant(config, label, lr, data)
    finally:
        torch.set_num_threads(threads)
    P, N = config.num_stages, config.num_microbatches
    return {
        "experiment": "paper-shape",
        "quick": quick,
        "config": asdict(config),
        "dataset": {
            "name": data.name,
            "train": len(data.x_train),
            "test": len(data.x_test),
            "provenance": data.provenance,
        },
        "lr_sweep": [
            {k: r[k] for k in ("lr", "final_accuracy", "final_loss", "diverged")} for r in sweep
        ],
        "chosen_lr": lr,
        "lr_rule": f"largest lr of the grid where {config.sync_method} did not diverge and "
        f"ended within {config.fine_margin} of the best sync test accuracy",
        "gpipe_utilization_formula": N / (N + P - 1),
        "rows": list(rows.values()),
        "shape": shape_checks(rows, config.fine_margin),
    }


def markdown(results: dict) -> str:
    """The results as a markdown table plus the shape verdict."""
    cfg = results["config"]
    lines = [
        f"# PipeMare's shape in miniature{' (quick)' if results['quick'] else ''}",
        "",
        f"small ResNet ({cfg['blocks']} blocks), P = {cfg['num_stages']} stages (one unit "
        f"each), N = {cfg['num_microbatches']} microbatches, batch {cfg['batch_size']}, "
        f"{cfg['epochs']} epochs, SGD momentum {cfg['momentum']}, seed {cfg['seed']}, "
        f"digits ({results['dataset']['train']} train / {results['dataset']['test']} test).",
        f"lr = {results['chosen_lr']}: {results['lr_rule']}.",
        "",
        "Sync lr sweep: "
        + ", ".join(
            f"{r['lr']}: {r['final_accuracy']:.3f}" + (" (diverged)" if r["diverged"] else "")
            for r in results["lr_sweep"]
        ),
        "",
        "| method | test accuracy | test loss | diverged | weights | stash | T2 buffer | "
        "optimizer | activations | utilization (sim.) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        m = r["memory_bytes"]
        lines.append(
            f"| {r['label']} | {r['final_accuracy']:.4f} | {r['final_loss']:.4f} | "
            f"{'yes' if r['diverged'] else 'no'} | {m.get('weights', 0)} | {m.get('stash', 0)} | "
            f"{m.get('t2_buffer', 0)} | {m.get('optimizer', 0)} | {m.get('activations', 0)} | "
            f"{r['utilization']['utilization']:.3f} |"
        )
    lines += [
        "",
        "Memory: peak bytes per kind, measured by the executor, summed over stages.",
        "",
        "## Did the shape hold?",
        "",
    ]
    for c in results["shape"]:
        lines.append(
            f"- **{'held' if c['held'] else 'did not hold'}**: {c['claim']} "
            f"({c['test']}; {c['detail']})"
        )
    return "\n".join(lines) + "\n"
