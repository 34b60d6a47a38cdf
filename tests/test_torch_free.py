"""The torch-free modules import with torch made unimportable (in a fresh subprocess).

Every listed module must exist and import; one that needs torch (or is missing) fails.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

TORCH_FREE = [
    "pipemare_lite.schedules",
    "pipemare_lite.schedules.io",
    "pipemare_lite.interop.torch_notation",
    "pipemare_lite.schedules.comm_plan",
    "pipemare_lite.schedules.comm_rows",
    "pipemare_lite.analysis.simulate",
    "pipemare_lite.analysis.formulas",
    "pipemare_lite.analysis.timeline",
    "pipemare_lite.analysis.staleness",
    "pipemare_lite.analysis.memory",
    "pipemare_lite.analysis.theory",
    "pipemare_lite.analysis.stage_stability",
    "pipemare_lite.analysis.stage_lr",
    "pipemare_lite.files",
    "pipemare_lite.plugins",
    "pipemare_lite.book.show",
    "pipemare_lite.figures.viz",
    "pipemare_lite.figures.widgets",
    "pipemare_lite.book.exercises",
    "pipemare_lite.cli.commands.schedule",
    "pipemare_lite.experiments.stage_evidence",
    "pipemare_lite.experiments.paper_shape_claims",
    "pipemare_lite.experiments.paper_shape_table",
    "pipemare_lite.experiments.paper_arithmetic",
    "pipemare_lite.methods",
    "pipemare_lite.methods.registry",
    "pipemare_lite.methods.tradeoff",
    "pipemare_lite.book.module_map",
]

# Runs in the child: block torch, import each module, report what failed and why.
CHILD = """
import importlib, json, sys
sys.modules["torch"] = None  # any `import torch` now raises ImportError
failures = {}
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except Exception as exc:
        failures[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps({"failures": failures, "torch_loaded": sys.modules.get("torch") is not None}))
"""


@pytest.fixture(scope="module")
def child_report():
    result = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(TORCH_FREE)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", TORCH_FREE)
def test_imports_without_torch(name, child_report):
    assert name not in child_report["failures"], child_report["failures"].get(name)
    assert not child_report["torch_loaded"]
