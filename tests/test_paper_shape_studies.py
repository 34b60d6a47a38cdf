"""paper-shape runs and stores study by study (issue 43's budget): ``reproduce paper-shape
--study NAME`` trains that study alone, keeps the stored file's other studies as they are,
recomputes the claims from the merged file, and resumes from the study's finished runs.

Training is replaced by the stored quick file's own seed outcomes (keyed by what each run
computes), so the merge and the resume are checked without training anything."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from pipemare_lite.experiments import paper_shape, paper_shape_runner
from pipemare_lite.experiments.record import read_stored

RESULTS = Path(__file__).resolve().parent.parent / "data" / "results"


@pytest.fixture
def stored():
    results, _ = read_stored(RESULTS, "paper_shape_quick")
    if results is None:
        pytest.skip("no stored paper_shape_quick.json")
    return results


def _fake_training(stored: dict, trained: list):
    """A run_job that returns the stored outcome of the same (study, P, label, lr, seed) and
    flat update norms, recording which runs it was asked for."""
    by_run = {}
    for row in stored["rows"]:
        for seed in row["seeds"]:
            by_run[row["study"], row["P"], row["label"], row["lr"], row["sweep"] == "curvature",
                   seed["seed"]] = seed

    def run_job(job):
        trained.append(job.key)
        outcome = copy.deepcopy(by_run[job.study, job.P, job.label, job.lr, job.measure_sharpness,
                                       job.seed])
        P = len(outcome["forward_delay_max"])
        return outcome, [[1.0] * 4 for _ in range(P)], [0.5] * 4, 0.25

    return run_job


def test_one_study_runs_alone_and_the_others_are_kept(stored, monkeypatch, tmp_path):
    trained: list = []
    monkeypatch.setattr(paper_shape_runner, "run_job", _fake_training(stored, trained))
    merged = paper_shape.run(True, study="transformer", out=tmp_path,
                             previous=copy.deepcopy(stored), log=None, progress=False)
    assert trained and {key[0] for key in trained} == {"transformer"}
    for name in ("resnet", "resnet_long"):
        assert merged["studies"][name] == stored["studies"][name]
        assert ([r for r in merged["rows"] if r["study"] == name]
                == [r for r in stored["rows"] if r["study"] == name])
    # the transformer rows come back from the same runs with the same qualities and lr
    again = [r for r in merged["rows"] if r["study"] == "transformer"]
    before = [r for r in stored["rows"] if r["study"] == "transformer"]
    assert [(r["label"], r["lr"], [s["quality"] for s in r["seeds"]]) for r in again] == \
        [(r["label"], r["lr"], [s["quality"] for s in r["seeds"]]) for r in before]
    assert merged["studies"]["transformer"]["chosen_lr"] == \
        stored["studies"]["transformer"]["chosen_lr"]
    # the claims are recomputed from the merged file: the Transformer's verdicts unchanged
    verdicts = {c["number"]: c["verdict"] for c in merged["claims"]}
    assert verdicts == {c["number"]: c["verdict"] for c in stored["claims"]}
    assert list(merged["studies"]) == ["resnet", "resnet_long", "transformer"]


def test_a_stopped_study_resumes_from_its_finished_runs(stored, monkeypatch, tmp_path):
    trained: list = []
    fake = _fake_training(stored, trained)
    monkeypatch.setattr(paper_shape_runner, "run_job", fake)
    paper_shape.run(True, study="transformer", out=tmp_path, previous=copy.deepcopy(stored),
                    log=None, progress=False)
    partial = paper_shape.partial_path(tmp_path, True, "transformer")
    lines = partial.read_text().splitlines()
    assert len(lines) == len(trained) == len(set(trained))
    # stopped after half of its runs, the last line torn mid-write
    half = len(lines) // 2
    partial.write_text("\n".join(lines[:half]) + "\n" + lines[half][:17])
    kept = {paper_shape_runner._key_from(json.loads(x)["key"]) for x in lines[:half]}
    first = list(trained)
    trained.clear()
    paper_shape.run(True, study="transformer", out=tmp_path, previous=copy.deepcopy(stored),
                    log=None, progress=False)
    assert sorted(map(repr, trained)) == sorted(repr(k) for k in first if k not in kept)


def test_a_partial_file_gives_back_the_losses_bitwise(tmp_path):
    key = ("resnet", 8, 0.02, (("method", "1f1b"), ("t1", False)), 3, False)
    losses = [0.1, 1 / 3, 2.0 ** -60, 123456.789e-7]
    path = tmp_path / "p.jsonl"
    paper_shape_runner.append_partial(path, key, ({"quality": 0.5}, [[0.25]], losses, 1.5))
    back = paper_shape_runner.read_partial(path)
    assert list(back) == [key]
    # repr is the shortest text that reads back as the same double: equal reprs, equal bits
    assert [repr(x) for x in back[key][2]] == [repr(x) for x in losses]


def test_an_unknown_paper_shape_study_names_the_allowed_ones():
    with pytest.raises(ValueError, match="unknown paper-shape study 'resnet_lr'.*resnet_long"):
        paper_shape.map_study("resnet_lr", False)
