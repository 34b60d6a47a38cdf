"""``reproduce --check`` on another kernel fingerprint, through the command line (issue 48).

The stored quick paper-shape files are copied to a temporary folder with the writer's
fingerprint changed (another CPU capability: the range mode), and the experiment's re-run
is replaced in-process by a stored seed with one metric moved: inside the stored seeds'
prediction interval the check passes (rc 0), outside it fails with rc 1 and the report
names the quantity and by how much it missed. The interval is recomputed here plainly.
"""

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from pipemare_lite import cli
from pipemare_lite.experiments import paper_shape, record

RESULTS = Path(__file__).resolve().parents[1] / "data" / "results"


@pytest.fixture
def foreign_store(tmp_path):
    """The quick paper-shape files, as if another machine's kernels had written them."""
    for suffix in (".json", ".meta.json"):
        shutil.copy(RESULTS / f"paper_shape_quick{suffix}", tmp_path)
    meta_path = tmp_path / "paper_shape_quick.meta.json"
    meta = json.loads(meta_path.read_text())
    meta["fingerprint"]["torch_cpu_capability"] = "SOME_OTHER_ISA"
    meta_path.write_text(json.dumps(meta))
    results = json.loads((tmp_path / "paper_shape_quick.json").read_text())
    return tmp_path, paper_shape.check_row(results)["seeds"]


def _plain_interval(values, lowest, highest, floor):
    """mean +- t s sqrt(1 + 1/n) with t(7, 0.995) = 3.499 from the printed table, the
    half-width at least ``floor``, cut to [lowest, highest]."""
    n = len(values)
    assert n == 8
    mean = sum(values) / n
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = max(floor, 3.499 * s * math.sqrt(1 + 1 / n))
    return max(lowest, mean - half), min(highest, mean + half)


def _check(monkeypatch, capsys, out, rerun):
    monkeypatch.setattr(paper_shape, "rerun", lambda results, *a, **k: rerun)
    code = cli.main(["reproduce", "paper-shape", "--quick", "--check", "--out", str(out)])
    return code, capsys.readouterr().out


def test_a_rerun_inside_the_prediction_interval_passes(foreign_store, monkeypatch, capsys):
    out, seeds = foreign_store
    accuracies = [s["final_accuracy"] for s in seeds]
    low, high = _plain_interval(accuracies, 0.0, 1.0, 1 / 449)
    assert high == 1.0 and low > min(accuracies) - 0.1  # cut at 1; not the old [0.54, 1.20]
    # outside every stored seed, yet inside the interval: one more seed lands there often
    moved = dict(seeds[0], final_accuracy=min(accuracies) - 0.5 * (min(accuracies) - low))
    code, text = _check(monkeypatch, capsys, out, moved)
    assert code == 0, text
    assert "PASS, mode range" in text
    assert "final_accuracy" in text and "inside the 99 % prediction interval" in text


@pytest.mark.parametrize("key, lowest, highest, side", [
    ("final_accuracy", 0.0, 1.0, "below"),
    ("final_loss", 0.0, math.inf, "above"),
])  # fmt: skip
def test_a_rerun_outside_the_prediction_interval_fails_with_rc_1(
        foreign_store, monkeypatch, capsys, key, lowest, highest, side):
    out, seeds = foreign_store
    values = [s[key] for s in seeds]
    floor = 1 / 449 if key == "final_accuracy" else record.RELATIVE_FLOOR * abs(
        sum(values) / len(values))
    low, high = _plain_interval(values, lowest, highest, floor)
    value = low - 0.02 if side == "below" else high + 0.02
    code, text = _check(monkeypatch, capsys, out, dict(seeds[0], **{key: value}))
    assert code == 1, text
    head, *lines = text.splitlines()
    assert "FAIL, mode range" in head and head.endswith(f"; failed: {key}")
    line = next(line for line in lines if line.strip().startswith(f"{key}:"))
    assert "OUTSIDE the 99 % prediction interval" in line
    missed = re.search(rf"\] by ([0-9.e-]+) {side} ", line)  # by how much, which side
    assert missed and float(missed.group(1)) == pytest.approx(0.02, abs=2e-4), line
