"""``python -m pipemare_lite``: see :mod:`pipemare_lite.cli`."""

import sys

from pipemare_lite.cli import main

sys.exit(main())
