"""Stored experiments: definitions that ``pipemare-lite reproduce NAME`` runs (chapter 10).

Each experiment module provides ``run(quick: bool) -> dict`` (JSON-ready results, with
the ``torch_threads`` they ran with, the ``command`` that regenerates them and values over
several seeds), ``markdown(results) -> str`` (the table a chapter shows) and
``check(results, meta)`` (re-runs one row and compares it with the stored seeds: a
:class:`~pipemare_lite.experiments.record.CheckReport`). Results are written to
``data/results/<name>.json`` with a ``<name>.meta.json`` beside them (command, package
version, seeds, date, machine fingerprint); quick variants to ``<name>_quick.json``.
:mod:`pipemare_lite.experiments.record` holds what is shared. ``reproduce --list`` prints
:data:`EXPERIMENTS` with :data:`DESCRIPTIONS`.

Beside the stored experiments, :mod:`~pipemare_lite.experiments.paper_arithmetic` recomputes
the paper's headline numbers (its abstract's 2.7x and 4.3x) from the simulator and the
memory model: the paper's claims, checked without training, torch-free.
"""

#: experiment name -> module under pipemare_lite.experiments
EXPERIMENTS = {"paper-shape": "pipemare_lite.experiments.paper_shape",
               "beyond-pipemare": "pipemare_lite.experiments.beyond_pipemare",
               "lr-map": "pipemare_lite.experiments.lr_map"}

#: experiment name -> one line for ``reproduce --list``
DESCRIPTIONS = {
    "paper-shape": "PipeMare's claims in miniature: granularity sweep P = 2..16 (ResNet, SGD, "
    "420 updates), the claims at P = 16 over 1,680 updates with 8 seeds where a margin is "
    "judged, the Transformer (Adam) at P = 8 over 1,024 updates with and without lr warm-up, "
    "T1 horizon and warm-up length as factors, a predicted collapse, 95% intervals "
    "(full: about 2 CPU-hours, 2 processes; --quick: about 6 CPU-minutes); stored study by "
    "study (--study NAME, resumable)",
    "lr-map": "the map (issue 43): every method at lr 0.005..0.1 and P = 8, 16 (ResNet, SGD, "
    "420 updates, 8 seeds at lr <= 0.02, else 3), the same rows at P = 16 over 1,680 updates "
    "(lr 0.01..0.05, 3 seeds), the Transformer (Adam) at 2,048 updates and lr 0.003..0.03 "
    "(8 seeds at 0.03, else 3), chapter 06's bound scored as a classifier, the stalest-first "
    "claim in every cell, the momentum-aware T1's pre-registered test; stored study by study "
    "(--study NAME, resumable)",
    "beyond-pipemare": "chapter 12: async, PipeMare, wpred, nesterov at P = 8 (SGD), async "
    "with N = 1..8 (accumulation), 1F1B/2BW/2BW+dc with AdamW and Muon; 3 seeds",
}
