"""docs/schedules.md: each python block prints exactly the text block after it (the page's
numbers come from the engine). Torch-free."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).parent.parent / "docs" / "schedules.md"


def test_every_python_block_prints_the_text_block_after_it():
    text = DOC.read_text(encoding="utf-8")
    pairs = re.findall(r"```python\n(.*?)```\s*```text\n(.*?)```", text, re.S)
    assert len(pairs) == 2
    for code, printed in pairs:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(DOC), "exec"), {})  # noqa: S102  our own page's code
        assert out.getvalue() == printed
