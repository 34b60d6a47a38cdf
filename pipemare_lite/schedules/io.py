"""Schedules in and out: rows of action strings, JSON and CSV (introduced in chapter 02).

One row per rank of ``{stage}{F|B|I|W|U}{index}`` strings: the engine's own notation, easy
to read and to write by hand. It borrows ``torch.distributed.pipelining``'s spelling but is
*not* a table PyTorch's runtime can load: it has an update action ``U``, and its microbatch
indices are global over all minibatches (``k * M + j``), while PyTorch's table is one step
of F/B/I/W only, microbatches numbered from 0. For PyTorch use
:mod:`pipemare_lite.schedules.torch_notation` (``to_torch_csv``, ``from_torch_order``).
JSON adds what rows cannot say (name, sizes, weight mode). Plain JSON and CSV only: reading
never evaluates code. Torch-free.
"""

from __future__ import annotations

import csv
import io
import json

from pipemare_lite.schedules.actions import Action, Schedule
from pipemare_lite.schedules.validate import ScheduleError, validate

#: Marker and version written into every JSON schedule.
JSON_FORMAT, JSON_VERSION = "pipemare-lite-schedule", 1


def to_rows(schedule: Schedule) -> list[list[str]]:
    """One list of action strings per rank, e.g. ``[["0F0", "0B0", "0U0"], ...]``."""
    return schedule.rows()


def from_rows(
    rows,
    *,
    name: str,
    num_microbatches: int,
    chunks: int = 1,
    weight_mode: str = "sync",
    num_minibatches: int | None = None,
    warmup_minibatches: int = 0,
    notes: tuple[str, ...] = (),
) -> Schedule:
    """A validated :class:`Schedule` from one row of action strings per rank.

    ``name`` is a builder name or "custom". Blank cells (``""``, ``None``: idle slots in a
    table) are skipped. ``num_minibatches`` is inferred when not given: from the number of
    updates per stage, or, if the rows hold no ``U`` at all, from the microbatch count (then
    each stage gets one update per minibatch, placed right after that stage's last gradient
    of the minibatch, which is where a flushed schedule puts it).
    """
    ranks = []
    for r, row in enumerate(rows):
        if isinstance(row, str):
            raise ScheduleError(f"row {r} is a string {row!r}; allowed: a list of action strings")
        parsed = []
        for cell in row:
            if cell is None or (isinstance(cell, str) and not cell.strip()):
                continue
            try:
                parsed.append(cell if isinstance(cell, Action) else Action.parse(str(cell)))
            except ValueError as exc:
                raise ScheduleError(f"row {r}: {exc}") from None
        ranks.append(parsed)
    if not ranks:
        raise ScheduleError("no rows: allowed: one row of actions per rank (at least one)")
    has_updates = any(a.kind == "U" for row in ranks for a in row)
    if num_minibatches is None:
        num_minibatches = _infer_minibatches(ranks, num_microbatches, has_updates)
    if not has_updates:
        ranks = _add_updates(ranks, num_microbatches)
    schedule = Schedule(
        name=name,
        num_stages=len(ranks),
        num_microbatches=num_microbatches,
        ranks=tuple(tuple(row) for row in ranks),
        num_minibatches=num_minibatches,
        chunks=chunks,
        weight_mode=weight_mode,
        warmup_minibatches=warmup_minibatches,
        notes=tuple(notes),
    )
    return validate(schedule)


def _infer_minibatches(ranks, num_microbatches: int, has_updates: bool) -> int:
    if isinstance(num_microbatches, bool) or not isinstance(num_microbatches, int):
        raise ScheduleError(f"num_microbatches={num_microbatches!r}: allowed: an integer >= 1")
    if num_microbatches < 1:
        raise ScheduleError(f"num_microbatches={num_microbatches!r}: allowed: an integer >= 1")
    if has_updates:
        return 1 + max(a.index for row in ranks for a in row if a.kind == "U")
    total = 1 + max((a.index for row in ranks for a in row), default=-1)
    if total == 0 or total % num_microbatches:
        raise ScheduleError(
            f"the rows hold {total} microbatches, not a multiple of num_microbatches="
            f"{num_microbatches}; pass num_minibatches or fix the rows"
        )
    return total // num_microbatches


def _add_updates(ranks, num_microbatches: int):
    """Insert U(k) after each stage's last gradient (B, or W if split) of minibatch k."""
    split = any(a.kind == "I" for row in ranks for a in row)
    grad = "W" if split else "B"
    out = []
    for row in ranks:
        last = {}  # (stage, minibatch) -> position of the last gradient
        for p, a in enumerate(row):
            if a.kind == grad:
                last[(a.stage, a.index // num_microbatches)] = p
        after: dict[int, list[Action]] = {}
        for (stage, k), p in sorted(last.items(), key=lambda item: (item[1], item[0])):
            after.setdefault(p, []).append(Action(stage, "U", k))
        new_row = []
        for p, a in enumerate(row):
            new_row.append(a)
            new_row.extend(after.get(p, ()))
        out.append(new_row)
    return out


def to_json(schedule: Schedule) -> str:
    """The schedule as one JSON object (sizes, modes, notes and one row of strings per rank)."""
    s = schedule
    return json.dumps(
        {
            "format": JSON_FORMAT,
            "version": JSON_VERSION,
            "name": s.name,
            "num_stages": s.num_stages,
            "num_microbatches": s.num_microbatches,
            "num_minibatches": s.num_minibatches,
            "chunks": s.chunks,
            "weight_mode": s.weight_mode,
            "warmup_minibatches": s.warmup_minibatches,
            "notes": list(s.notes),
            "ranks": s.rows(),
        }
    )


def from_json(text: str) -> Schedule:
    """Read what :func:`to_json` wrote (and validate it)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScheduleError(f"not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != JSON_FORMAT:
        raise ScheduleError(f"not a schedule: expected a JSON object with format {JSON_FORMAT!r}")
    if data.get("version") != JSON_VERSION:
        raise ScheduleError(f"schedule version {data.get('version')!r}; allowed: {JSON_VERSION}")
    required = ("name", "num_stages", "num_microbatches", "ranks")
    missing = [key for key in required if key not in data]
    if missing:
        raise ScheduleError(f"schedule JSON lacks {', '.join(missing)}")
    if not isinstance(data["ranks"], list) or len(data["ranks"]) != data["num_stages"]:
        raise ScheduleError(
            f"schedule JSON has {len(data['ranks'])} rank rows for num_stages={data['num_stages']}"
        )
    return from_rows(
        data["ranks"],
        name=data["name"],
        num_microbatches=data["num_microbatches"],
        chunks=data.get("chunks", 1),
        weight_mode=data.get("weight_mode", "sync"),
        num_minibatches=data.get("num_minibatches"),
        warmup_minibatches=data.get("warmup_minibatches", 0),
        notes=tuple(data.get("notes", ())),
    )


def to_csv(schedule: Schedule) -> str:
    """One CSV line per rank: that rank's actions in order (no header, ragged rows)."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(schedule.rows())
    return buffer.getvalue()


def from_csv(text: str, **kwargs) -> Schedule:
    """Read :func:`to_csv` output; keyword arguments as for :func:`from_rows` (name, ...)."""
    rows = list(csv.reader(io.StringIO(text)))
    return from_rows(rows, **kwargs)
