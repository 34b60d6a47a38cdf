"""README's "The engine alone" (issue 44; tests/test_engine_alone.py checks the engine apart
from the book): its example trains, through ``pml.fit``, a
residual ``nn.Module`` on a ``TensorDataset`` ``DataLoader`` with an MSE loss, locally and
with two processes (gloo, loopback), bitwise equal; every ``pml.`` name it uses is exported
by the front door."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pipemare_lite

ROOT = Path(__file__).resolve().parents[1]


def readme_section() -> str:
    """README's "The engine alone"."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split("## The engine alone", 1)[1].split("\n## ", 1)[0]


def readme_example() -> str:
    """The Python block of README's "The engine alone" that calls ``pml.fit``."""
    blocks = re.findall(r"```python\n(.*?)```", readme_section(), flags=re.S)
    [example] = [b for b in blocks if "pml.fit(" in b]
    return example


def test_the_readme_example_uses_only_front_door_names():
    used = {node.attr for node in ast.walk(ast.parse(readme_example()))
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == "pml"}
    assert {"fit", "launch"} <= used
    named = set(re.findall(r"\bpml\.([A-Za-z_]\w*)", readme_section()))  # the prose's too
    assert {"Dataset", "signals", "register_method"} <= named
    assert sorted((used | named) - set(pipemare_lite.__all__)) == []


def test_the_readme_example_trains_locally_and_distributed_bitwise_equal(tmp_path):
    script = tmp_path / "engine_alone.py"
    script.write_text(readme_example(), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PIPEMARE_PROGRESS="0", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=420, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.endswith("local == distributed, bitwise: True"), done.stdout
    first, final = map(float, re.match(r"loss (\S+) -> (\S+);", last).groups())
    assert final < first / 2  # it learned the regression
    # nothing else is printed: torch's own pytree FutureWarning (the split, the shape
    # probe's copy of a traced stage) is the engine's business, not the reader's
    assert "Warning" not in done.stderr, done.stderr[-3000:]
