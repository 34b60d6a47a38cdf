"""fit() on data as torch has it (issue 44, item 1): DataLoaders, TensorDatasets, any iterable
of (inputs, targets) batches, targets of any dtype, evaluation batches or a function."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pipemare_lite.training.batches import BatchMicrobatches, evaluate_batches
from pipemare_lite.training.datasets import Dataset, microbatches
from pipemare_lite.training.loop import fit
from tests.references import gradient_accumulation

pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons: conftest.py

N, BATCH, EPOCHS = 4, 16, 2


def _regression(num=64, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(num, 6, generator=generator)
    return x, (x[:, :3].sum(1, keepdim=True) - x[:, 3:].prod(1, keepdim=True))


def _net(seed=0, out=1):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, out))


def _sync(**kwargs):
    return dict(method="1f1b", num_stages=2, num_microbatches=N, epochs=EPOCHS, lr=0.05,
                progress=False) | kwargs


def test_a_dataloader_trains_a_regression_as_gradient_accumulation_does():
    x, y = _regression()
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH)
    model, reference = _net(), _net()
    history = fit(model, loader, loss_fn=F.mse_loss, **_sync())

    batches = [microbatches(xb, yb, N) for xb, yb in loader] * EPOCHS
    flat = [mb for step in batches for mb in step]
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
    losses = gradient_accumulation(reference, optimizer, F.mse_loss, flat, N, len(batches))

    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), reference.parameters()))
    expected = [sum(losses[k * N:(k + 1) * N]) / N for k in range(len(batches))]
    assert history.loss == pytest.approx(expected, rel=1e-12, abs=0)
    assert history.config["batch_size"] == BATCH and history.config["dataset"] == "DataLoader"
    assert history.evals == []  # no eval_data, no Dataset test split: nothing measured


def test_a_tensor_dataset_is_fed_like_the_books_dataset():
    torch.manual_seed(1)
    x, y = torch.randn(64, 6), torch.randint(0, 3, (64,))
    book = Dataset("mine", x, y, x[:8], y[:8], 3, (6,), "test tensors")
    a, b = _net(out=3), _net(out=3)
    fit(a, book, batch_size=BATCH, seed=5, **_sync())
    fit(b, TensorDataset(x, y), batch_size=BATCH, seed=5, **_sync())
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_evaluation_batches_measure_loss_and_accuracy_only_where_it_means_something():
    x, y = _regression(40, seed=3)
    model = _net()
    batches = [(x[:24], y[:24]), (x[24:], y[24:])]
    measured = evaluate_batches([model], batches, F.mse_loss)
    with torch.no_grad():
        plain = float(((model(x) - y) ** 2).mean())
    assert measured["accuracy"] is None
    assert measured["loss"] == pytest.approx(plain, rel=1e-6)

    labels = torch.arange(40) % 3
    classifier = _net(out=3)
    measured = evaluate_batches([classifier], [(x, labels)], F.mse_loss)  # labels: CE
    with torch.no_grad():
        logits = classifier(x)
    assert measured["accuracy"] == int((logits.argmax(1) == labels).sum()) / 40
    assert measured["loss"] == pytest.approx(float(F.cross_entropy(logits, labels)), rel=1e-6)
    with pytest.raises(ValueError, match="no class labels.*give fit\\(\\) a loss_fn"):
        evaluate_batches([model], batches, None)


def test_fit_records_eval_batches_or_an_eval_function():
    x, y = _regression()
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH)
    history = fit(_net(), loader, loss_fn=F.mse_loss, eval_data=[(x[:8], y[:8])], **_sync())
    assert [e["step"] for e in history.evals] == [4, 8]
    assert history.final_accuracy is None and history.final_loss > 0

    seen = []

    def measure(model):
        seen.append(model(x[:2]).shape)
        return {"loss": 1.5, "r2": 0.25}

    history = fit(_net(), loader, loss_fn=F.mse_loss, eval_data=measure, **_sync(epochs=1))
    assert seen == [torch.Size([2, 1])]
    assert history.evals == [{"epoch": 1, "step": 4, "loss": 1.5, "accuracy": None,
                              "r2": 0.25}]


def test_bad_data_is_refused_naming_what_is_allowed():
    x, y = _regression()
    with pytest.raises(ValueError, match="batch size 10 does not split evenly into 4"):
        fit(_net(), DataLoader(TensorDataset(x, y), batch_size=10), loss_fn=F.mse_loss,
            **_sync())
    with pytest.raises(ValueError, match="last batch has batch size 6 .* into 4 equal"):
        fit(_net(), DataLoader(TensorDataset(x[:54], y[:54]), batch_size=16),
            loss_fn=F.mse_loss, **_sync())
    with pytest.raises(ValueError, match="last batch has 4 samples .* executor 'dist' needs "
                                         "batches of one size: pass drop_last=True"):
        fit(_net(), DataLoader(TensorDataset(x[:52], y[:52]), batch_size=16),
            loss_fn=F.mse_loss, executor="dist", **_sync())
    with pytest.raises(ValueError, match="batch 1 of epoch 0 has batch size 6, which does "
                                         "not split into 4 equal microbatches"):
        fit(_net(), [(x[:16], y[:16]), (x[:6], y[:6])], batch_size=16, loss_fn=F.mse_loss,
            **_sync())
    with pytest.raises(TypeError, match="one-pass iterator"):
        fit(_net(), iter([(x[:16], y[:16])]), loss_fn=F.mse_loss, **_sync())
    with pytest.raises(TypeError, match="samples, not batches.*DataLoader"):
        fit(_net(), torch.utils.data.StackDataset(x, y), loss_fn=F.mse_loss, **_sync())
    with pytest.raises(ValueError, match="batch_size=32 but the data's batches hold 16"):
        fit(_net(), DataLoader(TensorDataset(x, y), batch_size=16), batch_size=32,
            loss_fn=F.mse_loss, **_sync())
    with pytest.raises(ValueError, match="batch_size is required"):
        fit(_net(), TensorDataset(x, y), loss_fn=F.mse_loss, **_sync())
    with pytest.raises(TypeError, match="eval_data is a one-pass iterator"):
        fit(_net(), DataLoader(TensorDataset(x, y), batch_size=16), loss_fn=F.mse_loss,
            eval_data=(b for b in [(x, y)]), **_sync())


def _seeded_loader(x, y, shuffle=True):
    return DataLoader(TensorDataset(x, y), batch_size=12, shuffle=shuffle,
                      generator=torch.Generator().manual_seed(7))


def test_batch_feed_reads_in_order_and_finds_its_place_from_the_start():
    x, y = _regression(48)
    feed = BatchMicrobatches(_seeded_loader(x, y), 3, epochs=2, keep_steps=1)
    assert len(feed) == 2 * 4 * 3
    forward = [feed[m] for m in range(len(feed))]
    epoch0 = torch.cat([forward[m][0] for m in range(12)])
    assert sorted(epoch0[:, 0].tolist()) == sorted(x[:, 0].tolist())  # each sample once
    # a resumed run: a fresh loader, read from its first batch up to step 6
    again = BatchMicrobatches(_seeded_loader(x, y), 3, epochs=2, keep_steps=1)
    assert torch.equal(again[20][0], forward[20][0])

    fixed = BatchMicrobatches(_seeded_loader(x, y, shuffle=False), 3, epochs=2, keep_steps=1)
    late, early = fixed[22], fixed[1]  # step 0 was dropped: replayed from the start
    assert torch.equal(early[0], x[4:8]) and torch.equal(late[1], y[40:44])


def test_fit_warns_once_when_torchs_default_thread_count_is_in_force(monkeypatch):
    from pipemare_lite.training import loop

    x, y = _regression(32)
    loader = DataLoader(TensorDataset(x, y), batch_size=16)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(loop, "_THREADS_WARNED", False)
    torch.set_num_threads(2)  # the one_thread fixture restores 1 for the next tests
    try:
        with pytest.warns(UserWarning, match="default of 2 threads.*set_num_threads\\(1\\)"):
            fit(_net(), loader, loss_fn=F.mse_loss, **_sync(epochs=1))
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per process: no second warning
            fit(_net(), loader, loss_fn=F.mse_loss, **_sync(epochs=1))
        monkeypatch.setattr(loop, "_THREADS_WARNED", False)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's choice: no warning
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fit(_net(), loader, loss_fn=F.mse_loss, **_sync(epochs=1))
    finally:
        torch.set_num_threads(1)
