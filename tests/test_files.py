"""Atomic writes: the old content survives a failing writer; no temporary file is left."""

from __future__ import annotations

import pytest

from pipemare_lite.files import atomic_write, atomic_write_bytes, atomic_write_text


def test_text_and_bytes_round_trip(tmp_path):
    target = tmp_path / "sub" / "result.json"
    atomic_write_text(target, "{\"a\": 1}\n")
    assert target.read_text() == "{\"a\": 1}\n"
    atomic_write_bytes(target, b"xyz")
    assert target.read_bytes() == b"xyz"
    assert [p.name for p in target.parent.iterdir()] == ["result.json"]


def test_failing_writer_keeps_old_content_and_cleans_up(tmp_path):
    target = tmp_path / "result.json"
    target.write_text("old")

    def half_write(handle):
        handle.write(b"new but incomplete")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(target, half_write)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_permissions_are_kept_or_default(tmp_path):
    import os

    fresh = atomic_write_text(tmp_path / "new.txt", "x")
    umask = os.umask(0)
    os.umask(umask)
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~umask
    existing = tmp_path / "script.sh"
    existing.write_text("old")
    existing.chmod(0o755)
    atomic_write_text(existing, "new")
    assert existing.stat().st_mode & 0o777 == 0o755
