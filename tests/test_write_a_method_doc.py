"""docs/write-a-method.md: its worked example is the real file and its usage block runs."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "write-a-method.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_page_shows_the_real_weight_prediction_file():
    blocks = python_blocks()
    real = (ROOT / "pipemare_lite" / "methods" / "weight_prediction.py").read_text()
    assert blocks[0] == real


def test_the_page_shows_the_real_delay_adaptive_example():
    real = (ROOT / "docs" / "examples" / "delay_adaptive_lr.py").read_text()
    assert real in python_blocks()


def test_the_usage_block_trains_with_the_plugin_and_counts_its_bytes():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(python_blocks()[1], str(DOC), "exec"), {})
    assert out.getvalue().split() == ["True", "0"]


def test_the_readme_links_the_page():
    assert "(docs/write-a-method.md)" in (ROOT / "README.md").read_text()
