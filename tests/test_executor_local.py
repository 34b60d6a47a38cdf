"""The local executor against independent references (chapters 02-10).

- synchronous schedules == one-device gradient accumulation, bitwise (float32);
- pipedream / 2bw / async / T2 / T1 / warm-up == a hand-written Linear/ReLU pipeline that
  keeps every weight version (float64, tight tolerance);
- versions and delays recorded in the executed trace == the staleness analysis;
- bytes the executor holds == the memory model's prediction;
- stop, save, load into a fresh executor, continue == an uninterrupted run, bitwise.
"""

from __future__ import annotations

import copy
import dataclasses
import io

import pytest
import torch
from torch import nn

from pipemare_lite.analysis.memory import MemoryProfile, memory_by_kind
from pipemare_lite.analysis.staleness import versions_from_trace, weight_versions
from pipemare_lite.engine import LocalExecutor
from pipemare_lite.methods import MethodOptions
from pipemare_lite.schedules import Action, Schedule, async_pipeline, build_schedule
from tests.references import gradient_accumulation, hand_pipeline, stashed_weights_sgd

WIDTH, SAMPLES = 8, 4


pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons: conftest.py


def blocks(num_blocks: int, dtype=torch.float32, seed: int = 0) -> list[nn.Sequential]:
    """Linear+ReLU blocks, the last one a plain Linear (the logits)."""
    torch.manual_seed(seed)
    out = []
    for i in range(num_blocks):
        layer = nn.Linear(WIDTH, WIDTH).to(dtype)
        out.append(nn.Sequential(layer) if i == num_blocks - 1 else nn.Sequential(layer, nn.ReLU()))
    return out


def data(count: int, dtype=torch.float32, classes: bool = True, seed: int = 1):
    """``count`` microbatches of (x, target); targets are classes or regression values."""
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(count, SAMPLES, WIDTH, generator=g, dtype=dtype)
    if classes:
        ts = torch.randint(0, WIDTH, (count, SAMPLES), generator=g)
    else:
        ts = torch.randn(count, SAMPLES, WIDTH, generator=g, dtype=dtype)
    return [(xs[i], ts[i]) for i in range(count)]


def optimizer_factory(kind: str, lr: float = 0.05):
    if kind == "momentum":
        return lambda params: torch.optim.SGD(params, lr=lr, momentum=0.9)
    return lambda params: torch.optim.Adam(params, lr=lr / 10)


def executor_for(schedule, stage_modules, *, loss_fn=nn.functional.cross_entropy,
                 optimizer="momentum", options=None, lr=0.05):
    return LocalExecutor(schedule, stage_modules, loss_fn=loss_fn,
                         optimizer_factory=optimizer_factory(optimizer, lr),
                         method_options=options)


def flat_params(modules):
    return [p.detach() for m in modules for p in m.parameters()]


# ---------------------------------------------------------------- sync == accumulation
@pytest.mark.parametrize("name,chunks", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2),
                                         ("zb-h1", 1)])
@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_sync_schedule_equals_gradient_accumulation_bitwise(name, chunks, optimizer):
    P, N, K = 2, 4, 3
    schedule = build_schedule(name, P, N, chunks=chunks, num_minibatches=K)
    initial = blocks(P * chunks)
    mbs = data(N * K)
    model = nn.Sequential(*copy.deepcopy(initial))
    ref_losses = gradient_accumulation(model, optimizer_factory(optimizer)(model.parameters()),
                                       nn.functional.cross_entropy, mbs, N, K)
    stages = copy.deepcopy(initial)
    result = executor_for(schedule, stages, optimizer=optimizer).run(mbs)
    assert result.losses == ref_losses
    for got, want in zip(flat_params(stages), flat_params(model)):
        assert torch.equal(got, want)


# ---------------------------------------------------------------- hand references
def hand_layers(stage_modules):
    return [[(m[0].weight.detach().clone(), m[0].bias.detach().clone(), len(m) > 1)]
            for m in stage_modules]


CASES = {  # name: (schedule builder, options, warm-up minibatches)
    "1f1b": ("1f1b", MethodOptions(), 0),
    "pipedream": ("pipedream", MethodOptions(), 0),
    "2bw": ("2bw", MethodOptions(), 0),
    "async": ("async", MethodOptions(), 0),
    "async+T2": ("async", MethodOptions(t2=True, gamma=0.6), 0),
    "async, B before F": ("async-backward-first", MethodOptions(), 0),
    "pipemare-W": ("async", MethodOptions(t1=True, t1_anneal_updates=3,
                                          t2=True,
                                          gamma=(0.5, 0.7, 0.9)), 1),
}


@pytest.mark.parametrize("shape", [(3, 2, 5), (4, 3, 4), (2, 1, 6)],
                         ids=lambda s: "P{}N{}K{}".format(*s))
@pytest.mark.parametrize("case", sorted(CASES))
def test_methods_equal_hand_written_pipeline(case, shape):
    builder, options, warmup = CASES[case]
    (P, N, K), lr = shape, 0.05
    if isinstance(options.gamma, tuple):
        options = dataclasses.replace(options, gamma=tuple(0.5 + 0.1 * s for s in range(P)))
    if builder == "async-backward-first":
        schedule = async_pipeline(P, N, K, warmup, backward_first=True)
    else:
        schedule = build_schedule(builder, P, N, num_minibatches=K, warmup=warmup)
    initial = blocks(P, torch.float64)
    mbs = data(N * K, torch.float64, classes=False)
    lr_of = None
    if options.t1:
        delays = [0] * P
        for r in weight_versions(schedule).rows:
            delays[r.stage] = max(delays[r.stage], r.forward_delay)
        taus = [max(d, 1) for d in delays]
        K1 = options.t1_anneal_updates

        def lr_of(s, k):  # T1 is off during the flushed warm-up; its clock starts at W
            if k < warmup:
                return lr
            return lr * taus[s] ** -(1 - min((k - warmup) / K1, 1))
    gammas = options.gamma if options.t2 else None
    ref_losses, ref_weights = hand_pipeline(schedule, hand_layers(initial), mbs, lr=lr,
                                            momentum=0.9, gamma=gammas, lr_of=lr_of)
    stages = copy.deepcopy(initial)
    result = executor_for(schedule, stages, loss_fn=nn.functional.mse_loss, options=options,
                          lr=lr).run(mbs)
    torch.testing.assert_close(torch.tensor(result.losses, dtype=torch.float64),
                               torch.tensor(ref_losses, dtype=torch.float64), rtol=1e-12, atol=0)
    for module, [(w, b)] in zip(stages, ref_weights):
        torch.testing.assert_close(module[0].weight.detach(), w, rtol=1e-10, atol=1e-13)
        torch.testing.assert_close(module[0].bias.detach(), b, rtol=1e-10, atol=1e-13)


# ---------------------------------------------------------------- trace == staleness
@pytest.mark.parametrize("name,chunks,warmup", [
    ("gpipe", 1, 0), ("interleaved", 2, 0), ("zb-h1", 1, 0), ("pipedream", 1, 0),
    ("2bw", 1, 0), ("async", 1, 0), ("async", 1, 2), ("zb-v", 2, 0), ("dualpipev", 2, 0)])
def test_versions_in_trace_equal_staleness_analysis(name, chunks, warmup):
    P, N, K = 3, 6 if name == "dualpipev" else 3, 4  # DualPipeV needs N >= 2P
    schedule = build_schedule(name, P, N, chunks=chunks, num_minibatches=K,
                              warmup=warmup)
    options = MethodOptions(t2=schedule.weight_mode == "async")
    result = executor_for(schedule, blocks(P * chunks), options=options).run(data(N * K))
    table = weight_versions(schedule)
    assert len(result.trace.entries) == sum(len(row) for row in schedule.ranks)
    versions = result.trace.extra["versions"]
    for row in table.rows:
        key = (row.stage, row.microbatch)
        assert result.forward_versions[key] == row.version_at_forward
        assert result.backward_versions[key] == row.version_at_backward
        assert result.distances[key] == row.discrepancy
        assert versions[f"{row.stage}F{row.microbatch}"] == row.version_at_forward
    for rank, row in enumerate(schedule.ranks):  # each rank ran its own actions in order
        assert [e.action for e in result.trace.for_rank(rank)] == list(row)
    assert result.trace.source == "measured" and result.trace.unit == "s"
    # the table read back from the recorded trace (applied versions from the recorded U's)
    assert versions_from_trace(result.trace).rows == table.rows


def test_backward_first_async_runs_and_its_recorded_versions_equal_the_analysis():
    P, N, K = 3, 2, 5
    schedule = async_pipeline(P, N, K, backward_first=True)
    result = executor_for(schedule, blocks(P)).run(data(N * K))
    measured = versions_from_trace(result.trace)
    assert measured.rows == weight_versions(schedule).rows
    usual = executor_for(build_schedule("async", P, N, num_minibatches=K), blocks(P)).run(
        data(N * K))
    # the same microbatches, and the backward-first forwards are never staler
    before = {(r.stage, r.microbatch): r.forward_delay
              for r in versions_from_trace(usual.trace).rows}
    delays = [(before[(r.stage, r.microbatch)], r.forward_delay) for r in measured.rows
              if r.forward_delay is not None]
    assert all(old - 1 <= new <= old for old, new in delays)
    assert any(new == old - 1 for old, new in delays)


def test_versions_from_trace_needs_a_recorded_trace():
    from pipemare_lite.analysis.simulate import simulate

    with pytest.raises(ValueError, match="records no weight versions"):
        versions_from_trace(simulate(build_schedule("async", 2, 2, num_minibatches=2)))


# ---------------------------------------------------------------- bytes == memory model
def saved_bytes_of_one_microbatch(module, x, target=None, loss_fn=None, first=False):
    """Independent count: distinct non-parameter tensors a plain forward saves."""
    params = {id(p) for p in module.parameters()}
    seen = {}

    def pack(t):
        if id(t) not in params and (t._base is None or id(t._base) not in params):
            seen[(t.data_ptr(), t.nbytes)] = t.nbytes
        return t

    x = x.detach().clone().requires_grad_(not first)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = module(x)
        if loss_fn is not None:
            loss_fn(y, target)
    return sum(seen.values()), y.detach()


@pytest.mark.parametrize("name,t2,optimizer,chunks", [
    ("gpipe", False, "momentum", 1), ("1f1b", False, "momentum", 1),
    ("zb-h1", False, "momentum", 1), ("interleaved", False, "momentum", 2),
    ("pipedream", False, "momentum", 1), ("2bw", False, "momentum", 1),
    ("async", True, "momentum", 1), ("async", False, "sgd", 1),
    ("zb-h2", False, "momentum", 1), ("zb-v", False, "momentum", 2),  # placement: a V
    ("dualpipev", False, "momentum", 2)])
def test_bytes_held_equal_memory_model(name, t2, optimizer, chunks):
    P, N, K = 3, 6 if name == "dualpipev" else 3, 3  # DualPipeV needs N >= 2P
    schedule = build_schedule(name, P, N, num_minibatches=K, chunks=chunks)
    stages = blocks(P * chunks)
    mbs = data(N * K)
    activation_bytes, h = [], mbs[0][0]
    for s, module in enumerate(stages):
        last = s == len(stages) - 1
        count, h = saved_bytes_of_one_microbatch(
            module, h, mbs[0][1], nn.functional.cross_entropy if last else None, first=s == 0)
        activation_bytes.append(count)
    profile = MemoryProfile(param_bytes=[sum(p.nbytes for p in m.parameters()) for m in stages],
                            activation_bytes=activation_bytes, optimizer=optimizer)
    factory = (optimizer_factory("momentum") if optimizer == "momentum"
               else (lambda params: torch.optim.SGD(params, lr=0.05)))
    executor = LocalExecutor(schedule, stages, loss_fn=nn.functional.cross_entropy,
                             optimizer_factory=factory,
                             method_options=MethodOptions(t2=t2))
    result = executor.run(mbs)
    predicted = memory_by_kind(schedule, profile, t2=t2)
    for rank in range(P):
        for kind in ("weights", "stash", "t2_buffer", "optimizer", "activations"):
            assert result.peak_bytes_by_rank[rank][kind] == predicted[rank][kind], (rank, kind)
            if chunks == 1:
                assert result.peak_bytes[rank][kind] == predicted[rank][kind], (rank, kind)


# ---------------------------------------------------------------- checkpoint / resume
RESUME_CASES = {
    "pipemare+adam": ("async", MethodOptions(t1=True, t1_anneal_updates=4,
                                             t2=True, gamma=0.7), "adam", 1),
    "pipedream": ("pipedream", MethodOptions(), "momentum", 0),
    "2bw": ("2bw", MethodOptions(), "momentum", 0),
    "zb-h1": ("zb-h1", MethodOptions(), "adam", 0),
}


@pytest.mark.parametrize("case", sorted(RESUME_CASES))
def test_stop_save_load_continue_is_bitwise(case):
    builder, options, optimizer, warmup = RESUME_CASES[case]
    P, N, K, stop = 3, 2, 5, 3
    schedule = build_schedule(builder, P, N, num_minibatches=K, warmup=warmup)
    initial = blocks(P)
    mbs = data(N * K)

    straight_stages = copy.deepcopy(initial)
    straight = executor_for(schedule, straight_stages, optimizer=optimizer,
                            options=options).run(mbs)

    first = executor_for(schedule, copy.deepcopy(initial), optimizer=optimizer, options=options)
    part1 = first.run(mbs, stop_after_updates=stop)
    assert not first.finished
    in_flight = sum(len(w.pending) for w in first.workers)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    del first
    buffer.seek(0)
    resumed_stages = copy.deepcopy(initial)
    second = executor_for(schedule, resumed_stages, optimizer=optimizer, options=options)
    second.load_state_dict(torch.load(buffer, weights_only=False))
    part2 = second.run(mbs)

    assert part1.losses + part2.losses == straight.losses
    for got, want in zip(flat_params(resumed_stages), flat_params(straight_stages)):
        assert torch.equal(got, want)
    # per stage: the two parts' lists make the straight run's
    rates = {s: part1.learning_rates[s] + part2.learning_rates[s] for s in part1.learning_rates}
    assert rates == straight.learning_rates
    norms = {s: part1.update_norms[s] + part2.update_norms[s] for s in part1.update_norms}
    assert norms == straight.update_norms
    if builder in ("async", "pipedream", "2bw"):
        assert in_flight > 0  # the case really restores microbatches mid-flight


def test_streaming_one_minibatch_at_a_time_equals_one_run():
    P, N, K = 3, 2, 4
    schedule = build_schedule("async", P, N, num_minibatches=K)
    options = MethodOptions(t2=True, t1=True)
    initial, mbs = blocks(P), data(N * K)
    whole_stages = copy.deepcopy(initial)
    whole = executor_for(schedule, whole_stages, options=options).run(mbs)
    stream_stages = copy.deepcopy(initial)
    executor = executor_for(schedule, stream_stages, options=options)
    losses, entries = [], 0
    for k in range(1, K + 1):
        piece = executor.run(mbs, stop_after_updates=k)
        losses += piece.losses
        entries += len(piece.trace.entries)
    assert executor.finished and losses == whole.losses
    assert executor.run(mbs, stop_after_updates=K + 1).losses == []  # past the end: no-op
    assert entries == len(whole.trace.entries)
    for got, want in zip(flat_params(stream_stages), flat_params(whole_stages)):
        assert torch.equal(got, want)


def test_too_few_microbatches_is_an_early_error():
    schedule = build_schedule("gpipe", 2, 2, num_minibatches=2)
    with pytest.raises(ValueError, match="runs 4 microbatches .2 x 2., got 3"):
        executor_for(schedule, blocks(2)).run(data(3))


# ---------------------------------------------------------------- T1 inside the executor
def test_t1_learning_rates_follow_the_formula_per_stage_and_update():
    P, N, K, horizon, lr = 4, 2, 6, 4, 0.05
    schedule = build_schedule("async", P, N, num_minibatches=K)
    options = MethodOptions(t1=True, t1_anneal_updates=horizon)
    result = executor_for(schedule, blocks(P), options=options, lr=lr).run(data(N * K))
    for s in range(P):
        measured = max(r.forward_delay for r in weight_versions(schedule).rows
                       if r.stage == s and r.forward_delay is not None)
        tau = max(measured, 1)
        expected = [lr * tau ** -(1 - min(k / horizon, 1)) for k in range(K)]
        assert result.learning_rates[s] == pytest.approx(expected, rel=1e-15)
    assert result.learning_rates[0][0] < result.learning_rates[P - 1][0]  # stage 0 is stalest


@pytest.mark.parametrize("warmup", [1, 3])
def test_t1_is_off_during_warm_up_and_anneals_over_the_async_updates(warmup):
    # PipeMare-W: W flushed minibatches (no delay, so no T1), then T1 with its clock at 0
    # on the first asynchronous update; the default horizon is the async minibatches K - W
    P, N, K, lr = 3, 2, 7, 0.05
    schedule = build_schedule("async", P, N, num_minibatches=K, warmup=warmup)
    options = MethodOptions(t1=True, warmup=warmup)
    result = executor_for(schedule, blocks(P), options=options, lr=lr).run(data(N * K))
    rows = weight_versions(schedule).rows
    asynchronous = K - warmup
    for s in range(P):
        tau = max(1, max(r.forward_delay for r in rows
                         if r.stage == s and r.forward_delay is not None))
        assert tau > 1 or s == P - 1  # the async part is stale: T1 has something to do
        expected = [lr] * warmup + [lr * tau ** -(1 - j / asynchronous)
                                    for j in range(asynchronous)]
        assert result.learning_rates[s] == pytest.approx(expected, rel=1e-15)
    # the warm-up updates really were synchronous: delay 0 for their microbatches
    assert all(r.forward_delay == 0 for r in rows if r.microbatch < warmup * N)


def test_t1_composes_with_a_base_scheduler_in_the_executor():
    P, N, K, horizon, lr = 2, 2, 5, 3, 0.1
    schedule = build_schedule("async", P, N, num_minibatches=K)
    executor = LocalExecutor(
        schedule, blocks(P), loss_fn=nn.functional.cross_entropy,
        optimizer_factory=lambda params: torch.optim.SGD(params, lr=lr),
        lr_scheduler_factory=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 2, 0.5),
        method_options=MethodOptions(t1=True, t1_anneal_updates=horizon))
    result = executor.run(data(N * K))
    for s, tau in enumerate(executor.forward_delays):
        expected = [lr * 0.5 ** (k // 2) * tau ** -(1 - min(k / horizon, 1)) for k in range(K)]
        assert result.learning_rates[s] == pytest.approx(expected, rel=1e-15)


def two_group_sgd(lr: float):
    """SGD with two parameter groups: weights at ``lr``, biases at a tenth of it."""
    def factory(params):
        return torch.optim.SGD([{"params": params[0::2], "lr": lr},
                                {"params": params[1::2], "lr": lr / 10}])
    return factory


def test_every_parameter_groups_learning_rate_is_recorded():
    P, N, K, horizon, lr = 2, 2, 4, 3, 0.1
    schedule = build_schedule("async", P, N, num_minibatches=K)
    executor = LocalExecutor(
        schedule, blocks(P), loss_fn=nn.functional.cross_entropy,
        optimizer_factory=two_group_sgd(lr),
        method_options=MethodOptions(t1=True, t1_anneal_updates=horizon))
    result = executor.run(data(N * K))
    for s, tau in enumerate(executor.forward_delays):
        factors = [tau ** -(1 - min(k / horizon, 1)) for k in range(K)]
        rates = result.group_learning_rates[s]
        assert [len(groups) for groups in rates] == [2] * K
        assert [g[0] for g in rates] == pytest.approx([lr * f for f in factors], rel=1e-15)
        assert [g[1] for g in rates] == pytest.approx([lr / 10 * f for f in factors], rel=1e-15)
        assert result.learning_rates[s] == [g[0] for g in rates]  # the first group, as before


# ---------------------------------------------------------------- errors and devices
def test_wrong_number_of_stage_modules_is_an_early_error():
    schedule = build_schedule("gpipe", 3, 2)
    with pytest.raises(ValueError, match="3 virtual stages, got 2"):
        executor_for(schedule, blocks(2))


def test_t2_on_a_stashing_schedule_is_rejected():
    schedule = build_schedule("pipedream", 2, 2)
    with pytest.raises(ValueError, match="T2 needs an async schedule"):
        executor_for(schedule, blocks(2), options=MethodOptions(t2=True))


def test_sync_mode_with_an_update_between_f_and_b_is_rejected():
    rows = ((Action.parse("0F0"), Action.parse("0U0"), Action.parse("0B0")),
            (Action.parse("1F0"), Action.parse("1B0"), Action.parse("1U0")))
    schedule = Schedule("bad", 2, 1, rows)
    with pytest.raises(RuntimeError, match="weight_mode 'sync'"):
        executor_for(schedule, blocks(2)).run(data(1))


def test_a_schedule_that_cannot_progress_names_the_stuck_actions():
    rows = ((Action.parse("0F0"), Action.parse("0B0")),
            (Action.parse("1B0"), Action.parse("1F0")))
    schedule = Schedule("stuck", 2, 1, rows)
    with pytest.raises(RuntimeError, match="stuck.*0B0, 1B0"):
        executor_for(schedule, blocks(2)).run(data(1))


def test_explicit_devices_give_the_same_numbers():
    schedule = build_schedule("1f1b", 2, 2, num_minibatches=2)
    initial, mbs = blocks(2), data(4)
    default = executor_for(schedule, copy.deepcopy(initial)).run(mbs)
    devices = ["cpu", "cuda:0" if torch.cuda.is_available() else "cpu"]
    explicit = LocalExecutor(schedule, copy.deepcopy(initial),
                             loss_fn=nn.functional.cross_entropy,
                             optimizer_factory=optimizer_factory("momentum"),
                             devices=devices).run(mbs)
    torch.testing.assert_close(torch.tensor(explicit.losses), torch.tensor(default.losses))


# ---------------------------------------------------------------- other layer types
def _resnet():
    from pipemare_lite.training.models import small_resnet

    model = small_resnet(channels=4, blocks=1, num_classes=3, image_size=4, seed=0)
    g = torch.Generator().manual_seed(3)
    mbs = [(torch.randn(2, 1, 4, 4, generator=g), torch.randint(0, 3, (2,), generator=g))
           for _ in range(8)]
    return model, mbs, nn.functional.cross_entropy


def _transformer():
    from pipemare_lite.training.models import tiny_transformer

    vocab = 5
    model = tiny_transformer(vocab=vocab, d_model=8, heads=2, layers=1, seq_len=4, seed=0)
    g = torch.Generator().manual_seed(4)
    mbs = [(torch.randint(0, vocab, (2, 4), generator=g), torch.randint(0, vocab, (2, 4),
                                                                         generator=g))
           for _ in range(8)]

    def loss_fn(y, t):
        return nn.functional.cross_entropy(y.reshape(-1, vocab), t.reshape(-1))
    return model, mbs, loss_fn


@pytest.mark.parametrize("make", [_resnet, _transformer], ids=["resnet", "transformer"])
def test_conv_norm_attention_models_sync_bitwise_and_pipedream_stashed(make):
    from pipemare_lite.training.partition import partition

    model, mbs, loss_fn = make()
    P, N, K = 3, 2, 4
    factory = optimizer_factory("momentum")
    # sync 1F1B == gradient accumulation, bitwise
    reference = copy.deepcopy(model)
    ref_losses = gradient_accumulation(reference, factory(reference.parameters()), loss_fn,
                                       mbs, N, K)
    stages = partition(copy.deepcopy(model), P)
    result = LocalExecutor(build_schedule("1f1b", P, N, num_minibatches=K), stages,
                           loss_fn=loss_fn, optimizer_factory=factory).run(mbs)
    assert result.losses == ref_losses
    for got, want in zip(flat_params(stages), reference.parameters()):
        assert torch.equal(got, want.detach())
    # pipedream == delayed SGD at the stashed weights (Conv2d/GroupNorm/LayerNorm save the
    # parameter itself, Linear a view, Embedding nothing: all go through the same hooks)
    schedule = build_schedule("pipedream", P, N, num_minibatches=K)
    ref_losses, ref_states = stashed_weights_sgd(schedule, partition(copy.deepcopy(model), P),
                                                 mbs, loss_fn, factory)
    stages = partition(copy.deepcopy(model), P)
    result = LocalExecutor(schedule, stages, loss_fn=loss_fn, optimizer_factory=factory).run(mbs)
    assert result.losses == ref_losses
    for module, state in zip(stages, ref_states):
        for name, p in module.named_parameters():
            assert torch.equal(p.detach(), state[name]), name


def test_text_trace_lists_every_action_with_its_version():
    from pipemare_lite.engine import trace_rows, trace_text

    schedule = build_schedule("async", 2, 2, num_minibatches=3)
    result = executor_for(schedule, blocks(2)).run(data(6))
    rows = trace_rows(result.trace)
    assert sorted(r["action"] for r in rows) == sorted(str(a) for row in schedule.ranks
                                                       for a in row)
    table = weight_versions(schedule)
    for r in rows:
        if r["action"][1] == "B":
            stage, mb = int(r["action"][0]), int(r["action"][2:])
            assert r["version"] == table.row(stage, mb).version_at_backward
            assert (r["d"] or 0) == table.row(stage, mb).discrepancy
    text = trace_text(result, limit=3)
    assert len(text.splitlines()) == 5 and "more actions" in text


def test_resume_with_dropout_and_batchnorm_buffers_is_bitwise():
    # dropout draws random numbers and BatchNorm moves running statistics in every forward:
    # the rebuilt forwards of pending microbatches must do neither a second time
    def make():
        torch.manual_seed(5)
        return [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.BatchNorm1d(WIDTH), nn.ReLU(),
                              nn.Dropout(0.25)) for _ in range(2)] + [nn.Linear(WIDTH, WIDTH)]
    P, N, K = 3, 2, 4
    schedule = build_schedule("async", P, N, num_minibatches=K)
    options = MethodOptions(t2=True)
    mbs = data(N * K)
    torch.manual_seed(11)
    straight_stages = make()
    torch.manual_seed(11)
    straight = executor_for(schedule, straight_stages, options=options).run(mbs)
    torch.manual_seed(11)
    first = executor_for(schedule, make(), options=options)
    torch.manual_seed(11)
    part1 = first.run(mbs, stop_after_updates=2)
    assert sum(len(w.pending) for w in first.workers) > 0
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    torch.manual_seed(999)  # the state carries the random generator, not the caller
    resumed_stages = make()
    second = executor_for(schedule, resumed_stages, options=options)
    second.load_state_dict(torch.load(buffer, weights_only=False))
    part2 = second.run(mbs)
    assert part1.losses + part2.losses == straight.losses
    for got, want in zip(resumed_stages, straight_stages):
        for (name, a), (_, b) in zip(got.state_dict().items(), want.state_dict().items()):
            assert torch.equal(a, b), name


def test_loading_a_checkpoint_leaves_the_callers_random_stream_alone():
    # the executor's randomness (dropout) continues the checkpoint's stream; the caller's
    # stream is neither set by load_state_dict nor advanced by the resumed run, and what the
    # caller draws in between does not change the resumed run
    def make():
        torch.manual_seed(5)
        return [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Dropout(0.25))
                for _ in range(2)] + [nn.Linear(WIDTH, WIDTH)]
    P, N, K = 3, 2, 5
    schedule = build_schedule("async", P, N, num_minibatches=K)
    mbs = data(N * K)
    straight_executor = executor_for(schedule, make())
    torch.manual_seed(11)
    straight = straight_executor.run(mbs)
    first = executor_for(schedule, make())
    torch.manual_seed(11)
    part1 = first.run(mbs, stop_after_updates=2)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=False)

    torch.manual_seed(999)
    before = torch.get_rng_state()
    second = executor_for(schedule, make())
    torch.manual_seed(999)
    second.load_state_dict(saved)
    assert torch.equal(torch.get_rng_state(), before), "load_state_dict set the caller's RNG"
    torch.randn(7)  # the caller draws: the executor's stream must not notice
    drawn = torch.get_rng_state()
    part2 = second.run(mbs, stop_after_updates=4)
    assert torch.equal(torch.get_rng_state(), drawn), "the resumed run moved the caller's RNG"
    # saved again from a resumed executor: its own stream goes into the checkpoint
    third = executor_for(schedule, make())
    third.load_state_dict(second.state_dict())
    part3 = third.run(mbs)
    assert part1.losses + part2.losses + part3.losses == straight.losses
