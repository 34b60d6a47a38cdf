"""Weight modes as objects and the one table of schedules and methods (issue 11)."""

import pytest

from pipemare_lite.analysis.staleness import SYNC_NAMES
from pipemare_lite.methods.tradeoff import SCHEDULE_OF
from pipemare_lite.schedules import WEIGHT_MODES, WeightMode, build_schedule, get_weight_mode
from pipemare_lite.schedules.names import weight_mode_of
from pipemare_lite.schedules.registry import (
    ASYNC_NAMES,
    BUILDERS,
    SCHEDULE_NAMES,
    SCHEDULE_TABLE,
)

# The design's semantics table, written out plainly: for a microbatch of minibatch k whose
# forward ran while the stage held version `f_cur` and whose backward runs while it holds
# `b_cur`, (version the forward reads, version the backward reads).
REFERENCE = {
    "sync": lambda k, f_cur, b_cur: (f_cur, b_cur),
    "stash": lambda k, f_cur, b_cur: (f_cur, f_cur),
    "2bw": lambda k, f_cur, b_cur: (max(k - 1, 0), max(k - 1, 0)),
    "async": lambda k, f_cur, b_cur: (f_cur, b_cur),
}


@pytest.mark.parametrize("name", WEIGHT_MODES)
def test_each_mode_reads_the_versions_of_the_design_table(name):
    mode = get_weight_mode(name)
    for k in range(4):
        for f_cur in range(4):
            for b_cur in range(f_cur, f_cur + 3):
                forward = mode.version_at_forward(f_cur, k)
                assert (forward, mode.version_at_backward(b_cur, forward)) == \
                    REFERENCE[name](k, f_cur, b_cur)


def test_the_modes_answers():
    answers = {m: (get_weight_mode(m).flushes, get_weight_mode(m).has_discrepancy,
                   get_weight_mode(m).backward_reads_forwards,
                   get_weight_mode(m).readers_known_up_front, get_weight_mode(m).versions_kept)
               for m in WEIGHT_MODES}
    assert answers == {"sync": (True, False, False, False, 1),
                       "stash": (False, False, True, False, None),
                       "2bw": (False, False, True, True, 2),
                       "async": (False, True, False, False, 1)}
    assert WEIGHT_MODES == ("sync", "stash", "2bw", "async")


def test_lookup_names_the_allowed_modes():
    mode = get_weight_mode("stash")
    assert isinstance(mode, WeightMode) and get_weight_mode(mode) is mode and str(mode) == "stash"
    for bad in ("none", "Sync", None, 3):
        with pytest.raises(ValueError, match=r"unknown weight mode .*allowed: sync, stash, 2bw"):
            get_weight_mode(bad)


def test_the_lists_read_from_the_table_are_the_old_ones():
    assert SCHEDULE_NAMES == ("naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v",
                              "dualpipev", "pipedream", "2bw", "async")
    assert ASYNC_NAMES == ("pipedream", "2bw", "async")
    assert SYNC_NAMES == ("naive", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v",
                          "dualpipev")
    assert set(SCHEDULE_NAMES) <= set(BUILDERS)
    assert {n: weight_mode_of(n) for n in (*SCHEDULE_NAMES, "pipemare")} == {
        "naive": "sync", "gpipe": "sync", "1f1b": "sync", "interleaved": "sync",
        "zb-h1": "sync", "zb-h2": "sync", "zb-v": "sync", "dualpipev": "sync",
        "pipedream": "stash", "2bw": "2bw", "async": "async", "pipemare": "async"}
    assert SCHEDULE_OF == {"gpipe": ("gpipe", False), "1f1b": ("1f1b", False),
                           "zb-h1": ("zb-h1", False), "pipedream": ("pipedream", False),
                           "2bw": ("2bw", False), "async": ("async", False),
                           "pipemare": ("async", True)}


@pytest.mark.parametrize("name,build,mode", SCHEDULE_TABLE)
def test_each_builder_makes_its_tables_mode(name, build, mode):
    schedule = build_schedule(name, 4, 8, num_minibatches=3)  # DualPipeV needs M >= 2P
    assert schedule.weight_mode == mode.name and schedule.mode is mode


def test_the_methods_run_their_schedules_mode():
    from pipemare_lite.methods import METHOD_TABLE, METHODS

    for name, schedule, t1, t2, _ in METHOD_TABLE:
        spec = METHODS[name]
        assert spec.builder == schedule and spec.weight_mode == weight_mode_of(schedule)
        assert (spec.options.t1, spec.options.t2) == (t1, t2)


def test_a_method_takes_its_schedules_mode_unless_told():
    from pipemare_lite.methods import METHODS, register_method

    try:
        assert register_method("t-modes-stash", schedule="pipedream").weight_mode == "stash"
        told = register_method("t-modes-told", schedule="async", weight_mode="stash")
        assert told.weight_mode == "stash"
        with pytest.raises(ValueError, match="'custom' declares no weight mode; give weight_mode="):
            register_method("t-modes-custom", schedule="custom")
        with pytest.raises(ValueError, match="unknown weight mode 'none'; allowed: sync"):
            register_method("t-modes-bad", schedule="gpipe", weight_mode="none")
    finally:
        for name in ("t-modes-stash", "t-modes-told", "t-modes-custom", "t-modes-bad"):
            METHODS.pop(name, None)
