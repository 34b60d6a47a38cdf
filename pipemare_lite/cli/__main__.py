"""``python -m pipemare_lite.cli``: the same command line as ``python -m pipemare_lite``
(:mod:`pipemare_lite.cli`)."""

import sys

from pipemare_lite.cli import main

if __name__ == "__main__":  # importing the module (docs, tests) must not exit
    sys.exit(main())
