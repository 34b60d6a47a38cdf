"""The finite blow-up rule: when a loss that is still finite counts as diverged (chapter 07).

A non-finite loss is divergence by any definition, and :func:`~pipemare_lite.training.loop.fit`
always stops on one. A run whose loss climbs from 2.36 to 1.6e10 and on to 2.2e29 has
diverged too, though every value is finite. :class:`BlowUpRule` says when such a run
counts as diverged::

    running minimum  m_k = min(loss_1, ..., loss_k)          (finite losses only)
    step k is HIGH   when loss_k > factor * m_k and m_k > 0  (a non-finite loss is HIGH)
    the rule FIRES   at the window-th HIGH step in a row

With the defaults (``factor`` = 1000, ``window`` = 5) a run fires once its loss has stayed
three orders of magnitude above the best it ever reached for five updates (steps: one
minibatch, one update per stage). A single noisy step never fires it, and a run that comes
back down within the window resets the count. Losses that reach zero or below (a custom
``loss_fn``) leave the rule silent: a ratio to a minimum <= 0 means nothing.

Where it acts: ``fit(..., blow_up=BlowUpRule())`` checks the rule after every step; when it
fires, the history says ``diverged=True``, ``divergence_step`` is the step it fired at and
``divergence`` is :meth:`BlowUp.report` (the rule, the step, the loss, the running minimum
and the step that reached it); ``on_divergence`` then stops or raises as for a non-finite
loss. ``fit``'s default is ``blow_up=None`` (non-finite only: the numbers every stored
result and chapter were made with); ``pipemare-lite train`` turns the rule on by default
(``--blow-up-factor``, ``--blow-up-window``, ``--no-blow-up``).

Not (yet) the paper-shape experiment's rule. That experiment judges a finished run by its
own end-of-run test (:func:`pipemare_lite.experiments.paper_shape_design.loss_blew_up`: the
last evaluation window's mean loss above 3x the first window's). Applied to the stored
window means (``data/results/paper_shape.json``), this rule with factor 3 and window 1
would flip 37 of 247 seeds (sync 1F1B seeds included: late windows near 0.01 are noisy), and
"last window above 3x the running minimum" would flip 2; either breaks ``reproduce
paper-shape --check``, so the experiment keeps its rule until its results are regenerated.

:meth:`BlowUpRule.first` is the plain definition over a whole loss curve;
:class:`BlowUpWatch` is the same rule fed one step at a time (tested equal). Plain Python:
no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BlowUpRule", "BlowUp", "BlowUpWatch", "DEFAULT_FACTOR", "DEFAULT_WINDOW"]

#: Three orders of magnitude above the best loss so far ...
DEFAULT_FACTOR = 1000.0
#: ... for five updates in a row.
DEFAULT_WINDOW = 5


@dataclass(frozen=True)
class BlowUpRule:
    """Loss above ``factor`` times its running minimum for ``window`` steps in a row.

    Attributes:
        factor: how far above its running minimum a step's loss must be (a finite number
            > 1).
        window: how many such steps in a row fire the rule (an integer >= 1).
    """

    factor: float = DEFAULT_FACTOR
    window: int = DEFAULT_WINDOW

    def __post_init__(self) -> None:
        factor, window = self.factor, self.window
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not (
                1 < factor < math.inf):
            raise ValueError(f"blow-up factor must be a finite number > 1, got {factor!r}")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"blow-up window must be an integer >= 1 (steps), got {window!r}")

    def describe(self) -> str:
        """The rule in words, as reports name it."""
        return (f"blow-up rule: loss above {self.factor:g}x its running minimum for "
                f"{self.window} step{'s' if self.window != 1 else ''} in a row")

    def first(self, losses: Sequence[float]) -> BlowUp | None:
        """Where the rule first fires on ``losses`` (step k's loss at index k - 1), or None.

        The plain definition, written straight from the module's formula.
        """
        for k in range(1, len(losses) + 1):
            if k < self.window:
                continue
            if all(self._high(losses[:j]) for j in range(k - self.window + 1, k + 1)):
                return self._fired(losses[:k])
        return None

    def _high(self, losses: Sequence[float]) -> bool:
        """Whether the last of ``losses`` is HIGH against the running minimum of all of them."""
        last = losses[-1]
        if not math.isfinite(last):
            return True
        low = min(v for v in losses if math.isfinite(v))
        return low > 0 and last > self.factor * low

    def _fired(self, losses: Sequence[float]) -> BlowUp:
        finite = [(v, k) for k, v in enumerate(losses, start=1) if math.isfinite(v)]
        low, at = min(finite) if finite else (math.nan, None)
        return BlowUp(self, len(losses), losses[-1], low, at)

    def watch(self) -> BlowUpWatch:
        """A :class:`BlowUpWatch` applying this rule step by step."""
        return BlowUpWatch(self)


@dataclass(frozen=True)
class BlowUp:
    """Where a :class:`BlowUpRule` fired, with the numbers.

    Attributes:
        rule: the rule that fired.
        step: the step (from 1) it fired at: the ``window``-th HIGH step in a row.
        loss: that step's training loss.
        running_minimum: the lowest finite loss up to that step (NaN: none was finite).
        minimum_step: the step that reached it (None: none).
    """

    rule: BlowUpRule
    step: int
    loss: float
    running_minimum: float
    minimum_step: int | None

    def report(self) -> str:
        """One readable sentence: which rule, at which step, with the numbers."""
        first = self.step - self.rule.window + 1
        ratio = (f"{self.loss / self.running_minimum:.3g}x"
                 if math.isfinite(self.loss) and self.running_minimum > 0 else "non-finite")
        return (f"diverged at step {self.step} by the {self.rule.describe()}: "
                f"loss {self.loss:.6g} at step {self.step} is {ratio} the running minimum "
                f"{self.running_minimum:.6g} (step {self.minimum_step}), and every step "
                f"from {first} on was above {self.rule.factor:g}x. Try a smaller lr, T1 "
                "(lr rescheduling) or warm-up.")


class BlowUpWatch:
    """:class:`BlowUpRule` fed one step at a time, in O(1) per step.

    :meth:`see` takes the whole loss list so far and reads only the steps it has not seen,
    so a run resumed from a checkpoint (its history's losses restored) replays them and
    continues exactly where an uninterrupted run would be.
    """

    def __init__(self, rule: BlowUpRule) -> None:
        self.rule = rule
        self.seen = 0
        self.minimum = math.inf  # lowest finite loss so far
        self.minimum_step: int | None = None
        self.streak = 0  # HIGH steps in a row, ending at the last one seen

    def see(self, losses: Sequence[float]) -> BlowUp | None:
        """Feed the steps of ``losses`` not seen yet; the :class:`BlowUp` when the rule fires."""
        while self.seen < len(losses):
            loss = losses[self.seen]
            self.seen += 1
            if math.isfinite(loss) and loss < self.minimum:
                self.minimum, self.minimum_step = loss, self.seen
            high = not math.isfinite(loss) or (
                0 < self.minimum < math.inf and loss > self.rule.factor * self.minimum)
            self.streak = self.streak + 1 if high else 0
            if self.streak >= self.rule.window:
                low = self.minimum if self.minimum < math.inf else math.nan
                return BlowUp(self.rule, self.seen, loss, low, self.minimum_step)
        return None

    def check(self, history) -> bool:
        """Apply the rule to a :class:`~pipemare_lite.training.history.History` after a step.

        When it fires (and nothing stopped the run before), marks the history diverged at
        that step with :meth:`BlowUp.report` as its ``divergence``; returns whether it did.
        """
        if history.diverged:
            return False
        fired = self.see(history.loss)
        if fired is None:
            return False
        history.diverged = True
        history.divergence_step = fired.step
        history.divergence = fired.report()
        return True
