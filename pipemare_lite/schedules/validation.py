"""Checking a schedule: sizes, completeness, update placement, and that it can run
(introduced in chapter 02).

A schedule is a promise that each rank can run its actions in order. :func:`validate` checks
that promise without running anything: every action is there exactly once, each update
applies exactly one minibatch of gradients, flushed minibatches really flush, and the
dependencies

    F(s, m) after F(s-1, m)         B(s, m) / I(s, m) after B or I (s+1, m) and F(s, m)
    W(s, m) after I(s, m)           U(s, k) after every gradient of minibatch k on stage s

can be met: a rank only waits for actions that some other rank will eventually run. If they
cannot, the error is a deadlock report naming, per blocked rank, the action that waits forever
and what it waits for. Torch-free.

The checks read actions as integer codes, one per action of the run (see :data:`KIND_CODE`),
so that "is it done?" is a lookup in a flat array; the simulator reads the same codes.
"""

from __future__ import annotations

import weakref
from collections import deque

from pipemare_lite.schedules import names
from pipemare_lite.schedules.actions import Schedule
from pipemare_lite.schedules.rows import copies_of, with_copies
from pipemare_lite.schedules.weight_modes import get_weight_mode
from pipemare_lite.spelling import did_you_mean

#: Schedules whose builder fixes the chunks per rank (the V-shaped ones: 2P virtual stages),
#: and registered builders that declared theirs (``register_schedule(..., chunks=2)``).
#: ``build_schedule`` accepts chunks=1 (the default) or this number for them.
FIXED_CHUNKS: dict[str, int] = {"zb-v": 2, "dualpipev": 2}


#: Inclusive allowed ranges of the sizes (large enough for any book figure or benchmark).
LIMITS = {
    "num_ranks": (1, 1024),
    "num_microbatches": (1, 65536),
    "num_minibatches": (1, 100000),
    "chunks": (1, 64),
}


class ScheduleError(ValueError):
    """A schedule (or a request for one) that is malformed or cannot run."""


#: The most actions a schedule built in full may hold. Each sizes alone may be in range
#: while their product is not (P=1024, N=65536, K=100000 is 1.3e13 actions): the product is
#: checked before anything is allocated. A long *training* run is held as periodic rows
#: (:mod:`pipemare_lite.schedules.repeat`) and never holds this many.
MAX_ACTIONS = 10_000_000
#: Bytes one action costs at the peak of a build (tracemalloc: 1f1b, P=32, N=256, K=20:
#: 260 at the peak, 170 kept); the estimate in :func:`check_total_work`'s message.
BYTES_PER_ACTION = 260


def action_count(name: str, num_ranks: int, num_microbatches: int, num_minibatches: int = 1,
                 chunks: int = 1) -> int:
    """Actions of the built schedule: per rank, chunk and minibatch, each microbatch's F and
    B (F, I and W when the backward is split, zb-h1) and one U."""
    per_microbatch = 3 if name.startswith("zb") or name == "dualpipev" else 2
    chunks = FIXED_CHUNKS.get(name, chunks)
    return num_ranks * chunks * num_minibatches * (per_microbatch * num_microbatches + 1)


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:,.1f} GiB"


def check_total_work(name: str, num_ranks: int, num_microbatches: int, num_minibatches: int = 1,
                     chunks: int = 1) -> None:
    """Raise ScheduleError stating the estimate and the limit when the schedule would hold
    more than :data:`MAX_ACTIONS` actions (checked before building)."""
    total = action_count(name, num_ranks, num_microbatches, num_minibatches, chunks)
    if total > MAX_ACTIONS:
        raise ScheduleError(
            f"{name} with P={num_ranks}, N={num_microbatches}, K={num_minibatches}, "
            f"v={chunks} is {total:,} actions (about {_gib(total * BYTES_PER_ACTION)} to "
            f"build); the limit is {MAX_ACTIONS:,} actions (about "
            f"{_gib(MAX_ACTIONS * BYTES_PER_ACTION)}): use fewer stages, microbatches or "
            "minibatches"
        )


def size_range(key: str, num_minibatches: int = 1) -> tuple[int, int]:
    """The integers ``low..high`` that :func:`check_sizes` allows for ``key``.

    ``warmup`` may be 0..``num_minibatches``; the other keys are in
    :data:`LIMITS`. Widgets take their slider ranges from here, so a slider cannot offer a
    value the engine refuses.
    """
    return LIMITS.get(key, (0, num_minibatches))


def check_sizes(name: str, num_ranks: int, num_microbatches: int, num_minibatches: int = 1,
                chunks: int = 1, warmup: int = 0) -> None:
    """Raise :class:`ScheduleError` naming any size outside :data:`LIMITS` or an unknown name."""
    mode = names.weight_mode_of(name)
    if name != "custom" and mode is None:
        raise ScheduleError(
            f"unknown schedule name {name!r}; allowed: {', '.join(names.known_names())}."
            f"{did_you_mean(name, names.known_names())} (A "
            "hand-written schedule is named 'custom'; a registered builder's name is known "
            "once its plugin is loaded: --plugin MODULE or PIPEMARE_PLUGINS)")
    values = {"num_ranks": num_ranks, "num_microbatches": num_microbatches,
              "num_minibatches": num_minibatches, "chunks": chunks,
              "warmup": warmup}
    for key, value in values.items():
        low, high = size_range(key, num_minibatches)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ScheduleError(f"{name}: {key}={value!r} is a {type(value).__name__}; give an "
                                f"integer in {low}..{high}")
        if not low <= value <= high:
            raise ScheduleError(
                f"{name}: {key}={value!r} is out of range; allowed: integers {low}..{high}"
            )
    if name in FIXED_CHUNKS:
        if chunks not in (1, FIXED_CHUNKS[name]):
            raise ScheduleError(
                f"{name}: chunks={chunks}; its builder always makes {FIXED_CHUNKS[name]} "
                f"chunks per rank ({FIXED_CHUNKS[name]}P virtual stages): allowed: "
                f"{FIXED_CHUNKS[name]} (or 1, the default, which means the same)")
    elif chunks > 1 and name not in ("interleaved", "custom", *names.REGISTERED_WEIGHT_MODES):
        raise ScheduleError(f"{name}: chunks={chunks} only applies to 'interleaved'; allowed: 1")
    w = warmup
    if w and mode is not None and get_weight_mode(mode).flushes:
        modes = {**names.BUILTIN_WEIGHT_MODES, **names.REGISTERED_WEIGHT_MODES}
        unflushed = (n for n, m in modes.items() if not get_weight_mode(m).flushes)
        raise ScheduleError(
            f"{name}: warmup={w} only applies to {', '.join(unflushed)}; allowed: 0")


def validate(schedule: Schedule) -> Schedule:
    """Check ``schedule`` completely; return it unchanged or raise :class:`ScheduleError`.

    Three steps: one walk over each rank's row (placement, ranges, duplicates, and the
    update bookkeeping of :func:`_update_problem`), a count that nothing is missing, then
    :func:`code_order`, which finds an order that meets every dependency or reports the
    deadlock.
    """
    s = schedule
    check_sizes(s.name, s.num_ranks, s.num_microbatches, s.num_minibatches, s.chunks,
                s.warmup)
    allowed = names.weight_modes_allowed(s.name)  # its own, and registered methods' pairings
    if allowed and s.weight_mode not in allowed:
        raise ScheduleError(f"{s.name}: weight_mode={s.weight_mode!r} does not match the schedule; "
                            f"allowed: {', '.join(map(repr, allowed))}")
    fixed = FIXED_CHUNKS.get(s.name)
    if fixed is not None and s.chunks != fixed:
        raise ScheduleError(f"{s.name}: {s.num_virtual_stages} virtual stages on {s.num_ranks} "
                            f"ranks (chunks={s.chunks}); allowed: {fixed * s.num_ranks} = "
                            f"{fixed}P (chunks={fixed})")
    if id(s) in _VALIDATED:  # already checked (the builder validated it): nothing can change
        return s
    if copies_of(s) > 3:  # a long periodic schedule: valid when its short forms are (repeat.py)
        for copies in (1, 2, 3):
            validate(with_copies(s, copies))
        _VALIDATED[id(s)] = None  # its codes and order are made if something asks for them
        weakref.finalize(s, _VALIDATED.pop, id(s), None)
        return s
    codes, seen, update_problem = _walk(s)
    _check_complete(s, seen)
    if update_problem:  # reported after "missing ...", which usually explains it
        raise ScheduleError(update_problem)
    order = code_order(s, codes)  # raises a deadlock report if dependencies cannot be met
    _VALIDATED[id(s)] = (codes, order)
    weakref.finalize(s, _VALIDATED.pop, id(s), None)
    return s


# Validated schedules (by id, dropped when the schedule is garbage-collected) with their codes
# and execution order (None for a long periodic one until asked), so that the simulator does
# not redo the work the builder just did. A Schedule is frozen (its rows are tuples or
# periodic rows of frozen actions), so a check stays true.
_VALIDATED: dict[int, tuple[list[list[int]], list[int]] | None] = {}


def is_validated(s: Schedule) -> bool:
    """True when :func:`validate` has already accepted this very schedule object."""
    return id(s) in _VALIDATED


def validated_order(s: Schedule) -> tuple[list[list[int]], list[int]]:
    """``(codes, execution order as codes)`` of a schedule, validating it first if not done yet.

    ``codes[rank]`` is the rank's row encoded (see :data:`KIND_CODE`); the order lists every
    action's code once, each after the actions it depends on (see :func:`code_order`).
    """
    if id(s) not in _VALIDATED:
        validate(s)
    if _VALIDATED[id(s)] is None:  # valid by its short forms: encode the whole run now
        codes = _walk(s)[0]
        _VALIDATED[id(s)] = (codes, code_order(s, codes))
    return _VALIDATED[id(s)]


#: Action kinds in code order: code = KIND_CODE[kind] * S * T + stage * T + microbatch for
#: F/B/I/W (S virtual stages, T microbatches) and 4 * S * T + stage * K + k for U.
KIND_CODE = {"F": 0, "B": 1, "I": 2, "W": 3, "U": 4}


def _walk(s: Schedule) -> tuple[list[list[int]], bytearray, str | None]:
    """One pass over every rank's row: ``(codes, seen, first update problem or None)``.

    Raises for a misplaced action, an index out of range (at once) or a duplicate (after
    the walk); ``seen`` marks every code present (for :func:`_check_complete`).
    """
    S, T, K = s.num_virtual_stages, s.total_microbatches, s.num_minibatches
    n, N, placement = S * T, s.num_microbatches, s.placement
    first_code = {kind: code * n for kind, code in KIND_CODE.items()}
    seen = bytearray(4 * n + S * K)
    gradient = "W" if s.split_backward else "B"  # the action that completes a gradient
    updates, grads = [0] * S, [0] * S  # per stage: updates done, gradients of the minibatch
    flushed = K if s.mode.flushes else s.warmup  # minibatches that must flush
    two_bw = not s.mode.forward_reads_current  # 2BW: minibatch k reads version k-1
    problem = duplicate = None  # the first of each, raised in the order validate() checks
    rows = []
    for rank, row in enumerate(s.ranks):
        codes: list[int] = []
        append = codes.append
        low = 0  # the fewest updates any stage of this rank has done
        for a in row:  # the position, needed only in errors, is len(codes)
            stage, kind, index = a.stage, a.kind, a.index
            if stage >= S or placement[stage] != rank:
                raise ScheduleError(_misplaced(s, rank, len(codes), a))
            if kind == "U":
                if index >= K:
                    raise ScheduleError(
                        f"{_at(rank, len(codes), a)} is update {index}; allowed: 0..{K - 1} "
                        f"(num_minibatches={K})"
                    )
                code = 4 * n + stage * K + index
                if problem is None and (index != updates[stage] or grads[stage] != N):
                    problem = _update_problem(s, rank, len(codes), a, updates, grads)
                updates[stage] += 1
                grads[stage] = 0
                low = min(updates[x] for x in s.stages_of(rank))
            else:
                if index >= T:
                    raise ScheduleError(
                        f"{_at(rank, len(codes), a)} names microbatch {index}; "
                        f"allowed: 0..{T - 1} (num_microbatches * num_minibatches = {T})"
                    )
                code = first_code[kind] + stage * T + index
                if kind == "F":  # minibatch k may start early unless k-1 flushes (or 2BW)
                    k = index // N
                    if problem is None and k > low and (
                            k <= flushed or two_bw and updates[stage] < k - 1):
                        problem = _forward_problem(s, rank, len(codes), a, flushed)
                elif kind == gradient:
                    if problem is None and index // N != updates[stage]:
                        problem = _update_problem(s, rank, len(codes), a, updates, grads)
                    grads[stage] += 1
            if seen[code] and duplicate is None:
                duplicate = f"{_at(rank, len(codes), a)} appears twice"
            seen[code] = 1
            append(code)
        rows.append(codes)
    if duplicate:
        raise ScheduleError(duplicate)
    return rows, seen, problem


def _update_problem(s: Schedule, rank, position, a, updates, grads) -> str:
    """U(s,k) applies exactly minibatch k's gradients: a gradient (B, or W when split) of
    microbatch m comes after U(k-1) and before U(k) of its stage, k = m // N, and U(k)
    after all N of them."""
    N, stage = s.num_microbatches, a.stage
    if a.kind != "U":
        k = a.index // N
        return (f"{_at(rank, position, a)} is a gradient of minibatch {k} but stage {stage} has "
                f"done {updates[stage]} updates: U{k} must apply exactly minibatch {k}'s "
                "gradients")
    return (f"{_at(rank, position, a)} comes after {grads[stage]} of the {N} gradients of "
            f"minibatch {a.index} on stage {stage} (updates must follow in order, each after all "
            "gradients of its minibatch)")


def _forward_problem(s: Schedule, rank, position, a, flushed: int) -> str:
    """A forward of minibatch k that runs before some stage of its rank applied update k-1,
    though minibatch k-1 is flushed (k <= ``flushed``: all of a sync schedule, the warm-up
    of an async one); or in 2BW before its own stage made version k-1 (update k-2)."""
    k = a.index // s.num_microbatches
    if k <= flushed:
        return (f"{_at(rank, position, a)} starts minibatch {k} before rank {rank} applied "
                f"update {k - 1} (a flushed minibatch must update before the next starts)")
    return (f"{_at(rank, position, a)}: 2BW runs minibatch {k} on version {k - 1}, made by "
            f"update {k - 2} of stage {a.stage}, which comes later on this rank; use more "
            "microbatches")


def _misplaced(s: Schedule, rank: int, position: int, a) -> str:
    if a.stage >= s.num_virtual_stages:
        allowed = f"0..{s.num_virtual_stages - 1}"
        return (f"{_at(rank, position, a)} names stage {a.stage}; allowed: {allowed} "
                f"(P={s.num_ranks} x chunks={s.chunks}; a file with more stages per rank needs "
                "chunks, or a placement, e.g. --placement v for a V)")
    if s.round_robin:
        where = f"virtual stage s lives on rank s % {s.num_ranks}"
    else:
        where = f"placement {list(s.placement)}: stage s lives on rank placement[s]"
    return f"{_at(rank, position, a)} belongs on rank {s.rank_of(a.stage)} ({where})"


def _check_complete(s: Schedule, seen: bytearray) -> None:
    """Nothing missing: every F, every B (or every I and W), one U per stage and minibatch."""
    S, T, K = s.num_virtual_stages, s.total_microbatches, s.num_minibatches
    n = S * T
    has_b, has_i = any(seen[n:2 * n]), any(seen[2 * n:3 * n])
    if has_b and has_i:
        raise ScheduleError("backwards must be all B or all I+W (split), not a mix")
    for kind in ("F", "I", "W") if has_i else ("F", "B"):
        block = seen[KIND_CODE[kind] * n:(KIND_CODE[kind] + 1) * n]
        if block.count(1) != n:
            stage, m = divmod(block.index(0), T)
            hint = " (the schedule splits backwards: it needs I and W)" if has_i else ""
            raise ScheduleError(f"missing {stage}{kind}{m} on rank {s.rank_of(stage)}{hint}")
    updates = seen[4 * n:]
    if updates.count(1) != S * K:
        stage, k = divmod(updates.index(0), K)
        raise ScheduleError(f"missing {stage}U{k}: every stage needs one update per minibatch")


def first_unflushed_forward(s: Schedule) -> str | None:
    """Where ``s`` runs ahead of a flush: the first forward of minibatch k >= 1 that a rank
    runs before all of its stages applied update k-1 (None: every minibatch flushes)."""
    N = s.num_microbatches
    for rank, row in enumerate(s.ranks):
        updates = dict.fromkeys(s.stages_of(rank), 0)
        for position, a in enumerate(row):
            if a.kind == "U" and a.stage in updates:
                updates[a.stage] += 1
            elif a.kind == "F" and min(updates.values()) < a.index // N:
                return (f"{_at(rank, position, a)} starts minibatch {a.index // N} before "
                        f"rank {rank} applied update {a.index // N - 1}")
    return None


def _at(rank: int, position: int, action) -> str:
    return f"rank {rank} position {position}: {action}"


def dependency_codes(code: int, n: int, T: int) -> tuple[int, ...]:
    """The codes an action (by code) must wait for; U has none here, because its gradients
    sit before it on the same rank (which :func:`validate` checks).

    F(s,m) needs F(s-1,m); B(s,m) needs F(s,m) and B(s+1,m); I likewise with I(s+1,m);
    W(s,m) needs I(s,m). With codes kind * n + stage * T + m, "stage - 1" is ``code - T``
    and the forward of a B or I is ``code - kind * n``.
    """
    kind, offset = divmod(code, n)
    if kind == 0:
        return (code - T,) if offset >= T else ()
    if kind in (1, 2):
        return (offset,) if offset >= n - T else (offset, code + T)
    if kind == 3:
        return (code - n,)
    return ()


def execution_order(s: Schedule) -> list[tuple[int, int]]:
    """A dependency-respecting order of ``(rank, position)`` pairs of a valid schedule, or a
    deadlock report.

    Each rank runs its actions in order as far as their dependencies allow; a rank that must
    wait is parked on the action it waits for and woken when that action is done.
    O(number of actions).
    """
    rows, order = validated_order(s)
    where = {code: (rank, p) for rank, row in enumerate(rows) for p, code in enumerate(row)}
    return [where[code] for code in order]


def code_order(s: Schedule, rows: list[list[int]]) -> list[int]:
    """:func:`execution_order` as action codes (the form the simulator reads), from ``rows``,
    the schedule encoded by :func:`_walk`; raises a deadlock report if there is none."""
    n, T = s.num_virtual_stages * s.total_microbatches, s.total_microbatches
    done = bytearray(4 * n + s.num_virtual_stages * s.num_minibatches)
    position = [0] * s.num_ranks
    # waiter[code]: the rank parked on that action, or -1. One slot is enough: an action's
    # dependents (dependency_codes) sit on at most one other rank, and a rank parked on an
    # action of its own row waits forever anyway (the action comes later in that row).
    waiter = [-1] * len(done)
    ready = deque(range(s.num_ranks))
    order: list[int] = []
    append = order.append
    while ready:
        rank = ready.popleft()
        row, p = rows[rank], position[rank]
        end = len(row)
        while p < end:
            code = row[p]
            for missing in dependency_codes(code, n, T):
                if not done[missing]:  # park this rank until that action is done
                    waiter[missing] = rank
                    break
            else:
                done[code] = 1
                append(code)
                p += 1
                if waiter[code] >= 0:
                    ready.append(waiter[code])
                continue
            break
        position[rank] = p
    if len(order) != sum(len(row) for row in rows):
        raise ScheduleError(_deadlock_report(s, rows, position, done))
    return order


def _deadlock_report(s: Schedule, rows, position, done) -> str:
    """Per blocked rank: the action that waits forever and what it waits for."""
    n, T = s.num_virtual_stages * s.total_microbatches, s.total_microbatches
    where = {code: (rank, p) for rank, row in enumerate(rows) for p, code in enumerate(row)}
    lines = [f"schedule {s.name!r} deadlocks: these ranks wait forever"]
    for rank, row in enumerate(rows):
        p = position[rank]
        if p >= len(row):
            continue
        missing = next(d for d in dependency_codes(row[p], n, T) if not done[d])
        if missing not in where:  # e.g. a W whose I is in no row
            waits = "an action no rank runs"
        else:
            r2, p2 = where[missing]
            if r2 == rank:
                detail = f"which comes later on the same rank (position {p2})"
            else:
                blocker = s.ranks[r2][position[r2]]
                detail = f"on rank {r2} (position {p2}), which is itself stuck at {blocker}"
            waits = f"{s.ranks[r2][p2]} {detail}"
        lines.append(f"  rank {rank} at {s.ranks[rank][p]} (position {p}) waits for {waits}")
    return "\n".join(lines)
