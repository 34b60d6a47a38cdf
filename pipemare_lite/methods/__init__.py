"""How each training method treats weights: versions, T1, T2 and the registry (chapters 05-09).

- :mod:`~pipemare_lite.methods.versions`: which weight version a forward/backward sees
  (saved-tensor hooks, stashed copies, reference counts);
- :mod:`~pipemare_lite.methods.lr_rescheduling`: PipeMare's T1 scheduler;
- :mod:`~pipemare_lite.methods.discrepancy`: PipeMare's T2 correction;
- :mod:`~pipemare_lite.methods.registry`: method names -> schedule builder, weight mode,
  default options, hooks; :func:`register_method` adds one;
- :mod:`~pipemare_lite.methods.hooks`: the per-stage hooks a method uses to choose the
  weights of each forward and backward (docs/write-a-method.md);
- chapter 12's methods, each written only through the public API in one file, exactly as a
  plugin would be: :mod:`~pipemare_lite.methods.weight_prediction` (``wpred``),
  :mod:`~pipemare_lite.methods.nesterov` (look-ahead along the momentum) and
  :mod:`~pipemare_lite.methods.delay_compensation` (``dc``: DC-ASGD on 2BW). This package
  imports them (:mod:`~pipemare_lite.methods.beyond`), so they are built in: in
  :data:`METHODS` of every process, reachable from ``fit`` and the CLI.
"""

from pipemare_lite.methods.discrepancy import DiscrepancyCorrection, DiscrepancyHooks
from pipemare_lite.methods.hooks import MethodHooks, StageInfo
from pipemare_lite.methods.lr_rescheduling import (
    LRRescheduling,
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
    "LRRescheduling", "rescheduling_factor", "stage_forward_delays",
]

# chapter 12's methods register themselves through the public API above (last: they import it)
from pipemare_lite.methods import beyond as _beyond  # noqa: E402, F401
