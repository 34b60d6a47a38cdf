"""The digits cache: the same tensors as a fresh load, no pickle, damaged files rebuilt."""

from __future__ import annotations

import numpy as np
import torch

from pipemare_lite.training.data_cache import cached_arrays
from pipemare_lite.training.datasets import digits


def test_cached_digits_equal_a_fresh_load_and_skip_sklearn(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPEMARE_CACHE", "off")
    fresh = digits(seed=3)
    monkeypatch.setenv("PIPEMARE_CACHE", str(tmp_path))
    filled = digits(seed=3)
    (path,) = tmp_path.glob("digits-sklearn-*.npz")
    calls = []
    monkeypatch.setattr("pipemare_lite.training.datasets._load_digits", lambda: calls.append(1))
    cached = digits(seed=3)
    assert calls == []  # read from the file, scikit-learn not asked
    for data in (filled, cached):
        for name in ("x_train", "y_train", "x_test", "y_test"):
            assert torch.equal(getattr(data, name), getattr(fresh, name)), name
    with np.load(path, allow_pickle=False) as stored:  # plain arrays, loadable without pickle
        assert sorted(stored.files) == ["images", "target"]


def test_a_damaged_cache_file_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPEMARE_CACHE", str(tmp_path))
    (tmp_path / "k.npz").write_bytes(b"not an npz file")
    arrays = cached_arrays("k", lambda: {"a": np.arange(3)})
    assert arrays["a"].tolist() == [0, 1, 2]
    assert cached_arrays("k", lambda: {"a": np.zeros(1)})["a"].tolist() == [0, 1, 2]


def test_a_truncated_npz_is_rebuilt(tmp_path, monkeypatch):
    # a file cut short mid-write by another tool starts like a zip but is not one
    monkeypatch.setenv("PIPEMARE_CACHE", str(tmp_path))
    cached_arrays("k", lambda: {"a": np.arange(3)})
    whole = (tmp_path / "k.npz").read_bytes()
    (tmp_path / "k.npz").write_bytes(whole[: len(whole) // 2])
    assert cached_arrays("k", lambda: {"a": np.arange(4)})["a"].tolist() == [0, 1, 2, 3]
