"""How long does a CLI run take to start training? Goal: <= 2.5 s to the first step.

Runs ``python -m pipemare_lite train`` on the smallest model (an MLP of width 8, two
stages, on the digits) as a fresh process and measures, in wall-clock seconds from the
process start, when the first step's line appears in its ``--jsonl`` stream (that is:
interpreter, imports, data, model, schedule, executor and one step) and when it exits.
The first run fills the digits cache (:mod:`pipemare_lite.data_cache`, in a temporary
folder here); the next runs read it. Prints the seconds and the ratio to the goal of the
median warm run; asserts nothing (timings are not tests, and a shared machine is noisy).
Also prints how long ``import torch`` alone takes in a fresh process, the floor of any
run.

    .venv/bin/python benchmarks/bench_startup.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_SECONDS = 2.5
RUNS = 4
COMMAND = ["-m", "pipemare_lite", "train", "--method", "1f1b", "--stages", "2",
           "--microbatches", "2", "--batch-size", "64", "--width", "8", "--layers", "2",
           "--epochs", "1", "--no-progress"]


def time_to_first_step(env: dict, folder: Path) -> tuple[float, float]:
    """(seconds until the first --jsonl line, seconds until exit) of one fresh CLI run."""
    stream = folder / "steps.jsonl"
    stream.unlink(missing_ok=True)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *COMMAND, "--jsonl", str(stream)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = None
    while proc.poll() is None:
        if first is None and stream.exists() and stream.read_text().strip():
            first = time.perf_counter() - start
        time.sleep(0.005)
    total = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"the CLI run failed: {proc.stderr.read().decode()[-2000:]}")
    return (first if first is not None else total), total


def main() -> None:
    """Print cold and warm start-up times and the ratio to the goal."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PIPEMARE_CACHE=tmp, OMP_NUM_THREADS="1", PIPEMARE_PROGRESS="0")
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], check=True, env=env)
        torch_seconds = time.perf_counter() - start
        runs = [time_to_first_step(env, Path(tmp)) for _ in range(RUNS)]
    cold, warm = runs[0], runs[1:]
    median = statistics.median(first for first, _ in warm)
    print(f"fresh `import torch`          {torch_seconds:.2f} s")
    print(f"cold run (fills the cache)     first step {cold[0]:.2f} s, exit {cold[1]:.2f} s")
    for i, (first, total) in enumerate(warm, 1):
        print(f"warm run {i}                     first step {first:.2f} s, exit {total:.2f} s")
    print(f"median warm first step         {median:.2f} s = {median / GOAL_SECONDS:.2f} x the "
          f"{GOAL_SECONDS} s goal")


if __name__ == "__main__":
    main()
