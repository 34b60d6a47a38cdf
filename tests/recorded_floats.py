"""Floats recorded on one machine, compared on another: the one rule for tests (issue 42).

A test fixture that stores floats a run computed (float hex, or plain numbers) is a property
of the code *and* of the machine's float32 kernels. So a fixture stores the
:func:`~pipemare_lite.experiments.record.machine_fingerprint` of the machine that wrote it
under ``"fingerprint"``, and a test that compares with it asks :func:`comparison_mode`
first, the same rule the stored experiments use
(:func:`~pipemare_lite.experiments.record.kernel_differences`):

- ``bitwise``: the kernel fingerprints match, so the recorded numbers must come back exactly;
- ``within-process``: another kernel fingerprint; the recorded numbers say nothing here, and
  the test compares with a reference computed in this process instead (e.g. the old
  implementation run beside the new one), which is meaningful on every machine.

The mode is recorded as the test's user property ``recorded-floats mode`` and printed in
the run's summary (conftest.py), so a CI log says which mode each such test took.
``tests/test_recorded_floats_rule.py`` fails on a fixture or a test that skips this rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipemare_lite.experiments.record import kernel_differences, machine_fingerprint

#: the user property (and summary heading) that says which mode a test took
PROPERTY = "recorded-floats mode"


@dataclass(frozen=True)
class ComparisonMode:
    """How a test may compare with a fixture's recorded floats on this machine."""

    name: str  # "bitwise" or "within-process"
    differences: tuple[str, ...]  # kernel fingerprint fields that differ (empty: bitwise)

    @property
    def bitwise(self) -> bool:
        """True where the recorded floats must come back exactly."""
        return self.name == "bitwise"


def comparison_mode(fixture: dict, *, threads: int, request=None) -> ComparisonMode:
    """The mode for comparing with ``fixture`` (a dict with a ``"fingerprint"``), computing
    with ``threads`` torch threads here; recorded on ``request.node`` when given."""
    stored = fixture.get("fingerprint")
    if not isinstance(stored, dict):
        raise AssertionError("this fixture has no 'fingerprint' of the machine that wrote it: "
                             "re-record it with its tool, which stores one (issue 42)")
    differences = tuple(kernel_differences(stored, machine_fingerprint(threads)))
    mode = ComparisonMode("within-process" if differences else "bitwise", differences)
    if request is not None:
        text = mode.name + (f" (kernels differ: {'; '.join(differences)})" if differences else "")
        request.node.user_properties.append((PROPERTY, text))
    return mode
