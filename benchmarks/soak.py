"""Soak: an hour of training, killed twice and resumed, against a run never interrupted.

Issue 47, item 6. Four runs of the same command line (``pipemare-lite train``, 1F1B on 2
stages, an MLP on the digits, checkpoints every ``--checkpoint-every`` steps) start at once:

- ``local-soak`` and ``dist-soak`` (local executor; distributed executor, 2 gloo ranks on
  127.0.0.1): SIGKILLed, whole process group, at each ``--kill-at`` minute and restarted at
  once with ``--resume``;
- ``local-ref`` and ``dist-ref``: the same command, never interrupted.

All four ask for the same length (``--epochs``, more than an hour can train). At
``--minutes`` all four are stopped (SIGKILL); each reference's checkpoints were copied as
they were written, and the soak run's last checkpoint is compared bitwise with the
reference's of the same step (the executor's state: every weight and optimizer tensor and
what is in flight; the history's per-step losses; the random states, reported apart), and
the streamed per-step losses too
(``--jsonl``: a resumed run re-trains the steps after its last checkpoint; the last line
of each step is compared). The RSS of each run's process tree (a distributed run: the
launcher, its fork server and both ranks) is sampled every ``--sample-every`` seconds; the
summary gives its min and max per phase (a phase: between two kills).

Nothing sleeps between steps: the pace is the model's. Run it niced, in the background::

    nice -n 19 .venv/bin/python benchmarks/soak.py --out benchmarks/results/soak.json \
        > /tmp/soak.log 2>&1 &

Prints one line per event; writes the summary (JSON) to ``--out``. Exit 0 when every
comparison is bitwise equal, 1 otherwise. Timings are this machine's, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

#: The trained command: small enough to keep a checkpoint a few MB, heavy enough per step
#: that an hour does not reach the end (1F1B flushes each minibatch; SGD, constant lr).
TRAIN = [
    "train", "--method", "1f1b", "--stages", "2", "--layers", "4", "--width", "512",
    "--batch-size", "256", "--microbatches", "4", "--record", "losses", "--no-progress",
    "--threads", "1", "--seed", "0",
]


def log(text: str) -> None:
    """One timestamped line on stdout (the soak's log)."""
    print(f"[soak {time.strftime('%H:%M:%S', time.gmtime())}Z] {text}", flush=True)


class Run:
    """One training command: started, killed, resumed; its RSS sampled."""

    def __init__(self, name: str, executor: str, folder: Path, args) -> None:
        self.name, self.executor, self.folder = name, executor, folder
        folder.mkdir(parents=True, exist_ok=True)
        self.checkpoint, self.jsonl = folder / "run.pt", folder / "steps.jsonl"
        self.args, self.proc, self.phase = args, None, 0
        self.samples: list[dict] = []
        self.kills: list[dict] = []
        self.starts: list[float] = []

    def command(self, resume: bool) -> list[str]:
        """The command line of this run (``--resume`` after a kill)."""
        return [sys.executable, "-m", "pipemare_lite", *TRAIN, "--epochs",
                str(self.args.epochs), "--executor", self.executor,
                *(["--op-timeout", str(self.args.op_timeout)] if self.executor == "dist" else []),
                "--checkpoint",
                str(self.checkpoint), "--checkpoint-every", str(self.args.checkpoint_every),
                "--jsonl", str(self.jsonl)] + (["--resume"] if resume else [])

    def start(self, t0: float, resume: bool = False) -> None:
        """Start the command in its own process group (so a kill reaches every rank)."""
        out = open(self.folder / "output.log", "a")  # noqa: SIM115 (the child keeps it)
        self.proc = subprocess.Popen(self.command(resume), stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        out.close()
        self.starts.append(round(time.time() - t0, 1))
        log(f"{self.name}: started pid {self.proc.pid}{' --resume' if resume else ''}")

    def tree(self) -> list[psutil.Process]:
        """The run's processes (the command and every descendant)."""
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def sample(self, t0: float) -> None:
        """Record the RSS of the run's process tree (sum and per process), in MB."""
        rss = []
        for p in self.tree():
            try:
                rss.append(p.memory_info().rss / 2**20)
            except psutil.NoSuchProcess:
                pass
        if rss:
            self.samples.append({"t_min": round((time.time() - t0) / 60, 2), "phase": self.phase,
                                 "rss_mb": round(sum(rss), 1), "processes": len(rss),
                                 "largest_mb": round(max(rss), 1)})

    def kill(self, t0: float) -> None:
        """SIGKILL the whole process group; check that nothing of it survives."""
        pgid = self.proc.pid
        members = self.tree()
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:  # the run finished before its kill: too few --epochs
            log(f"{self.name}: already ended before the kill; raise --epochs for this machine")
        self.proc.wait()
        deadline = time.time() + 10
        while time.time() < deadline and any(alive(p) for p in members):
            time.sleep(0.2)
        survivors = [p.pid for p in members if alive(p)]
        self.kills.append({"t_min": round((time.time() - t0) / 60, 2),
                           "last_streamed_step": last_step(self.jsonl),
                           "processes_killed": len(members), "survivors": survivors})
        self.phase += 1
        log(f"{self.name}: SIGKILL at {self.kills[-1]}")

    def keep_checkpoint(self, folder: Path, keep: int) -> None:
        """Copy the checkpoint when it changed (the last ``keep`` copies kept): a reference
        runs ahead, and its state at the soak run's last step is compared at the end. No
        torch here: the watcher stays light under a loaded machine."""
        try:
            mtime = self.checkpoint.stat().st_mtime_ns
        except OSError:
            return
        if mtime == getattr(self, "_kept", None):
            return
        self._kept = mtime
        folder.mkdir(exist_ok=True)
        shutil.copyfile(self.checkpoint, folder / f"{mtime}.pt")
        for old in sorted(folder.glob("*.pt"), key=lambda f: int(f.stem))[:-keep]:
            old.unlink()

    def phases(self) -> list[dict]:
        """Min and max RSS (MB) of each phase."""
        out = []
        for phase in sorted({s["phase"] for s in self.samples}):
            rss = [s["rss_mb"] for s in self.samples if s["phase"] == phase]
            out.append({"phase": phase, "samples": len(rss), "min_mb": min(rss),
                        "max_mb": max(rss), "last_mb": rss[-1]})
        return out


def alive(process: psutil.Process) -> bool:
    """Whether a process still runs (a zombie does not)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def last_step(jsonl: Path) -> int | None:
    """The last step the run streamed."""
    try:
        lines = jsonl.read_text().strip().splitlines()
        return json.loads(lines[-1])["step"] if lines else None
    except (OSError, ValueError, KeyError):
        return None


def checkpoint_step(path: Path) -> int | None:
    """The step a checkpoint file holds (None: none yet)."""
    from pipemare_lite.training.checkpoint import load_checkpoint

    try:
        return load_checkpoint(path)["step"]
    except (OSError, ValueError):
        return None


def streamed_losses(jsonl: Path) -> dict[int, float]:
    """Per step, the loss of the step's last streamed line (a resumed run repeats some)."""
    losses = {}
    for line in jsonl.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:  # a line cut by the kill
            continue
        losses[row["step"]] = row["loss"]
    return losses


def compare(ref_file: Path, soak_file: Path) -> dict:
    """Bitwise comparison of two checkpoints of the same step."""
    import torch

    from pipemare_lite.training.checkpoint import load_checkpoint, state_digest

    ref, soak = load_checkpoint(ref_file), load_checkpoint(soak_file)
    tensors = [0, 0]

    def walk(a, b):
        if isinstance(a, torch.Tensor):
            tensors[0] += 1
            tensors[1] += int(isinstance(b, torch.Tensor) and a.dtype == b.dtype
                              and a.shape == b.shape and torch.equal(a, b))
        elif isinstance(a, dict):
            for k in a:
                walk(a[k], b.get(k) if isinstance(b, dict) else None)
        elif isinstance(a, list):
            for i, v in enumerate(a):
                walk(v, b[i] if isinstance(b, list) and i < len(b) else None)

    # what training computes (weights, optimizer state, messages in flight, positions);
    # the random streams apart: 1F1B on an MLP draws no random numbers, so they decide
    # nothing here, and a fresh process's global streams start where the OS seeded them
    trained = {k: v for k, v in ref["executor"].items() if k != "rng"}
    resumed = {k: v for k, v in soak["executor"].items() if k != "rng"}
    walk(trained, resumed)
    return {
        "step": [ref["step"], soak["step"]],
        "training_state_equal": state_digest(trained) == state_digest(resumed),
        "tensors_equal": f"{tensors[1]}/{tensors[0]}",
        "losses_equal": ref["history"]["loss"] == soak["history"]["loss"],
        "losses_compared": len(ref["history"]["loss"]),
        "executor_rng_equal": state_digest(ref["executor"].get("rng"))
        == state_digest(soak["executor"].get("rng")),
        "global_rng_equal": state_digest(ref["rng"]) == state_digest(soak["rng"]),
    }


def finish_pair(ref: Run, soak: Run, folder: Path) -> dict:
    """Compare the two (stopped) runs at the latest step of which both kept a checkpoint
    copy (the copies are taken as the files change, so one run may have a step the other's
    copier missed), and their streamed losses up to it."""
    kept = {}
    for run in (ref, soak):
        run.keep_checkpoint(folder / f"{run.name}-kept", 10**6)
        kept[run.name] = {checkpoint_step(f): f for f in (folder / f"{run.name}-kept").glob("*.pt")}
    common = (set(kept[ref.name]) & set(kept[soak.name])) - {None}
    if not common:
        return {"step": [None, None], "error": "no step with a kept checkpoint of both runs"}
    target = max(common)
    match = kept[ref.name][target]
    result = compare(match, kept[soak.name][target])
    ref_losses, soak_losses = streamed_losses(ref.jsonl), streamed_losses(soak.jsonl)
    result["streamed_losses_equal"] = all(
        ref_losses.get(k) is not None and ref_losses.get(k) == soak_losses.get(k)
        for k in range(1, target + 1))
    log(f"{soak.name} vs {ref.name} at step {target}: {result}")
    return result


def main(argv=None) -> int:
    """Run the soak; write the summary; 0 when every comparison is bitwise equal."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0,
                        help="wall minutes before the references stop (default: 60)")
    parser.add_argument("--kill-at", default="20,40",
                        help="minutes at which the soak runs are SIGKILLed (default: 20,40)")
    parser.add_argument("--epochs", type=int, default=10000,
                        help="the length every run asks for (default: 10,000, 50,000 steps)")
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--sample-every", type=float, default=60.0, help="seconds")
    parser.add_argument("--op-timeout", type=float, default=1800.0,
                        help="the distributed runs' --op-timeout: on a loaded machine a "
                        "starved rank is not a hung one (default: 1800 s; the engine's 120 s "
                        "stopped both distributed runs of a first attempt)")
    parser.add_argument("--keep", type=int, default=40,
                        help="copies of each reference's checkpoint kept (default: 40)")
    parser.add_argument("--folder", default="/tmp/pipemare-soak")
    parser.add_argument("--out", default=None, help="summary JSON")
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    if folder.exists():
        shutil.rmtree(folder)
    kill_at = [float(m) * 60 for m in args.kill_at.split(",") if m]
    runs = {name: Run(name, name.split("-")[0], folder / name, args)
            for name in ("local-soak", "local-ref", "dist-soak", "dist-ref")}
    t0 = time.time()
    log(f"command: {' '.join(runs['local-soak'].command(False)[1:])}")
    for run in runs.values():
        run.start(t0)
    next_sample, kills_done = t0, 0
    failures, failed = [], set()
    while time.time() - t0 < args.minutes * 60:
        now = time.time()
        if now >= next_sample:
            for run in runs.values():
                run.sample(t0)
            next_sample += args.sample_every
            log("rss MB: " + ", ".join(f"{r.name} {r.samples[-1]['rss_mb']}" for r in
                                      runs.values() if r.samples))
        if kills_done < len(kill_at) and now - t0 >= kill_at[kills_done]:
            for mode in ("local", "dist"):
                if mode not in failed:
                    runs[f"{mode}-soak"].kill(t0)
                    runs[f"{mode}-soak"].start(t0, resume=True)
            kills_done += 1
        for mode in ("local", "dist"):
            if mode in failed:
                continue
            for name in (f"{mode}-ref", f"{mode}-soak"):  # compared at a step both kept
                runs[name].keep_checkpoint(folder / f"{name}-kept", args.keep)
            for run in (runs[f"{mode}-ref"], runs[f"{mode}-soak"]):
                if run.proc.poll() is not None and run.proc.returncode != 0:
                    failures.append(f"{run.name} exited {run.proc.returncode} at "
                                    f"{(time.time() - t0) / 60:.1f} min")
                    failed.add(mode)
                    log(f"{mode} pair stopped: {failures[-1]}")
        if len(failed) == 2:
            break
        time.sleep(1.0)
    for run in runs.values():  # all stop first: a comparison takes a while
        if run.proc.poll() is None:
            run.kill(t0)
    results = {}
    for mode in ("local", "dist"):
        if mode not in failed:
            results[mode] = finish_pair(runs[f"{mode}-ref"], runs[f"{mode}-soak"], folder)
    local, dist = streamed_losses(runs["local-ref"].jsonl), streamed_losses(runs["dist-ref"].jsonl)
    common = sorted(set(local) & set(dist))
    summary = {
        "command": "python benchmarks/soak.py " + " ".join(  # its own niceness: "nice"
            argv if argv is not None else sys.argv[1:]),
        "nice": os.nice(0),
        "train_command": " ".join(runs["local-soak"].command(False)[3:]),
        "wall_minutes": round((time.time() - t0) / 60, 2),
        "failures": failures,
        "runs": {name: {"starts_s": r.starts, "kills": r.kills, "rss_by_phase": r.phases(),
                        "rss_samples": r.samples} for name, r in runs.items()},
        "comparisons": results,
        "local_vs_dist_streamed_losses": {
            "steps": len(common), "equal": all(local[k] == dist[k] for k in common)},
    }
    text = json.dumps(summary, indent=1)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    log("summary: " + json.dumps({k: summary[k] for k in ("wall_minutes", "failures",
                                                        "comparisons")}))
    ok = not failures and len(results) == 2 and all(
        "error" not in r and r["step"][0] == r["step"][1] and r["training_state_equal"]
        and r["losses_equal"] and r["streamed_losses_equal"] for r in results.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
