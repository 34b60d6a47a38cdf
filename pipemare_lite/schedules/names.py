"""The schedule names and the weight mode each one must have (introduced in chapter 02).

One table, :data:`NAMED_WEIGHT_MODES`, in the order the chapters introduce the schedules;
validation (:mod:`.validation`) checks a schedule's weight mode against it, and the registry
(:mod:`.registry`) pairs each name with its builder. A name added by
:func:`~pipemare_lite.schedules.registry.register_schedule` goes into
:data:`REGISTERED_WEIGHT_MODES`. Torch-free; nothing here is filled in by another module at
import time.
"""

from __future__ import annotations

from pipemare_lite.schedules.weight_modes import ASYNC, STASH, SYNC, TWO_BW, WeightMode

#: name, weight mode: every schedule the book builds, in the order the chapters show them.
NAMED_WEIGHT_MODES: tuple[tuple[str, WeightMode], ...] = (
    ("naive", SYNC),
    ("gpipe", SYNC),
    ("1f1b", SYNC),
    ("interleaved", SYNC),
    ("zb-h1", SYNC),
    ("zb-h2", SYNC),
    ("zb-v", SYNC),
    ("dualpipev", SYNC),
    ("pipedream", STASH),
    ("2bw", TWO_BW),
    ("async", ASYNC),
)

#: Other accepted spellings: PipeMare's order is the async pipeline (T1/T2 are executor options).
ALIASES = {"pipemare": "async"}

#: built-in name (aliases included) -> its weight mode's name
BUILTIN_WEIGHT_MODES: dict[str, str] = {name: mode.name for name, mode in NAMED_WEIGHT_MODES}
BUILTIN_WEIGHT_MODES.update({alias: BUILTIN_WEIGHT_MODES[name] for alias, name in ALIASES.items()})
#: registered name -> its weight mode's name (filled by register_schedule)
REGISTERED_WEIGHT_MODES: dict[str, str] = {}
#: name -> the other weight modes a registered method runs its order in (filled by
#: :func:`pipemare_lite.methods.register_method`: ``fixture-stash`` runs pipedream's order
#: in the ``async`` mode, with hooks that stash)
METHOD_WEIGHT_MODES: dict[str, set[str]] = {}


def known_names(*, builtin: bool = False) -> tuple[str, ...]:
    """Names validate() accepts: the built-in ones and "custom", then (unless ``builtin``)
    the registered ones."""
    names = (*BUILTIN_WEIGHT_MODES, "custom")
    return names if builtin else names + tuple(REGISTERED_WEIGHT_MODES)


def weight_mode_of(name: str) -> str | None:
    """The weight mode schedules called ``name`` must have (None: any, e.g. "custom")."""
    return BUILTIN_WEIGHT_MODES.get(name) or REGISTERED_WEIGHT_MODES.get(name)


def weight_modes_allowed(name: str) -> tuple[str, ...]:
    """Every weight mode a schedule called ``name`` may run in: its own
    (:func:`weight_mode_of`), then those registered methods pair its order with, sorted
    (empty: any, e.g. "custom")."""
    own = weight_mode_of(name)
    if own is None:
        return ()
    return (own, *sorted(METHOD_WEIGHT_MODES.get(name, set()) - {own}))
