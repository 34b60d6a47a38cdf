"""The package has no import cycles, and its layers only point down (issues 11 and 32).

Read statically: for every module of ``pipemare_lite``, the modules of the package it
imports anywhere in it: at module level and inside functions alike (a deferred import is
still a dependency; issue 32 found four cycles hidden that way). Only ``if TYPE_CHECKING:``
blocks do not count. ``from pkg import name`` counts as an import of ``pkg.name`` when that
is a module, else of ``pkg``. A cycle is a strongly connected component of more than one
module of that graph; each one found is named in the failure.

The packages form layers (:data:`LAYERS`, bottom first, as the package docstring draws
them): a module may import its own package and the layers below, never one above.
``__main__`` modules are entry points (``python -m ...``), which nothing imports: they may
reach up.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "pipemare_lite"


def package_modules() -> dict[str, Path]:
    """Dotted name -> file, for every module and package of pipemare_lite."""
    modules = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


#: The packages, bottom first; each may import those before it (and itself).
LAYERS = (
    ("pipemare_lite.files", "pipemare_lite.plugins", "pipemare_lite._lazy",
     "pipemare_lite.spelling", "pipemare_lite.deprecation", "pipemare_lite.torch_compat"),
    ("pipemare_lite.schedules",),
    ("pipemare_lite.analysis",),
    ("pipemare_lite.methods",),
    ("pipemare_lite.engine",),
    ("pipemare_lite.training",),
    ("pipemare_lite.interop",),
    ("pipemare_lite.experiments",),
    ("pipemare_lite.figures",),
    ("pipemare_lite.book",),
    ("pipemare_lite.cli",),
)


def all_imports(tree: ast.Module):
    """Every import statement of the module, in functions too (not under TYPE_CHECKING)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in skipped:
            yield node


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package modules it imports (anywhere in it)."""
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported = set()
        for node in all_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update(a.name for a in node.names if a.name in modules)
                continue
            base = node.module or ""
            if node.level:  # relative: climb from the importing package
                parents = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(parents + ([node.module] if node.module else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in modules:
                    imported.add(target)
                elif base in modules:
                    imported.add(base)
        graph[name] = imported - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_reads_the_package():
    graph = import_graph(package_modules())
    # spot checks that the reader resolves both import forms
    assert "pipemare_lite.schedules.actions" in graph["pipemare_lite.schedules.validation"]
    assert "pipemare_lite.methods.registry" in graph["pipemare_lite.methods"]


def test_pipemare_lite_has_no_import_cycles():
    found = cycles(import_graph(package_modules()))
    assert not found, "import cycles (each line one cycle):\n" + "\n".join(
        " <-> ".join(component) for component in found)


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the package holding ``module`` (None: the root)."""
    for index, packages in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in packages):
            return index
    return None


def test_function_level_imports_count():
    tree = ast.parse("def f():\n    import os\nif TYPE_CHECKING:\n    import sys\n")
    assert [ast.unparse(n) for n in all_imports(tree)] == ["import os"]


def test_every_package_has_a_layer():
    top = {".".join(name.split(".")[:2]) for name in package_modules()}
    assert sorted(p for p in top if p != "pipemare_lite.__main__" and layer_of(p) is None) \
        == ["pipemare_lite"]  # the root: its front door names modules as strings only


def test_layers_only_point_down():
    graph = import_graph(package_modules())
    upward = [f"{module} -> {target}" for module, targets in sorted(graph.items())
              if not module.endswith("__main__") and layer_of(module) is not None
              for target in sorted(targets)
              if layer_of(target) is not None and layer_of(target) > layer_of(module)]
    assert upward == [], "imports that point up a layer:\n" + "\n".join(upward)
