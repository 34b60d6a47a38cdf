"""Property tests: every builder over a grid of (P, M, v, K, W), checked by an independent,
deliberately naive reference (a sweep that runs whatever is ready) and by the simulator."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pipemare_lite.analysis.simulate import OpCosts, simulate
from pipemare_lite.schedules import SCHEDULE_NAMES, ScheduleError, build_schedule


def reference_times(schedule, costs):
    """Start/end of every action by repeated sweeps over the ranks (O(n^2), obviously right).

    Rules written from the schedule semantics, not from the library: F(s,m) after F(s-1,m);
    B or I(s,m) after F(s,m) and after the backward (B or I) of (s+1,m); W after I; U after
    every gradient of its minibatch on its stage; each rank in its own order.
    """
    S, M, P = schedule.num_virtual_stages, schedule.num_microbatches, schedule.num_ranks
    rank_of = {s: rank for rank, row in enumerate(schedule.ranks) for a in row for s in [a.stage]}
    split = any(a.kind == "I" for row in schedule.ranks for a in row)
    back = "I" if split else "B"
    grad = "W" if split else "B"
    duration = {"F": costs.forward, "B": costs.backward, "I": costs.input_grad,
                "W": costs.weight_grad, "U": costs.update}  # fmt: skip
    end, start = {}, {}
    position, free = [0] * P, [0.0] * P
    progress = True
    while progress:
        progress = False
        for rank in range(P):
            row = schedule.ranks[rank]
            if position[rank] == len(row):
                continue
            a = row[position[rank]]
            key = (a.stage, a.kind, a.index)
            if a.kind == "F":
                needs = [(a.stage - 1, "F", a.index)] if a.stage else []
            elif a.kind in ("B", "I"):
                needs = [(a.stage, "F", a.index)]
                if a.stage < S - 1:
                    needs.append((a.stage + 1, back, a.index))
            elif a.kind == "W":
                needs = [(a.stage, "I", a.index)]
            else:
                needs = [(a.stage, grad, m) for m in range(a.index * M, a.index * M + M)]
            if all(d in end for d in needs):
                # a message (latency comm) only between ranks: the rank whose row runs it
                ready = max([free[rank]] + [end[d] + (costs.comm if rank_of[d[0]] != rank else 0.0)
                                            for d in needs])  # fmt: skip
                start[key], end[key] = ready, ready + duration[a.kind]
                free[rank] = end[key]
                position[rank] += 1
                progress = True
    assert all(p == len(row) for p, row in zip(position, schedule.ranks)), "reference deadlocked"
    return start, end


sizes = st.tuples(
    st.sampled_from(SCHEDULE_NAMES),
    st.integers(1, 6),  # P
    st.integers(1, 9),  # M
    st.integers(1, 3),  # v
    st.integers(1, 3),  # K
    st.integers(0, 3),  # W
)
costs_strategy = st.builds(
    OpCosts,
    forward=st.sampled_from([0.5, 1.0, 2.0]),
    backward=st.sampled_from([1.0, 2.0, 3.0]),
    input_grad=st.sampled_from([0.5, 1.0, 2.0]),
    weight_grad=st.sampled_from([0.5, 1.0, 2.0]),
    update=st.sampled_from([0.0, 0.5]),
    comm=st.sampled_from([0.0, 0.25]),
)


def build(name, P, M, v, K, W):
    """The builder call for a grid point, or None where the builder documents a refusal."""
    v = v if name == "interleaved" else 1
    W = min(W, K) if name in ("pipedream", "2bw", "async") else 0
    if name == "interleaved" and v > 1:
        M = P * max(1, M // P)  # interleaving requires M to be a multiple of P
    try:
        return build_schedule(name, P, M, chunks=v, num_minibatches=K, warmup=W)
    except ScheduleError as exc:
        assert (name == "2bw" and M < P - 1) or (name == "dualpipev" and M < 2 * P), (
            f"{name} refused P={P} M={M}: {exc}")
        return None


@settings(max_examples=150, deadline=None)
@given(sizes)
def test_every_action_exactly_once_on_its_rank(point):
    schedule = build(*point)
    if schedule is None:
        return
    S, T, K = schedule.num_virtual_stages, schedule.total_microbatches, schedule.num_minibatches
    split = schedule.split_backward
    kinds = ("F", "I", "W") if split else ("F", "B")
    expected = {(s, k, m) for s in range(S) for k in kinds for m in range(T)}
    expected |= {(s, "U", k) for s in range(S) for k in range(K)}
    seen = [(a.stage, a.kind, a.index) for row in schedule.ranks for a in row]
    assert len(seen) == len(set(seen)) and set(seen) == expected
    P = schedule.num_ranks
    v_shaped = schedule.name in ("zb-v", "dualpipev")  # rank r holds r and 2P-1-r
    for rank, row in enumerate(schedule.ranks):
        assert all((min(a.stage, 2 * P - 1 - a.stage) if v_shaped else a.stage % P) == rank
                   for a in row)
    assert split == (schedule.name.startswith("zb") or schedule.name == "dualpipev")


@settings(max_examples=150, deadline=None)
@given(sizes)
def test_updates_apply_exactly_their_minibatch_and_sync_flushes(point):
    schedule = build(*point)
    if schedule is None:
        return
    M = schedule.num_microbatches
    grad = "W" if schedule.split_backward else "B"
    flushed = (
        schedule.num_minibatches if schedule.weight_mode == "sync" else schedule.warmup
    )
    for row in schedule.ranks:
        where = {(a.stage, a.kind, a.index): i for i, a in enumerate(row)}
        for a in row:
            if a.kind == grad:
                k = a.index // M
                assert where[(a.stage, "U", k)] > where[(a.stage, a.kind, a.index)]
                if k > 0:
                    assert where[(a.stage, "U", k - 1)] < where[(a.stage, a.kind, a.index)]
            if a.kind == "F" and 0 < a.index // M <= flushed:
                k = a.index // M
                assert all(where[(s, "U", k - 1)] < where[(a.stage, "F", a.index)]
                           for s in {b.stage for b in row})  # fmt: skip


@settings(max_examples=120, deadline=None)
@given(sizes, costs_strategy)
def test_simulator_equals_the_naive_reference(point, costs):
    schedule = build(*point)
    if schedule is None:
        return
    start, end = reference_times(schedule, costs)
    timeline = simulate(schedule, costs)
    assert len(timeline.entries) == len(start)
    for e in timeline.entries:
        key = (e.action.stage, e.action.kind, e.action.index)
        assert abs(e.start - start[key]) < 1e-9 and abs(e.end - end[key]) < 1e-9


@settings(max_examples=100, deadline=None)
@given(sizes)
def test_ranks_run_in_their_order_and_never_double_book(point):
    schedule = build(*point)
    if schedule is None:
        return
    timeline = simulate(schedule)
    timed = {(e.rank, e.action): e for e in timeline.entries}
    for rank, row in enumerate(schedule.ranks):
        entries = [timed[(rank, a)] for a in row]
        for before, after in zip(entries, entries[1:]):
            assert after.start >= before.end - 1e-12
