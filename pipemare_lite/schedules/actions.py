"""The data every consumer reads: actions and schedules (introduced in chapter 02).

A schedule is, for each rank (one device), an ordered list of actions. An action is

    {stage}{kind}{index}      e.g. "2F0", "1B3", "0I5", "0W5", "3U1"

- ``F`` forward of microbatch ``index`` on (virtual) stage ``stage``;
- ``B`` full backward; or ``I`` (input gradient) then ``W`` (weight gradient) when the
  backward is split (zero-bubble schedules);
- ``U`` the ``index``-th optimizer update of that stage (0-based). Updates are explicit so
  that asynchronous methods are visible: an update applies every gradient the stage has
  accumulated since its previous update.

Microbatch indices are global over the run: microbatch ``j`` of minibatch ``k`` is
``k * num_microbatches + j``.

With interleaving (``chunks = v > 1``) there are ``P * v`` virtual stages. Which rank holds
which virtual stage is data too, the schedule's ``placement`` (``placement[s]`` is the rank
of virtual stage ``s``). The default is round robin, ``s % P`` (the Megatron layout, PyTorch's
"loop"), so a microbatch visits every rank ``v`` times; the V-shaped schedules (ZB-V,
DualPipeV) put stages ``r`` and ``2P-1-r`` on rank ``r`` (PyTorch's "v")::

    round robin, P = 4, v = 2          V, P = 4, v = 2
    rank 0: s0 s4                      rank 0: s0 s7     path r0 r1 r2 r3 r3 r2 r1 r0:
    rank 1: s1 s5                      rank 1: s1 s6     the turn (s3 -> s4) and the
    rank 2: s2 s6                      rank 2: s2 s5     loss (s7, on rank 0 beside s0)
    rank 3: s3 s7                      rank 3: s3 s4     need no message

Without interleaving, stage and rank coincide.

This module is torch-free.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from pipemare_lite.deprecation import accepts_old_fields

# which weights a forward and a backward read, per weight mode: see weight_modes.py
from pipemare_lite.schedules.weight_modes import WEIGHT_MODES, WeightMode, get_weight_mode

#: Placement styles by name (PyTorch's ``generate_stage_to_rank_mapping`` styles).
PLACEMENT_STYLES = ("loop", "v")


def round_robin_placement(num_ranks: int, chunks: int = 1) -> tuple[int, ...]:
    """Virtual stage ``s`` on rank ``s % P``: the default (PyTorch's "loop" style)."""
    return tuple(s % num_ranks for s in range(num_ranks * chunks))


def v_placement(num_ranks: int, chunks: int = 2) -> tuple[int, ...]:
    """Rank ``r`` holds virtual stages ``r`` and ``2P-1-r`` (PyTorch's "v" style: ZB-V,
    DualPipeV): down the ranks, then back up; with more chunks the zig-zag goes on."""
    down = tuple(range(num_ranks))
    return tuple(r for c in range(chunks) for r in (down if c % 2 == 0 else down[::-1]))


def placement_named(style: str, num_ranks: int, chunks: int) -> tuple[int, ...]:
    """The placement of style ``"loop"`` or ``"v"`` (zig-zag) for P ranks and v chunks; a
    ValueError names an unknown style."""
    if style == "loop":
        return round_robin_placement(num_ranks, chunks)
    if style == "v":
        return v_placement(num_ranks, chunks)
    raise ValueError(f"unknown placement style {style!r}; allowed: {', '.join(PLACEMENT_STYLES)}")


def check_placement(placement, num_ranks: int, chunks: int) -> tuple[int, ...]:
    """``placement`` as a tuple of ints, or ValueError naming the bad value and what is
    allowed: one rank in 0..P-1 per virtual stage, each rank holding ``chunks`` stages."""
    S = num_ranks * chunks
    if isinstance(placement, (str, bytes)) or not hasattr(placement, "__iter__"):
        raise ValueError(f"placement {placement!r} is not a map from virtual stage to rank; "
                         f"allowed: a sequence of {S} ranks (one per virtual stage), each in "
                         f"0..{num_ranks - 1}")
    placement = tuple(placement)
    if len(placement) != S:
        raise ValueError(f"placement {placement!r} has {len(placement)} entries; allowed: one "
                         f"rank per virtual stage, {S} (P={num_ranks} x chunks={chunks})")
    for s, rank in enumerate(placement):
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < num_ranks:
            raise ValueError(f"placement[{s}] = {rank!r}: allowed: a rank in 0..{num_ranks - 1}")
    for rank in range(num_ranks):
        held = [s for s, r in enumerate(placement) if r == rank]
        if len(held) != chunks:
            raise ValueError(f"placement {placement!r} gives rank {rank} stages {held}; allowed: "
                             f"exactly chunks={chunks} virtual stages on every rank")
    return placement


#: Kinds of action. F, B, I and W are spelled as in ``torch.distributed.pipelining``; U is
#: ours (PyTorch has no update action: see :mod:`pipemare_lite.interop.torch_notation`).
FORWARD, BACKWARD, INPUT_GRAD, WEIGHT_GRAD, UPDATE = "F", "B", "I", "W", "U"
KINDS = (FORWARD, BACKWARD, INPUT_GRAD, WEIGHT_GRAD, UPDATE)


_ACTION_RE = re.compile(r"^\s*(\d+)\s*([FBIWU])\s*(\d+)\s*$")


@dataclass(frozen=True, order=True)
class Action:
    """One step of one stage: ``Action(2, "F", 0)`` prints as ``2F0``."""

    stage: int
    kind: str
    index: int

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown action kind {self.kind!r}; allowed: {', '.join(KINDS)}")
        if self.stage < 0 or self.index < 0:
            raise ValueError(f"action {self.stage}{self.kind}{self.index}: negative stage or index")

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.index}"

    @classmethod
    def parse(cls, text: str) -> Action:
        """Parse ``"2F0"``-style notation; raises ValueError naming the bad text."""
        match = _ACTION_RE.match(text)
        if not match:
            raise ValueError(f"cannot parse action {text!r}: "
                             "expected {stage}{F|B|I|W|U}{index}, e.g. '2F0'")
        stage, kind, index = match.groups()
        return cls(int(stage), kind, int(index))


@accepts_old_fields({"warmup_minibatches": "warmup"})
@dataclass(frozen=True)
class Schedule:
    """An ordered list of actions per rank, plus what is needed to interpret it.

    Attributes:
        name: the builder that made it (``gpipe``, ``1f1b``, ``async`` ...).
        num_ranks: P, the number of ranks (devices).
        num_microbatches: N, microbatches per minibatch (PipeMare's N; GPipe's papers write M).
        num_minibatches: how many minibatches (optimizer steps per stage) the schedule runs.
        chunks: v, model chunks (virtual stages) per rank; 1 unless interleaved (v) or
            V-shaped (2).
        weight_mode: one of :data:`WEIGHT_MODES` (the name; :attr:`mode` is the rule).
        warmup: W, the first W minibatches run synchronously (flushed). (Its old spelling,
            ``warmup_minibatches``, still works until 0.3, with a FutureWarning.)
        ranks: ``ranks[r]`` is rank r's ordered actions: a tuple, or for a repeated or long
            run a :class:`~pipemare_lite.schedules.rows.PeriodicRow` (a sequence that equals
            the tuple of the same actions and holds one window of them).
        notes: human-readable remarks from the builder (e.g. a clamp it applied).
        placement: ``placement[s]`` is the rank holding virtual stage ``s``; ``None`` (the
            default) means round robin, ``s % P``, which is what is stored then. A map that
            is not one rank per stage, ``chunks`` stages per rank, raises ValueError.
    """

    name: str
    num_ranks: int
    num_microbatches: int
    ranks: tuple[tuple[Action, ...], ...]
    num_minibatches: int = 1
    chunks: int = 1
    weight_mode: str = "sync"
    warmup: int = 0
    notes: tuple[str, ...] = field(default=())
    placement: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        # stored in full, so rank_of is one lookup and equal schedules compare equal
        placement = (round_robin_placement(self.num_ranks, self.chunks)
                     if self.placement is None
                     else check_placement(self.placement, self.num_ranks, self.chunks))
        object.__setattr__(self, "placement", placement)
        if self.weight_mode not in WEIGHT_MODES:
            raise ValueError(
                f"unknown weight_mode {self.weight_mode!r}; allowed: {', '.join(WEIGHT_MODES)}"
            )
        if len(self.ranks) != self.num_ranks:
            raise ValueError(f"schedule {self.name!r} has {len(self.ranks)} rank rows "
                             f"for num_ranks={self.num_ranks}")

    @property
    def mode(self) -> WeightMode:
        """The :class:`~pipemare_lite.schedules.weight_modes.WeightMode` named by
        ``weight_mode``: ask it which versions F and B read."""
        return get_weight_mode(self.weight_mode)

    @property
    def num_virtual_stages(self) -> int:
        """P * v: how many model pieces the network is split into."""
        return self.num_ranks * self.chunks

    @property
    def total_microbatches(self) -> int:
        """Microbatches over the whole run (all minibatches)."""
        return self.num_microbatches * self.num_minibatches

    @property
    def split_backward(self) -> bool:
        """True when backwards are written as I + W (zero-bubble style)."""
        return any(a.kind == INPUT_GRAD for row in self.ranks
                   for a in (row if isinstance(row, (tuple, list)) else row.short))

    @property
    def round_robin(self) -> bool:
        """True when the placement is the default, stage ``s`` on rank ``s % P``."""
        return self.placement == round_robin_placement(self.num_ranks, self.chunks)

    def __repr__(self) -> str:
        """One line a reader can use (``schedule.ranks`` holds the actions), with the
        builder's notes, e.g. a clamp it applied."""
        sizes = (f"P={self.num_ranks}, N={self.num_microbatches}, K={self.num_minibatches}"
                 + (f", v={self.chunks}" if self.chunks > 1 else "")
                 + (f", W={self.warmup}" if self.warmup else ""))
        notes = "".join(f"; note: {note}" for note in self.notes)
        return (f"<Schedule {self.name!r} {sizes}, weight mode {self.weight_mode!r}, "
                f"{sum(len(row) for row in self.ranks)} actions{notes}>")

    def rank_of(self, stage: int) -> int:
        """The rank that holds (virtual) stage ``stage``: ``placement[stage]``."""
        return self.placement[stage]

    def stages_of(self, rank: int) -> list[int]:
        """The (virtual) stages held by ``rank``, in model order."""
        return [s for s, r in enumerate(self.placement) if r == rank]

    def minibatch_of(self, microbatch: int) -> int:
        """The minibatch a global microbatch index belongs to."""
        return microbatch // self.num_microbatches

    def row(self, rank: int, start: int = 0) -> Iterator[Action]:
        """Rank ``rank``'s actions from position ``start`` on (the executors read rows this
        way, so a periodic row makes them as it goes)."""
        row = self.ranks[rank]
        return iter(row[start:]) if isinstance(row, (tuple, list)) else row.iter_from(start)

    def actions(self):
        """Yield ``(rank, position, action)`` for every action, rank by rank."""
        for rank, row in enumerate(self.ranks):
            for position, action in enumerate(row):
                yield rank, position, action

    def rows(self) -> list[list[str]]:
        """One row of action strings per rank, in the engine's notation (with U, global
        microbatch indices); for PyTorch's see :mod:`pipemare_lite.interop.torch_notation`."""
        return [[str(a) for a in row] for row in self.ranks]
