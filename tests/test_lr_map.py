"""The map (issue 43): its stored runs, its assessment, its check, its resumable storage.

- every stored file's assessment follows from its stored runs (recomputed here, equal);
- the stored runs are exactly the design's (no cell missing, none extra), and measuring the
  sharpness did not change the synchronous runs (their loss digests are equal);
- one stored seed of the quick file re-runs to the same numbers where the kernel
  fingerprint matches (else within the stored seeds' prediction interval): ``reproduce --check``;
- the pieces: the loss onset, the uninformative label, the classifier's table and verdict,
  the plain-words answer against the cells' verdicts, a study that resumes from its partial
  file, and the CLI's refusal of an unknown study.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipemare_lite import cli
from pipemare_lite.experiments import lr_map
from pipemare_lite.experiments import lr_map_assess as assess_module
from pipemare_lite.experiments.record import read_stored

RESULTS = Path(__file__).resolve().parent.parent / "data" / "results"
STORED = [stem for stem in ("lr_map", "lr_map_quick") if (RESULTS / f"{stem}.json").is_file()]


def plain(value):
    """As JSON stores it (tuples become lists)."""
    return json.loads(json.dumps(value))


@pytest.fixture(params=STORED)
def stored(request):
    results, meta = read_stored(RESULTS, request.param)
    return results, meta


def test_the_quick_map_is_stored():
    # the test that re-runs part of the stored results needs it (reproduce lr-map --quick)
    assert "lr_map_quick" in STORED


def test_the_assessment_follows_from_the_stored_runs(stored):
    results, _ = stored
    assert plain(assess_module.assess(results)) == results["assessment"]


def test_the_stored_runs_are_the_designs_runs(stored):
    results, _ = stored
    for name, study in results["studies"].items():
        design = lr_map.map_study(name, results["quick"])
        planned = sorted(j.key for j in lr_map.jobs_of(design, results["quick"]))
        stored_keys = sorted(lr_map.Job(results["quick"], r["study"], r["label"], r["P"], r["lr"],
                                        r["seed"], r["measure"]).key for r in study["runs"])
        assert stored_keys == planned, name
        assert study["design"] == plain(lr_map.asdict(design))


def test_measuring_the_sharpness_did_not_change_the_sync_runs(stored):
    results, _ = stored
    study = results["studies"]["resnet_lr_map"]
    plain_runs = {(r["P"], r["lr"], r["seed"]): r["outcome"] for r in study["runs"]
                  if r["label"] == lr_map.SYNC and not r["measure"]}
    measured = [r for r in study["runs"] if r["measure"]]
    assert measured
    for run in measured:
        # sync numerics do not depend on P: the P = 8 run is the reference for every P
        reference = plain_runs[study["design"]["granularities"][0], run["lr"], run["seed"]]
        assert run["outcome"]["losses_digest"] == reference["losses_digest"]
        assert len(run["outcome"]["sharpness"][0][1]) == run["P"]


def test_a_stored_seed_comes_back(capsys):
    code = cli.main(["reproduce", "lr-map", "--quick", "--check", "--out", str(RESULTS)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PASS" in out and ("bitwise" in out or "range" in out)


def test_loss_onset_is_the_first_window_above_twice_the_smallest_before():
    assert lr_map.loss_onset([2.0, 1.0, 1.5, 2.5], 10) == 30
    assert lr_map.loss_onset([2.0, 1.0, 0.5], 10) is None
    assert lr_map.loss_onset([1.0, float("nan")], 7) == 7
    assert lr_map.loss_onset([1.0, None], 7) == 7  # JSON stores a non-finite window as null


def test_a_cell_where_every_compared_seed_diverged_is_uninformative():
    dead = [{"diverged": True, "quality": 0.0}] * 3
    claim = assess_module._better("5", "", "a", [0.0] * 3, "b", [0.0] * 3, 0.95)
    assert assess_module._labelled(claim, dead, dead)["verdict"] == "uninformative"
    alive = [{"diverged": False, "quality": 0.5}] * 3
    assert assess_module._labelled(claim, dead, alive)["verdict"] == "did not hold"


def test_the_classifier_table_and_its_verdict():
    def row(predicted, measured):
        return {"predicted": predicted, "measured": measured, "predicted_stage": 0,
                "measured_stage": None}

    always = [row(True, True)] * 2 + [row(True, False)] * 8
    table = assess_module.confusion(always)
    assert (table["tp"], table["fp"], table["fn"], table["tn"]) == (2, 8, 0, 0)
    assert table["verdict"].startswith("fails")  # 0.2 against the majority answer's 0.8
    good = [row(True, True)] * 9 + [row(False, False)] * 10 + [row(False, True)]
    assert assess_module.confusion(good)["verdict"].startswith("holds")
    assert assess_module.confusion([])["verdict"] == "uninformative"


def test_the_plain_answer_says_what_each_cell_decided(stored):
    results, _ = stored
    assessment = results["assessment"]
    lines = assess_module.plain_answer(assessment, "resnet_lr_map")
    for cell in assessment["phase"]:
        if cell["study"] != "resnet_lr_map" or cell["reaches_sync"] is None:
            continue
        line = next(x for x in lines if x.startswith(f"{cell['label']}, P = {cell['P']}:"))
        word = {"held": "reached 1F1B within 0.01", "did not hold": "fell short",
                "not separable": "cannot be told apart",
                "uninformative": "diverged in every seed"}[cell["reaches_sync"]]
        part = next(p for p in line.split(": ", 1)[1].rstrip(".").split("; ")
                    if p.startswith(word))
        assert f"{cell['lr']:g}" in part.removeprefix(word + " at lr ").split(", ")


def test_a_study_resumes_from_its_finished_runs(tmp_path, monkeypatch):
    trained = []

    def fake_run(job):
        trained.append(job.key)
        return {"seed": job.seed, "quality": 0.5, "diverged": False, "cpu_seconds": 0.0,
                "train_loss_windows": [1.0], "loss_onset": None}

    monkeypatch.setattr(lr_map, "run_job", fake_run)
    study = lr_map.map_study("transformer_long", True)
    jobs = lr_map.jobs_of(study, True)
    partial = lr_map.partial_path(tmp_path, True, study.name)
    done = {"seed": 0, "quality": 0.25, "diverged": False, "cpu_seconds": 1.0,
            "train_loss_windows": [1.0], "loss_onset": None}
    partial.write_text(json.dumps({"key": jobs[0].key, "outcome": done}) + "\n{torn")
    result = lr_map.run_study(study, True, jobs=1, out=tmp_path, log=None)
    assert sorted(trained) == sorted(j.key for j in jobs[1:])  # the finished run is not redone
    first = next(r for r in result["runs"] if lr_map.Job(True, r["study"], r["label"], r["P"],
                                                        r["lr"], r["seed"], r["measure"]).key
                 == jobs[0].key)
    assert first["outcome"]["quality"] == 0.25
    assert len(lr_map.read_partial(partial)) == len(jobs)


def test_an_unknown_study_is_refused_with_the_allowed_ones(capsys):
    assert cli.main(["reproduce", "lr-map", "--study", "resnet_lr", "--out", "/nowhere"]) == 2
    err = capsys.readouterr().err
    assert "unknown lr-map study 'resnet_lr'" in err and "resnet_lr_map" in err
    assert cli.main(["reproduce", "paper-shape", "--study", "x", "--out", "/nowhere"]) == 2
    assert "unknown paper-shape study 'x'" in capsys.readouterr().err
    assert cli.main(["reproduce", "beyond-pipemare", "--study", "x", "--out", "/nowhere"]) == 2
    assert "has no studies" in capsys.readouterr().err


# --------------------------------------------------------------------------- chapter 10's words


@pytest.fixture
def full_map():
    results, _ = read_stored(RESULTS, "lr_map")
    if results is None:
        pytest.skip("no stored lr_map.json")
    return results


def _cells(results, study="resnet_lr_map"):
    return {(c["label"], c["P"], c["lr"]): c for c in results["assessment"]["phase"]
            if c["study"] == study}


def _chapter_10() -> str:
    """Chapter 10's Markdown, cell by cell, as the reader sees it."""
    notebook = json.loads((Path(__file__).resolve().parent.parent / "chapters"
                           / "10_the_trade_off_table.ipynb").read_text())
    text = "\n\n".join("".join(c["source"]) for c in notebook["cells"]
                        if c["cell_type"] == "markdown")
    return " ".join(text.split())  # a sentence is found whatever its line breaks


def _eight_seed_lrs(design: dict) -> list[float]:
    return sorted(lr for lr, seeds in design["seeds_at"] if len(seeds) == 8)


def test_chapter_10s_words_about_the_resnet_map_agree_with_the_stored_file(full_map):
    """The sentences of chapter 10's 'What the maps say' on the ResNet at 420 updates."""
    text = _chapter_10()
    cells = _cells(full_map)
    design = full_map["studies"]["resnet_lr_map"]["design"]
    Ps, lrs = design["granularities"], design["lr_grid"]
    eight = _eight_seed_lrs(design)
    assert all(cells[lr_map.PMW, P, lr]["n"] == 8 for P in Ps for lr in eight)
    assert ("At the short length no method reached 1F1B's quality within 0.01 with the seeds' "
            "confidence, in any cell.") in text
    assert all(c["reaches_sync"] != "held" for c in cells.values() if c["reaches_sync"])
    assert "at every eight-seed learning rate but the smallest, at both granularities" in text
    for P in Ps:
        assert cells[lr_map.PMW, P, eight[0]]["reaches_sync"] == "not separable"
        assert all(cells[lr_map.PMW, P, lr]["reaches_sync"] == "did not hold"
                   for lr in eight[1:])
    assert "fell short of 1F1B in every cell where any of its seeds trained" in text
    for (label, P, lr), c in cells.items():
        if label == lr_map.ASYNC and c["diverged"] < c["n"]:
            assert c["reaches_sync"] == "did not hold", (P, lr)
    best = max(lrs, key=lambda lr: cells[lr_map.SYNC, Ps[0], lr]["mean"])
    assert ("at P = 16 most of its seeds diverged from the learning rate where 1F1B did best "
            "upwards") in text
    assert all(2 * cells[lr_map.ASYNC, 16, lr]["diverged"] > cells[lr_map.ASYNC, 16, lr]["n"]
               for lr in lrs if lr >= best)
    assert ("Only the momentum-aware PipeMare-W stayed within 0.05 of 1F1B "
            "at every eight-seed") in text
    within = {label for label in design["rows"] if label != lr_map.SYNC
              and all(cells[label, P, lr]["minus_sync"]["estimate"] > -0.05
                      for P in Ps for lr in eight)}
    assert within == {lr_map.PMW_M}
    assert "PipeMare-W itself dipped below that at P = 16 at the larger two of them" in text
    assert [lr for lr in eight if cells[lr_map.PMW, 16, lr]["minus_sync"]["estimate"] <= -0.05] \
        == eight[1:] and len(eight) == 3
    for label in (lr_map.T1, lr_map.T1T2):  # further behind as the stages get finer
        assert all(cells[label, Ps[-1], lr]["mean"] < cells[label, Ps[0], lr]["mean"]
                   for lr in eight)
    assert ("PipeMare-W comes within a few hundredths of 1F1B in this miniature, "
            "not within 0.01") in text
    assert all(-0.08 < cells[lr_map.PMW, P, lr]["minus_sync"]["estimate"] < 0
               for P in Ps for lr in eight)
    assert all(cells[lr_map.PMW, P, lr]["reaches_sync"] == "not separable"
               for P in Ps for lr in lrs if lr not in eight)
    assert "as a classifier of this map it **fails**" in text
    table = full_map["assessment"]["confusion"]["resnet_lr_map"]
    assert table["verdict"].startswith("fails") and table["fp"] > table["tn"]


def test_chapter_10s_words_about_the_long_resnet_map_agree_with_the_stored_file(full_map):
    text = _chapter_10()
    long = _cells(full_map, "resnet_long_lr_map")
    design = full_map["studies"]["resnet_long_lr_map"]["design"]
    lrs, (P,) = sorted(design["lr_grid"]), design["granularities"]
    assert full_map["studies"]["resnet_long_lr_map"]["planned_steps"] == \
        4 * full_map["studies"]["resnet_lr_map"]["planned_steps"]
    assert ("PipeMare-W came within 0.01 of 1F1B on average at every learning rate of that map, "
            "shown with the seeds' confidence at one of them") in text
    assert all(long[lr_map.PMW, P, lr]["minus_sync"]["estimate"] > -0.01 for lr in lrs)
    assert [long[lr_map.PMW, P, lr]["reaches_sync"] for lr in lrs].count("held") == 1
    assert ("T1 alone trained at the two smaller learning rates and diverged in most seeds at the "
            "largest") in text
    assert all(long[lr_map.T1, P, lr]["diverged"] == 0 for lr in lrs[:2])
    assert 2 * long[lr_map.T1, P, lrs[2]]["diverged"] > long[lr_map.T1, P, lrs[2]]["n"]
    assert "plain asynchronous training diverged in every seed at every learning rate" in text
    assert all(long[lr_map.ASYNC, P, lr]["diverged"] == long[lr_map.ASYNC, P, lr]["n"]
               for lr in lrs)
    assert ("over the long run it comes within a hundredth at every learning rate tried, the "
            "stored study's included") in text
    paper, _ = read_stored(RESULTS, "paper_shape")
    assert paper["studies"]["resnet_long"]["chosen_lr"] in lrs


def test_chapter_10s_words_about_the_stalest_stages_agree_with_the_stored_file(full_map):
    text = _chapter_10()
    cells = full_map["assessment"]["stalest_first"]
    phase = {(c["study"], c["label"], c["P"], c["lr"]): c
             for c in full_map["assessment"]["phase"]}
    warm = [c for c in cells if c["label"] in assess_module.WARM_ROWS]
    assert {c["study"] for c in warm} == set(full_map["studies"])  # both networks
    assert "In no cell of a row with the synchronous warm-up did it hold, at either network" in text
    assert all(c["verdict"] != "held" for c in warm)
    assert "was the last, the least stale, in all but a few seeds" in text
    seeds = [(s, c["P"]) for c in warm for s in c["largest_excess_stage"]]
    last = sum(s == P - 1 for s, P in seeds)
    assert last >= 0.9 * len(seeds) and last < len(seeds)
    assert "It held only in cells where some seeds diverged, rows without the warm-up" in text
    held = [c for c in cells if c["verdict"] == "held"]
    assert held and all(phase[c["study"], c["label"], c["P"], c["lr"]]["diverged"] > 0
                        and c["label"] not in assess_module.WARM_ROWS for c in held)
    assert "named the stage that failed first in none of the seeds it predicted right" in text
    tables = full_map["assessment"]["confusion"].values()
    assert all(t["stage_matches"] == 0 and t["stage_compared"] > 0 for t in tables)


def test_chapter_10s_words_about_the_transformer_agree_with_the_stored_file(full_map):
    text = _chapter_10()
    tf = _cells(full_map, "transformer_long")
    a = full_map["assessment"]
    registered = a["preregistered"]["a"]
    lr = registered["lr"]
    assert lr == assess_module.PREREGISTERED_LR
    assert registered["collapses"][lr_map.PMW] == tf[lr_map.PMW, 8, lr]["n"] == 8
    assert registered["collapses"][lr_map.PMW_M] == 0
    assert registered["verdict"] == "held"
    assert "both still stayed further than 0.01 below 1F1B there" in text
    assert tf[lr_map.PMW, 8, lr]["reaches_sync"] == tf[lr_map.PMW_M, 8, lr]["reaches_sync"] \
        == "did not hold"
    predicted = [p for p in a["predictions"] if p["study"] == "transformer_long"]
    assert all(p["predicted"] for p in predicted if p["label"] == lr_map.PMW and p["lr"] == lr)
    assert any(p["predicted"] and not p["measured"] for p in predicted
               if p["label"] == lr_map.PMW_M)
    smaller = sorted(x for x in full_map["studies"]["transformer_long"]["design"]["lr_grid"]
                     if x < lr)
    assert len(smaller) == 2 and all(tf[lr_map.PMW, 8, x]["n"] == 3 for x in smaller)
    assert ("the momentum-aware row reached 1F1B within 0.01 at both, PipeMare-W at the smallest "
            "only") in text
    assert all(tf[lr_map.PMW_M, 8, x]["reaches_sync"] == "held" for x in smaller)
    assert tf[lr_map.PMW, 8, smaller[0]]["reaches_sync"] == "held"
    assert tf[lr_map.PMW, 8, smaller[1]]["reaches_sync"] != "held"
    assert "its loss still jumped at the switch there and recovered" in text
    at_smallest = [p for p in predicted if p["label"] == lr_map.PMW and p["lr"] == smaller[0]]
    assert at_smallest and all(p["measured"] for p in at_smallest)
    assert tf[lr_map.PMW, 8, smaller[0]]["diverged"] == 0
    assert "it reached 1F1B within 0.01 at the smallest learning rate only" in text


def test_the_assessment_knows_which_rows_warm_up():
    # lr_map_assess is torch-free and imports no lr_map: its copy of the warm-up rows
    warm = {label for label, _, switches in lr_map.ROWS if switches.get("warmup")}
    assert set(assess_module.WARM_ROWS) == warm


# --------------------------------------------------------------------------- the amendment


def test_a_study_that_gained_seeds_reuses_its_stored_runs_and_one_that_changed_does_not():
    study = lr_map.map_study("resnet_lr_map", False)
    stored = {"design": plain(lr_map.asdict(lr_map.replace(study, seeds_at=()))),
              "runs": [{"label": lr_map.SYNC, "P": 8, "lr": 0.01, "seed": 0, "measure": False,
                        "outcome": {"quality": 0.5}}]}
    reused = lr_map.reusable_runs(stored, study)
    assert list(reused) == [lr_map.Job(False, study.name, lr_map.SYNC, 8, 0.01, 0).key]
    longer = lr_map.replace(study, epochs=study.epochs + 1)
    assert lr_map.reusable_runs(stored, longer) == {}  # its runs would compute other numbers
    assert lr_map.reusable_runs(None, study) == {}


def test_the_claim_cells_run_eight_seeds_and_the_others_three():
    study = lr_map.map_study("resnet_lr_map", False)
    assert [len(study.seeds_for(lr)) for lr in study.lr_grid] == [8, 8, 8, 3, 3]
    tf = lr_map.map_study("transformer_long", False)
    assert {lr: len(tf.seeds_for(lr)) for lr in tf.lr_grid} == {0.003: 3, 0.01: 3, 0.03: 8}


def test_stage_excess_from_windows_equals_the_excess_of_the_updates():
    from pipemare_lite.experiments import stage_evidence

    norms = [[0.5, 1.0, 2.0, 4.0, 1.0, 3.0], [1.0, 1.0, 1.0, 2.0, 2.0, 2.0]]
    sync = [[1.0, 1.0, 1.0, 1.0, 1.0, 1.0], [2.0, 1.0, 0.5, 0.5, 1.0, 1.0]]

    def windows(xs):
        return [stage_evidence.window_rms(s, 2) for s in xs]

    seed, ref = {"update_norm_windows": windows(norms)}, {"update_norm_windows": windows(sync)}
    every = assess_module.stage_excess(seed, ref, 2)
    assert every == pytest.approx(stage_evidence.excess(norms, sync))
    after = assess_module.stage_excess(seed, ref, 2, start=3)  # from the window holding 3
    assert after == pytest.approx(stage_evidence.excess([n[2:] for n in norms],
                                                        [n[2:] for n in sync]))
    one = assess_module.stage_excess(seed, ref, 2, start=2, windows=1)
    assert one == pytest.approx(stage_evidence.excess([n[2:4] for n in norms],
                                                      [n[2:4] for n in sync]))


def test_stalest_first_counts_the_seeds_where_the_stalest_quarter_leaves_sync_most():
    def seed(number, norms):
        return {"seed": number, "diverged": False, "quality": 0.9,
                "update_norm_windows": [[x] for x in norms]}

    sync = [seed(s, [1.0] * 4) for s in (0, 1)]
    runs = [{"label": lr_map.SYNC, "P": 4, "lr": 0.1, "measure": False, "outcome": s}
            for s in sync]
    runs += [{"label": lr_map.ASYNC, "P": 4, "lr": 0.1, "measure": False,
              "outcome": seed(0, [3.0, 1.0, 1.0, 2.0])},
             {"label": lr_map.ASYNC, "P": 4, "lr": 0.1, "measure": False,
              "outcome": seed(1, [1.0, 1.0, 1.0, 2.0])}]
    results = {"studies": {"s": {"design": {"granularities": [4], "eval_every": 1,
                                            "rows": [lr_map.SYNC, lr_map.ASYNC]},
                                 "planned_steps": 1, "runs": runs}}}
    (cell,) = assess_module.stalest_first(results)
    assert cell["stale_quarter_larger"] == 1 and cell["seeds"] == 2
    assert cell["verdict"] == "not separable" and cell["largest_excess_stage"] == [0, 3]


def test_the_transformer_by_run_length_pairs_each_length_with_its_own_sync(full_map):
    from pipemare_lite.figures.viz import phase_map_figure

    paper, _ = read_stored(RESULTS, "paper_shape")
    cells = assess_module.transformer_by_length(full_map, paper)
    lengths = {c["P"] for c in cells}
    assert full_map["studies"]["transformer_long"]["planned_steps"] in lengths
    for c in cells:  # the difference is the row's mean minus the same length's 1F1B mean
        if c["P"] == full_map["studies"]["transformer_long"]["planned_steps"]:
            sync = [s["quality"] for s in assess_module.cell_seeds(
                full_map["studies"]["transformer_long"])[lr_map.SYNC, 8, c["lr"]]]
        else:
            sync = [s["quality"] for r in paper["rows"] if r["study"] == "transformer"
                    and r["label"] == lr_map.SYNC and r["sweep"] == "grid" and r["lr"] == c["lr"]
                    for s in r["seeds"]]
        assert c["minus_sync"]["estimate"] == pytest.approx(c["mean"] - sum(sync) / len(sync))
    figure = phase_map_figure({"phase": cells}, assess_module.LENGTH_STUDY, y_name="updates")
    assert all(y.startswith("updates = ") for trace in figure.data for y in trace.y)
