"""Every stage of a pipeline as a point on chapter 06's stability map (chapter 07).

Chapter 06 studied one weight with curvature ``lam`` and a gradient ``tau`` updates old: the
recurrence ``w[t+1] = w[t] - lr * lam * w[t-tau]`` is stable exactly when
``0 < lr * lam < 2 sin(pi / (2 (2 tau + 1)))``
(:func:`pipemare_lite.analysis.theory.stability_bound`).
A pipeline has one such picture per stage: stage s has its own measured forward delay
``tau_s`` (the history's ``forward_delay_max``) and its own curvature ``lam_s`` (its
sharpness, :func:`pipemare_lite.training.curvature.stage_sharpness`). Putting the two together
treats each stage as that quadratic, on its own:

- :func:`stage_points`: per stage, its point ``(lr * lam_s, tau_s)`` on the map, the bound at
  its delay, the largest stable learning rate ``bound / lam_s``, and the spectral radius of
  its quadratic (the factor by which it would grow per update);
- :func:`fastest_growing_stage`: the stage whose quadratic grows fastest, the one the model
  predicts to blow up first (None when every stage is inside);
- :func:`largest_stable_pipeline`: how many stages an asynchronous pipeline may have before
  its stalest stage, stage 0, leaves the stable region at a given ``lr * lam``, solved in
  closed form (tested equal to its definition, a search over P: ``tests/references.py``);

What the model leaves out: a network is not a quadratic (its curvature moves as it trains),
the stages are coupled, and an asynchronous backward reads newer weights than its forward
(the discrepancy, which can shift the region either way). Numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pipemare_lite.analysis.theory import spectral_radius, stability_bound


@dataclass(frozen=True)
class StagePoint:
    """One stage on the stability map.

    Attributes:
        stage: 0-indexed stage.
        delay: tau_s, the stage's forward delay in updates.
        sharpness: lam_s, the curvature along the stage's weights.
        step: ``lr * lam_s``, the map's horizontal coordinate.
        bound: ``2 sin(pi / (2 (2 tau_s + 1)))``, the largest stable ``lr * lam`` at its delay.
        stable_lr: ``bound / lam_s``, the largest stable learning rate (inf without curvature).
        radius: spectral radius of the stage's quadratic (1.0 without curvature: it does not
            move); above 1 it grows by that factor per update.
    """

    stage: int
    delay: int
    sharpness: float
    step: float
    bound: float
    stable_lr: float
    radius: float

    @property
    def inside(self) -> bool:
        """Whether the point lies in the stable region: ``lr * lam_s < bound``."""
        return self.step < self.bound


def _check(lr, sharpness: Sequence[float], delays: Sequence[int]) -> None:
    if not (isinstance(lr, (int, float)) and not isinstance(lr, bool) and lr > 0):
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if len(sharpness) != len(delays):
        raise ValueError(
            f"one sharpness per stage and one delay per stage: got {len(sharpness)} "
            f"sharpness values and {len(delays)} delays"
        )
    if not delays:
        raise ValueError("a pipeline needs at least one stage")
    for s, lam in enumerate(sharpness):
        if not (isinstance(lam, (int, float)) and math.isfinite(lam) and lam >= 0):
            raise ValueError(f"stage {s}: sharpness must be a finite number >= 0, got {lam!r}")


def stage_points(lr: float, sharpness: Sequence[float], delays: Sequence[int]) -> list[StagePoint]:
    """Each stage's point on the stability map at learning rate ``lr`` (see :class:`StagePoint`).

    ``sharpness[s]`` and ``delays[s]`` belong to stage s (delays: non-negative integers).
    """
    _check(lr, sharpness, delays)
    points = []
    for s, (lam, tau) in enumerate(zip(sharpness, delays)):
        bound = stability_bound(tau)  # refuses a delay that is not a non-negative integer
        lam = float(lam)
        radius = spectral_radius(lr, lam, int(tau)) if lam > 0 else 1.0
        points.append(StagePoint(
            stage=s, delay=int(tau), sharpness=lam, step=lr * lam, bound=bound,
            stable_lr=bound / lam if lam > 0 else math.inf, radius=radius,
        ))
    return points


def fastest_growing_stage(
    lr: float, sharpness: Sequence[float], delays: Sequence[int]
) -> int | None:
    """The stage whose quadratic grows fastest (largest spectral radius above 1), or None.

    Not the stage furthest outside its bound in ``lr * lam / bound``: how fast a quadratic
    grows depends on where it sits, and a far-out point at a small delay can grow more slowly
    than a nearer one at a large delay. Equal radii go to the lower (staler) stage.
    """
    points = stage_points(lr, sharpness, delays)
    growing = [p for p in points if p.radius > 1.0]
    if not growing:
        return None
    return max(growing, key=lambda p: (p.radius, -p.stage)).stage


def _check_depth_arguments(step, num_microbatches) -> None:
    if not (isinstance(step, (int, float)) and not isinstance(step, bool) and step > 0):
        raise ValueError(f"step (lr * lam) must be a positive number, got {step!r}")
    if isinstance(num_microbatches, bool) or not isinstance(num_microbatches, int) \
            or num_microbatches < 1:
        raise ValueError(f"num_microbatches must be a positive integer, got {num_microbatches!r}")


def largest_stable_pipeline(step: float, num_microbatches: int) -> int:
    """Largest P whose stage 0 stays inside the stable region at ``lr * lam = step``.

    Stage 0 of a lock-step asynchronous pipeline with P stages and N microbatches per update
    is ``ceil((2P - 1) / N)`` updates stale (chapter 05's recalled worst case,
    :func:`pipemare_lite.analysis.staleness.expected_forward_delay`). Solved, not searched:

    1. invert the bound: ``step < 2 sin(pi / (2 (2 tau + 1)))`` iff
       ``2 tau + 1 < pi / (2 asin(step / 2))``, so the largest delay strictly inside is the
       largest integer below ``(pi / (2 asin(step / 2)) - 1) / 2``; rounding can put that a
       hair on the wrong side of a step exactly at a bound, so it is checked against the
       bound itself (strictly) and moved by one if needed;
    2. ``ceil((2P - 1) / N) <= tau`` iff ``2P - 1 <= N tau`` (N tau is an integer), so
       ``P = floor((N tau + 1) / 2)``; 0 means even one stage is outside (tau = 0).

    Tested equal to the definition, trying P = 1, 2, ... (``tests/references.py``).
    """
    _check_depth_arguments(step, num_microbatches)
    if step >= stability_bound(0):  # 2: outside at any delay, and every stage has one
        return 0
    tau = math.ceil((math.pi / (2 * math.asin(step / 2)) - 1) / 2) - 1
    while tau > 0 and step >= stability_bound(tau):  # rounded onto or over the boundary
        tau -= 1
    while step < stability_bound(tau + 1):
        tau += 1
    return (num_microbatches * tau + 1) // 2
