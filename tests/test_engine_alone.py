"""The engine apart from the book (issue 32): importing every engine module loads none of
the book's packages, and the engine installs and trains in a clean venv that has only its
own dependencies."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the packages of the engine (the command line is above them and imports the book lazily)
ENGINE_PACKAGES = ("schedules", "analysis", "methods", "engine", "training", "interop",
                   "experiments", "cli")
#: import names of the book extra's packages, and the book's own packages
BOOK_MODULES = ("plotly", "ipywidgets", "anywidget", "jupyterlab", "notebook", "ipykernel",
                "nbconvert", "nbformat", "nbclient", "IPython", "jupyter_server", "sphinx",
                "myst_nb", "sphinx_book_theme", "sklearn", "pipemare_lite.book",
                "pipemare_lite.figures")

#: run in a fresh interpreter: import every engine module, print the book modules loaded
IMPORT_EVERYTHING = textwrap.dedent(f"""
    import importlib, json, pkgutil, sys
    for package in {ENGINE_PACKAGES!r}:
        root = importlib.import_module("pipemare_lite." + package)
        for info in pkgutil.walk_packages(root.__path__, root.__name__ + "."):
            if not info.name.endswith("__main__"):
                importlib.import_module(info.name)
    loaded = sorted(name for name in sys.modules
                    if name.split(".")[0] in {BOOK_MODULES!r} or name.startswith({BOOK_MODULES!r}))
    print(json.dumps(loaded))
""")


def test_the_engine_imports_none_of_the_books_packages():
    done = subprocess.run([sys.executable, "-c", IMPORT_EVERYTHING], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_the_engine_dependencies_are_torch_numpy_and_tqdm_only():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = sorted(r.split(">")[0].split("=")[0].strip() for r in project["dependencies"])
    assert names == ["numpy", "torch", "tqdm"]
    book = " ".join(project["optional-dependencies"]["book"])
    for package in ("plotly", "ipywidgets", "jupyterlab", "sphinx", "myst-nb", "scikit-learn"):
        assert package in book, package


def _closure(names: list[str]) -> dict[str, importlib.metadata.Distribution]:
    """The installed distributions ``names`` need, their requirements' too (no extras)."""
    found, todo = {}, list(names)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in found:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # an optional or platform-specific requirement not installed here
        found[name] = dist
        for requirement in dist.requires or ():
            if "extra ==" in requirement:
                continue
            todo.append(requirement.split(";")[0].split("[")[0].split("<")[0].split(">")[0]
                        .split("=")[0].split("!")[0].split("~")[0].strip())
    return found


def _link_distributions(dists, into: Path) -> None:
    """Make ``into`` a site directory holding (as links) exactly these distributions."""
    into.mkdir()
    for dist in dists.values():
        tops = {Path(str(f)).parts[0] for f in dist.files or ()
                if not str(f).startswith("..") and Path(str(f)).parts[0] != "__pycache__"}
        base = Path(dist.locate_file(""))
        for top in tops:
            source = base / top
            if source.exists() and not (into / top).exists():
                (into / top).symlink_to(source)


@pytest.mark.slow
def test_the_engine_installs_and_trains_in_a_clean_venv(tmp_path):
    # A venv without the book: torch, numpy, tqdm and what they need (plus pip and
    # setuptools to build), linked from this environment, since nothing may download. pip must find
    # every
    # requirement of the engine already satisfied: nothing is fetched.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=300)
    python = venv / "bin" / "python"
    site = Path(subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    shared = tmp_path / "shared-site"
    _link_distributions(_closure(["torch", "numpy", "tqdm", "setuptools", "pip"]), shared)
    (site / "engine-dependencies.pth").write_text(f"{shared}\n")
    source = tmp_path / "src"  # a copy: building must not write into the checkout
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "chapters", "data", "tests", "docs",
        "__pycache__", "student", "solutions", "reports"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_"))}
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-index", "--no-build-isolation", "--quiet",
         str(source)], capture_output=True, text=True, timeout=600, env=env)
    assert install.returncode == 0, install.stdout + install.stderr
    check = textwrap.dedent(f"""
        import importlib.util, json
        book = [m for m in {BOOK_MODULES[:-2]!r} if importlib.util.find_spec(m) is not None]
        assert book == [], ("book packages in the clean venv", book)
    """) + IMPORT_EVERYTHING + textwrap.dedent("""
        import torch
        import pipemare_lite as pml
        from pipemare_lite.training.datasets import digits, signals
        from pipemare_lite.training.models import mlp
        torch.manual_seed(0)
        data = signals(num_train=64, num_test=32)
        history = pml.fit(mlp(data.input_shape[0], 16, 2, data.num_classes), data, method="1f1b",
                          num_stages=2, num_microbatches=2, batch_size=16, epochs=1, lr=0.05,
                          progress=False)
        assert len(history.loss) == 4 and not history.diverged, history.loss
        try:
            digits()
        except ImportError as exc:
            assert "[book]" in str(exc), exc
        else:
            raise AssertionError("digits() without scikit-learn")
        print("trained", history.loss[-1])
    """)
    done = subprocess.run([str(python), "-c", check], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "trained" in done.stdout
    cli = subprocess.run([str(venv / "bin" / "pipemare-lite"), "train", "--help"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert cli.returncode == 0 and "--method" in cli.stdout, cli.stderr
