"""Root pytest hooks: print the wall time of each chapter notebook at the end of a run."""

from __future__ import annotations

from collections import defaultdict

_chapter_seconds: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report):
    """Sum setup+call+teardown durations per notebook (works on the xdist controller too)."""
    path = report.nodeid.split("::", 1)[0]
    if path.endswith(".ipynb"):
        _chapter_seconds[path] += report.duration


def pytest_terminal_summary(terminalreporter):
    """One line per chapter: how long its cells took."""
    if not _chapter_seconds:
        return
    terminalreporter.section("chapter wall times (sum of cell times)")
    for path in sorted(_chapter_seconds):
        terminalreporter.write_line(f"{_chapter_seconds[path]:7.1f} s  {path}")
