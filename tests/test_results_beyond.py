"""The stored ``data/results/beyond_pipemare.json`` (``python -m pipemare_lite reproduce
beyond-pipemare``): well-formed, consistent with its rows, and reproducible.

- the file names its command, its meta and table sit beside it, every row has every seed,
  and the summaries are what the stored seeds give;
- bytes that no kernel changes are what the methods declare (prediction copies, T2's
  buffer, dc's two buffers, 2BW's stash) and the delays are the schedules';
- one seed of the check row (``nesterov``) re-run through record.check_rerun passes
  (bitwise on the machine that wrote the file, the seeds' prediction interval elsewhere),
  and a perturbed method (``wpred`` in its place) is rejected when compared bitwise.
"""

import json
from pathlib import Path

import pytest

from pipemare_lite.analysis.staleness import expected_forward_delay
from pipemare_lite.experiments import beyond_pipemare as experiment
from pipemare_lite.experiments import record

RESULTS = Path(__file__).resolve().parents[1] / "data" / "results"


@pytest.fixture(scope="module")
def stored():
    results = json.loads((RESULTS / "beyond_pipemare.json").read_text())
    meta = json.loads((RESULTS / "beyond_pipemare.meta.json").read_text())
    return results, meta


def test_the_file_names_its_command_and_has_every_row_and_seed(stored):
    results, meta = stored
    assert results["command"] == meta["command"] == experiment.command_for(False)
    assert meta["seeds"] == list(experiment.SEEDS) == results["config"]["seeds"]
    assert [r["label"] for r in results["rows"]] == [r.label for r in experiment.ROWS]
    table = (RESULTS / "beyond_pipemare.md").read_text()
    assert table == experiment.markdown(results)
    for row in results["rows"]:
        assert [s["seed"] for s in row["seeds"]] == list(experiment.SEEDS)
        summary = record.seed_summary([s["final_accuracy"] for s in row["seeds"]])
        assert row["summary"]["final_accuracy"] == summary
        # one convention with paper-shape: a diverged seed's quality is 0
        assert [s["quality"] for s in row["seeds"]] == [
            0.0 if s["diverged"] else s["final_accuracy"] for s in row["seeds"]]
        assert row["summary"]["quality"] == record.seed_summary(
            [s["quality"] for s in row["seeds"]])
        assert row["lr_schedule"] == "cosine"  # T1 is meant for a decaying base (chapter 08)


def test_declared_bytes_and_delays_are_the_methods(stored):
    results, _ = stored
    for row in results["rows"]:
        for seed in row["seeds"]:
            memory, weights = seed["memory_bytes"], seed["memory_bytes"]["weights"]
            assert memory.get("t2_buffer", 0) == (weights if row["method"] == "pipemare" else 0)
            assert memory.get("dc_buffer", 0) == (2 * weights if row["method"] == "dc" else 0)
            assert memory.get("stash", 0) == (weights if row["method"] in ("2bw", "dc") else 0)
            assert (memory.get("prediction", 0) > weights) == (row["method"] in ("wpred",
                                                                                 "nesterov"))
            if not seed["diverged"]:
                name = {"wpred": "async", "nesterov": "async", "dc": "2bw"}.get(row["method"],
                                                                                row["method"])
                closed = [expected_forward_delay(name, experiment.P, row["num_microbatches"], s)
                          for s in range(experiment.P)]
                assert seed["forward_delay_max"] == closed, row["label"]


@pytest.mark.slow
def test_a_rerun_of_the_check_row_matches_and_a_perturbed_one_does_not(stored):
    results, meta = stored
    row = experiment.row_named(experiment.CHECK_ROW)
    again = experiment.train(row, results["config"]["seeds"][0])
    report = experiment.compare(results, meta, again)
    assert report.passed, str(report)
    wrong = experiment.train(row, results["config"]["seeds"][0], method="wpred")
    forced = experiment.compare(results, meta, wrong, fingerprint=meta["fingerprint"])
    assert forced.mode == "bitwise" and not forced.passed
    assert "final_accuracy" in forced.failed or "final_loss" in forced.failed
