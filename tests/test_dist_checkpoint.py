"""Checkpoints with the distributed executor (issue #33, item 4), bitwise with local.

Two gloo ranks on loopback, one thread each, every process ended (launch()). For pipemare
(async, T1 + T2: messages in transit at every cut) and pipedream (stashed copies):

- local, uninterrupted == dist to k updates, checkpoint, a fresh dist run resumed from it;
- the dist checkpoint resumes in a *local* executor, and a local checkpoint in a dist one,
  with the same numbers (losses by microbatch, every stage's final weights). (The two cut
  in different places for the same ``stop_after_updates``: the local executor stops when
  every stage has made k updates, each dist rank at its own k-th; both cuts are states of
  the same run.)
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pipemare_lite.engine import LocalExecutor
from pipemare_lite.engine.distributed.launch import launch
from tests.dist_checkpoint_workers import dist_run, setup, sgd
from tests.timeouts import hard_time_limit

pytestmark = [pytest.mark.dist, pytest.mark.usefixtures("one_thread")]


def local(method: str):
    schedule, options, stages, mbs = setup(method)
    return LocalExecutor(schedule, stages, loss_fn=nn.functional.cross_entropy,
                         optimizer_factory=sgd, method_options=options), mbs


def as_bytes(state: dict) -> bytes:
    """A checkpoint as the bytes of a file (what fit() writes with torch.save)."""
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def merged(per_rank, key):
    out = {}
    for rank in per_rank:
        out.update(rank[key])
    return out


def same_weights(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for s in a:
        for name in a[s]:
            assert torch.equal(a[s][name], b[s][name]), (s, name)


@pytest.mark.parametrize("method, stop", [("pipemare", 3), ("pipedream", 2)])
def test_dist_checkpoints_resume_bitwise_in_either_executor(method, stop):
    reference, mbs = local(method)
    full = reference.run(mbs)
    final = {s: w.module.state_dict() for s, w in enumerate(reference.workers)}

    with hard_time_limit(240):
        saved = launch(dist_run, 2, args=(method, stop), timeout=200, num_threads=1)
        state = saved[0]["state"]
        restored = saved[1]["state"]["stages"][0]["module"].values()
        first = state["stages"][0]["module"].values()
        assert all(torch.equal(a, b) for a, b in zip(first, restored))
        assert state["activations"] or state["gradients"]  # the cut has messages in transit
        resumed = launch(dist_run, 2, args=(method, None, as_bytes(state)), timeout=200,
                         num_threads=1)
    head, tail = merged(saved, "losses"), merged(resumed, "losses")
    assert {**head, **tail} == full.loss_by_microbatch and not set(head) & set(tail)
    same_weights(merged(resumed, "weights"), final)

    # the dist checkpoint in a local executor, and a local checkpoint in a dist one
    into_local, _ = local(method)
    into_local.load_state_dict(state)
    assert {**head, **into_local.run(mbs).loss_by_microbatch} == full.loss_by_microbatch
    same_weights({s: w.module.state_dict() for s, w in enumerate(into_local.workers)}, final)
    first, _ = local(method)
    local_head = first.run(mbs, stop_after_updates=stop).loss_by_microbatch
    local_state = first.state_dict()
    with hard_time_limit(240):
        from_local = launch(dist_run, 2, args=(method, None, as_bytes(local_state)), timeout=200,
                            num_threads=1)
    from_local_losses = merged(from_local, "losses")
    assert {**local_head, **from_local_losses} == full.loss_by_microbatch
    assert not set(local_head) & set(from_local_losses)
    same_weights(merged(from_local, "weights"), final)


@pytest.mark.slow
def test_fit_with_executor_dist_checkpoints_and_resumes_bitwise(tmp_path):
    """fit(executor="dist", checkpoint_path=...) under launch(): rank 0 writes the file; a
    run resumed from it ends with the uninterrupted run's history."""
    from pipemare_lite.training.datasets import load
    from pipemare_lite.training.dist_fit import fit_worker
    from pipemare_lite.training.models import mlp

    path = tmp_path / "dist.ckpt"
    common = dict(method="pipemare", num_stages=2, num_microbatches=2, batch_size=128,
                  epochs=1, lr=0.05, progress=False, checkpoint_path=str(path),
                  checkpoint_every=4, model=(mlp, dict(in_features=64, hidden=16, depth=2,
                                                       out_features=10, seed=0)),
                  data=(load, {"name": "digits"}))
    with hard_time_limit(300):
        straight = launch(fit_worker, 2, args=(common,), timeout=240, num_threads=1)
        assert path.exists() and len(straight[0]["loss"]) == 10  # saved at step 8
        resumed = launch(fit_worker, 2, args=(dict(common, resume=True),), timeout=240,
                         num_threads=1)
    for key in ("loss", "stage_lr", "evals", "forward_delay"):
        assert resumed[0][key] == straight[0][key] == straight[1][key], key
    from pipemare_lite.engine.distributed.launch import LaunchError

    with hard_time_limit(200), pytest.raises(LaunchError) as error:  # it reads the file:
        launch(fit_worker, 2, args=(dict(common, resume=True, lr=0.1),), timeout=150)
    assert "other settings: lr=0.05 (now 0.1)" in str(error.value)
