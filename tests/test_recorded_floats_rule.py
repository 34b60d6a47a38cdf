"""Every comparison with floats recorded on another machine follows one rule (issue 42).

A fixture that stores floats a run computed is compared bitwise only where the kernel
fingerprint matches the machine that wrote it (``tests/recorded_floats.py``). This file
scans ``tests/`` and fails on

- a data file that stores recorded floats (float hex anywhere; or, in JSON, non-integer
  numbers) without the fingerprint of the machine that wrote it (a ``"fingerprint"`` object
  in the JSON, or a ``<name>.meta.json`` beside it that has one);
- a test module that names such a file but never asks :func:`comparison_mode`;
- a test module that turns floats into hex *and* reads a file, but never asks
  :func:`comparison_mode` (hex compared within one process is fine: it reads no file).

And it checks the rule itself: the same fingerprint gives ``bitwise``; another CPU vendor,
a missing AVX-512 or another torch gives ``within-process``; a fixture without a
fingerprint is refused.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from pipemare_lite.experiments.record import machine_fingerprint
from tests.recorded_floats import PROPERTY, comparison_mode

TESTS = Path(__file__).parent
FLOAT_HEX = re.compile(r"-?0x1\.[0-9a-f]*p[+-]\d+")
DATA_SUFFIXES = {".json", ".csv", ".txt", ".tsv"}
HEXES = re.compile(r"\.hex\(\)|float\.fromhex")
READS_A_FILE = re.compile(r"read_text\(|json\.load\(|open\(|read_bytes\(")
ASKS_THE_RULE = "comparison_mode("
HERE = Path(__file__).name


def has_fractional_number(value) -> bool:
    """True when a parsed JSON value holds a float that is not a whole number."""
    if isinstance(value, float):
        return not value.is_integer()
    if isinstance(value, dict):
        return any(has_fractional_number(v) for k, v in value.items() if k != "fingerprint")
    if isinstance(value, list):
        return any(has_fractional_number(v) for v in value)
    return False


def recorded_float_files() -> list[Path]:
    """Data files under tests/ that store floats a machine computed."""
    found = []
    for path in sorted(TESTS.rglob("*")):
        if path.suffix not in DATA_SUFFIXES or not path.is_file():
            continue
        if path.name.endswith(".meta.json"):
            continue
        text = path.read_text(errors="replace")
        numeric = False
        if path.suffix == ".json":
            try:
                numeric = has_fractional_number(json.loads(text))
            except ValueError:
                pass
        if FLOAT_HEX.search(text) or numeric:
            found.append(path)
    return found


def has_fingerprint(path: Path) -> bool:
    """The file (JSON) or its ``.meta.json`` carries a ``"fingerprint"`` object."""
    candidates = [path, path.with_name(path.stem + ".meta.json")]
    for candidate in candidates:
        if candidate.suffix == ".json" and candidate.is_file():
            try:
                if isinstance(json.loads(candidate.read_text()).get("fingerprint"), dict):
                    return True
            except (ValueError, AttributeError):
                continue
    return False


def test_the_scan_finds_the_t1_fixture():
    # the scan must see the fixture that started issue 42, or it sees nothing
    assert TESTS / "fixtures" / "t1_before_lr_hook.json" in recorded_float_files()


def test_every_recorded_float_file_carries_its_machines_fingerprint():
    missing = [str(p.relative_to(TESTS)) for p in recorded_float_files() if not has_fingerprint(p)]
    assert not missing, (f"fixtures with recorded floats but no 'fingerprint' of the machine "
                         f"that wrote them: {missing} (see tests/recorded_floats.py)")


def test_every_test_that_names_a_recorded_float_file_asks_the_rule():
    names = {p.name for p in recorded_float_files()}
    offenders = []
    for module in sorted(TESTS.rglob("*.py")):
        if module.name == HERE:
            continue
        text = module.read_text()
        named = sorted(n for n in names if n in text)
        if named and ASKS_THE_RULE not in text:
            offenders.append(f"{module.relative_to(TESTS)} (reads {', '.join(named)})")
    assert not offenders, f"compare recorded floats without comparison_mode(): {offenders}"


def test_every_test_that_reads_float_hex_from_a_file_asks_the_rule():
    offenders = [
        str(module.relative_to(TESTS))
        for module in sorted(TESTS.rglob("*.py"))
        if module.name != HERE
        and HEXES.search(text := module.read_text())
        and READS_A_FILE.search(text)
        and ASKS_THE_RULE not in text
    ]
    assert not offenders, f"float hex next to a file read, without comparison_mode(): {offenders}"


@pytest.fixture
def here():
    return machine_fingerprint(1)


def test_the_same_machine_compares_bitwise(here, request):
    mode = comparison_mode({"fingerprint": here}, threads=1, request=request)
    assert mode.bitwise and mode.differences == ()
    assert (PROPERTY, "bitwise") in request.node.user_properties


@pytest.mark.parametrize("change", ["vendor", "no_avx512", "torch"])
def test_another_machine_compares_within_process(here, change):
    other = copy.deepcopy(here)
    if change == "vendor":  # MKL dispatches by vendor (issue 42's Intel Xeon vs an AMD EPYC)
        other["cpu_vendor"] = "GenuineIntel" if here["cpu_vendor"] != "GenuineIntel" else "AMD"
    elif change == "no_avx512":
        flags = here["cpu_simd_flags"]
        other["cpu_simd_flags"] = [f for f in flags if not f.startswith("avx512")] + (
            [] if any(f.startswith("avx512") for f in flags) else ["avx512f"])
    else:
        other["torch_version"] = "0.0.0"
    mode = comparison_mode({"fingerprint": other}, threads=1)
    assert not mode.bitwise and mode.name == "within-process"
    assert mode.differences  # says which field


def test_a_fixture_without_a_fingerprint_is_refused():
    with pytest.raises(AssertionError, match="no 'fingerprint'"):
        comparison_mode({"cases": {}}, threads=1)
