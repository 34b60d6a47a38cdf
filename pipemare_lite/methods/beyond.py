"""Chapter 12's methods, all three at once (built in: the registry imports each on first use,
:data:`~pipemare_lite.methods.registry.BUILT_IN_MODULES`).

Importing it registers ``wpred`` (:mod:`~pipemare_lite.methods.weight_prediction`),
``nesterov`` (:mod:`~pipemare_lite.methods.nesterov`) and ``dc``
(:mod:`~pipemare_lite.methods.delay_compensation`), each written in its own file through the
public extension points exactly as a plugin of yours would be (yours loads with
``--plugin``: :mod:`pipemare_lite.plugins`). One difference: they import the extension points
from their submodules (``methods.hooks``, ``methods.registry``), since the package that a
plugin imports them from loads these files on first use.
"""

import pipemare_lite.methods.delay_compensation  # noqa: F401  (registers "dc")
import pipemare_lite.methods.nesterov  # noqa: F401  (registers "nesterov")
import pipemare_lite.methods.weight_prediction  # noqa: F401  (registers "wpred")
