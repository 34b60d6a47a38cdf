"""Stored experiment results: well-formed, internally consistent, and reproducible.

``data/results/paper_shape*.json`` come from ``python -m pipemare_lite reproduce paper-shape
[--quick]``. These tests read them as plain JSON (never executing anything from them),
re-derive the decisions recorded in them, and re-run one method of the quick variant to
compare with the stored numbers.
"""

import json
from pathlib import Path

import pytest
import torch

from pipemare_lite.experiments import paper_shape

RESULTS = Path(__file__).resolve().parents[1] / "data" / "results"
STEMS = ["paper_shape", "paper_shape_quick"]


def _strict_json(path: Path) -> dict:
    def reject(constant):
        raise ValueError(f"{path.name}: non-standard JSON constant {constant}")

    return json.loads(path.read_text(), parse_constant=reject)


@pytest.fixture(scope="module", params=STEMS)
def stored(request):
    return request.param, _strict_json(RESULTS / f"{request.param}.json")


def test_meta_files_record_how_the_results_were_made(stored):
    stem, results = stored
    meta = _strict_json(RESULTS / f"{stem}.meta.json")
    for key in ("command", "package_version", "torch_version", "seed", "date"):
        assert key in meta, key
    assert meta["command"].startswith("python -m pipemare_lite reproduce paper-shape")
    assert meta["command"].endswith("--quick") == results["quick"] == stem.endswith("_quick")
    assert meta["seed"] == results["config"]["seed"]
    assert (RESULTS / f"{stem}.md").read_text().startswith("# PipeMare's shape in miniature")


def test_stored_config_is_the_experiment_definition(stored):
    _, results = stored
    expected = paper_shape.config_for(results["quick"])
    assert results["config"] == json.loads(json.dumps(expected.__dict__))


def test_chosen_lr_follows_the_stated_rule(stored):
    _, results = stored
    margin = results["config"]["fine_margin"]
    assert paper_shape.choose_lr(results["lr_sweep"], margin) == results["chosen_lr"]
    assert [r["lr"] for r in results["lr_sweep"]] == results["config"]["lr_grid"]
    sync_row = results["rows"][0]
    sweep_entry = next(r for r in results["lr_sweep"] if r["lr"] == results["chosen_lr"])
    assert sync_row["final_accuracy"] == sweep_entry["final_accuracy"]
    assert all(r["lr"] == results["chosen_lr"] for r in results["rows"])


def test_shape_verdict_follows_from_the_stored_rows(stored):
    _, results = stored
    rows = {r["label"]: r for r in results["rows"]}
    for r in rows.values():  # stored JSON writes a diverged run's NaN as null
        for key in ("final_accuracy", "final_loss"):
            r[key] = float("nan") if r[key] is None else r[key]
    checks = paper_shape.shape_checks(rows, results["config"]["fine_margin"])
    assert [c["held"] for c in checks] == [c["held"] for c in results["shape"]]
    assert [r["label"] for r in results["rows"]] == [v[0] for v in paper_shape.VARIANTS]


def test_utilization_of_sync_is_the_gpipe_formula(stored):
    _, results = stored
    cfg = results["config"]
    sync = results["rows"][0]["utilization"]["utilization"]
    n, p = cfg["num_microbatches"], cfg["num_stages"]
    assert sync == pytest.approx(n / (n + p - 1))


@pytest.mark.slow
def test_quick_async_run_reproduces_the_stored_numbers():
    results = _strict_json(RESULTS / "paper_shape_quick.json")
    stored_row = next(r for r in results["rows"] if r["label"] == "async")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        again = paper_shape.run_variant(paper_shape.QUICK, "async", results["chosen_lr"])
    finally:
        torch.set_num_threads(threads)
    assert again["diverged"] == stored_row["diverged"]
    assert again["steps"] == stored_row["steps"]
    test_size = results["dataset"]["test"]
    assert abs(again["final_accuracy"] - stored_row["final_accuracy"]) <= 1 / test_size
    assert again["final_loss"] == pytest.approx(stored_row["final_loss"], rel=1e-4)
    assert again["train_loss"] == pytest.approx(stored_row["train_loss"], rel=1e-4)
    assert again["memory_bytes"] == stored_row["memory_bytes"]


def test_stored_weight_memory_matches_the_model_size(stored):
    # closed forms: one fp32 copy of the weights; SGD momentum keeps one buffer of the same
    # size; T2 keeps one delta of the same size; only PipeDream stashes
    from pipemare_lite.models import small_resnet

    _, results = stored
    cfg = results["config"]
    model = small_resnet(cfg["channels"], cfg["blocks"], 10, 1, 8)
    weight_bytes = sum(p.numel() * 4 for p in model.parameters())
    for row in results["rows"]:
        memory = row["memory_bytes"]
        assert memory["weights"] == weight_bytes
        assert memory["optimizer"] == weight_bytes
        assert memory["t2_buffer"] == (weight_bytes if row["t2"] else 0)
        assert (memory["stash"] > 0) == (row["method"] == "pipedream")
