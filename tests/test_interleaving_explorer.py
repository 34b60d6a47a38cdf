"""Chapter 04's interleaving explorer does what "Things to try 1" asks (issue 45): the
sliders set a stage's cost and each of the v chunks costs 1/v of it, so raising v keeps the
work and shrinks the bubble; the table shows the peak activation memory beside the
chapter's formula."""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest

from pipemare_lite.analysis import formulas
from pipemare_lite.analysis.simulate import OpCosts, metrics, simulate
from pipemare_lite.figures.widgets import schedule_explorer, schedule_explorer_static
from pipemare_lite.schedules import build_schedule

ROOT = Path(__file__).resolve().parents[1]


def _chapter_call(name: str) -> tuple[list, dict]:
    """The arguments of chapter 04's ``name(...)`` call that explores interleaving."""
    nb = nbformat.read(ROOT / "chapters" / "04_interleaving_and_zero_bubble.ipynb",
                       as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith(f'{name}("interleaved"'):
            call = ast.parse(cell.source).body[0].value
            return ([ast.literal_eval(a) for a in call.args],
                    {k.arg: ast.literal_eval(k.value) for k in call.keywords})
    raise AssertionError(f"chapter 04 has no {name}('interleaved', ...) cell")


def _makespans(explorer, comm: float) -> dict[int, float]:
    explorer.controls["comm"].value = comm
    out = {}
    for v in (1, 2, 4):
        explorer.controls["chunks"].value = v
        explorer.update()
        out[v] = explorer.metrics.makespan
    return out


def test_the_makespan_falls_from_v_1_to_v_2_at_the_chapters_default_costs():
    args, kwargs = _chapter_call("schedule_explorer")
    explorer = schedule_explorer(*args, **kwargs)
    F, B, W = (explorer.controls[k].value for k in ("forward", "backward", "weight"))
    P, M = kwargs["stages"], kwargs["microbatches"]
    makespans = _makespans(explorer, comm=0.0)
    assert makespans[2] < makespans[1] and makespans[4] < makespans[2], makespans
    # each equals the closed form with the chunk costs F/v and (B+W)/v: the work is the same
    for v, makespan in makespans.items():
        assert makespan == pytest.approx(formulas.makespan_interleaved(P, M, v, F / v,
                                                                       (B + W) / v))
    # "Things to try 1": with comm latency 0.5, v = 2 still pays and v = 4 no longer does
    late = _makespans(explorer, comm=0.5)
    assert late[2] < late[1] < late[4], late


def test_every_v_does_the_same_work_as_the_chapters_per_chunk_costs():
    explorer = schedule_explorer("interleaved", stages=4, microbatches=8, chunks=1,
                                 split_backward=False)
    for v in (1, 2, 4):
        explorer.controls["chunks"].value = v
        explorer.update()
        # the chapter's per_chunk_costs(v): F/v and B/v, B = 2 the whole backward
        chapter = metrics(simulate(build_schedule("interleaved", 4, 8, chunks=v),
                                   OpCosts(forward=1 / v, backward=2 / v)))
        assert explorer.metrics.busy_per_rank == pytest.approx(chapter.busy_per_rank)
        assert explorer.metrics.makespan == pytest.approx(chapter.makespan)


def test_the_table_shows_peak_memory_beside_the_formula_comm_or_not():
    explorer = schedule_explorer("interleaved", stages=4, microbatches=8, chunks=4)
    for comm in (0.0, 0.5):
        explorer.controls["comm"].value = comm
        explorer.update()
        row = next(line for line in explorer.summary.value.split("<tr>")
                   if "peak activation memory" in line)
        measured = [k / 4 for k in explorer.metrics.peak_inflight]
        text = ", ".join(f"{x:.4g}" for x in measured)
        assert row.count(text) == 2, row  # measured, and the formula's value beside it
        assert "n/a" not in row
    assert measured[0] == 4.75  # the chapter's worked value: rank 0 at v = 4


@pytest.mark.parametrize("P", [2, 3, 4, 5])
def test_interleaved_peak_formula_is_the_simulators(P):
    for M in (P, 2 * P, 3 * P):
        for v in (1, 2, 3, 4):
            measured = metrics(simulate(build_schedule("interleaved", P, M, chunks=v)))
            assert list(measured.peak_inflight) == [
                formulas.peak_inflight_interleaved(P, M, v, s) for s in range(P)], (P, M, v)
    with pytest.raises(ValueError, match="s=4"):
        formulas.peak_inflight_interleaved(4, 8, 2, 4)


def test_the_static_copy_uses_the_same_chunk_costs():
    args, kwargs = _chapter_call("schedule_explorer_static")
    figure = schedule_explorer_static(*args, **kwargs)
    v, P = kwargs["chunks"], kwargs["stages"]
    for step, M in zip(figure.layout.sliders[0].steps, kwargs["microbatches"]):
        expected = formulas.makespan_interleaved(P, M, v, 1 / v, 2 / v)
        assert step.args[1]["xaxis.range"][1] == pytest.approx(1.02 * expected), M
