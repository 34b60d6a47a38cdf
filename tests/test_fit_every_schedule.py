"""fit() trains every registered schedule, in every form it is given (issue 48, item 1).

Each builder of :data:`~pipemare_lite.schedules.registry.SCHEDULE_NAMES` goes through
``fit`` by name (its chunks and placement from the builder: nothing given by hand), as a
:class:`Schedule`, and from a saved JSON and CSV file (a V's CSV with its ``placement`` row).
The synchronous ones equal plain autograd (one device, gradient accumulation: loss / N per
microbatch, one optimizer step per minibatch) bitwise, one torch thread; the asynchronous
ones give the same losses and weights in every form. The V schedules also train through
the distributed executor (2 gloo ranks on loopback) to the same numbers.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pipemare_lite.schedules import build_schedule
from pipemare_lite.schedules.io import to_csv, to_json
from pipemare_lite.schedules.registry import SCHEDULE_NAMES, default_chunks, is_asynchronous
from pipemare_lite.training.data_feed import epoch_order
from pipemare_lite.training.datasets import Dataset, digits
from pipemare_lite.training.loop import fit
from pipemare_lite.training.models import mlp

P, N, BATCH, SAMPLES, EPOCHS, LR, SEED = 2, 4, 16, 64, 2, 0.1, 3
STEPS = EPOCHS * SAMPLES // BATCH
#: what a CSV cannot say, for the asynchronous schedules: a method with their weight mode
CSV_METHOD = {"pipedream": "pipedream", "2bw": "2bw", "async": "async"}
SYNC_NAMES = tuple(name for name in SCHEDULE_NAMES if not is_asynchronous(name))
ASYNC_NAMES = tuple(name for name in SCHEDULE_NAMES if is_asynchronous(name))
FORMS = ("name", "schedule", "json", "csv")


@pytest.fixture(scope="module")
def small_data() -> Dataset:
    d = digits(seed=0)
    return Dataset("digits-small", d.x_train[:SAMPLES], d.y_train[:SAMPLES], d.x_test[:40],
                   d.y_test[:40], 10, d.input_shape, d.provenance)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # bitwise: the same kernels as the reference
    yield
    torch.set_num_threads(threads)


def _model():
    return mlp(64, 16, 4, 10, seed=0)  # 4 layers: 2 stages, or 2 ranks x 2 chunks


def _fit(name: str, form: str, data: Dataset, tmp_path, **extra):
    """``fit`` of schedule ``name`` given in ``form``; returns (history, trained model)."""
    model, method = _model(), None
    sizes = {}
    if form == "name":
        schedule, sizes = name, dict(num_stages=P, num_microbatches=N)
    else:
        # sync: the one-minibatch pattern (repeated per step); async: the whole run
        built = build_schedule(name, P, N, chunks=default_chunks(name),
                               num_minibatches=STEPS if is_asynchronous(name) else 1)
        schedule = built
        if form in ("json", "csv"):
            schedule = tmp_path / f"{name}.{form}"
            schedule.write_text(to_json(built) if form == "json" else to_csv(built))
            if form == "csv":
                method = CSV_METHOD.get(name)
    history = fit(model, data, schedule=schedule, method=method, batch_size=BATCH,
                  epochs=EPOCHS, lr=LR, momentum=0.9, seed=SEED, **sizes, **extra)
    return history, model


def _autograd(data: Dataset):
    """Plain training on one device: same data order, loss / N per microbatch, one step
    per minibatch; returns (mean loss per step, model)."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    per_step = []
    for epoch in range(EPOCHS):
        order = epoch_order(SAMPLES, SEED, epoch)
        for k in range(SAMPLES // BATCH):
            idx = order[k * BATCH:(k + 1) * BATCH]
            x, y = data.x_train[idx], data.y_train[idx]
            size, losses = BATCH // N, []
            for j in range(N):
                loss = F.cross_entropy(model(x[j * size:(j + 1) * size]),
                                       y[j * size:(j + 1) * size])
                (loss / N).backward()
                losses.append(loss.item())
            optimizer.step()
            optimizer.zero_grad()
            per_step.append(sum(losses) / N)
    return per_step, model


def test_every_builder_is_covered():
    assert set(SYNC_NAMES) | set(ASYNC_NAMES) == set(SCHEDULE_NAMES)
    assert {"zb-v", "dualpipev"} <= set(SYNC_NAMES) and len(ASYNC_NAMES) == 3


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", SYNC_NAMES)
def test_sync_schedules_train_bitwise_like_autograd_in_every_form(name, form, small_data,
                                                                  tmp_path):
    history, model = _fit(name, form, small_data, tmp_path)
    want_losses, reference = _autograd(small_data)
    assert history.steps == STEPS and not history.diverged
    assert history.loss == want_losses, (name, form)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(p, q), (name, form)
    chunks = default_chunks(name)
    assert history.config["chunks"] == chunks and history.config["num_stages"] == P
    assert len(history.forward_delay) == P * chunks  # every virtual stage ran


@pytest.mark.parametrize("name", ASYNC_NAMES)
def test_async_schedules_train_the_same_in_every_form(name, small_data, tmp_path):
    runs = {form: _fit(name, form, small_data, tmp_path) for form in FORMS}
    by_name, model = runs["name"]
    assert by_name.steps == STEPS and not by_name.diverged
    assert max(by_name.forward_delay) > 0  # it is asynchronous: the stages lag
    for form, (history, other) in runs.items():
        assert history.loss == by_name.loss, (name, form)
        for p, q in zip(model.parameters(), other.parameters(), strict=True):
            assert torch.equal(p, q), (name, form)


def test_v_schedules_need_no_chunks_and_keep_their_placement(small_data, tmp_path):
    for name in ("zb-v", "dualpipev"):
        path = tmp_path / f"{name}.csv"
        path.write_text(to_csv(build_schedule(name, P, N)))
        assert path.read_text().startswith("placement,0,1,1,0\n")
        history, _ = _fit(name, "csv", small_data, tmp_path)
        assert history.config["chunks"] == 2
    with pytest.raises(ValueError, match=r"chunks=3 disagrees with schedule 'zb-v', which has 2"):
        _fit("zb-v", "schedule", small_data, tmp_path, chunks=3)


def test_a_registered_v_builder_declares_its_chunks(small_data, tmp_path, registered):
    """A plugin's V (rows of ZB-V's order) registered with chunks=2: fit by name cuts the
    model into 2P pieces on the rows' V placement, bitwise like autograd."""
    def v_rows(num_ranks, num_microbatches, *, num_minibatches, chunks, warmup):
        assert chunks == 2  # asked for the declared chunks, whatever the caller gave
        return build_schedule("zb-v", num_ranks, num_microbatches,
                              num_minibatches=num_minibatches).rows()

    registered("test-v-rows", v_rows, weight_mode="sync", chunks=2)
    assert default_chunks("test-v-rows") == 2
    built = build_schedule("test-v-rows", P, N)
    assert built.chunks == 2 and built.placement == (0, 1, 1, 0)
    history, model = _fit("test-v-rows", "name", small_data, tmp_path)
    want_losses, reference = _autograd(small_data)
    assert history.loss == want_losses and history.config["chunks"] == 2
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(p, q)
    with pytest.raises(ValueError, match=r"chunks=0; allowed: None"):
        registered("test-v-bad", v_rows, chunks=0)


@pytest.mark.dist
@pytest.mark.slow
def test_v_schedules_train_the_same_distributed(small_data, tmp_path):
    """2 gloo ranks on loopback, bounded time: by name and from a CSV file, equal to the
    local fit (losses, test loss and accuracy) and so to autograd."""
    from pipemare_lite.engine.distributed.launch import launch
    from pipemare_lite.training.dist_fit import fit_worker

    want_losses, _ = _autograd(small_data)
    common = dict(batch_size=BATCH, epochs=EPOCHS, lr=LR, momentum=0.9, seed=SEED,
                  progress=False, model=(mlp, dict(in_features=64, hidden=16, depth=4,
                                                   out_features=10, seed=0)),
                  data=(_small_digits, {}))
    for name in ("zb-v", "dualpipev"):
        path = tmp_path / f"{name}.csv"
        path.write_text(to_csv(build_schedule(name, P, N)))
        local, _ = _fit(name, "name", small_data, tmp_path)
        for schedule, sizes in ((name, dict(num_stages=P, num_microbatches=N)),
                                (str(path), {})):
            histories = launch(fit_worker, P, timeout=240, num_threads=1,
                               args=(dict(common, schedule=schedule, **sizes),))
            for history in histories:
                assert history["loss"] == want_losses == local.loss, (name, schedule)
                assert history["evals"] == local.evals, (name, schedule)
                # each device's peak, measured on its own process (issue 48, item 2)
                assert history["memory_bytes_by_rank"] == local.memory_bytes_by_rank
                assert history["memory_bytes"] == local.memory_bytes


def _small_digits() -> Dataset:
    """The module's data set, built in a rank's process (picklable by name)."""
    d = digits(seed=0)
    return Dataset("digits-small", d.x_train[:SAMPLES], d.y_train[:SAMPLES], d.x_test[:40],
                   d.y_test[:40], 10, d.input_shape, d.provenance)
