"""Stored experiment results: well-formed, internally consistent, and reproducible anywhere.

``data/results/paper_shape*.json`` come from ``python -m pipemare_lite reproduce paper-shape
[--quick]`` (the command each file names). These tests read them as plain JSON (never
executing anything from them), re-derive the decisions recorded in them from the stored
seeds (lr choice, summaries, verdicts, closed-form bytes and utilizations, measured delays),
and re-run one seed of the quick check cell through the fingerprint-aware check
(``pipemare_lite.experiments.record``): bitwise on the machine that wrote the file, within
the stored seeds' prediction interval for one new seed elsewhere. They also show that the
check rejects a perturbed method, and that the same seed on the same machine gives the
same numbers bitwise.
"""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from pipemare_lite import cli
from pipemare_lite.experiments import (
    beyond_pipemare,
    paper_shape,
    paper_shape_claims,
    record,
    stage_evidence,
)
from pipemare_lite.experiments import paper_shape_design as design
from pipemare_lite.experiments.paper_shape_table import (
    claim_scope,
    describe_claim,
    markdown,
    verdict_markdown,
)

RESULTS = Path(__file__).resolve().parents[1] / "data" / "results"
STEMS = ["paper_shape", "paper_shape_quick"]


def _strict_json(path: Path) -> dict:
    def reject(constant):
        raise ValueError(f"{path.name}: non-standard JSON constant {constant}")

    return json.loads(path.read_text(), parse_constant=reject)


@pytest.fixture(scope="module", params=STEMS)
def stored(request):
    return request.param, _strict_json(RESULTS / f"{request.param}.json")


def _rows(results, **match):
    return [r for r in results["rows"] if all(r[k] == v for k, v in match.items())]


# ------------------------------------------------------------ what the files say


def test_every_file_names_the_command_that_regenerates_it(stored):
    stem, results = stored
    meta = _strict_json(RESULTS / f"{stem}.meta.json")
    command = design.command_for(results["quick"])
    assert results["command"] == meta["command"] == command
    assert command.endswith("--quick") == results["quick"] == stem.endswith("_quick")
    table = (RESULTS / f"{stem}.md").read_text()
    assert table.startswith("# PipeMare's shape in miniature")
    assert f"`{command}`" in table.splitlines()[2]
    from pipemare_lite.cli.commands.reproduce import command_for

    assert command_for("paper-shape", results["quick"]) == command


def test_meta_files_record_how_and_where_the_results_were_made(stored):
    stem, results = stored
    meta = _strict_json(RESULTS / f"{stem}.meta.json")
    for key in ("command", "package_version", "seeds", "date", "fingerprint", "platform",
                "wall_seconds", "cpu_seconds"):
        assert key in meta, key
    assert meta["seeds"] == results["config"]["seeds"]
    fingerprint = meta["fingerprint"]
    assert set(fingerprint) == set(record.machine_fingerprint(1)), "fingerprint fields changed"
    assert fingerprint["torch_threads"] == results["torch_threads"] == design.THREADS
    for key in ("cpu_model", "torch_cpu_capability", "blas", "mkl", "torch_version"):
        assert fingerprint[key], key


def test_the_stored_table_is_the_markdown_of_the_stored_results(stored):
    stem, results = stored
    assert (RESULTS / f"{stem}.md").read_text() == markdown(results)


def test_stored_config_is_the_experiment_definition(stored):
    _, results = stored
    expected = design.config_for(results["quick"])
    assert results["config"] == json.loads(json.dumps(paper_shape.asdict(expected)))
    assert len(expected.seeds) >= 3
    if not results["quick"]:  # the design's minimums (issue 29)
        assert expected.study("resnet").granularities == (2, 4, 8, 16)
        assert len(expected.claim_seeds) >= 8
        long = expected.study("resnet_long")
        assert set(long.claim_rows) >= {design.SYNC, design.PMW, design.T1T2}
        assert results["studies"]["resnet_long"]["planned_steps"] >= 1600
        assert {k for _, k in long.horizon_cells} >= {1 / 4} and long.warmup_cells
        for name in ("transformer", "transformer_warm"):
            assert results["studies"][name]["planned_steps"] >= 1000
            assert set(expected.study(name).claim_rows) >= {design.SYNC, design.PMW}
        assert expected.study("transformer_warm").lr_warmup_fraction > 0
        assert expected.study("transformer").lr_warmup_fraction == 0


def _cell_key(r):
    return (r["study"], r["sweep"], r["P"], r["label"], r["lr"], r["t1_k_fraction"],
            r["warmup_fraction"])


def test_every_cell_of_the_design_is_stored_once(stored):
    _, results = stored
    config = design.config_for(results["quick"])
    seen = [_cell_key(r) for r in results["rows"]]
    assert len(seen) == len(set(seen))
    for study in config.studies:
        for P in study.granularities:
            labels = [r["label"] for r in _rows(results, study=study.name, sweep="grid", P=P)]
            assert labels == list(study.rows), (study.name, P)
        assert [r["lr"] for r in _rows(results, study=study.name, sweep="lr")] == list(
            study.lr_grid)
        horizon = _rows(results, study=study.name, sweep="horizon")
        assert [(r["label"], r["t1_k_fraction"]) for r in horizon] == [
            (label, k) for label, k in study.horizon_cells]
        warm = _rows(results, study=study.name, sweep="warmup")
        assert [r["warmup_fraction"] for r in warm] == list(study.warmup_cells)


def test_every_row_has_every_seed_and_its_summary_follows(stored):
    _, results = stored
    config = design.config_for(results["quick"])
    for row in results["rows"]:
        if row["not_run"]:
            assert row["seeds"] == [] and row["method"] == "2bw", row["label"]
            continue
        study = config.study(row["study"])
        seeds = {"check": config.check_seeds, "curvature": study.curvature_seeds}.get(
            row["sweep"], config.claim_seeds if row["sweep"] == "grid"
            and row["label"] in study.claim_rows else config.seeds)
        assert [s["seed"] for s in row["seeds"]] == list(seeds), (row["study"], row["label"])
        for key in design.SUMMARY_METRICS:
            summary = dict(row["summary"][key])
            summary.pop("interval", None)
            assert summary == record.seed_summary(s[key] for s in row["seeds"])
        assert row["summary"]["quality"]["interval"] == record.mean_interval(
            [s["quality"] for s in row["seeds"]], config.confidence)
        assert row["diverged_seeds"] == sum(s["diverged"] for s in row["seeds"])
        assert row["diverged_non_finite"] == sum(s["diverged_non_finite"] for s in row["seeds"])
    sync = _rows(results, study="resnet", sweep="grid", label=design.SYNC)[0]
    assert len({s["final_accuracy"] for s in sync["seeds"]}) > 1, "seeds did not vary"


def test_one_convention_for_a_diverged_seed(stored):
    # diverged = non-finite or the loss rule; its quality is 0 everywhere, else its accuracy
    _, results = stored
    factor = results["config"]["loss_blowup"]
    for row in results["rows"]:
        for s in row["seeds"]:
            assert s["diverged"] == (s["diverged_non_finite"] or s["diverged_loss_rule"])
            assert s["quality"] == (0.0 if s["diverged"] else s["final_accuracy"])
            if not s["diverged_non_finite"]:  # the windows are stored to 6 digits
                assert s["diverged_loss_rule"] == design.loss_blew_up(
                    s["train_loss_windows"], factor)


def test_the_loss_rule_of_divergence():
    assert design.loss_blew_up([2.3, 1.0, 0.4], 3.0) is False
    assert design.loss_blew_up([2.3, 9.0, 7.0], 3.0) is True  # ended above 3 x 2.3
    assert design.loss_blew_up([2.3, 90.0, 0.5], 3.0) is False  # recovered
    assert design.loss_blew_up([2.3, math.nan], 3.0) is True
    assert design.loss_blew_up([], 3.0) is False


def test_chosen_lr_follows_the_stated_rule_and_every_row_uses_it(stored):
    _, results = stored
    margin = results["config"]["fine_margin"]
    for name, part in results["studies"].items():
        assert design.choose_lr(part["lr_sweep"], margin) == part["chosen_lr"]
        for entry, row in zip(part["lr_sweep"], _rows(results, study=name, sweep="lr")):
            assert entry["quality"] == row["summary"]["quality"]
            assert row["label"] == design.SYNC
        others = [r for r in results["rows"] if r["study"] == name and r["sweep"] != "lr"]
        assert others and all(r["lr"] == part["chosen_lr"] for r in others)


def test_choose_lr_uses_the_mean_over_seeds_and_refuses_a_diverged_seed():
    def entry(lr, values, diverged=0):
        return {"lr": lr, "quality": record.seed_summary(values), "diverged_seeds": diverged}

    sweep = [entry(0.01, [0.90, 0.92]), entry(0.02, [0.85, 0.93]), entry(0.05, [0.99, 0.5])]
    assert design.choose_lr(sweep, 0.02) == 0.02  # 0.05's best seed does not count
    sweep[1] = entry(0.02, [0.95, 0.0], diverged=1)
    assert design.choose_lr(sweep, 0.02) == 0.01
    with pytest.raises(RuntimeError, match="diverged at every lr"):
        design.choose_lr([entry(0.1, [0.0], 1)], 0.02)


def test_sync_is_bitwise_the_same_at_every_granularity(stored):
    # one network, cut differently: 1F1B computes the same numbers at every P
    _, results = stored
    for name, part in results["studies"].items():
        assert part["sync_bitwise_same_at_every_P"], name
        rows = _rows(results, study=name, label=design.SYNC)
        rows = [r for r in rows if r["lr"] == part["chosen_lr"] and r["sweep"] != "curvature"]
        assert len({json.dumps(r["seeds"][0]["evals"]) for r in rows}) == 1, name


def test_measuring_sharpness_does_not_change_the_training(stored):
    _, results = stored
    config = design.config_for(results["quick"])
    for row in _rows(results, sweep="curvature"):
        study = config.study(row["study"])
        steps = results["studies"][row["study"]]["planned_steps"]
        for s in row["seeds"]:
            assert s["losses_bitwise_equal_unmeasured"], (row["study"], s["seed"])
            assert [m[0] for m in s["sharpness"]] == list(range(0, steps + 1,
                                                                 study.curvature_every))
            assert all(len(m[1]) == row["P"] for m in s["sharpness"])


def test_claims_and_predictions_follow_from_the_stored_rows(stored):
    _, results = stored
    assert paper_shape_claims.predictions(results) == results["predictions"]
    claims = paper_shape_claims.claims(results)
    assert claims == results["claims"]
    assert {c["verdict"] for c in claims} <= {"held", "did not hold", "not separable",
                                              "uninformative"}
    for c in claims:  # uninformative exactly where every compared seed diverged (issue 43)
        if c["verdict"] == "uninformative":
            assert c["numbers"].endswith("every seed of every compared row diverged")
            assert c.get("difference", {}).get("estimate") == 0.0
    numbers = [c["number"] for c in claims]
    assert numbers[:3] == ["1", "2", "3"] and "10a" in numbers and "13" in numbers
    if not results["quick"]:
        assert {"13w", "14a", "14b", "15"} <= set(numbers)
        assert results["predictions"], "the prediction needs the curvature runs"


def test_the_memory_claim_says_it_counts_weight_sized_memory_only(stored):
    # claim 8 compares weights + stash + T2 buffer + optimizer; the scope adds the activations,
    # which decide the total: the chapters must not read "held" as "less memory in all"
    _, results = stored
    by_number = {c["number"]: c for c in results["claims"]}
    if "8" not in by_number:
        assert claim_scope(results, "8") is None
        return
    rows = paper_shape_claims.cell_rows(results, "resnet_long")
    totals = [sum(rows[k]["memory_bytes"].values())
              for k in (paper_shape_claims.PMW, paper_shape_claims.PIPEDREAM)]
    scope = claim_scope(results, "8")
    assert scope.startswith("weight-sized memory only")
    assert f"PipeMare-W {totals[0]} B, PipeDream {totals[1]} B" in scope
    assert ("the other way" in scope) == (totals[0] >= totals[1])
    assert describe_claim(by_number["8"], results).endswith(f"scope: {scope}")
    assert f"*scope: {scope}*" in verdict_markdown(results)
    assert all(claim_scope(results, n) is None for n in by_number if n != "8")


def test_a_claim_whose_rows_all_diverged_is_uninformative_not_did_not_hold():
    diverged = {"seeds": [{"diverged": True, "quality": 0.0}] * 3}
    trained = {"seeds": [{"diverged": False, "quality": 0.9}] + [{"diverged": True,
                                                                  "quality": 0.0}] * 2}
    claim = paper_shape_claims._better("4", "T2 helps", "a", [0.0] * 3, "b", [0.0] * 3, 0.95)
    assert claim["verdict"] == "did not hold"  # what 0 - 0 reads as without the rule
    assert paper_shape_claims.informative(claim, diverged, diverged)["verdict"] == "uninformative"
    assert paper_shape_claims.informative(claim, diverged, trained)["verdict"] == "did not hold"


def test_the_sync_quality_claim_is_named_for_the_test_it_computes():
    claim = paper_shape_claims._reaches("7", "", [0.9] * 3, [0.9] * 3, 0.01, 0.95)
    assert "non-inferiority, one-sided test at 5%" in claim["test"]
    assert "TOST" not in claim["test"] and "equivalence" not in claim["test"]


def test_a_verdict_is_decided_only_where_the_interval_excludes_the_threshold():
    judge = paper_shape_claims.judge
    assert judge(0.1, 0.3, 0.0) == "held"
    assert judge(-0.1, 0.3, 0.0) == "not separable"
    assert judge(-0.3, 0.0, 0.0) == "did not hold"
    worse = paper_shape_claims._worse
    c = 0.95
    assert worse("1", "", "x", [0.50, 0.60, 0.55], "y", [0.90, 0.92, 0.91], 0.01, c)[
        "verdict"] == "held"
    # means 0.85 vs 0.90 but seeds this spread: noise cannot tell
    assert worse("1", "", "x", [0.70, 0.99, 0.86], "y", [0.80, 1.00, 0.90], 0.01, c)[
        "verdict"] == "not separable"
    reaches = paper_shape_claims._reaches
    sync = [0.98, 0.985, 0.99, 0.982, 0.988, 0.984, 0.986, 0.987]
    assert reaches("7", "", [v - 0.002 for v in sync], sync, 0.01, c)["verdict"] == "held"
    assert reaches("7", "", [v - 0.05 for v in sync], sync, 0.01, c)["verdict"] == "did not hold"
    # a diverged seed counts as accuracy 0, whatever its last evaluation said
    row = {"seeds": [{"quality": 0.9}, {"quality": 0.0, "final_accuracy": 0.8}]}
    assert paper_shape_claims.qualities(row) == [0.9, 0.0]


def test_welch_interval_against_a_hand_computation():
    x, y = [0.9, 0.8, 0.85, 0.95], [0.5, 0.7, 0.6]
    d = record.difference_interval([(1, x), (-1, y)], 0.95)
    vx, vy = np.var(x, ddof=1) / 4, np.var(y, ddof=1) / 3
    df = (vx + vy) ** 2 / (vx**2 / 3 + vy**2 / 2)
    half = record.student_t_quantile(0.975, math.floor(df)) * math.sqrt(vx + vy)
    assert d["estimate"] == pytest.approx(np.mean(x) - np.mean(y))
    assert (d["low"], d["high"], d["df"]) == (pytest.approx(d["estimate"] - half),
                                              pytest.approx(d["estimate"] + half), math.floor(df))
    assert record.mean_interval([0.5, 0.5]) == [0.5, 0.5]
    low, high = record.mean_interval([1.0, 2.0, 3.0])
    assert high - 2.0 == pytest.approx(record.student_t_quantile(0.975, 2) / math.sqrt(3))
    point = record.difference_interval([(1, [0.0, 0.0]), (-1, [0.0])])
    assert point == {"estimate": 0.0, "low": 0.0, "high": 0.0, "df": None}


def test_the_prediction_finds_where_t1s_anneal_crosses_the_bound():
    from pipemare_lite.analysis.theory import momentum_stability_bound

    bounds = {4: momentum_stability_bound(4, 0.9), 1: momentum_stability_bound(1, 0.9)}
    lrs = [[0.001] * 5 + [0.01] * 5, [0.01] * 10]
    curve = [[0, [1.0, 1.0]], [6, [3.0, 1.0]]]
    # stage 0 (tau 4): 0.001 < bound until update 5, where lr 0.01 x lam 1 < 0.0265 ...
    # ... until the sharpness rises to 3 at update 6: 0.03 >= 0.0265
    assert paper_shape_claims._first_crossing(lrs, [4, 1], curve, bounds, 0) == (6, 0)
    assert paper_shape_claims._first_crossing(lrs, [4, 1], [[0, [1.0, 1.0]]], bounds, 0) == (
        None, None)


def test_the_prediction_reads_t1s_learning_rates_as_the_engine_applies_them():
    from pipemare_lite import fit
    from pipemare_lite.analysis.stage_lr import stage_lrs
    from pipemare_lite.training.datasets import digits
    from pipemare_lite.training.models import mlp

    history = fit(mlp(64, 16, 4, 10), digits(), method="async", num_stages=4,
                  num_microbatches=2, batch_size=64, epochs=1, lr=0.05, momentum=0.9, t1=True,
                  t1_anneal_updates=5, lr_schedule="cosine", lr_warmup=3, warmup=2,
                  progress=False)  # fmt: skip
    taus = [max(1, d) for d in history.forward_delay_max]
    expected = stage_lrs(0.05, taus, history.steps, horizon=5, start=2, schedule="cosine",
                         warmup=3)  # fmt: skip
    for s in range(4):
        assert history.stage_lr[s] == pytest.approx(expected[s], rel=1e-9)


def test_utilization_of_sync_is_the_bubble_formula_and_async_beats_it(stored):
    _, results = stored
    for row in _rows(results, sweep="grid", label=design.SYNC):
        n, p = row["num_microbatches"], row["P"]
        assert row["utilization"]["utilization"] == pytest.approx(n / (n + p - 1))
    for row in _rows(results, sweep="grid", label="async"):
        assert row["utilization"]["steady_state_utilization"] == pytest.approx(1.0)


def test_measured_stage0_delays_are_the_ones_the_design_states(stored):
    _, results = stored
    for row in _rows(results, sweep="grid"):
        if row["not_run"] or row["num_microbatches"] != 2:
            continue
        P = row["P"]
        expected = {"async": P, "pipemare": P, "pipedream": P // 2, "1f1b": 0}
        if row["method"] not in expected or row["warmup_minibatches"]:
            continue
        for seed in row["seeds"]:
            delay = seed["forward_delay_max"][0]
            if seed["diverged_non_finite"]:  # stopped early: only the delays it applied
                assert delay <= expected[row["method"]], (row["study"], row["label"], P)
            else:
                assert delay == expected[row["method"]], (row["study"], row["label"], P)
    for row in _rows(results, sweep="grid", label="2BW"):
        if not row["not_run"]:
            assert row["forward_delay_max"][0] == 1
            assert row["num_microbatches"] >= row["P"] - 1


def test_stored_memory_matches_the_model_size(stored):
    # closed forms: one fp32 copy of the weights; SGD momentum keeps one buffer of the same
    # size, Adam two (plus a 4-byte step count per tensor); T2 keeps one delta of the same
    # size; only PipeDream and 2BW hold extra weight versions
    _, results = stored
    config = design.config_for(results["quick"])
    for study in config.studies:
        data = design.load_data(study)
        params = list(design.build_model(study, data, 0).parameters())
        weight_bytes = sum(p.numel() * 4 for p in params)
        optimizer = weight_bytes if study.optimizer == "sgd" else (
            2 * weight_bytes + 4 * len(params))
        for row in _rows(results, study=study.name):
            if row["not_run"]:
                continue
            for memory in [row["memory_bytes"]] + [s["memory_bytes"] for s in row["seeds"]]:
                assert memory["weights"] == weight_bytes
                assert memory["optimizer"] == optimizer, (study.name, row["label"])
                assert memory["t2_buffer"] == (weight_bytes if row["t2"] else 0)
                assert (memory["stash"] > 0) == (row["method"] in ("pipedream", "2bw"))


def test_stage_evidence_is_stored_for_every_asynchronous_seed(stored):
    _, results = stored
    for row in results["rows"]:
        for s in row["seeds"]:
            P = row["P"]
            assert len(s["update_norm_windows"]) == len(s["first_non_finite_update"]) == P
            if row["label"] == design.SYNC:
                assert s["blowup_onset"] is None and s["excess"] is None
            else:
                assert len(s["blowup_onset"]) == len(s["excess"]) == P
                finite = [k for k in s["first_non_finite_update"] if k is not None]
                onset = [k for k in s["blowup_onset"] if k is not None]
                if finite:  # a non-finite update is an onset at the latest
                    assert onset and min(onset) <= min(finite)


# ------------------------------------------------------------ stage evidence, alone


def test_stage_evidence_against_hand_computed_values():
    nan = math.nan
    norms = [[1.0, 2.0, 30.0, nan], [1.0, 1.0, 1.0, 1.0], [5.0, None, 1.0]]
    sync = [[1.0, 1.0, 1.0, 1.0], [1.0, 0.5, 0.2, 0.1], [1.0, 1.0, 1.0]]
    assert stage_evidence.first_non_finite(norms) == [3, None, 1]
    assert stage_evidence.blowup_onset(norms, sync, 10.0) == [2, 3, 1]
    assert stage_evidence.blowup_onset(norms, sync, 4.0) == [2, 2, 0]
    ratios = stage_evidence.excess(norms, sync)
    assert ratios[0] == pytest.approx(math.sqrt((1 + 4 + 900) / 3))
    assert ratios[1] == pytest.approx(math.sqrt(4 / (1 + 0.25 + 0.04 + 0.01)))
    assert ratios[2] == pytest.approx(math.sqrt(26 / 2))
    assert stage_evidence.earliest([3, 1, None, 1]) == [1, 3]
    assert stage_evidence.earliest([None, None]) == []
    assert stage_evidence.window_rms([3.0, 4.0, 2.0], 2) == [pytest.approx(math.sqrt(12.5)), 2.0]
    assert math.isnan(stage_evidence.window_rms([1.0, nan], 2)[0])
    assert stage_evidence.window_mean([1.0, 3.0, 5.0], 2) == [2.0, 5.0]
    with pytest.raises(ValueError, match="stages"):
        stage_evidence.excess([[1.0]], [[1.0], [1.0]])
    with pytest.raises(ValueError, match="factor"):
        stage_evidence.blowup_onset([[1.0]], [[1.0]], 0)
    with pytest.raises(ValueError, match="width"):
        stage_evidence.window_rms([1.0], 0)


def test_reproduce_lists_its_experiments_and_their_commands(capsys):
    assert cli.main(["reproduce", "--list", "--out", str(RESULTS)]) == 0
    out = capsys.readouterr().out
    names = [line.split(":")[0] for line in out.splitlines() if not line.startswith(" ")]
    assert names == ["beyond-pipemare", "lr-map", "paper-shape"]  # sorted
    for quick in (False, True):
        assert design.command_for(quick) in out
        assert beyond_pipemare.command_for(quick) in out
    assert cli.main(["reproduce"]) == 2
    assert "--list" in capsys.readouterr().err


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


def _reference_prediction_interval(values, level, floor, lowest, highest):
    """The prediction interval for one new seed, written out plainly: mean +- t s sqrt(1+1/n)
    (t from the printed two-sided 99 % tables), the half-width at least ``floor``, then cut to
    the quantity's range."""
    n = len(values)
    mean = sum(values) / n
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    t = {2: 9.925, 3: 5.841, 4: 4.604, 7: 3.499}[n - 1]  # t(df, 0.995), NIST/SEMATECH table
    assert level == 0.99
    half = max(floor, t * s * math.sqrt(1 + 1 / n))
    return max(mean - half, lowest), min(mean + half, highest)


def test_the_prediction_interval_against_a_plain_computation():
    assert record.ALPHA == 0.01
    for values, floor, bounds in [
        ([0.81, 0.86, 0.84, 0.90, 0.88], 0.0, (0.0, 1.0)),
        ([0.8062, 0.93, 0.91, 0.88, 0.9354, 0.85, 0.87, 0.9], 1 / 449, (0.0, 1.0)),
        ([0.40, 0.78, 0.55], 0.0, (0.0, 1.0)),  # reaches beyond [0, 1]: cut
        ([0.23, 0.58, 0.41, 0.3], 0.0, (0.0, math.inf)),  # a loss: cut at 0 only
    ]:  # fmt: skip
        pi = record.prediction_interval(values, floor=floor, lowest=bounds[0], highest=bounds[1])
        low, high = _reference_prediction_interval(values, 0.99, floor, *bounds)
        assert pi["low"] == pytest.approx(low, abs=2e-4 * (high - low))
        assert pi["high"] == pytest.approx(high, abs=2e-4 * (high - low))
        assert 0 <= pi["low"] <= pi["high"] <= 1 or bounds[1] == math.inf
    cut = record.prediction_interval([0.40, 0.78, 0.55], lowest=0.0, highest=1.0)
    assert cut["cut"] and (cut["low"], cut["high"]) == (0.0, 1.0)
    # the floor: seeds that all agree give the point itself, widened to the floor
    equal = record.prediction_interval([0.9332, 0.9332], floor=1 / 449, lowest=0, highest=1)
    assert (equal["low"], equal["high"]) == pytest.approx((0.9332 - 1 / 449, 0.9332 + 1 / 449))
    default = record.prediction_interval([2.0, 2.0, 2.0])
    assert default["half_width"] == pytest.approx(record.RELATIVE_FLOOR * 2.0)
    with pytest.raises(ValueError, match="at least 2"):
        record.range_margin([0.5])
    with pytest.raises(ValueError, match="finite"):
        record.prediction_interval([0.5, float("nan")])


def test_range_margin_is_the_prediction_interval_and_rarely_rejects_a_new_seed():
    values = [0.81, 0.86, 0.84, 0.90, 0.88]
    t = record.student_t_quantile(1 - record.ALPHA / 2, 4)
    expected = t * np.std(values, ddof=1) * math.sqrt(1 + 1 / 5)
    assert record.range_margin(values) == pytest.approx(expected, rel=1e-12)
    assert record.range_margin([0.5, 0.5, 0.5], floor=0.01) == 0.01
    # the derivation's claim: one more draw from the seeds' normal distribution falls
    # outside mean +- margin with probability ALPHA, and outside all n seeds far more often
    rng = np.random.default_rng(0)
    n, trials = 8, 400_000
    seeds, new = rng.standard_normal((trials, n)), rng.standard_normal(trials)
    t = record.student_t_quantile(1 - record.ALPHA / 2, n - 1)
    margin = t * seeds.std(axis=1, ddof=1) * math.sqrt(1 + 1 / n)
    mean = seeds.mean(axis=1)
    outside_interval = np.mean(np.abs(new - mean) > margin)  # the exact prediction interval
    assert outside_interval == pytest.approx(record.ALPHA, rel=0.1)
    outside_all_seeds = np.mean((new < seeds.min(axis=1)) | (new > seeds.max(axis=1)))
    assert outside_all_seeds == pytest.approx(2 / (n + 1), rel=0.02)


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


def test_the_bitwise_check_is_decided_by_kernels_not_by_the_cpu_model():
    base = record.machine_fingerprint(1)
    # another model number, and an int8/bf16-only extension: the same fp32 kernels
    other = dict(base, cpu_model="Another CPU", cpu_family_model="99/9",
                 cpu_simd_flags=[*base["cpu_simd_flags"], "avx_vnni", "amx_int8"],
                 sklearn_version="0.0")  # fmt: skip
    assert record.kernel_fingerprint(other) == record.kernel_fingerprint(base)
    seeds = _seeds()
    report = record.check_rerun(seeds, seeds[0], stored_fingerprint=base, fingerprint=other,
                                metrics=("acc",))  # fmt: skip
    assert report.mode == "bitwise", str(report)
    for change in ({"torch_cpu_capability": "DEFAULT"}, {"mkl": "other"},
                   {"cpu_simd_flags": [f for f in base["cpu_simd_flags"] if f != "avx2"]}):
        changed = dict(base, **change)
        report = record.check_rerun(seeds, seeds[0], stored_fingerprint=base,
                                    fingerprint=changed, metrics=("acc",))  # fmt: skip
        assert report.mode == "range", change


def test_check_rerun_on_a_foreign_machine_uses_the_prediction_interval():
    stored_fp, foreign = {"cpu_vendor": "A"}, {"cpu_vendor": "B"}

    def check(rerun):
        return record.check_rerun(
            _seeds(), rerun, stored_fingerprint=stored_fp, fingerprint=foreign,
            metrics=("acc", "loss"), exact_keys=("steps",), ranges={"acc": (0.0, 1.0)},
        )  # fmt: skip

    accs = [s["acc"] for s in _seeds()]
    low, high = _reference_prediction_interval(accs, 0.99, 0.0, 0.0, 1.0)
    inside = check(dict(_seeds()[0], acc=high - 1e-4, curve=[0.0]))
    assert inside.mode == "range" and inside.passed, str(inside)
    assert "cpu_vendor: 'A' -> 'B'" in str(inside)
    assert check(dict(_seeds()[0], acc=low + 1e-4)).passed
    outside = check(dict(_seeds()[0], acc=low - 0.01))
    assert outside.failed == ["acc"], str(outside)
    # the message names the quantity and by how much it missed
    assert str(outside).splitlines()[0].endswith("; failed: acc")
    assert (f"acc: {low - 0.01:.6g} now, OUTSIDE the 99 % prediction interval [{low:.3f}"
            in str(outside))
    assert "by 0.01 below" in str(outside)
    above = check(dict(_seeds()[0], loss=1.0))
    assert above.failed == ["loss"] and "above" in str(above), str(above)
    assert check(dict(_seeds()[0], steps=41)).failed == ["steps"]
    assert check(dict(_seeds()[0], loss=float("nan"))).failed == ["loss"]  # no seed diverged
    with pytest.raises(ValueError, match="stored seeds are"):
        check(dict(_seeds()[0], seed=9))
    with pytest.raises(ValueError, match="missing"):
        check({"seed": 0, "acc": 0.8})


def test_a_check_interval_is_never_wider_than_the_quantitys_range():
    # three seeds spread over half the range: the t-interval spans far beyond [0, 1]
    seeds = [{"seed": s, "final_accuracy": a, "final_loss": 1 - a}
             for s, a in enumerate([0.40, 0.78, 0.55])]
    report = record.check_rerun(seeds, seeds[0], stored_fingerprint={"cpu_vendor": "A"},
                                fingerprint={"cpu_vendor": "B"},
                                metrics=("final_accuracy", "final_loss"))
    assert report.passed, str(report)
    assert "prediction interval [0, 1]" in report.lines[0] and "cut to [0, 1]" in report.lines[0]
    assert "prediction interval [0, " in report.lines[1] and "cut to [0, inf]" in report.lines[1]


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
    """The first seed of the check cell, re-run once for the tests below (a few seconds)."""
    return paper_shape.rerun(quick[0])


def _foreign(meta):
    return dict(meta["fingerprint"], cpu_model="Some Other CPU", torch_cpu_capability="AVX2")


def test_the_check_cell_has_enough_seeds_for_a_useful_margin(quick):
    results, _ = quick
    row = paper_shape.check_row(results)
    assert len(row["seeds"]) >= 8
    accuracies = [s["final_accuracy"] for s in row["seeds"]]
    assert record.range_margin(accuracies) < 0.2  # 3 seeds' margin (5.8 s) would reject little


def test_the_quick_check_row_passes_here_in_the_mode_the_fingerprint_decides(quick, again):
    results, meta = quick
    report = paper_shape.compare(results, meta, again)
    print(report)
    here = record.machine_fingerprint(design.THREADS)
    same_machine = not record.fingerprint_differences(meta["fingerprint"], here)
    assert report.mode == ("bitwise" if same_machine else "range")
    assert report.passed, str(report)


def test_the_quick_check_on_a_foreign_machine_compares_seed_ranges(quick, again):
    results, meta = quick
    report = paper_shape.compare(results, meta, again, fingerprint=_foreign(meta))
    print(report)
    assert report.mode == "range"
    assert report.passed, str(report)
    assert sum("inside the 99 % prediction interval [" in line
               for line in report.lines) == len(design.CHECK_METRICS)


def test_the_quick_check_rejects_a_wrong_delay(quick):
    # the sync row computed with an asynchronous pipeline's delays: on any machine the check
    # must fail, in range mode on the metrics themselves, not only on the exact keys
    results, meta = quick
    perturbed = paper_shape.rerun(results, method="async")
    here = paper_shape.compare(results, meta, perturbed)
    foreign = paper_shape.compare(results, meta, perturbed, fingerprint=_foreign(meta))
    print(here, foreign, sep="\n")
    assert not here.passed
    assert foreign.mode == "range"
    assert set(design.CHECK_METRICS) <= set(foreign.failed), str(foreign)


def test_same_seed_same_machine_same_numbers(quick, again):
    second = paper_shape.rerun(quick[0])
    assert second == again  # exact equality: every loss, accuracy, norm and byte count


def test_reproduce_check_prints_its_mode(capsys):
    code = cli.main(["reproduce", "paper-shape", "--quick", "--check", "--out", str(RESULTS)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PASS, mode bitwise" in out or "PASS, mode range" in out


def test_bad_job_counts_are_refused_by_name(capsys):
    from pipemare_lite.experiments.paper_shape_runner import CellRunner

    with pytest.raises(ValueError, match="jobs must be a positive integer, got 0"):
        CellRunner(design.QUICK, True, jobs=0)
    argv = ["reproduce", "paper-shape", "--quick", "--jobs", "0", "--out", "/nowhere"]
    assert cli.main(argv) == 2
    assert "--jobs must be a positive integer" in capsys.readouterr().err


def test_a_stored_pipemare_seed_comes_back_bitwise_where_the_kernels_match(quick):
    # the check cell is synchronous; this re-runs a seed of PipeMare-W (T1, T2, warm-up), so
    # an engine change that moves the fixes' numbers (T1's scheduler, T2's buffer, recording
    # levels) is caught on the machine that wrote the file
    results, meta = quick
    here = record.machine_fingerprint(design.THREADS)
    if record.kernel_differences(meta["fingerprint"], here):
        pytest.skip("another kernel fingerprint than the stored file's: only the check cell's "
                    "range comparison applies on this machine")
    config = design.config_for(True)
    study = config.study("resnet_long")
    data = design.load_data(study)
    P = study.granularities[-1]
    row = paper_shape.find_row(results, study=study.name, sweep="grid", P=P, label=design.PMW)
    spec = design.run_settings(config, study, design.PMW, P,
                                    design.planned_steps(study, data))  # fmt: skip
    assert {k: row[k] for k in spec} == spec
    with record.torch_threads(design.THREADS):
        history = design.train(study, data, spec, P, row["lr"], row["seeds"][0]["seed"])
    again = design.outcome(row["seeds"][0]["seed"], history, study, config.loss_blowup)
    stored = row["seeds"][0]
    for key in ("final_accuracy", "final_loss", "train_loss_windows", "update_norm_windows",
                "memory_bytes", "forward_delay_max", "steps", "evals"):
        assert record._plain(again[key]) == stored[key], key


def test_shown_intervals_are_cut_to_the_range_and_say_so():
    assert record.clipped(-1.052, 1.689) == (0.0, 1.0, True)
    assert record.clipped(0.2, 0.4) == (0.2, 0.4, False)
    assert record.interval_text(-1.052, 1.689) == "0.000..1.000, cut to [0, 1]"
    assert record.interval_text(-1.5, 1.2, -1.0, 1.0, sign="+") == "-1.000..+1.000, cut to [-1, 1]"
    # cutting never moves an interval across a threshold inside the range: same verdicts
    judge = paper_shape_claims.judge
    for low, high, t in [(-1.5, 1.2, 0.0), (0.1, 1.3, 0.0), (-1.3, -0.2, -0.01), (-2, 0, 0)]:
        cut_low, cut_high, _ = record.clipped(low, high, -1.0, 1.0)
        assert judge(cut_low, cut_high, t) == judge(low, high, t)
    assert judge(0.0, 0.0, 0.0) == "did not hold"  # the point on the threshold (claim 4)
    assert judge(0.0, 0.1, 0.0) == "not separable"


def test_seed_groups_and_stage0_delays_are_read_from_the_rows(stored):
    from pipemare_lite.experiments import paper_shape_table as table

    _, results = stored
    groups = table.seed_groups(results)
    config = design.config_for(results["quick"])
    assert f"n = {len(config.seeds)}): every other row and cell" in groups
    assert f"n = {len(config.check_seeds)}):" in groups
    # the check cell in words a reader understands, never the bare name (chapters 07-10)
    assert "(check cell)" not in groups
    assert f"the reproducibility check (`{results['command']} --check`" in groups
    for row in results["rows"]:
        if row["not_run"]:
            continue
        cell, note = table.stage0_delay(row)
        delays = [s["forward_delay_max"][0] for s in row["seeds"]]
        assert cell.startswith(str(max(delays)))
        assert bool(note) == (len(set(delays)) > 1)


def test_onset_gaps_read_the_stored_prediction(stored):
    _, results = stored
    for p in results["predictions"]:
        for rule in ("any_update", "after_anneal"):
            for g, s in zip(paper_shape_claims.onset_gaps(p, rule), p["seeds"]):
                assert g["measured"] == s["measured"] and g["predicted"] == s[rule]["predicted"]
                if g["in_order"]:  # the stricter reading is inside the design's agreement
                    assert s[rule]["agree"]
                assert not (g["before"] and g["in_order"])
