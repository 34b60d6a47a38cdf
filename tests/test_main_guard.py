"""launch() at the top level of a script without the __main__ guard: one clear error, at once."""

from __future__ import annotations

import subprocess
import sys
import time

from pipemare_lite.engine.distributed.main_guard import guarded_lines

SCRIPT = """\
import sys
sys.path.insert(0, {root!r})
from pipemare_lite.engine.distributed.launch import launch, ping
{call}
"""


def test_guarded_lines_find_the_main_block():
    source = ("x = 1\nif __name__ == '__main__':\n    run()\n    more()\n"
              "if '__main__' == __name__:\n    y()\n")
    assert guarded_lines(source) == [range(2, 5), range(5, 7)]
    assert guarded_lines("if __name__ != '__main__':\n    run()\n") == []


def test_an_unguarded_launch_is_explained_before_any_rank_starts(tmp_path):
    root = str(__import__("pathlib").Path(__file__).parent.parent)
    script = tmp_path / "train_me.py"
    script.write_text(SCRIPT.format(root=root, call="print(launch(ping, 2, timeout=60))"))
    start = time.monotonic()
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert time.monotonic() - start < 60
    assert ("MainGuardError: train_me.py line 4 (print(launch(ping, 2, timeout=60))) starts one "
            "process per rank (launch()) at the top level") in done.stderr
    assert 'if __name__ == "__main__":' in done.stderr
    assert "bootstrapping phase" not in done.stderr and "no error report" not in done.stderr
    guarded = SCRIPT.format(root=root, call="if __name__ == '__main__':\n"
                            "    print([r['rank'] for r in launch(ping, 2, timeout=60)])")
    script.write_text(guarded)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0, 1]"


def test_a_package_main_module_may_launch_at_its_top_level(tmp_path):
    # ``python -m package`` (as ``python -m pipemare_lite gpu-check`` does): multiprocessing
    # never re-runs a package's __main__ in the children, so no guard is needed there
    root = str(__import__("pathlib").Path(__file__).parent.parent)
    package = tmp_path / "launcher_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(SCRIPT.format(
        root=root, call="print([r['rank'] for r in launch(ping, 2, timeout=60)])"))
    done = subprocess.run([sys.executable, "-m", "launcher_pkg"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[0, 1]"
