"""Exercises of chapter 10, the trade-off table.

- ``ex10_1`` ``weight_memory_by_kind(method, param_bytes, num_microbatches, optimizer) ->
  dict``: the weight-sized memory of a method in a long run, summed over the stages:
  ``{"weights", "stash", "t2_buffer", "optimizer"}`` in bytes, for ``1f1b``, ``pipedream``,
  ``2bw``, ``async`` and ``pipemare`` (T2 on), one entry of ``param_bytes`` per stage (fp32).
- ``ex10_2`` ``pick_for_budget(rows, budget_bytes) -> str | None``: from a trade-off table
  (rows ``{"method", "device_peak", "utilization"}``, utilization None where the method
  cannot run), the method with the highest utilization whose device peak fits the budget;
  ties to the smaller peak, then the earlier row; None when nothing fits.

ex10_1 comes before the executor's bytes are printed (the student predicts, for the chapter's
network, which of PipeDream and PipeMare keeps more, then writes the function; the measurement
follows). Both come before the engine's versions
(:func:`pipemare_lite.experiments.paper_arithmetic.weight_memory`,
:func:`pipemare_lite.methods.tradeoff.pick_method`), which their ``engine_answers`` name; the
memory
model (:func:`pipemare_lite.analysis.memory.memory_by_kind`) is an instrument the chapter uses
before
and may be used. Torch-free.
"""

from __future__ import annotations

import math
import random

from pipemare_lite.book.exercises import references
from pipemare_lite.book.exercises.compare import compare_bytes_by_kind, compare_name_or_none
from pipemare_lite.book.exercises.exercise import Exercise, Mistake

_WEIGHT_ANSWERS = ("pipemare_lite.experiments.paper_arithmetic.weight_memory",
                   "pipemare_lite.experiments.paper_arithmetic.pipedream_stash_closed_form",
                   "pipemare_lite.experiments.paper_arithmetic.weight_memory_ratio",
                   "pipemare_lite.methods.tradeoff.tradeoff_row",
                   "pipemare_lite.methods.tradeoff.tradeoff_table")
_PICK_ANSWERS = ("pipemare_lite.methods.tradeoff.pick_method",)
_STATES = {"sgd": 0, "momentum": 1, "adam": 2}


def _by_kind(method, param_bytes, N, optimizer, stash_of, t2=True):
    total = sum(param_bytes)
    return {"weights": total, "stash": stash_of(method, param_bytes, N),
            "t2_buffer": total if (method == "pipemare" and t2) else 0,
            "optimizer": _STATES[optimizer] * total}


def _stash_per_update(method, param_bytes, N):
    P = len(param_bytes)
    if method == "pipedream":
        return sum(math.ceil((P - 1 - s) / N) * b for s, b in enumerate(param_bytes))
    return sum(param_bytes) if method == "2bw" else 0


def _stash_per_microbatch(method, param_bytes, N):
    """Known mistake: PipeDream's stash as one copy per in-flight microbatch but the newest."""
    P = len(param_bytes)
    if method == "pipedream":
        return sum((P - 1 - s) * b for s, b in enumerate(param_bytes))
    return _stash_per_update(method, param_bytes, N)


def _stash_2bw_not_last(method, param_bytes, N):
    """Known mistake: 2BW's copy left off the last stage (its backward follows its forward)."""
    if method == "2bw":
        return sum(param_bytes[:-1])
    return _stash_per_update(method, param_bytes, N)


def _2bw_not_last(method, param_bytes, N, optimizer):
    return _by_kind(method, param_bytes, N, optimizer, _stash_2bw_not_last)


def _no_t2(method, param_bytes, N, optimizer):
    return _by_kind(method, param_bytes, N, optimizer, _stash_per_update, t2=False)


def _per_microbatch(method, param_bytes, N, optimizer):
    return _by_kind(method, param_bytes, N, optimizer, _stash_per_microbatch)


def _equal_stages(method, param_bytes, N, optimizer):
    """Known mistake: every stage stashes as if it held the average stage's weights."""
    P, mean = len(param_bytes), sum(param_bytes) // len(param_bytes)
    return _by_kind(method, [mean] * P, N, optimizer, _stash_per_update)


def _weight_cases() -> list[dict]:
    # first: the chapter's network (its four stages' bytes, the first stage the largest, as
    # the chapter measures them; the exercise asks for a prediction on it), then a profile
    # whose weights sit in the last stages (ResNet-like), N = 1 per-microbatch updates, 2BW
    # at N = P - 1, adam, plain sgd, and seeded random profiles
    mini = [4 * 2080, 4 * 1056, 4 * 1056, 4 * 330]
    resnet_like = [4 * n for n in (9_536, 75_008, 280_064, 1_219_584, 7_098_368, 2_052_000)]
    fixed = [("pipedream", mini, 4, "momentum"), ("pipemare", mini, 4, "momentum"),
             ("2bw", mini, 4, "momentum"), ("async", mini, 4, "momentum"),
             ("1f1b", mini, 4, "momentum"), ("pipedream", resnet_like, 1, "momentum"),
             ("pipedream", resnet_like, 2, "adam"), ("2bw", resnet_like, 5, "adam"),
             ("pipemare", resnet_like, 3, "sgd"), ("pipedream", [400, 800], 1, "sgd")]
    rng = random.Random(1001)
    drawn = []
    for method in ("pipedream", "pipedream", "pipemare", "2bw"):
        P = rng.randint(2, 7)
        N = rng.randint(P - 1, P + 2) if method == "2bw" else rng.randint(1, 5)
        drawn.append((method, [4 * rng.randint(10, 5000) for _ in range(P)], N,
                      rng.choice(("sgd", "momentum", "adam"))))
    return [{"method": m, "param_bytes": b, "num_microbatches": n, "optimizer": o}
            for m, b, n, o in fixed + drawn]


def _pick_by_memory(rows, budget_bytes):
    """Known mistake: the smallest device peak that fits, whatever its utilization."""
    fitting = [r for r in rows if r["utilization"] is not None and r["device_peak"] <= budget_bytes]
    return min(fitting, key=lambda r: r["device_peak"])["method"] if fitting else None


def _pick_ignoring_budget(rows, budget_bytes):
    """Known mistake: the highest utilization, whether it fits or not."""
    runnable = [r for r in rows if r["utilization"] is not None]
    return max(runnable, key=lambda r: r["utilization"])["method"] if runnable else None


def _fastest(rows):
    """The method of the highest utilization among ``rows``, on a tie the smaller device
    peak, then the earlier row (the right answer's order); None for no rows."""
    best = None
    for r in rows:
        if best is None or (r["utilization"], -r["device_peak"]) > (best["utilization"],
                                                                    -best["device_peak"]):
            best = r
    return None if best is None else best["method"]


def _pick_strictly_below(rows, budget_bytes):
    """Known mistake: a device peak equal to the budget counted as not fitting."""
    return _fastest([r for r in rows
                     if r["utilization"] is not None and r["device_peak"] < budget_bytes])


def _pick_cannot_run_as_zero(rows, budget_bytes):
    """Known mistake: a row that cannot run (utilization None) kept as a candidate, as if
    it ran at utilization 0 (or ranked below every method that runs)."""
    return _fastest([{**r, "utilization": r["utilization"] or 0} for r in rows
                     if r["device_peak"] <= budget_bytes])


def _pick_case_text(case: dict) -> str:
    """A case as a table, one row per line: a repr of the rows was cut off after the second
    row, hiding the one that decides the answer (a fresh student's report)."""
    rows = case["rows"]
    width = max(len("method"), *(len(str(r["method"])) for r in rows))
    lines = [f"      {'method':<{width}}  device_peak  utilization"]
    lines += [f"      {str(r['method']):<{width}}  {r['device_peak']!s:>11}  "
              f"{r['utilization']!s:>11}" for r in rows]
    return (f"pick_for_budget(rows, budget_bytes={case['budget_bytes']}), with rows\n"
            + "\n".join(lines) + "\n  ")


def _table(peaks_and_utilizations):
    return [{"method": m, "device_peak": d, "utilization": u}
            for m, d, u in peaks_and_utilizations]


def _pick_cases() -> list[dict]:
    # a table shaped like the chapter's (flushed methods slow and small, unflushed ones
    # fast; async and PipeMare tie on utilization), at budgets that pick each kind of answer,
    # a budget equal to a peak, nothing fitting, a method that cannot run; then random ones
    table = _table([("gpipe", 1500, 0.571), ("1f1b", 1500, 0.571), ("zb-h1", 1500, 0.8),
                    ("pipedream", 1560, 1.0), ("2bw", 1600, 1.0), ("async", 2900, 1.0),
                    ("pipemare", 3000, 1.0)])
    not_run = _table([("1f1b", 400, 0.21), ("pipedream", 1570, 1.0), ("2bw", 0, None),
                      ("async", 3100, 1.0)])
    cases = [(table, 1550), (table, 1500), (table, 1499), (table, 10_000), (table, 1580),
             (not_run, 500), (not_run, 100), (not_run, 4000)]
    rng = random.Random(1002)
    for _ in range(4):
        names = rng.sample(["gpipe", "1f1b", "zb-h1", "pipedream", "2bw", "async", "pipemare"], 5)
        rows = _table([(n, rng.randint(100, 5000), rng.choice([0.25, 0.5, 0.8, 1.0, None]))
                       for n in names])
        cases.append((rows, rng.randint(100, 5000)))
    return [{"rows": rows, "budget_bytes": budget} for rows, budget in cases]


EXERCISES = [
    Exercise(
        id="ex10_1",
        chapter=10,
        title="A method's weight-sized memory, by kind, for a layer profile",
        function_name="weight_memory_by_kind",
        signature="weight_memory_by_kind(method, param_bytes, num_microbatches, optimizer) -> dict",
        hint=(
            "Every method keeps one copy of the weights and optimizer state of 0 (sgd), 1 "
            "(momentum) or 2 (adam) weight-sized buffers. PipeDream's stage s keeps as many "
            "old copies as its forward delay in updates (chapter 05), weighted by that stage's "
            "bytes; 2BW keeps one previous version per stage; async none; PipeMare's T2 one "
            "weight-sized delta per stage. Sum over the stages.",
            "The whole method: W is the sum of param_bytes. weights is W for every method; "
            "optimizer is 0, 1 or 2 times W for sgd, momentum, adam. stash: for pipedream, the "
            "sum over stages s of (P - 1 - s) / N rounded up times that stage's bytes; for 2bw, "
            "W; otherwise 0. t2_buffer: W for pipemare, otherwise 0. Return the dict of those "
            "four entries.",
        ),
        cases=_weight_cases,
        reference=references.weight_memory_by_kind,
        compare=compare_bytes_by_kind,
        mistakes=(
            Mistake("this stashes one copy per in-flight microbatch (P - 1 - s): with N "
                    "microbatches per update, several microbatches share a version",
                    _per_microbatch),
            Mistake("this forgets PipeMare's T2 buffer (one weight-sized delta per stage)",
                    _no_t2),
            Mistake("this treats every stage as the average stage: the stash depends on WHERE "
                    "the weights sit", _equal_stages),
            Mistake("this leaves 2BW's previous version off the last stage: 2BW keeps its two "
                    "versions on every stage, the last included (chapter 05)", _2bw_not_last),
        ),
        engine_answers=_WEIGHT_ANSWERS,
    ),
    Exercise(
        id="ex10_2",
        chapter=10,
        title="Pick the method for a memory budget",
        function_name="pick_for_budget",
        signature="pick_for_budget(rows, budget_bytes) -> str | None",
        hint=(
            "Two filters first (can it run? does it fit?), then one choice among what is left: "
            "what decides it, and what breaks a tie?",
            "Keep the rows whose method can run (utilization is not None) and whose "
            "device_peak is at most the budget; among them take the highest utilization, on "
            "a tie the smaller device_peak, then the earlier row. None if nothing is left.",
            "The whole method: go through the rows in order and keep those whose utilization is "
            "not None and whose device_peak is at most the budget. If none is kept, return None. "
            "Otherwise return the method of the kept row with the highest utilization; between "
            "equal utilizations, the one with the smaller device_peak; between those, the "
            "earliest row.",
        ),
        cases=_pick_cases,
        reference=references.method_for_budget,
        compare=compare_name_or_none,
        mistakes=(
            Mistake("this picks the smallest memory that fits; the budget is a limit, not "
                    "the goal: within it, take the fastest", _pick_by_memory),
            Mistake("this picks the fastest method whether it fits or not", _pick_ignoring_budget),
            Mistake("this refuses a method whose peak equals the budget exactly",
                    _pick_strictly_below),
            Mistake("this keeps a row whose utilization is missing as a candidate, as if its "
                    "method ran at utilization 0; such a method cannot run in this setting at "
                    "all: leave it out before choosing, even when nothing else fits the budget",
                    _pick_cannot_run_as_zero),
        ),
        case_text=_pick_case_text,
        engine_answers=_PICK_ANSWERS,
    ),
]
