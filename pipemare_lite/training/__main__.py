"""``python -m pipemare_lite.training``: the training command line, the form torchrun launches.

It is :func:`pipemare_lite.cli.commands.train.main` (the options of ``pipemare-lite train``)::

    torchrun --nproc-per-node 4 -m pipemare_lite.training --executor dist --method pipemare ...
"""

import sys

from pipemare_lite.cli.commands.train import main

sys.exit(main())
