"""Checkpoint files: atomic replace, plain contents only, RNG round trip, crash mid-write."""

import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from pipemare_lite.training.checkpoint import (
    check_plain,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)


def test_round_trip_with_optimizer_state(tmp_path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 3, "note": None}
    path = save_checkpoint(tmp_path / "ck.pt", state)
    back = load_checkpoint(path)
    assert back["step"] == 3 and back["note"] is None
    for key, value in state["model"].items():
        assert torch.equal(back["model"][key], value)
    fresh = torch.optim.Adam(torch.nn.Linear(3, 2).parameters(), lr=0.1)
    fresh.load_state_dict(back["optimizer"])  # loads under weights_only=True
    assert torch.equal(
        fresh.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"]
    )
    assert [p.name for p in tmp_path.iterdir()] == ["ck.pt"]  # no temp file left behind


def test_refuses_objects_that_would_need_pickle(tmp_path):
    with pytest.raises(TypeError, match=r"checkpoint\['bad'\] is a object"):
        save_checkpoint(tmp_path / "ck.pt", {"bad": object()})
    with pytest.raises(TypeError, match="function"):
        check_plain({"ok": [1, 2.0, "x", None, torch.zeros(1)], "f": [len]})
    assert not (tmp_path / "ck.pt").exists()


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "nope.pt")


def test_rng_state_round_trip(tmp_path):
    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    save_checkpoint(tmp_path / "rng.pt", {"rng": rng_state()})
    expected = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)])
    torch.manual_seed(9), np.random.seed(9), random.seed(9)
    set_rng_state(load_checkpoint(tmp_path / "rng.pt")["rng"])
    assert torch.equal(torch.rand(3), expected[0])
    assert np.array_equal(np.random.rand(3), expected[1])
    assert [random.random() for _ in range(3)] == expected[2]


def test_exception_during_write_keeps_old_checkpoint(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "ck.pt", {"step": 1, "w": torch.ones(1000)})

    def broken_save(obj, handle):
        handle.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, {"step": 2, "w": torch.zeros(1000)})
    monkeypatch.undo()
    assert load_checkpoint(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["ck.pt"]


def test_process_killed_mid_write_keeps_old_checkpoint(tmp_path):
    # A real crash: the child dies (os._exit, no cleanup, no finally) halfway through writing.
    path = tmp_path / "ck.pt"
    save_checkpoint(path, {"step": 1, "w": torch.ones(1000)})
    script = textwrap.dedent(
        f"""
        import os, torch
        from pipemare_lite.training.checkpoint import save_checkpoint
        def dying_save(obj, handle):
            handle.write(b"x" * 100)
            handle.flush()
            os._exit(17)
        torch.save = dying_save
        save_checkpoint({str(path)!r}, {{"step": 2, "w": torch.zeros(1000)}})
        """
    )
    result = subprocess.run([sys.executable, "-c", script], env={**os.environ}, timeout=120)
    assert result.returncode == 17
    assert load_checkpoint(path)["step"] == 1
    assert torch.equal(load_checkpoint(path)["w"], torch.ones(1000))
