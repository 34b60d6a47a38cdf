"""PyTorch's schedule notation, in one process: export, import, and PyTorch's own checks.

PyTorch's parser (``_Action.from_str``), its schedule check (``_validate_schedule``, what
``_load_csv`` runs) and its lowering to SEND/RECV (``_add_send_recv``) need no process group,
so every exported table is put through them here; running the tables in PyTorch's runtime
is ``tests/test_torch_runtime_interop.py``.
"""

from __future__ import annotations

import csv
import io

import pytest
from torch.distributed.pipelining import schedules as torch_schedules

from pipemare_lite.interop.torch_notation import (
    flushed_minibatches,
    from_torch_csv,
    from_torch_order,
    to_torch_csv,
    to_torch_rows,
)
from pipemare_lite.schedules import SCHEDULE_NAMES, ScheduleError, build_schedule
from pipemare_lite.schedules.io import to_csv

_Action = torch_schedules._Action
SYNC = ("naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipev")
SIZES = [(2, 4), (3, 6), (4, 4), (4, 8)]  # (P, M); interleaved needs M a multiple of P
TWO_CHUNKS = ("interleaved", "zb-v", "dualpipev")


def sync_schedule(name: str, P: int, M: int, **kwargs):
    """``build_schedule`` with 2 chunks where the schedule has them, and M >= 2P for
    DualPipeV (its rule)."""
    M = max(M, 2 * P) if name == "dualpipev" else M
    return build_schedule(name, P, M, chunks=2 if name in TWO_CHUNKS else 1, **kwargs)


def torch_order(text: str) -> dict:
    """A CSV table as PyTorch's ``_load_csv`` reads it: rank -> list of _Action."""
    return {rank: [_Action.from_str(cell) for cell in row]
            for rank, row in enumerate(csv.reader(io.StringIO(text)))}


def torch_accepts(schedule, minibatch=None) -> dict:
    """Parse, check and lower the exported table exactly as PyTorch's runtime does."""
    order = torch_order(to_torch_csv(schedule, minibatch))
    P, S, M = schedule.num_ranks, schedule.num_virtual_stages, schedule.num_microbatches
    mapping = torch_schedules._validate_schedule(order, P, S, M)
    lowered = torch_schedules._add_send_recv(
        {r: list(row) for r, row in order.items()}, stage_to_rank=mapping.__getitem__,
        num_stages=S)
    return {"order": order, "mapping": mapping, "lowered": lowered}


@pytest.mark.parametrize("P,M", SIZES)
@pytest.mark.parametrize("name", SYNC)
def test_every_flushed_schedule_passes_pytorchs_checks(name, P, M):
    schedule = sync_schedule(name, P, M)
    S, M = schedule.num_virtual_stages, schedule.num_microbatches
    accepted = torch_accepts(schedule)
    # PyTorch infers the same stage -> rank layout as ours ("loop", or "v" for the V ones)
    assert accepted["mapping"] == {s: schedule.rank_of(s) for s in range(S)}
    # and lowers it with one SEND/RECV pair per message between ranks
    lowered = [a for row in accepted["lowered"].values() for a in row]
    sends = [a for a in lowered if a.computation_type.value in ("SEND_F", "SEND_B")]
    recvs = [a for a in lowered if a.computation_type.value in ("RECV_F", "RECV_B")]
    # forwards cross the stage boundaries between ranks (S-1 in the loop layout; the V's
    # turn is on one rank), backwards (B or I) cross them the other way
    between_ranks = sum(schedule.rank_of(s) != schedule.rank_of(s + 1) for s in range(S - 1))
    assert between_ranks == (S - 2 if name in ("zb-v", "dualpipev") else S - 1)
    assert len(sends) == len(recvs) == 2 * between_ranks * M


def test_the_engines_own_rows_are_not_pytorchs_notation():
    # what issue 10 reported: the engine's rows have U, which PyTorch's parser rejects
    with pytest.raises(RuntimeError, match="Invalid action string: 0U0"):
        torch_order(to_csv(build_schedule("1f1b", 2, 4)))
    text = to_torch_csv(build_schedule("1f1b", 2, 4))
    assert "U" not in text
    assert text == "0F0,0F1,0B0,0F2,0B1,0F3,0B2,0B3\n1F0,1B0,1F1,1B1,1F2,1B2,1F3,1B3\n"


@pytest.mark.parametrize("name", SYNC)
def test_each_minibatch_of_a_longer_run_is_the_same_step(name):
    one = to_torch_rows(sync_schedule(name, 3, 6))
    run = sync_schedule(name, 3, 6, num_minibatches=3)
    assert [to_torch_rows(run, minibatch=k) for k in range(3)] == [one] * 3
    torch_accepts(run, minibatch=2)  # microbatches 12..17 are written 0..5


def test_a_flushed_warm_up_minibatch_of_an_async_schedule_can_be_exported():
    schedule = build_schedule("pipedream", 3, 3, num_minibatches=4, warmup=1)
    assert flushed_minibatches(schedule) == range(1)
    accepted = torch_accepts(schedule, minibatch=0)
    assert len(accepted["order"]) == 3
    with pytest.raises(ScheduleError, match=r"minibatch=1: allowed: 0 \(the flushed warm-up"):
        to_torch_rows(schedule, minibatch=1)


@pytest.mark.parametrize("name", ["async", "pipedream", "2bw"])
def test_a_schedule_without_a_flush_is_refused(name):
    schedule = build_schedule(name, 3, 3, num_minibatches=4)
    with pytest.raises(ScheduleError, match=r"has no flushed minibatch.*allowed: a "
                                            r"weight_mode='sync' schedule"):
        to_torch_csv(schedule)


@pytest.mark.parametrize(
    "minibatch,pattern",
    [
        (None, r"has 2 minibatches and PyTorch's table holds one step: choose one "
               r"\(minibatch=, or --minibatch\): integers 0..1"),
        (2, r"minibatch=2: allowed: integers 0..1 for schedule '1f1b'"),
        (-1, r"minibatch=-1: allowed"),
        ("0", r"minibatch='0': allowed"),
        (True, r"minibatch=True: allowed"),
    ],
)
def test_the_minibatch_must_be_named_and_in_range(minibatch, pattern):
    with pytest.raises(ScheduleError, match=pattern):
        to_torch_rows(build_schedule("1f1b", 2, 2, num_minibatches=2), minibatch)


@pytest.mark.parametrize("P,M", SIZES)
@pytest.mark.parametrize("name", SYNC)
def test_export_then_import_gives_back_the_compute_order(name, P, M):
    schedule = sync_schedule(name, P, M)
    text = to_torch_csv(schedule)
    from_strings = from_torch_csv(text, name=name)
    from_actions = from_torch_order(torch_order(text), name=name)  # real _Action objects
    assert from_strings == from_actions
    assert (from_strings.num_microbatches, from_strings.chunks, from_strings.placement) == (
        schedule.num_microbatches, schedule.chunks, schedule.placement)

    def compute(s):
        return [[str(a) for a in row if a.kind != "U"] for row in s.ranks]

    assert compute(from_strings) == compute(schedule)
    # one update per stage, right after that stage's last gradient (where REDUCE_GRAD goes)
    grad = "W" if schedule.split_backward else "B"
    for row in from_strings.ranks:
        for position, a in enumerate(row):
            if a.kind == "U":
                earlier = [b for b in row[:position] if b.stage == a.stage]
                assert earlier[-1].kind == grad
                assert sum(b.kind == grad for b in earlier) == schedule.num_microbatches


def test_import_skips_bubbles_communication_and_flattens_overlaps():
    F, B = torch_schedules.FORWARD, torch_schedules.FULL_BACKWARD
    order = {
        0: [_Action(0, F, 0), None, _Action(0, torch_schedules.SEND_F, 0),
            _Action(0, torch_schedules.RECV_B, 0), _Action(0, B, 0),
            _Action(0, torch_schedules.REDUCE_GRAD, None)],
        1: [None, _Action(1, torch_schedules.RECV_F, 0),
            _Action(-1, torch_schedules.OVERLAP_F_B, None,
                    (_Action(1, F, 0), _Action(1, B, 0))),
            _Action(1, torch_schedules.SEND_B, 0)],
    }
    schedule = from_torch_order(order)
    assert schedule.rows() == [["0F0", "0B0", "0U0"], ["1F0", "1B0", "1U0"]]
    # the same as strings (what _dump_csv writes, comms included)
    rows = [[str(a) if a is not None else "" for a in order[r]] for r in (0, 1)]
    assert from_torch_order(rows) == schedule


@pytest.mark.parametrize(
    "order,pattern",
    [
        ({0: ["0F0", "1F0", "1B0", "0B0"], 1: []},
         r"gives rank 0 stages \[0, 1\]; allowed: exactly chunks=1 virtual stages on every rank"),
        ([["0F0", "0X0"]], r"rank 0 position 1: cannot parse PyTorch action '0X0'"),
        ([["0F"]], r"rank 0 position 0: 0F has no microbatch index"),
        ([["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F2", "1B2"]],
         r"rank 1: 1F2 names microbatch 2; allowed: 0..1"),
        ({1: ["1F0"]}, r"pipeline_order has ranks \[1\]; allowed: 0..P-1"),
        ([[], []], r"names stages \[\]; allowed: 0..P\*v-1"),
        ([["0F0", "0B0"], ["3F0", "3B0"]], r"names stages \[0, 3\]"),
        ("0F0,0B0", r"pipeline_order is a string"),
        ({}, r"empty pipeline_order"),
        ([[object()]], r"rank 0 position 0: <object .*> is not a PyTorch _Action"),
    ],
)
def test_bad_pipeline_orders_are_refused_with_a_clear_message(order, pattern):
    with pytest.raises(ScheduleError, match=pattern):
        from_torch_order(order)


def test_an_incomplete_order_is_caught_by_the_engines_validation():
    with pytest.raises(ScheduleError, match=r"missing 1B0 on rank 1"):
        from_torch_order([["0F0", "0B0"], ["1F0"]])


def test_every_builder_is_covered():
    assert set(SYNC) | {"pipedream", "2bw", "async"} == set(SCHEDULE_NAMES)


def drawn_order(schedule_class, P: int, M: int) -> dict:
    """``pipeline_order`` of a one-stage-per-rank PyTorch class, drawn without a process
    group (its ``_get_pipeline_order`` reads only the sizes)."""
    from types import SimpleNamespace

    return schedule_class._get_pipeline_order(SimpleNamespace(_num_stages=P, _n_microbatches=M))


def test_pytorchs_gpipe_order_imports_as_our_gpipe():
    order = drawn_order(torch_schedules.ScheduleGPipe, 3, 4)
    schedule = from_torch_order(order, name="gpipe")
    assert schedule == build_schedule("gpipe", 3, 4)


def test_pytorchs_1f1b_drawing_is_imported_only_if_pytorch_accepts_it():
    # PyTorch 2.13 draws the last rank's forwards as microbatches 1..M (Schedule1F1B runs
    # its own loop, not this drawing); whatever PyTorch's own check says, ours says too
    order = drawn_order(torch_schedules.Schedule1F1B, 2, 4)
    try:
        torch_schedules._validate_schedule(order, 2, 2, 4)
    except AssertionError as exc:
        assert "without first running Forward" in str(exc)
        with pytest.raises(ScheduleError, match=r"rank 1: 1F4 names microbatch 4; allowed: 0..3"):
            from_torch_order(order)
    else:  # a later PyTorch that draws what it runs: the engine takes it as it is
        assert from_torch_order(order).num_microbatches == 4


@pytest.mark.parametrize("torch_class,name", [("ScheduleZBVZeroBubble", "zb-v"),
                                              ("ScheduleDualPipeV", "dualpipev")])
@pytest.mark.parametrize("P,M", [(1, 2), (2, 3), (2, 4), (3, 7), (4, 8), (4, 11), (8, 16)])
def test_pytorchs_v_orders_are_our_builders(torch_class, name, P, M):
    """PyTorch's own order generation (called without processes) read by from_torch_order is
    exactly our builder's schedule, V placement included; DualPipeV's full backwards and
    overlapped pairs come in as the explicit I, W and F, I, W of dualpipe.py."""
    from types import SimpleNamespace

    if name == "dualpipev" and M < 2 * P:
        return  # PyTorch refuses these too (n_microbatches < num_stages)
    cls = getattr(torch_schedules, torch_class)
    holder = SimpleNamespace(pp_group_size=P, _n_microbatches=M, num_stages=2 * P)
    order = {r: cls._calculate_single_rank_operations(holder, r) for r in range(P)}
    imported = from_torch_order(order, num_microbatches=M)
    ours = build_schedule(name, P, M)
    assert imported.placement == ours.placement

    def compute(s):  # the updates: ours after both chunks, the importer's after each one
        return [[a for a in row if a.kind != "U"] for row in s.ranks]

    assert compute(imported) == compute(ours)
