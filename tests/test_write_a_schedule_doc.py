"""docs/write-a-schedule.md works as written: its commands and its Python blocks run."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from pipemare_lite.cli import main
from pipemare_lite.schedules.io import load_schedule
from pipemare_lite.schedules.names import REGISTERED_WEIGHT_MODES
from pipemare_lite.schedules.registry import BUILDERS

ROOT = Path(__file__).parent.parent
PAGE = (ROOT / "docs" / "write-a-schedule.md").read_text()


def blocks(language: str) -> list[str]:
    """The page's fenced blocks of ``language`` ("" for none), fences read in pairs."""
    found, current, lang = [], None, None
    for line in PAGE.splitlines(keepends=True):
        if line.startswith("```"):
            if current is None:
                current, lang = [], line[3:].strip()
            else:
                if lang == language:
                    found.append("".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return found


@pytest.fixture
def in_root(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    yield tmp_path
    BUILDERS.pop("my-gpipe", None)
    REGISTERED_WEIGHT_MODES.pop("my-gpipe", None)


def test_the_csv_shown_is_the_example_file():
    shown = blocks("")[0]
    assert shown == (ROOT / "docs" / "examples" / "two_stage_1f1b.csv").read_text()


def test_the_commands_run(in_root, capsys):
    commands = [b.strip() for b in blocks("") if b.strip().startswith("python -m")]
    assert len(commands) == 3
    for command in commands:
        argv = shlex.split(command)[3:]  # after "python -m pipemare_lite"
        argv = [str(in_root / a) if a in ("run.ckpt", "saved.json") else a for a in argv]
        assert main(argv) == 0, command
    out = capsys.readouterr().out
    assert "custom: P=2 stages, M=4 microbatches" in out and "test accuracy" in out
    assert (in_root / "run.ckpt").exists()
    saved = load_schedule(in_root / "saved.json")  # --save: a file that loads back
    assert saved.rows() == load_schedule(ROOT / "docs" / "examples" / "two_stage_1f1b.csv").rows()


def test_the_json_shown_is_the_example_file():
    assert blocks("json")[0] == (ROOT / "docs" / "examples" / "two_stage_1f1b.json").read_text()


def test_the_python_blocks_run(in_root, capsys):
    python = blocks("python")
    assert len(python) == 3
    for code in python:
        exec(compile(code, "write-a-schedule.md", "exec"), {"__name__": "doc"})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "0F0,0F1,0F2,3F0,3I0,3W0 (0, 1, 1, 0) True"  # as the page says
    assert "prints `0F0,0F1,0F2,3F0,3I0,3W0 (0, 1, 1, 0) True`" in PAGE
    assert lines[1].startswith("21 True custom#")  # 1348 training digits // 64
    assert lines[2] == "True"
