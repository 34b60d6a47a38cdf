"""Errors a researcher met while writing a method and a schedule (issue #33, item 7): each now
names what went wrong and where.

- registering a schedule name twice is refused (as a method name is), unless
  ``replace_existing=True``;
- an unknown schedule names the process, the plugins imported there and how to load one;
- a builder's error quotes the run's K, not the lazy probe's K0 = 4;
- a plugin that cannot be imported names the rank (under launch() and torchrun);
- launch() names where the failing rank was ("rank 1 failed at action ...", not "rank 1
  failed at rank 1") and shows the failing hook's traceback.
(The hooks' own messages: tests/test_hook_checks.py.)
"""

from __future__ import annotations

import os

import pytest

from pipemare_lite.methods import METHODS
from pipemare_lite.plugins import ENV_VAR, PluginError, load_plugins
from pipemare_lite.schedules import build_schedule
from pipemare_lite.schedules.names import REGISTERED_WEIGHT_MODES
from pipemare_lite.schedules.registry import BUILDERS, register_schedule
from pipemare_lite.schedules.repeat import long_schedule
from pipemare_lite.schedules.validation import ScheduleError
from tests.timeouts import hard_time_limit


def rows_1f1b(P, N, *, num_minibatches, chunks, warmup):
    """A plain builder: gpipe's rows."""
    return build_schedule("gpipe", P, N, num_minibatches=num_minibatches).rows()


def test_registering_a_schedule_name_twice_is_refused(registered):
    registered("twice", rows_1f1b)
    with pytest.raises(ScheduleError) as error:
        register_schedule("twice", rows_1f1b)
    assert str(error.value) == (f"schedule 'twice' is already registered (by "
                                f"{rows_1f1b.__module__}); pass replace_existing=True to "
                                "replace it")
    register_schedule("twice", rows_1f1b, weight_mode="sync", replace_existing=True)
    assert build_schedule("twice", 2, 2).num_ranks == 2


def test_unknown_schedule_names_the_process_plugins_and_the_ways_to_load_one(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    with pytest.raises(ScheduleError) as error:
        build_schedule("eager-1f1b-not-loaded", 2, 2)
    message = str(error.value)
    assert message.startswith("unknown schedule name 'eager-1f1b-not-loaded'; allowed: naive, ")
    for part in (f"Not registered in process {os.getpid()}", "plugins imported here:",
                 "--plugin MODULE", "launch(..., imports=['MODULE'])", f"{ENV_VAR}=MODULE"):
        assert part in message


def test_unknown_schedule_is_looked_up_again_after_the_environments_plugins(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "docs.examples.eager_1f1b")
    BUILDERS.pop("eager-1f1b", None)  # as in a fresh process (a test may have imported it)
    REGISTERED_WEIGHT_MODES.pop("eager-1f1b", None)
    import sys

    sys.modules.pop("docs.examples.eager_1f1b", None)
    from pipemare_lite import plugins

    monkeypatch.setattr(plugins, "_LOADED", [])
    assert build_schedule("eager-1f1b", 3, 4).name == "eager-1f1b"


def test_a_builders_error_quotes_the_runs_k_not_the_lazy_probes(registered):
    def broken(P, N, *, num_minibatches, chunks, warmup):
        return [[f"{r}F0"] for r in range(P)]  # no backward: refused

    registered("broken-rows", broken)
    with pytest.raises(ScheduleError) as error:
        long_schedule(lambda k: build_schedule("broken-rows", 2, 2, num_minibatches=k), 50)
    assert "K=50" in str(error.value) and "K=4," not in str(error.value)


def test_a_plugin_import_failure_names_the_rank(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv(ENV_VAR, raising=False)
    with pytest.raises(PluginError, match=rf"plugin 'no_such_plugin_xyz' could not be imported "
                       rf"in process {os.getpid()}, rank 1"):
        load_plugins(["no_such_plugin_xyz"])


@pytest.mark.dist
def test_launch_names_where_a_hook_failed_and_shows_its_traceback():
    from pipemare_lite.engine.distributed.launch import LaunchError, launch
    from pipemare_lite.training.datasets import load
    from pipemare_lite.training.dist_fit import fit_worker
    from pipemare_lite.training.models import mlp

    fit_kwargs = dict(method="fixture-bad-hook", num_stages=2, num_microbatches=2,
                      batch_size=64, epochs=1, lr=0.05, progress=False,
                      model=(mlp, dict(in_features=64, hidden=16, depth=2, out_features=10,
                                       seed=0)),
                      data=(load, {"name": "digits"}))
    with hard_time_limit(180), pytest.raises(LaunchError) as error:
        launch(fit_worker, 2, timeout=120, args=(fit_kwargs,),
               imports=["tests.fixtures.bad_hook_method"])
    message = str(error.value)
    assert error.value.failed_ranks[0] == 1
    assert "rank 1 failed at action " in message and "failed at rank 1" not in message
    assert "rank 1 traceback:" in message
    assert "bad_hook_method.py" in message and "in after_update" in message
    assert message.rstrip().endswith("RuntimeError: bad hook on purpose")
    METHODS.pop("fixture-bad-hook", None)


def test_a_typo_is_answered_with_the_close_name():
    """Every registry's unknown-name error and fit()'s unknown setting suggest the close
    allowed name after listing them all; a wrong type is named as a type, not a range."""
    import pipemare_lite as pml
    from pipemare_lite.schedules.validation import check_sizes

    with pytest.raises(ScheduleError, match=r"name '1fb1'; .* Did you mean '1f1b'\?"):
        pml.build_schedule("1fb1", 2, 2)
    with pytest.raises(ValueError, match=r"unknown method 'pipemar'; .* Did you mean 'pipemare'"):
        pml.get_method("pipemar")
    with pytest.raises(TypeError, match=r"unknown settings epoch; .* Did you mean 'epochs'\?"):
        pml.fit(None, None, epoch=1)
    with pytest.raises(ScheduleError, match=r"schedule name 'gpip'.* Did you mean 'gpipe'"):
        check_sizes("gpip", 2, 2, 1, 1, 0)
    with pytest.raises(ScheduleError, match=r"num_ranks='2' is a str; give an integer in 1\.\."):
        pml.build_schedule("1f1b", "2", 2)


def test_a_schedule_prints_as_one_line_with_its_builders_notes():
    import pipemare_lite as pml

    text = repr(pml.build_schedule("1f1b", 4, 2))
    assert text.startswith("<Schedule '1f1b' P=4, N=2, K=1, weight mode 'sync', 20 actions; "
                           "note: ")
    assert "warm-up clamped" in text and "\n" not in text
