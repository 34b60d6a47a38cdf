"""Root pytest hooks for `make test` (pytest over tests/ and nbval over chapters/).

- Notebook kernels inherit ``PLOTLY_RENDERER=plotly_mimetype``: figures become plain JSON
  outputs, without the HTML copy (and the 4.8 MB inline plotly.js) that
  ``pipemare_lite.figures.viz``
  adds in a reader's Jupyter (tests that need that unset it).
- At the end, the wall time of each chapter notebook (the number chapter 00 tells readers
  to look at), summed from its cells' reports; this works under xdist because workers send
  every report to the controller.
- Every test that compared with floats recorded on another machine says which mode it took
  (bitwise where the kernel fingerprint matches, else within-process: tests/recorded_floats.py),
  in a section of its own at the end.
- A run that collected no test is a failure (exit 1, not pytest's 5): CI must never pass
  without testing anything.
- A browser test skipped for want of a browser (tests/test_book.py) is repeated in a loud
  block at the very end, so a run that never opened the book in a browser says so.
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

os.environ.setdefault("PLOTLY_RENDERER", "plotly_mimetype")

_chapter_seconds: dict[str, float] = defaultdict(float)
_recorded_float_modes: dict[str, str] = {}


def pytest_runtest_logreport(report):
    """Sum setup+call+teardown durations per notebook and keep each test's recorded-floats
    mode (both work on the xdist controller too: workers send every report to it)."""
    path = report.nodeid.split("::", 1)[0]
    if path.endswith(".ipynb"):
        _chapter_seconds[path] += report.duration
    for name, value in getattr(report, "user_properties", ()):
        if name == "recorded-floats mode":  # tests/recorded_floats.PROPERTY
            _recorded_float_modes[report.nodeid] = value


def pytest_sessionfinish(session, exitstatus):
    """Turn "no tests collected" (exit 5) into a failure."""
    if exitstatus == 5:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus):
    """One line per chapter: how long its cells took (kernel start included)."""
    if _chapter_seconds:
        terminalreporter.section("chapter wall times (sum of cell times)")
        for path in sorted(_chapter_seconds):
            terminalreporter.write_line(f"{_chapter_seconds[path]:7.1f} s  {path}")
    if _recorded_float_modes:
        terminalreporter.section("floats recorded on another machine: how each test compared")
        for nodeid in sorted(_recorded_float_modes):
            terminalreporter.write_line(f"{nodeid}: {_recorded_float_modes[nodeid]}")
    if exitstatus == 5:
        terminalreporter.write_line("no test was collected: this run fails on purpose (exit 1)")
    browserless = [
        report
        for report in terminalreporter.stats.get("skipped", [])
        if "no headless chromium installed" in _skip_reason(report)
    ]
    if browserless:
        terminalreporter.write_sep("!", "BROWSER TESTS SKIPPED", red=True, bold=True)
        for report in browserless:
            terminalreporter.write_line(f"{report.nodeid}: {_skip_reason(report)}", red=True)
        terminalreporter.write_line(
            "this run never opened the book in a browser; .ci/run installs chromium", red=True
        )


def _skip_reason(report) -> str:
    """A skip report's reason (its longrepr is (path, line, reason) for pytest.skip)."""
    longrepr = getattr(report, "longrepr", None)
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr or "")


@pytest.fixture
def one_thread():
    """torch on one thread for the test, where results are compared bitwise (the kernels'
    reduction order depends on the thread count); a module opts in with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch  # here, not above: the torch-free tests must not import it

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def registered():
    """``register(name, builder, **kwargs)``: register_schedule for this test only; every name
    it registered is removed from the registry's tables afterwards."""
    from pipemare_lite.schedules.names import REGISTERED_WEIGHT_MODES
    from pipemare_lite.schedules.registry import BUILDERS, REGISTERED_BY, register_schedule
    from pipemare_lite.schedules.validation import FIXED_CHUNKS

    names = []

    def register(name, builder, **kwargs):
        names.append(name)
        register_schedule(name, builder, **kwargs)

    yield register
    for name in names:
        BUILDERS.pop(name, None)
        REGISTERED_WEIGHT_MODES.pop(name, None)
        REGISTERED_BY.pop(name, None)
        FIXED_CHUNKS.pop(name, None)
