"""History recording: step losses, lrs, byte peaks, measured delays, divergence report.

The numbers expected here are worked out by hand from the small inputs each test builds.
"""

import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from pipemare_lite.schedules.actions import Action
from pipemare_lite.training.checkpoint import load_checkpoint, save_checkpoint
from pipemare_lite.training.history import (
    ForwardDelayMeter,
    History,
    HistoryRecorder,
    divergence_report,
)


def _trace(*rows):
    """A measured trace: rows of (rank, start, action text, version read or applied)."""
    entries = [SimpleNamespace(rank=r, start=t, action=Action.parse(a)) for r, t, a, _ in rows]
    return SimpleNamespace(entries=entries, extra={"versions": {a: v for _, _, a, v in rows}})


# Stage 0 of a small asynchronous run, cut into two run() calls:
#   0F0 v0, 0F1 v0, 0B0, 0U0 applies to v0        -> microbatch 0: delay 0 - 0 = 0
#   0F2 v1, 0B1, 0B2, 0U1 applies to v1            -> microbatch 1: 1 - 0 = 1; mb 2: 1 - 1 = 0
# Stage 1 did not update yet (its F and B wait), so nothing is measured there.
FIRST_CALL = _trace(
    (0, 0.0, "0F0", 0), (0, 1.0, "0F1", 0), (0, 2.0, "0B0", 0), (0, 3.0, "0U0", 0),
    (0, 4.0, "0F2", 1), (1, 1.5, "1F0", 0), (1, 2.5, "1B0", 0),
)
SECOND_CALL = _trace((0, 6.0, "0B2", 1), (0, 5.0, "0B1", 1), (0, 7.0, "0U1", 1))


def test_forward_delays_are_measured_across_calls_and_checkpoints():
    straight = ForwardDelayMeter(2)
    straight.feed(FIRST_CALL)
    straight.feed(SECOND_CALL)
    assert straight.mean() == [pytest.approx(1 / 3), 0.0]
    assert straight.max() == [1, 0]
    first = ForwardDelayMeter(2)
    first.feed(FIRST_CALL)
    resumed = ForwardDelayMeter(2)
    resumed.load(first.state())
    resumed.feed(SECOND_CALL)
    assert resumed.delays == straight.delays == [[0, 1, 0], []]


def _result(losses, rates, peaks, delays):
    """A run's result as an executor returns it (one parameter group per stage)."""
    from pipemare_lite.engine.local import RunResult

    by_update = {s: [[rate] for rate in stage] for s, stage in enumerate(rates)}
    return RunResult(loss_by_microbatch=losses, peak_bytes=peaks, forward_delays=delays,
                     group_learning_rates=by_update)


# N = 2 microbatches a step: step 0 is microbatches 0, 1; step 1 is 2, 3 (3 reports late).
# The delays are those the meter reads from FIRST_CALL and SECOND_CALL above.
CALLS = [
    _result(
        {0: 1.0, 1: 3.0, 2: 5.0},
        [[0.1], [0.2]],
        [{"weights": 10, "activations": 5}, {"weights": 4}],
        {0: [0], 1: []},
    ),
    _result(
        {3: 7.0}, [[0.05], [0.2]], [{"activations": 9}, {"weights": 3, "stash": 2}],
        {0: [1, 0], 1: []},
    ),
]


def _check_two_steps(history: History):
    assert history.loss == [2.0, 6.0]  # (1 + 3) / 2 and (5 + 7) / 2
    assert history.stage_lr == [[0.1, 0.05], [0.2, 0.2]]
    assert history.memory_bytes_by_stage == [
        {"weights": 10, "activations": 9},
        {"weights": 4, "stash": 2},
    ]
    assert history.memory_bytes == {"activations": 9, "stash": 2, "weights": 14}
    assert history.forward_delay == [pytest.approx(1 / 3), 0.0]
    assert history.forward_delay_max == [1, 0]


def test_recorder_counts_a_step_once_all_its_microbatches_reported():
    recorder = HistoryRecorder(History(), num_microbatches=2, num_stages=2, num_virtual_stages=2)
    recorder.record(CALLS[0])
    assert recorder.history.loss == [2.0]  # step 1 still waits for microbatch 3
    recorder.record(CALLS[1])
    _check_two_steps(recorder.finish())


def test_recorder_state_survives_a_weights_only_checkpoint(tmp_path):
    before = HistoryRecorder(History(), num_microbatches=2, num_stages=2, num_virtual_stages=2)
    before.record(CALLS[0])
    save_checkpoint(tmp_path / "ck.pt", before.state())
    after = HistoryRecorder(History(), num_microbatches=2, num_stages=2, num_virtual_stages=2)
    after.load(load_checkpoint(tmp_path / "ck.pt"))
    after.record(CALLS[1])
    _check_two_steps(after.finish())


def test_divergence_report_says_when_and_where():
    # microbatch 9 of N=2 is the 2nd of step 5 (steps from 1); 4 steps per epoch: epoch 2
    text = divergence_report(9, float("nan"), 2, 4, 4, [0, 3], 4)
    assert text == (
        "diverged at step 5 (epoch 2): loss nan on microbatch 9 (number 2 of 2 in step 5); "
        "non-finite weights on stage(s) 0, 3. Try a smaller lr, T1 (lr rescheduling) or warm-up."
    )
    text = divergence_report(1, float("inf"), 4, 10, 0, [], 3)
    assert "microbatch 1 (number 2 of 4 in step 1);" in text
    assert "all weights still finite: the loss overflowed on the last stage (2)" in text


def test_divergence_report_uses_one_step_number_when_forwards_ran_ahead():
    # an async pipeline computed microbatch 13 (step 7) while every stage had made 5 updates
    text = divergence_report(13, float("inf"), 2, 3, 5, [1], 3)
    assert text.startswith("diverged at step 7 (epoch 3): loss inf on microbatch 13 "
                           "(number 2 of 2 in step 7), computed ahead: every stage had made "
                           "only 5 updates;")
    assert set(re.findall(r"\bstep (\d+)", text)) == {"7"}


def test_a_flushed_step_found_as_it_ended_is_not_said_computed_ahead():
    # sync 1F1B: step 9's loss is read once step 9 has ended, its update done (9 updates)
    text = divergence_report(17, float("nan"), 2, 4, 9, [0], 2)
    assert "(number 2 of 2 in step 9); non-finite weights" in text
    assert "computed ahead" not in text


def test_history_imports_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"  # any 'import torch' now fails
        "from pipemare_lite.training.history import History\n"
        "print(History(loss=[1.0]).summary()['steps'])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"


def test_the_loop_exports_its_own_names_only():
    # issue 32: the loop's module re-exported 18 names of other modules; each now has one home
    import pipemare_lite.training.loop as loop

    assert sorted(loop.__all__) == sorted(
        ["fit", "TrainingRun", "CHECKPOINT_FORMAT", "RECORDED_SETTINGS", "NoCheckpointWarning"])
    for name in loop.__all__:
        value = getattr(loop, name)
        assert getattr(value, "__module__", loop.__name__) == loop.__name__, name
