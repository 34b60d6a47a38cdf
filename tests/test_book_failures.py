"""The book build when a chapter misbehaves: a kernel that dies, a cell that loops or
sleeps past ``--timeout``, a build stopped with SIGINT or SIGTERM (issue #36, item 1).

Each chapter is a tiny one-cell notebook in a temporary folder; every case has a hard time
limit (tests/timeouts.py), so a builder that hangs fails the test instead of the suite.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from pipemare_lite import cli
from pipemare_lite.book import build as book
from tests.timeouts import hard_time_limit

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 3  # seconds per cell given to the builder


def _chapter(folder: Path, name: str, *code: str) -> Path:
    nb = new_notebook(
        cells=[
            new_markdown_cell(f"# {name[:2]} · Fixture\n\nA promise."),
            *map(new_code_cell, code),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}},
    )
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize(
    ("name", "cell", "said"),
    [
        ("01_dying", "import os\nos._exit(7)", "killed its kernel"),
        ("02_looping", "while True:\n    pass", f"longer than the {TIMEOUT} s allowed"),
        ("03_sleeping", "import time\ntime.sleep(20)", f"longer than the {TIMEOUT} s allowed"),
    ],
)
def test_a_misbehaving_chapter_fails_within_the_timeout_naming_chapter_and_cell(
    tmp_path, monkeypatch, name, cell, said
):
    # the kernel's connection file (it holds the HMAC key) must not stay in a shared folder
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(shared))
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    path = _chapter(tmp_path, name, "x = 1", cell)  # cell 3: after the title and `x = 1`
    start = time.monotonic()
    with hard_time_limit(TIMEOUT + 25):
        _, seconds, error = book.execute_chapter(path, TIMEOUT)
    took = time.monotonic() - start
    assert took <= TIMEOUT + 10, f"{name} took {took:.1f} s under a {TIMEOUT} s timeout"
    assert error.startswith(f"{name}.ipynb: cell 3 "), error
    assert said in error
    assert list(shared.iterdir()) == [], "a kernel file was left in the temporary folder"


def _start_build(
    tmp_path: Path, cell: str, out: Path | None = None
) -> tuple[subprocess.Popen, Path]:
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    started = chapters / "started"
    # the cell says it runs (with its kernel's pid), then never finishes
    _chapter(
        chapters, "01_forever", f"import os\nopen('started', 'w').write(str(os.getpid()))\n{cell}"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    build = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipemare_lite",
            "book",
            "--out",
            str(out or tmp_path / "out"),
            "--chapters-dir",
            str(chapters),
            "--timeout",
            "120",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (started.is_file() and started.read_text()) and build.poll() is None:
        assert time.monotonic() < deadline, "the chapter's cell never started"
        time.sleep(0.1)
    return build, started


def _gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize(
    ("signum", "cell"),
    [(signal.SIGINT, "while True:\n    pass"), (signal.SIGTERM, "import time\ntime.sleep(300)")],
)
def test_a_signal_ends_the_build_and_its_kernel_within_5_seconds(tmp_path, signum, cell):
    build, started = _start_build(tmp_path, cell)
    try:
        kernel = int(started.read_text())
        sent = time.monotonic()
        build.send_signal(signum)
        try:
            output, _ = build.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the build still ran 5 s after {signum.name}")
        assert time.monotonic() - sent <= 5
        assert build.returncode == 128 + signum, output
        assert f"stopped: {signum.name} while running 01_forever.ipynb (cell 2)" in output
        assert _gone(kernel, 5), "the chapter's kernel outlived the build"
        assert not (tmp_path / "out" / "index.html").exists()
    finally:
        if build.poll() is None:
            build.kill()
            build.communicate()
        if started.is_file() and started.read_text():
            try:
                os.kill(int(started.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_second_build_into_the_same_folder_is_refused_while_the_first_runs(tmp_path, capsys):
    # issue #36, item 10: both used to exit 0 with a site mixing their chapters
    out = tmp_path / "out"
    first, started = _start_build(tmp_path, "import time\ntime.sleep(8)", out=out)
    try:
        other = tmp_path / "other"
        other.mkdir()
        _chapter(other, "02_other", "print('other')")
        argv = ["book", "--out", str(out), "--chapters-dir", str(other), "--timeout", "60"]
        start = time.monotonic()
        assert cli.main(argv) == 2
        assert time.monotonic() - start < 5  # at once, not after running a chapter
        err = capsys.readouterr().err
        assert f"another book build (pid {first.pid}) is writing {out}" in err
        output, _ = first.communicate(timeout=90)
        assert first.returncode == 0, output
        index = (out / "index.html").read_text()
        assert "01_forever" in index and "02_other" not in index
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()


def test_a_chapter_run_leaves_no_kernel_connection_file(tmp_path, monkeypatch):
    # issue #36, item 11: each run left its kernel's connection file (with its HMAC key)
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(shared))
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    path = _chapter(tmp_path, "01_fine", "x = 1")
    with hard_time_limit(60):
        _, _, error = book.execute_chapter(path, 30)
    assert error == ""
    assert list(shared.iterdir()) == []
