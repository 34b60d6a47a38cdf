"""``python -m pipemare_lite.cli``: the same command line as ``python -m pipemare_lite``
(:mod:`pipemare_lite.cli`)."""

import sys

from pipemare_lite.cli import main

sys.exit(main())
