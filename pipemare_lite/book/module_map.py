"""Which chapter introduces which module: the one map, and ``docs/module-map.md`` made from it.

:data:`MODULE_CHAPTERS` is the only place that says which chapter a module belongs to; a
module's docstring keeps one pointer to the same chapter for a reader of ``help()``, and
``tests/test_module_map.py`` checks that the two agree. Regenerate the page after moving,
adding or renaming a module, or after a chapter starts or stops using one::

    python -m pipemare_lite.book.module_map > docs/module-map.md

Keys are dotted module names, found on disk with :mod:`pkgutil` (so a move changes only the
keys). The chapters that use a module are read from the notebooks (:func:`chapter_uses`).
Nothing here imports the engine: modules are read as text. Torch-free.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import re
import sys
from functools import cache
from pathlib import Path

PACKAGE = "pipemare_lite"
PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: What a module is "introduced" by when no chapter introduces it (CLI, book build, tools).
NO_CHAPTER = "-"

#: dotted module name -> the chapter (two digits) that introduces it, or :data:`NO_CHAPTER`.
MODULE_CHAPTERS: dict[str, str] = {
    "pipemare_lite": "00",
    "pipemare_lite.__main__": "-",
    "pipemare_lite.analysis": "01",
    "pipemare_lite.analysis.formulas": "01",
    "pipemare_lite.analysis.memory": "03",
    "pipemare_lite.analysis.overlap": "04",
    "pipemare_lite.analysis.side_by_side": "04",
    "pipemare_lite.analysis.simulate": "02",
    "pipemare_lite.analysis.stage_lr": "08",
    "pipemare_lite.analysis.stage_stability": "07",
    "pipemare_lite.analysis.staleness": "05",
    "pipemare_lite.analysis.theory": "06",
    "pipemare_lite.analysis.timeline": "02",
    "pipemare_lite.analysis.utilization": "11",
    "pipemare_lite.book": "00",
    "pipemare_lite.book.build": "-",
    "pipemare_lite.book.execute": "-",
    "pipemare_lite.book.kernel_valve": "-",
    "pipemare_lite.book.envcheck": "00",
    "pipemare_lite.book.exercises": "00",
    "pipemare_lite.book.exercises.assign": "-",
    "pipemare_lite.book.exercises.ch00": "00",
    "pipemare_lite.book.exercises.ch01": "01",
    "pipemare_lite.book.exercises.ch02": "02",
    "pipemare_lite.book.exercises.ch03": "03",
    "pipemare_lite.book.exercises.ch04": "04",
    "pipemare_lite.book.exercises.ch05": "05",
    "pipemare_lite.book.exercises.ch06": "06",
    "pipemare_lite.book.exercises.ch07": "07",
    "pipemare_lite.book.exercises.ch08": "08",
    "pipemare_lite.book.exercises.ch09": "09",
    "pipemare_lite.book.exercises.ch10": "10",
    "pipemare_lite.book.exercises.ch11": "11",
    "pipemare_lite.book.exercises.ch12": "12",
    "pipemare_lite.book.exercises.feedback": "00",
    "pipemare_lite.book.exercises.compare": "00",
    "pipemare_lite.book.exercises.evaluate": "00",
    "pipemare_lite.book.exercises.exercise": "00",
    "pipemare_lite.book.exercises.formats": "-",
    "pipemare_lite.book.exercises.grading": "-",
    "pipemare_lite.book.exercises.handout": "-",
    "pipemare_lite.book.exercises.harness": "05",
    "pipemare_lite.book.exercises.hashing": "00",
    "pipemare_lite.book.exercises.hidden": "-",
    "pipemare_lite.book.exercises.loader": "00",
    "pipemare_lite.book.exercises.memory_cgroup": "-",
    "pipemare_lite.book.exercises.originality": "00",
    "pipemare_lite.book.exercises.plain": "-",
    "pipemare_lite.book.exercises.pytest_grading": "-",
    "pipemare_lite.book.exercises.references": "00",
    "pipemare_lite.book.exercises.registry": "00",
    "pipemare_lite.book.exercises.sandbox": "-",
    "pipemare_lite.book.exercises.student_adapter": "-",
    "pipemare_lite.book.exercises.worker": "-",
    "pipemare_lite.book.module_map": "-",
    "pipemare_lite.book.notebooks": "00",
    "pipemare_lite.book.show": "01",
    "pipemare_lite.book.solutions": "00",
    "pipemare_lite.book.site": "-",
    "pipemare_lite.book.site.pages": "-",
    "pipemare_lite.book.site.streams": "-",
    "pipemare_lite.book.site.project": "-",
    "pipemare_lite.book.site.sources": "-",
    "pipemare_lite.cli": "-",
    "pipemare_lite.cli.__main__": "-",
    "pipemare_lite.cli.commands": "-",
    "pipemare_lite.cli.commands.assign": "-",
    "pipemare_lite.cli.commands.book": "-",
    "pipemare_lite.cli.commands.gpu_check": "-",
    "pipemare_lite.cli.commands.grade": "-",
    "pipemare_lite.cli.commands.reproduce": "-",
    "pipemare_lite.cli.commands.schedule": "-",
    "pipemare_lite.cli.commands.sweep": "-",
    "pipemare_lite.cli.commands.train": "-",
    "pipemare_lite.cli.gpu_check": "-",
    "pipemare_lite.deprecation": "-",
    "pipemare_lite.engine": "02",
    "pipemare_lite.engine.build_worker": "08",
    "pipemare_lite.engine.distributed": "11",
    "pipemare_lite.engine.distributed.executor": "11",
    "pipemare_lite.engine.distributed.checkpoint": "11",
    "pipemare_lite.engine.distributed.faults": "11",
    "pipemare_lite.engine.distributed.fault_injection": "11",
    "pipemare_lite.engine.distributed.jobs": "11",
    "pipemare_lite.engine.distributed.results": "11",
    "pipemare_lite.engine.distributed.rank": "11",
    "pipemare_lite.engine.distributed.shape_probe": "11",
    "pipemare_lite.engine.distributed.launch": "11",
    "pipemare_lite.engine.distributed.lost": "11",
    "pipemare_lite.engine.distributed.main_guard": "11",
    "pipemare_lite.engine.distributed.torchrun": "11",
    "pipemare_lite.engine.distributed.transport": "11",
    "pipemare_lite.engine.interpreter": "02",
    "pipemare_lite.engine.local": "02",
    "pipemare_lite.engine.placement": "11",
    "pipemare_lite.engine.recorder": "03",
    "pipemare_lite.engine.recording": "03",
    "pipemare_lite.engine.replay": "05",
    "pipemare_lite.engine.stage": "03",
    "pipemare_lite.engine.trace": "05",
    "pipemare_lite.engine.unread_losses": "03",
    "pipemare_lite.experiments": "10",
    "pipemare_lite.experiments.beyond_pipemare": "12",
    "pipemare_lite.experiments.paper_arithmetic": "10",
    "pipemare_lite.experiments.paper_shape": "07",
    "pipemare_lite.experiments.paper_shape_design": "07",
    "pipemare_lite.experiments.paper_shape_claims": "10",
    "pipemare_lite.experiments.lr_map": "10",
    "pipemare_lite.experiments.lr_map_assess": "10",
    "pipemare_lite.experiments.paper_shape_runner": "10",
    "pipemare_lite.experiments.paper_shape_table": "10",
    "pipemare_lite.experiments.record": "10",
    "pipemare_lite.experiments.stage_evidence": "07",
    "pipemare_lite.experiments.sweep": "10",
    "pipemare_lite.figures": "00",
    "pipemare_lite.figures.viz": "01",
    "pipemare_lite.figures.viz.colors": "02",
    "pipemare_lite.figures.viz.curves": "07",
    "pipemare_lite.figures.viz.figure_html": "-",
    "pipemare_lite.figures.viz.gantt_chart": "01",
    "pipemare_lite.figures.viz.lr_schedules": "08",
    "pipemare_lite.figures.viz.memory": "03",
    "pipemare_lite.figures.viz.renderer": "-",
    "pipemare_lite.figures.viz.rank_trip": "04",
    "pipemare_lite.figures.viz.round_trip": "05",
    "pipemare_lite.figures.viz.stability": "06",
    "pipemare_lite.figures.viz.stages": "07",
    "pipemare_lite.figures.viz.staleness": "05",
    "pipemare_lite.figures.viz.tradeoff": "10",
    "pipemare_lite.figures.viz.phase_map": "10",
    "pipemare_lite.figures.widgets": "00",
    "pipemare_lite.figures.widgets._explorer": "00",
    "pipemare_lite.figures.widgets.granularity": "07",
    "pipemare_lite.figures.widgets.schedule": "02",
    "pipemare_lite.figures.widgets.stability": "06",
    "pipemare_lite.figures.widgets.staleness": "05",
    "pipemare_lite.figures.widgets.static": "02",
    "pipemare_lite.figures.widgets.t1": "08",
    "pipemare_lite.figures.widgets.t2": "09",
    "pipemare_lite.figures.widgets.trace": "11",
    "pipemare_lite.figures.widgets.tradeoff": "10",
    "pipemare_lite.files": "-",
    "pipemare_lite._lazy": "-",
    "pipemare_lite.interop": "11",
    "pipemare_lite.interop.torch_notation": "11",
    "pipemare_lite.interop.torch_pipelining": "11",
    "pipemare_lite.interop.torch_runtime": "11",
    "pipemare_lite.methods": "05",
    "pipemare_lite.methods.beyond": "12",
    "pipemare_lite.methods.delay_compensation": "12",
    "pipemare_lite.methods.discrepancy": "09",
    "pipemare_lite.methods.hooks": "12",
    "pipemare_lite.methods.lr_rescheduling": "08",
    "pipemare_lite.methods.nesterov": "12",
    "pipemare_lite.methods.momentum_rescheduling": "08",
    "pipemare_lite.methods.registry": "02",
    "pipemare_lite.methods.tradeoff": "10",
    "pipemare_lite.methods.versions": "05",
    "pipemare_lite.methods.weight_prediction": "12",
    "pipemare_lite.plugins": "11",
    "pipemare_lite.spelling": "-",
    "pipemare_lite.torch_compat": "-",
    "pipemare_lite.schedules": "01",
    "pipemare_lite.schedules.builders": "01",
    "pipemare_lite.schedules.builders.common": "02",
    "pipemare_lite.schedules.actions": "02",
    "pipemare_lite.schedules.builders.async_pipeline": "05",
    "pipemare_lite.schedules.comm_plan": "11",
    "pipemare_lite.schedules.comm_rows": "11",
    "pipemare_lite.schedules.builders.gpipe": "02",
    "pipemare_lite.schedules.builders.interleaved": "04",
    "pipemare_lite.schedules.io": "02",
    "pipemare_lite.schedules.lazy": "-",
    "pipemare_lite.schedules.builders.naive": "01",
    "pipemare_lite.schedules.builders.one_f_one_b": "03",
    "pipemare_lite.schedules.builders.pipedream": "05",
    "pipemare_lite.schedules.names": "02",
    "pipemare_lite.schedules.registry": "02",
    "pipemare_lite.schedules.repeat": "02",
    "pipemare_lite.schedules.rows": "02",
    "pipemare_lite.schedules.validation": "02",
    "pipemare_lite.schedules.weight_modes": "02",
    "pipemare_lite.schedules.builders.zero_bubble": "04",
    "pipemare_lite.schedules.builders.zero_bubble_v": "04",
    "pipemare_lite.schedules.builders.dualpipe": "04",
    "pipemare_lite.training": "01",
    "pipemare_lite.training.__main__": "-",
    "pipemare_lite.training.batches": "07",
    "pipemare_lite.training.checkpoint": "11",
    "pipemare_lite.training.run_length": "11",
    "pipemare_lite.training.curvature": "07",
    "pipemare_lite.training.data_cache": "07",
    "pipemare_lite.training.data_feed": "07",
    "pipemare_lite.training.datasets": "01",
    "pipemare_lite.training.dist_fit": "11",
    "pipemare_lite.training.executors": "07",
    "pipemare_lite.training.blow_up": "07",
    "pipemare_lite.training.config": "07",
    "pipemare_lite.training.evaluation": "07",
    "pipemare_lite.training.loop": "07",
    "pipemare_lite.training.history": "07",
    "pipemare_lite.training.lr_schedules": "08",
    "pipemare_lite.training.models": "01",
    "pipemare_lite.training.optimizers": "07",
    "pipemare_lite.training.partition": "01",
    "pipemare_lite.training.provenance": "07",  # fit's history.provenance (issue 48)
    "pipemare_lite.training.run_schedule": "07",
    "pipemare_lite.training.split_module": "01",
}


# --------------------------------------------------------------------------- the package


def package_modules(directory: Path = PACKAGE_DIR, prefix: str = PACKAGE) -> list[str]:
    """Every module and package under ``directory``, dotted, sorted; found without importing."""
    names = [prefix]
    for info in pkgutil.iter_modules([str(directory)]):
        name = f"{prefix}.{info.name}"
        if info.ispkg:
            names += package_modules(directory / info.name, name)
        else:
            names.append(name)
    return sorted(names)


def module_file(name: str) -> Path:
    """The file of dotted module ``name`` (``__init__.py`` for a package)."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        raise ValueError(f"{name!r} is not a module of {PACKAGE}")
    path = PACKAGE_DIR.joinpath(*parts[1:])
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


@cache
def _tree(name: str) -> ast.Module:
    return ast.parse(module_file(name).read_text(encoding="utf-8"))


def docstring(name: str) -> str:
    """The module docstring of ``name`` ("" if none), read from the file."""
    return ast.get_docstring(_tree(name)) or ""


def summary(name: str) -> str:
    """What the module holds, in one line: its docstring's first sentence, chapter pointer cut."""
    paragraph = " ".join(docstring(name).split("\n\n")[0].split())
    sentence = re.split(r"(?<=\.)\s+(?=[A-Z])", paragraph)[0] if paragraph else ""
    sentence = re.sub(r"\s*\([^()]*\bchapters?\s+\d\d[^()]*\)", "", sentence)
    sentence = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", sentence)  # :mod:`x` -> `x`
    return sentence.replace("``", "`").strip().rstrip(".")


_INTRODUCED = re.compile(r"\bintroduced in chapter (\d\d)\b", re.IGNORECASE)
_IN_PARENTHESES = re.compile(r"\((?:used from )?chapters? (\d\d)\b", re.IGNORECASE)
_PLAIN = re.compile(r"\bchapters? (\d\d)\b(?!'s)", re.IGNORECASE)


def docstring_chapter(name: str) -> str | None:
    """The chapter a module's docstring points to, or None when it names none.

    "introduced in chapter NN" anywhere wins; else, in the first paragraph, "(chapter NN",
    "(chapters NN-MM" or "(used from chapter NN on)"; else the first plain "chapter NN" of
    the first paragraph that is not a possessive ("chapter NN's bound" points elsewhere).
    """
    text = " ".join(docstring(name).split())
    first = " ".join(docstring(name).split("\n\n")[0].split())
    for pattern, where in ((_INTRODUCED, text), (_IN_PARENTHESES, first), (_PLAIN, first)):
        found = pattern.search(where)
        if found:
            return found.group(1)
    return None


def _reexports(package: str) -> dict[str, tuple[str, str]]:
    """``name -> (module, name)`` for each top-level ``from pipemare_lite.x import name``."""
    found = {}
    for node in _tree(package).body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _ours(node.module):
            for alias in node.names:
                found[alias.asname or alias.name] = (node.module, alias.name)
    return found


def _ours(module: str | None) -> bool:
    return bool(module) and module.split(".")[0] == PACKAGE


def resolve(module: str, name: str, modules: frozenset[str]) -> set[str]:
    """The modules that ``from module import name`` reaches: ``module`` and where ``name`` lives.

    A submodule is itself; a name a package re-exports is followed to the module that
    defines it (``from pipemare_lite.schedules import gpipe`` -> ``schedules.builders.gpipe``).
    """
    reached = {module} if module in modules else set()
    for _ in range(8):  # re-exports of re-exports; a package never nests deeper
        if f"{module}.{name}" in modules:
            return reached | {f"{module}.{name}"}
        if module not in modules or module_file(module).name != "__init__.py":
            return reached
        source = _reexports(module).get(name)
        if source is None:
            return reached
        module, name = source
        reached.add(module)
    return reached


def imports_of(name: str, modules: frozenset[str]) -> set[str]:
    """The package's modules that module ``name`` imports (anywhere in it, lazily or not)."""
    found: set[str] = set()
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _ours(node.module):
            for alias in node.names:
                found |= resolve(node.module, alias.name, modules)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
    return found - {name}


# --------------------------------------------------------------------------- the chapters


_LINK = re.compile(r"\]\((?:\.\./)?(pipemare_lite/[\w/]+)\.py")
_DOTTED = re.compile(r"\bpipemare_lite(?:\.\w+)+")
_CHECK = re.compile(r"""\bcheck\(\s*["']ex(\d\d)_""")
_COMMAND = re.compile(r"\bpipemare[-_]lite (\w[\w-]*)(?: ([a-z][\w-]*))?")


def _longest_module(dotted: str, modules: frozenset[str]) -> str | None:
    parts = dotted.split(".")
    for end in range(len(parts), 1, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def _code_uses(source: str, modules: frozenset[str]) -> set[str]:
    """Modules a code cell imports, or reaches as ``viz.gantt_chart`` through an imported module."""
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    try:
        tree = ast.parse("\n".join(lines))  # without IPython's magics and shell lines
    except SyntaxError:  # still not Python: keep the lines that parse on their own
        tree = ast.Module(body=[], type_ignores=[])
        for line in lines:
            try:
                tree.body += ast.parse(line.strip()).body
            except SyntaxError:
                pass
    found: set[str] = set()
    bound: dict[str, str] = {}  # local name -> module it refers to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _ours(node.module):
            for alias in node.names:
                found |= resolve(node.module, alias.name, modules)
                if f"{node.module}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    found.add(alias.name)
                    bound[alias.asname or PACKAGE] = alias.name if alias.asname else PACKAGE
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in bound:
                found |= resolve(bound[node.value.id], node.attr, modules)
    return found


def notebook_uses(path: str | Path, modules: frozenset[str] | None = None) -> set[str]:
    """The package's modules a chapter names.

    Named means: imported (a name re-exported by a package counts for the module that
    defines it), reached as an attribute of an imported module, linked as a file
    (``[x.py](../pipemare_lite/x.py)``), written out dotted (``pipemare_lite.x.y``), run as
    a command (``python -m pipemare_lite reproduce paper-shape``: the command's module and
    the experiment's) or asked through ``check("exNN_k", ...)`` (the exercises of chapter
    NN). A named module names its packages too (importing it imports them).
    """
    modules = modules if modules is not None else frozenset(package_modules())
    found: set[str] = set()
    for cell in json.loads(Path(path).read_text(encoding="utf-8"))["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code":
            found |= _code_uses(source, modules)
        found |= {link.replace("/", ".") for link in _LINK.findall(source)}
        found |= {_longest_module(d, modules) for d in _DOTTED.findall(source)}
        found |= {f"{PACKAGE}.book.exercises.ch{number}" for number in _CHECK.findall(source)}
        for command, argument in _COMMAND.findall(source):
            found.add(f"{PACKAGE}.cli.commands.{command.replace('-', '_')}")
            if command == "reproduce" and argument:
                found.add(f"{PACKAGE}.experiments.{argument.replace('-', '_')}")
    found = {m.removesuffix(".__init__") for m in found if m} & modules
    for name in list(found):
        parts = name.split(".")
        found |= {".".join(parts[:end]) for end in range(2, len(parts))}
    return found


def chapter_files(directory: str | Path | None = None) -> dict[str, Path]:
    """``"NN" -> chapters/NN_name.ipynb`` for every chapter of the book."""
    from pipemare_lite.book.notebooks import list_chapters

    return {path.name[:2]: path for path in list_chapters(directory)}


def chapter_uses(directory: str | Path | None = None) -> dict[str, list[str]]:
    """For every module of the package, the chapters (``"NN"``, sorted) that name it."""
    modules = frozenset(package_modules())
    uses: dict[str, list[str]] = {name: [] for name in sorted(modules)}
    for number, path in chapter_files(directory).items():
        for name in notebook_uses(path, modules):
            uses[name].append(number)
    return {name: sorted(numbers) for name, numbers in uses.items()}


# --------------------------------------------------------------------------- the page


def render(directory: str | Path | None = None) -> str:
    """``docs/module-map.md``: every module, what it holds, its chapter, the chapters using it."""
    chapters = chapter_files(directory)
    uses = chapter_uses(directory)
    lines = [
        "# Module map",
        "",
        "Which chapter introduces each module of `pipemare_lite`, and which chapters use it.",
        "Generated from `pipemare_lite/book/module_map.py` (`MODULE_CHAPTERS`, the one place that",
        "says it) and the chapters; do not edit by hand, run",
        "`python -m pipemare_lite.book.module_map > docs/module-map.md` instead.",
        "\"Used in\" lists the chapters that import, link or name the module; `-` marks the",
        "tooling around the book (command line, book build, classroom), which no chapter teaches.",
    ]
    by_package: dict[str, list[str]] = {}
    for name in package_modules():
        parent = name if module_file(name).name == "__init__.py" else name.rpartition(".")[0]
        by_package.setdefault(parent, []).append(name)
    for package, names in by_package.items():
        lines += ["", f"## `{package}`", "", "| module | holds | introduced in | used in |",
                  "|---|---|---|---|"]
        for name in names:
            path = module_file(name).relative_to(PACKAGE_DIR.parent).as_posix()
            chapter = MODULE_CHAPTERS.get(name, "?")
            if chapter in chapters:
                chapter = f"[{chapter}](../chapters/{chapters[chapter].name})"
            holds = summary(name).replace("|", "\\|")
            used = ", ".join(uses[name]) or "-"
            lines.append(f"| [`{name}`](../{path}) | {holds} | {chapter} | {used} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m pipemare_lite.book.module_map``: print ``docs/module-map.md``."""
    argv = sys.argv[1:] if argv is None else argv
    usage = "usage: python -m pipemare_lite.book.module_map > docs/module-map.md"
    if argv in (["-h"], ["--help"]):
        print(usage)  # asked for: a usage line and success, like every command the book shows
        return 0
    if argv:
        raise SystemExit(usage)
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
