"""The front door (issue 32): ``import pipemare_lite`` offers the names a user needs, loads
nothing heavy until one is read, and no module hides behind a function of its name."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import pipemare_lite


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=180)


def test_the_front_door_names_resolve():
    done = run_python("import pipemare_lite as p; p.fit; p.build_schedule; p.register_method\n"
                      "print(sorted(p.__all__))")
    assert done.returncode == 0, done.stderr
    for name in pipemare_lite.__all__:
        assert getattr(pipemare_lite, name) is not None, name
    assert callable(pipemare_lite.fit) and callable(pipemare_lite.launch)


def test_importing_the_package_loads_no_torch():
    done = run_python("import sys, pipemare_lite; print('torch' in sys.modules)")
    assert done.stdout.strip() == "False", done.stderr


def test_an_unknown_name_is_refused_with_the_offer():
    with pytest.raises(AttributeError, match="front door|exports: fit"):
        pipemare_lite.no_such_name  # noqa: B018


def test_help_reads_as_a_map():
    doc = pipemare_lite.__doc__
    for name in ("fit", "build_schedule", "simulate", "LocalExecutor", "DistributedExecutor",
                 "register_method", "schedules/", "engine/", "training/", "[book]"):
        assert name in doc, name
    # every front-door name is mentioned in the map
    assert [n for n in pipemare_lite.__all__ if n != "__version__" and n not in doc] == []


def packages():
    yield pipemare_lite
    for info in pkgutil.walk_packages(pipemare_lite.__path__, "pipemare_lite."):
        if info.ispkg:
            yield importlib.import_module(info.name)


@pytest.mark.parametrize("package", list(packages()), ids=lambda p: p.__name__)
def test_no_module_shares_its_name_with_a_function_its_package_exports(package):
    submodules = {info.name for info in pkgutil.iter_modules(package.__path__)}
    exported = set(getattr(package, "__all__", ()))
    clash = sorted(name for name in exported & submodules
                   if not isinstance(getattr(package, name), type(pipemare_lite)))
    assert clash == [], f"{package.__name__} exports {clash}, which are also its module names"


@pytest.mark.parametrize("old", ["pipemare_lite.training.fit", "pipemare_lite.engine.dist",
                                 "pipemare_lite.schedules.one_f_one_b"])
def test_the_old_import_paths_are_gone(old):
    # issue 44: the aliases protected a release that never shipped (CHANGELOG.md)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
    assert not any(name == old or name.startswith(old + ".") for name in sys.modules)


def test_fit_takes_a_config_object_or_keywords_with_the_same_numbers():
    import dataclasses

    import torch

    from pipemare_lite.training.datasets import signals
    from pipemare_lite.training.models import mlp

    data = signals(num_train=64, num_test=32)
    settings = dict(method="async", num_stages=2, num_microbatches=2, batch_size=16, epochs=1,
                    lr=0.05, progress=False)

    def model():
        torch.manual_seed(0)
        return mlp(data.input_shape[0], 16, 2, data.num_classes)

    config = pipemare_lite.FitConfig(**settings)
    by_keywords = pipemare_lite.fit(model(), data, **settings)
    by_config = pipemare_lite.fit(model(), data, config)
    assert by_config.loss == by_keywords.loss and by_config.config == by_keywords.config
    # keywords replace the config's fields, as dataclasses.replace does
    other = pipemare_lite.fit(model(), data, config, seed=1)
    assert other.config["seed"] == 1
    assert other.loss == pipemare_lite.fit(
        model(), data, dataclasses.replace(config, seed=1)).loss


def test_a_config_is_checked_once_when_it_is_made():
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        pipemare_lite.FitConfig(epochs=1, batch_size=0, method="1f1b", lr=0.1)
    with pytest.raises(ValueError, match="lr must be a positive number"):
        pipemare_lite.FitConfig(epochs=1, batch_size=8, method="1f1b", lr=-1.0)
    with pytest.raises(TypeError, match="unknown settings stages; allowed: .*num_stages"):
        pipemare_lite.fit(None, None, epochs=1, batch_size=8, stages=2)
    with pytest.raises(TypeError, match="needs epochs"):
        pipemare_lite.fit(None, None, batch_size=8)


def test_chapters_import_no_private_names_of_the_package():
    import ast
    import json
    from pathlib import Path

    found = []
    for path in sorted((Path(__file__).resolve().parents[1] / "chapters").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"])
            try:
                tree = ast.parse("\n".join(line for line in source.splitlines()
                                           if not line.lstrip().startswith(("%", "!"))))
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                        "pipemare_lite"):
                    found += [f"{path.name}: {node.module}.{a.name}" for a in node.names
                              if a.name.startswith("_") and a.name != "__version__"]
                    if any(part.startswith("_") for part in node.module.split(".")):
                        found.append(f"{path.name}: {node.module}")
    assert found == []


def test_the_front_door_offers_what_a_user_needs_to_write_fit_calls():
    """Issue 44, item 7: the data helpers, MethodOptions and OpCosts are at the front door,
    the same objects as in their modules, and help() says where each belongs."""
    from pipemare_lite.analysis.simulate import OpCosts
    from pipemare_lite.methods.registry import MethodOptions
    from pipemare_lite.training import datasets
    from pipemare_lite.training.models import register_model

    assert pipemare_lite.Dataset is datasets.Dataset
    assert pipemare_lite.signals is datasets.signals and pipemare_lite.digits is datasets.digits
    assert pipemare_lite.sequence_task is datasets.sequence_task
    assert pipemare_lite.microbatches is datasets.microbatches
    assert pipemare_lite.MethodOptions is MethodOptions and pipemare_lite.OpCosts is OpCosts
    assert pipemare_lite.register_model is register_model
    for line in ("Data:      Dataset, digits, signals, sequence_task", "OpCosts",
                 "MethodOptions", "DataLoader", "TensorDataset"):
        assert line in pipemare_lite.__doc__, line
