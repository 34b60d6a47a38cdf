"""The finite blow-up rule (pipemare_lite/training/blow_up.py), fit's use of it and the CLI's."""

from __future__ import annotations

import json
import math
import random

import pytest

from pipemare_lite.training.blow_up import BlowUpRule

pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons: conftest.py


def _reference(losses, factor, window):
    """The rule spelled out once more, by brute force: 1-based step or None."""
    high = []
    for k in range(1, len(losses) + 1):
        finite = [v for v in losses[:k] if math.isfinite(v)]
        last = losses[k - 1]
        high.append(not math.isfinite(last) or (bool(finite) and min(finite) > 0
                                                and last > factor * min(finite)))
        if k >= window and all(high[k - window:k]):
            return k
    return None


def test_hand_cases():
    rule = BlowUpRule(factor=10, window=2)
    assert rule.first([2.0, 1.0, 11.0, 12.0]).step == 4
    assert rule.first([2.0, 1.0, 11.0, 5.0, 12.0]) is None  # back below 10x: count restarts
    assert rule.first([2.0, 1.0, 10.0, 10.0]) is None  # "above": 10x itself is not
    assert rule.first([2.0, math.inf, math.nan]).step == 3  # non-finite is high
    assert rule.first([-1.0, 50.0, 60.0]) is None  # minimum <= 0: silent
    fired = BlowUpRule(factor=1000, window=3).first([2.5, 2.0, 3e3, 1e10, 2e29, 1.0])
    assert (fired.step, fired.loss, fired.running_minimum, fired.minimum_step) == (
        5, 2e29, 2.0, 2)
    report = fired.report()
    for part in ("diverged at step 5", "loss above 1000x its running minimum for 3 steps",
                 "loss 2e+29 at step 5", "1e+29x the running minimum 2 (step 2)",
                 "every step from 3 on"):
        assert part in report, (part, report)


def test_watch_equals_the_plain_definition_and_a_brute_force_reference():
    rng = random.Random(0)
    for trial in range(400):
        factor = rng.choice([1.5, 3.0, 10.0])
        window = rng.randint(1, 4)
        losses = [rng.choice([rng.uniform(-0.5, 1.0), 10 ** rng.uniform(-2, 3),
                              math.inf, math.nan, 0.0]) for _ in range(rng.randint(0, 25))]
        rule = BlowUpRule(factor, window)
        expected = _reference(losses, factor, window)
        plain = rule.first(losses)
        assert (plain and plain.step) == expected, (trial, losses)
        watch = rule.watch()  # fed in random chunks, as steps arrive
        fired, upto = None, 0
        while fired is None and upto < len(losses):
            upto = min(len(losses), upto + rng.randint(1, 3))
            fired = watch.see(losses[:upto])
        assert fired == plain, (trial, losses)


@pytest.mark.parametrize("kwargs, message", [
    (dict(factor=1.0), "blow-up factor must be a finite number > 1, got 1.0"),
    (dict(factor=math.inf), "blow-up factor must be a finite number > 1, got inf"),
    (dict(factor=True), "got True"),
    (dict(window=0), "blow-up window must be an integer >= 1 (steps), got 0"),
    (dict(window=2.0), "got 2.0"),
])
def test_bad_rules_are_refused_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        BlowUpRule(**kwargs)


def _small():
    from pipemare_lite.training.datasets import Dataset, digits

    d = digits(seed=0)
    return Dataset("digits-small", d.x_train[:64], d.y_train[:64], d.x_test[:40],
                   d.y_test[:40], 10, d.input_shape, d.provenance)


def test_fit_stops_or_raises_by_the_rule_and_trains_the_same_until_then():
    from pipemare_lite.training.history import DivergenceError
    from pipemare_lite.training.loop import fit
    from pipemare_lite.training.models import mlp

    data = _small()
    kwargs = dict(method="1f1b", num_stages=2, num_microbatches=2, batch_size=8, epochs=3,
                  lr=20.0, seed=0)
    plain = fit(mlp(64, 16, 4, 10, seed=0), data, **kwargs)
    rule = BlowUpRule(factor=20, window=2)
    expected = rule.first(plain.loss)
    assert expected is not None and not plain.diverged  # finite blow-up: the old rule missed it
    stopped = fit(mlp(64, 16, 4, 10, seed=0), data, blow_up=rule, **kwargs)
    assert stopped.diverged and stopped.divergence_step == expected.step
    assert stopped.loss == plain.loss[:expected.step]  # the rule only stops; same numbers
    assert stopped.divergence == expected.report()
    assert stopped.evals[-1]["step"] == expected.step  # evaluated where it stopped
    with pytest.raises(DivergenceError, match="by the blow-up rule") as info:
        fit(mlp(64, 16, 4, 10, seed=0), data, blow_up=rule, on_divergence="raise", **kwargs)
    assert info.value.history.divergence == expected.report()
    with pytest.raises(ValueError, match="blow_up must be None .* or a .*BlowUpRule, got 3"):
        fit(mlp(64, 16, 4, 10, seed=0), data, blow_up=3, **kwargs)


def test_a_resumed_run_fires_at_the_same_step(tmp_path):
    from pipemare_lite.training.loop import fit
    from pipemare_lite.training.models import mlp

    data = _small()
    kwargs = dict(method="1f1b", num_stages=2, num_microbatches=2, batch_size=8, epochs=3,
                  lr=20.0, seed=0, blow_up=BlowUpRule(factor=20, window=2))
    straight = fit(mlp(64, 16, 4, 10, seed=0), data, **kwargs)
    ck = tmp_path / "run.pt"

    class Crash(Exception):
        pass

    def crash(step, history):
        if step == straight.divergence_step - 1:
            raise Crash

    with pytest.raises(Crash):  # a checkpoint one step before the rule fires
        fit(mlp(64, 16, 4, 10, seed=0), data, checkpoint_path=ck, checkpoint_every=1,
            on_step=crash, **kwargs)
    resumed = fit(mlp(64, 16, 4, 10, seed=0), data, checkpoint_path=ck, checkpoint_every=1,
                  resume=True, **kwargs)
    assert (resumed.divergence_step, resumed.divergence, resumed.loss) == (
        straight.divergence_step, straight.divergence, straight.loss)


def test_cli_huge_lr_under_raise_stops_with_the_rule_and_rc_3(tmp_path, capsys):
    """F6: ``train --lr 1e6 --on-divergence raise`` went 2.36 -> 1.6e10 -> 2.2e29 and exited 0."""
    from pipemare_lite.cli import main

    argv = ["train", "--method", "1f1b", "--stages", "2", "--microbatches", "2",
            "--batch-size", "64", "--width", "8", "--epochs", "1", "--lr", "1e6"]
    assert main([*argv, "--on-divergence", "raise"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("pipemare-lite train: diverged at step ") and "Traceback" not in err
    assert "by the blow-up rule: loss above 1000x its running minimum for 5 steps" in err
    stream = tmp_path / "off.jsonl"
    assert main([*argv, "--no-blow-up", "--json", "--jsonl", str(stream)]) == 0  # off: the
    assert '"diverged": false' in capsys.readouterr().out  # old, non-finite-only rule
    losses = [json.loads(line)["loss"] for line in stream.read_text().splitlines()]
    # settable: each setting stops where the rule, applied to the run without it, says
    for factor, window in ((1000, 5), (10, 1), (1e30, 2)):
        expected = BlowUpRule(factor, window).first(losses)
        assert main([*argv, "--blow-up-factor", str(factor), "--blow-up-window", str(window),
                     "--json"]) == 0
        done = json.loads(capsys.readouterr().out)
        assert done["divergence_step"] == (expected and expected.step), (factor, window)
        assert done["steps"] == (expected.step if expected else len(losses))
    assert BlowUpRule(10, 1).first(losses).step < BlowUpRule(1000, 5).first(losses).step
    assert BlowUpRule(1e30, 2).first(losses) is None  # the settings make a difference
    assert main([*argv, "--blow-up-factor", "1"]) == 2
    assert "--blow-up-factor 1.0: allowed: a finite number > 1" in capsys.readouterr().err
    assert main([*argv, "--blow-up-window", "0"]) == 2
    assert "--blow-up-window 0: allowed: an integer >= 1 (steps)" in capsys.readouterr().err
