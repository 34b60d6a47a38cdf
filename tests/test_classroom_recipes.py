"""The container recipes of docs/instructors.md for nbgrader and otter (issue 31), checked as
far as they can be without Docker: the image's Dockerfile copies files that exist and
installs the extra that holds both tools, and the commands the docs show name that image,
no network, and the paths the export writes. (Before: the recipes were prose with a
placeholder image, ``<image with pipemare-lite and nbgrader>``, and nothing checked them;
the otter export's ``requirements: null`` left pipemare-lite out of ``otter grade``'s image.)
The otter zip itself is checked in tests/test_assign_formats.py (``otter run`` grades with
it). Building the image and running containers is not tested here.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from pipemare_lite.book.exercises.formats import OTTER_PACKAGE_PATH, build_otter

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "docs" / "classroom" / "Dockerfile"
DOCS = ROOT / "docs" / "instructors.md"
TAG = "pipemare-lite-grading"


def _instructions(path: Path) -> list[tuple[str, list[str]]]:
    """``(INSTRUCTION, arguments)`` per Dockerfile instruction (continuations joined)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    found = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            found.append((word.upper(), shlex.split(rest)))
    return found


def _shell_blocks(text: str) -> str:
    """The ```bash blocks of a Markdown text, continuations joined."""
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return re.sub(r"\\\n\s*", " ", "\n".join(blocks))


def test_the_dockerfile_copies_files_that_exist_and_installs_the_classroom_extra():
    steps = _instructions(DOCKERFILE)
    copies = [args for word, args in steps if word == "COPY"]
    assert copies, "the image copies the package in"
    for args in copies:
        *sources, destination = args
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
        assert destination.startswith(OTTER_PACKAGE_PATH), destination
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    # what setuptools needs to install from the copied folder
    copied = {Path(s).name for *sources, _ in copies for s in sources}
    assert {"pyproject.toml", project["readme"], "pipemare_lite"} <= copied
    extra = project["optional-dependencies"]["classroom"]
    assert any(r.startswith("nbgrader") for r in extra)
    assert any(r.startswith("otter-grader") for r in extra)
    runs = " ".join(" ".join(args) for word, args in steps if word == "RUN")
    assert f"{OTTER_PACKAGE_PATH}[classroom]" in runs
    (base,) = [args[0] for word, args in steps if word == "FROM"]
    minimum = project["requires-python"].removeprefix(">=")
    assert base.startswith(f"python:{minimum}"), (base, minimum)
    assert ("USER", ["nobody"]) in steps


def test_the_docs_commands_use_that_image_without_network():
    text = DOCS.read_text()
    assert "(classroom/Dockerfile)" in text  # the link resolves from docs/
    shell = _shell_blocks(text)
    build = [c for c in shell.splitlines() if c.strip().startswith("docker build")]
    assert build and all(f"-f {DOCKERFILE.relative_to(ROOT)}" in c and f"-t {TAG}" in c
                         for c in build), build
    runs = [c for c in shell.splitlines() if "docker run" in c]
    assert runs and all("--network none" in c and TAG in c and "--rm" in c for c in runs), runs
    grades = [c for c in shell.splitlines() if c.strip().startswith("otter grade")]
    assert grades and all(f"--image {TAG}" in c and "--no-network" in c for c in grades), grades
    # the same commands as the Dockerfile's own header
    header = re.sub(r"\\\n#\s*", " ", DOCKERFILE.read_text())
    assert f"docker build -f docs/classroom/Dockerfile -t {TAG} ." in header
    assert f"--image {TAG} --no-network" in header


def test_the_otter_export_names_the_images_copy_of_the_package(tmp_path):
    (notebook,) = build_otter(ROOT / "chapters", tmp_path, chapters=["04"])
    config = notebook.read_text()
    assert "requirements: requirements.txt" in config
    assert (notebook.parent / "requirements.txt").read_text().split() == [OTTER_PACKAGE_PATH]


def _docker_daemon() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _docker_daemon(), reason="no Docker daemon here: the image is not built")
def test_the_image_builds():
    done = subprocess.run(["docker", "build", "-f", str(DOCKERFILE), "-t", TAG, str(ROOT)],
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
