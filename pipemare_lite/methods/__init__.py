"""How each training method treats weights: versions, T1, T2 and the registry (chapters 05-10).

- :mod:`~pipemare_lite.methods.versions`: which weight version a forward/backward sees;
- :mod:`~pipemare_lite.methods.lr_rescheduling` and :mod:`~pipemare_lite.methods.discrepancy`:
  PipeMare's T1 and T2;
- :mod:`~pipemare_lite.methods.registry`: the methods' table and their names -> schedule
  builder, weight mode, default options, hooks; :func:`register_method` adds one;
- :mod:`~pipemare_lite.methods.hooks`: the per-stage hooks a method chooses weights with;
- :mod:`~pipemare_lite.methods.tradeoff`: the methods side by side, memory and utilization
  (chapter 10);
- chapter 12's methods (``wpred``, ``nesterov``, ``dc``: :mod:`~pipemare_lite.methods.beyond`),
  each one file through the public API as a plugin would be; built in, imported on first use.

Importing this package loads no torch (the registry and the trade-off table are torch-free);
the first name read from it loads chapter 12's methods, so that :data:`METHODS` lists them.
"""

from pipemare_lite._lazy import lazy_exports

_EXPORTS = {
    **dict.fromkeys(("METHODS", "METHOD_TABLE", "MethodOptions", "MethodSpec", "get_method",
                     "method_options", "build_method_schedule", "register_method", "t2_hooks"),
                    "pipemare_lite.methods.registry"),
    **dict.fromkeys(("MethodHooks", "StageInfo", "HookError"), "pipemare_lite.methods.hooks"),
    **dict.fromkeys(("WeightVersions", "ParamRef"), "pipemare_lite.methods.versions"),
    **dict.fromkeys(("DiscrepancyCorrection", "DiscrepancyHooks"),
                    "pipemare_lite.methods.discrepancy"),
    **dict.fromkeys(("LRRescheduling", "LRReschedulingHooks", "stage_forward_delays"),
                    "pipemare_lite.methods.lr_rescheduling"),
    "rescheduling_factor": "pipemare_lite.analysis.stage_lr",
}
__all__ = list(_EXPORTS)
_read_export, __dir__ = lazy_exports(__name__, _EXPORTS)


def __getattr__(name: str):
    """An exported name, imported on first read (chapter 12's methods registered first)."""
    if name in _EXPORTS:
        from pipemare_lite.methods.registry import load_built_in_methods

        load_built_in_methods()
    return _read_export(name)
