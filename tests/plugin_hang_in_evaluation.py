"""A test plugin (``PIPEMARE_PLUGINS=tests.plugin_hang_in_evaluation``): the rank named by
``PIPEMARE_TEST_HANG_RANK`` hangs in fit()'s first evaluation, outside the schedule, as a
stuck data loader would. Used by tests/test_hung_rank_blame.py under torchrun."""

from __future__ import annotations

import os
import time

from pipemare_lite.training import loop

if os.environ.get("RANK") is not None and (
        os.environ.get("RANK") == os.environ.get("PIPEMARE_TEST_HANG_RANK")):
    def _hang(self) -> None:
        """Never return (the job's failure handling must end this process); first write
        ``time.time()`` to the file ``PIPEMARE_TEST_HANG_FILE`` names, when set."""
        note = os.environ.get("PIPEMARE_TEST_HANG_FILE")
        if note:
            with open(note, "w") as handle:
                handle.write(repr(time.time()))
        while True:
            time.sleep(1.0)

    loop.TrainingRun.evaluate = _hang
