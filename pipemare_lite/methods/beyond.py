"""Chapter 12's methods, imported by :mod:`pipemare_lite.methods` (so they are built in).

Importing it registers weight prediction (``wpred``,
:mod:`~pipemare_lite.methods.weight_prediction`), the Nesterov-style look-ahead
(``nesterov``, :mod:`~pipemare_lite.methods.nesterov`) and delay compensation (``dc``,
:mod:`~pipemare_lite.methods.delay_compensation`), each written in its own file through the
public extension points (:func:`~pipemare_lite.methods.register_method` and
:class:`~pipemare_lite.methods.MethodHooks`), exactly as a plugin of yours would be; only
the import in the package makes them built in (yours loads with ``--plugin``:
:mod:`pipemare_lite.plugins`).
"""

import pipemare_lite.methods.delay_compensation  # noqa: F401  (registers "dc")
import pipemare_lite.methods.nesterov  # noqa: F401  (registers "nesterov")
import pipemare_lite.methods.weight_prediction  # noqa: F401  (registers "wpred")

#: the methods this module registers
BEYOND_METHODS = ("wpred", "nesterov", "dc")
