"""One entry point for every schedule: :func:`build_schedule` (introduced in chapter 02).

The book's builders are in :data:`BUILDERS`; a researcher adds one with
:func:`register_schedule`, and from then on ``build_schedule``, ``fit(schedule=name)`` and
the CLI (``--schedule NAME``) know it like the built-in ones (see docs/write-a-schedule.md).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import replace

from pipemare_lite.deprecation import accepts_old_keywords, warn_renamed
from pipemare_lite.schedules import names
from pipemare_lite.schedules.actions import Schedule
from pipemare_lite.schedules.builders.async_pipeline import async_pipeline
from pipemare_lite.schedules.builders.common import gc_paused
from pipemare_lite.schedules.builders.dualpipe import dualpipe_v
from pipemare_lite.schedules.builders.gpipe import gpipe
from pipemare_lite.schedules.builders.interleaved import interleaved
from pipemare_lite.schedules.builders.naive import naive
from pipemare_lite.schedules.builders.one_f_one_b import one_f_one_b
from pipemare_lite.schedules.builders.pipedream import pipedream, two_bw
from pipemare_lite.schedules.builders.zero_bubble import zb_h1, zb_h2
from pipemare_lite.schedules.builders.zero_bubble_v import zb_v
from pipemare_lite.schedules.validation import (
    FIXED_CHUNKS,
    LIMITS,
    ScheduleError,
    check_sizes,
    check_total_work,
    validate,
)
from pipemare_lite.schedules.weight_modes import (
    WEIGHT_MODES,
    WeightMode,
    get_weight_mode,
)
from pipemare_lite.spelling import did_you_mean

#: The one table of the book's schedules, in the order the chapters introduce them:
#: name, ``builder(P, N, K, v, W) -> Schedule``, weight mode (from
#: :data:`~pipemare_lite.schedules.names.NAMED_WEIGHT_MODES`). Every list of names
#: (:data:`SCHEDULE_NAMES`, :data:`ASYNC_NAMES`, :data:`BUILDERS`, the names validation
#: accepts, staleness' closed forms) is read from it; the methods' own table, which names
#: these schedules, is :data:`pipemare_lite.methods.registry.METHOD_TABLE`.
Builder = Callable[[int, int, int, int, int], Schedule]
_BUILD: dict[str, Builder] = {
    "naive": lambda P, N, K, v, W: naive(P, N, K),
    "gpipe": lambda P, N, K, v, W: gpipe(P, N, K),
    "1f1b": lambda P, N, K, v, W: one_f_one_b(P, N, K),
    "interleaved": lambda P, N, K, v, W: interleaved(P, N, v, K),
    "zb-h1": lambda P, N, K, v, W: zb_h1(P, N, K),
    "zb-h2": lambda P, N, K, v, W: zb_h2(P, N, K),
    "zb-v": lambda P, N, K, v, W: zb_v(P, N, K),
    "dualpipev": lambda P, N, K, v, W: dualpipe_v(P, N, K),
    "pipedream": lambda P, N, K, v, W: pipedream(P, N, K, W),
    "2bw": lambda P, N, K, v, W: two_bw(P, N, K, W),
    "async": lambda P, N, K, v, W: async_pipeline(P, N, K, W),
}
SCHEDULE_TABLE: tuple[tuple[str, Builder, WeightMode], ...] = tuple(
    (name, _BUILD[name], mode) for name, mode in names.NAMED_WEIGHT_MODES)

#: Every schedule the book builds, in the order the chapters introduce them.
SCHEDULE_NAMES = tuple(name for name, _, _ in SCHEDULE_TABLE)

#: Schedules with no flush, which accept a ``warmup``.
ASYNC_NAMES = tuple(name for name, _, mode in SCHEDULE_TABLE if not mode.flushes)

#: name -> ``builder(P, N, K, v, W) -> Schedule``: one dispatch table (no if-chain), which
#: :func:`register_schedule` extends.
BUILDERS: dict[str, Builder] = {
    name: build for name, build, _ in SCHEDULE_TABLE
}


def schedule_names() -> tuple[str, ...]:
    """The built-in names (:data:`SCHEDULE_NAMES`), then every registered one."""
    return SCHEDULE_NAMES + tuple(name for name in BUILDERS if name not in SCHEDULE_NAMES)


def is_asynchronous(name: str) -> bool:
    """True when schedule ``name`` does not flush (it accepts a ``warmup``)."""
    mode = names.weight_mode_of(name)  # aliases included
    return mode is not None and not get_weight_mode(mode).flushes


#: registered name -> the module whose builder it is (for messages: who registered it)
REGISTERED_BY: dict[str, str] = {}


def register_schedule(name: str, builder: Callable, *, weight_mode: str = "sync",
                      chunks: int | None = None, replace_existing: bool = False) -> None:
    """Make ``build_schedule(name, ...)``, ``fit(schedule=name)`` and ``--schedule name`` work.

    ``builder(num_ranks, num_microbatches, *, num_minibatches, chunks, warmup)``
    returns a :class:`Schedule` named ``name``, or one row of action strings per rank
    (``[["0F0", "0B0"], ...]``: read as :func:`~pipemare_lite.schedules.io.from_rows` does,
    updates added after each minibatch's last gradient when the rows have none).
    ``weight_mode`` declares what its backwards read (one of :data:`WEIGHT_MODES`): "sync"
    schedules must flush every minibatch, which validation checks. ``chunks`` declares a
    builder that always makes that many chunks per rank (a V-shaped one: 2, as ZB-V); it is
    then asked for them whatever ``chunks`` a caller gives (1 or this number, as for ZB-V),
    and ``fit`` and ``--schedule`` need no ``chunks`` (:func:`default_chunks`). None (the
    default): the builder takes the ``chunks`` it is asked for. Registering a built-in
    name is refused; registering a name again is refused unless ``replace_existing=True``
    (as :func:`~pipemare_lite.methods.register_method` does). Other processes know the
    schedule once they import its module (:mod:`pipemare_lite.plugins`). A builder that
    still takes the deprecated ``warmup_minibatches`` instead of ``warmup`` is called with
    it (one warning, here; accepted until the next release).
    """
    if not isinstance(name, str) or not name.strip() or name in names.known_names(builtin=True):
        raise ScheduleError(f"cannot register schedule {name!r}: give a new name (taken: "
                            f"{', '.join(names.known_names(builtin=True))})")
    if name in BUILDERS and not replace_existing:
        raise ScheduleError(f"schedule {name!r} is already registered (by "
                            f"{REGISTERED_BY.get(name, 'an unknown module')}); pass "
                            "replace_existing=True to replace it")
    if not callable(builder):
        raise ScheduleError(f"register_schedule({name!r}): builder {builder!r} is not callable")
    if weight_mode not in WEIGHT_MODES:  # the name; the rule is get_weight_mode(weight_mode)
        raise ScheduleError(f"register_schedule({name!r}): weight_mode={weight_mode!r}; allowed: "
                            f"{', '.join(WEIGHT_MODES)}")
    if chunks is not None and (isinstance(chunks, bool) or not isinstance(chunks, int)
                               or not 1 <= chunks <= LIMITS["chunks"][1]):
        raise ScheduleError(f"register_schedule({name!r}): chunks={chunks!r}; allowed: None "
                            f"(the builder takes the chunks asked) or 1..{LIMITS['chunks'][1]}")
    warmup_keyword = _warmup_keyword(builder, name)
    names.REGISTERED_WEIGHT_MODES[name] = weight_mode  # validate() accepts the name from now on
    if chunks is None:
        FIXED_CHUNKS.pop(name, None)  # a replaced builder may have declared some
    else:
        FIXED_CHUNKS[name] = chunks


    def build(P: int, N: int, K: int, v: int, W: int) -> Schedule:
        v = FIXED_CHUNKS.get(name, v)  # check_sizes allowed 1 or the declared number
        made = builder(P, N, num_minibatches=K, chunks=v, **{warmup_keyword: W})
        if not isinstance(made, Schedule):
            from pipemare_lite.schedules.io import from_rows

            try:
                # with chunks, each stage sits on the rank whose row runs it (a V's rows
                # say their V; round-robin rows read as round robin)
                return from_rows(made, name=name, num_microbatches=N, chunks=v,
                                 weight_mode=weight_mode, num_minibatches=K,
                                 warmup=W, placement="rows" if v > 1 else None)
            except ScheduleError as exc:
                raise ScheduleError(f"schedule builder {name!r} (asked for P={P}, N={N}, "
                                    f"K={K}, v={v}, W={W}): {exc}") from None
        if made.name != name:
            raise ScheduleError(f"schedule builder {name!r} returned a schedule named "
                                f"{made.name!r}; name it {name!r}")
        sizes = (made.num_ranks, made.num_microbatches, made.num_minibatches, made.chunks)
        if sizes != (P, N, K, v):
            raise ScheduleError(
                f"schedule builder {name!r} was asked for P={P}, N={N}, K={K}, v={v} and "
                f"returned P={sizes[0]}, N={sizes[1]}, K={sizes[2]}, v={sizes[3]}"
            )
        return validate(made)

    BUILDERS[name] = build
    REGISTERED_BY[name] = getattr(builder, "__module__", None) or "an unknown module"


def _warmup_keyword(builder: Callable, name: str) -> str:
    """``"warmup"``, or the deprecated ``"warmup_minibatches"`` (with its warning) for a
    builder written before the rename that takes only that one."""
    try:
        parameters = inspect.signature(builder).parameters
    except (TypeError, ValueError):  # no signature to read (a builtin): the new keyword
        return "warmup"
    takes_any = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    if "warmup" in parameters or takes_any or "warmup_minibatches" not in parameters:
        return "warmup"
    warn_renamed("warmup_minibatches", "warmup", f"schedule builder {name!r}'s keyword")
    return "warmup_minibatches"


def default_chunks(name: str) -> int:
    """The chunks per rank a run of schedule ``name`` has when none are given (``fit``,
    ``--schedule NAME``): what a V builder always makes (2: "zb-v", "dualpipev", and a
    registered builder that declared ``chunks``), 2 for "interleaved" (with 1 it is 1F1B),
    else 1. Aliases are read as their schedule; an unknown name gives 1 (its build fails
    later, naming it)."""
    key = names.ALIASES.get(name, name)
    if key in FIXED_CHUNKS:
        return FIXED_CHUNKS[key]
    return 2 if key == "interleaved" else 1


def standalone(schedule: Schedule) -> Schedule:
    """``schedule`` as a file anyone can load: a registered builder's schedule renamed
    "custom" (a registered name is known only where its plugin is loaded), its weight mode
    and placement kept, a note saying which builder made it; a built-in or "custom" one as
    it is (``schedule --save``)."""
    if schedule.name not in names.REGISTERED_WEIGHT_MODES:
        return schedule
    made_by = REGISTERED_BY.get(schedule.name, "an unknown module")
    return replace(schedule, name="custom", notes=(
        *schedule.notes, f"built by registered schedule {schedule.name!r} (module {made_by})"))


def unknown_schedule_message(name) -> str:
    """Why schedule ``name`` is unknown in this process, and how to make it known."""
    from pipemare_lite.plugins import not_registered_here, this_process

    allowed = schedule_names() + tuple(names.ALIASES)
    return (f"unknown schedule name {name!r}; allowed: {', '.join(allowed)}."
            f"{did_you_mean(name, allowed)} Not registered in {this_process()} "
            f"({not_registered_here('schedule', 'register_schedule')})")


@accepts_old_keywords({"warmup_minibatches": "warmup"})
def build_schedule(name: str, num_ranks: int, num_microbatches: int, *, chunks: int = 1,
                   num_minibatches: int = 1, warmup: int = 0) -> Schedule:
    """Build schedule ``name`` with P=``num_ranks`` ranks and N=``num_microbatches`` per minibatch.

    ``chunks`` (v) only applies to "interleaved" (with v=1 it is 1F1B) and to registered
    schedules; "zb-v" and "dualpipev" always have 2 per rank, on the V placement (chunks 1,
    the default, or 2 accepted); ``warmup`` (W, flushed minibatches) only to the asynchronous
    schedules (pipedream, 2bw, async, registered ones whose weight mode is not "sync");
    ``num_minibatches`` (K) repeats flushed schedules K times and runs asynchronous ones for K
    updates per stage. "pipemare" builds the "async" schedule (its name stays "async").
    """
    key = names.ALIASES.get(name, name)
    if key not in BUILDERS:
        from pipemare_lite.plugins import load_plugins  # torch-free

        load_plugins()  # the environment's plugins (each imported once per process)
    if key not in BUILDERS:
        raise ScheduleError(unknown_schedule_message(name))
    # the builders of flushed schedules take neither chunks nor a warm-up: check them here
    check_sizes(name, num_ranks, num_microbatches, num_minibatches, chunks, warmup)
    check_total_work(key, num_ranks, num_microbatches, num_minibatches, chunks)  # the product
    with gc_paused():  # the one pause of a build: ~0.3 s of a P=128, N=1024 one (benchmarks)
        return BUILDERS[key](num_ranks, num_microbatches, num_minibatches, chunks, warmup)
