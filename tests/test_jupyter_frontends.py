"""Chapter 02 live in real front ends: JupyterLab and Notebook 7, driven in Chromium.

A Jupyter server per front end (127.0.0.1, a free port, a random token, its own config,
runtime and settings folders) serves a copy of chapter 02, so nothing is saved into the
repository.
For each front end: open the chapter, Run All Cells, and check that every cell ran without
an error (read from the notebook as the front end saved it), that every figure is drawn,
that the schedule explorer renders, and that moving its M slider redraws its Gantt chart.
The test stops the server (and its kernels) itself, in bounded time.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from tests.browser import chromium, chromium_path, watch

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "02_gpipe_and_the_bubble.ipynb"
#: URL path of the notebook in each front end ({folder} holds that front end's copy).
FRONT_ENDS = {
    "jupyterlab": "lab/tree/{folder}/chapters/" + CHAPTER,
    "notebook7": "notebooks/{folder}/chapters/" + CHAPTER,
}
#: Errors a front end's own code raises when it loads a page, whatever the notebook: Notebook
#: 7.6's keyboard-shortcut settings code reads the schema of a plugin it has not registered
#: (seen with no third-party extension enabled). Tolerated there, and only that one.
KNOWN_FRONT_END_ERRORS = {
    "notebook7": [("Cannot read properties of undefined (reading 'schema')", "notebook_core")],
}
SERVER_START_S = 120
RUN_ALL_S = 300
STOP_S = 30

_PROMPTS = """() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
    .map(e => e.textContent.trim())"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the server's process group (it shuts its kernels down), then SIGKILL."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=STOP_S)


@pytest.fixture(scope="module", params=sorted(FRONT_ENDS))
def server(request, tmp_path_factory):
    """A Jupyter server for one front end, with a copy of chapter 02; stopped at the end.

    One server per front end: each starts from a fresh server, whatever the other did.
    """
    chromium_path()  # skip (fail under CI) before starting anything
    front_end = request.param
    home = tmp_path_factory.mktemp(f"jupyter-{front_end}")
    (home / front_end / "chapters").mkdir(parents=True)
    shutil.copyfile(ROOT / "chapters" / CHAPTER, home / front_end / "chapters" / CHAPTER)
    port, token = _free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k != "PLOTLY_RENDERER"}  # as a reader's
    env.update(
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    command = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={home}",
        "--LabApp.extension_manager=readonly",  # never asks PyPI for extensions
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]  # fmt: skip
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # containers and CI run as root
    log = (home / "server.log").open("w")
    process = subprocess.Popen(
        command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"Jupyter server did not start: {(home / 'server.log').read_text()}"
                    ) from None
                time.sleep(0.5)
        yield front_end, base, token, home
    finally:
        _stop(process)
        log.close()
    assert process.poll() is not None, "the Jupyter server is still running"


def _wait_for_idle_kernel(base: str, token: str, path: str) -> None:
    """Until the server reports the notebook's kernel started and idle (Run All needs it)."""
    deadline = time.monotonic() + SERVER_START_S
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=10) as answer:
            sessions = json.load(answer)
        states = [s["kernel"]["execution_state"] for s in sessions if s["path"] == path]
        if states == ["idle"]:
            return
        time.sleep(0.5)
    raise AssertionError(f"no idle kernel for {path} within {SERVER_START_S} s")


def _run_all(page) -> None:
    """Run All Cells from the Run menu; wait until no cell is queued or running."""
    page.locator("li.lm-MenuBar-item", has_text="Run").first.click()
    item = page.locator("li.lm-Menu-item:not(.lm-mod-disabled)", has_text="Run All Cells")
    item.first.click()
    began = time.monotonic()
    deadline = began + RUN_ALL_S
    started = False
    while time.monotonic() < deadline:
        prompts = page.evaluate(_PROMPTS)
        busy = any(p == "[*]:" for p in prompts)
        numbered = prompts and all(p[1:-2].isdigit() for p in prompts)
        started = started or busy or numbered
        if started and not busy:
            return  # every cell ran, or Run All stopped at an error (checked from the file)
        if not started and time.monotonic() > began + 30:
            raise AssertionError(f"Run All Cells started nothing within 30 s: prompts {prompts}")
        time.sleep(0.5)
    raise AssertionError(f"Run All did not finish in {RUN_ALL_S} s: prompts {prompts}")


def _saved_notebook(page, path: Path):
    """Save from the front end (Ctrl+S) and read the file it wrote."""
    before = path.stat().st_mtime_ns
    # focus the notebook on a cell prompt: a click elsewhere may land on a link in a cell
    page.locator(".jp-CodeCell .jp-InputPrompt").first.click()
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 60
    while path.stat().st_mtime_ns == before and time.monotonic() < deadline:
        time.sleep(0.2)
    # the server may still be writing (an empty or partial file): read until it parses
    while True:
        time.sleep(0.5)
        try:
            return nbformat.read(path, as_version=4)
        except (nbformat.reader.NotJSONError, ValueError):
            if time.monotonic() > deadline:
                raise


def _shut_down_kernels(base: str, token: str) -> None:
    with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=10) as answer:
        sessions = json.load(answer)
    for session in sessions:
        request = urllib.request.Request(
            f"{base}/api/sessions/{session['id']}?token={token}", method="DELETE"
        )
        urllib.request.urlopen(request, timeout=30).close()


def test_chapter_02_runs_and_its_explorer_redraws(server):
    front_end, base, token, home = server
    start = time.monotonic()
    url = f"{base}/{FRONT_ENDS[front_end].format(folder=front_end)}?token={token}"
    with chromium(viewport=(1400, 1000)) as context:
        from playwright.sync_api import expect  # importable: chromium() checked it

        page = context.new_page()
        problems = watch(page)
        page.goto(url)
        page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=120_000)
        _wait_for_idle_kernel(base, token, f"{front_end}/chapters/{CHAPTER}")
        _run_all(page)

        # no cell erred, and every code cell ran (Run All stops at an error)
        saved = _saved_notebook(page, home / front_end / "chapters" / CHAPTER)
        code = [c for c in saved.cells if c.cell_type == "code"]
        errors = [
            f"cell {i}: {o.get('ename')}: {o.get('evalue')}"
            for i, c in enumerate(code)
            for o in c.outputs
            if o.output_type == "error"
        ]
        assert not errors, errors
        assert all(c.execution_count for c in code), [c.execution_count for c in code]
        # the solutions opened collapsed, and the front end kept them so when it saved
        # (issue 45: jupyter.source_hidden is the key JupyterLab and Notebook 7 honour)
        from pipemare_lite.book.solutions import is_collapsed, is_solution_cell

        solutions = [c for c in code if is_solution_cell(c)]
        assert len(solutions) == 3 and all(is_collapsed(c) for c in solutions)

        # every figure is drawn (by the front end's plotly renderer), there are several
        figures = page.locator(".jp-RenderedPlotly")
        assert figures.count() >= 3
        page.wait_for_function(
            "() => [...document.querySelectorAll('.jp-RenderedPlotly')]"
            ".every(e => e.querySelector('svg.main-svg'))",
            timeout=60_000,
        )

        # the schedule explorer renders: its controls and its Gantt chart
        explorer = page.locator(".jp-OutputArea-output:has(.widget-hslider)").first
        explorer.scroll_into_view_if_needed()
        assert explorer.locator(".widget-hslider").count() >= 6
        gantt = explorer.locator(".js-plotly-plot").first
        gantt.locator("svg.main-svg").first.wait_for(timeout=60_000)
        slider = explorer.locator(".widget-hslider:has(.widget-label:text-is('M microbatches'))")
        # the readout fills in after the slider is drawn (it was empty once under load)
        expect(slider.locator(".widget-readout")).to_have_text("8", timeout=60_000)
        boxes = "e => e.querySelectorAll('.point').length"
        before = gantt.evaluate(boxes)

        # dragging the slider's handle to the right (more microbatches) redraws the chart
        handle = slider.locator(".noUi-handle")
        handle.scroll_into_view_if_needed()
        box = handle.bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.mouse.move(x, y)
        page.mouse.down()
        page.mouse.move(x + 25, y, steps=5)
        page.mouse.up()
        page.wait_for_function(
            f"e => ({boxes})(e) > {before}", arg=gantt.element_handle(), timeout=60_000
        )
        expect(slider.locator(".widget-readout")).not_to_have_text("8", timeout=60_000)
        assert int(slider.locator(".widget-readout").inner_text()) > 8
        explorer.screenshot(path=str(home / f"{front_end}-explorer.png"))
        known = KNOWN_FRONT_END_ERRORS.get(front_end, [])
        ours = [
            e for e in problems.page_errors if not any(m in e and w in e for m, w in known)
        ]
        assert not ours, ours
    _shut_down_kernels(base, token)
    print(f"\n{front_end}: chapter 02 run and explorer checked in {time.monotonic() - start:.1f} s")
