"""The torch-free modules import with torch made unimportable (in a fresh subprocess).

A module that does not exist yet is skipped; one that exists but needs torch fails.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

TORCH_FREE = [
    "pipemare_lite.schedules",
    "pipemare_lite.schedules.io",
    "pipemare_lite.simulate",
    "pipemare_lite.formulas",
    "pipemare_lite.timeline",
    "pipemare_lite.staleness",
    "pipemare_lite.memory",
    "pipemare_lite.viz",
    "pipemare_lite.widgets",
    "pipemare_lite.exercises",
    "pipemare_lite.commands.schedule",
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


def exists(name: str) -> bool:
    """Whether the module's file exists (found without importing it)."""
    return importlib.util.find_spec(name) is not None


@pytest.fixture(scope="module")
def child_report():
    present = [name for name in TORCH_FREE if exists(name)]
    result = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(present)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", TORCH_FREE)
def test_imports_without_torch(name, child_report):
    if not exists(name):
        pytest.skip(f"{name} does not exist yet")
    assert name not in child_report["failures"], child_report["failures"].get(name)
    assert not child_report["torch_loaded"]
