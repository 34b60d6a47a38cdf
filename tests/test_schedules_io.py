"""Import/export: rows, JSON and CSV round-trip; bad input is refused with a clear message."""

from __future__ import annotations

import json

import pytest

from pipemare_lite.schedules import SCHEDULE_NAMES, ScheduleError, build_schedule
from pipemare_lite.schedules.io import from_csv, from_json, from_rows, to_csv, to_json, to_rows


def every_schedule():
    for name in SCHEDULE_NAMES:
        chunks = 2 if name == "interleaved" else 1
        warmup = 1 if name in ("pipedream", "2bw", "async") else 0
        yield build_schedule(
            name, 3, 6, chunks=chunks, num_minibatches=2, warmup=warmup
        )


@pytest.mark.parametrize("schedule", list(every_schedule()), ids=lambda s: s.name)
def test_json_round_trip_is_exact(schedule):
    text = to_json(schedule)
    assert json.loads(text)["ranks"] == to_rows(schedule)  # plain JSON
    assert from_json(text) == schedule


@pytest.mark.parametrize("schedule", list(every_schedule()), ids=lambda s: s.name)
def test_csv_round_trip_is_exact(schedule):
    text = to_csv(schedule)
    # one line per rank, after a placement row when it has chunks or is not round robin
    placement_row = schedule.chunks > 1 or not schedule.round_robin
    assert len(text.splitlines()) == schedule.num_ranks + placement_row
    back = from_csv(
        text,
        name=schedule.name,
        num_microbatches=schedule.num_microbatches,
        chunks=schedule.chunks,
        weight_mode=schedule.weight_mode,
        warmup=schedule.warmup,
    )
    assert back.ranks == schedule.ranks and back.num_minibatches == schedule.num_minibatches
    assert back.placement == schedule.placement


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "zb-h1", "naive"])
def test_rows_without_updates_get_them_after_the_last_gradient(name):
    schedule = build_schedule(name, 3, 4, num_minibatches=3)
    rows = [[a for a in row if "U" not in a] for row in to_rows(schedule)]
    back = from_rows(rows, name=name, num_microbatches=4)
    assert back.num_minibatches == 3  # inferred from 12 microbatches, 4 per minibatch
    assert back.ranks == schedule.ranks


def test_blank_cells_are_idle_slots():
    rows = [["0F0", None, "", "0B0"], [" ", "1F0", "1B0"]]
    schedule = from_rows(rows, name="custom", num_microbatches=1)
    assert to_rows(schedule) == [["0F0", "0B0", "0U0"], ["1F0", "1B0", "1U0"]]


HEADER = {"format": "pipemare-lite-schedule", "version": 1}


def rows_call(rows, M=1):
    return lambda: from_rows(rows, name="custom", num_microbatches=M)


@pytest.mark.parametrize(
    "call,pattern",
    [
        (rows_call([["0F0", "0X0"]]), r"row 0: cannot parse action '0X0'"),
        (rows_call([["0F0", "0B0", "0F1", "0B1"]], M=3), r"2 microbatches, not a multiple of"),
        (rows_call([]), r"no rows"),
        (lambda: from_json("{not json"), r"not valid JSON"),
        (lambda: from_json(json.dumps({"format": "other"})), r"not a schedule"),
        (lambda: from_json(json.dumps({**HEADER, "version": 9})), r"version 9; allowed: 1"),
        (
            lambda: from_json(json.dumps({**HEADER, "name": "custom"})),
            r"lacks num_ranks, num_microbatches, ranks",
        ),
    ],
)
def test_bad_input_is_refused(call, pattern):
    with pytest.raises(ScheduleError, match=pattern):
        call()


def test_imported_rows_are_validated():
    with pytest.raises(ScheduleError, match="deadlocks"):
        from_rows([["0F0", "0B0"], ["1B0", "1F0"]], name="custom", num_microbatches=1)


def test_json_written_before_the_rename_still_loads():
    """Files from before ``num_stages`` became ``num_ranks`` keep loading, to the same schedule."""
    schedule = build_schedule("1f1b", 3, 4, num_minibatches=2)
    data = json.loads(to_json(schedule))
    data = {("num_stages" if key == "num_ranks" else key): value for key, value in data.items()}
    assert "num_ranks" not in data and data["num_stages"] == 3
    assert from_json(json.dumps(data)) == schedule


def test_an_early_update_with_an_inferred_n_says_where_n_came_from():
    # 0U0 before 0B1: read as N = 1, the rows look unflushed; the error says so, and with
    # N given the update's real problem is named
    rows = [["0F0", "0F1", "0B0", "0U0", "0B1"], ["1F0", "1B0", "1F1", "1B1", "1U0"]]
    with pytest.raises(ScheduleError, match=r"N = 1 microbatches per minibatch was read from "
                                            r"the gradients before stage 0's first update"):
        from_rows(rows, name="custom", num_microbatches=None)
    with pytest.raises(ScheduleError, match=r"0U0 comes after 1 of the 2 gradients"):
        from_rows(rows, name="custom", num_microbatches=2)
