"""The local executor's own cost per action, without the stages' compute (issue 11).

Each stage worker is replaced by a stub that keeps the bookkeeping the executor reads
(pending, versions, records, bytes) and does no compute, so the time per action is the
executor's own: loop, readiness, the interpreter's dispatch, hand-over, trace, versions,
bytes meter (goal <= 20 us). Prints numbers, asserts nothing.

Run: ``.venv/bin/python benchmarks/bench_executor_overhead.py [OTHER_TREE]``; with
OTHER_TREE (a checkout of another commit, e.g. from ``git archive REV pipemare_lite``), it
alternates the two trees, one fresh process each, 7 times (a shared CPU is noisy).
"""

import json
import os
import statistics
import subprocess
import sys

CODE = r'''
import json
import time

import torch
from torch import nn

from pipemare_lite.engine import LocalExecutor
from pipemare_lite.engine.stage import StageRecords
from pipemare_lite.training.models import mlp
from pipemare_lite.training.partition import partition
from pipemare_lite.schedules import build_schedule

torch.set_num_threads(1)


class Version:
    version = 0


class Record:
    input_grad_done = False


class Stub:
    def __init__(self, s, last):
        self.device, self.stage, self.is_last = torch.device("cpu"), s, s == last
        self.pending, self.versions, self.params = {}, Version(), []
        self.out = torch.zeros(1)
        self._fresh()

    def _fresh(self):
        self.records = StageRecords()
        self.forward_versions = self.records.forward_versions
        self.backward_versions = self.records.backward_versions

    def forward(self, m, x, target=None):
        self.pending[m] = Record()
        self.forward_versions[m] = self.versions.version
        return self.out

    def backward(self, m, grad=None):
        del self.pending[m]
        self.backward_versions[m] = self.versions.version
        self.records.distances[m] = 0
        return self.out

    def update(self):
        self.versions.version += 1

    def bytes_held(self):
        return dict.fromkeys(("weights", "stash", "t2_buffer", "optimizer", "activations"), 0)

    def take_records(self):
        taken = self.records
        self._fresh()
        return taken


P, N, K = 4, 8, 50
schedule = build_schedule("1f1b", P, N, num_minibatches=K)
actions = sum(len(row) for row in schedule.ranks)
feed = [(torch.zeros(1), torch.zeros(1))] * (N * K)
best = float("inf")
for _ in range(15):
    executor = LocalExecutor(schedule, partition(mlp(4, 4, P, 2, seed=0), P),
                             loss_fn=nn.functional.cross_entropy,
                             optimizer_factory=lambda ps: torch.optim.SGD(ps, lr=0.01))
    for s in range(P):
        executor.workers[s] = Stub(s, P - 1)  # in place: the executor's parts share the list
    start = time.perf_counter()
    executor.run(feed)
    best = min(best, (time.perf_counter() - start) / actions)
print(json.dumps(best))
'''


def main() -> None:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"this tree": here}
    if len(sys.argv) > 1:
        trees["other tree"] = os.path.abspath(sys.argv[1])
    seconds = {name: [] for name in trees}
    for _ in range(7):
        for name, path in trees.items():
            env = dict(os.environ, PYTHONPATH=path)
            run = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True,
                                 text=True, check=True)
            seconds[name].append(json.loads(run.stdout))
    print("local executor, sync 1F1B, P=4, N=8, K=50, stub workers (no compute)")
    for name, values in seconds.items():
        runs = ", ".join(f"{v * 1e6:.2f}" for v in values)
        print(f"  {name:<10}: {statistics.median(values) * 1e6:6.2f} us per action, median "
              f"(runs: {runs})")


if __name__ == "__main__":
    main()
