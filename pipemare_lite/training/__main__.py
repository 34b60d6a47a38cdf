"""``python -m pipemare_lite.training``: the training command line, the form torchrun launches.

It is :func:`pipemare_lite.cli.commands.train.main` (the options of ``pipemare-lite train``)::

    torchrun --nproc-per-node 4 -m pipemare_lite.training --executor dist --method pipemare ...
"""

import sys

from pipemare_lite.cli.commands.train import main

if __name__ == "__main__":  # importing the module (docs, tests) must not exit
    sys.exit(main())
