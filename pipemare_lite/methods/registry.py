"""The methods by name: which schedule, which weight mode, which fixes (chapters 02-09).

==============  ==================  ===========  ===============================================
method          schedule builder    weight mode  options on by default
==============  ==================  ===========  ===============================================
gpipe           gpipe               sync         (flush after every minibatch)
1f1b            1f1b                sync
interleaved     interleaved         sync
zb-h1           zb-h1               sync         (split backward: I then W)
pipedream       pipedream           stash        (B uses the copy stashed at F)
2bw             2bw                 2bw          (two versions, delay 1)
async           async               async        none: B uses the current weights
pipemare        async               async        T1 + T2 (+ warm-up when warmup_minibatches > 0)
==============  ==================  ===========  ===============================================

Each PipeMare technique is switchable on its own through :class:`MethodOptions`, so the
ablations of chapter 09 (async, +T1, +T2, +both, +warm-up) are just different options.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from pipemare_lite.schedules.actions import WEIGHT_MODES


@dataclass(frozen=True)
class MethodOptions:
    """Switches for PipeMare's techniques (all off means plain async for an async schedule).

    Attributes:
        lr_rescheduling: T1 on/off (chapter 08).
        rescheduling_horizon: K, updates over which T1 anneals, counted from the first
            asynchronous update; None = the schedule's asynchronous minibatches
            (``num_minibatches - warmup_minibatches``: anneal over the whole async run).
        discrepancy_correction: T2 on/off (chapter 09); needs weight mode ``async``.
        gamma: T2's EMA decay, one value or one per virtual stage.
        warmup_minibatches: W, the first minibatches run flushed (synchronous); the
            schedule builder lays them out, the executor just follows the schedule. T1 is
            off during them (no delay to compensate) and starts its clock at update W.
    """

    lr_rescheduling: bool = False
    rescheduling_horizon: int | None = None
    discrepancy_correction: bool = False
    gamma: float | Sequence[float] = 0.9
    warmup_minibatches: int = 0

    def gamma_for(self, stage: int) -> float:
        """T2's gamma for one virtual stage."""
        if isinstance(self.gamma, (int, float)):
            return float(self.gamma)
        gammas = list(self.gamma)
        if not 0 <= stage < len(gammas):
            raise ValueError(f"gamma has {len(gammas)} values, no entry for stage {stage}")
        return float(gammas[stage])


@dataclass(frozen=True)
class MethodSpec:
    """One named method: the builder it uses, its weight mode and default options."""

    name: str
    builder: str
    weight_mode: str
    options: MethodOptions = field(default_factory=MethodOptions)
    description: str = ""

    def __post_init__(self) -> None:
        if self.weight_mode not in WEIGHT_MODES:
            raise ValueError(f"method {self.name!r}: unknown weight mode {self.weight_mode!r}")


METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in (
        MethodSpec("gpipe", "gpipe", "sync", description="all forwards, all backwards, flush"),
        MethodSpec("1f1b", "1f1b", "sync", description="one forward one backward, flush"),
        MethodSpec("interleaved", "interleaved", "sync", description="1F1B over v chunks"),
        MethodSpec("zb-h1", "zb-h1", "sync", description="zero-bubble H1: split backward"),
        MethodSpec("pipedream", "pipedream", "stash", description="async, weight stashing"),
        MethodSpec("2bw", "2bw", "2bw", description="PipeDream-2BW: two weight versions"),
        MethodSpec("async", "async", "async", description="async, no stash (discrepancy)"),
        MethodSpec("pipemare", "async", "async",
                   MethodOptions(lr_rescheduling=True, discrepancy_correction=True),
                   description="async + T1 lr rescheduling + T2 discrepancy correction"),
    )
}


def get_method(name: str) -> MethodSpec:
    """The :class:`MethodSpec` called ``name``; raises ValueError listing allowed names."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(
            f"unknown method {name!r}; allowed: {', '.join(METHODS)}") from None


def method_options(name: str, **overrides) -> MethodOptions:
    """The method's default options with some switched, e.g. ``lr_rescheduling=False``."""
    return replace(get_method(name).options, **overrides)


def build_method_schedule(name: str, num_stages: int, num_microbatches: int, *,
                          num_minibatches: int = 1, chunks: int = 1,
                          options: MethodOptions | None = None):
    """The schedule a method runs (warm-up minibatches taken from ``options``)."""
    from pipemare_lite.schedules import build_schedule  # builders live with the schedules

    spec = get_method(name)
    options = spec.options if options is None else options
    return build_schedule(spec.builder, num_stages, num_microbatches, chunks=chunks,
                          num_minibatches=num_minibatches,
                          warmup_minibatches=options.warmup_minibatches)
