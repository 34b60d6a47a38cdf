"""Schedules in and out: rows of action strings, JSON and CSV (introduced in chapter 02).

One row per rank of ``{stage}{F|B|I|W|U}{index}`` strings: the engine's own notation, easy
to read and write by hand. It borrows ``torch.distributed.pipelining``'s spelling but is
*not* a table PyTorch's runtime can load (it has an update action ``U``, and microbatch
indices are global over all minibatches, ``k * N + j``); for PyTorch use
:mod:`pipemare_lite.interop.torch_notation`. JSON adds what rows cannot say (name, sizes,
weight mode). Plain JSON and CSV only: reading never evaluates code. :func:`load_schedule`
reads either file (``fit(schedule=path)``, ``--schedule FILE``; docs/write-a-schedule.md).

Placement (which rank holds which virtual stage, :attr:`Schedule.placement`): a JSON file
has a ``"placement"`` list and a CSV a first row ``placement,0,1,1,0`` (stage s's rank). JSON
writes it only when it is not the default round robin (the file has ``chunks``); a CSV, which
has no other place for the chunks, whenever there are several per rank. Older files read as
before. Rows
given without one are read as round robin, unless ``placement="rows"`` asks to take each
stage's rank from the row its actions are in.

A CSV holds no weight mode (what a backward reads). Undeclared, it is derived: a schedule
that flushes every minibatch is ``sync``; one that does not could be ``stash``, ``2bw`` or
``async``, and is refused until one is named. Torch-free.
"""

from __future__ import annotations

import csv
import io
import json
from itertools import takewhile
from pathlib import Path

from pipemare_lite.deprecation import accepts_old_keywords
from pipemare_lite.schedules.actions import (
    PLACEMENT_STYLES,
    Action,
    Schedule,
    placement_named,
)
from pipemare_lite.schedules.names import weight_mode_of
from pipemare_lite.schedules.validation import ScheduleError, first_unflushed_forward, validate

#: Marker and version written into every JSON schedule.
JSON_FORMAT, JSON_VERSION = "pipemare-lite-schedule", 1
#: The longest cell read as an action (``"12F34567"`` is 8): longer ones are refused unread.
MAX_CELL = 64


def _short(value, limit: int = 40) -> str:
    """``repr(value)``, cut to ``limit`` characters (a bad cell may be megabytes long)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def to_rows(schedule: Schedule) -> list[list[str]]:
    """One list of action strings per rank, e.g. ``[["0F0", "0B0", "0U0"], ...]``."""
    return schedule.rows()


@accepts_old_keywords({"warmup_minibatches": "warmup"})
def from_rows(rows, *, name: str, num_microbatches: int | None, chunks: int = 1,
              weight_mode: str | None = None, num_minibatches: int | None = None,
              warmup: int = 0, notes: tuple[str, ...] = (),
              placement=None) -> Schedule:
    """A validated :class:`Schedule` from one row of action strings per rank.

    ``name`` is a builder name or "custom". Blank cells (``""``, ``None``: idle slots) are
    skipped. Rows without any ``U`` get one update per stage and minibatch, right after that
    stage's last gradient of the minibatch (where a flushed schedule puts it).
    ``num_microbatches`` None: the gradients before stage 0's first update, or, without
    updates, every microbatch the rows name (one minibatch). ``num_minibatches`` None: the
    updates per stage, or the microbatches divided by ``num_microbatches``. ``warmup``: W,
    the first minibatches flushed (the schedule's ``warmup``). ``weight_mode``
    None: the mode a builder's ``name`` implies, else derived (see the module's docstring).
    ``placement``: None (round robin), a style (``"loop"``, ``"v"``), ``"rows"`` (each
    stage on the rank whose row runs it) or one rank per virtual stage; with a placement,
    ``chunks=1`` is read as "what the rows name" (a V schedule's rows name 2P stages).
    """
    ranks = []
    for r, row in enumerate(rows):
        if isinstance(row, (str, bytes, dict)) or not hasattr(row, "__iter__"):
            raise ScheduleError(f"row {r} is a {type(row).__name__} {_short(row)}; allowed: a "
                                "list of action strings")
        parsed = []
        for cell in row:
            if cell is None or (isinstance(cell, str) and not cell.strip()):
                continue
            if not isinstance(cell, (str, Action)):
                raise ScheduleError(f"row {r}: cell {_short(cell)} is a {type(cell).__name__}, "
                                    "not an action; allowed: action strings like '2F0'")
            if isinstance(cell, str) and len(cell) > MAX_CELL:
                raise ScheduleError(f"row {r}: a cell of {len(cell)} characters "
                                    f"({_short(cell)}); an action is like '2F0' (at most "
                                    f"{MAX_CELL} characters)")
            try:
                parsed.append(cell if isinstance(cell, Action) else Action.parse(str(cell)))
            except ValueError as exc:
                raise ScheduleError(f"row {r}: {exc}") from None
        ranks.append(parsed)
    if not ranks:
        raise ScheduleError("no rows: allowed: one row of actions per rank (at least one)")
    named = 1 + max((a.stage for row in ranks for a in row), default=0)
    if placement is not None and chunks == 1 and named % len(ranks) == 0:
        chunks = named // len(ranks)  # e.g. a V's 2P stages: the placement says where
    has_updates = any(a.kind == "U" for row in ranks for a in row)
    inferred = ""  # said in the error below: a misplaced update also misleads the count
    if num_microbatches is None:
        num_microbatches = _infer_microbatches(ranks, has_updates)
        inferred = (f" (N = {num_microbatches} microbatches per minibatch was read from the "
                    "gradients before stage 0's first update: if a minibatch has more, an "
                    "update sits before its last gradient; else give num_microbatches, "
                    "--microbatches)")
    if num_minibatches is None:
        num_minibatches = _infer_minibatches(ranks, num_microbatches, has_updates)
    if not has_updates:
        ranks = _add_updates(ranks, num_microbatches)
    weight_mode = weight_mode or weight_mode_of(name)  # a builder's name says its mode
    try:
        schedule = Schedule(name=name, num_ranks=len(ranks), num_microbatches=num_microbatches,
                            ranks=tuple(tuple(row) for row in ranks),
                            num_minibatches=num_minibatches, chunks=chunks,
                            weight_mode=weight_mode or "sync",
                            warmup=warmup, notes=tuple(notes),
                            placement=_placement_of(placement, ranks, chunks))
    except ValueError as exc:  # a placement (or weight mode) the Schedule refuses
        raise ScheduleError(str(exc)) from None
    if weight_mode is None:
        unflushed = first_unflushed_forward(schedule)
        if unflushed is not None:
            raise ScheduleError(
                f"schedule {name!r} does not flush ({unflushed}), so what its backwards "
                "read is ambiguous: declare weight_mode (--weight-mode) 'stash' (PipeDream: "
                f"B uses the copy stashed at F), '2bw' or 'async' (no stash: B uses the "
                f"current weights){inferred}"
            )
    return validate(schedule)


def _placement_of(placement, ranks, chunks: int):
    """The placement ``from_rows`` was asked for, as ``Schedule`` takes it (see there)."""
    if placement is None or not isinstance(placement, str):
        return placement
    if placement in PLACEMENT_STYLES:
        return placement_named(placement, len(ranks), chunks)
    if placement != "rows":
        raise ScheduleError(f"placement={placement!r}; allowed: None (round robin), "
                            f"{', '.join(map(repr, PLACEMENT_STYLES))}, 'rows' or one rank per "
                            "virtual stage")
    where: dict[int, int] = {}
    for rank, row in enumerate(ranks):
        for a in row:
            if where.setdefault(a.stage, rank) != rank:
                raise ScheduleError(f"placement='rows': stage {a.stage} has actions on rank "
                                    f"{where[a.stage]} and on rank {rank}; a stage lives on "
                                    "one rank")
    S = len(ranks) * chunks
    missing = [s for s in range(S) if s not in where]
    extra = sorted(s for s in where if s >= S)
    if missing or extra:
        raise ScheduleError(f"placement='rows': the rows name stages {sorted(where)}; allowed: "
                            f"each of 0..{S - 1} (P={len(ranks)} x chunks={chunks})")
    return tuple(where[s] for s in range(S))


def _gradient_kind(ranks) -> str:
    """The action that completes a gradient: ``W`` when the backward is split, else ``B``."""
    return "W" if any(a.kind == "I" for row in ranks for a in row) else "B"


def _infer_microbatches(ranks, has_updates: bool) -> int:
    """Gradients of stage 0 before its first update (rows without updates: one minibatch)."""
    if not has_updates:
        return max(1 + max((a.index for row in ranks for a in row), default=-1), 1)
    grad = _gradient_kind(ranks)
    row = next((row for row in ranks if any(a.stage == 0 for a in row)), [])
    before_update = takewhile(lambda a: a.kind != "U", (a for a in row if a.stage == 0))
    count = sum(a.kind == grad for a in before_update)
    if count < 1:
        raise ScheduleError("stage 0 has no gradient before its first update; give "
                            "num_microbatches (an integer >= 1)")
    return count


def _infer_minibatches(ranks, num_microbatches: int, has_updates: bool) -> int:
    if (isinstance(num_microbatches, bool) or not isinstance(num_microbatches, int)
            or num_microbatches < 1):
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
    grad = _gradient_kind(ranks)
    out = []
    for row in ranks:
        last = {(a.stage, a.index // num_microbatches): p  # the position of the last gradient
                for p, a in enumerate(row) if a.kind == grad}
        new_row = []
        for p, a in enumerate(row):
            new_row.append(a)
            k = a.index // num_microbatches
            if a.kind == grad and last[(a.stage, k)] == p:
                new_row.append(Action(a.stage, "U", k))
        out.append(new_row)
    return out


#: The :class:`Schedule` fields a JSON schedule stores beside its rows, in file order.
JSON_FIELDS = ("name", "num_ranks", "num_microbatches", "num_minibatches", "chunks",
               "weight_mode", "warmup")
#: Keys files written before a rename hold: old key -> field (read, never written).
OLD_JSON_KEYS = {"num_stages": "num_ranks", "warmup_minibatches": "warmup"}


def to_json(schedule: Schedule) -> str:
    """The schedule as one JSON object (sizes, modes, notes, the placement unless it is round
    robin, and one row of strings per rank)."""
    placement = {} if schedule.round_robin else {"placement": list(schedule.placement)}
    return json.dumps({"format": JSON_FORMAT, "version": JSON_VERSION,
                       **{key: getattr(schedule, key) for key in JSON_FIELDS}, **placement,
                       "notes": list(schedule.notes), "ranks": schedule.rows()})


def from_json(text: str) -> Schedule:
    """Read what :func:`to_json` wrote (and validate it)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScheduleError(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise ScheduleError("JSON nested too deeply; a schedule is an object of "
                            "ranks -> rows -> action strings") from None
    if not isinstance(data, dict) or data.get("format") != JSON_FORMAT:
        raise ScheduleError(f"not a schedule: expected a JSON object with format {JSON_FORMAT!r}")
    if data.get("version") != JSON_VERSION:
        raise ScheduleError(f"schedule version {data.get('version')!r}; allowed: {JSON_VERSION}")
    renamed = {new: old for old, new in OLD_JSON_KEYS.items() if old in data}  # older files
    for new, old in renamed.items():
        if new in data:
            raise ScheduleError(f"schedule JSON has both {old!r} and {new!r} (the same field; "
                                f"{old!r} is its old key): keep only {new!r}")
    missing = [key for key in ("name", "num_ranks", "num_microbatches", "ranks")
               if key not in data and key not in renamed]
    if missing:
        raise ScheduleError(f"schedule JSON lacks {', '.join(missing)}")
    _check_json_types(data)  # an old key is checked as its field, named as the file has it
    data.update({new: data.pop(old) for new, old in renamed.items()})
    if len(data["ranks"]) != data["num_ranks"]:
        raise ScheduleError(
            f"schedule JSON has {len(data['ranks'])} rank rows for num_ranks={data['num_ranks']}"
        )
    # the fields to_json writes, those the file has (from_rows' defaults for the others),
    # except num_ranks: the rows say it
    fields = {key: data[key] for key in JSON_FIELDS if key in data and key != "num_ranks"}
    return from_rows(data["ranks"], notes=tuple(data.get("notes", ())),
                     placement=data.get("placement"), **fields)


#: What each JSON field may hold: (check, what is allowed).
_JSON_TYPES = {
    "name": (lambda v: isinstance(v, str), "a string"),
    "num_ranks": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "num_microbatches": (lambda v: v is None or (_is_int(v) and v >= 1),
                         "an integer >= 1 (or null: inferred)"),
    "num_minibatches": (lambda v: v is None or (_is_int(v) and v >= 1),
                        "an integer >= 1 (or null: inferred)"),
    "chunks": (lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
    "weight_mode": (lambda v: v is None or isinstance(v, str), "a string (or null: derived)"),
    "warmup": (lambda v: _is_int(v) and v >= 0, "an integer >= 0"),
    "placement": (lambda v: v is None or isinstance(v, str) or (
        isinstance(v, list) and all(_is_int(r) for r in v)),
                  "a list of ranks, one per virtual stage (or 'v', 'loop', 'rows')"),
    "notes": (lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v),
              "a list of strings"),
    "ranks": (lambda v: isinstance(v, list) and all(isinstance(r, list) for r in v),
              "a list of rows, one list of action strings per rank"),
}


_JSON_TYPES.update({old: _JSON_TYPES[new] for old, new in OLD_JSON_KEYS.items()})


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_json_types(data: dict) -> None:
    """Raise ScheduleError naming the first field whose value has the wrong type."""
    for key, (ok, allowed) in _JSON_TYPES.items():
        if key in data and not ok(data[key]):
            raise ScheduleError(f"schedule JSON field {key!r} is {_short(data[key])}; "
                                f"allowed: {allowed}")


#: The first cell of a CSV's placement row (``placement,0,1,1,0``).
CSV_PLACEMENT = "placement"


def to_csv(schedule: Schedule) -> str:
    """One CSV line per rank: that rank's actions in order (no header, ragged rows); first a
    ``placement,...`` row when the schedule has chunks (so the file says how many, round
    robin included) or its placement is not round robin."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if schedule.chunks > 1 or not schedule.round_robin:
        writer.writerow([CSV_PLACEMENT, *schedule.placement])
    writer.writerows(schedule.rows())
    return buffer.getvalue()


def from_csv(text: str, **kwargs) -> Schedule:
    """Read :func:`to_csv` output; keyword arguments as for :func:`from_rows` (name, ...).

    A first row ``placement,r0,r1,...`` gives each virtual stage's rank (a ``placement``
    keyword may not contradict it)."""
    reader = csv.reader(io.StringIO(text))
    try:
        rows = list(reader)
    except csv.Error as exc:  # e.g. a field over csv's 128 KiB limit
        raise ScheduleError(f"CSV line {reader.line_num}: {exc}; a cell holds one action "
                            "like '2F0'") from None
    if rows and rows[0] and rows[0][0].strip() == CSV_PLACEMENT:
        cells = [cell.strip() for cell in rows[0][1:] if cell.strip()]
        if not all(cell.isdigit() and len(cell) < 6 for cell in cells):
            raise ScheduleError(f"CSV placement row {_short(rows[0])}: allowed: 'placement' "
                                "then one rank (an integer) per virtual stage")
        given = tuple(int(cell) for cell in cells)
        if kwargs.get("placement") not in (None, given):
            raise ScheduleError(f"the CSV's placement row says {list(given)} but "
                                f"placement={kwargs['placement']!r} was given")
        kwargs["placement"] = given
        rows = rows[1:]
    return from_rows(rows, **kwargs)


#: File suffixes :func:`load_schedule` reads.
SCHEDULE_SUFFIXES = (".csv", ".json")


def load_schedule(path, **kwargs) -> Schedule:
    """Read a schedule file: ``.json`` (:func:`from_json`) or ``.csv`` (:func:`from_csv`).

    Keyword arguments are :func:`from_rows`'s, for a CSV (which holds only the rows): the
    name defaults to "custom", ``num_microbatches`` to what the updates imply and the
    weight mode to the derived one. A JSON file says all of this itself; keyword arguments
    are refused with it.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SCHEDULE_SUFFIXES:
        raise ScheduleError(f"schedule file {str(path)!r}: unknown suffix {suffix!r}; allowed: "
                            f"{', '.join(SCHEDULE_SUFFIXES)}")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScheduleError(f"cannot read schedule file {str(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ScheduleError(
            f"schedule file {str(path)!r} is not UTF-8 text (byte {exc.object[exc.start]:#04x} "
            f"at offset {exc.start}); save it as UTF-8"
        ) from None
    try:
        if suffix == ".json":
            given = {k: v for k, v in kwargs.items() if v is not None}
            if given:
                raise ScheduleError(f"{', '.join(sorted(given))}: a JSON schedule says these "
                                    "itself; give them only with a CSV file")
            return from_json(text)
        kwargs.setdefault("name", "custom")
        kwargs.setdefault("num_microbatches", None)
        return from_csv(text, **kwargs)
    except ValueError as exc:  # ScheduleError, or a field a Schedule refuses (weight_mode)
        raise ScheduleError(f"{path.name}: {exc}") from None
