"""Placement as data and the schedules of issue 34: ZB-H2, and the V-shaped ZB-V and DualPipeV.

- placement: the default is round robin (every existing schedule unchanged); a schedule
  carries its own map, the validator, the simulator's messages and the file formats read it,
  and a bad map is refused naming the value;
- ZB-V and DualPipeV put 2P chunks on a V (rank r holds r and 2P-1-r); they and ZB-H2
  train bitwise equal to one-device gradient accumulation with the local executor, and with
  the distributed one (P = 2 and 4, gloo), which also equals the local one bitwise;
- their bubble and peak activations equal the closed forms in
  :mod:`pipemare_lite.analysis.formulas` on the simulator.
"""

from __future__ import annotations

import copy
import functools
import json
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pipemare_lite.analysis.simulate import OpCosts, metrics, simulate
from pipemare_lite.engine import LocalExecutor
from pipemare_lite.schedules import Action, Schedule, ScheduleError, build_schedule
from pipemare_lite.schedules.actions import round_robin_placement, v_placement
from pipemare_lite.schedules.comm_plan import plan_communication
from pipemare_lite.schedules.io import from_csv, from_json, from_rows, to_csv, to_json
from tests.references import gradient_accumulation

V_NAMES = ("zb-v", "dualpipev")
NEW_NAMES = ("zb-h2", *V_NAMES)
WIDTH, SAMPLES = 5, 3


# ---------------------------------------------------------------- placement as data
def test_default_placement_is_round_robin_and_v_schedules_carry_theirs():
    assert build_schedule("interleaved", 3, 6, chunks=2).placement == (0, 1, 2, 0, 1, 2)
    assert build_schedule("1f1b", 4, 4).round_robin
    for name in V_NAMES:
        s = build_schedule(name, 4, 8)
        assert s.placement == (0, 1, 2, 3, 3, 2, 1, 0) and not s.round_robin
        assert [s.stages_of(r) for r in range(4)] == [[0, 7], [1, 6], [2, 5], [3, 4]]
        assert [s.rank_of(x) for x in range(8)] == list(s.placement)
    assert v_placement(3) == (0, 1, 2, 2, 1, 0) and round_robin_placement(2, 2) == (0, 1, 0, 1)


@pytest.mark.parametrize("placement,message", [
    ((0, 1, 1), r"has 3 entries; allowed: one rank per virtual stage, 4"),
    ((0, 1, 2, 0), r"placement\[2\] = 2: allowed: a rank in 0\.\.1"),
    ((0, 0, 0, 1), r"gives rank 0 stages \[0, 1, 2\]; allowed: exactly chunks=2 virtual "
                   r"stages on every rank"),
    ("v", r"not a map from virtual stage to rank"),
    ((0, 1, 1, 0.5), r"placement\[3\] = 0\.5"),
])
def test_a_placement_that_is_not_a_map_is_refused_naming_it(placement, message):
    rows = ((Action(0, "F", 0),), (Action(1, "F", 0),))
    with pytest.raises(ValueError, match=message):
        Schedule("custom", 2, 1, rows, chunks=2, placement=placement)


def test_the_validator_reads_the_placement():
    s = build_schedule("zb-v", 2, 4)
    swapped = [list(row) for row in s.rows()][::-1]  # rank 0's actions on rank 1
    with pytest.raises(ScheduleError, match=r"1F0 belongs on rank 1 \(placement \[0, 1, 1, 0\]: "
                                             r"stage s lives on rank placement\[s\]\)"):
        from_rows(swapped, name="custom", num_microbatches=4, chunks=2, placement="v")
    with pytest.raises(ScheduleError, match=r"3F0 belongs on rank 1 \(virtual stage s lives "
                                             r"on rank s % 2\)"):
        from_rows(s.rows(), name="custom", num_microbatches=4, chunks=2)  # round robin
    assert from_rows(s.rows(), name="custom", num_microbatches=4, chunks=2,
                     placement="rows").ranks == s.ranks


def test_zb_v_with_other_than_2p_stages_is_refused():
    with pytest.raises(ScheduleError, match=r"zb-v: chunks=3; its builder always makes 2 "
                                             r"chunks per rank \(2P virtual stages\): "
                                             r"allowed: 2"):
        build_schedule("zb-v", 2, 4, chunks=3)
    with pytest.raises(ScheduleError, match=r"zb-v: 2 virtual stages on 2 ranks \(chunks=1\); "
                                             r"allowed: 4 = 2P \(chunks=2\)"):
        from_rows([["0F0", "0B0"], ["1F0", "1B0"]], name="zb-v", num_microbatches=1)
    with pytest.raises(ScheduleError, match=r"dualpipev: num_microbatches=7 with num_ranks=4; "
                                             r"allowed: num_microbatches >= 2P = 8"):
        build_schedule("dualpipev", 4, 7)


@pytest.mark.parametrize("name", V_NAMES)
def test_files_carry_the_placement(name):
    s = build_schedule(name, 3, 6, num_minibatches=2)
    assert from_json(to_json(s)) == s
    text = to_csv(s)
    assert text.splitlines()[0] == "placement,0,1,2,2,1,0"
    back = from_csv(text, name=name, num_microbatches=6, chunks=2)
    assert back == s
    bad = json.loads(to_json(s))
    bad["placement"] = [0, 1, 2, 2, 7, 0]
    with pytest.raises(ScheduleError, match=r"placement\[4\] = 7: allowed: a rank in 0\.\.2"):
        from_json(json.dumps(bad))
    bad["placement"] = "sideways"
    with pytest.raises(ScheduleError, match=r"placement='sideways'; allowed: None"):
        from_json(json.dumps(bad))
    # round robin: JSON writes no placement (it has "chunks"); a CSV has no other place for
    # the chunks, so it writes the row once there are several (read back unchanged, issue 48)
    one = build_schedule("interleaved", 2, 4, chunks=2)
    assert "placement" not in to_json(one) and from_json(to_json(one)) == one
    assert to_csv(one).splitlines()[0] == "placement,0,1,0,1"
    assert from_csv(to_csv(one), name="interleaved", num_microbatches=None) == one
    assert "placement" not in to_csv(build_schedule("1f1b", 2, 4))  # one chunk: as before


def test_the_comm_plan_sends_no_message_at_the_turn_or_to_the_loss():
    s = build_schedule("zb-v", 4, 8)
    plan = plan_communication(s)
    local = {(m.kind, m.stage) for m in plan.messages.values() if m.src == m.dst}
    assert local == {("activation", 3), ("gradient", 4)}  # the turn, on rank 3
    for m in plan.messages.values():
        assert m.src == s.rank_of(m.stage) and m.dst == s.rank_of(m.consumer_stage)


# ---------------------------------------------------------------- bitwise references
def blocks(count: int, seed: int = 0) -> list[nn.Sequential]:
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(WIDTH, WIDTH)) if i == count - 1 else
            nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()) for i in range(count)]


def data(count: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(SAMPLES, WIDTH, generator=g),
             torch.randint(0, WIDTH, (SAMPLES,), generator=g)) for _ in range(count)]


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("name", NEW_NAMES)
@pytest.mark.parametrize("P", [1, 2, 4])
def test_local_executor_equals_gradient_accumulation_bitwise(name, P):
    N, K = 2 * P + 1, 2
    schedule = build_schedule(name, P, N, num_minibatches=K)
    initial = blocks(schedule.num_virtual_stages)
    mbs = data(N * K)
    model = nn.Sequential(*copy.deepcopy(initial))
    factory = functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9)
    want = gradient_accumulation(model, factory(model.parameters()), F.cross_entropy, mbs, N, K)
    stages = copy.deepcopy(initial)
    got = LocalExecutor(schedule, stages, loss_fn=F.cross_entropy,
                        optimizer_factory=factory).run(mbs)
    assert got.losses == want
    for a, b in zip((p for m in stages for p in m.parameters()), model.parameters()):
        assert torch.equal(a.detach(), b.detach())


# ---------------------------------------------------------------- distributed (gloo)
CLASSES = 4


def dist_stages(count: int):
    """One Linear(+ReLU) per virtual stage, seeded: every process builds the same."""
    from pipemare_lite.training.models import mlp
    from pipemare_lite.training.partition import PartitionedModel

    kwargs = dict(in_features=WIDTH, hidden=6, depth=count, out_features=CLASSES, seed=3)
    return PartitionedModel(mlp, count, kwargs=tuple(kwargs.items()))


def dist_data(count: int):
    g = torch.Generator().manual_seed(11)
    return [(torch.randn(SAMPLES, WIDTH, generator=g),
             torch.randint(0, CLASSES, (SAMPLES,), generator=g)) for _ in range(count)]


DIST_OPTIMIZER = functools.partial(torch.optim.SGD, lr=0.2, momentum=0.5)


@pytest.mark.dist
@pytest.mark.slow
@pytest.mark.parametrize("P", [2, 4])
def test_distributed_equals_local_and_gradient_accumulation_bitwise(P):
    from pipemare_lite.engine.distributed.jobs import DistJob, run_distributed_jobs

    N, K = 2 * P, 2
    schedules = [build_schedule(name, P, N, num_minibatches=K) for name in NEW_NAMES]
    jobs = [DistJob(s, dist_stages(s.num_virtual_stages), dist_data(N * K), F.cross_entropy,
                    DIST_OPTIMIZER, record_gradients=True) for s in schedules]
    results = run_distributed_jobs(jobs, timeout=240, op_timeout=60)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for job, got in zip(jobs, results):
            stages = job.stages()
            local = LocalExecutor(job.schedule, stages, loss_fn=F.cross_entropy,
                                  optimizer_factory=DIST_OPTIMIZER).run(job.microbatches)
            model = nn.Sequential(*job.stages())
            want = gradient_accumulation(model, DIST_OPTIMIZER(model.parameters()),
                                         F.cross_entropy, job.microbatches, N, K)
            name = job.schedule.name
            assert got.loss_by_microbatch == local.loss_by_microbatch, name
            assert list(got.loss_by_microbatch.values()) == want, name
            for s, state in enumerate(got.state_dicts):  # every stage, from its owner rank
                for key, tensor in state.items():
                    assert torch.equal(tensor, stages[s].state_dict()[key]), (name, P, s, key)
                    assert torch.equal(tensor, model[s].state_dict()[key]), (name, P, s, key)
            assert got.forward_versions == local.forward_versions
    finally:
        torch.set_num_threads(threads)


# ---------------------------------------------------------------- closed forms
@pytest.mark.parametrize("P", [1, 2, 3, 4, 6, 8])
@pytest.mark.parametrize("extra", [0, 1, 5])
@pytest.mark.parametrize("K", [1, 3])
@pytest.mark.parametrize("unit", [1.0, 0.5])
def test_bubble_and_peak_equal_the_closed_forms(P, extra, K, unit):
    from pipemare_lite.analysis import formulas as f

    costs = OpCosts(forward=unit, backward=2 * unit, input_grad=unit, weight_grad=unit)
    M = 2 * P - 1 + extra
    zb = metrics(simulate(build_schedule("zb-v", P, M, num_minibatches=K), costs))
    assert zb.makespan == pytest.approx(f.makespan_zb_v(P, M, K, unit))
    assert zb.idle_fraction == pytest.approx(f.idle_fraction_zb_v(P, M, K))
    assert zb.peak_inflight == (f.peak_inflight_zb_v(P, M),) * P
    M += 1
    dp = metrics(simulate(build_schedule("dualpipev", P, M, num_minibatches=K), costs))
    assert dp.makespan == pytest.approx(f.makespan_dualpipe_v(P, M, K, unit))
    assert dp.idle_fraction == pytest.approx(f.idle_fraction_dualpipe_v(P, M, K))
    assert dp.peak_inflight == (f.peak_inflight_dualpipe_v(P, M),) * P
    M -= 1
    h2 = metrics(simulate(build_schedule("zb-h2", P, M, num_minibatches=K), costs))
    assert h2.makespan == pytest.approx(f.makespan_zb_h2(P, M, K, unit))
    assert h2.idle_fraction == pytest.approx(f.idle_fraction_zb_h2(P, M, K))
    assert h2.peak_inflight == (f.peak_inflight_zb_h2(P, M),) * P


def test_closed_forms_refuse_too_few_microbatches():
    from pipemare_lite.analysis import formulas as f

    with pytest.raises(ValueError, match=r"M=6 < 2P-1=7; allowed: M >= 2P-1"):
        f.makespan_zb_v(4, 6)
    with pytest.raises(ValueError, match=r"M=7 < 2P=8; allowed: M >= 2P"):
        f.peak_inflight_dualpipe_v(4, 7)


# ---------------------------------------------------------------- the CLI
def test_cli_builds_the_new_names_and_reads_a_placement(tmp_path, capsys):
    from pipemare_lite.cli import main

    assert main(["schedule", "zb-v", "-P", "2", "-M", "4"]) == 0
    out = capsys.readouterr().out
    assert "placement: rank 0 holds [0, 3], rank 1 holds [1, 2]" in out
    assert "rank 0  | 0F0 0F1 0F2 3F0 3I0 3W0" in out
    assert main(["schedule", "dualpipev", "-P", "2", "-M", "4", "--save",
                 str(tmp_path / "d.csv")]) == 0
    capsys.readouterr()
    text = (tmp_path / "d.csv").read_text()
    assert text.startswith("placement,0,1,1,0\n")
    (tmp_path / "bare.csv").write_text(text.split("\n", 1)[1])  # the rows alone
    for extra in (["--placement", "v"], ["--placement", "0,1,1,0"], ["--placement", "rows"]):
        assert main(["schedule", "--from", str(tmp_path / "bare.csv"), "--json", *extra]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["placement"] == [0, 1, 1, 0] and report["chunks"] == 2
    assert main(["schedule", "--from", str(tmp_path / "d.csv"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["placement"] == [0, 1, 1, 0]
    for extra, message in ([[], r"names stage 3; allowed: 0\.\.1 .*--placement v for a V"],
                           [["--placement", "0,1"], r"placement \(0, 1\) has 2 entries; "
                                                    r"allowed: one rank per virtual stage, 4"],
                           [["--placement", "x"], r"--placement='x': allowed: loop, v, rows"]):
        assert main(["schedule", "--from", str(tmp_path / "bare.csv"), *extra]) == 2
        assert re.search(message, capsys.readouterr().err)


# ---------------------------------------------------------------- moving an order
def test_an_order_moved_to_another_placement_runs_or_says_why():
    from pipemare_lite.schedules import on_placement

    zbv = build_schedule("zb-v", 2, 4)
    same = on_placement(zbv, "v")  # onto its own placement: the same rows
    assert same.ranks == zbv.ranks and same.name == "custom" and "zb-v's order" in same.notes[-1]
    with pytest.raises(ScheduleError, match=r"deadlocks"):  # its order needs the V
        on_placement(zbv, "loop")
    looped = on_placement(build_schedule("interleaved", 2, 4, chunks=2), "loop")
    assert looped.placement == (0, 1, 0, 1)
    with pytest.raises(ValueError, match=r"unknown placement style 'w'"):
        on_placement(zbv, "w")


def test_the_explorer_switches_placement_and_shows_the_refusal():
    from pipemare_lite.figures.widgets import schedule_explorer

    w = schedule_explorer("zb-v", stages=4, microbatches=8)
    assert w.error is None and w.schedule.placement == (0, 1, 2, 3, 3, 2, 1, 0)
    rows = {r[0]: r for r in _cells(w.summary.value)}
    assert rows["makespan"][1] == rows["makespan"][3]  # measured == closed form
    w.controls["placement"].value = "loop"
    assert w.error is not None and "deadlocks" in w.error
    w.set(schedule="interleaved", chunks=2)
    assert w.error is None and w.schedule.placement == (0, 1, 2, 3, 0, 1, 2, 3)
    w.controls["placement"].value = "v"  # interleaved's order on a V: refused too
    assert "deadlocks" in w.error
    for name in ("zb-h2", "dualpipev"):
        w.set(schedule=name, placement="as built")
        rows = {r[0]: r for r in _cells(w.summary.value)}
        assert w.error is None and rows["makespan"][1] == rows["makespan"][3], name
        assert rows["idle fraction"][1] == rows["idle fraction"][3], name


def _cells(table_html: str) -> list[list[str]]:
    """The text of each table row's cells."""
    rows = re.findall(r"<tr>(.*?)</tr>", table_html)
    return [[re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<t[dh]>(.*?)</t[dh]>", row)]
            for row in rows]


# ---------------------------------------------------------------- the side-by-side table
@pytest.mark.parametrize("P,M", [(4, 8), (8, 16), (2, 6)])
def test_side_by_side_rows_are_the_closed_forms(P, M):
    from pipemare_lite.analysis import formulas as f
    from pipemare_lite.analysis.side_by_side import side_by_side_text, sync_side_by_side

    rows = {row.name: row for row in sync_side_by_side(P, M)}
    assert list(rows) == ["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "dualpipev"]
    assert rows["1f1b"].utilization == pytest.approx(f.utilization_gpipe(P, M))
    assert rows["1f1b"].peak == tuple(f.peak_inflight_1f1b(P, M, s) for s in range(P))
    assert rows["interleaved"].utilization == pytest.approx(
        1 - f.idle_fraction_interleaved(P, M, 2))
    assert rows["zb-h1"].utilization == pytest.approx(1 - f.idle_fraction_zb_h1(P, M))
    assert rows["zb-h2"].steady == pytest.approx(1.0)  # the next minibatch fills the slope
    assert rows["zb-h2"].peak == (f.peak_inflight_zb_h2(P, M),) * P
    assert rows["zb-v"].utilization == pytest.approx(1 - f.idle_fraction_zb_v(P, M))
    assert rows["zb-v"].steady == pytest.approx(1.0)
    assert rows["zb-v"].peak == (f.peak_inflight_zb_v(P, M) / 2,) * P  # half-stage chunks
    assert rows["dualpipev"].steady == pytest.approx(1 - f.idle_fraction_dualpipe_v(P, M))
    assert rows["dualpipev"].peak == (f.peak_inflight_dualpipe_v(P, M) / 2,) * P
    for name in ("gpipe", "1f1b", "interleaved", "zb-h1", "dualpipev"):  # wait for the last rank
        assert rows[name].steady == pytest.approx(rows[name].utilization)
    assert side_by_side_text(P, M).count("\n") == 8
