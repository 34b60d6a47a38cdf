"""``requires_sandbox``: the mark of tests that grade inside a bubblewrap jail.

Where bubblewrap cannot start a jail, those tests skip and say why, loudly (the reason from
:func:`pipemare_lite.book.exercises.sandbox.sandbox_available`, or the one ``.ci/run`` put in
``PIPEMARE_NO_SANDBOX``); under ``CI=true`` without ``PIPEMARE_NO_SANDBOX`` they fail
instead, since CI installs bubblewrap (``.ci/run``). Also sets the grading secret for the
test session (``PIPEMARE_GRADING_SECRET``), so tests never create the instructor's file.
"""

from __future__ import annotations

import os

import pytest

from pipemare_lite.book.exercises.hidden import SECRET_ENV
from pipemare_lite.book.exercises.sandbox import sandbox_available

os.environ.setdefault(SECRET_ENV, "pipemare-lite tests")

AVAILABLE, WHY = sandbox_available()
_REASON = (
    "!! NO GRADING SANDBOX: " + (os.environ.get("PIPEMARE_NO_SANDBOX") or WHY)
    + " -- the attacks of issue 31 were NOT tried in a jail !!"
)
_MUST_RUN = os.environ.get("CI") == "true" and not os.environ.get("PIPEMARE_NO_SANDBOX")


@pytest.fixture
def _sandbox_or_fail():
    if not AVAILABLE:
        pytest.fail(f"CI=true but bubblewrap cannot start a jail: {WHY} (.ci/run installs it)")


if _MUST_RUN:
    requires_sandbox = pytest.mark.usefixtures("_sandbox_or_fail")
else:
    requires_sandbox = pytest.mark.skipif(not AVAILABLE, reason=_REASON)
