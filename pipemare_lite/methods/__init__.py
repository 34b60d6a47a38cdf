"""How each training method treats weights: versions, T1, T2 and the registry (chapters 05-09).

- :mod:`~pipemare_lite.methods.versions`: which weight version a forward/backward sees;
- :mod:`~pipemare_lite.methods.lr_rescheduling` and :mod:`~pipemare_lite.methods.discrepancy`:
  PipeMare's T1 and T2;
- :mod:`~pipemare_lite.methods.registry`: method names -> schedule builder, weight mode,
  default options, hooks; :func:`register_method` adds one;
- :mod:`~pipemare_lite.methods.hooks`: the per-stage hooks a method chooses weights with;
- chapter 12's methods (:mod:`~pipemare_lite.methods.beyond`: ``wpred``, ``nesterov``,
  ``dc``), each one file through the public API as a plugin would be, imported here so that
  they are built in.
"""

from pipemare_lite.methods.discrepancy import DiscrepancyCorrection, DiscrepancyHooks
from pipemare_lite.methods.hooks import HookError, MethodHooks, StageInfo
from pipemare_lite.methods.lr_rescheduling import (
    LRRescheduling,
    LRReschedulingHooks,
    rescheduling_factor,
    stage_forward_delays,
)
from pipemare_lite.methods.registry import (
    METHODS,
    MethodOptions,
    MethodSpec,
    build_method_schedule,
    get_method,
    method_options,
    register_method,
    t2_hooks,
)
from pipemare_lite.methods.versions import ParamRef, WeightVersions

__all__ = [
    "METHODS", "MethodOptions", "MethodSpec", "get_method", "method_options",
    "build_method_schedule", "register_method", "t2_hooks", "MethodHooks", "StageInfo",
    "WeightVersions", "ParamRef", "DiscrepancyCorrection", "DiscrepancyHooks",
    "LRRescheduling", "LRReschedulingHooks", "rescheduling_factor", "stage_forward_delays",
    "HookError",
]

# chapter 12's methods register themselves through the public API above (last: they import it)
from pipemare_lite.methods import beyond as _beyond  # noqa: E402, F401
