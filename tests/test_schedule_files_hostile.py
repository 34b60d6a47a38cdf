"""Hostile or broken schedule files are refused with a one-line ScheduleError naming the file
and the bad field (issue #36, item 8): wrong JSON field types, deep nesting, a 10 MB CSV
field, cells that are not strings, and a file that is not UTF-8."""

from __future__ import annotations

import json

import pytest

from pipemare_lite.schedules.io import load_schedule
from pipemare_lite.schedules.validation import ScheduleError

GOOD = {"format": "pipemare-lite-schedule", "version": 1, "name": "custom", "num_ranks": 1,
        "num_microbatches": 1, "ranks": [["0F0", "0B0"]]}


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"ranks": 5}, "field 'ranks' is 5; allowed: a list of rows"),
        ({"ranks": [5]}, "field 'ranks' is [5]"),
        ({"ranks": [[{"a": 1}]]}, "row 0: cell {'a': 1} is a dict, not an action"),
        ({"ranks": [[7]]}, "row 0: cell 7 is a int, not an action"),
        ({"name": 5}, "field 'name' is 5; allowed: a string"),
        ({"name": ["x"]}, "field 'name' is ['x']; allowed: a string"),
        ({"weight_mode": 7}, "field 'weight_mode' is 7"),
        ({"num_ranks": "1"}, "field 'num_ranks' is '1'; allowed: an integer >= 1"),
        ({"chunks": "a"}, "field 'chunks' is 'a'"),
        ({"notes": 5}, "field 'notes' is 5; allowed: a list of strings"),
        ({"notes": [1, {}]}, "field 'notes' is [1, {}]"),
        ({"warmup_minibatches": True}, "field 'warmup_minibatches' is True"),
    ],
)
def test_a_json_field_of_the_wrong_type_is_named(tmp_path, change, said):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**GOOD, **change}))
    with pytest.raises(ScheduleError) as caught:
        load_schedule(path)
    assert str(caught.value).startswith("bad.json: ") and said in str(caught.value)


def test_the_good_file_loads(tmp_path):
    path = tmp_path / "good.json"
    path.write_text(json.dumps(GOOD))
    assert load_schedule(path).num_ranks == 1


def test_deeply_nested_json_is_refused(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ScheduleError, match=r"^deep.json: JSON nested too deeply"):
        load_schedule(path)


@pytest.mark.parametrize(("size", "said"), [(10 * 2**20, "CSV line 2: field larger than"),
                                            (50_000, "a cell of 50003 characters")])
def test_a_huge_csv_field_is_refused_without_echoing_it(tmp_path, size, said):
    path = tmp_path / "huge.csv"
    path.write_text("0F0,0B0\n0F0" + "x" * size + "\n")
    with pytest.raises(ScheduleError) as caught:
        load_schedule(path)
    assert str(caught.value).startswith("huge.csv: ") and said in str(caught.value)
    assert len(str(caught.value)) < 300


def test_a_file_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes("0F0,0B0 # caf\u00e9\n".encode("latin-1"))
    with pytest.raises(ScheduleError) as caught:
        load_schedule(path)
    assert str(path) in str(caught.value) and "not UTF-8" in str(caught.value)
