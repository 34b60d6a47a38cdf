"""``pipemare-lite schedule NAME``: build a schedule, simulate it, print the timeline and metrics.

Examples::

    python -m pipemare_lite schedule 1f1b --stages 4 --microbatches 8
    python -m pipemare_lite schedule interleaved --stages 4 --microbatches 8 --chunks 2
    python -m pipemare_lite schedule async --stages 4 --microbatches 2 --minibatches 6 --json
    python -m pipemare_lite schedule zb-h1 --stages 4 --microbatches 8 --costs 1,2,1
    python -m pipemare_lite schedule interleaved -P 2 -M 4 --torch-csv > s.csv  # PyTorch's
    python -m pipemare_lite schedule --from my_schedule.csv      # a hand-written schedule
    python -m pipemare_lite schedule zb-v -P 4 -M 8              # V placement, 2 chunks a rank
    python -m pipemare_lite schedule --from v.csv --placement v  # a V-shaped hand-written one
    python -m pipemare_lite schedule 1f1b -P 2 -M 4 --save s.json # a file --from reads back
    python -m pipemare_lite schedule --plugin my_schedules eager-1f1b -P 4 -M 8  # registered

``--from FILE`` reads a ``.csv`` (one row of actions per rank) or ``.json`` schedule
(:func:`pipemare_lite.schedules.io.load_schedule`, docs/write-a-schedule.md) instead of
building one; for a CSV, ``--microbatches`` says how many microbatches a minibatch has
(default: all the rows name, or what their updates imply) and ``--weight-mode`` what the
backwards read (default: derived; needed when the schedule does not flush). A CSV's
placement (which rank holds which virtual stage) is its first row ``placement,0,1,1,0`` if it
has one, else ``--placement``: ``v`` (rank r holds r and 2P-1-r), ``loop`` (round robin, the
default), ``rows`` (each stage on the rank whose row runs it) or one rank per stage,
``0,1,1,0``; a JSON schedule has a ``"placement"`` list.

``--save FILE`` also writes the schedule itself (``.json``: every field, see
docs/write-a-schedule.md; ``.csv``: the rows), a file ``--from FILE``, ``fit(schedule=FILE)``
and ``train --schedule FILE`` read back unchanged; ``--json`` prints a report (metrics), not a
schedule. A schedule a plugin registers is built like the others once ``--plugin MODULE`` (or
``PIPEMARE_PLUGINS``) names its module.

``--csv`` prints the engine's rows (with U, microbatches numbered over the whole run);
``--torch-csv`` prints one flushed minibatch (``--minibatch k``, needed when K > 1) in
PyTorch's compute-only notation, the file ``_PipelineScheduleRuntime._load_csv`` reads
(see :mod:`pipemare_lite.interop.torch_notation`).

``--microbatches N`` is N, microbatches per minibatch, i.e. per optimizer update (PipeMare's
N) for every schedule. ``--update-every N``, its old spelling, still works with a warning
until the next release (docs/glossary.md). ``--costs F,B[,W]`` gives the forward and the
whole backward; with W, split backwards cost I = B - W and W (default: I = W = B/2); costs
whose sum over the run would overflow a float are refused, naming the bound.

Limits: a schedule is built only when it fits in memory, at a measured
:data:`REPORT_BYTES_PER_ACTION` bytes an action (:data:`ROWS_BYTES_PER_ACTION` for ``--csv``
and ``--torch-csv``) within half of this machine's memory or what ``ulimit -v`` leaves
(:func:`check_memory`); a ``MemoryError`` anyway is one line and exit status 2. Torch-free.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable

from pipemare_lite.analysis.simulate import (
    COSTS_PER,
    OpCosts,
    ScheduleMetrics,
    simulate_and_measure,
    steady_state_utilization,
)
from pipemare_lite.analysis.staleness import stage_delays, steady_state_minibatches
from pipemare_lite.analysis.timeline import Timeline
from pipemare_lite.deprecation import warn_renamed
from pipemare_lite.interop.torch_notation import to_torch_csv
from pipemare_lite.schedules import ALIASES, WEIGHT_MODES, Schedule, build_schedule
from pipemare_lite.schedules.io import SCHEDULE_SUFFIXES, to_csv, to_json
from pipemare_lite.schedules.registry import (
    is_asynchronous,
    schedule_names,
    standalone,
    unknown_schedule_message,
)

#: Widest text grid printed (in time cells); wider timelines print metrics only.
MAX_GRID_CELLS = 160

#: Bytes one action costs this command at its peak when it simulates (the text report and
#: ``--json``: the schedule, its timeline, and the K+1-minibatch schedule the steady-state
#: utilization builds beside it). Measured as the growth of VmPeak (/proc/self/status) over
#: the action count, one fresh process each, torch 2.13 / Python 3.11 on x86-64 Linux:
#: 1f1b P=64 M=600 (76,864 actions) 1044 B, P=128 M=1200 (307,328) 1051 B, gpipe 1058 B,
#: zb-h1 1036 B, interleaved v=2 1110 B, async P=16 M=8 K=300 820 B; rounded up to 1200.
#: (schedules.validation's BYTES_PER_ACTION, 260, is the build alone.)
REPORT_BYTES_PER_ACTION = 1200
#: The same for ``--csv`` and ``--torch-csv`` (no simulation): 286 B measured (322 B with
#: ``--save FILE.json``), rounded up to 350.
ROWS_BYTES_PER_ACTION = 350


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``schedule`` (numbers are parsed in :func:`run` for clear messages)."""
    parser.add_argument("name", nargs="?",
                        help=f"one of: {', '.join(schedule_names() + tuple(ALIASES))}")
    parser.add_argument("--from", dest="from_file", metavar="FILE",
                        help="read a .csv or .json schedule instead of building NAME")
    parser.add_argument("--weight-mode", choices=WEIGHT_MODES,
                        help="--from a CSV: what backwards read (default: derived)")
    parser.add_argument("--placement", metavar="v|loop|rows|R0,R1,...",
                        help="--from a CSV: which rank holds each virtual stage "
                             "(default: its placement row, else round robin)")
    parser.add_argument("--stages", "-P", metavar="P", help="pipeline stages (ranks)")
    parser.add_argument("--microbatches", "-M", metavar="N",
                        help="N, microbatches per minibatch (one update per minibatch)")
    parser.add_argument("--chunks", "-v", metavar="V", help="model chunks per rank (interleaved)")
    parser.add_argument(
        "--minibatches", "-K", metavar="K", default="1", help="minibatches (updates)"
    )
    parser.add_argument(
        "--update-every",
        metavar="N",
        help="deprecated spelling of --microbatches (removed in the next release)",
    )
    parser.add_argument(
        "--warmup", metavar="W", default="0", help="async schedules: first W minibatches flushed"
    )
    parser.add_argument(
        "--costs", metavar="F,B[,W]", default="1,2", help="forward, backward[, weight-grad] cost"
    )
    parser.add_argument("--comm", metavar="C", default="0", help="latency between ranks")
    parser.add_argument("--costs-per", choices=COSTS_PER, default="chunk",
                        help="--costs are those of one chunk (default) or of a rank's whole "
                             "share of the model, split over its chunks (makespans then "
                             "compare across chunk counts)")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print one JSON object")
    output.add_argument("--csv", action="store_true", help="print the schedule, one row per rank")
    output.add_argument(
        "--torch-csv",
        action="store_true",
        help="print one minibatch in torch.distributed.pipelining's compute-only CSV",
    )
    parser.add_argument(
        "--minibatch", metavar="k", help="with --torch-csv: which minibatch (0-based)"
    )
    parser.add_argument("--save", metavar="FILE",
                        help="also write the schedule to FILE (.json or .csv), for --from FILE")


def run(args: argparse.Namespace) -> int:
    """Build, simulate, print. Bad input raises ValueError (the CLI prints it, exit 2)."""
    save = getattr(args, "save", None)
    if save is not None and not str(save).lower().endswith(SCHEDULE_SUFFIXES):
        raise ValueError(f"--save={save}: allowed: a file ending in "
                         f"{' or '.join(SCHEDULE_SUFFIXES)}")
    schedule, costs, build = _schedule_and_costs(args)
    if save is not None:
        save_schedule(schedule, save)
    if args.minibatch is not None and not args.torch_csv:
        raise ValueError(f"--minibatch={args.minibatch}: only applies with --torch-csv")
    if args.torch_csv:
        minibatch = None if args.minibatch is None else _integer("--minibatch", args.minibatch, 0)
        print(to_torch_csv(schedule, minibatch), end="")
        return 0
    if args.csv:
        print(to_csv(schedule), end="")
        return 0
    check_time_range(schedule, costs, args.costs, args.comm, build is not None)
    timeline, measured = simulate_and_measure(schedule, costs)
    # a file holds one run: there is no "one more minibatch" to simulate
    steady = None if build is None else steady_state_utilization(
        build, costs, minibatches=schedule.num_minibatches)
    if args.json:
        print(json.dumps(summary(schedule, costs, measured, steady)))
    else:
        print(render_text(schedule, timeline, measured, steady))
    return 0


def _from_file(args) -> Schedule:
    """``--from FILE``: the schedule a file holds (building options are refused)."""
    from pipemare_lite.schedules.io import load_schedule

    if args.name is not None:
        raise ValueError(f"give a schedule NAME ({args.name!r}) or --from FILE, not both")
    built = {"--chunks": args.chunks, "--update-every": args.update_every,
             "--minibatches": None if args.minibatches == "1" else args.minibatches,
             "--warmup": None if args.warmup == "0" else args.warmup}
    given = [flag for flag, value in built.items() if value is not None]
    if given:
        raise ValueError(f"{', '.join(given)}: only for building a schedule; a file says it")
    extra = {}
    if args.microbatches is not None:
        extra["num_microbatches"] = _integer("--microbatches", args.microbatches, 1)
    if args.weight_mode is not None:
        extra["weight_mode"] = args.weight_mode
    if getattr(args, "placement", None) is not None:
        extra["placement"] = parse_placement(args.placement)
    schedule = load_schedule(args.from_file, **extra)
    if args.stages is not None and _integer("--stages", args.stages, 1) != schedule.num_ranks:
        raise ValueError(f"--stages={args.stages} disagrees with {args.from_file}, which has "
                         f"{schedule.num_ranks} rank rows")
    return schedule


def parse_placement(text: str):
    """``--placement``: a style (``v``, ``loop``, ``rows``) or ranks ``0,1,1,0`` (one per
    virtual stage); anything else raises ValueError naming it."""
    from pipemare_lite.schedules.actions import PLACEMENT_STYLES

    text = text.strip()
    if text in (*PLACEMENT_STYLES, "rows"):
        return text
    try:
        return tuple(int(cell) for cell in text.split(","))
    except ValueError:
        raise ValueError(f"--placement={text!r}: allowed: {', '.join(PLACEMENT_STYLES)}, rows, "
                         "or one rank per virtual stage like 0,1,1,0") from None


def _schedule_and_costs(args) -> tuple[Schedule, OpCosts, Callable[[int], Schedule] | None]:
    """The schedule, its costs, and how to build it with K minibatches (None for a file)."""
    if args.from_file is not None:
        return _from_file(args), parse_costs(args.costs, args.comm, args.costs_per), None
    if args.weight_mode is not None:
        raise ValueError("--weight-mode only applies with --from FILE (a builder sets its own)")
    if getattr(args, "placement", None) is not None:
        raise ValueError(f"--placement={args.placement}: only applies with --from FILE (a "
                         "builder places its own stages: zb-v and dualpipev on a V)")
    name = args.name
    if name is None:
        raise ValueError("give a schedule NAME or --from FILE")
    key = ALIASES.get(name, name)
    if key not in schedule_names():  # (--plugin and PIPEMARE_PLUGINS are loaded already)
        raise ValueError(unknown_schedule_message(name))
    if args.stages is None:
        raise ValueError("--stages is required (an integer >= 1)")
    stages = _integer("--stages", args.stages, 1)
    microbatches = (
        None if args.microbatches is None else _integer("--microbatches", args.microbatches, 1)
    )
    if args.update_every is not None:
        warn_renamed("--update-every", "--microbatches", "pipemare-lite schedule")
        every = _integer("--update-every", args.update_every, 1)
        if not is_asynchronous(key) and microbatches is not None and every != microbatches:
            raise ValueError(
                f"--update-every={every}: {name} updates once per minibatch of --microbatches="
                f"{microbatches}; allowed: {microbatches} (or use an async schedule)"
            )
        if microbatches is not None and every != microbatches:
            raise ValueError(
                f"--update-every={every} and --microbatches={microbatches} disagree: both are the "
                "microbatches per update; give one"
            )
        microbatches = every
    if microbatches is None:
        raise ValueError("--microbatches is required (an integer >= 1)")
    default_chunks = "2" if key == "interleaved" else "1"
    chunks = _integer("--chunks", args.chunks or default_chunks, 1)
    warmup = _integer("--warmup", args.warmup, 0)
    minibatches = _integer("--minibatches", args.minibatches, 1)
    rows_only = bool(getattr(args, "csv", False) or getattr(args, "torch_csv", False))
    check_memory(key, stages, microbatches, minibatches, chunks, rows_only)

    def build(minibatches: int) -> Schedule:
        return build_schedule(name, stages, microbatches, chunks=chunks,
                              num_minibatches=minibatches, warmup=warmup)

    schedule = build(minibatches)
    return schedule, parse_costs(args.costs, args.comm, args.costs_per), build


def memory_budget() -> tuple[int, str]:
    """Bytes this command may spend on a schedule, and where the number comes from: half of
    this machine's physical memory, or less when ``ulimit -v`` (RLIMIT_AS) leaves less
    room than that above what the process has mapped already."""
    from pipemare_lite.cli.commands.train import memory_limit_bytes

    budget, source = memory_limit_bytes(), "half of this machine's memory"
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):  # no resource module (Windows)
        return budget, source
    if soft != resource.RLIM_INFINITY:
        room = soft - _mapped_bytes()
        if room < budget:
            budget, source = max(room, 0), f"what ulimit -v ({soft / 2**30:,.2f} GiB) leaves"
    return budget, source


def _mapped_bytes() -> int:
    """This process's virtual size (VmSize), what RLIMIT_AS counts; 0 where not known."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def check_memory(name: str, stages: int, microbatches: int, minibatches: int, chunks: int,
                 rows_only: bool) -> None:
    """Raise ValueError, with the estimate and the budget, when building and reporting the
    schedule would need more memory than :func:`memory_budget` allows (checked before
    anything is built; :data:`REPORT_BYTES_PER_ACTION` or, for ``rows_only`` output,
    :data:`ROWS_BYTES_PER_ACTION` per action)."""
    from pipemare_lite.schedules.validation import action_count, check_total_work

    check_total_work(name, stages, microbatches, minibatches, chunks)  # the builder's cap first
    total = action_count(name, stages, microbatches, minibatches, chunks)
    per_action = ROWS_BYTES_PER_ACTION if rows_only else REPORT_BYTES_PER_ACTION
    budget, source = memory_budget()
    if total * per_action > budget:
        raise ValueError(
            f"{name} with P={stages}, M={microbatches}, K={minibatches}, v={chunks} is "
            f"{total:,} actions: about {total * per_action / 2**30:,.2f} GiB for this command "
            f"({per_action:,} bytes an action, measured), more than the "
            f"{budget / 2**30:,.2f} GiB it may use ({source}): at most "
            f"{budget // per_action:,} actions; use fewer stages, microbatches or minibatches"
            + ("" if rows_only else f" (--csv needs {ROWS_BYTES_PER_ACTION} bytes an action)")
        )


def save_schedule(schedule: Schedule, path) -> None:
    """Write ``schedule`` to ``path``: JSON (every field) for ``.json``, the rows for ``.csv``
    (a CSV keeps no weight mode: an unflushed one needs ``--weight-mode`` to be read back).
    A registered builder's schedule is written as "custom" (:func:`standalone`), so the
    file loads in a process without its plugin."""
    from pathlib import Path

    schedule = standalone(schedule)
    text = to_json(schedule) + "\n" if str(path).lower().endswith(".json") else to_csv(schedule)
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"--save={path}: cannot write: {exc.strerror}") from None


def _integer(flag: str, text: str, low: int) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise ValueError(f"{flag}={text!r}: allowed: an integer >= {low}") from None
    if value < low:
        raise ValueError(f"{flag}={value}: allowed: an integer >= {low}")
    return value


def parse_costs(text: str, comm: str = "0", costs_per: str = "chunk") -> OpCosts:
    """``"F,B"`` or ``"F,B,W"`` -> :class:`OpCosts` (B the whole backward; I = B - W);
    ``costs_per``: :attr:`OpCosts.costs_per`."""
    try:
        values = [float(x) for x in text.split(",")]
        latency = float(comm)
    except ValueError:
        raise ValueError(
            f"--costs={text!r} / --comm={comm!r}: allowed: numbers, e.g. --costs 1,2,1 --comm 0"
        ) from None
    if len(values) not in (2, 3) or not all(math.isfinite(x) and x >= 0 for x in values):
        raise ValueError(f"--costs={text!r}: allowed: F,B or F,B,W with finite numbers >= 0")
    forward, backward = values[0], values[1]
    weight = values[2] if len(values) == 3 else backward / 2
    if weight > backward:
        raise ValueError(f"--costs={text!r}: W={weight} > B={backward}; allowed: 0 <= W <= B")
    if not (math.isfinite(latency) and latency >= 0):
        raise ValueError(f"--comm={comm!r}: allowed: a finite number >= 0")
    return OpCosts(
        forward=forward,
        backward=backward,
        input_grad=backward - weight,
        weight_grad=weight,
        comm=latency,
        costs_per=costs_per,
    )


def check_time_range(schedule: Schedule, costs: OpCosts, text: str, comm: str,
                     one_more: bool) -> None:
    """Raise ValueError naming ``--costs`` when the simulated times could overflow a float.

    No time in the simulation exceeds the sum, over every action, of its cost plus one
    latency; with ``one_more`` (the steady-state utilization simulates K+1 minibatches) that
    of K+1 minibatches. When that bound is not a finite float the makespan might not be
    either, and every metric after it would be nonsense.
    """
    actions = sum(len(row) for row in schedule.ranks)
    if one_more:
        actions += -(-actions // schedule.num_minibatches)
    largest = max(costs.forward, costs.backward, costs.input_grad, costs.weight_grad)
    bound = actions * (largest + costs.comm)
    if not math.isfinite(bound):
        raise ValueError(
            f"--costs={text!r} --comm={comm!r}: the simulated times overflow: {actions:,} "
            f"actions of up to {largest:g} (+ {costs.comm:g} latency) add up to more than the "
            f"largest float ({sys.float_info.max:.3g}); allowed: costs whose sum over the run "
            "stays below it (only their ratios change the utilization: scale them down)")


def summary(schedule: Schedule, costs: OpCosts, measured: ScheduleMetrics,
            steady: float | None = None) -> dict:
    """The JSON object ``--json`` prints; ``steady`` is
    :func:`~pipemare_lite.analysis.simulate.steady_state_utilization` (None: not known)."""
    out = {
        "schedule": schedule.name,
        "stages": schedule.num_ranks,
        "microbatches": schedule.num_microbatches,
        "chunks": schedule.chunks,
        "placement": list(schedule.placement),
        "minibatches": schedule.num_minibatches,
        "warmup": schedule.warmup,
        "weight_mode": schedule.weight_mode,
        "costs": {k: v for k, v in vars(costs).items() if k != "stage_multipliers"},
        "makespan": measured.makespan,
        "utilization": measured.utilization,
        "utilization_per_rank": list(measured.utilization_per_rank),
        "bubble_fraction": measured.idle_fraction,
        "bubble_ratio": measured.bubble_ratio,
        "steady_state_utilization": steady,
        "full_pipeline_utilization": measured.full_pipeline_utilization,
        "peak_inflight": list(measured.peak_inflight),
        "notes": list(schedule.notes),
        "actions": schedule.rows(),
    }
    out.update(_delays(schedule))
    return out


def _delays(schedule: Schedule) -> dict:
    """Delays per (virtual) stage in updates, measured by :mod:`pipemare_lite.analysis.staleness`.

    ``forward_delay`` / ``backward_delay``: means over every microbatch of the run, pipeline
    fill and drain included (zeros for flushed schedules); ``max_forward_delay``: the largest;
    ``steady_forward_delay``: the mean over the steady-state minibatches only (what the closed
    forms describe), or None when the run is too short to have a steady state.
    """
    whole = stage_delays(schedule)
    steady_range = steady_state_minibatches(schedule)
    steady = stage_delays(schedule, minibatches=steady_range) if len(steady_range) else None
    return {
        "forward_delay": [d.mean_forward_delay for d in whole],
        "backward_delay": [d.mean_backward_delay for d in whole],
        "max_forward_delay": [d.max_forward_delay for d in whole],
        "steady_forward_delay": None if steady is None else [d.mean_forward_delay for d in steady],
    }


def render_text(schedule: Schedule, timeline: Timeline, measured: ScheduleMetrics,
                steady: float | None = None) -> str:
    """A text grid of the timeline (one row per rank, time across) and the metrics; ``steady``
    as in :func:`summary`."""
    s, m = schedule, measured
    head = (
        f"{s.name}: P={s.num_ranks} stages, M={s.num_microbatches} microbatches"
        + (f", v={s.chunks} chunks" if s.chunks > 1 else "")
        + f", K={s.num_minibatches} minibatches"
        + (f", W={s.warmup} warm-up" if s.warmup else "")
        + f", weight mode {s.weight_mode}"
    )
    lines = [head, *(f"note: {note}" for note in s.notes)]
    if not s.round_robin:  # which rank holds which virtual stage
        lines.append("placement: " + ", ".join(
            f"rank {r} holds {s.stages_of(r)}" for r in range(s.num_ranks)))
    lines.append("")
    lines += text_grid(timeline)
    full = m.full_pipeline_utilization
    lines += [
        "",
        f"makespan            {m.makespan:g}",
        f"utilization         {m.utilization:.4f}",
        f"bubble fraction     {m.idle_fraction:.4f}   (idle / all device time)",
        f"bubble ratio        {m.bubble_ratio:.4f}   (idle / busy time)",
        "steady utilization  " + ("n/a (a schedule from a file: no minibatch to add)"
                                  if steady is None else
                                  f"{steady:.4f}   (one more minibatch: its work / its time)"),
        "full-pipeline util  " + ("n/a (no rank has both F and B left at once)" if full is None
                                  else f"{full:.4f}   (between the first fill and the last drain)"),
        f"peak in-flight      {list(m.peak_inflight)}   (microbatch activations held, per rank)",
    ]
    delays = _delays(schedule)
    lines.append(
        f"forward delay       {[round(x, 2) for x in delays['forward_delay']]}"
        "   (updates, per stage, mean over the run)"
    )
    lines.append(f"max forward delay   {delays['max_forward_delay']}")
    if delays["steady_forward_delay"] is not None:
        steady = [round(x, 2) for x in delays["steady_forward_delay"]]
        lines.append(f"steady fwd delay    {steady}   (mean over the steady-state minibatches)")
    lines.append(f"backward delay      {[round(x, 2) for x in delays['backward_delay']]}")
    return "\n".join(lines)


def _grid_unit(durations: list[float]) -> float:
    """The largest time step that every duration is (nearly) a whole multiple of, trying the
    shortest op divided by 1..8 (e.g. 0.5 for costs 1 and 1.5); else the shortest op."""
    shortest = min(durations)
    for divisor in range(1, 9):
        unit = shortest / divisor
        if all(abs(d / unit - round(d / unit)) < 1e-6 for d in set(durations)):
            return unit
    return shortest


def text_grid(timeline: Timeline, max_cells: int = MAX_GRID_CELLS) -> list[str]:
    """Rows like ``rank 0 | F0 F1 B0 -- ...``: one cell per time unit, '.' idle, '--' the
    continuation of a longer op. Zero-cost updates are not drawn."""
    drawn = [e for e in timeline.entries if e.end > e.start]
    if not drawn:
        return ["(nothing to draw)"]
    unit = _grid_unit([e.end - e.start for e in drawn])
    origin = min(e.start for e in timeline.entries)
    cells = round(timeline.makespan / unit)
    if cells > max_cells:
        return [
            f"(timeline grid omitted: {cells} cells wide > {max_cells}; try fewer microbatches)"
        ]
    interleaved = timeline.schedule.chunks > 1

    def label(e) -> str:
        a = e.action
        return str(a) if interleaved else f"{a.kind}{a.index}"

    width = max(len(label(e)) for e in drawn)
    rows = []
    for rank in range(timeline.schedule.num_ranks):
        row = ["." * 1] * cells
        for e in drawn:
            if e.rank != rank:
                continue
            first, last = round((e.start - origin) / unit), round((e.end - origin) / unit)
            for c in range(first, min(last, cells)):
                row[c] = label(e) if c == first else "-" * 2
        rows.append(f"rank {rank:<3}| " + " ".join(cell.ljust(width) for cell in row).rstrip())
    return rows
