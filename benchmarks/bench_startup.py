"""How long does a CLI run take to start training? Goal: <= 2.5 s to the first step.

Runs ``python -m pipemare_lite train`` on the smallest model (an MLP of width 8, two
stages, on the digits) as a fresh process and measures, in wall-clock seconds from the
process start, when the first step's line appears in its ``--jsonl`` stream (that is:
interpreter, imports, data, model, schedule, executor and one step) and when it exits; and
the CPU seconds the process had used at its first step (read from ``/proc``: what a busy,
shared machine disturbs least, and what an idle one's wall time comes close to).
The first run fills the digits cache (:mod:`pipemare_lite.training.data_cache`, in a temporary
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


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a running process (None without /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def time_to_first_step(env: dict, folder: Path) -> tuple[float, float, float | None]:
    """(seconds until the first --jsonl line, seconds until exit, CPU seconds at the first
    line) of one fresh CLI run."""
    stream = folder / "steps.jsonl"
    stream.unlink(missing_ok=True)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *COMMAND, "--jsonl", str(stream)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = cpu = None
    while proc.poll() is None:
        if first is None and stream.exists() and stream.read_text().strip():
            first = time.perf_counter() - start
            cpu = cpu_seconds(proc.pid)
        time.sleep(0.005)
    total = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"the CLI run failed: {proc.stderr.read().decode()[-2000:]}")
    return (first if first is not None else total), total, cpu


def main() -> None:
    """Print cold and warm start-up times and the ratio to the goal."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PIPEMARE_CACHE=tmp, OMP_NUM_THREADS="1", PIPEMARE_PROGRESS="0")
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], check=True, env=env)
        torch_seconds = time.perf_counter() - start
        runs = [time_to_first_step(env, Path(tmp)) for _ in range(RUNS)]
    cold, warm = runs[0], runs[1:]

    def cpu_text(cpu):
        return "" if cpu is None else f" (CPU {cpu:.2f} s)"

    print(f"fresh `import torch`          {torch_seconds:.2f} s")
    print(f"cold run (fills the cache)     first step {cold[0]:.2f} s{cpu_text(cold[2])}, "
          f"exit {cold[1]:.2f} s")
    for i, (first, total, cpu) in enumerate(warm, 1):
        print(f"warm run {i}                     first step {first:.2f} s{cpu_text(cpu)}, "
              f"exit {total:.2f} s")
    for label, values in (("wall", [w[0] for w in warm]), ("CPU", [w[2] for w in warm])):
        if None not in values:
            median = statistics.median(values)
            print(f"median warm first step ({label:4}) {median:.2f} s = "
                  f"{median / GOAL_SECONDS:.2f} x the {GOAL_SECONDS} s goal")


if __name__ == "__main__":
    main()
