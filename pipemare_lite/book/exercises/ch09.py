"""Exercises of chapter 09, T2: discrepancy correction and warm-up.

- ``ex09_1`` ``t2_step(delta, w_old, w_new, gamma, distance) -> (new_delta, backward)``: one
  update of PipeMare's T2 on a stage's real parameters (lists of tensors, one per
  parameter): the new running average of the weight changes, and the weights a backward
  ``distance`` updates after its forward should use. Checked on a Linear layer, an MLP and a
  Conv2d over sequences of updates (the harness carries the buffer from one update to the
  next) against the engine's :class:`~pipemare_lite.methods.discrepancy.DiscrepancyCorrection`.
  Needs torch.
- ``ex09_2`` ``updates_until_calibrated(gamma, tolerance) -> int``: T2's buffer starts at
  zero; when the weights move by the same step every update, after how many updates is the
  buffer within ``tolerance`` (relative) of that step? Checked against the engine's buffer
  run update by update (float64). Needs torch for the reference only.

Before ex09_1 the chapter states only T2's goal and its one buffer (an exponential average of
the weight changes, with factor gamma); how the backward's weights follow from the buffer is
the step the student takes (issue 45: a statement that spelled out both rules in words made
the exercise a transcription). The two formulas come after it, then the engine's T2
(:class:`DiscrepancyCorrection`), which ex09_1's ``engine_answers`` name; ex09_2 comes later
and may use it as an instrument (running it is a way to measure, not the count itself).
"""

from __future__ import annotations

import math
import random

from pipemare_lite.book.exercises import references
from pipemare_lite.book.exercises.compare import compare_int, compare_t2_steps
from pipemare_lite.book.exercises.exercise import Exercise, Mistake
from pipemare_lite.book.exercises.harness import T2_MODELS

_T2 = "pipemare_lite.methods.discrepancy.DiscrepancyCorrection"


# --------------------------------------------------------------------------- ex09_1


def _t2_case_text(case: dict) -> str:
    return (f"t2_step on a {case['model']} stage (gamma = {case['gamma']}, backward distances "
            f"{case['distances']}), at")


def _t2_cases() -> list[dict]:
    # first: the chapter's setting (gamma 0.9, delays growing as the pipeline fills), then
    # gamma 0 (delta = the last change), no distance at all, every model
    fixed = [("linear", 0.9, [0, 1, 2, 2, 3, 3]), ("linear", 0.0, [1, 2, 3]),
             ("mlp", 0.5, [0, 0, 0, 1]), ("conv", 0.9, [2, 4, 4, 4]), ("mlp", 0.99, [1, 1, 8])]
    rng = random.Random(901)
    drawn = [(rng.choice(list(T2_MODELS)), round(rng.uniform(0.0, 0.95), 2),
              [rng.randint(0, 8) for _ in range(rng.randint(2, 6))]) for _ in range(3)]
    return [{"model": m, "gamma": g, "distances": d} for m, g, d in fixed + drawn]


def _swapped_gamma(delta, w_old, w_new, gamma, distance):
    """Known mistake: gamma weighs the new change, 1 - gamma the old average."""
    new = [(1 - gamma) * d + gamma * (b - a) for d, a, b in zip(delta, w_old, w_new)]
    return new, [w - distance * d for w, d in zip(w_new, new)]


def _forward_extrapolation(delta, w_old, w_new, gamma, distance):
    """Known mistake: moving the backward's weights further ahead, not back."""
    new = [gamma * d + (1 - gamma) * (b - a) for d, a, b in zip(delta, w_old, w_new)]
    return new, [w + distance * d for w, d in zip(w_new, new)]


def _from_old_weights(delta, w_old, w_new, gamma, distance):
    """Known mistake: extrapolating from the weights before the update."""
    new = [gamma * d + (1 - gamma) * (b - a) for d, a, b in zip(delta, w_old, w_new)]
    return new, [w - distance * d for w, d in zip(w_old, new)]


def _stale_average(delta, w_old, w_new, gamma, distance):
    """Known mistake: correcting with the average from before this update."""
    new = [gamma * d + (1 - gamma) * (b - a) for d, a, b in zip(delta, w_old, w_new)]
    return new, [w - distance * d for w, d in zip(w_new, delta)]


# --------------------------------------------------------------------------- ex09_2


def _near_boundary(gamma: float, tolerance: float) -> bool:
    """gamma**k == tolerance for an integer k (up to rounding): the count is then fragile."""
    if gamma == 0.0:
        return False
    k = math.log(tolerance) / math.log(gamma)
    return abs(k - round(k)) < 1e-6


def _calibration_cases() -> list[dict]:
    # first: the chapter's gamma 0.9 at 1 %, then gamma 0 (one update), a long memory, a loose
    # and a tight tolerance
    fixed = [(0.9, 0.01), (0.0, 0.05), (0.5, 0.1), (0.99, 0.01), (0.3, 0.2), (0.95, 0.05),
             (0.7, 0.001), (0.9, 0.5)]
    # the boundary the text states ("at most tolerance"): a missing part exactly equal to
    # the tolerance counts as calibrated. Powers of 1/2 and 3/4 are exact in floating point,
    # in the engine's buffer too, so an answer that waits for "below" is one update late
    fixed += [(0.5, 0.125), (0.75, 0.5625)]
    rng = random.Random(902)
    drawn = []
    while len(drawn) < 4:
        gamma, tolerance = round(rng.uniform(0.05, 0.98), 2), round(rng.uniform(0.001, 0.3), 3)
        if not _near_boundary(gamma, tolerance):
            drawn.append((gamma, tolerance))
    return [{"gamma": g, "tolerance": t} for g, t in fixed + drawn]


def _floor_count(gamma, tolerance):
    """Known mistake: rounding the logarithm down (one update too few)."""
    return 1 if gamma == 0 else max(1, math.floor(math.log(tolerance) / math.log(gamma)))


def _memory_length(gamma, tolerance):
    """Known mistake: the average's memory 1 / (1 - gamma), whatever the tolerance."""
    return math.ceil(1 / (1 - gamma))


def _strictly_below(gamma, tolerance):
    """Known mistake: waiting until the missing part is below the tolerance, where the text
    says "at most": one update late when it lands exactly on it (the boundary cases)."""
    k, missing = 1, gamma
    while missing >= tolerance:
        k, missing = k + 1, missing * gamma
    return k


EXERCISES = [
    Exercise(
        id="ex09_1",
        chapter=9,
        title="T2's update and the corrected backward weights, on real tensors",
        function_name="t2_step",
        signature="t2_step(delta, w_old, w_new, gamma, distance) -> (new_delta, backward)",
        hint=(
            "Two things per parameter: the new running average, then the weights the backward "
            "should see. Suppose every update had moved the weights by exactly the average: "
            "where were they distance updates ago? Which weights do you start from, and which "
            "average (before or after this update) is the better guess?",
            "Per parameter: the running average keeps gamma of the old delta and takes "
            "1 - gamma of this update's change w_new - w_old. The backward runs after the "
            "update, so it starts from w_new, and it uses the new average: it goes back "
            "distance average steps (towards the weights its forward saw). Return two lists "
            "of tensors, one tensor per parameter each.",
            "The whole method: for each parameter, the new delta is gamma times the old delta "
            "plus (1 - gamma) times (w_new - w_old); the backward weight is w_new minus distance "
            "times that new delta. Build both lists in the order of the parameters and return the "
            "pair (list of new deltas, list of backward weights).",
        ),
        cases=_t2_cases,
        reference=references.t2_engine_steps,
        compare=compare_t2_steps,
        needs_torch=True,
        mistakes=(
            Mistake("gamma and 1 - gamma are swapped: gamma is what the average keeps of its "
                    "past", _swapped_gamma),
            Mistake("this moves the backward's weights further ahead; T2 goes back towards "
                    "the forward's weights", _forward_extrapolation),
            Mistake("this extrapolates from the weights before the update; the backward "
                    "reads the current ones", _from_old_weights),
            Mistake("this corrects with the average from before the update", _stale_average),
        ),
        engine_answers=(_T2, _T2 + ".after_update", _T2 + ".backward_weights"),
        harness="pipemare_lite.book.exercises.harness.t2_on_tensors",
        case_text=_t2_case_text,
    ),
    Exercise(
        id="ex09_2",
        chapter=9,
        title="How long T2's buffer takes to learn a steady step",
        function_name="updates_until_calibrated",
        signature="updates_until_calibrated(gamma, tolerance) -> int",
        hint=(
            "With the same change c every update and delta starting at 0, write delta after "
            "1, 2, 3 updates: the part of c still missing shrinks by a factor gamma per update. "
            "Find the first k >= 1 at which the missing part is at most tolerance * c "
            "(gamma = 0 learns it in one update).",
            "The whole method: after k updates of the same change c, delta is c (1 - gamma**k), "
            "so the missing part is gamma**k times c. Start at k = 1 with missing = gamma and, "
            "while it is above the tolerance, multiply it by gamma and add one to k (or solve "
            "gamma**k <= tolerance for k with logarithms, and mind the boundary: at most counts). "
            "Return that k, never below 1.",
        ),
        cases=_calibration_cases,
        reference=references.t2_calibration_updates,
        compare=compare_int,
        needs_torch=True,
        mistakes=(
            Mistake("this rounds down: one update too few", _floor_count),
            Mistake("this is the average's memory 1 / (1 - gamma); the tolerance matters too",
                    _memory_length),
            Mistake("this waits until the missing part is strictly below tolerance * c, "
                    "one update too late when it lands exactly on it: the boundary counts "
                    "(\"within\" means at most, so compare with <= where you used <, or > "
                    "where you used >=)", _strictly_below),
        ),
    ),
]
