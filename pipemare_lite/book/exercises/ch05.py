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
  memory model's count, which the executor's bytes match). It follows ex05_2, before the
  chapter derives PipeDream's delay: that the copies equal its worst case is to be found.

Each names the engine functions that compute its answer (``engine_answers``): an answer that
calls them is rejected (:mod:`~pipemare_lite.book.exercises.originality`). The chapter shows
them only after the exercise, except the staleness analysis, the chapter's measuring
instrument for versions (as the simulator is for time). ex05_1's answer is a pair of hooks,
used on each case by a harness (:mod:`~pipemare_lite.book.exercises.harness`).
"""

from __future__ import annotations

import math
import random

from pipemare_lite.book.exercises import references
from pipemare_lite.book.exercises.compare import compare_gradients, compare_int, compare_int_list
from pipemare_lite.book.exercises.exercise import Exercise, Mistake
from pipemare_lite.book.exercises.harness import HOOK_MODELS, HOOK_SEED

_STALENESS = "pipemare_lite.analysis.staleness."
#: The staleness analysis: it reads the versions every F and B used, off a schedule or off an
#: executed run. The chapter measures with it before ex05_2 and ex05_3 (as it measures time
#: with the simulator), so it may appear there, but an answer that calls it is rejected.
_VERSION_READERS = tuple(_STALENESS + name for name in (
    "weight_versions", "versions_from_trace", "VersionTable", "stage_delays"))
#: The engine's closed forms of the delay, shown right after ex05_2 and ex05_3.
_DELAY_FORMS = (_STALENESS + "exact_forward_delay", _STALENESS + "expected_forward_delay")
# Not listed: the schedule builders (build_schedule and the async, pipedream and 2bw builders
# behind it), used from the chapter's first cell on. Reading a schedule's action order is a
# way to derive a delay or a stash count, not the answer itself; and microbatch_path, which
# needs a versions table that only the readers above make.


# --------------------------------------------------------------------------- ex05_1


def _hook_case_text(case: dict) -> str:
    return (f"version_hooks on a {case['model']} stage whose backward must read "
            f"{'the stashed copy' if case['backward_reads'] == 'stash' else 'the live weights'}"
            + ("" if case["seed"] == HOOK_SEED else f" (a stage drawn with seed {case['seed']})"))


def _hook_cases(seed: int) -> list[dict]:
    # every model both ways on the chapter's stage, then two stages drawn from ``seed`` (new
    # weights, inputs and update; the grader redraws them from its secret, so the weights a
    # backward should read cannot be tabled from check()'s cases), each both ways
    fixed = [(model, reads, HOOK_SEED) for model in HOOK_MODELS for reads in ("stash", "live")]
    rng = random.Random(seed)
    drawn = []
    for _ in range(2):
        model, stage_seed = rng.choice(HOOK_MODELS), rng.randrange(1, 2**31)
        drawn += [(model, "stash", stage_seed), (model, "live", stage_seed)]
    return [{"model": model, "backward_reads": reads, "seed": stage_seed}
            for model, reads, stage_seed in fixed + drawn]


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


def _recalled_worst_case(P, N, stage, position):
    """Known mistake: the recalled ceil((2(P-i)+1)/N), i = stage + 1, whatever the position."""
    return math.ceil((2 * (P - stage) - 1) / N)


def _recalled_with_stage_from_1(P, N, stage, position):
    """Known mistake: the recalled form with the 0-indexed stage put in for the 1-indexed i."""
    return math.ceil((2 * (P - stage) + 1) / N)


def _position_form_with_stage_from_1(P, N, stage, position):
    """Known mistake: the position's form ceil((2(P-i)+1-j)/N) with the 0-indexed stage put in
    for the 1-indexed i (one slot too many: i = stage + 1 gives 2(P-stage)-1-j)."""
    return math.ceil((2 * (P - stage) + 1 - position) / N)


# --------------------------------------------------------------------------- ex05_3


def _stash_cases(seed: int) -> list[dict]:
    fixed = [(4, 4), (4, 1), (4, 2), (5, 2), (8, 3), (1, 1), (2, 5)]
    rng = random.Random(seed)
    drawn = [(rng.randint(2, 8), rng.randint(1, 6)) for _ in range(3)]
    return [{"P": P, "N": N} for P, N in fixed + drawn]


def _long_run_minibatches(P: int, N: int) -> int:
    """Enough minibatches for every stage to reach its steady state and stay there."""
    return math.ceil(2 * P / N) + 2


def _parameters_but_not_views(params, weights):
    """Known mistake: pack recognizes a parameter itself, not a view of one (weight.t())."""
    index = {id(p): i for i, p in enumerate(params)}

    def pack(t):
        return ("param", index[id(t)]) if id(t) in index else t

    def unpack(packed):
        return weights[packed[1]] if isinstance(packed, tuple) else packed

    return pack, unpack


def _saved_unchanged(params, weights):
    """Known mistake: hooks that hand back what the forward saved (the live parameters)."""
    return (lambda t: t), (lambda t: t)


EXERCISES = [
    Exercise(
        id="ex05_1",
        chapter=5,
        title="Hand a pending backward the weight version you choose",
        function_name="version_hooks",
        signature="version_hooks(params, weights) -> (pack, unpack)",
        hint=(
            "Autograd asks your pack for every tensor it saves in the forward and gives the "
            "result back to unpack in the backward: which of the saved tensors are weights, and "
            "how will you recognize one (a view of a weight counts too)?",
            "pack(t) runs in the forward for every tensor autograd saves: when t is one of "
            "params, or a view of one (t._base is that parameter), return a small marker "
            "(which parameter, and t.size(), t.stride(), t.storage_offset()) instead of t; "
            "return activations unchanged. unpack(marker) runs in the backward: rebuild the "
            "tensor from weights[i], with as_strided for a view. Compare parameters with "
            "`is` or id(), never with ==.",
            "The whole method, step by step: map id(p) of each parameter to its index. pack(t): "
            "if t is a parameter, or t._base is one, return a tuple marking it (its index, and "
            "for a view its size, stride and storage offset); anything else comes back unchanged. "
            "unpack(packed): a marker becomes weights[index], or weights[index].as_strided(size, "
            "stride, offset) for a view; anything else comes back unchanged. Return the pair "
            "(pack, unpack).",
        ),
        cases=lambda: _hook_cases(505),
        reference=lambda model, backward_reads, seed: references.stage_worker_gradients(
            model, backward_reads, seed),
        compare=compare_gradients,
        needs_torch=True,
        # the engine's hooks and the worker that runs them, shown right after the exercise.
        # Not the LocalExecutor, which the earlier chapters already ran: it hands out no hooks,
        # and a call of the worker's hooks through it is caught while the answer runs
        engine_answers=(
            "pipemare_lite.methods.versions.param_ref",
            "pipemare_lite.methods.versions.ParamRef",
            "pipemare_lite.methods.versions.WeightVersions",
            "pipemare_lite.engine.stage.StageWorker",
            "pipemare_lite.engine.stage.StageWorker._packer",
            "pipemare_lite.engine.stage.StageWorker._unpacker",
            "pipemare_lite.engine.build_worker.build_stage_worker",
        ),
        harness="pipemare_lite.book.exercises.harness.gradients_with_hooks",
        case_text=_hook_case_text,
        mistakes=(
            Mistake("your pack recognizes a parameter but not a view of one: Linear saves its "
                    "weight transposed (a view whose ._base is the parameter), so there the "
                    "backward still reads the live weight", _parameters_but_not_views),
            Mistake("your hooks hand the backward what the forward saved, the live "
                    "parameters: right only when weights are the live ones; nothing reads "
                    "weights[i]", _saved_unchanged),
        ),
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
            "ceil((2(P-i)+1)/N), its stages i counted from 1 (i = s + 1), is only the worst "
            "case.",
            "The whole method: take a microbatch m = k N + position deep in the run (k large, so "
            "the warm-up is over). Its forward on stage s runs at tick m + s. Update j runs in "
            "the tick of the backward of microbatch (j + 1) N - 1, at tick (j + 1) N - 1 + 2P - 1 "
            "- s; it comes before the forward when that tick is strictly earlier (inside one tick "
            "F runs before B and U). Count those updates j < k: that is the version the forward "
            "read; the delay is k minus that count.",
        ),
        cases=lambda: _delay_cases(501),
        reference=lambda P, N, stage, position: references.measured_forward_delay(
            "async", P, N, stage, position),
        compare=compare_int,
        mistakes=(
            Mistake("this is the recalled ceil((2(P-i)+1)/N), which ignores the position: it "
                    "holds for the first microbatch of a minibatch; a microbatch later in its "
                    "minibatch runs its forward later, after more updates, so its delay can be "
                    "smaller", _recalled_worst_case),
            Mistake("this is the recalled form with the 0-indexed stage put in for i; the "
                    "recalled form counts stages from 1 (i = stage + 1), and even then it "
                    "ignores the position in the minibatch", _recalled_with_stage_from_1),
            Mistake("this takes the position into account, but puts the 0-indexed stage in for "
                    "i in ceil((2(P-i)+1-j)/N): that form counts stages from 1 (i = stage + 1), "
                    "so this counts two slots too many",
                    _position_form_with_stage_from_1),
        ),
        engine_answers=_VERSION_READERS + _DELAY_FORMS,
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
            "microbatches?",
            "The whole method: on stage s under 1F1B without flush the oldest microbatch still "
            "waiting for its backward is P - 1 - s microbatches older than the newest forward. "
            "With one update every N microbatches those microbatches span that many microbatches "
            "divided by N, rounded up, updates: that is how many versions other than the current "
            "one must be kept. One number per stage, stage 0 (the stalest) first; the last stage "
            "keeps none.",
        ),
        cases=lambda: _stash_cases(503),
        reference=lambda P, N: references.peak_stash_copies_measured(
            P, N, _long_run_minibatches(P, N)),
        compare=compare_int_list,
        # The memory model (memory_by_kind) is the book's memory instrument from the start:
        # it may appear before, but an answer that calls it is rejected. The exercise comes
        # right after ex05_2, before the delay's closed forms are shown (they follow it, and
        # the section Memory then reveals that the copies equal PipeDream's worst-case
        # delay): an answer that calls them is rejected too.
        engine_answers=_VERSION_READERS + _DELAY_FORMS + (
            "pipemare_lite.analysis.memory.peak_stash_copies",
            "pipemare_lite.analysis.memory.memory_by_kind"),
    ),
]
