"""Stored experiments: definitions that ``pipemare-lite reproduce NAME`` runs (chapter 10).

Each experiment module provides ``run(quick: bool) -> dict`` (JSON-ready results) and
``markdown(results) -> str`` (the table a chapter shows). Results are written to
``data/results/<name>.json`` with a ``<name>.meta.json`` beside them (command, versions,
seed, date); quick variants to ``<name>_quick.json``.
"""

#: experiment name -> module under pipemare_lite.experiments
EXPERIMENTS = {"paper-shape": "pipemare_lite.experiments.paper_shape"}
