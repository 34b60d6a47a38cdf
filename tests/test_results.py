"""Stored experiment results: well-formed, internally consistent, and reproducible anywhere.

``data/results/paper_shape*.json`` come from ``python -m pipemare_lite reproduce paper-shape
[--quick]``. These tests read them as plain JSON (never executing anything from them),
re-derive the decisions recorded in them from the stored seeds, and re-run one seed of one
quick row through the fingerprint-aware check (``pipemare_lite.experiments.record``):
bitwise on the machine that wrote the file, within the widened seed range elsewhere. They
also show that the check rejects a perturbed method, and that the same seed on the same
machine gives the same numbers bitwise.
"""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from pipemare_lite import cli
from pipemare_lite.experiments import paper_shape, record

RESULTS = Path(__file__).resolve().parents[1] / "data" / "results"
STEMS = ["paper_shape", "paper_shape_quick"]


def _strict_json(path: Path) -> dict:
    def reject(constant):
        raise ValueError(f"{path.name}: non-standard JSON constant {constant}")

    return json.loads(path.read_text(), parse_constant=reject)


@pytest.fixture(scope="module", params=STEMS)
def stored(request):
    return request.param, _strict_json(RESULTS / f"{request.param}.json")


def test_meta_files_record_how_and_where_the_results_were_made(stored):
    stem, results = stored
    meta = _strict_json(RESULTS / f"{stem}.meta.json")
    for key in ("command", "package_version", "seeds", "date", "fingerprint", "platform"):
        assert key in meta, key
    assert meta["command"].startswith("python -m pipemare_lite reproduce paper-shape")
    assert meta["command"].endswith("--quick") == results["quick"] == stem.endswith("_quick")
    assert meta["seeds"] == results["config"]["seeds"]
    fingerprint = meta["fingerprint"]
    assert set(fingerprint) == set(record.machine_fingerprint(1)), "fingerprint fields changed"
    assert fingerprint["torch_threads"] == results["torch_threads"] == paper_shape.THREADS
    for key in ("cpu_model", "torch_cpu_capability", "blas", "mkl", "torch_version"):
        assert fingerprint[key], key
    assert (RESULTS / f"{stem}.md").read_text().startswith("# PipeMare's shape in miniature")


def test_stored_config_is_the_experiment_definition(stored):
    _, results = stored
    expected = paper_shape.config_for(results["quick"])
    assert results["config"] == json.loads(json.dumps(expected.__dict__))
    assert len(expected.seeds) >= 3


def test_every_row_has_every_seed_and_its_summary_follows(stored):
    _, results = stored
    seeds = results["config"]["seeds"]
    for row in results["rows"]:
        assert [s["seed"] for s in row["seeds"]] == seeds, row["label"]
        for key in paper_shape.CHECK_METRICS:
            assert row["summary"][key] == record.seed_summary(s[key] for s in row["seeds"])
        assert row["diverged_seeds"] == sum(s["diverged"] for s in row["seeds"])
        assert len({s["final_accuracy"] for s in row["seeds"]}) > 1, "seeds did not vary"


def test_chosen_lr_follows_the_stated_rule(stored):
    _, results = stored
    margin = results["config"]["fine_margin"]
    assert paper_shape.choose_lr(results["lr_sweep"], margin) == results["chosen_lr"]
    assert [r["lr"] for r in results["lr_sweep"]] == results["config"]["lr_grid"]
    sync_row = results["rows"][0]
    sweep_entry = next(r for r in results["lr_sweep"] if r["lr"] == results["chosen_lr"])
    for key in paper_shape.CHECK_METRICS:
        assert sync_row["summary"][key] == sweep_entry[key]
    assert all(r["lr"] == results["chosen_lr"] for r in results["rows"])


def test_choose_lr_uses_the_mean_over_seeds_and_refuses_a_diverged_seed():
    def entry(lr, values, diverged=0):
        return {"lr": lr, "final_accuracy": record.seed_summary(values), "diverged_seeds": diverged}

    sweep = [entry(0.01, [0.90, 0.92]), entry(0.02, [0.85, 0.93]), entry(0.05, [0.99, 0.5])]
    assert paper_shape.choose_lr(sweep, 0.02) == 0.02  # 0.05's best seed does not count
    sweep[1] = entry(0.02, [0.95, float("nan")], diverged=1)
    assert paper_shape.choose_lr(sweep, 0.02) == 0.01
    with pytest.raises(RuntimeError, match="diverged at every lr"):
        paper_shape.choose_lr([entry(0.1, [float("nan")], 1)], 0.02)


def test_shape_verdict_follows_from_the_stored_rows(stored):
    _, results = stored
    rows = {r["label"]: r for r in results["rows"]}
    for r in rows.values():  # stored JSON writes a diverged run's NaN as null
        for s in r["seeds"]:
            for key in ("final_accuracy", "final_loss"):
                s[key] = float("nan") if s[key] is None else s[key]
    checks = paper_shape.shape_checks(rows, results["config"]["fine_margin"])
    assert [c["verdict"] for c in checks] == [c["verdict"] for c in results["shape"]]
    assert {c["verdict"] for c in checks} <= {"held", "did not hold", "not separable from noise"}
    assert [r["label"] for r in results["rows"]] == [v[0] for v in paper_shape.VARIANTS]


def _row(label, accuracies):
    seeds = [{"seed": i, "final_accuracy": a, "diverged": False} for i, a in enumerate(accuracies)]
    memory = {"weights": 1, "optimizer": 1, "activations": 1}
    return {
        "label": label,
        "seeds": seeds,
        "diverged_seeds": 0,
        "memory_bytes": memory,
        "utilization": {"utilization": 1.0 if label == "sync (1F1B)" else 0.5},
    }


def test_a_claim_is_held_only_where_the_seed_ranges_separate():
    def verdict_of_first_claim(sync, plain):
        rows = {label: _row(label, [0.5, 0.5]) for label, _, _ in paper_shape.VARIANTS}
        rows["sync (1F1B)"] = _row("sync (1F1B)", sync)
        rows["async"] = _row("async", plain)
        return paper_shape.shape_checks(rows, 0.02)[0]["verdict"]

    assert verdict_of_first_claim([0.90, 0.92], [0.50, 0.60]) == "held"
    # means 0.90 vs 0.85 would say "held"; the ranges overlap, so noise cannot tell
    assert verdict_of_first_claim([0.80, 1.00], [0.70, 0.99]) == "not separable from noise"
    assert verdict_of_first_claim([0.80, 0.81], [0.85, 0.90]) == "did not hold"


def test_utilization_of_sync_is_the_gpipe_formula(stored):
    _, results = stored
    cfg = results["config"]
    sync = results["rows"][0]["utilization"]["utilization"]
    n, p = cfg["num_microbatches"], cfg["num_stages"]
    assert sync == pytest.approx(n / (n + p - 1))


def test_stored_weight_memory_matches_the_model_size(stored):
    # closed forms: one fp32 copy of the weights; SGD momentum keeps one buffer of the same
    # size; T2 keeps one delta of the same size; only PipeDream stashes
    from pipemare_lite.models import small_resnet

    _, results = stored
    cfg = results["config"]
    model = small_resnet(cfg["channels"], cfg["blocks"], 10, 1, 8)
    weight_bytes = sum(p.numel() * 4 for p in model.parameters())
    for row in results["rows"]:
        for memory in [row["memory_bytes"]] + [s["memory_bytes"] for s in row["seeds"]]:
            assert memory["weights"] == weight_bytes
            assert memory["optimizer"] == weight_bytes
            assert memory["t2_buffer"] == (weight_bytes if row["t2"] else 0)
            assert (memory["stash"] > 0) == (row["method"] == "pipedream")


# ------------------------------------------------------------ the record module, alone


def test_student_t_quantiles_match_the_printed_tables():
    # two-sided critical values from any statistics table (e.g. NIST/SEMATECH e-Handbook)
    for probability, df, table in [
        (0.975, 1, 12.706), (0.975, 4, 2.776), (0.995, 2, 9.925), (0.995, 10, 3.169),
        (0.9995, 4, 8.610), (0.9995, 7, 5.408), (0.9995, 30, 3.646),
    ]:  # fmt: skip
        assert record.student_t_quantile(probability, df) == pytest.approx(table, abs=6e-4)
    with pytest.raises(ValueError, match="probability"):
        record.student_t_quantile(0.4, 3)
    with pytest.raises(ValueError, match="df"):
        record.student_t_quantile(0.9, 0)


def test_range_margin_is_the_prediction_interval_and_rarely_rejects_a_new_seed():
    values = [0.81, 0.86, 0.84, 0.90, 0.88]
    t = record.student_t_quantile(1 - record.ALPHA / 2, 4)
    expected = t * np.std(values, ddof=1) * math.sqrt(1 + 1 / 5)
    assert record.range_margin(values) == pytest.approx(expected, rel=1e-12)
    assert record.range_margin([0.5, 0.5, 0.5], floor=0.01) == 0.01
    with pytest.raises(ValueError, match="at least 2"):
        record.range_margin([0.5])
    # the derivation's claim: one more draw from the seeds' normal distribution falls
    # outside [min - margin, max + margin] with probability below ALPHA
    rng = np.random.default_rng(0)
    n, trials = 8, 400_000
    seeds, new = rng.standard_normal((trials, n)), rng.standard_normal(trials)
    t = record.student_t_quantile(1 - record.ALPHA / 2, n - 1)
    margin = t * seeds.std(axis=1, ddof=1) * math.sqrt(1 + 1 / n)
    mean = seeds.mean(axis=1)
    outside_interval = np.mean(np.abs(new - mean) > margin)  # the exact prediction interval
    assert outside_interval == pytest.approx(record.ALPHA, rel=0.2)
    widened = np.mean((new < seeds.min(axis=1) - margin) | (new > seeds.max(axis=1) + margin))
    assert widened <= outside_interval


def test_seed_summary_and_verdict():
    assert record.seed_summary([1.0, None, 3.0, float("nan")]) == {
        "n": 4, "mean": 2.0, "min": 1.0, "max": 3.0, "non_finite": 2
    }  # fmt: skip
    assert record.seed_summary([None])["mean"] is None
    with pytest.raises(ValueError, match="at least one"):
        record.seed_summary([])
    assert record.verdict(True, False) == "held"
    assert record.verdict(False, True) == "did not hold"
    assert record.verdict(False, False) == "not separable from noise"
    with pytest.raises(ValueError, match="both"):
        record.verdict(True, True)


def _seeds():
    return [
        {"seed": s, "acc": a, "loss": 1 - a, "steps": 42, "curve": [a, a / 2]}
        for s, a in enumerate([0.80, 0.84, 0.82, 0.86])
    ]


def test_check_rerun_is_bitwise_on_the_same_machine():
    here = {"cpu_model": "A", "torch_cpu_capability": "AVX2"}
    same = record.check_rerun(
        _seeds(), _seeds()[1], stored_fingerprint=here, fingerprint=dict(here), metrics=("acc",)
    )
    assert same.mode == "bitwise" and same.passed, str(same)
    one_bit = dict(_seeds()[1], curve=[0.84, math.nextafter(0.42, 1)])
    off = record.check_rerun(
        _seeds(), one_bit, stored_fingerprint=here, fingerprint=here, metrics=("acc",)
    )
    assert off.mode == "bitwise" and off.failed == ["curve"], str(off)
    assert "FAIL, mode bitwise" in str(off)


def test_check_rerun_on_a_foreign_machine_uses_the_widened_range():
    stored_fp, foreign = {"cpu_model": "A"}, {"cpu_model": "B"}

    def check(rerun):
        return record.check_rerun(
            _seeds(), rerun, stored_fingerprint=stored_fp, fingerprint=foreign,
            metrics=("acc", "loss"), exact_keys=("steps",),
        )  # fmt: skip

    margin = record.range_margin([s["acc"] for s in _seeds()])
    inside = check(dict(_seeds()[0], acc=0.86 + 0.9 * margin, curve=[0.0]))
    assert inside.mode == "range" and inside.passed, str(inside)
    assert "cpu_model: 'A' -> 'B'" in str(inside)
    outside = check(dict(_seeds()[0], acc=0.80 - 1.1 * margin))
    assert outside.failed == ["acc"], str(outside)
    assert check(dict(_seeds()[0], steps=41)).failed == ["steps"]
    assert check(dict(_seeds()[0], loss=float("nan"))).failed == ["loss"]  # no seed diverged
    with pytest.raises(ValueError, match="stored seeds are"):
        check(dict(_seeds()[0], seed=9))
    with pytest.raises(ValueError, match="missing"):
        check({"seed": 0, "acc": 0.8})


def test_machine_fingerprint_names_cpu_kernels_and_threads():
    fingerprint = record.machine_fingerprint(3)
    assert fingerprint["torch_threads"] == 3
    import torch

    assert fingerprint["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert fingerprint["torch_version"] == torch.__version__
    assert record.fingerprint_differences(fingerprint, record.machine_fingerprint(3)) == []
    with pytest.raises(ValueError, match="threads"):
        record.machine_fingerprint(0)


# ------------------------------------------------- the stored quick run, re-run here


@pytest.fixture(scope="module")
def quick():
    results = _strict_json(RESULTS / "paper_shape_quick.json")
    return results, _strict_json(RESULTS / "paper_shape_quick.meta.json")


@pytest.fixture(scope="module")
def again(quick):
    """The first seed of the check row, re-run once for the tests below (about 1-3 s)."""
    return paper_shape.rerun(quick[0])


def _foreign(meta):
    return dict(meta["fingerprint"], cpu_model="Some Other CPU", torch_cpu_capability="AVX2")


def test_the_quick_check_row_passes_here_in_the_mode_the_fingerprint_decides(quick, again):
    results, meta = quick
    report = paper_shape.compare(results, meta, again)
    print(report)
    here = record.machine_fingerprint(paper_shape.THREADS)
    same_machine = not record.fingerprint_differences(meta["fingerprint"], here)
    assert report.mode == ("bitwise" if same_machine else "range")
    assert report.passed, str(report)


def test_the_quick_check_on_a_foreign_machine_compares_seed_ranges(quick, again):
    results, meta = quick
    report = paper_shape.compare(results, meta, again, fingerprint=_foreign(meta))
    print(report)
    assert report.mode == "range"
    assert report.passed, str(report)
    assert sum("inside [" in line for line in report.lines) == len(paper_shape.CHECK_METRICS)


def test_the_quick_check_rejects_a_wrong_delay(quick):
    # the sync row computed with an asynchronous pipeline's delays (the 1F1B row's code
    # "gone asynchronous"): on any machine the check must fail, in range mode on the
    # metrics themselves, not only on the bytes the changed schedule keeps
    results, meta = quick
    perturbed = paper_shape.rerun(results, method="async")
    here = paper_shape.compare(results, meta, perturbed)
    foreign = paper_shape.compare(results, meta, perturbed, fingerprint=_foreign(meta))
    print(here, foreign, sep="\n")
    assert not here.passed
    assert foreign.mode == "range"
    assert set(paper_shape.CHECK_METRICS) <= set(foreign.failed), str(foreign)


def test_same_seed_same_machine_same_numbers(quick, again):
    second = paper_shape.rerun(quick[0])
    assert second == again  # exact equality: every loss, accuracy and byte count


def test_reproduce_check_prints_its_mode(capsys):
    code = cli.main(["reproduce", "paper-shape", "--quick", "--check", "--out", str(RESULTS)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PASS, mode bitwise" in out or "PASS, mode range" in out
