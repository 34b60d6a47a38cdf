"""Record T1 runs as the implementation before the lr_factor hook computed them.

Run once at commit 74f6b13 (T1 as the ``LRRescheduling`` scheduler) to write the fixture
that ``tests/test_lr_factor_hook.py`` compares the hook-based T1 with, bitwise::

    .venv/bin/python tools/make_t1_fixture.py tests/fixtures/t1_before_lr_hook.json

The file stores the machine's fingerprint beside the floats (issue 42): the test compares
with them bitwise only where the kernel fingerprint matches (``tests/recorded_floats.py``).
At a commit older than the fingerprint code, run this script with ``PYTHONPATH`` on the old
tree and ``--fingerprint-from`` a newer checkout (how the stored file was re-recorded)::

    cd OLD && PYTHONPATH=$PWD python NEW/tools/make_t1_fixture.py out.json --fingerprint-from NEW
"""

import argparse
import json
import subprocess
import sys

import torch

try:
    from pipemare_lite import fit
except ImportError:  # commits before the front door exported it (74f6b13)
    from pipemare_lite.training.fit import fit
from pipemare_lite.training.datasets import load
from pipemare_lite.training.models import mlp

CASES = {
    "pipemare_constant": dict(method="pipemare", lr=0.05),
    "pipemare_cosine_warmup": dict(method="pipemare", lr=0.05, lr_schedule="cosine", warmup=2,
                                   lr_warmup=3),
    "async_t1_step_adam": dict(method="async", t1=True, lr=0.01, optimizer="adam",
                               lr_schedule="step", lr_step_size=4, t1_anneal_updates=7),
    "pipemare_muon": dict(method="pipemare", lr=0.02, optimizer="muon"),
}


def fingerprint(newer_checkout: str | None) -> dict:
    """This machine's fingerprint at one torch thread (from ``newer_checkout``'s package when
    the tree being recorded predates the fingerprint code)."""
    if newer_checkout:
        sys.path.insert(0, newer_checkout)
        for name in [m for m in sys.modules if m.startswith("pipemare_lite.experiments")]:
            del sys.modules[name]
    from pipemare_lite.experiments.record import machine_fingerprint

    return machine_fingerprint(1)


def main(path: str, newer_checkout: str | None = None) -> None:
    """Train every case and write their losses and learning rates as float hex, with this
    machine's fingerprint."""
    torch.set_num_threads(1)
    commit = subprocess.check_output(["git", "rev-parse", "HEAD"], text=True).strip()
    out = {"commit": commit, "cases": {}}
    for name, kwargs in CASES.items():
        history = fit(mlp(64, 16, 3, 10, seed=1), load("digits"), num_stages=3,
                      num_microbatches=2, batch_size=64, epochs=1, progress=False, **kwargs)
        out["cases"][name] = {
            "kwargs": kwargs,
            "loss": [float(x).hex() for x in history.loss],
            "stage_lr_by_group": [[[float(x).hex() for x in group] for group in stage]
                                  for stage in history.stage_lr_by_group],
        }
        print(name, len(history.loss), history.loss[-1])
    out["fingerprint"] = fingerprint(newer_checkout)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="the fixture file to write")
    parser.add_argument("--fingerprint-from", metavar="CHECKOUT",
                        help="a newer checkout whose package computes the fingerprint")
    args = parser.parse_args()
    main(args.path, args.fingerprint_from)
