"""The module map (pipemare_lite/book/module_map.py) covers the package, agrees with the docstrings
and the chapters, and docs/module-map.md is what it generates.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipemare_lite.book import module_map
from pipemare_lite.book.module_map import MODULE_CHAPTERS, NO_CHAPTER

ROOT = Path(__file__).resolve().parents[1]
MODULES = module_map.package_modules()

#: Modules whose introducing chapter does not name them, nor a module that imports them.
#: Each entry is a gap for the chapter's author (link the module, or mark it NO_CHAPTER);
#: the test fails when a gap is closed, so the entry is deleted then.
NOT_NAMED_YET = {
    "pipemare_lite.training.run_length":
        "chapter 11 reaches it only through fit(resume=True) with another epochs (issue 47 "
        "item 5)",
    "pipemare_lite.training.blow_up":
        "chapter 07 reaches it only through fit's blow_up setting (issue 47 item 4)",
    "pipemare_lite.interop.torch_pipelining":
        "chapter 11 does not show PyTorch's runtime beside ours",
    "pipemare_lite.interop.torch_runtime": "chapter 11 does not show PyTorch's runtime beside ours",
    "pipemare_lite.engine.distributed.lost":
        "chapter 11 reaches it only through under_torchrun, which launch imports inside a function",
    "pipemare_lite.training.dist_fit": "chapter 11 reaches it only through fit(executor='dist'), "
                                       "which imports it inside a function",
    "pipemare_lite.experiments.stage_evidence":
        "chapter 07 reaches it through paper_shape, whose design module imports it",
    "pipemare_lite.training.checkpoint":
        "chapter 11 reaches it only through fit's checkpoints "
        "(the dist executor's own state: engine.distributed.checkpoint)",
}
#: Docstrings, in files being rewritten in issue 11, that point to another chapter than
#: the map: module -> the chapter they say now. Delete the entry when the file is fixed.
STALE_DOCSTRINGS = {
    "pipemare_lite.engine.replay": "10",  # chapter 05 links replay.py; chapter 10 never names it
}


@pytest.fixture(scope="module")
def uses():
    return module_map.chapter_uses()


@pytest.fixture(scope="module")
def importers():
    """module -> the modules that import it."""
    modules = frozenset(MODULES)
    found = {name: [] for name in MODULES}
    for name in MODULES:
        for imported in module_map.imports_of(name, modules):
            found[imported].append(name)
    return found


def test_every_module_is_in_the_map_once_and_every_key_is_a_module():
    assert sorted(MODULE_CHAPTERS) == MODULES
    # a key written twice in the literal would silently keep only its last value
    tree = ast.parse(Path(module_map.__file__).read_text(encoding="utf-8"))
    (table,) = [node.value for node in tree.body if isinstance(node, ast.AnnAssign)
                and getattr(node.target, "id", None) == "MODULE_CHAPTERS"]
    keys = [key.value for key in table.keys]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)
    chapters = set(module_map.chapter_files())
    bad = {m: c for m, c in MODULE_CHAPTERS.items() if c != NO_CHAPTER and c not in chapters}
    assert not bad, f"not a chapter number of chapters/: {bad}"


def test_discovery_finds_a_new_module_without_importing_it(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "leaf.py").write_text("raise RuntimeError('imported')\n")
    (package / "top.py").write_text("")
    expected = ["pkg", "pkg.sub", "pkg.sub.leaf", "pkg.top"]
    assert module_map.package_modules(package, "pkg") == expected


def test_committed_page_is_the_generated_one():
    committed = (ROOT / "docs" / "module-map.md").read_text(encoding="utf-8")
    assert committed == module_map.render(), (
        "docs/module-map.md is stale: "
        "run python -m pipemare_lite.book.module_map > docs/module-map.md"
    )


def test_the_command_prints_the_page_and_imports_no_torch():
    child = (
        "import sys; sys.modules['torch'] = None\n"
        "from pipemare_lite.book import module_map\n"
        "module_map.main([])\n"
    )
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                            cwd=ROOT, check=True)
    assert result.stdout == module_map.render()


@pytest.mark.parametrize("name", MODULES)
def test_a_docstring_pointer_agrees_with_the_map(name):
    pointer = module_map.docstring_chapter(name)
    expected = STALE_DOCSTRINGS.get(name, MODULE_CHAPTERS[name])
    if expected == NO_CHAPTER:
        assert pointer is None, f"{name}: tooling, but its docstring points to chapter {pointer}"
    elif pointer is not None:
        assert pointer == expected, (
            f"{name}: the docstring says chapter {pointer}, the map {MODULE_CHAPTERS[name]}"
        )


@pytest.mark.parametrize("name", [m for m in MODULES if MODULE_CHAPTERS[m] != NO_CHAPTER])
def test_the_introducing_chapter_names_the_module_or_what_imports_it(name, uses, importers):
    """Named: imported, linked, written out, run as a command (see ``notebook_uses``)."""
    chapter = MODULE_CHAPTERS[name]
    named = chapter in uses[name] or any(chapter in uses[m] for m in importers[name])
    assert named != (name in NOT_NAMED_YET), (
        f"{name}: chapter {chapter} names neither it nor a module importing it"
        if not named else f"{name} is named by chapter {chapter} now: delete it from NOT_NAMED_YET"
    )


def test_the_chapters_uses_are_read_from_imports_links_names_and_commands(tmp_path):
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": [
            "See [gpipe.py](../pipemare_lite/schedules/builders/gpipe.py) and ",
            "`pipemare_lite.analysis.theory.roots`; ",
            "run `python -m pipemare_lite reproduce paper-shape`."]},
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source":
            "%matplotlib inline\nfrom pipemare_lite.schedules import build_schedule\n"
            "from pipemare_lite.figures import viz\nviz.tradeoff_figure()\ncheck('ex04_1', 1)\n"},
    ]
    path = tmp_path / "04_x.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}))
    prefix = "pipemare_lite."
    found = {m.removeprefix(prefix) for m in module_map.notebook_uses(path)}
    assert found == {
        "schedules", "schedules.builders", "schedules.builders.gpipe", "schedules.registry",
        "analysis",
        "analysis.theory", "figures", "figures.viz", "figures.viz.tradeoff",
        "cli", "cli.commands", "cli.commands.reproduce", "experiments",
        "experiments.paper_shape", "book", "book.exercises", "book.exercises.ch04",
    }


def test_every_chapter_that_links_an_engine_file_is_counted(uses):
    """The page's "used in" column sees each link the chapters make to the engine."""
    for number, path in module_map.chapter_files().items():
        text = path.read_text(encoding="utf-8")
        for name in MODULES:
            file = module_map.module_file(name).relative_to(ROOT).as_posix()
            if f"](../{file})" in text:
                assert number in uses[name], f"chapter {number} links {file}"


def test_summary_is_the_first_sentence_without_its_chapter_pointer():
    assert module_map.summary("pipemare_lite.schedules.builders.gpipe") == (
        "GPipe: all forwards, then all backwards, then a flush"
    )
    assert "chapter" not in module_map.summary("pipemare_lite.analysis.simulate")
