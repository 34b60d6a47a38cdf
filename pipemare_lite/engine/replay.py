"""A stage's checkpoint: save its state, restore it, replay its pending graphs (chapter 10).

:meth:`StageWorker.state_dict <pipemare_lite.engine.stage.StageWorker.state_dict>` and
``load_state_dict`` are these functions; training itself lives in
:mod:`pipemare_lite.engine.stage`.

What is saved: weights, accumulated gradients, optimizer and scheduler states, versions and
held copies, the method hooks' state (T2's buffer), and every *pending* microbatch (its
forward ran, its backward not yet) as its input and the tensors its forward saved.

An autograd graph cannot be pickled, so a pending microbatch's graph is rebuilt by
*replay*: its forward runs again under a pack hook that ignores what autograd offers and
hands back the stored tensors, in the order the first forward saved them::

    first forward (before the checkpoint)         replay (after load_state_dict)
    pack(t1) -> saved[0] = t1  (or a ParamRef)    pack(t1') -> saved[0]   (stored)
    pack(t2) -> saved[1] = t2                     pack(t2') -> saved[1]   (stored)
    ...                                           ...  all of them used, or an error

The rebuilt graph has the same nodes and the same saved tensors, so its backward is bitwise
the original one. A replay consumes no randomness (the random state is forked) and leaves
the module's buffers (BatchNorm's running statistics) as they were.
"""

from __future__ import annotations

import copy

import torch


def stage_state(worker) -> dict:
    """Everything ``worker`` (a :class:`~pipemare_lite.engine.stage.StageWorker`) needs to
    continue bitwise (see the module docstring)."""
    unkept = sorted(m for m, r in worker.pending.items() if r.saved is None)
    if unkept:
        raise RuntimeError(
            f"stage {worker.stage}: microbatch(es) {unkept} ran their forward without keeping "
            "their saved tensors (the run's recording has saved_tensors=False), so they "
            "cannot be saved between forward and backward; record with saved_tensors=True "
            "(e.g. record='full') to checkpoint there")
    pending = {m: {"version": r.version, "input": r.input.detach(), "target": r.target,
                   "saved": list(r.saved),
                   # chosen at I (split backward); may alias the live weights
                   "weights": None if r.weights is None else [w.clone() for w in r.weights],
                   "grad_output": r.grad_output, "input_grad_done": r.input_grad_done}
               for m, r in worker.pending.items()}
    return {
        "module": {k: v.detach().clone() for k, v in worker.module.state_dict().items()},
        "grads": [None if p.grad is None else p.grad.clone() for p in worker.params],
        "optimizer": copy.deepcopy(worker.optimizer.state_dict()),
        "lr_scheduler": (None if worker.lr_scheduler is None
                         else copy.deepcopy(worker.lr_scheduler.state_dict())),
        "versions": worker.versions.state_dict(),
        "hooks": worker.hooks.state_dict(),
        "pending": pending,
        "unapplied": list(worker.unapplied),
    }


def load_stage_state(worker, state: dict) -> None:
    """Restore :func:`stage_state`'s output into a fresh ``worker`` and replay its pending
    microbatches' graphs."""
    if worker.pending:
        raise RuntimeError(f"stage {worker.stage}: load_state_dict needs a fresh worker")
    worker.module.load_state_dict(state["module"])
    for p, g in zip(worker.params, state["grads"]):
        p.grad = None if g is None else g.to(p.device).clone()
    worker.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
    worker.recount_optimizer_bytes()
    scheduler_state = state["lr_scheduler"]
    if scheduler_state is not None and "_base_values" in scheduler_state:
        # a checkpoint from before T1 moved onto the lr_factor hook: its scheduler was T1's
        # LRRescheduling, the groups held T1's product; now they hold the base's lr
        for group, lr in zip(worker.optimizer.param_groups, scheduler_state["_base_values"]):
            group["lr"] = lr
        scheduler_state = scheduler_state["base"]
    if worker.lr_scheduler is not None and scheduler_state is not None:
        worker.lr_scheduler.load_state_dict(copy.deepcopy(scheduler_state))
    worker.versions.load_state_dict(state["versions"])
    hooks_state = state.get("hooks", state.get("t2"))  # "t2": checkpoints before hooks
    if hooks_state is not None:
        worker.hooks.load_state_dict(hooks_state)
    worker.unapplied = list(state.get("unapplied", []))  # absent: written before delays
    for m in sorted(state["pending"]):
        replay_pending(worker, m, state["pending"][m])


def replay_pending(worker, microbatch: int, stored: dict) -> None:
    """Rebuild one pending microbatch's graph from its stored saved tensors."""
    record = worker._new_record(microbatch, stored["version"], stored["input"], stored["target"])
    queue = list(stored["saved"])

    def pack(tensor: torch.Tensor):  # what autograd offers is ignored (see above)
        record.saved.append(queue.pop(0))
        return record.saved[-1]

    devices = [worker.device.index or 0] if worker.device.type == "cuda" else []
    buffers = [b.clone() for b in worker.module.buffers()]  # e.g. BatchNorm running stats
    with torch.random.fork_rng(devices=devices):  # a replay must not consume randomness
        worker._build_graph(record, pack=pack)
    with torch.no_grad():  # nor move the module's buffers a second time
        for buffer, before in zip(worker.module.buffers(), buffers):
            buffer.copy_(before)
    if queue:
        raise RuntimeError(f"stage {worker.stage}: replay of microbatch {microbatch} used "
                           f"{len(record.saved)} of {len(stored['saved'])} saved tensors")
    record.weights = stored["weights"]
    record.grad_output = stored["grad_output"]
    record.input_grad_done = stored["input_grad_done"]
    worker.pending[microbatch] = record
    worker._activation_bytes += record.saved_bytes
