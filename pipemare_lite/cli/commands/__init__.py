"""Subcommands of the ``pipemare-lite`` CLI, one module each (see :mod:`pipemare_lite.cli`)."""
