"""Where an asynchronous pipeline goes wrong, stage by stage, from update norms (chapter 07).

Every stage records ``u_s(k) = ||w_s after update k - w_s before||_2``
(:attr:`pipemare_lite.training.history.History.stage_update_norm`). Compared with the synchronous
run
of the same seed and lr (the same base schedule, so the ratio isolates the pipeline), the
norms say which stage left the synchronous path first and by how much:

- :func:`first_non_finite`: per stage, the first update whose norm is non-finite (the update
  left a non-finite weight), or None;
- :func:`blowup_onset`: per stage, the first update k with ``u_s(k) >= factor * u_s^sync(k)``
  or a non-finite ``u_s(k)``, or None;
- :func:`excess`: per stage, ``rms u_s / rms u_s^sync`` over the updates both runs made
  finitely;
- :func:`earliest`: the stages whose onset (or first non-finite update) comes first;
- :func:`window_rms`: ``u_s`` as RMS over consecutive windows, for figures.

Plain Python, no torch: stored results can be analysed anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def _finite(value) -> bool:
    return value is not None and math.isfinite(value)


def first_non_finite(norms: Sequence[Sequence[float]]) -> list[int | None]:
    """Per stage, the index of the first non-finite (or None, as JSON stores NaN) update."""
    return [next((k for k, v in enumerate(stage) if not _finite(v)), None) for stage in norms]


def blowup_onset(
    norms: Sequence[Sequence[float]], sync: Sequence[Sequence[float]], factor: float
) -> list[int | None]:
    """Per stage, the first update k with ``norms[s][k] >= factor * sync[s][k]`` or non-finite.

    Only updates both runs made are compared (a diverged run stops early). ``factor`` must be
    positive; a stage count that differs between the two runs is refused.
    """
    if not factor > 0:
        raise ValueError(f"factor must be positive, got {factor!r}")
    if len(norms) != len(sync):
        raise ValueError(f"{len(norms)} stages against a sync run of {len(sync)} stages")
    onsets = []
    for stage, reference in zip(norms, sync):
        onset = None
        for k, (value, base) in enumerate(zip(stage, reference)):
            if not _finite(value) or (_finite(base) and value >= factor * base):
                onset = k
                break
        onsets.append(onset)
    return onsets


def excess(norms: Sequence[Sequence[float]], sync: Sequence[Sequence[float]]) -> list[float | None]:
    """Per stage, ``rms(u_s) / rms(u_s^sync)`` over the updates where both are finite.

    None where no such update exists or the sync norms are all zero.
    """
    if len(norms) != len(sync):
        raise ValueError(f"{len(norms)} stages against a sync run of {len(sync)} stages")
    ratios = []
    for stage, reference in zip(norms, sync):
        pairs = [(v, b) for v, b in zip(stage, reference) if _finite(v) and _finite(b)]
        base = math.fsum(b * b for _, b in pairs)
        if not pairs or base == 0:
            ratios.append(None)
            continue
        ratios.append(math.sqrt(math.fsum(v * v for v, _ in pairs) / base))
    return ratios


def earliest(onsets: Sequence[int | None]) -> list[int]:
    """The stages whose onset is the smallest (several on a tie; none when all are None)."""
    known = [k for k in onsets if k is not None]
    if not known:
        return []
    first = min(known)
    return [s for s, k in enumerate(onsets) if k == first]


def window_rms(values: Sequence[float], width: int) -> list[float]:
    """RMS of consecutive windows of ``width`` values (the last may be shorter); NaN for a
    window holding a non-finite value."""
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be a positive integer, got {width!r}")
    out = []
    for start in range(0, len(values), width):
        window = values[start : start + width]
        if not all(_finite(v) for v in window):
            out.append(math.nan)
        else:
            out.append(math.sqrt(math.fsum(v * v for v in window) / len(window)))
    return out


def window_mean(values: Sequence[float], width: int) -> list[float]:
    """Mean of consecutive windows of ``width`` values; NaN for a window with a non-finite."""
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be a positive integer, got {width!r}")
    out = []
    for start in range(0, len(values), width):
        window = values[start : start + width]
        finite = all(_finite(v) for v in window)
        out.append(math.fsum(window) / len(window) if finite else math.nan)
    return out
