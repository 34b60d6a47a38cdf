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
pipemare        async               async        T1 + T2 (+ warm-up when warmup > 0)
==============  ==================  ===========  ===============================================

Each PipeMare technique is switchable on its own through :class:`MethodOptions`, so the
ablations of chapter 09 (async, +T1, +T2, +both, +warm-up) are just different options.
:func:`register_method` adds a method (the built-ins above too, from :data:`METHOD_TABLE`,
with :func:`t2_hooks`); other processes know it once they import its module
(:mod:`pipemare_lite.plugins`). Chapter 12's methods (``wpred``, ``nesterov``, ``dc``) are
built in too, each registered by its own file as a plugin registers itself: imported on
first use (:data:`BUILT_IN_MODULES`), so that this module, and the trade-off table that
reads the table, stay torch-free.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from pipemare_lite.deprecation import accepts_old_fields, renamed_keywords
from pipemare_lite.schedules.names import METHOD_WEIGHT_MODES, weight_mode_of
from pipemare_lite.schedules.weight_modes import get_weight_mode
from pipemare_lite.spelling import did_you_mean

#: The book's methods of chapters 02-09: name, the schedule it runs (its weight mode is the
#: schedule's), T1 on, T2 on, one line. Torch-free (the trade-off table reads it).
METHOD_TABLE: tuple[tuple[str, str, bool, bool, str], ...] = (
    ("gpipe", "gpipe", False, False, "all forwards, all backwards, flush"),
    ("1f1b", "1f1b", False, False, "one forward one backward, flush"),
    ("interleaved", "interleaved", False, False, "1F1B over v chunks"),
    ("zb-h1", "zb-h1", False, False, "zero-bubble H1: split backward"),
    ("pipedream", "pipedream", False, False, "async, weight stashing"),
    ("2bw", "2bw", False, False, "PipeDream-2BW: two weight versions"),
    ("async", "async", False, False, "async, no stash (discrepancy)"),
    ("pipemare", "async", True, True, "async + T1 lr rescheduling + T2 discrepancy correction"),
)

#: Chapter 12's methods and issue 43's momentum-aware T1 (torch at import): name -> the file
#: that registers it when imported.
BUILT_IN_MODULES = {name: f"pipemare_lite.methods.{module}" for name, module in (
    ("wpred", "weight_prediction"), ("nesterov", "nesterov"), ("dc", "delay_compensation"),
    ("pipemare-m", "momentum_rescheduling"))}


def load_built_in_methods() -> None:
    """Import chapter 12's methods (:data:`BUILT_IN_MODULES`; each registers itself once)."""
    for module in BUILT_IN_MODULES.values():
        importlib.import_module(module)


#: MethodOptions' old field names (accepted, with a warning, until the next release).
RENAMED_OPTIONS = {"lr_rescheduling": "t1", "rescheduling_horizon": "t1_anneal_updates",
                   "discrepancy_correction": "t2", "warmup_minibatches": "warmup"}


@accepts_old_fields(RENAMED_OPTIONS)
@dataclass(frozen=True)
class MethodOptions:
    """Switches for PipeMare's techniques (all off means plain async for an async schedule).

    The names are ``fit``'s and the command line's (``--t1``, ``--t1-anneal-updates``,
    ``--t2``, ``--gamma``, ``--warmup``; docs/glossary.md).

    Attributes:
        t1: T1, learning-rate rescheduling, on/off (chapter 08).
        t1_anneal_updates: K, updates over which T1 anneals, counted from the first
            asynchronous update; None = the schedule's asynchronous minibatches
            (``num_minibatches - warmup``: anneal over the whole async run).
        t2: T2, discrepancy correction, on/off (chapter 09); needs weight mode ``async``.
        gamma: T2's EMA decay, one value or one per virtual stage.
        warmup: W, the first minibatches run flushed (synchronous); the schedule builder
            lays them out, the executor just follows the schedule. T1 is off during them
            (no delay to compensate) and starts its clock at update W.
        method: the registered method whose hooks every stage builds (set by
            :func:`method_options`); None: the built-in hooks (T2 when switched on). A name,
            not the hooks themselves, so that options travel to other processes as text.

    Deprecated spellings (one warning each, removed in the next release):
    ``lr_rescheduling`` (``t1``), ``rescheduling_horizon`` (``t1_anneal_updates``),
    ``discrepancy_correction`` (``t2``), ``warmup_minibatches`` (``warmup``).
    """

    t1: bool = False
    t1_anneal_updates: int | None = None
    t2: bool = False
    gamma: float | Sequence[float] = 0.9
    warmup: int = 0
    method: str | None = None

    def gamma_for(self, stage: int) -> float:
        """T2's gamma for one virtual stage."""
        if isinstance(self.gamma, (int, float)):
            return float(self.gamma)
        gammas = list(self.gamma)
        if not 0 <= stage < len(gammas):
            raise ValueError(f"gamma has {len(gammas)} values, no entry for stage {stage}")
        return float(gammas[stage])


def t2_hooks(info):
    """The built-in methods' hooks: PipeMare's T2
    (:class:`~pipemare_lite.methods.discrepancy.DiscrepancyHooks`) when ``info.options``
    switches it on, else none."""
    if not info.options.t2:
        return None
    from pipemare_lite.methods.discrepancy import DiscrepancyHooks  # torch only when used

    return DiscrepancyHooks(info.params, info.options.gamma_for(info.stage))


@dataclass(frozen=True)
class MethodSpec:
    """One named method: its schedule builder, weight mode, default options and hooks.

    ``hooks(info: StageInfo) -> MethodHooks | None`` is called once per stage (see
    :mod:`pipemare_lite.methods.hooks`); None: no hooks. ``module`` names where the hooks
    live (the module other processes must import).
    """

    name: str
    builder: str
    weight_mode: str
    options: MethodOptions = field(default_factory=MethodOptions)
    description: str = ""
    hooks: Callable | None = t2_hooks
    module: str = "pipemare_lite.methods.registry"

    def __post_init__(self) -> None:
        try:
            get_weight_mode(self.weight_mode)
        except ValueError as error:
            raise ValueError(f"method {self.name!r}: {error}") from None


#: Every method known in this process, by name (built-ins below, plugins as they import).
METHODS: dict[str, MethodSpec] = {}


def register_method(name: str, *, schedule: str, weight_mode: str | None = None,
                    options: MethodOptions | None = None, hooks: Callable | None = None,
                    description: str = "", replace_existing: bool = False) -> MethodSpec:
    """Make ``name`` a method for :func:`~pipemare_lite.training.loop.fit`, the CLI and the
    executors.

    Args:
        name: the method's name (``fit(method=name)``, ``--method name``).
        schedule: the schedule builder's name (see
            :func:`pipemare_lite.schedules.build_schedule`).
        weight_mode: ``sync``, ``stash``, ``2bw`` or ``async``: which version a backward
            reads when the hooks do not choose (:mod:`pipemare_lite.schedules.weight_modes`);
            None: the schedule's own (a built-in or registered schedule name).
        options: default :class:`MethodOptions` (T1, T2, warm-up); fit's switches override.
        hooks: ``hooks(info: StageInfo) -> MethodHooks | None``, called once per stage
            (:mod:`pipemare_lite.methods.hooks`). A module-level function, so that every
            process of a distributed run finds it after importing the same module.
        description: one line for listings.
        replace_existing: allow replacing a method of that name.

    Returns the :class:`MethodSpec`, known only to the processes that ran this (load the
    module in every process: :mod:`pipemare_lite.plugins`).
    """
    if not isinstance(name, str) or not name or name != name.strip():
        raise ValueError(f"method name must be a non-empty string without surrounding spaces, "
                         f"got {name!r}")
    module = getattr(hooks, "__module__", None) or "pipemare_lite.methods.registry"
    if name in BUILT_IN_MODULES and name not in METHODS and module != BUILT_IN_MODULES[name]:
        load_built_in_methods()  # a built-in name is taken even before its file is imported
    if name in METHODS and not replace_existing:
        raise ValueError(f"method {name!r} is already registered (by {METHODS[name].module}); "
                         "pass replace_existing=True to replace it")
    if hooks is not None and not callable(hooks):
        raise ValueError(f"method {name!r}: hooks must be a function info -> MethodHooks | None, "
                         f"got {hooks!r}")
    if not isinstance(schedule, str):
        raise ValueError(f"method {name!r}: schedule must be a schedule builder's name, "
                         f"got {schedule!r}")
    weight_mode = weight_mode_of(schedule) if weight_mode is None else weight_mode
    if weight_mode is None:
        raise ValueError(f"method {name!r}: schedule {schedule!r} declares no weight mode; "
                         "give weight_mode= (sync, stash, 2bw or async)")
    spec = MethodSpec(name, schedule, weight_mode, options or MethodOptions(), description,
                      hooks, module)  # (checks the weight mode)
    if weight_mode != weight_mode_of(schedule):  # validation accepts the pairing from now on
        METHOD_WEIGHT_MODES.setdefault(schedule, set()).add(weight_mode)
    METHODS[name] = spec
    return spec


# the book's methods, from the one table (each runs its schedule's weight mode)
for _name, _builder, _t1, _t2, _description in METHOD_TABLE:
    register_method(_name, schedule=_builder,
                    options=MethodOptions(t1=_t1, t2=_t2),
                    hooks=t2_hooks, description=_description)


def get_method(name: str) -> MethodSpec:
    """The :class:`MethodSpec` called ``name``.

    A name not registered here is looked up once more after importing the modules named in
    ``PIPEMARE_PLUGINS``; then ValueError says where it looked and how to load a plugin.
    """
    spec = METHODS.get(name)
    if spec is None and name in BUILT_IN_MODULES:
        importlib.import_module(BUILT_IN_MODULES[name])  # chapter 12's, on first use
        spec = METHODS.get(name)
    if spec is None:
        from pipemare_lite.plugins import load_plugins

        load_plugins()  # the environment's plugins (each imported once per process)
        spec = METHODS.get(name)
    if spec is None:
        raise ValueError(unknown_method_message(name))
    return spec


def unknown_method_message(name) -> str:
    """Why ``name`` is unknown in this process, and how to make it known."""
    from pipemare_lite.plugins import not_registered_here, this_process

    load_built_in_methods()  # the list below names every built-in
    return (f"unknown method {name!r}; allowed: {', '.join(METHODS)}."
            f"{did_you_mean(name, METHODS)} Not in "
            f"pipemare_lite.methods.METHODS of {this_process()} "
            f"({not_registered_here('method', 'register_method')})")


def method_options(name: str, **overrides) -> MethodOptions:
    """The method's default options with some switched, e.g. ``t1=False``.

    They carry the method's name, so that every stage builds that method's hooks. The
    deprecated spellings of :class:`MethodOptions` are accepted (with a warning).
    """
    overrides = renamed_keywords(overrides, RENAMED_OPTIONS, "method_options()")
    return replace(get_method(name).options, **{"method": name, **overrides})


def build_method_schedule(name: str, num_ranks: int, num_microbatches: int, *,
                          num_minibatches: int = 1, chunks: int = 1,
                          options: MethodOptions | None = None):
    """The schedule a method runs (warm-up minibatches taken from ``options``).

    The builder's order with the method's weight mode (a method may read another
    builder's schedule with other versions).
    """
    from pipemare_lite.schedules import build_schedule  # builders live with the schedules

    spec = get_method(name)
    options = spec.options if options is None else options
    schedule = build_schedule(spec.builder, num_ranks, num_microbatches, chunks=chunks,
                              num_minibatches=num_minibatches,
                              warmup=options.warmup)
    if schedule.weight_mode != spec.weight_mode:
        schedule = replace(schedule, weight_mode=spec.weight_mode)
    return schedule
