"""``reproduce --check`` on missing or damaged stored results: exit status 3 (not 1, the
status of a failed check), one line naming the file, no traceback, and no training first
(issue #36, item 9). Each case is a dry run over a copy of the stored files: seconds."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from pipemare_lite import cli
from pipemare_lite.cli.commands.reproduce import STORED_UNUSABLE

RESULTS = Path(__file__).resolve().parents[1] / "data" / "results"


def _break_rows(d):
    d["rows"] = 5


def _drop_seeds(d):
    for row in d["rows"]:
        del row["seeds"]


def _text_metric(d):
    for row in d["rows"]:
        for seed in row["seeds"]:
            seed["final_accuracy"] = "high"


def _no_rows(d):
    del d["rows"]


@pytest.mark.parametrize(
    ("file", "damage", "said"),
    [
        ("beyond_pipemare.json", b"{ not json", "are not valid JSON"),
        ("beyond_pipemare.json", b"[1, 2]", "hold a JSON list, not an object"),
        ("beyond_pipemare.json", b"\xff\xfe", "cannot read stored results"),
        ("beyond_pipemare.json", _break_rows, "lack what the check reads (TypeError"),
        ("beyond_pipemare.json", _no_rows, "lack what the check reads (KeyError"),
        ("beyond_pipemare.json", _drop_seeds, "lack what the check reads (KeyError"),
        ("beyond_pipemare.json", _text_metric, "lack what the check reads"),
        ("beyond_pipemare.meta.json", lambda d: d.pop("fingerprint"), "lack what the check"),
        ("beyond_pipemare.meta.json", None, "no stored results at"),
    ],
)
def test_damaged_stored_results_exit_3_naming_the_file(tmp_path, capsys, file, damage, said):
    for name in ("beyond_pipemare.json", "beyond_pipemare.meta.json"):
        shutil.copy(RESULTS / name, tmp_path / name)
    target = tmp_path / file
    if damage is None:
        target.unlink()
    elif isinstance(damage, bytes):
        target.write_bytes(damage)
    else:
        data = json.loads(target.read_text())
        damage(data)
        target.write_text(json.dumps(data))
    start = time.monotonic()
    status = cli.main(["reproduce", "beyond-pipemare", "--check", "--out", str(tmp_path)])
    printed = capsys.readouterr()
    assert status == STORED_UNUSABLE == 3, printed
    assert "Traceback" not in printed.err + printed.out
    assert str(tmp_path / "beyond_pipemare") in printed.err and said in printed.err
    assert time.monotonic() - start < 20  # refused before any training


@pytest.mark.parametrize(("experiment", "stem"), [("beyond-pipemare", "beyond_pipemare"),
                                                  ("paper-shape", "paper_shape"),
                                                  ("paper-shape", "paper_shape_quick")])
def test_the_dry_run_accepts_the_intact_stored_results(experiment, stem):
    import importlib

    from pipemare_lite.cli.commands import reproduce
    from pipemare_lite.experiments import EXPERIMENTS

    module = importlib.import_module(EXPERIMENTS[experiment])
    results = json.loads((RESULTS / f"{stem}.json").read_text())
    meta = json.loads((RESULTS / f"{stem}.meta.json").read_text())
    seed = reproduce._stored_check_seed(module, results)
    report = module.compare(results, meta, seed, fingerprint={"dry run": "seed-range mode"})
    assert report.mode == "range" and report.passed, str(report)
