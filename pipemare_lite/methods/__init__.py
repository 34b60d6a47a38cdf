"""How each training method treats weights: versions, T1, T2 and the registry (chapters 05-09).

- :mod:`~pipemare_lite.methods.versions`: which weight version a forward/backward sees
  (saved-tensor hooks, stashed copies, reference counts);
- :mod:`~pipemare_lite.methods.lr_rescheduling`: PipeMare's T1 scheduler;
- :mod:`~pipemare_lite.methods.discrepancy`: PipeMare's T2 correction;
- :mod:`~pipemare_lite.methods.registry`: method names -> schedule builder, weight mode,
  default options.
"""

from pipemare_lite.methods.discrepancy import DiscrepancyCorrection
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
)
from pipemare_lite.methods.versions import ParamRef, WeightVersions

__all__ = [
    "METHODS",
    "MethodOptions",
    "MethodSpec",
    "get_method",
    "method_options",
    "build_method_schedule",
    "WeightVersions",
    "ParamRef",
    "DiscrepancyCorrection",
    "LRRescheduling",
    "rescheduling_factor",
    "stage_forward_delays",
]
