"""Record T1 runs as the implementation before the lr_factor hook computed them.

Run once at commit 74f6b13 (T1 as the ``LRRescheduling`` scheduler) to write the fixture
that ``tests/test_lr_factor_hook.py`` compares the hook-based T1 with, bitwise::

    .venv/bin/python tools/make_t1_fixture.py tests/fixtures/t1_before_lr_hook.json
"""

import json
import subprocess
import sys

import torch

from pipemare_lite import fit
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


def main(path: str) -> None:
    """Train every case and write their losses and learning rates as float hex."""
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
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
