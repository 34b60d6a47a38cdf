"""Chapter 12's methods, imported by :mod:`pipemare_lite.methods` (so they are built in).

Importing it registers ``wpred`` (:mod:`~pipemare_lite.methods.weight_prediction`),
``nesterov`` (:mod:`~pipemare_lite.methods.nesterov`) and ``dc``
(:mod:`~pipemare_lite.methods.delay_compensation`), each written in its own file through the
public extension points exactly as a plugin of yours would be (yours loads with
``--plugin``: :mod:`pipemare_lite.plugins`). One difference: they import the extension points
from their submodules (``methods.hooks``, ``methods.registry``), since the package that a
plugin imports them from imports these files (no import cycle, ``tests/test_import_cycles.py``).
"""

import pipemare_lite.methods.delay_compensation  # noqa: F401  (registers "dc")
import pipemare_lite.methods.nesterov  # noqa: F401  (registers "nesterov")
import pipemare_lite.methods.weight_prediction  # noqa: F401  (registers "wpred")
