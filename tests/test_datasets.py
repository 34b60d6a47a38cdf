"""Datasets: shapes, seeded splits, task definitions checked independently, microbatching."""

import numpy as np
import pytest
import torch

from pipemare_lite.training.datasets import digits, load, microbatches, sequence_task, signals


def test_digits_shapes_range_and_disjoint_seeded_split():
    from sklearn.datasets import load_digits

    d = digits(seed=3)
    assert d.x_train.shape[1:] == (1, 8, 8) and d.x_train.dtype == torch.float32
    assert len(d.x_train) + len(d.x_test) == 1797
    assert 0.0 <= float(d.x_train.min()) and float(d.x_train.max()) <= 1.0
    # every original image appears exactly once across the two splits
    original = torch.tensor(load_digits().images / 16.0, dtype=torch.float32).reshape(1797, -1)
    together = torch.cat([d.x_train, d.x_test]).reshape(1797, -1)
    assert sorted(map(tuple, together.tolist())) == sorted(map(tuple, original.tolist()))
    again = digits(seed=3)
    assert torch.equal(d.x_train, again.x_train) and torch.equal(d.y_test, again.y_test)
    assert not torch.equal(d.y_train, digits(seed=4).y_train)
    assert "UCI" in d.provenance


def test_signals_seeded_balanced_and_not_linearly_easy():
    a, b = (
        signals(num_train=600, num_test=200, seed=1),
        signals(num_train=600, num_test=200, seed=1),
    )
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_train, b.y_train)
    assert not torch.equal(a.x_train, signals(num_train=600, num_test=200, seed=2).x_train)
    assert a.x_train.shape == (600, 40) and a.x_test.shape == (200, 40)
    counts = np.bincount(a.y_train.numpy(), minlength=10)
    assert counts.min() > 30  # roughly balanced classes
    # harder than digits: a linear classifier is far from perfect, but above chance
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(max_iter=500).fit(a.x_train.numpy(), a.y_train.numpy())
    assert 0.1 < clf.score(a.x_test.numpy(), a.y_test.numpy()) < 0.8


def test_sequence_tasks_targets_are_reversed_and_sorted():
    rev = sequence_task("reverse", vocab=10, seq_len=6, num_train=32, num_test=8, seed=0)
    for x, y in zip(rev.x_train.tolist(), rev.y_train.tolist()):
        assert y == x[::-1]
    srt = load("sort", vocab=10, seq_len=6, num_train=32, num_test=8, seed=0)
    for x, y in zip(srt.x_train.tolist(), srt.y_train.tolist()):
        assert y == sorted(x)
    assert int(srt.x_train.max()) < 10 and srt.x_train.dtype == torch.int64
    with pytest.raises(ValueError, match="unknown sequence task 'shuffle'"):
        sequence_task("shuffle")


def test_load_unknown_name():
    with pytest.raises(ValueError, match="unknown dataset 'cifar'.*digits"):
        load("cifar")


def test_microbatches_split_in_order_and_reject_uneven_batches():
    x, y = torch.arange(12.0).reshape(12, 1), torch.arange(12)
    parts = microbatches(x, y, 4)
    assert len(parts) == 4 and all(len(px) == 3 for px, _ in parts)
    assert torch.equal(torch.cat([px for px, _ in parts]), x)
    assert torch.equal(torch.cat([py for _, py in parts]), y)
    with pytest.raises(ValueError, match="batch size 12 does not split evenly into 5 microbatches"):
        microbatches(x, y, 5)
    with pytest.raises(ValueError, match="positive integer"):
        microbatches(x, y, 0)
