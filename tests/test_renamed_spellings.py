"""One name per concept (issue 44, item 5; docs/glossary.md).

- every old spelling still works for one release, with exactly one FutureWarning that names
  the old and the new spelling and says the old one goes in the next release;
- an old spelling trains bitwise as the new one (a tiny pipeline, T1 + T2 + warm-up);
- the new names are what ``help(MethodOptions)`` and the command line's ``--help`` show;
- files written under an old key (a schedule file, the stored results) still load;
- no code in pipemare_lite/ or chapters/ uses an old spelling (the compatibility helper,
  pipemare_lite/deprecation.py, and this file excepted).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import inspect
import json
import pydoc
import re
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from pipemare_lite.deprecation import REMOVED_IN, WARNING, renamed_message
from pipemare_lite.engine import LocalExecutor
from pipemare_lite.methods import MethodOptions, method_options
from pipemare_lite.methods.registry import RENAMED_OPTIONS
from pipemare_lite.schedules import (
    Schedule,
    ScheduleError,
    async_pipeline,
    build_schedule,
    pipedream,
    two_bw,
)
from pipemare_lite.schedules.io import from_json, from_rows, to_json

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons: conftest.py


def calls_warning_once(function, old: str, new: str):
    """``function()``'s result, checking that it warned exactly once, about ``old``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = function()
    renamed = [w for w in caught if issubclass(w.category, WARNING)]
    assert len(renamed) == 1, [str(w.message) for w in caught]
    text = str(renamed[0].message)
    assert f"{old!r} is deprecated, use {new!r}" in text
    assert f"removed in the next release ({REMOVED_IN})" in text
    assert renamed[0].filename == __file__  # it points at the caller's line
    return result


def calls_no_warning(function):
    with warnings.catch_warnings():
        warnings.simplefilter("error", WARNING)
        return function()


# ------------------------------------------------------------ one warning, one wording
def test_the_message_names_both_spellings_and_the_release():
    assert renamed_message("a", "b", "f()") == (
        f"f(): 'a' is deprecated, use 'b' (same meaning); 'a' will be removed in the next "
        f"release ({REMOVED_IN})")
    assert WARNING is FutureWarning  # shown to end users by default


@pytest.mark.parametrize("old,new", sorted(RENAMED_OPTIONS.items()))
def test_method_options_old_keyword_warns_once_and_means_the_new(old, new):
    value = 3 if new in ("warmup", "t1_anneal_updates") else True
    got = calls_warning_once(lambda: MethodOptions(**{old: value}), old, new)
    assert got == calls_no_warning(lambda: MethodOptions(**{new: value}))
    assert getattr(got, new) == value
    assert calls_warning_once(lambda: getattr(got, old), old, new) == value
    via = calls_warning_once(lambda: method_options("pipemare", **{old: value}), old, new)
    assert via == calls_no_warning(lambda: method_options("pipemare", **{new: value}))


def test_both_spellings_at_once_are_refused_naming_both():
    with pytest.raises(TypeError, match="both 'lr_rescheduling' and 't1'"):
        MethodOptions(lr_rescheduling=True, t1=False)
    with pytest.raises(TypeError, match="both 'warmup_minibatches' and 'warmup'"):
        build_schedule("async", 2, 2, num_minibatches=3, warmup=1, warmup_minibatches=1)


@pytest.mark.parametrize("build", [
    lambda **w: build_schedule("async", 3, 2, num_minibatches=5, **w),
    lambda **w: build_schedule("pipedream", 3, 2, num_minibatches=5, **w),
    lambda **w: async_pipeline(3, 2, 5, **w),
    lambda **w: pipedream(3, 2, 5, **w),
    lambda **w: two_bw(3, 2, 5, **w),
    lambda **w: from_rows(build_schedule("async", 2, 1, num_minibatches=3, warmup=1).rows(),
                          name="async", num_microbatches=1, **w),
])
def test_schedule_builders_take_warmup_and_its_old_spelling(build):
    new = calls_no_warning(lambda: build(warmup=1))
    old = calls_warning_once(lambda: build(warmup_minibatches=1), "warmup_minibatches", "warmup")
    assert old == new and new.warmup == 1


def test_a_registered_builder_with_the_old_keyword_still_builds():
    from pipemare_lite.schedules import names, registry

    def old_style(num_ranks, num_microbatches, *, num_minibatches, chunks, warmup_minibatches):
        return async_pipeline(num_ranks, num_microbatches, num_minibatches,
                              warmup_minibatches).rows()

    calls_warning_once(lambda: registry.register_schedule(
        "async-old-keyword", old_style, weight_mode="async"), "warmup_minibatches", "warmup")
    try:
        built = calls_no_warning(lambda: build_schedule("async-old-keyword", 2, 2,
                                                        num_minibatches=4, warmup=1))
        assert built.rows() == async_pipeline(2, 2, 4, warmup=1).rows()
        assert built.warmup == 1
    finally:  # registered for this test only
        for table in (registry.BUILDERS, registry.REGISTERED_BY, names.REGISTERED_WEIGHT_MODES,
                      registry.FIXED_CHUNKS):
            table.pop("async-old-keyword", None)


# ------------------------------------------------------------ bitwise the same training
def _tiny_run(schedule, options):
    torch.manual_seed(0)
    stages = [nn.Sequential(nn.Linear(6, 6), nn.ReLU()), nn.Sequential(nn.Linear(6, 3))]
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g))
            for _ in range(schedule.total_microbatches)]
    executor = LocalExecutor(schedule, stages, loss_fn=nn.functional.cross_entropy,
                             optimizer_factory=lambda p: torch.optim.SGD(p, lr=0.1),
                             method_options=options)
    result = executor.run(data)
    return result.losses, [p.detach().clone() for m in stages for p in m.parameters()]


def test_old_spellings_train_bitwise_as_the_new_ones():
    P, N, K, W = 2, 2, 6, 2
    new_schedule = build_schedule("async", P, N, num_minibatches=K, warmup=W)
    new_options = MethodOptions(t1=True, t1_anneal_updates=3, t2=True, gamma=0.7, warmup=W)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old_schedule = build_schedule("async", P, N, num_minibatches=K, warmup_minibatches=W)
        old_options = MethodOptions(lr_rescheduling=True, rescheduling_horizon=3,
                                    discrepancy_correction=True, gamma=0.7,
                                    warmup_minibatches=W)
    assert len([w for w in caught if issubclass(w.category, WARNING)]) == 5  # one per spelling
    new_losses, new_weights = calls_no_warning(lambda: _tiny_run(new_schedule, new_options))
    old_losses, old_weights = calls_no_warning(lambda: _tiny_run(old_schedule, old_options))
    assert old_losses == new_losses and len(new_losses) == N * K
    assert all(torch.equal(a, b) for a, b in zip(old_weights, new_weights))
    no_fixes, _ = _tiny_run(new_schedule, MethodOptions(warmup=W))
    assert no_fixes != new_losses  # T1 and T2 did change the run: the switches reached it


# ------------------------------------------------------------ the new names are documented
def test_help_shows_the_new_names():
    signature = inspect.signature(MethodOptions)
    assert list(signature.parameters) == ["t1", "t1_anneal_updates", "t2", "gamma", "warmup",
                                          "method"]
    assert [f.name for f in dataclasses.fields(MethodOptions)] == list(signature.parameters)
    text = pydoc.render_doc(MethodOptions, renderer=pydoc.plaintext)  # what help() prints
    assert re.search(r"MethodOptions\(t1: .*, t1_anneal_updates: .*, t2: .*, gamma: .*, "
                     r"warmup: .*, method: ", text)
    for name in ("t1:", "t1_anneal_updates:", "t2:", "warmup:"):
        assert name in inspect.getdoc(MethodOptions)
    assert "warmup" in inspect.signature(build_schedule).parameters
    assert "warmup_minibatches" not in inspect.signature(build_schedule).parameters


def test_the_command_lines_help_spells_them_the_same(capsys):
    from pipemare_lite.cli import main

    for command, flags in (("train", ("--t1", "--t1-anneal-updates", "--t2", "--gamma",
                                      "--warmup", "--microbatches")),
                           ("schedule", ("--warmup", "--microbatches"))):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        for flag in flags:
            assert re.search(rf"{re.escape(flag)}\b", text), (command, flag)
        for old in ("--lr-rescheduling", "--discrepancy-correction", "--warmup-minibatches"):
            assert old not in text


def test_update_every_is_the_old_spelling_of_microbatches(capsys):
    from pipemare_lite.cli import main

    def report(*flags):
        assert main(["schedule", "async", "-P", "3", *flags, "-K", "6", "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    new = calls_no_warning(lambda: report("--microbatches", "2"))
    old = calls_warning_once(lambda: report("--update-every", "2"),
                             "--update-every", "--microbatches")
    assert old == new and new["microbatches"] == 2


# ------------------------------------------------------------ stored files still load
def test_the_schedule_records_warmup_and_its_old_field_name_still_works():
    new = calls_no_warning(lambda: Schedule("custom", 1, 1, ((),), warmup=0))
    assert [f.name for f in dataclasses.fields(Schedule)].count("warmup") == 1
    assert "warmup_minibatches" not in inspect.signature(Schedule).parameters
    old = calls_warning_once(lambda: Schedule("custom", 1, 1, ((),), warmup_minibatches=0),
                             "warmup_minibatches", "warmup")
    assert old == new
    built = build_schedule("async", 3, 2, num_minibatches=5, warmup=2)
    assert calls_warning_once(lambda: built.warmup_minibatches, "warmup_minibatches",
                              "warmup") == built.warmup == 2
    with pytest.raises(TypeError, match="both 'warmup_minibatches' and 'warmup'"):
        dataclasses.replace(built, warmup_minibatches=1)  # replace passes every field


def test_a_schedule_file_is_written_with_warmup_and_an_old_one_loads():
    schedule = build_schedule("pipedream", 3, 2, num_minibatches=4, warmup=1)
    stored = json.loads(to_json(schedule))
    assert stored["warmup"] == 1 and "warmup_minibatches" not in stored  # one spelling
    assert calls_no_warning(lambda: from_json(json.dumps(stored))) == schedule
    # a file written before the rename (its key, in its place) loads as the same schedule
    old = {("warmup_minibatches" if key == "warmup" else key): value
           for key, value in stored.items()}
    assert list(old)[list(stored).index("warmup")] == "warmup_minibatches"
    assert calls_no_warning(lambda: from_json(json.dumps(old))) == schedule
    with pytest.raises(ScheduleError, match="both 'warmup_minibatches' and 'warmup'"):
        from_json(json.dumps({**stored, "warmup_minibatches": 1}))
    with pytest.raises(ScheduleError, match="field 'warmup_minibatches' is -1"):
        from_json(json.dumps({**old, "warmup_minibatches": -1}))


def test_stored_results_under_the_old_key_still_render():
    from pipemare_lite.experiments.paper_shape_table import markdown

    results = json.loads((ROOT / "data/results/paper_shape_quick.json").read_text())
    assert any("warmup_minibatches" in row for row in results["rows"])
    text = calls_no_warning(lambda: markdown(results))
    assert text == (ROOT / "data/results/paper_shape_quick.md").read_text()


def test_checkpoints_record_settings_under_the_new_names_only():
    from pipemare_lite.training.loop import RECORDED_SETTINGS

    assert {"t1", "t1_anneal_updates", "t2", "warmup"} <= set(RECORDED_SETTINGS)
    assert not set(RENAMED_OPTIONS) & set(RECORDED_SETTINGS)


# ------------------------------------------------------------ no old spelling in the code
OLD_T = {"lr_rescheduling", "discrepancy_correction", "rescheduling_horizon"}
OLD_W = "warmup_minibatches"
#: Calls that still take the old name: ``lazy_schedule(...)``, kept with its old signature
#: in pipemare_lite/schedules/lazy.py until 0.3.
FIELD_CALLS = {"lazy_schedule"}
#: The compatibility helper, and schedules/lazy.py (the old home of the long-run helpers).
ALLOWED_FILES = {"pipemare_lite/deprecation.py", "pipemare_lite/schedules/lazy.py"}


def _name_of(node) -> str:
    return node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")


def old_spellings(tree: ast.AST) -> list[str]:
    """Where ``tree`` uses an old spelling as a keyword, parameter or attribute."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for keyword in node.keywords:
                if keyword.arg in OLD_T or (keyword.arg == OLD_W
                                            and _name_of(node.func) not in FIELD_CALLS):
                    found.append(f"line {node.lineno}: {keyword.arg}=")
        elif isinstance(node, ast.arg) and (node.arg in OLD_T or node.arg == OLD_W):
            found.append(f"line {node.lineno}: parameter {node.arg}")
        elif isinstance(node, ast.Attribute):
            owner = _name_of(node.value)
            if node.attr in OLD_T and owner != "methods":  # not the module methods.lr_rescheduling
                found.append(f"line {node.lineno}: .{node.attr}")
            elif node.attr == OLD_W:  # options.warmup_minibatches, schedule.warmup_minibatches
                found.append(f"line {node.lineno}: {owner}.{node.attr}")
        elif isinstance(node, ast.Constant) and node.value == "--update-every":
            found.append(f"line {node.lineno}: '--update-every'")
    return found


def test_the_scan_finds_each_kind_of_old_use():
    code = ("MethodOptions(lr_rescheduling=True)\nbuild_schedule('async', 2, 2, "
            "warmup_minibatches=1)\ndef b(P, N, *, warmup_minibatches): pass\n"
            "options.discrepancy_correction\nspec.options.warmup_minibatches\n"
            "Schedule('a', 1, 1, (), warmup_minibatches=0)\nschedule.warmup_minibatches\n"
            "from pipemare_lite.methods import lr_rescheduling\nmethods.lr_rescheduling\n")
    assert sorted(old_spellings(ast.parse(code))) == [
        "line 1: lr_rescheduling=", "line 2: warmup_minibatches=",
        "line 3: parameter warmup_minibatches", "line 4: .discrepancy_correction",
        "line 5: options.warmup_minibatches", "line 6: warmup_minibatches=",
        "line 7: schedule.warmup_minibatches"]


def test_no_code_in_the_package_uses_an_old_spelling():
    found = {}
    for path in sorted((ROOT / "pipemare_lite").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative in ALLOWED_FILES:
            continue
        hits = old_spellings(ast.parse(path.read_text(encoding="utf-8")))
        hits = [h for h in hits if not (relative == "pipemare_lite/cli/commands/schedule.py"
                                        and "--update-every" in h)]  # the flag's definition
        if hits:
            found[relative] = hits
    assert not found


OLD_IN_TEXT = re.compile(r"\b(lr_rescheduling|discrepancy_correction|rescheduling_horizon|"
                         r"warmup_minibatches)\s*=|--update-every|(?<!methods)\.(lr_rescheduling|"
                         r"discrepancy_correction|rescheduling_horizon)\b(?!\.py)")


def test_no_chapter_uses_an_old_spelling():
    found = {}
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            source = "".join(cell["source"])
            hits = [m.group(0) for m in OLD_IN_TEXT.finditer(source)]
            if cell["cell_type"] == "code":
                code = "\n".join(line for line in source.splitlines()
                                 if not line.lstrip().startswith(("%", "!")))
                hits += old_spellings(ast.parse(code))
            if hits:
                found[f"{path.name} cell {index}"] = hits
    assert not found


def test_the_docs_use_the_new_spellings():
    found = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
                 *sorted((ROOT / "docs").rglob("*.py"))]:
        if path.name == "glossary.md":  # its 'deprecated' column names them on purpose
            continue
        hits = [m.group(0) for m in OLD_IN_TEXT.finditer(path.read_text(encoding="utf-8"))]
        if hits:
            found[path.relative_to(ROOT).as_posix()] = hits
    assert not found


def test_copying_options_keeps_the_new_fields():
    options = MethodOptions(t1=True, warmup=2)
    assert calls_no_warning(lambda: copy.deepcopy(options)) == options
    assert calls_no_warning(lambda: dataclasses.replace(options, t2=True)).t2
