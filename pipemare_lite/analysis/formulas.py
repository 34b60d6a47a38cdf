"""Closed forms for pipeline schedules, each derived in its docstring (chapters 01-05, 10).

Every formula here is checked against the simulator (:mod:`pipemare_lite.analysis.simulate`) over a
grid of sizes and costs in ``tests/test_formulas.py``; where they agree, a chapter may put the
formula next to the measured number. Notation: P stages, M microbatches per minibatch (N in
PipeMare's notation), v chunks per rank, F/B the cost of one forward/backward of one
microbatch on one stage (I and W the two halves of a split backward). Two conventions for
the bubble (see :func:`idle_fraction_gpipe` and :func:`bubble_ratio_gpipe`):

- idle fraction  = idle time / (P * makespan)      (GPipe: (P-1)/(M+P-1))
- bubble ratio   = idle time / busy time            (GPipe: (P-1)/M)

Torch-free.
"""

from __future__ import annotations

import math
from fractions import Fraction


def _check(**sizes) -> None:
    """Every size an integer >= 1 (a stage index ``s``: 0..P-1)."""
    for name, value in sizes.items():
        low = 0 if name == "s" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}={value!r}: allowed: an integer >= {low}")
    if "s" in sizes and sizes["s"] >= sizes["P"]:
        raise ValueError(f"s={sizes['s']}: allowed: 0..{sizes['P'] - 1}")


def idle_fraction_naive(P: int) -> float:
    """Naive model parallelism (chapter 01): one microbatch in flight, so one rank works at a
    time. Each rank is busy M(F+B) out of a makespan P*M(F+B): idle fraction (P-1)/P."""
    _check(P=P)
    return (P - 1) / P


def makespan_gpipe(P: int, M: int, forward: float = 1.0, backward: float = 2.0, comm: float = 0.0):
    """GPipe (chapter 02): (M+P-1)(F+B) + 2(P-1)c.

    Derivation: the last forward leaves stage 0 at M*F and needs P-1 more stage-hops (each
    F + c) to reach the last stage, which then turns it around; the backwards mirror this:
    M*B on the last stage plus P-1 hops (each B + c) back to stage 0. Total
    M*F + (P-1)(F+c) + M*B + (P-1)(B+c). 1F1B with c = 0 has the same makespan (it only
    reorders the work inside the same fill and drain).
    """
    _check(P=P, M=M)
    return (M + P - 1) * (forward + backward) + 2 * (P - 1) * comm


def idle_fraction_gpipe(P: int, M: int) -> float:
    """GPipe and 1F1B (chapters 02-03): (P-1)/(M+P-1) of all device time is idle.

    Derivation: each rank is busy M(F+B) out of a makespan (M+P-1)(F+B)
    (:func:`makespan_gpipe` with c = 0), so the idle share is (P-1)/(M+P-1), whatever F and B.
    """
    _check(P=P, M=M)
    return (P - 1) / (M + P - 1)


#: 1F1B has GPipe's makespan and bubble (chapter 03): it changes memory, not time.
idle_fraction_1f1b = idle_fraction_gpipe


def bubble_ratio_gpipe(P: int, M: int) -> float:
    """GPipe and 1F1B: idle time / busy time = (P-1)(F+B) / (M(F+B)) = (P-1)/M."""
    _check(P=P, M=M)
    return (P - 1) / M


def utilization_gpipe(P: int, M: int) -> float:
    """GPipe and 1F1B: 1 - idle fraction = M/(M+P-1)."""
    return 1.0 - idle_fraction_gpipe(P, M)


def makespan_interleaved(P: int, M: int, v: int, forward: float = 1.0, backward: float = 2.0):
    """Interleaved 1F1B (chapter 04), F and B per chunk: (v*M + P-1)(F+B), M a multiple of P.

    Derivation: each rank does v*M forwards and backwards of chunk size; the fill and the
    drain are still P-1 hops, but a hop is now one chunk (1/v of a stage's work when the
    model is cut into P*v equal pieces), so the bubble is (P-1)(F+B) in chunk units while
    the work grows to v*M(F+B). With whole-stage costs F_s = v*F it reads
    M(F_s+B_s) + (P-1)(F_s+B_s)/v: the bubble shrinks by v.
    """
    _check(P=P, M=M, v=v)
    return (v * M + P - 1) * (forward + backward)


def idle_fraction_interleaved(P: int, M: int, v: int) -> float:
    """Interleaved 1F1B: (P-1)/(v*M+P-1), from :func:`makespan_interleaved` (busy v*M(F+B))."""
    _check(P=P, M=M, v=v)
    return (P - 1) / (v * M + P - 1)


def peak_inflight_interleaved(P: int, M: int, v: int, s: int) -> int:
    """Interleaved 1F1B (chapter 04): the most (chunk, microbatch) pairs rank ``s`` holds.

    With v >= 2 rank s warms up with 2(P-1-s) + (v-1)P chunk forwards (Megatron-LM's rule)
    and runs one more before its first backward, so it peaks at that plus one, never more
    than its v*M chunk forwards; each pair is 1/v of a full stage's activations. v = 1 is
    plain 1F1B (:func:`peak_inflight_1f1b`). M a multiple of P, as the builder requires.
    """
    _check(P=P, M=M, v=v, s=s)
    if v == 1:
        return peak_inflight_1f1b(P, M, s)
    return min(2 * (P - 1 - s) + (v - 1) * P + 1, v * M)


def makespan_zb_h1(P: int, M: int, forward=1.0, input_grad=1.0, weight_grad=1.0):
    """ZB-H1 as built by :func:`pipemare_lite.schedules.zb_h1` (chapter 04), for M >= P:

        M(F+I+W) + (P-1) * max(F + I - W, F, I)

    Derivation: every rank has M(F+I+W) of work; the makespan is that plus the largest idle
    time some rank cannot avoid. (1) The last stage waits (P-1)F for its first forward, then
    never waits. (2) Stage 0 runs P forwards, then waits (P-1)I for I(0) to come back up the
    chain. (3) The last stage's I(M-1) ends at (P-1)F + M(F+I) + (M-P)W (it has deferred P-1
    weight gradients and run one more); the input gradient then needs P-1 hops of I to reach
    stage 0, which finishes with one W: (P-1)(F+I-W) + M(F+I+W). With F = I = W this is a
    bubble of (P-1)F, a third of 1F1B's (P-1)(F+B) for B = 2F (Qi et al., 2023). For
    M < P the warm-up is clamped and the makespan is larger; use the simulator.
    """
    _check(P=P, M=M)
    if M < P:
        raise ValueError(f"makespan_zb_h1: M={M} < P={P}; allowed: M >= P (else simulate)")
    F, I, W = forward, input_grad, weight_grad
    return M * (F + I + W) + (P - 1) * max(F + I - W, F, I)


def idle_fraction_zb_h1(P: int, M: int, forward=1.0, input_grad=1.0, weight_grad=1.0) -> float:
    """ZB-H1: 1 - M(F+I+W) / :func:`makespan_zb_h1` (M >= P)."""
    makespan = makespan_zb_h1(P, M, forward, input_grad, weight_grad)
    return 1.0 - M * (forward + input_grad + weight_grad) / makespan


def makespan_zb_h2(P: int, M: int, K: int = 1, forward: float = 1.0) -> float:
    """ZB-H2 as built by :func:`pipemare_lite.schedules.zb_h2` (chapter 04), F = I = W,
    M >= 2P-1, K minibatches: (3KM + P-1) F.

    Derivation: rank s waits sF for microbatch 0. It may hold 2P-1 activations, and the
    first input gradient comes back to stage s at (2P-1-s)F, after exactly 2P-1-2s forwards
    of its own: it never waits for one; afterwards an I arrives every time the stage has room
    for it, and the W's it defers fill every other slot. So rank s runs gap-free from sF to
    sF + 3KMF (a parallelogram; a rank-local flush lets minibatch k+1 start on rank 0 while
    rank P-1 finishes minibatch k): the fill's (P-1)F is paid once per run. ZB-H1 pays
    (P-1)F per minibatch (:func:`makespan_zb_h1`).
    """
    _check(P=P, M=M, K=K)
    if M < 2 * P - 1:
        raise ValueError(f"makespan_zb_h2: M={M} < 2P-1={2 * P - 1}; allowed: M >= 2P-1 "
                         "(else simulate)")
    return (3 * K * M + P - 1) * forward


def idle_fraction_zb_h2(P: int, M: int, K: int = 1) -> float:
    """ZB-H2, F = I = W: (P-1) / (3KM + P-1) (busy 3KMF per rank, :func:`makespan_zb_h2`)."""
    return (P - 1) / makespan_zb_h2(P, M, K)


def peak_inflight_zb_h2(P: int, M: int) -> int:
    """ZB-H2, every stage: 2P-1 activations for M >= 2P-1 (the cap its builder keeps; ZB-H1
    holds P, 1F1B's stage 0 P): the memory ZB-H2 pays for its bubble."""
    _check(P=P, M=M)
    if M < 2 * P - 1:
        raise ValueError(f"peak_inflight_zb_h2: M={M} < 2P-1={2 * P - 1}; allowed: M >= 2P-1")
    return 2 * P - 1


def makespan_zb_v(P: int, M: int, K: int = 1, forward: float = 1.0) -> float:
    """ZB-V as built by :func:`pipemare_lite.schedules.zb_v` (chapter 04), F = I = W per
    chunk, M >= 2P-1, K minibatches: (6KM + P-1) F.

    Derivation: each rank holds 2 chunks and does 2M(F+I+W) = 6MF of work per minibatch.
    Rank r waits rF for microbatch 0 to reach chunk r; from then on every F, I and W finds
    its input ready (the V turns the pipeline around on the last rank, and the chunk-1 work
    of the way back fills what would be the drain), so rank r runs gap-free and ends at
    rF + 6KMF: the schedule is a parallelogram. A rank's flush needs only its own updates,
    so minibatch k+1 starts on rank 0 while rank P-1 finishes minibatch k, and the (P-1)F
    of the fill is paid once per run: zero bubble in the steady state (Qi et al., 2024,
    section 6). Fewer microbatches leave gaps: simulate.
    """
    _check(P=P, M=M, K=K)
    if M < 2 * P - 1:
        raise ValueError(f"makespan_zb_v: M={M} < 2P-1={2 * P - 1}; allowed: M >= 2P-1 "
                         "(else simulate)")
    return (6 * K * M + P - 1) * forward


def idle_fraction_zb_v(P: int, M: int, K: int = 1) -> float:
    """ZB-V, F = I = W: (P-1) / (6KM + P-1) (busy 6KMF per rank, :func:`makespan_zb_v`)."""
    return (P - 1) / makespan_zb_v(P, M, K)  # F = 1: the makespan is 6KM + P-1


def makespan_dualpipe_v(P: int, M: int, K: int = 1, forward: float = 1.0) -> float:
    """DualPipeV as built by :func:`pipemare_lite.schedules.dualpipe_v` (chapter 04), F = I =
    W per chunk, M >= 2P, K minibatches: K (6M + P-1) F.

    Derivation: the fill is ZB-V's (rank r starts at rF), but the drain is not mirrored: the
    last backwards of chunk 0 go up the ranks one hop at a time with no chunk-1 work left to
    fill behind them, so every rank ends its minibatch at the same time, 6MF + (P-1)F (rank
    r idles rF at the start and P-1-r steps in the drain). Ending together, the next
    minibatch starts only then, so each minibatch pays (P-1)F: the bubble of ZB-H1 with
    chunks, which DualPipe hides on a GPU by overlapping the paired F and B's communication,
    not by reordering (DeepSeek-AI, 2024). DeepSeek's table counts 2(P-1) here because it
    runs each overlapped F&B as one operation waiting for both inputs, where the engine's F
    runs as soon as its own input is there
    (:func:`pipemare_lite.analysis.overlap.simulate_overlapped`, docs/schedules.md).
    """
    _check(P=P, M=M, K=K)
    if M < 2 * P:
        raise ValueError(f"makespan_dualpipe_v: M={M} < 2P={2 * P}; allowed: M >= 2P")
    return K * (6 * M + P - 1) * forward


def idle_fraction_dualpipe_v(P: int, M: int, K: int = 1) -> float:
    """DualPipeV, F = I = W: (P-1) / (6M + P-1), per minibatch (:func:`makespan_dualpipe_v`)."""
    return K * (P - 1) / makespan_dualpipe_v(P, M, K)


def peak_inflight_zb_v(P: int, M: int) -> int:
    """ZB-V, every rank: 2P chunk activations for M >= 2P-1, i.e. P whole stages' worth
    (a chunk is half a stage): 1F1B's rank 0, the paper's "same memory as 1F1B".

    Derivation: rank r runs 2(P-r)-1 chunk-0 forwards, then r pairs of a chunk-1 and a
    chunk-0 forward, then one more chunk-1 forward before its first W releases anything:
    2(P-r)-1 + 2r + 1 = 2P, whatever r; the steady state adds one F per W.
    """
    _check(P=P, M=M)
    if M < 2 * P - 1:
        raise ValueError(f"peak_inflight_zb_v: M={M} < 2P-1={2 * P - 1}; allowed: M >= 2P-1")
    return 2 * P


def peak_inflight_dualpipe_v(P: int, M: int) -> int:
    """DualPipeV, every rank: 2P + 1 chunk activations for M >= 2P (P + 1/2 stages' worth).

    Derivation: rank r runs 2(P-r-1) chunk-0 forwards and r+1 chunk-0/chunk-1 pairs: 2P
    forwards before its first backward. Each of the P-r-1 zero-bubble steps (I, the W
    just queued, F) frees one and adds one: still 2P. The main phase (it runs M-2P+r+1 >= 1
    times) starts each overlapped pair with its forward, before the backward (I, W) frees
    one: 2P + 1, one more than ZB-V.
    """
    _check(P=P, M=M)
    if M < 2 * P:
        raise ValueError(f"peak_inflight_dualpipe_v: M={M} < 2P={2 * P}; allowed: M >= 2P")
    return 2 * P + 1


def makespan_no_flush(P: int, total_microbatches: int, forward=1.0, backward=2.0):
    """PipeDream, 2BW and the async pipeline (chapter 05) over T microbatches: (T+P-1)(F+B).

    Derivation: without a flush the pipeline fills once and drains once for the whole run,
    exactly like one GPipe minibatch of T microbatches (:func:`makespan_gpipe`, c = 0).
    """
    _check(P=P, total_microbatches=total_microbatches)
    return (total_microbatches + P - 1) * (forward + backward)


def idle_fraction_async_steady_state(P: int, N: int) -> float:
    """The asynchronous pipeline (PipeDream, 2BW, PipeMare) in steady state: 0.

    Derivation: with no flush, once the pipeline is full every stage has a forward of a new
    microbatch and a backward of an old one at every tick, whatever P and N; updates do not
    wait for the pipeline to drain. Only the single fill and drain of the whole run
    (:func:`makespan_no_flush`) is idle.
    """
    _check(P=P, N=N)
    return 0.0


def async_speedup_over_gpipe(P: int, N: int) -> float:
    """Throughput of an asynchronous pipeline over GPipe's, same P and N: (N+P-1)/N.

    Derivation: GPipe's utilization is N/(N+P-1) (:func:`utilization_gpipe`), the asynchronous
    pipeline's is 1 in steady state, and throughput is proportional to utilization. With
    PipeMare's fine-grained P = 107 stages: N = 32 gives 138/32 = 4.31, N = 8 gives 14.25.
    """
    _check(P=P, N=N)
    return (N + P - 1) / N


def peak_inflight_gpipe(P: int, M: int) -> int:
    """GPipe: every stage holds all M microbatches' activations before its first backward."""
    _check(P=P, M=M)
    return M


def peak_inflight_1f1b(P: int, M: int, s: int) -> int:
    """1F1B, stage s (0-indexed): min(P-s, M).

    Derivation: stage s runs P-1-s warm-up forwards and one more forward before its first
    backward frees one; from then on each F is paired with a B, so the count stays at P-s.
    With fewer microbatches the warm-up is clamped and it holds all M.
    """
    _check(P=P, M=M, s=s)
    return min(P - s, M)


def peak_inflight_zb_h1(P: int, M: int, s: int) -> int:
    """ZB-H1 as built here, stage s: min(P, M) activations (F done, W not yet).

    Derivation: stage s holds its P-1-s warm-up forwards, one more forward, and the s
    microbatches whose weight gradient it defers: (P-1-s) + 1 + s = P, the peak of 1F1B's
    stage 0 (hence "same peak memory as 1F1B"); never more than the M it has.
    """
    _check(P=P, M=M, s=s)
    return min(P, M)


def peak_inflight_async(P: int, total_microbatches: int, s: int) -> int:
    """The lock-step asynchronous pipeline, stage s: min(2(P-s), T) for T microbatches.

    Derivation: stage s runs F(m) at tick m+s and B(m) at tick m+2P-1-s, forward first
    within a tick. After the forward of tick t it has done t-s+1 forwards and t-2P+1+s
    backwards: 2(P-s) microbatches in flight, twice 1F1B's P-s (PipeMare's schedule keeps
    every stage busy from the first tick instead of waiting in a warm-up).
    """
    _check(P=P, total_microbatches=total_microbatches, s=s)
    return min(2 * (P - s), total_microbatches)


def microbatches_for_idle_below(P: int, target: float) -> int:
    """The fewest microbatches M for which GPipe's idle fraction (P-1)/(M+P-1) < ``target``.

    Derivation: (P-1)/(M+P-1) < t  <=>  M > (P-1)(1-t)/t, so M = floor((P-1)(1-t)/t) + 1
    (computed with exact fractions, so a target like 0.2 is not spoiled by rounding).
    """
    _check(P=P)
    if isinstance(target, bool) or not isinstance(target, (int, float, Fraction)) \
            or not 0 < target <= 1:
        raise ValueError(f"target={target!r}: allowed: a number in (0, 1]")
    t = Fraction(target).limit_denominator(10**9) if isinstance(target, float) else Fraction(target)
    return max(1, math.floor((P - 1) * (1 - t) / t) + 1)
