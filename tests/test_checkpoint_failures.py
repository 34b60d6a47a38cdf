"""Checkpoint files that cannot be used fail with the file's name and the fault (issue #36,
item 7): empty, truncated, not torch, pickled objects, not a dict, no checksum, one bit
flipped, another model's checkpoint given to resume."""

from __future__ import annotations

import os
import re

import pytest
import torch

from pipemare_lite import fit
from pipemare_lite.training.checkpoint import (
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from pipemare_lite.training.datasets import Dataset, digits
from pipemare_lite.training.models import mlp


class _RunsCode:
    """Unpickling this would run ``touch marker``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _bad_files(folder):
    good = save_checkpoint(folder / "good.pt", {"step": 1, "w": torch.ones(100)})
    data = good.read_bytes()
    (folder / "truncated.pt").write_bytes(data[: len(data) // 2])
    (folder / "empty.pt").write_bytes(b"")
    (folder / "text.pt").write_text("not a checkpoint\n")
    torch.save({"x": _RunsCode(folder / "ran")}, folder / "malicious.pt")
    torch.save([1, 2, 3], folder / "list.pt")
    torch.save({"step": 1}, folder / "unchecked.pt")  # torch.save, not save_checkpoint
    return folder


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("truncated.pt", "cannot be read"),
        ("empty.pt", "is empty"),
        ("text.pt", "cannot be read"),
        ("malicious.pt", "holds a pickled object (posix.system)"),
        ("list.pt", "holds a list"),
        ("unchecked.pt", "no 'sha256' checksum"),
    ],
)
def test_an_unusable_file_is_refused_naming_it_and_the_fault(tmp_path, name, said):
    folder = _bad_files(tmp_path)
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(folder / name)
    message = str(caught.value)
    assert str(folder / name) in message and said in message
    assert "weights_only=False" not in message  # never advise running a stranger's code
    assert isinstance(caught.value, ValueError)  # the CLI's one-line input error, exit 2
    assert not (folder / "ran").exists()


def test_one_flipped_bit_fails_the_checksum(tmp_path):
    weights = torch.arange(1000, dtype=torch.float32)
    path = save_checkpoint(tmp_path / "ck.pt", {"step": 3, "w": weights})
    data = bytearray(path.read_bytes())
    at = bytes(data).index(weights[500:502].numpy().tobytes())  # inside the tensor's bytes
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=re.escape(f"checkpoint {path} fails its checksum")):
        load_checkpoint(path)


def test_an_intact_checkpoint_still_loads(tmp_path):
    path = save_checkpoint(tmp_path / "ck.pt", {"step": 3, "w": torch.ones(4), "x": [1, "a"]})
    back = load_checkpoint(path)
    assert back["step"] == 3 and back["x"] == [1, "a"] and torch.equal(back["w"], torch.ones(4))
    assert "sha256" not in back


@pytest.fixture(scope="module")
def small_data() -> Dataset:
    d = digits(seed=0)
    return Dataset("digits-small", d.x_train[:64], d.y_train[:64], d.x_test[:40],
                   d.y_test[:40], 10, d.input_shape, d.provenance)


@pytest.mark.parametrize(
    ("model", "said"),
    [
        (lambda: mlp(64, 32, 4, 10, seed=0), "is float32 [16, 64] there, float32 [32, 64] now"),
        (lambda: mlp(64, 16, 6, 10, seed=0), "written for another model"),
    ],
    ids=["wider", "deeper"],
)
def test_resuming_another_models_checkpoint_names_the_difference(small_data, tmp_path, model,
                                                                 said):
    ck = tmp_path / "run.pt"
    kwargs = dict(method="gpipe", num_stages=2, num_microbatches=2, batch_size=16, epochs=1,
                  lr=0.05, checkpoint_path=ck, checkpoint_every=2)
    fit(mlp(64, 16, 4, 10, seed=0), small_data, **kwargs)
    with pytest.raises(CheckpointError) as caught:
        fit(model(), small_data, resume=True, **kwargs)
    assert str(ck) in str(caught.value) and said in str(caught.value)
