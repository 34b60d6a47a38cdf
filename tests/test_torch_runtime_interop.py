"""Our schedules in PyTorch's pipelining runtime and PyTorch's in ours, bitwise, 2 and 4 ranks.

One launch per world size (real processes, gloo on 127.0.0.1, a port the OS picks) runs
every case of :data:`SPECS` (see :mod:`pipemare_lite.interop.torch_runtime`):

- export: the engine's 1F1B, interleaved (2 chunks), ZB-H1, ZB-H2, ZB-V and DualPipeV
  (the last two on the V placement: PyTorch reads it from the rows), written with
  ``to_torch_csv`` and loaded by ``_PipelineScheduleRuntime._load_csv``, step once in
  PyTorch's runtime and once in our DistributedExecutor;
- import: PyTorch's ScheduleGPipe, ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
  ScheduleLoopedBFS, ScheduleZBVZeroBubble and ScheduleDualPipeV step once themselves, and
  their ``pipeline_order`` goes through
  ``from_torch_order`` into a schedule our executor runs.

Every stage's gradients must equal, bitwise (fp32, CPU, one thread per process), both each
other and one-device gradient accumulation over the same microbatch views, in the order
the schedule runs the backwards (LoopedBFS runs them last microbatch first, and a sum in
another order rounds differently). Loss scaling: "torch" is PyTorch's default (sum of
plain-loss gradients, then divided by M) with M = 4, a power of two, where it is bitwise
ours (``loss / M`` back-propagated); "ours" gives PyTorch ``loss / M`` and
``scale_grads=False``, with M = 3P (not a power of two). DualPipeV needs M >= 2P: its
"torch" cases take M = max(4, 2P), still a power of two.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from pipemare_lite.engine.distributed.launch import launch
from pipemare_lite.interop.torch_runtime import InteropCase, interop_worker
from pipemare_lite.schedules import build_schedule
from pipemare_lite.training.models import mlp
from pipemare_lite.training.partition import PartitionedModel
from tests.timeouts import hard_time_limit

pytestmark = [pytest.mark.dist]

WORLD_SIZES = (2, 4)
SPECS = [  # (label, engine schedule or PyTorch class, chunks, loss scaling)
    ("1f1b", "1f1b", 1, "torch"),
    ("interleaved", "interleaved", 2, "torch"),
    ("zb-h1", "zb-h1", 1, "torch"),
    ("1f1b-ours", "1f1b", 1, "ours"),
    ("interleaved-ours", "interleaved", 2, "ours"),
    ("zb-h1-ours", "zb-h1", 1, "ours"),
    ("zb-h2", "zb-h2", 1, "torch"),
    ("zb-v", "zb-v", 2, "torch"),
    ("dualpipev", "dualpipev", 2, "torch"),
    ("zb-v-ours", "zb-v", 2, "ours"),
    ("dualpipev-ours", "dualpipev", 2, "ours"),
    ("torch-gpipe", "ScheduleGPipe", 1, "torch"),
    ("torch-interleaved-1f1b", "ScheduleInterleaved1F1B", 2, "torch"),
    ("torch-interleaved-zb", "ScheduleInterleavedZeroBubble", 2, "torch"),
    ("torch-looped-bfs", "ScheduleLoopedBFS", 2, "torch"),
    ("torch-zbv", "ScheduleZBVZeroBubble", 2, "torch"),
    ("torch-dualpipev", "ScheduleDualPipeV", 2, "torch"),
]
V_SHAPED = ("zb-v", "dualpipev", "zb-v-ours", "dualpipev-ours", "torch-zbv", "torch-dualpipev")
LABELS = [spec[0] for spec in SPECS]


def stages_of(num_stages: int) -> PartitionedModel:
    """A seeded MLP with one linear layer per (virtual) stage."""
    return PartitionedModel(mlp, num_stages, kwargs=(
        ("in_features", 6), ("hidden", 8), ("depth", num_stages), ("out_features", 5),
        ("seed", 1)))


def microbatches(M: int) -> list:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(3, 6, generator=g), torch.randint(0, 5, (3,), generator=g))
            for _ in range(M)]


def case_of(spec, P: int) -> InteropCase:
    label, what, chunks, scaling = spec
    M = 4 if scaling == "torch" else 3 * P
    if what in ("dualpipev", "ScheduleDualPipeV"):
        M = max(M, 2 * P)  # DualPipeV's rule; 2P is a power of two for P = 2, 4
    data, stages = microbatches(M), stages_of(P * chunks)
    if what.startswith("Schedule"):
        return InteropCase(label, stages, data, F.cross_entropy, torch_class=what,
                           chunks=chunks, loss_scaling=scaling)
    schedule = build_schedule(what, P, M, chunks=chunks)
    return InteropCase(label, stages, data, F.cross_entropy, schedule=schedule,
                       loss_scaling=scaling)


@pytest.fixture(scope="module", params=WORLD_SIZES, ids=lambda P: f"P{P}")
def launched(request):
    P = request.param
    cases = [case_of(spec, P) for spec in SPECS]
    # two launches: the forkserver hands every tensor of the arguments over as a file
    # descriptor, and all cases' microbatches at P = 4 are more than it sends at once
    half = len(cases) // 2
    per_rank = [{"rank": r, "cases": []} for r in range(P)]
    for group in (cases[:half], cases[half:]):
        with hard_time_limit(150):
            results = launch(interop_worker, P, args=(group,), timeout=120)
        for merged, result in zip(per_rank, results):
            merged["cases"] += result["cases"]
            merged.setdefault("launches", []).append(result)
    return P, {case.label: case for case in cases}, per_rank


def results_of(launched, label):
    _, cases, per_rank = launched
    return cases[label], [rank_result["cases"][LABELS.index(label)] for rank_result in per_rank]


def one_device(case: InteropCase, rows) -> tuple[dict, list]:
    """Gradient accumulation on one device, in the order the schedule runs the backwards.

    The microbatches are the views PyTorch's ``tensor_split`` makes of the whole batch, as
    both runtimes see them. Returns ``({stage: [gradients]}, unscaled losses by microbatch)``.
    """
    grads_kind = "W" if any("I" in cell for row in rows for cell in row) else "B"
    orders = {}
    for row in rows:
        for cell in row:
            stage, kind, m = _split(cell)
            if kind == grads_kind:
                orders.setdefault(stage, []).append(m)
    order = orders[0]
    assert all(o == order for o in orders.values()), f"stages accumulate differently: {orders}"
    M = case.num_microbatches
    x = torch.cat([mb[0] for mb in case.microbatches])
    y = torch.cat([mb[1] for mb in case.microbatches])
    views = list(zip(torch.tensor_split(x, M), torch.tensor_split(y, M)))
    modules = case.stages()
    model = torch.nn.Sequential(*modules)
    losses = {}
    for m in order:
        loss = case.loss_fn(model(views[m][0]), views[m][1])
        (loss / M).backward()
        losses[m] = loss.item()
    grads = {s: [p.grad.clone() for p in module.parameters()] for s, module in enumerate(modules)}
    return grads, [losses[m] for m in range(M)]


def _split(cell: str) -> tuple[int, str, int]:
    for i, ch in enumerate(cell):
        if ch.isalpha():
            return int(cell[:i]), ch, int(cell[i + 1:])
    raise ValueError(cell)


def assert_bitwise(a: list, b: list, what: str) -> None:
    assert len(a) == len(b) > 0, what
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.dtype == y.dtype == torch.float32, what
        assert torch.equal(x, y), f"{what}, parameter {i}: max diff {(x - y).abs().max()}"


@pytest.mark.parametrize("label", LABELS)
def test_gradients_are_bitwise_one_device_accumulation_in_both_runtimes(launched, label):
    P = launched[0]
    case, ranks = results_of(launched, label)
    rows = ranks[0]["rows"]
    assert all(r["rows"] == rows for r in ranks)
    reference, _ = one_device(case, rows)
    seen = set()
    for rank, r in enumerate(ranks):
        chunks = len(reference) // P
        held = ([rank, 2 * P - 1 - rank] if label in V_SHAPED  # the V in both runtimes
                else [rank + c * P for c in range(chunks)])  # stage s on rank s % P
        assert sorted(r["torch_grads"]) == sorted(r["our_grads"]) == held
        for s in r["torch_grads"]:
            assert any(g.abs().sum() > 0 for g in reference[s]), f"stage {s}: zero gradients"
            assert_bitwise(r["torch_grads"][s], reference[s], f"{label}: PyTorch, stage {s}")
            assert_bitwise(r["our_grads"][s], reference[s], f"{label}: engine, stage {s}")
            seen.add(s)
    assert seen == set(reference)


@pytest.mark.parametrize("label", LABELS)
def test_losses_agree_with_one_device(launched, label):
    case, ranks = results_of(launched, label)
    _, expected = one_device(case, ranks[0]["rows"])
    last = [r for r in ranks if r["our_losses"]]
    assert len(last) == 1  # only the rank holding the last stage has losses
    ours, theirs = last[0]["our_losses"], last[0]["torch_losses"]
    assert ours == expected
    if case.loss_scaling == "ours":  # PyTorch was given loss / M
        expected = [float(torch.tensor(v) / case.num_microbatches) for v in expected]
    assert theirs == expected


def test_the_imported_orders_are_pytorchs(launched):
    # the engine ran what PyTorch's class holds (not a schedule of our own)
    P = launched[0]
    _, ranks = results_of(launched, "torch-looped-bfs")
    first = ranks[0]["rows"][0]
    assert first[:4] == ["0F0", "0F1", "0F2", "0F3"] and first[4] == f"{P}F0"
    assert [c for c in first if "B" in c][:4] == [f"{P}B3", f"{P}B2", f"{P}B1", f"{P}B0"]
    _, ranks = results_of(launched, "torch-interleaved-zb")
    assert any("I" in c for c in ranks[0]["rows"][0])
    # the V classes: rank 0 runs stage 0 and stage 2P-1 (the loss), nothing else
    for label in ("torch-zbv", "torch-dualpipev"):
        _, ranks = results_of(launched, label)
        assert {c.split("F")[0] for c in ranks[0]["rows"][0] if "F" in c} == {"0", f"{2 * P - 1}"}


def test_each_launch_used_loopback_and_left_no_process(launched):
    P, _, per_rank = launched
    for launch_index in range(2):
        ranks = [r["launches"][launch_index] for r in per_rank]
        assert [r["rank"] for r in ranks] == list(range(P))
        masters = {r["master"] for r in ranks}
        assert len(masters) == 1
        address, port = masters.pop().split(":")
        assert address == "127.0.0.1" and int(port) > 0
        for r in ranks:
            with pytest.raises(ProcessLookupError):
                os.kill(r["pid"], 0)  # signal 0 only asks whether the pid exists


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({}, r"case 'x': give exactly one of schedule, torch_class"),
        ({"torch_class": "ScheduleGPipe", "schedule": build_schedule("gpipe", 2, 2)},
         r"give exactly one"),
        ({"torch_class": "ScheduleZBV"}, r"torch_class 'ScheduleZBV'; allowed"),
        ({"torch_class": "ScheduleDualPipeV"}, r"holds two stages per rank \(a V\); chunks=1"),
        ({"torch_class": "Schedule1F1B", "chunks": 2}, r"one stage per rank; chunks=2"),
        ({"torch_class": "ScheduleGPipe", "loss_scaling": "mean"}, r"loss_scaling 'mean'"),
    ],
)
def test_a_bad_case_is_refused_before_any_process_starts(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        InteropCase("x", stages_of(2), microbatches(2), F.cross_entropy, **kwargs)
