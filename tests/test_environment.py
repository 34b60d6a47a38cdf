"""pyproject.toml is the single list of dependencies; environment.yml must mirror it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# conda names that differ from the PyPI names
CONDA_TO_PYPI = {"pytorch": "torch"}


def _split(requirement: str) -> tuple[str, str]:
    match = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", requirement)
    assert match, requirement
    return match.group(1).lower().replace("_", "-"), match.group(2).replace(" ", "")


def _pyproject() -> dict[str, str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = list(data["project"]["dependencies"])
    for extra in data["project"]["optional-dependencies"].values():
        reqs += extra
    return dict(_split(r) for r in reqs)


def _environment() -> tuple[dict[str, str], str]:
    deps, python = {}, ""
    for line in (ROOT / "environment.yml").read_text().splitlines():
        item = re.match(r"^\s*-\s+(.+)$", line)
        if not item:
            continue
        text = item.group(1).strip()
        if text.startswith("python="):
            python = text.split("=", 1)[1]
            continue
        if text == "pip":
            continue
        name, spec = _split(text)
        deps[CONDA_TO_PYPI.get(name, name)] = spec
    return deps, python


def test_environment_yml_mirrors_pyproject():
    expected = _pyproject()
    actual, _ = _environment()
    assert actual == expected, (
        "environment.yml and pyproject.toml disagree: "
        f"only in pyproject {sorted(set(expected) - set(actual))}, "
        f"only in environment.yml {sorted(set(actual) - set(expected))}, "
        f"different pins {[k for k in expected if k in actual and expected[k] != actual[k]]}"
    )


def test_environment_python_satisfies_requires_python():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    minimum = data["project"]["requires-python"].removeprefix(">=")
    _, python = _environment()
    as_tuple = lambda v: tuple(int(x) for x in v.split("."))  # noqa: E731
    assert python and as_tuple(python) >= as_tuple(minimum)
