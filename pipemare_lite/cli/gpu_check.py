"""The GPU check: one command that confirms the engine's GPU paths and writes a JSON report.

It goes with chapter 11 (the distributed engine on real processes and devices).

``python -m pipemare_lite gpu-check --out report.json`` (or ``scripts/gpu_check.sh``) on a
machine with one or several CUDA GPUs, in well under 5 minutes:

1. the environment: torch, CUDA and NCCL versions, every device (name, memory);
2. the placement each rank gets (:mod:`pipemare_lite.engine.placement`);
3. for 1F1B and PipeMare (or the ``--method`` names, a plugin's included: ``--plugin``
   imports its module here and in every rank), the same seeded run (an MLP, one layer per
   stage, synthetic data)
   three ways: the local executor on the CPU (the reference, one thread), the local
   executor with stage s on ``cuda:(s mod G)`` (several stages per GPU when G < P), and the
   distributed executor with NCCL, one process per GPU (skipped, with the reason, on one
   GPU: NCCL needs a GPU per rank);
4. agreement with the CPU reference, stated as measured: ``bitwise``, ``close`` (largest
   difference within :data:`TOLERANCE`, relative) or ``different``; GPU kernels sum in
   other orders than the CPU's, so ``close`` is the expected verdict there;
5. step times (median over the steps after the first, which pays for start-up) and the
   distributed run's measured utilization next to the simulator's fed the measured op
   costs (:func:`pipemare_lite.analysis.utilization.utilization_report`).

``--dry-run`` runs the same pipeline on the CPU (gloo, fewer and smaller steps) and writes a
report with the same fields saying ``"devices": "cpu"``: the test suite runs it, so the
script is known to work before anyone has a GPU to try it on. Nothing in a dry-run report
is a GPU measurement: there the "local" run is the CPU reference again (bitwise by
construction) and the distributed run is gloo on the CPU (bitwise by the engine's design,
which the dry run checks).

Sizes (default, GPU): P = number of GPUs (at least 2), N = 8, 10 updates of 8 x 256 samples,
hidden width 1024. The CPU reference is the slow part: at P = 8 one method's reference took
46 s on one thread of the project's shared 2-core machine, so on a GPU machine it uses all
the CPU threads torch is given (the dry run uses one, as the gloo ranks do, so that it can
check bitwise equality).
"""

from __future__ import annotations

import datetime
import functools
import math
import platform
import socket
import time
from dataclasses import asdict, dataclass

#: The ``format`` field of a report.
REPORT_FORMAT = "pipemare-lite gpu-check 1"
#: Largest relative difference (to the largest magnitude compared) still called ``close``.
TOLERANCE = 1e-4
#: Methods checked.
METHODS = ("1f1b", "pipemare")


@dataclass(frozen=True)
class CheckConfig:
    """Size of the check's runs (defaults: a GPU run; :func:`dry_run_config`: the CPU one).

    Attributes:
        stages: pipeline stages P (None: the number of GPUs, at least 2).
        microbatches: microbatches per update N.
        steps: updates (minibatches) per run.
        samples: samples per microbatch.
        width: hidden width of the MLP; features and classes are fixed below.
        seed: model and data seed.
    """

    stages: int | None = None
    microbatches: int = 8
    steps: int = 10
    samples: int = 256
    width: int = 1024
    seed: int = 0
    features: int = 256
    classes: int = 16


def dry_run_config() -> CheckConfig:
    """The CPU dry-run's size: 2 stages, a few small steps (seconds on a laptop)."""
    return CheckConfig(stages=2, microbatches=4, steps=3, samples=16, width=32, features=16,
                       classes=5)


def environment() -> dict:
    """Torch, CUDA and NCCL versions and the devices torch sees (no CUDA call without CUDA)."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    devices = []
    if cuda:
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            devices.append({"index": i, "name": props.name,
                            "memory_gib": round(props.total_memory / 2**30, 1),
                            "capability": f"{props.major}.{props.minor}"})
    nccl = None
    if cuda and dist.is_nccl_available():
        import torch.cuda.nccl

        version = torch.cuda.nccl.version()
        nccl = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
    return {"torch": torch.__version__, "cuda_build": torch.version.cuda,
            "cuda_available": cuda, "cuda_devices": devices, "nccl": nccl,
            "cpu_threads": torch.get_num_threads(), "python": platform.python_version(),
            "host": socket.gethostname()}


def _recipe(config: CheckConfig, stages: int):
    from pipemare_lite.training.models import mlp
    from pipemare_lite.training.partition import PartitionedModel

    kwargs = dict(in_features=config.features, hidden=config.width, depth=stages,
                  out_features=config.classes, seed=config.seed)
    return PartitionedModel(mlp, stages, kwargs=tuple(kwargs.items()))


def _job(method: str, config: CheckConfig, stages: int):
    """The run to compare: schedule, stage recipe, data, loss and optimizer (picklable)."""
    import torch
    import torch.nn.functional as F

    from pipemare_lite.engine.distributed.jobs import DistJob
    from pipemare_lite.methods import build_method_schedule, method_options

    options = method_options(method)
    schedule = build_method_schedule(method, stages, config.microbatches,
                                     num_minibatches=config.steps, options=options)
    g = torch.Generator().manual_seed(config.seed + 1)
    data = [(torch.randn(config.samples, config.features, generator=g),
             torch.randint(0, config.classes, (config.samples,), generator=g))
            for _ in range(schedule.total_microbatches)]
    optimizer = functools.partial(torch.optim.SGD, lr=0.02, momentum=0.9)
    return DistJob(schedule, _recipe(config, stages), data, F.cross_entropy, optimizer, options)


def _run_local(job, devices: list[str]) -> dict:
    """The job on the local executor with stage s on ``devices[s]``."""
    from pipemare_lite.engine import LocalExecutor

    executor = LocalExecutor(job.schedule, job.stages(), loss_fn=job.loss_fn,
                             optimizer_factory=job.optimizer_factory,
                             method_options=job.method_options, devices=devices)
    start = time.perf_counter()
    result = executor.run(job.microbatches)
    wall = time.perf_counter() - start
    states = [{k: v.detach().cpu() for k, v in w.module.state_dict().items()}
              for w in executor.workers]
    return {"losses": list(result.losses), "states": states, "trace": result.trace,
            "wall": wall}


def _run_distributed(job, backend: str, timeout: float) -> dict:
    from pipemare_lite.engine.distributed.jobs import run_distributed_jobs
    from pipemare_lite.plugins import loaded_plugins

    start = time.perf_counter()
    result = run_distributed_jobs([job], backend=backend, timeout=timeout,
                                  imports=loaded_plugins())[0]  # --plugin: in every rank too
    wall = time.perf_counter() - start
    return {"losses": list(result.losses), "states": result.state_dicts, "trace": result.trace,
            "wall": wall}


def agreement(run: dict, reference: dict) -> dict:
    """How a run's losses and final weights compare with the reference's, as measured.

    ``verdict``: ``bitwise`` (every number equal), ``close`` (the largest difference is at
    most :data:`TOLERANCE` times the largest magnitude compared), else ``different``.
    """
    import torch

    pairs = [(torch.tensor(run["losses"]), torch.tensor(reference["losses"]))]
    for mine, theirs in zip(run["states"], reference["states"]):
        pairs += [(mine[k].double(), theirs[k].double()) for k in theirs]
    equal = all(a.shape == b.shape and torch.equal(a.double(), b.double()) for a, b in pairs)
    diff = max(float((a.double() - b.double()).abs().max()) for a, b in pairs)
    scale = max(float(b.double().abs().max()) for _, b in pairs) or 1.0
    finite = all(math.isfinite(x) for x in run["losses"])
    verdict = ("bitwise" if equal else
               "close" if finite and diff <= TOLERANCE * scale else "different")
    return {"verdict": verdict, "bitwise": equal, "max_abs_diff": diff,
            "relative_diff": diff / scale, "tolerance": TOLERANCE}


def step_seconds(trace) -> list[float]:
    """Seconds per update: when every rank's k-th update has ended, minus the same for k-1."""
    from pipemare_lite.schedules.actions import UPDATE

    ends: dict[int, list[float]] = {}
    for e in sorted(trace.entries, key=lambda e: e.start):
        if e.action.kind == UPDATE:
            ends.setdefault(e.rank, []).append(e.end)
    if not ends:
        return []
    count = min(len(v) for v in ends.values())
    done = [max(v[k] for v in ends.values()) for k in range(count)]
    return [b - a for a, b in zip([0.0, *done[:-1]], done)]


def _timing(run: dict) -> dict:
    from statistics import median

    steps = step_seconds(run["trace"])
    later = steps[1:] or steps
    return {"wall_seconds": run["wall"], "step_seconds": steps,
            "median_step_seconds": median(later) if later else None}


def _utilization(trace) -> dict:
    from pipemare_lite.analysis.utilization import utilization_report

    report = utilization_report(trace)
    costs = report.pop("costs")
    return {**report, "op_costs_seconds": asdict(costs)}


def plan_runs(stages: int, gpus: int) -> tuple[list[str], str | None, str | None, list[dict]]:
    """What the check runs where, with ``gpus`` CUDA devices (0: the CPU dry run).

    Returns ``(local executor's stage devices, distributed backend or None, why the
    distributed run is skipped or None, each rank's placement as a dict)``.
    """
    from pipemare_lite.engine import placement

    devices = placement.local_stage_devices(stages, cuda_devices=gpus)
    if gpus >= stages:
        backend, skip = "nccl", None
    elif gpus == 0:
        backend, skip = "gloo", None
    else:
        return devices, None, (f"NCCL needs one GPU per rank: {stages} ranks, {gpus} GPU(s); "
                               "the local executor ran several stages per GPU instead"), []
    ranks = [placement.plan(r, r, stages, backend=backend, cuda_devices=gpus).to_dict()
             for r in range(stages)]
    return devices, backend, skip, ranks


def check(*, dry_run: bool, config: CheckConfig | None = None, methods=METHODS,
          timeout: float = 240.0, log=print) -> dict:
    """Run the check and return the report (see the module docstring for what it holds).

    Raises:
        ValueError: no CUDA device and not ``dry_run``.
    """
    import torch

    from pipemare_lite import __version__

    started = time.perf_counter()
    env = environment()
    gpus = len(env["cuda_devices"])
    if not dry_run and gpus == 0:
        raise ValueError("no CUDA device found; --dry-run runs the same checks on the CPU")
    config = config or (dry_run_config() if dry_run else CheckConfig())
    stages = config.stages or max(2, gpus)
    use = 0 if dry_run else gpus
    devices, backend, skip, ranks = plan_runs(stages, use)
    log(f"gpu-check: {'dry run on the CPU' if dry_run else f'{gpus} GPU(s)'}, P={stages}, "
        f"N={config.microbatches}, {config.steps} steps, stages on {', '.join(devices)}")
    runs = {}
    threads = torch.get_num_threads()
    if dry_run:
        torch.set_num_threads(1)  # the CPU reference as the gloo ranks compute: bitwise
    try:
        for method in methods:
            job = _job(method, config, stages)
            reference = _run_local(job, ["cpu"] * stages)
            local = _run_local(job, devices)
            entry = {
                "reference_cpu": _timing(reference),
                "local": {"devices": devices, **_timing(local),
                          "agreement_with_cpu": agreement(local, reference)},
            }
            if skip:
                entry["distributed"] = {"skipped": skip}
            else:
                dist = _run_distributed(job, backend, timeout)
                entry["distributed"] = {
                    "backend": backend, "processes": stages, **_timing(dist),
                    "agreement_with_cpu": agreement(dist, reference),
                    "agreement_with_local": agreement(dist, local),
                    "utilization": _utilization(dist["trace"]),
                }
            runs[method] = entry
            log(f"  {method}: " + "; ".join(_summary(entry)))
    finally:
        torch.set_num_threads(threads)
    verdicts = [a["verdict"] for e in runs.values()
                for part in ("local", "distributed") for key, a in e[part].items()
                if key.startswith("agreement")]
    return {
        "format": REPORT_FORMAT, "version": __version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "dry_run": dry_run, "devices": "cpu" if use == 0 else devices,
        "environment": env, "config": {**asdict(config), "stages": stages},
        "placement": ranks, "runs": runs, "verdicts": verdicts,
        "ok": all(v != "different" for v in verdicts),
        "seconds": time.perf_counter() - started,
    }


def _summary(entry: dict) -> list[str]:
    parts = [f"local {entry['local']['agreement_with_cpu']['verdict']} vs CPU"]
    dist = entry["distributed"]
    if "skipped" in dist:
        parts.append("distributed skipped")
    else:
        u = dist["utilization"]
        parts.append(f"{dist['backend']} {dist['agreement_with_cpu']['verdict']} vs CPU, "
                     f"{dist['agreement_with_local']['verdict']} vs local")
        parts.append(f"utilization measured {u['measured']:.2f}, simulated {u['simulated']:.2f}")
    return parts
