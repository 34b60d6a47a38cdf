"""History's repr is one screen however long the run (issue 44): it names the run, the
loss's first, last and lowest values, the last evaluation, delays, memory and time."""

from __future__ import annotations

import math

from pipemare_lite.training.history import History


def _long_history(steps: int = 20_000, stages: int = 16) -> History:
    losses = [2.0 / (1 + k) for k in range(steps)]
    return History(
        config={"method": "pipemare", "num_stages": stages, "num_microbatches": 8,
                "executor": "dist"},
        loss=losses, stage_lr=[[0.05] * steps for _ in range(stages)],
        stage_update_norm=[[0.1] * steps for _ in range(stages)],
        evals=[{"epoch": e, "step": e * 100, "loss": 0.5, "accuracy": 0.875}
               for e in range(1, 201)],
        forward_delay=[float(2 * (stages - s)) for s in range(stages)],
        memory_bytes={"weights": 123_456, "activations": 7_890},
        wall_seconds=12.5)


def test_the_repr_of_a_long_run_fits_one_screen():
    history = _long_history()
    text = repr(history)
    lines = text.splitlines()
    assert len(lines) <= 24 and max(map(len, lines)) <= 100, text
    assert len(str(history.to_dict())) > 100 * len(text)  # the dataclass repr: ~15 kB+
    assert lines[0] == ("History(method='pipemare', stages=16, microbatches=8, "
                        "executor='dist', steps=20000)")
    assert "loss: 2 at step 1 -> 0.0001 at step 20000 (lowest 0.0001 at step 20000)" in text
    assert "evaluations: 200, the last after step 20000: loss 0.5, accuracy 0.875" in text
    assert "forward delay per stage (updates): [32, 30, 28, 26, 24, 22, 20, 18, ... (+8 more)]" \
        in text
    assert "peak bytes: weights 123,456, activations 7,890" in text


def test_an_empty_and_a_diverged_history_print_too():
    assert repr(History()).splitlines()[0].startswith("History(method=None")
    diverged = History(loss=[1.0, math.nan], diverged=True, divergence="diverged at step 2 " * 30)
    text = repr(diverged)
    assert "lowest 1 at step 1" in text and "  diverged: diverged at step 2" in text
    assert max(map(len, text.splitlines())) <= 100
