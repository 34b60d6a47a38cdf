"""The command line after issue #33, items 5 and 6.

- every subcommand takes ``--plugin MODULE`` and reads ``PIPEMARE_PLUGINS``, loaded before its
  parser is built; ``schedule`` builds a schedule a plugin registers; a missing plugin or an
  unknown schedule is one line naming how to load a plugin (exit 2);
- ``schedule --save FILE`` writes a file that ``--from FILE`` (and ``load_schedule``) reads back
  unchanged, JSON and CSV, built-in, registered and hand-written schedules alike.
"""

from __future__ import annotations

import json
import sys

import pytest

from pipemare_lite import plugins
from pipemare_lite.cli import SUBCOMMANDS, build_parser, main
from pipemare_lite.schedules import build_schedule
from pipemare_lite.schedules.io import JSON_FIELDS, load_schedule
from pipemare_lite.schedules.names import REGISTERED_WEIGHT_MODES
from pipemare_lite.schedules.registry import BUILDERS, REGISTERED_BY, standalone

EAGER = "docs.examples.eager_1f1b"


@pytest.fixture
def fresh_plugins(monkeypatch):
    """As in a new process: eager-1f1b unregistered, no plugin imported, no environment;
    afterwards as before (other modules of the same worker registered it at import)."""
    tables = (BUILDERS, REGISTERED_WEIGHT_MODES, REGISTERED_BY)
    before = [dict(t) for t in tables], sys.modules.get(EAGER)

    def forget():
        for table in tables:
            table.pop("eager-1f1b", None)
        sys.modules.pop(EAGER, None)
    forget()
    monkeypatch.setattr(plugins, "_LOADED", [])
    monkeypatch.delenv(plugins.ENV_VAR, raising=False)
    yield
    forget()
    for table, saved in zip(tables, before[0]):
        if "eager-1f1b" in saved:
            table["eager-1f1b"] = saved["eager-1f1b"]
    if before[1] is not None:
        sys.modules[EAGER] = before[1]


@pytest.mark.parametrize("command", list(SUBCOMMANDS))
def test_every_subcommand_takes_plugin(command):
    extra = {"grade": ["x.ipynb"], "assign": ["student"]}.get(command, [])
    args = build_parser([command]).parse_args([command, "--plugin", "a", "--plugin", "b", *extra])
    assert args.plugin == ["a", "b"]


@pytest.mark.parametrize("command", ["schedule", "gpu-check", "reproduce"])
def test_a_missing_plugin_is_one_line_and_exit_2(command, fresh_plugins, capsys):
    assert main([command, "--plugin", "no_such_plugin_xyz"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pipemare-lite {command}: error: plugin 'no_such_plugin_xyz' could "
                          "not be imported") and err.count("\n") == 1


def test_schedule_builds_a_plugin_schedule_with_plugin_or_environment(fresh_plugins, capsys,
                                                                        monkeypatch):
    assert main(["schedule", "eager-1f1b", "-P", "3", "-M", "4"]) == 2
    err = capsys.readouterr().err
    assert "unknown schedule name 'eager-1f1b'" in err and "--plugin MODULE" in err
    assert "PIPEMARE_PLUGINS" in err
    assert main(["schedule", "--plugin", EAGER, "eager-1f1b", "-P", "3", "-M", "4"]) == 0
    assert "rank 0  | F0 F1 F2 F3 ." in capsys.readouterr().out
    BUILDERS.pop("eager-1f1b")  # forget it again; now through the environment
    sys.modules.pop(EAGER)
    monkeypatch.setattr(plugins, "_LOADED", [])
    monkeypatch.setenv(plugins.ENV_VAR, EAGER)
    assert main(["schedule", "eager-1f1b", "-P", "3", "-M", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["schedule"] == "eager-1f1b"


def fields(schedule):
    return {key: getattr(schedule, key) for key in JSON_FIELDS} | {"rows": schedule.rows(),
                                                                   "notes": schedule.notes}


@pytest.mark.parametrize("argv, name, sizes", [
    (["1f1b", "-P", "3", "-M", "4", "-K", "2"], "1f1b", (3, 4, dict(num_minibatches=2))),
    (["async", "-P", "3", "-M", "2", "-K", "5", "--warmup", "1"], "async",
     (3, 2, dict(num_minibatches=5, warmup=1))),
    (["interleaved", "-P", "2", "-M", "4", "-v", "2"], "interleaved", (2, 4, dict(chunks=2))),
    (["--plugin", EAGER, "eager-1f1b", "-P", "3", "-M", "4"], "eager-1f1b", (3, 4, {})),
])
def test_save_round_trips_json(argv, name, sizes, tmp_path, capsys):
    saved, again = tmp_path / "s.json", tmp_path / "t.json"
    assert main(["schedule", *argv, "--save", str(saved)]) == 0
    printed = capsys.readouterr().out
    # a registered builder's schedule is saved as "custom" (loads without the plugin)
    built = standalone(build_schedule(name, sizes[0], sizes[1], **sizes[2]))
    assert fields(load_schedule(saved)) == fields(built)
    assert main(["schedule", "--from", str(saved), "--save", str(again)]) == 0
    assert again.read_text() == saved.read_text()
    # the same timeline and metrics; only the steady utilization, which simulates one more
    # minibatch, needs the builder: a file holds one run
    steady = "steady utilization  "
    shown = capsys.readouterr().out.splitlines()
    if built.name != name:  # saved as "custom": named so in the header, with a note
        assert shown[0] == printed.splitlines()[0].replace(name, "custom", 1)
        assert shown[1] == f"note: {built.notes[-1]}"
        shown = [printed.splitlines()[0], *shown[2:]]
    assert [line for line in shown if not line.startswith(steady)] == [
        line for line in printed.splitlines() if not line.startswith(steady)]
    assert f"{steady}n/a (a schedule from a file" in "\n".join(shown)


def test_save_round_trips_csv_and_refuses_other_suffixes(tmp_path, capsys):
    saved = tmp_path / "s.csv"
    assert main(["schedule", "gpipe", "-P", "2", "-M", "3", "--save", str(saved)]) == 0
    assert load_schedule(saved).rows() == build_schedule("gpipe", 2, 3).rows()
    assert main(["schedule", "gpipe", "-P", "2", "-M", "3", "--save", str(tmp_path / "s.txt")]) == 2
    assert "--save=" in capsys.readouterr().err


def test_hand_written_json_example_loads_like_its_csv():
    from pathlib import Path

    examples = Path(__file__).parent.parent / "docs" / "examples"
    by_hand = load_schedule(examples / "two_stage_1f1b.json")
    from_csv = load_schedule(examples / "two_stage_1f1b.csv")
    assert fields(by_hand) == fields(from_csv)


@pytest.mark.parametrize("suffix", [".json", ".csv"])
def test_a_saved_plugin_schedule_loads_in_a_process_without_the_plugin(suffix, tmp_path,
                                                                       fresh_plugins):
    """issue 48: --save of a plugin's schedule writes a standalone file ("custom", its
    weight mode and placement kept): a fresh process without the plugin reads it, shows it
    and trains on it."""
    import os
    import subprocess
    from pathlib import Path

    saved = tmp_path / f"eager{suffix}"
    assert main(["schedule", "--plugin", EAGER, "eager-1f1b", "-P", "2", "-M", "4",
                 "--save", str(saved)]) == 0
    rows = build_schedule("eager-1f1b", 2, 4).rows()
    root = Path(__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k != plugins.ENV_VAR}
    env["PYTHONPATH"] = str(root)
    child = (
        "import sys\n"
        "from pipemare_lite.schedules.io import load_schedule\n"
        "from pipemare_lite.schedules.registry import BUILDERS\n"
        f"s = load_schedule({str(saved)!r})\n"
        "assert 'eager-1f1b' not in BUILDERS and 'docs.examples.eager_1f1b' not in sys.modules\n"
        "import json; print(json.dumps([s.name, s.weight_mode, s.rows()]))\n"
    )
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                            cwd=tmp_path, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["custom", "sync", rows]
    trained = subprocess.run(
        [sys.executable, "-m", "pipemare_lite", "train", "--schedule", str(saved), "--epochs",
         "1", "--batch-size", "256", "--width", "8", "--lr", "0.05", "--json"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert trained.returncode == 0, trained.stderr
    if suffix == ".json":
        note = json.loads(saved.read_text())["notes"][-1]
        assert note == "built by registered schedule 'eager-1f1b' (module docs.examples.eager_1f1b)"
