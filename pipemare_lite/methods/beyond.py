"""Chapter 12's methods as one plugin: ``--plugin pipemare_lite.methods.beyond``.

Importing it registers weight prediction (``wpred``,
:mod:`~pipemare_lite.methods.weight_prediction`), the Nesterov-style look-ahead
(``nesterov``, :mod:`~pipemare_lite.methods.nesterov`) and delay compensation (``dc``,
:mod:`~pipemare_lite.methods.delay_compensation`), each written in its own file through the
public extension points (:func:`~pipemare_lite.methods.register_method` and
:class:`~pipemare_lite.methods.MethodHooks`). Like any plugin, every process of a run must
import it (:mod:`pipemare_lite.plugins`).
"""

import pipemare_lite.methods.delay_compensation  # noqa: F401  (registers "dc")
import pipemare_lite.methods.nesterov  # noqa: F401  (registers "nesterov")
import pipemare_lite.methods.weight_prediction  # noqa: F401  (registers "wpred")

#: the methods this plugin registers
BEYOND_METHODS = ("wpred", "nesterov", "dc")
