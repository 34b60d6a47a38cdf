"""Explorer widgets, driven headless: move controls, check the figures and numbers change right.

Expected values come from the textbook closed forms written out here, not from the engine.
"""

from __future__ import annotations

import math
import re

import pytest

from pipemare_lite.figures.widgets import schedule_explorer, staleness_explorer


def boxes(fig, kind: str) -> int:
    """How many boxes of op kind ``kind`` (F, B, I, W, U) the Gantt shows."""
    return sum(len(t.x) for t in fig.data
               if t.name and t.name.split()[0] == kind and t.meta != "legend")


def cells(html: str) -> list[list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", html)
    return [[re.sub("<[^>]+>", "", c) for c in re.findall(r"<t[dh]>(.*?)</t[dh]>", r)]
            for r in rows]


def test_schedule_explorer_redraws_when_sliders_move():
    w = schedule_explorer("1f1b", stages=4, microbatches=8)
    assert set(w.controls) >= {"schedule", "stages", "microbatches", "chunks", "forward",
                               "backward", "weight"}
    assert boxes(w.figure, "F") == 4 * 8 and boxes(w.figure, "B") == 4 * 8
    w.controls["stages"].value = 6  # the control's observer redraws
    w.controls["microbatches"].value = 12
    assert boxes(w.figure, "F") == 6 * 12 and boxes(w.figure, "B") == 6 * 12
    assert list(w.figure.layout.yaxis.range) == [5.5, -0.5]
    w.update()  # calling the handler directly gives the same picture
    assert boxes(w.figure, "F") == 72


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_measured_idle_fraction_matches_the_bubble_formula(name):
    P, M = 5, 7
    w = schedule_explorer(name, stages=P, microbatches=M)
    idle = (P - 1) / (M + P - 1)
    assert w.metrics.idle_fraction == pytest.approx(idle)
    (row,) = [r for r in cells(w.summary.value) if r[0] == "idle fraction"]
    measured, _, closed = row[1:]
    assert float(measured) == pytest.approx(idle, rel=1e-3)
    assert float(closed) == pytest.approx(idle, rel=1e-3)


def test_costs_change_the_makespan_as_the_formula_says():
    P, M = 3, 4
    w = schedule_explorer("gpipe", stages=P, microbatches=M)
    w.controls["forward"].value = 2.0
    w.controls["backward"].value = 1.5
    w.controls["weight"].value = 0.5
    # unsplit backward costs B + W; GPipe makespan (M+P-1)(F+B)
    assert w.metrics.makespan == pytest.approx((M + P - 1) * (2.0 + 1.5 + 0.5))


def test_one_backward_slider_before_the_split_backward():
    P, M = 3, 4
    w = schedule_explorer("gpipe", stages=P, microbatches=M, split_backward=False)
    assert w.controls["backward"].value == 2.0 and "backward" in w.controls["backward"].description
    assert w.controls["weight"].layout.display == "none"
    w.controls["backward"].value = 3.0
    w.controls["weight"].value = 2.5  # hidden: changes nothing
    assert w.metrics.makespan == pytest.approx((M + P - 1) * (1.0 + 3.0))
    w.controls["schedule"].value = "zb-h1"  # a split schedule: I = W = B/2
    assert boxes(w.figure, "I") == P * M and w.timeline.schedule.name == "zb-h1"


def test_zero_bubble_shows_split_backwards():
    w = schedule_explorer("zb-h1", stages=4, microbatches=8)
    assert boxes(w.figure, "I") == 32 and boxes(w.figure, "W") == 32
    assert boxes(w.figure, "B") == 0


def test_impossible_combination_shows_the_engine_error_and_recovers():
    w = schedule_explorer("interleaved", stages=4, microbatches=8, chunks=2)
    assert w.error is None and not w.controls["chunks"].disabled
    before = boxes(w.figure, "F")
    assert before == 4 * 8 * 2  # every rank runs v=2 chunks of every microbatch
    w.controls["microbatches"].value = 7  # interleaving needs M to be a multiple of P
    assert w.error is not None and "multiple" in w.error
    assert "multiple" in w.message.value
    assert boxes(w.figure, "F") == before  # last good picture stays
    w.controls["microbatches"].value = 12
    assert w.error is None and w.message.value == ""
    assert boxes(w.figure, "F") == 4 * 12 * 2
    w.controls["schedule"].value = "gpipe"
    assert w.controls["chunks"].disabled  # v means nothing outside interleaving


def test_async_schedules_report_zero_steady_state_idle():
    w = schedule_explorer("pipedream", stages=4, microbatches=4, minibatches=4)
    (row,) = [r for r in cells(w.summary.value) if r[0] == "steady-state idle fraction"]
    assert float(row[1]) == pytest.approx(0.0, abs=1e-9)
    T, P = 16, 4
    assert w.metrics.idle_fraction == pytest.approx((P - 1) / (T + P - 1))  # one fill+drain


def test_staleness_explorer_heatmap_follows_the_lock_step_formula():
    P, N = 4, 4
    w = staleness_explorer("async", stages=P, microbatches=N, minibatches=8)
    z = w.figure.data[0].z
    assert len(z) == P and len(z[0]) == N * 8
    for stage in range(P):
        i = stage + 1  # the notes' 1-indexed stage
        recalled = math.ceil((2 * (P - i) + 1) / N)
        steady = [z[stage][m] for m in range(3 * N, 7 * N)]  # away from fill and drain
        assert max(steady) == recalled  # the formula is the worst case...
        assert min(steady) >= recalled - 1  # ...give or take one by position
    assert "ceil" in w.summary.value


def test_staleness_explorer_path_and_picker():
    w = staleness_explorer("pipedream", stages=3, microbatches=1, minibatches=6)
    w.controls["microbatch"].value = 4
    (box,) = [s for s in w.figure.layout.shapes if s.type == "rect"]
    assert (box.x0, box.x1) == (3.5, 4.5)
    assert "microbatch 4" in w.path.layout.title.text
    # PipeDream with per-microbatch updates: delay P-1-s (0-indexed s), read off the path
    at_f = next(t for t in w.path.data if t.name == "version at F").y
    applied = next(t for t in w.path.data if t.name == "version applied to").y
    assert [a - f for a, f in zip(applied, at_f)] == [2, 1, 0]
    w.controls["minibatches"].value = 2  # only microbatches 0..1 remain: the picker clamps
    assert w.controls["microbatch"].max == 1 and w.controls["microbatch"].value == 1
    assert w.error is None


def test_staleness_tables_put_measurement_beside_both_closed_forms():
    P, N = 4, 4
    w = staleness_explorer("async", stages=P, microbatches=N, minibatches=8, microbatch=18)
    rows = cells(w.summary.value)
    assert rows[0][3].startswith("derived: ceil((2(P - stage) - 1 - j) / N)")
    assert rows[0][4].startswith("recalled: ceil((2(P - i) + 1) / N)")
    for stage, row in enumerate(rows[1:]):
        derived = [math.ceil((2 * (P - stage) - 1 - j) / N) for j in range(N)]
        assert row[2] == ", ".join(map(str, derived))  # measured, one value per position
        assert row[3] == ", ".join(map(str, derived))
        assert row[4] == str(math.ceil((2 * (P - (stage + 1)) + 1) / N))
    # the followed microbatch (18 = minibatch 4, position 2): delay and formula per stage
    path = cells(w.path_table.value)
    assert path[0][-1] == "derived at j = 2" and "j = 2 of minibatch 4" in w.path_table.value
    for stage, row in enumerate(path[1:]):
        assert row[4] == row[5] == str(math.ceil((2 * (P - stage) - 1 - 2) / N))


def test_staleness_explorer_tick_order_b_before_f_is_one_slot_shorter():
    P, N = 3, 1
    w = staleness_explorer("async", stages=P, microbatches=N, minibatches=10)
    usual = w.figure.data[0].z
    w.controls["tick_order"].value = "backward_first"
    assert w.error is None and "ceil((2(P - stage) - 2 - j) / N)" in w.summary.value
    shorter = w.figure.data[0].z
    for stage in range(P):  # per-microbatch updates: every steady delay is one smaller
        for m in range(2 * P, 10 - 1):
            assert usual[stage][m] == 2 * (P - stage) - 1
            assert shorter[stage][m] == 2 * (P - stage) - 2
    w.controls["method"].value = "pipedream"
    assert w.error is not None and "applies to the lock-step 'async'" in w.error
    with pytest.raises(ValueError, match="unknown tick order"):
        staleness_explorer(tick_order="sideways")


def test_staleness_explorer_shows_an_executed_run_while_the_controls_match():
    torch = pytest.importorskip("torch")
    from pipemare_lite.analysis.staleness import versions_from_trace
    from pipemare_lite.engine import LocalExecutor
    from pipemare_lite.schedules import build_schedule

    P, N, K = 3, 2, 5
    torch.manual_seed(0)
    stages = [torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()) for _ in range(P)]
    executor = LocalExecutor(build_schedule("pipedream", P, N, num_minibatches=K), stages,
                             loss_fn=torch.nn.functional.mse_loss,
                             optimizer_factory=lambda p: torch.optim.SGD(p, lr=0.01))
    result = executor.run([(torch.randn(2, 4), torch.randn(2, 4)) for _ in range(N * K)])
    measured = versions_from_trace(result.trace)
    w = staleness_explorer("pipedream", stages=P, microbatches=N, minibatches=K,
                           measured=measured, microbatch=6)
    assert w.showing_measured
    rows = cells(w.summary.value)
    assert rows[0][3] == "executed run (local executor), mean (min..max)"
    assert all(row[1] == row[3] for row in rows[1:])  # executed == analysis, every stage
    path = cells(w.path_table.value)
    assert all(row[-1] == f"{row[1]} / {row[2]} / {row[3]}" for row in path[1:])
    w.controls["stages"].value = 4  # another schedule than the one that ran
    assert not w.showing_measured and "these controls describe another schedule" in (
        w.summary.value)
    w.controls["stages"].value = P
    assert w.showing_measured
    with pytest.raises(TypeError, match="measured must be a VersionTable"):
        staleness_explorer(measured=result)


def test_staleness_explorer_shows_warmup_refusal():
    w = staleness_explorer("gpipe", stages=3, microbatches=2)
    w.controls["warmup"].value = 1
    assert w.error is not None and "warmup" in w.error
    w.controls["method"].value = "async"
    assert w.error is None


def test_unknown_names_raise_early():
    with pytest.raises(ValueError, match="unknown schedule 'gpipe2'"):
        schedule_explorer("gpipe2")
    with pytest.raises(ValueError, match="unknown method"):
        staleness_explorer("stale")


def test_set_changes_several_controls_with_one_redraw():
    w = schedule_explorer("gpipe", stages=2, microbatches=2)
    redraws = []
    original = w._redraw
    w._redraw = lambda **values: (redraws.append(values), original(**values))
    w.set(stages=3, microbatches=5)
    assert len(redraws) == 1 and boxes(w.figure, "F") == 15
    with pytest.raises(ValueError, match="unknown control"):
        w.set(colour="red")


@pytest.mark.parametrize(
    "name,minibatches",
    [("naive", 1), ("gpipe", 2), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 2),
     ("pipedream", 1), ("2bw", 2), ("async", 2)],
)
def test_table_pairs_each_schedule_with_a_closed_form_that_matches(name, minibatches):
    w = schedule_explorer(name, stages=4, microbatches=8, chunks=2, minibatches=minibatches)
    w.set(forward=1.5, backward=1.0, weight=0.5)
    table = {r[0]: r[1:] for r in cells(w.summary.value)[1:]}
    for quantity in ("makespan", "idle fraction", "bubble ratio (idle / busy)"):
        measured, _, closed = table[quantity]
        assert closed, f"{name}: no closed form for {quantity}"
        assert float(closed) == pytest.approx(float(measured), rel=1e-3), (name, quantity)
    measured, _, closed = table["peak in-flight activations per rank"]
    if closed:  # interleaved has none
        assert closed == measured


def test_comm_latency_says_the_closed_forms_do_not_apply():
    w = schedule_explorer("gpipe", stages=3, microbatches=4)
    w.set(comm=0.5)
    table = {r[0]: r[1:] for r in cells(w.summary.value)[1:]}
    assert table["makespan"][1].startswith("n/a") and table["makespan"][2] == ""
    assert w.metrics.makespan == pytest.approx((4 + 3 - 1) * 3 + 2 * (3 - 1) * 0.5)


def test_staleness_explorer_sliders_offer_only_what_the_engine_allows():
    """Issue 30: the warm-up slider went to 15 while the engine allows 0..updates (red error)."""
    from pipemare_lite.schedules.validation import size_range

    w = staleness_explorer("async", stages=3, microbatches=2, minibatches=4)
    for key, name in (("stages", "num_ranks"), ("microbatches", "num_microbatches"),
                      ("minibatches", "num_minibatches")):
        low, high = size_range(name)
        assert low <= w.controls[key].min and w.controls[key].max <= high, key
    for minibatches in (1, 4, w.controls["minibatches"].max):
        w.controls["minibatches"].value = minibatches
        slider = w.controls["warmup"]
        assert (slider.min, slider.max) == size_range("warmup", minibatches)
        for warmup in range(slider.min, slider.max + 1):
            slider.value = warmup
            assert w.error is None, (minibatches, warmup, w.error)
    # shrinking the run clamps a longer warm-up instead of showing an error
    w.controls["warmup"].value = w.controls["warmup"].max
    w.controls["minibatches"].value = 2
    assert w.controls["warmup"].value == 2 and w.error is None
