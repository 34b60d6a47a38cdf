"""No host sync per microbatch (issue 44, item 4): the last stage keeps each loss as a
tensor and the executor reads a run's losses to the host at once, at its end: one
``tolist()`` per run (one step in fit), no ``item()`` per microbatch; the values are those
``item()`` gives, bitwise. Under ``fit(record="losses")`` that read is the only host read
of a tensor (``item``, ``tolist``, ``float``, ``int``, ``bool``), whatever N.

With ``fit(loss_reads_every=K)`` the losses stay tensors and K steps cost ONE read
(``"end"``: none until the end, an evaluation or a checkpoint), locally and on two gloo
ranks; the history is bitwise the per-step run's, and a run that diverges (a non-finite
loss, the blow-up rule) reports the same step with the same message, though it trained
on past it."""

from __future__ import annotations

import contextlib
import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from pipemare_lite.engine.distributed.launch import launch
from pipemare_lite.engine.local import LocalExecutor
from pipemare_lite.schedules.registry import build_schedule
from pipemare_lite.training.blow_up import BlowUpRule
from pipemare_lite.training.loop import fit
from tests.references import gradient_accumulation
from tests.test_executor_local import blocks, data
from tests.timeouts import hard_time_limit

pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons: conftest.py


def _count_reads(monkeypatch, names) -> dict:
    """Count every call of the torch.Tensor methods ``names`` (host reads of a value)."""
    reads = dict.fromkeys(names, 0)
    for name in names:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            reads[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return reads


def test_a_runs_losses_are_read_once_at_its_end(monkeypatch):
    steps, n = 3, 4
    stages, mbs = blocks(2), data(steps * n)

    def sgd(params):
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)

    plain = nn.Sequential(*copy.deepcopy(stages))
    want = gradient_accumulation(plain, sgd(plain.parameters()), nn.functional.cross_entropy,
                                 mbs, n, steps)  # item() per microbatch, plainly
    executor = LocalExecutor(build_schedule("1f1b", 2, n, num_minibatches=steps), stages,
                             loss_fn=nn.functional.cross_entropy, optimizer_factory=sgd,
                             record="losses")
    reads = _count_reads(monkeypatch, ("item", "tolist"))
    got = []
    for step in range(steps):
        got += executor.run(mbs, stop_after_updates=step + 1).losses
    assert reads == {"item": 0, "tolist": steps}
    assert got == want


HOST_READS = ("item", "tolist", "__float__", "__int__", "__bool__")


@pytest.mark.parametrize("method", ["1f1b", "pipemare"])
@pytest.mark.parametrize("num_microbatches", [2, 8])
def test_fit_reads_one_value_per_step_at_the_losses_level(monkeypatch, method,
                                                          num_microbatches):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(96, 6, generator=g), torch.randn(96, 1, generator=g)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
    reads = _count_reads(monkeypatch, HOST_READS)
    history = fit(model, TensorDataset(x, y), method=method, num_stages=2,
                  num_microbatches=num_microbatches, batch_size=16, epochs=1, lr=0.01,
                  loss_fn=F.mse_loss, record="losses", progress=False)
    monkeypatch.undo()
    assert len(history.loss) == 6
    assert reads == {**dict.fromkeys(HOST_READS, 0), "tolist": 6}, reads


# --------------------------------------------------------------------------- loss_reads_every

STEPS = 12  # 96 samples, batches of 8: one epoch, no evaluation (a TensorDataset)


def _regression():
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(96, 6, generator=g), torch.randn(96, 1, generator=g))


def _fit_counting(reads, *, every, method="pipemare", lr=0.01, record="losses", **settings):
    """fit with loss_reads_every=every; returns (history, [reads so far after each step],
    the model): a snapshot of ``reads`` (the counters of _count_reads) at every on_step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
    seen = []
    history = fit(model, _regression(), method=method, num_stages=2, num_microbatches=2,
                  batch_size=8, epochs=1, lr=lr, loss_fn=F.mse_loss, record=record,
                  progress=False, loss_reads_every=every,
                  on_step=lambda step, history: seen.append(dict(reads)), **settings)
    return history, seen, model


def _same_history(a, b) -> bool:
    """Equal histories, wall time aside."""
    return ({k: v for k, v in a.to_dict().items() if k != "wall_seconds"}
            == {k: v for k, v in b.to_dict().items() if k != "wall_seconds"})


def _increments(seen: list[dict]) -> list[dict]:
    """The reads each step made: what changed between on_step's snapshots (step 1's: from
    nothing)."""
    before = [dict.fromkeys(seen[0], 0), *seen[:-1]]
    return [{k: v - old[k] for k, v in now.items() if v != old[k]}
            for old, now in zip(before, seen)]


@pytest.mark.parametrize("method", ["1f1b", "pipemare"])
@pytest.mark.parametrize("every", [1, 3, 5, "end"])
def test_k_steps_cost_one_read_and_the_history_is_the_per_step_one(monkeypatch, method,
                                                                   every):
    plain, _, _ = _fit_counting({}, every=1, method=method)
    reads = _count_reads(monkeypatch, HOST_READS)
    history, seen, _ = _fit_counting(reads, every=every, method=method)
    monkeypatch.undo()
    # the reads: one per K steps since the last read, and one at the end (none before it
    # with "end"); nothing else read from a tensor
    k = STEPS if every == "end" else every
    read_at = {s for s in range(1, STEPS + 1) if s % k == 0 or s == STEPS}
    assert _increments(seen) == [{"tolist": 1} if s in read_at else {}
                                 for s in range(1, STEPS + 1)]
    assert history.loss == plain.loss and len(plain.loss) == STEPS  # bitwise
    assert _same_history(history, plain)


def test_the_end_value_reads_nothing_while_training_and_evaluations_force_a_read(monkeypatch):
    """With "end", the on_step of steps 1..11 has seen no read at all; an evaluation (here
    every 4 steps on evaluation batches) and a checkpoint read first, so their records are
    complete: the history's losses reach the step they record."""
    reads = _count_reads(monkeypatch, ("tolist",))
    _, seen, _ = _fit_counting(reads, every="end")
    assert [r["tolist"] for r in seen] == [0] * (STEPS - 1) + [1]
    monkeypatch.undo()
    x, y = _regression().tensors
    lengths = []
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
    history = fit(model, _regression(), method="1f1b", num_stages=2, num_microbatches=2,
                  batch_size=8, epochs=1, lr=0.01, loss_fn=F.mse_loss, record="losses",
                  progress=False, loss_reads_every="end", eval_every=4,
                  eval_data=[(x[:16], y[:16])],
                  on_step=lambda step, history: lengths.append(len(history.loss)))
    assert lengths == [0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12]  # 1f1b: a step, a loss
    assert [e["step"] for e in history.evals] == [4, 8, 12]


def test_a_checkpoint_reads_first_and_a_resume_continues_bitwise(tmp_path):
    ck = tmp_path / "run.pt"
    kwargs = dict(method="pipemare", lr=0.01, checkpoint_path=ck, checkpoint_every=5)
    per_step = []
    torch.manual_seed(0)
    straight = fit(nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1)), _regression(),
                   num_stages=2, num_microbatches=2, batch_size=8, epochs=1, loss_fn=F.mse_loss,
                   record="losses", progress=False,
                   on_step=lambda step, history: per_step.append(len(history.loss)),
                   method="pipemare", lr=0.01)

    class Crash(Exception):
        pass

    def crash(step, history):
        if step == 7:
            raise Crash

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
    lengths = []

    def note(step, history):
        lengths.append(len(history.loss))
        crash(step, history)

    with pytest.raises(Crash):
        fit(model, _regression(), num_stages=2, num_microbatches=2, batch_size=8, epochs=1,
            loss_fn=F.mse_loss, record="losses", progress=False, loss_reads_every="end",
            on_step=note, **kwargs)
    assert lengths[:4] == [0, 0, 0, 0]  # nothing read until the save at step 5
    assert lengths[4:] == [per_step[4]] * 3 and per_step[4] > 0  # read there (as per step)
    resumed, _, _ = _fit_counting({}, every="end", resume=True, **kwargs)
    assert resumed.loss == straight.loss


DIVERGING = [("pipemare", 50.0), ("1f1b", 50.0), ("async", 1000.0)]


@pytest.mark.parametrize("record", ["losses", "history"])
@pytest.mark.parametrize(("method", "lr"), DIVERGING)
def test_a_late_read_reports_the_same_divergence(method, lr, record):
    plain, _, _ = _fit_counting({}, every=1, method=method, lr=lr, record=record)
    assert plain.diverged and plain.divergence_step < STEPS
    for every in (4, "end"):
        late, seen, _ = _fit_counting({}, every=every, method=method, lr=lr, record=record)
        steps = len(seen)  # on_step ran once per step trained
        assert late.divergence == plain.divergence
        assert (late.diverged, late.divergence_step) == (True, plain.divergence_step)
        # (by repr: NaN equals NaN there) cut where the per-step run stopped, the
        # per-update records at that step's updates
        assert repr(late.loss) == repr(plain.loss)
        assert late.stage_lr == plain.stage_lr
        assert late.stage_lr_by_group == plain.stage_lr_by_group
        assert repr(late.stage_update_norm) == repr(plain.stage_update_norm)  # ("history")
        assert (record == "history") == bool(plain.stage_update_norm)
        assert steps >= plain.divergence_step  # it trained on to the read
        assert steps == (STEPS if every == "end" else
                         min(STEPS, -(-len(plain.stage_lr[0]) // every) * every))


def test_the_report_names_the_weights_of_the_divergence_step_not_of_the_read():
    """pipemare at lr 50: at step 10 the loss overflows with every weight still finite; by
    the read at step 12 stage 0's weights are non-finite, and the report still says what
    the per-step run saw."""
    plain, _, _ = _fit_counting({}, every=1, method="pipemare", lr=50.0)
    late, _, model = _fit_counting({}, every="end", method="pipemare", lr=50.0)
    assert "all weights still finite" in plain.divergence
    assert late.divergence == plain.divergence
    assert not all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("method", ["1f1b", "pipemare"])
def test_the_blow_up_rule_fires_at_the_same_step(method):
    rule = BlowUpRule(factor=5, window=2)
    plain, _, _ = _fit_counting({}, every=1, method=method, lr=2.5, blow_up=rule)
    assert plain.diverged and "by the blow-up rule" in plain.divergence
    assert all(math.isfinite(v) for v in plain.loss)
    for every in (5, "end"):
        late, seen, _ = _fit_counting({}, every=every, method=method, lr=2.5, blow_up=rule)
        assert len(seen) > plain.divergence_step  # trained past it
        assert (late.divergence, late.divergence_step, late.stage_lr) == (
            plain.divergence, plain.divergence_step, plain.stage_lr)
        assert late.loss == plain.loss  # all finite


@pytest.mark.parametrize("value", [0, -2, 1.5, True, "never", None, "END"])
def test_bad_values_are_refused_naming_them(value):
    with pytest.raises(ValueError, match=r"loss_reads_every must be a positive integer .* or "
                                         r"'end' .*, got " + repr(value).replace("(", r"\(")):
        _fit_counting({}, every=value)


def test_a_registered_executor_keeps_reading_every_step():
    from pipemare_lite.training.executors import EXECUTORS, local_executor, register_executor

    register_executor("plain-local", local_executor)
    try:
        with pytest.raises(ValueError, match="loss_reads_every=3 needs executor 'local' or "
                                             "'dist' .*executor 'plain-local'"):
            _fit_counting({}, every=3, executor="plain-local")
    finally:
        del EXECUTORS["plain-local"]


def test_the_cli_flag(capsys):
    from pipemare_lite.cli import main

    with pytest.raises(SystemExit) as info:
        main(["train", "--loss-reads-every", "0"])
    assert info.value.code == 2
    assert "--loss-reads-every: '0': allowed: a positive integer" in capsys.readouterr().err
    import argparse

    from pipemare_lite.cli.commands.train import add_train_arguments

    parser = add_train_arguments(argparse.ArgumentParser())
    assert parser.parse_args(["--loss-reads-every", "end"]).loss_reads_every == "end"
    assert parser.parse_args(["--loss-reads-every", "4"]).loss_reads_every == 4
    assert parser.parse_args([]).loss_reads_every == 1


def test_the_executor_keeps_unread_losses_until_read(monkeypatch):
    """LocalExecutor.run(read_losses=False): no read, an empty loss dict; read_losses()
    then reads every waiting run's at once (one tolist), each run's losses as run() reads
    them; state_dict() refuses while losses wait."""
    steps, n = 3, 4
    stages, mbs = blocks(2), data(steps * n)

    def sgd(params):
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)

    def executor(modules):
        return LocalExecutor(build_schedule("pipemare", 2, n, num_minibatches=steps),
                             modules, loss_fn=nn.functional.cross_entropy,
                             optimizer_factory=sgd, record="losses")

    read_now = executor(copy.deepcopy(stages))
    want = [read_now.run(mbs, stop_after_updates=k + 1).loss_by_microbatch
            for k in range(steps)]
    late = executor(stages)
    reads = _count_reads(monkeypatch, ("item", "tolist"))
    results = [late.run(mbs, stop_after_updates=k + 1, read_losses=False) for k in range(steps)]
    assert reads == {"item": 0, "tolist": 0}
    assert all(r.loss_by_microbatch == {} for r in results)
    with pytest.raises(RuntimeError, match="call read_losses"):
        late.state_dict()
    runs = late.read_losses()
    assert reads == {"item": 0, "tolist": 1}
    assert [run.losses for run in runs] == want
    assert [list(run.losses) for run in runs] == [list(w) for w in want]  # their order too
    assert [run.updates for run in runs] == [{0: k + 1, 1: k + 1} for k in range(steps)]
    assert late.read_losses() == []
    late.state_dict()


# --------------------------------------------------------------------------- two ranks


def fit_reading_losses_late(info, cases) -> dict:
    """Each rank: fit(executor="dist") for each of ``cases`` (keys of DIST_CASES), with the
    host reads counted at every on_step; ``{case: (history dict, [reads so far per step])}``
    (a process body for launch)."""
    from unittest import mock

    found = {}
    for name in cases:
        settings = DIST_CASES[name]
        reads = dict.fromkeys(HOST_READS, 0)
        with contextlib.ExitStack() as patches:
            for method in HOST_READS:
                original = getattr(torch.Tensor, method)

                def counted(self, *args, _name=method, _original=original, _reads=reads,
                            **kwargs):
                    _reads[_name] += 1
                    return _original(self, *args, **kwargs)

                patches.enter_context(mock.patch.object(torch.Tensor, method, counted))
            history, seen, _ = _fit_counting(reads, executor="dist", **settings)
        found[name] = (history.to_dict(), seen)
    return found


DIST_CASES = {
    **{("converging", every): dict(every=every) for every in (1, 3, "end")},
    **{("diverging", every): dict(every=every, lr=50.0) for every in (1, 4, "end")},
    **{("blow-up", every): dict(every=every, lr=2.5, blow_up=BlowUpRule(factor=5, window=2))
       for every in (1, 5)},
}


@pytest.fixture(scope="module")
def two_ranks():
    """Every case's results per rank, in one job, the converging fits after the diverging
    ones: a run that stops early (diverged) leaves messages in flight, and the next fit in
    the process group moves to a fresh group so as not to receive them (it hung before)."""
    cases = sorted(DIST_CASES, key=lambda name: name[0] == "converging")
    with hard_time_limit(300):
        return launch(fit_reading_losses_late, 2, args=(cases,), timeout=240)


def _without_wall(history: dict) -> dict:
    return {k: v for k, v in history.items() if k != "wall_seconds"}


@pytest.mark.dist
@pytest.mark.parametrize("every", [1, 3, "end"])
def test_two_ranks_read_k_steps_once_and_agree_with_the_per_step_run(two_ranks, every):
    local, _, _ = _fit_counting({}, every=1)
    for rank in two_ranks:
        plain, _ = rank[("converging", 1)]
        late, seen = rank[("converging", every)]
        assert _without_wall(late) == _without_wall(plain)
        assert late["loss"] == local.loss  # and the local executor's, bitwise
        # steps 2..11 (step 1 probes shapes, step 12 gathers at the end): a tolist per
        # read (one broadcast of K steps' losses), no other host read; with K = 1 (the
        # default) the last stage's rank too reads once a step, not before the broadcast
        k = STEPS if every == "end" else every
        steps = _increments(seen)[1:STEPS - 1]
        assert steps == [{"tolist": 1} if s % k == 0 else {} for s in range(2, STEPS)]


@pytest.mark.dist
@pytest.mark.parametrize("case", ["diverging", "blow-up"])
def test_two_ranks_report_the_same_divergence_as_the_per_step_run(two_ranks, case):
    for rank in two_ranks:
        plain, _ = rank[(case, 1)]
        assert plain["diverged"]
        for every in {"diverging": (4, "end"), "blow-up": (5,)}[case]:
            late, seen = rank[(case, every)]
            assert len(seen) > plain["divergence_step"]  # trained past it
            for key in ("divergence", "divergence_step", "loss", "stage_lr",
                        "stage_lr_by_group"):
                assert repr(late[key]) == repr(plain[key]), key  # (NaN equals NaN)
    first, second = (_without_wall(rank[(case, 1)][0]) for rank in two_ranks)
    assert repr(first) == repr(second)
