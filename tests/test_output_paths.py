"""Output paths fail before training, not after it (issue #36, item 6): ``--out``,
``--jsonl`` and ``--checkpoint`` (and fit()'s ``checkpoint_path``) on a read-only disk or
under a file are refused by name at the start; a full disk names the file it could not
write instead of torch's "unexpected pos", and keeps the old checkpoint."""

from __future__ import annotations

import errno
import os
import tempfile
import time

import pytest
import torch

from pipemare_lite import cli, fit
from pipemare_lite.training.checkpoint import load_checkpoint, save_checkpoint
from pipemare_lite.training.datasets import Dataset, digits
from pipemare_lite.training.models import mlp

TRAIN = ["train", "--method", "gpipe", "--stages", "2", "--epochs", "1", "--width", "8"]


@pytest.mark.parametrize("option", ["--out", "--jsonl", "--checkpoint"])
def test_an_output_under_a_file_is_refused_before_training(tmp_path, capsys, option):
    (tmp_path / "plain-file").write_text("x")
    bad = tmp_path / "plain-file" / "run.json"
    extra = ["--checkpoint-every", "5"] if option == "--checkpoint" else []
    start = time.monotonic()
    assert cli.main([*TRAIN, option, str(bad), *extra]) == 2
    err = capsys.readouterr().err
    assert f"{option} {str(bad)!r} cannot be written" in err
    assert time.monotonic() - start < 15  # at the start, not after the run


def test_a_read_only_disk_is_refused_before_training(tmp_path, capsys, monkeypatch):
    target = tmp_path / "read-only"
    target.mkdir()
    real = tempfile.mkstemp

    def read_only(*args, dir=None, **kwargs):  # what a read-only mount answers
        if dir is not None and os.path.samefile(dir, target):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(dir))
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    start = time.monotonic()
    assert cli.main([*TRAIN, "--out", str(target / "history.json")]) == 2
    assert time.monotonic() - start < 15  # at the start, not after the run
    err = capsys.readouterr().err
    assert "--out" in err and "Read-only file system" in err and str(target) in err


@pytest.fixture(scope="module")
def data() -> Dataset:
    d = digits(seed=0)
    return Dataset("digits-small", d.x_train[:32], d.y_train[:32], d.x_test[:16],
                   d.y_test[:16], 10, d.input_shape, d.provenance)


def test_fit_refuses_an_unwritable_checkpoint_path_before_the_first_step(tmp_path, data):
    (tmp_path / "plain-file").write_text("x")
    bad = tmp_path / "plain-file" / "run.pt"
    steps = []
    with pytest.raises(ValueError, match=r"checkpoint_path .* cannot be written"):
        fit(mlp(64, 8, 2, 10), data, method="gpipe", num_stages=2, num_microbatches=2,
            batch_size=16, epochs=1, lr=0.1, checkpoint_path=bad, checkpoint_every=1,
            on_step=lambda s, h: steps.append(s))
    assert steps == []


class _FullDisk:
    """A file whose disk fills up after ``room`` bytes."""

    def __init__(self, handle, room: int):
        self.handle, self.room = handle, room

    def write(self, data) -> int:
        self.room -= len(data)
        if self.room < 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.handle.write(data)

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()


def test_a_full_disk_names_the_checkpoint_and_keeps_the_old_one(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "ck.pt", {"step": 1, "w": torch.ones(10)})
    real = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, mode: _FullDisk(real(fd, mode), 1000))
    with pytest.raises(OSError) as caught:
        save_checkpoint(path, {"step": 2, "w": torch.zeros(10_000)})
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC
    assert f"cannot write {path}: No space left on device" in str(caught.value)
    assert "unexpected pos" not in str(caught.value)
    assert load_checkpoint(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["ck.pt"]  # no temporary file left


def _fails_after(real, calls: int, room: int):
    """``os.fdopen`` whose ``calls``-th and later files have ``room`` bytes of disk."""
    count = [0]

    def fdopen(fd, *args, **kwargs):
        count[0] += 1
        handle = real(fd, *args, **kwargs)
        return _FullDisk(handle, room) if count[0] >= calls else handle
    return fdopen


def test_a_disk_filling_up_mid_run_ends_the_cli_with_one_line(tmp_path, capsys, monkeypatch):
    # the first checkpoint is written, the second finds the disk full. Before: a traceback.
    path = tmp_path / "run.pt"
    monkeypatch.setattr(os, "fdopen", _fails_after(os.fdopen, 2, 1000))
    code = cli.main([*TRAIN, "--batch-size", "64", "--checkpoint", str(path),
                     "--checkpoint-every", "1", "--no-progress"])
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.strip().splitlines() == [
        f"pipemare-lite train: error: cannot write {path}: No space left on device; the old "
        "file, if any, is unchanged"], err
    assert load_checkpoint(path)["step"] == 1  # the first checkpoint is intact


def test_a_jsonl_stream_on_a_filling_disk_ends_the_cli_with_one_line(tmp_path, capsys,
                                                                      monkeypatch):
    from pipemare_lite.cli.commands import train

    stream = tmp_path / "steps.jsonl"
    real = open

    def small_disk(file, mode="r", *args, **kwargs):
        handle = real(file, mode, *args, **kwargs)
        return _FullDisk(handle, 400) if str(file) == str(stream) else handle

    monkeypatch.setattr(train, "open", small_disk, raising=False)
    code = cli.main([*TRAIN, "--batch-size", "64", "--jsonl", str(stream), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert err.strip().splitlines() == [
        f"pipemare-lite train: error: cannot write {stream}: No space left on device"], err
