"""Record T1 runs with the implementation before the lr_factor hook (LRRescheduling scheduler)."""
import json, subprocess, sys, torch
torch.set_num_threads(1)
from pipemare_lite.training.datasets import load
from pipemare_lite.training.models import mlp
from pipemare_lite.training.fit import fit
from pipemare_lite.training.checkpoint import *  # noqa
import pipemare_lite

CASES = {
    "pipemare_constant": dict(method="pipemare", lr=0.05),
    "pipemare_cosine_warmup": dict(method="pipemare", lr=0.05, lr_schedule="cosine", warmup=2,
                                   lr_warmup=3),
    "async_t1_step_adam": dict(method="async", t1=True, lr=0.01, optimizer="adam",
                                lr_schedule="step", lr_step_size=4, t1_anneal_updates=7),
    "pipemare_muon": dict(method="pipemare", lr=0.02, optimizer="muon"),
}
out = {"commit": subprocess.check_output(["git", "rev-parse", "HEAD"], text=True).strip(),
       "cases": {}}
for name, kw in CASES.items():
    h = fit(mlp(64, 16, 3, 10, seed=1), load("digits"), num_stages=3, num_microbatches=2,
            batch_size=64, epochs=1, progress=False, **kw)
    out["cases"][name] = {"kwargs": kw, "loss": [float(x).hex() for x in h.loss],
                          "stage_lr_by_group": [[[float(x).hex() for x in g] for g in s]
                                                for s in h.stage_lr_by_group]}
    print(name, len(h.loss), h.loss[-1], [s[0][:3] for s in h.stage_lr_by_group])
json.dump(out, open(sys.argv[1], "w"), indent=1)
