"""Chapters 07-12 state the stored experiments' results by reading them, never by retyping.

The results of ``paper-shape`` and ``beyond-pipemare`` change when the experiments are
re-run; a chapter that typed a number or a verdict into its prose would silently disagree
with the file beside it. These checks read the committed notebooks as JSON (nothing is run):

- every claim a chapter asks for by number (``claims_numbered(stored, "3", ...)``) exists in
  the stored file, so the chapter prints it rather than nothing;
- the markdown after a chapter's "stored" heading holds no result-like decimal (0.xyz) and
  no verdict word next to a claim: those come from code cells;
- every chapter that reads ``paper_shape.json`` reads it through the shared readers
  (:func:`pipemare_lite.experiments.record.read_stored` and the table helpers), so the
  diverged-seed convention is the experiment's, defined once.
"""

import json
import re
from pathlib import Path

import pytest

from pipemare_lite.experiments.record import read_stored

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("[01][0-9]_*.ipynb"))
READERS = [p for p in CHAPTERS if "paper_shape" in p.read_text()]


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _text(cell: dict) -> str:
    return "".join(cell["source"])


def test_the_paper_shape_chapters_are_the_ones_that_teach_it():
    names = {p.name[:2] for p in READERS}
    assert {"07", "08", "09", "10"} <= names, names


@pytest.mark.parametrize("path", READERS, ids=lambda p: p.name[:2])
def test_every_claim_a_chapter_names_is_in_the_stored_file(path):
    stored, _ = read_stored(ROOT / "data" / "results", "paper_shape")
    numbers = {c["number"] for c in stored["claims"]}
    asked = []
    for cell in _cells(path):
        for call in re.findall(r"claims_numbered\(stored, ([^)]*)\)", _text(cell)):
            asked += re.findall(r'"([^"]+)"', call)
    missing = [n for n in asked if n not in numbers]
    assert not missing, f"{path.name} prints claims {missing}, which the stored file lacks"


@pytest.mark.parametrize("path", READERS, ids=lambda p: p.name[:2])
def test_stored_results_are_read_through_the_shared_readers(path):
    code = "\n".join(_text(c) for c in _cells(path) if c["cell_type"] == "code")
    assert "read_stored(" in code, f"{path.name} reads paper_shape.json by hand"
    assert 'json.loads(stored_path.read_text())' not in code


RESULT_DECIMAL = re.compile(r"(?<![\w.])0\.\d{3}\b")
VERDICT_NEAR_CLAIM = re.compile(r"claim[^.]{0,80}\b(held|did not hold|not separable)\b", re.I)


@pytest.mark.parametrize("path", READERS, ids=lambda p: p.name[:2])
def test_prose_after_a_stored_heading_states_no_result(path):
    inside, problems = False, []
    for i, cell in enumerate(_cells(path)):
        text = _text(cell)
        if cell["cell_type"] != "markdown":
            continue
        for line in text.splitlines():
            if line.startswith("#"):
                inside = "stored" in line.lower() or "verdict" in line.lower()
            elif inside:
                problems += [f"[{i}] {m.group(0)!r}: {line.strip()[:80]}"
                             for m in RESULT_DECIMAL.finditer(line)]
                problems += [f"[{i}] verdict in prose: {line.strip()[:80]}"
                             for _ in VERDICT_NEAR_CLAIM.finditer(line)]
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_the_checks_catch_the_old_texts():
    # the sentences the first design's chapters typed (issue 29) fail these checks
    old = ('Read them as they are: "T2 helps on its own" held; the claim "T2 adds to T1" '
           "did not hold", "async + T1 0.258 [0.000, 0.773]")
    assert VERDICT_NEAR_CLAIM.search(old[0])
    assert RESULT_DECIMAL.search(old[1])


# ----------------------------------------------------------------- the diverged-seed convention

STORED_READERS = [p for p in CHAPTERS if "read_stored(" in p.read_text()
                  or "data/results" in p.read_text()]
OWN_CONVENTION = re.compile(r"\[\"summary\"\]\[\"final_accuracy\"\]|0\.0 if [\w.]*diverged")
BY_HAND = re.compile(r"json\.loads?\(")


def convention_problems(code: str, chapter: bool = True) -> list[str]:
    """Where code counts a diverged seed its own way (or, in a chapter, reads stored
    results by hand instead of through ``record.read_stored``)."""
    found = [m.group(0) for m in OWN_CONVENTION.finditer(code)]
    return found + ([m.group(0) for m in BY_HAND.finditer(code)] if chapter else [])


def test_one_convention_for_diverged_seeds_defined_once():
    """record.seed_quality defines it; the experiments store it; the chapters read it."""
    from pipemare_lite.experiments import record

    assert record.seed_quality(0.9, diverged=True) == 0.0
    assert record.seed_quality(0.9, diverged=False) == 0.9
    package = ROOT / "pipemare_lite"
    own_way = [f"{p.relative_to(ROOT)}: {hits}" for p in package.rglob("*.py")
               if p.name != "record.py" and (hits := convention_problems(p.read_text(), False))]
    assert not own_way, own_way
    for path in STORED_READERS:
        code = "\n".join(_text(c) for c in _cells(path) if c["cell_type"] == "code")
        assert not convention_problems(code), f"{path.name}: {convention_problems(code)}"


def test_the_convention_check_catches_the_old_readers():
    # issue 30: chapter 08 [43] printed the mean over the seeds that did not diverge, [45]
    # the claims' quality (0 for a diverged seed); chapter 12 [30] parsed the file by hand
    old_08 = 'def accuracy(row):\n    s = row["summary"]["final_accuracy"]\n'
    old_12 = "stored = json.loads(stored_path.read_text())"
    old_experiment = '"quality": 0.0 if history.diverged else history.final_accuracy,'
    assert all(convention_problems(code) for code in (old_08, old_12, old_experiment))
    assert convention_problems(old_experiment, chapter=False)
    assert not convention_problems('print(quality_cell(row), quality_range(row))')
