"""Exercises of chapter 05, going asynchronous: PipeDream, 2BW and weight staleness.

- ``ex05_1`` ``version_hooks(params, weights) -> (pack, unpack)``: saved-tensor hooks that
  make a pending backward use ``weights`` (one tensor per parameter: a stashed copy, or the
  live parameters) wherever it would use a parameter. The check runs a stage's forward under
  the hooks, changes the parameters in place (an update arrives), runs the backward and
  compares the input and weight gradients with the engine's :class:`StageWorker` in weight
  mode ``stash`` (weights = the copy taken at F) or ``async`` (weights = the live ones).
  Needs torch.
- ``ex05_2`` ``async_forward_delay(P, N, stage, position) -> int``: in the engine's lock-step
  asynchronous pipeline (F, then B, then U in a tick), the steady-state forward delay in
  updates of 0-indexed ``stage`` for the microbatch at ``position`` (0..N-1) in its
  minibatch, measured from the schedule's weight versions.
- ``ex05_3`` ``pipedream_stash_copies(P, N) -> list[int]``: per stage, the most stashed weight
  copies PipeDream holds at one moment in a long run with N microbatches per update (the
  memory model's count, which the executor's bytes match).

Each lists the engine functions that compute its answer (``engine_answers``): an answer that
calls them fails, the chapter shows them only after the exercise.
"""

from __future__ import annotations

import math
import random

from pipemare_lite.exercises import references
from pipemare_lite.exercises.compare import compare_int, compare_int_list
from pipemare_lite.exercises.exercise import Exercise

#: Engine functions that measure or state weight versions and delays.
_STALENESS_ANSWERS = (
    "weight_versions", "versions_from_trace", "stage_delays", "microbatch_path",
    "exact_forward_delay", "expected_forward_delay", "VersionTable",
)
#: Engine functions that build the schedules whose delays and stashes are asked for.
_BUILDERS = ("build_schedule", "async_pipeline", "async_order", "pipedream", "two_bw",
             "no_flush_order", "build_method_schedule")


# --------------------------------------------------------------------------- ex05_1


#: The stage modules ex05_1 is checked on: what each saves for its backward differs (Linear
#: saves a transposed view of its weight; Conv2d and LayerNorm the parameter itself).
HOOK_MODELS = ("linear", "mlp", "linear+layernorm", "conv")


def _hook_case_text(case: dict) -> str:
    return (f"version_hooks on a {case['model']} stage whose backward must read "
            f"{'the stashed copy' if case['backward_reads'] == 'stash' else 'the live weights'}")


def _hook_cases() -> list[dict]:
    return [{"model": model, "backward_reads": reads}
            for model in HOOK_MODELS for reads in ("stash", "live")]


def _hook_compare(answer, expected) -> str | None:
    return references.compare_gradients(answer, expected)


# --------------------------------------------------------------------------- ex05_2


def _delay_cases(seed: int) -> list[dict]:
    # representative first (P=4, N=4 as in the chapter), then the edges: the last stage,
    # per-microbatch updates, a single stage, N larger than the F-to-B gap
    fixed = [(4, 4, 0, 0), (4, 4, 0, 3), (4, 2, 1, 1), (4, 1, 0, 0), (4, 4, 3, 0),
             (6, 4, 2, 1), (3, 5, 0, 4), (1, 1, 0, 0), (2, 3, 1, 2)]
    rng = random.Random(seed)
    drawn = []
    for _ in range(4):
        P, N = rng.randint(2, 7), rng.randint(1, 6)
        drawn.append((P, N, rng.randrange(P), rng.randrange(N)))
    return [{"P": P, "N": N, "stage": s, "position": j} for P, N, s, j in fixed + drawn]


# --------------------------------------------------------------------------- ex05_3


def _stash_cases(seed: int) -> list[dict]:
    fixed = [(4, 4), (4, 1), (4, 2), (5, 2), (8, 3), (1, 1), (2, 5)]
    rng = random.Random(seed)
    drawn = [(rng.randint(2, 8), rng.randint(1, 6)) for _ in range(3)]
    return [{"P": P, "N": N} for P, N in fixed + drawn]


def _long_run_minibatches(P: int, N: int) -> int:
    """Enough minibatches for every stage to reach its steady state and stay there."""
    return math.ceil(2 * P / N) + 2


EXERCISES = [
    Exercise(
        id="ex05_1",
        chapter=5,
        title="Hand a pending backward the weight version you choose",
        function_name="version_hooks",
        signature="version_hooks(params, weights) -> (pack, unpack)",
        hint=(
            "pack(t) runs in the forward for every tensor autograd saves: when t is one of "
            "params, or a view of one (t._base is that parameter), return a small marker "
            "(which parameter, and t.size(), t.stride(), t.storage_offset()) instead of t; "
            "return activations unchanged. unpack(marker) runs in the backward: rebuild the "
            "tensor from weights[i], with as_strided for a view. Compare parameters with "
            "`is` or id(), never with ==."
        ),
        cases=_hook_cases,
        reference=lambda model, backward_reads: references.stage_worker_gradients(
            model, backward_reads),
        compare=_hook_compare,
        needs_torch=True,
        engine_answers=("param_ref", "ParamRef", "StageWorker", "WeightVersions",
                        "build_stage_worker", "LocalExecutor"),
        call=lambda answer, case: references.gradients_with_hooks(
            answer, case["model"], case["backward_reads"]),
        case_text=_hook_case_text,
    ),
    Exercise(
        id="ex05_2",
        chapter=5,
        title="The forward delay of stage s in the lock-step asynchronous pipeline",
        function_name="async_forward_delay",
        signature="async_forward_delay(P, N, stage, position) -> int",
        hint=(
            "Microbatch m = kN + position: F(m) runs on stage s at tick m + s, B(m) at tick "
            "m + 2P - 1 - s, and the update of minibatch k follows B(kN + N - 1) in its tick "
            "(F, then B, then U). Its gradient is applied to version k; the forward saw as "
            "many versions as updates came before it. The position matters: the recalled "
            "ceil((2(P-i)+1)/N) is only the worst case."
        ),
        cases=lambda: _delay_cases(501),
        reference=lambda P, N, stage, position: references.measured_forward_delay(
            "async", P, N, stage, position),
        compare=compare_int,
        engine_answers=_STALENESS_ANSWERS + _BUILDERS,
    ),
    Exercise(
        id="ex05_3",
        chapter=5,
        title="PipeDream's stashed weight copies per stage",
        function_name="pipedream_stash_copies",
        signature="pipedream_stash_copies(P, N) -> list[int]",
        hint=(
            "A copy is kept for every version other than the current one that some "
            "microbatch between its F and its B still reads. Stage s has P - s microbatches "
            "in flight right after a forward (1F1B's warm-up of P-1-s, plus one): how many "
            "updates apart are the oldest and the newest of them, with one update every N "
            "microbatches?"
        ),
        cases=lambda: _stash_cases(503),
        reference=lambda P, N: references.peak_stash_copies_measured(
            P, N, _long_run_minibatches(P, N)),
        compare=compare_int_list,
        engine_answers=_STALENESS_ANSWERS + _BUILDERS + (
            "peak_stash_copies", "memory_by_kind", "MemoryProfile"),
    ),
]
