"""The command line entry points: ``python -m pipemare_lite`` and the ``pipemare-lite`` script."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from pipemare_lite import cli

INSTALLED_VERSION = version("pipemare-lite")  # what pip recorded, independent of the code


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def test_module_version_matches_the_installed_distribution():
    done = _run(sys.executable, "-m", "pipemare_lite", "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"pipemare-lite {INSTALLED_VERSION}"


def test_console_script_is_installed_and_reports_the_version():
    script = Path(sys.executable).with_name("pipemare-lite")
    assert script.is_file(), f"{script} missing: reinstall with `bash scripts/bootstrap.sh`"
    done = _run(str(script), "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"pipemare-lite {INSTALLED_VERSION}"


def test_help_lists_every_subcommand(capsys):
    assert cli.main([]) == 0
    printed = capsys.readouterr().out
    for name in cli.SUBCOMMANDS:
        assert name in printed


def test_the_readme_lists_every_subcommand_in_the_clis_order():
    # README's "Command line" section: one "- `name`: ..." line per subcommand
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Command line\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^- `([a-z][a-z-]*)`:", section, flags=re.M)
    assert listed == list(cli.SUBCOMMANDS), (listed, list(cli.SUBCOMMANDS))


def test_unknown_subcommand_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["no-such-command"])
    assert exit_info.value.code == 2
    assert "no-such-command" in capsys.readouterr().err


def test_book_subcommand_documents_its_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["book", "--help"])
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    for option in ("--out", "--chapters", "--timeout", "--keep-going"):
        assert option in printed


def test_book_with_an_unknown_chapter_names_the_allowed_ones(tmp_path, capsys):
    (tmp_path / "00_only.ipynb").write_text("{}")
    argv = ["book", "--out", str(tmp_path / "out"), "--chapters-dir", str(tmp_path)]
    assert cli.main(argv + ["--chapters", "09"]) == 2
    assert "allowed: 00_only" in capsys.readouterr().err


def test_an_internal_key_error_is_a_traceback_not_bad_input(monkeypatch, capsys):
    # only the project's input errors (ValueError and its subclasses) become "error: ..."
    # with exit code 2; a KeyError from inside is a bug and must show its traceback
    from pipemare_lite.cli.commands import schedule

    def broken(args):
        raise KeyError("seed")

    monkeypatch.setattr(schedule, "run", broken)
    with pytest.raises(KeyError, match="seed"):
        cli.main(["schedule", "gpipe", "-P", "2", "-M", "2"])
    assert "error:" not in capsys.readouterr().err


def test_the_train_module_entry_point_shows_an_internal_key_error(monkeypatch):
    from pipemare_lite.cli.commands import train

    def broken(args, **options):
        raise KeyError("stage_lr")

    monkeypatch.setattr(train, "run_from_args", broken)
    with pytest.raises(KeyError, match="stage_lr"):
        train.main(["--method", "1f1b"])


def test_python_m_training_is_the_train_command():
    # torchrun's entry point: ``python -m pipemare_lite.training`` (training/__main__.py)
    done = subprocess.run([sys.executable, "-m", "pipemare_lite.training", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: python -m pipemare_lite.training")
    assert "--method" in done.stdout


def test_fit_does_not_import_the_command_line():
    # the training loop is a library; the command line imports it, never the other way
    child = ("import sys, pipemare_lite.training.loop\n"
             "print(sorted(m for m in sys.modules if m.startswith('pipemare_lite.cli')))")
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]"
