"""fit() speaks torch: lr schedules (and T1 on top), optimizers, loss_fn, per-stage clipping.

Each option is checked against a plainly written reference: a one-device training loop
with torch's own optimizer and scheduler classes (bitwise), or the closed-form learning
rate written out here (to rounding).
"""

from __future__ import annotations

import datetime
import math
import re

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR, StepLR

from pipemare_lite import fit
from pipemare_lite.training.data_feed import epoch_order
from pipemare_lite.training.datasets import Dataset, digits
from pipemare_lite.training.history import DivergenceError
from pipemare_lite.training.models import mlp
from pipemare_lite.training.partition import partition

EPOCHS, BATCH, N = 2, 16, 4
STEPS = EPOCHS * 64 // BATCH  # 64 training samples: 4 steps per epoch, 8 updates per stage


@pytest.fixture(scope="module")
def small_data() -> Dataset:
    d = digits(seed=0)
    return Dataset("digits-small", d.x_train[:64], d.y_train[:64], d.x_test[:40],
                   d.y_test[:40], 10, d.input_shape, d.provenance)


pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons: conftest.py


def _model(seed=0):
    return mlp(64, 16, 4, 10, seed=seed)


def plain_loop(model, data, optimizer, *, scheduler=None, loss_fn=F.cross_entropy,
               before_step=None, seed=3):
    """One device, the same data order as fit, loss/N per microbatch; returns step losses
    and the lr (of every param group) each update used."""
    losses, lrs = [], []
    for epoch in range(EPOCHS):
        order = epoch_order(64, seed, epoch)
        for k in range(64 // BATCH):
            idx = order[k * BATCH:(k + 1) * BATCH]
            x, y = data.x_train[idx], data.y_train[idx]
            step_losses = []
            size = BATCH // N
            for j in range(N):
                loss = loss_fn(model(x[size * j:size * (j + 1)]), y[size * j:size * (j + 1)])
                (loss / N).backward()
                step_losses.append(loss.item())
            if before_step is not None:
                before_step()
            lrs.append([g["lr"] for g in optimizer.param_groups])
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if scheduler is not None:
                scheduler.step()
            losses.append(sum(step_losses) / N)
    return losses, lrs


def _sync(**kwargs):
    return dict(method="1f1b", num_stages=2, num_microbatches=N, batch_size=BATCH,
                epochs=EPOCHS, seed=3) | kwargs


def _same_weights(a, b) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


# --------------------------------------------------------------------------- lr schedules


def closed_form_lr(name, k, *, lr, total, warmup=0, step_size=None, gamma=0.1):
    """The base schedules of pipemare_lite.training.lr_schedules, written out."""
    if k < warmup:
        return lr * (k + 1) / (warmup + 1)
    j = k - warmup
    if name == "cosine":
        return lr * (1 + math.cos(math.pi * j / (total - warmup))) / 2
    if name == "step":
        return lr * gamma ** (j // step_size)
    return lr


def torch_scheduler(name, optimizer, *, total, warmup, step_size, gamma):
    """The reference scheduler, built from torch's classes directly."""
    warm = (LinearLR(optimizer, start_factor=1 / (warmup + 1), total_iters=warmup)
            if warmup else None)
    if name == "constant":
        return warm
    main = (CosineAnnealingLR(optimizer, T_max=total - warmup) if name == "cosine"
            else StepLR(optimizer, step_size=step_size, gamma=gamma))
    return main if warm is None else SequentialLR(optimizer, [warm, main], milestones=[warmup])


@pytest.mark.parametrize("name, warmup, step_size, gamma", [
    ("cosine", 0, None, None), ("cosine", 3, None, None), ("step", 0, 3, 0.5),
    ("step", 2, None, None), ("constant", 3, None, None),
])
def test_named_schedules_equal_a_plain_loop_with_torch_schedulers(
    small_data, name, warmup, step_size, gamma
):
    piped, reference = _model(), _model()
    history = fit(piped, small_data, lr=0.1, momentum=0.9, lr_schedule=name,
                  lr_warmup=warmup, lr_step_size=step_size, lr_gamma=gamma, **_sync())
    opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    default_step = 64 // BATCH  # one epoch of updates
    scheduler = torch_scheduler(name, opt, total=STEPS, warmup=warmup,
                                step_size=step_size or default_step, gamma=gamma or 0.1)
    losses, lrs = plain_loop(reference, small_data, opt, scheduler=scheduler)
    assert history.loss == losses
    assert _same_weights(piped, reference)
    for stage_lr in history.stage_lr:  # every stage runs the same base schedule
        assert stage_lr == [r[0] for r in lrs]
        expected = [closed_form_lr(name, k, lr=0.1, total=STEPS, warmup=warmup,
                                   step_size=step_size or default_step, gamma=gamma or 0.1)
                    for k in range(STEPS)]
        assert stage_lr == pytest.approx(expected, rel=1e-12)
    assert history.config["lr_schedule"] == name


def test_constant_schedule_is_bitwise_the_run_without_a_schedule(small_data):
    plain_model, named_model = _model(), _model()
    plain = fit(plain_model, small_data, lr=0.05, **_sync(method="async"))
    named = fit(named_model, small_data, lr=0.05, lr_schedule="constant",
                **_sync(method="async"))
    assert named.loss == plain.loss and named.stage_lr == plain.stage_lr
    assert _same_weights(plain_model, named_model)


@pytest.mark.parametrize("schedule, kwargs", [
    ("cosine", dict(lr_warmup=2)),
    (lambda opt: StepLR(opt, step_size=3, gamma=0.5), {}),
])
def test_t1_multiplies_the_base_schedule_per_stage_and_update(small_data, schedule, kwargs):
    # PipeMare: T1 on top of the base schedule, with W = 2 flushed warm-up minibatches
    W, lr = 2, 0.05
    history = fit(_model(), small_data, method="pipemare", num_stages=4, num_microbatches=2,
                  batch_size=BATCH, epochs=EPOCHS, lr=lr, warmup=W, lr_schedule=schedule,
                  **kwargs)
    if callable(schedule):
        def base(k):
            return lr * 0.5 ** (k // 3)
    else:
        def base(k):
            return closed_form_lr("cosine", k, lr=lr, total=STEPS, warmup=2)
    K = STEPS - W  # T1's default horizon: the asynchronous updates
    taus = [max(d, 1) for d in history.forward_delay_max]  # measured from the executed trace
    assert max(taus) > 1  # some stage is stale, so T1 has something to do
    for s, rates in enumerate(history.stage_lr):
        assert len(rates) == STEPS
        for k, rate in enumerate(rates):
            p = 0.0 if k < W else 1 - min((k - W) / K, 1)  # factor 1 in the flushed warm-up
            assert rate == pytest.approx(base(k) * taus[s] ** (-p), rel=1e-12), (s, k)
        assert rates[:W] == pytest.approx([base(k) for k in range(W)], rel=1e-12)


def test_named_schedule_resumes_bitwise_from_a_checkpoint(small_data, tmp_path):
    kwargs = dict(method="pipemare", num_stages=4, num_microbatches=2, batch_size=BATCH,
                  epochs=EPOCHS, lr=0.05, optimizer="muon", lr_schedule="cosine",
                  lr_warmup=2, clip_grad_norm=0.5, warmup=1)
    straight_model = _model(5)
    straight = fit(straight_model, small_data, **kwargs)

    class Crash(Exception):
        pass

    def crash_at_5(step, history):
        if step == 5:
            raise Crash

    ck = tmp_path / "run.pt"
    with pytest.raises(Crash):
        fit(_model(5), small_data, checkpoint_path=ck, checkpoint_every=3, on_step=crash_at_5,
            **kwargs)
    resumed_model = _model(5)
    resumed = fit(resumed_model, small_data, checkpoint_path=ck, checkpoint_every=3,
                  resume=True, **kwargs)
    assert resumed.loss == straight.loss
    assert resumed.stage_lr_by_group == straight.stage_lr_by_group
    assert _same_weights(resumed_model, straight_model)


# --------------------------------------------------------------------------- optimizers


def test_adamw_equals_a_plain_loop_with_torch_adamw(small_data):
    piped, reference = _model(), _model()
    history = fit(piped, small_data, lr=0.01, optimizer="adamw", weight_decay=0.01, **_sync())
    opt = torch.optim.AdamW(reference.parameters(), lr=0.01, weight_decay=0.01)
    losses, _ = plain_loop(reference, small_data, opt)
    assert history.loss == losses and _same_weights(piped, reference)


@pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="torch.optim.Muon missing")
def test_muon_is_muon_on_matrices_and_adamw_on_the_rest(small_data):
    piped, reference = _model(), _model()
    history = fit(piped, small_data, lr=0.02, optimizer="muon", lr_schedule="cosine",
                  **_sync())
    params = list(reference.parameters())
    muon = torch.optim.Muon([p for p in params if p.ndim == 2], lr=0.02, momentum=0.95,
                            weight_decay=0.0)
    adamw = torch.optim.AdamW([p for p in params if p.ndim != 2], lr=0.02, weight_decay=0.0)
    schedulers = [CosineAnnealingLR(muon, T_max=STEPS), CosineAnnealingLR(adamw, T_max=STEPS)]

    class Both:  # two optimizers stepped together, as a plain loop would
        param_groups = muon.param_groups + adamw.param_groups

        def step(self):
            muon.step()
            adamw.step()
            for scheduler in schedulers:
                scheduler.step()

        def zero_grad(self, set_to_none=True):
            muon.zero_grad(set_to_none=set_to_none)
            adamw.zero_grad(set_to_none=set_to_none)

    losses, lrs = plain_loop(reference, small_data, Both())
    assert history.loss == losses and _same_weights(piped, reference)
    assert history.config["momentum"] == 0.95  # Muon's own default, as recorded
    for s, groups in enumerate(history.stage_lr_by_group):
        assert len(groups) == 2, f"stage {s}: a Muon group and an AdamW group"
        assert groups[0] == groups[1] == [r[0] for r in lrs]
        assert history.stage_lr[s] == groups[0]


def test_factories_equal_the_named_options(small_data):
    named_model, factory_model = _model(), _model()
    named = fit(named_model, small_data, lr=0.1, momentum=0.5, lr_schedule="step",
                lr_step_size=2, lr_gamma=0.5, **_sync(method="pipedream"))
    given = fit(factory_model, small_data,
                optimizer=lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.5),
                lr_schedule=lambda opt: StepLR(opt, step_size=2, gamma=0.5),
                **_sync(method="pipedream"))
    assert given.loss == named.loss and given.stage_lr == named.stage_lr
    assert _same_weights(named_model, factory_model)
    assert given.config["optimizer"].endswith("<lambda>")
    assert given.config["lr"] is None and given.config["momentum"] is None


def test_loss_fn_is_the_training_loss_and_evals_stay_cross_entropy(small_data):
    def smoothed(output, target):
        return F.cross_entropy(output, target, label_smoothing=0.2)

    piped, reference = _model(), _model()
    history = fit(piped, small_data, lr=0.1, loss_fn=smoothed, **_sync())
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    losses, _ = plain_loop(reference, small_data, opt, loss_fn=smoothed)
    assert history.loss == losses and _same_weights(piped, reference)
    with torch.no_grad():
        test_loss = F.cross_entropy(reference(small_data.x_test), small_data.y_test).item()
    assert history.final_loss == pytest.approx(test_loss, rel=1e-6)
    assert history.config["loss_fn"].endswith("smoothed")


# --------------------------------------------------------------------------- clipping


def test_clip_grad_norm_clips_each_stage_on_its_own(small_data):
    clip = 0.5
    piped, reference, whole = _model(), _model(), _model()
    history = fit(piped, small_data, lr=0.1, momentum=0.9, clip_grad_norm=clip, **_sync())
    stage_params = [list(stage.parameters()) for stage in partition(reference, 2)]
    norms = []

    def clip_per_stage():
        for params in stage_params:
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, clip)))

    opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    losses, _ = plain_loop(reference, small_data, opt, before_step=clip_per_stage)
    assert history.loss == losses and _same_weights(piped, reference)
    assert max(norms) > clip  # the clip did act
    # and it is not whole-model clipping: that norm spans both stages
    opt = torch.optim.SGD(whole.parameters(), lr=0.1, momentum=0.9)
    plain_loop(whole, small_data, opt,
               before_step=lambda: torch.nn.utils.clip_grad_norm_(whole.parameters(), clip))
    assert not _same_weights(whole, reference)
    assert history.config["clip_grad_norm"] == clip


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("kwargs, message", [
    (dict(optimizer="rmsprop"), r"unknown optimizer 'rmsprop'; allowed: sgd, adam, adamw"),
    (dict(optimizer="adam", momentum=0.9), r"momentum=0.9 has no effect with optimizer 'adam'"),
    (dict(optimizer="adamw", momentum=0.5), r"momentum=0.5 has no effect with optimizer 'adamw'"),
    (dict(momentum=-0.1), r"momentum must be a number >= 0, got -0.1"),
    (dict(weight_decay=-1.0), r"weight_decay must be a number >= 0, got -1.0"),
    (dict(optimizer=lambda p: torch.optim.SGD(p, lr=0.1), lr=0.1),
     r"lr=0.1 conflict with an optimizer factory"),
    (dict(optimizer=lambda p: torch.optim.SGD(p, lr=0.1), lr=None, momentum=0.9),
     r"momentum=0.9 conflict with an optimizer factory"),
    (dict(optimizer=42, lr=None), r"optimizer must be a name .* got 42"),
    (dict(lr=None), r"lr is required with optimizer 'sgd'"),
    (dict(lr_schedule="linear"), r"unknown lr_schedule 'linear'; allowed: constant, cosine, step"),
    (dict(lr_schedule="cosine", lr_warmup=-1), r"lr_warmup must be an integer >= 0.*got -1"),
    (dict(lr_schedule="cosine", lr_warmup=4), r"lr_warmup=4 updates leaves none of the run's 4"),
    (dict(lr_schedule="cosine", lr_step_size=2), r"lr_step_size=2 only applies to lr_schedule"),
    (dict(lr_gamma=0.5), r"lr_gamma=0.5 only applies to lr_schedule 'step', not 'constant'"),
    (dict(lr_schedule="step", lr_gamma=1.5), r"lr_gamma must be a number in \(0, 1\], got 1.5"),
    (dict(lr_schedule="step", lr_step_size=0), r"lr_step_size must be a positive integer"),
    (dict(lr_schedule=lambda opt: StepLR(opt, 2), lr_warmup=1),
     r"lr_warmup=1 conflict with an lr_schedule factory"),
    (dict(clip_grad_norm=0), r"clip_grad_norm must be a positive finite number or None, got 0"),
    (dict(clip_grad_norm=math.inf), r"clip_grad_norm must be .* got inf"),
    (dict(loss_fn="cross_entropy"), r"loss_fn must be a function.*got 'cross_entropy'"),
])
def test_bad_or_contradictory_options_fail_early_naming_them(small_data, kwargs, message):
    args = dict(method="1f1b", num_stages=2, num_microbatches=4, batch_size=16, epochs=1,
                lr=0.1) | kwargs
    with pytest.raises(ValueError, match=message):
        fit(_model(), small_data, **args)


# --------------------------------------------------------------------------- divergence


def test_divergence_message_uses_one_step_number(small_data):
    kwargs = dict(method="async", num_stages=4, num_microbatches=2, batch_size=8, epochs=1,
                  lr=1e3)
    with pytest.raises(DivergenceError) as caught:
        fit(_model(), small_data, on_divergence="raise", **kwargs)
    text = str(caught.value)
    steps = set(re.findall(r"\bstep (\d+)", text))
    assert len(steps) == 1, text
    step = int(steps.pop())
    microbatch = int(re.search(r"on microbatch (\d+)", text).group(1))
    assert microbatch // 2 + 1 == step  # the step the bad microbatch belongs to
    history = caught.value.history  # the history up to there travels with the error
    assert history.diverged and history.divergence == text
    assert history.steps <= step  # no step after it ran to the end
    if history.steps == step:  # it completed: its recorded loss is the non-finite one
        assert not math.isfinite(history.loss[-1])


# --------------------------------------------------------------------------- dist


@pytest.fixture()
def one_rank_group():
    if dist.is_initialized():
        pytest.skip("another process group is active in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    yield
    dist.destroy_process_group()


@pytest.mark.skipif(not hasattr(torch.optim, "Muon"), reason="torch.optim.Muon missing")
def test_dist_executor_reports_every_param_group_lr_like_the_local_one(one_rank_group):
    from pipemare_lite.engine import LocalExecutor
    from pipemare_lite.engine.distributed.executor import DistributedExecutor
    from pipemare_lite.engine.distributed.results import merge_rank_results
    from pipemare_lite.methods import build_method_schedule, method_options
    from pipemare_lite.training.lr_schedules import make_lr_schedule
    from pipemare_lite.training.optimizers import make_optimizer_factory

    schedule = build_method_schedule("pipemare", 1, 2, num_minibatches=4)
    options = method_options("pipemare")
    g = torch.Generator().manual_seed(5)
    mbs = [(torch.randn(3, 5, generator=g), torch.randint(0, 4, (3,), generator=g))
           for _ in range(schedule.total_microbatches)]
    kwargs = dict(loss_fn=F.cross_entropy, optimizer_factory=make_optimizer_factory(
        "muon", 0.02, None), method_options=options,
        lr_scheduler_factory=make_lr_schedule("cosine", 4, warmup=1))
    local = LocalExecutor(schedule, [mlp(5, 6, 1, 4, seed=2)], **kwargs).run(mbs)
    ranked = DistributedExecutor(schedule, {0: mlp(5, 6, 1, 4, seed=2)}, **kwargs).run(mbs)
    merged = merge_rank_results(schedule, [ranked])
    assert merged.group_learning_rates == local.group_learning_rates
    assert merged.update_norms == local.update_norms and len(local.update_norms[0]) == 4
    assert [len(groups) for groups in local.group_learning_rates[0]] == [2] * 4
