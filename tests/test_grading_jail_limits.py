"""Issue 46, the open results of the independent hostile pass: the jail's limits.

Each test performs one attack of that pass as a hostile student would hand it in, and says
what it did before (main at 048a9a6, re-run there with these tests' notebooks) and asserts
what it does now. The jail is bubblewrap; without it these tests skip loudly
(``tests/sandbox_required.py``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from pipemare_lite.book.exercises import memory_cgroup
from pipemare_lite.book.exercises.grading import grade_submission
from pipemare_lite.book.exercises.sandbox import JAIL_UID_BASE
from tests.notebook_files import write_notebook
from tests.sandbox_required import _sandbox_or_fail, requires_sandbox  # noqa: F401

pytestmark = requires_sandbox


def _jail_pids() -> list[int]:
    """Pids on this machine running as a jail's own uid (student code, any grader)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid >= JAIL_UID_BASE:
                    found.append(int(entry))
            except OSError:
                pass
    return found


def _proportional_bytes(pid: int) -> int:
    """The process's proportional share of the memory it maps (Pss: a page shared by n
    processes counts 1/n in each), so summing over processes counts each page once."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    for line in text.split("\n"):
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


def _processes_with(token: str) -> list[int]:
    """Pids whose command line mentions ``token``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


#: Chapter 01's answer that forks children which each touch ``MiB`` of memory and hold it.
BIG_FORKS = """
import os, time
_done = []
def naive_utilization(stage_costs):
    if not _done:
        _done.append(1)
        for _ in range({children}):
            if os.fork() == 0:
                try:
                    held = b"x" * ({mib} * 2**20)
                    time.sleep(8)
                finally:
                    os._exit(0)
        time.sleep(10)
    return [c / sum(stage_costs) for c in stage_costs]
"""


def test_a_fork_bomb_of_big_allocations_stays_within_memory_mb(tmp_path):
    """Before: every forked child had its own RLIMIT_AS of ``--memory-mb``, so 8 children
    of 200 MiB each held 1,6xx MiB at once against a 500 MiB setting (re-run at 048a9a6;
    the hostile pass: 5.3 GB against 4 GiB). Now the jail's processes share one memory
    cgroup: together they stay within ``--memory-mb`` (the kernel kills the answer's own
    processes first); without a cgroup on the machine, the process cap bounds them (the
    test then checks that bound)."""
    memory_mb, children, mib = 500, 8, 200
    folder = write_notebook(tmp_path / "hog" / "01_naive.ipynb",
                            BIG_FORKS.format(children=children, mib=mib)).parent
    done, peak = threading.Event(), [0]

    def sample():
        while not done.is_set():
            pids = _jail_pids()
            peak[0] = max(peak[0], sum(_proportional_bytes(p) for p in pids))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        report = grade_submission(folder, ["ex01_2"], memory_mb=memory_mb, timeout=30)
    finally:
        done.set()
        sampler.join()
    peak_mib = peak[0] / 2**20
    print(f"student processes' peak: {peak_mib:.0f} MiB (memory_mb={memory_mb})")
    assert report.grades[0].status in ("passed", "crashed"), report.grades[0].message
    with_cgroup, _where = memory_cgroup.available()
    if with_cgroup:  # the cap is what the worker held when ready plus memory_mb: the
        # students' processes also share pages with the worker (counted here in part) and
        # may take what the worker's file cache gives back
        assert peak_mib <= memory_mb + 128, peak_mib
        _version, parent = memory_cgroup._place()
        assert list(parent.glob(f"{memory_cgroup.PREFIX}{os.getpid()}-*")) == []  # removed
    else:
        from pipemare_lite.book.exercises.worker import FALLBACK_PROCESSES

        assert peak_mib <= (FALLBACK_PROCESSES + 1) * memory_mb, peak_mib


#: An answer that starts a daemon which hops to a new pid every 50 ms (fork, the parent
#: exits, the child re-executes itself), so no pid it had stays valid for long.
HOPPER = '''
import os, subprocess, sys
CODE = """
import os, sys, time
while True:
    time.sleep(0.05)
    if os.fork() == 0:
        os.setsid()
        os.execv(sys.executable, [sys.executable, "-c", sys.argv[1], sys.argv[1], sys.argv[2]])
    os._exit(0)
"""
_started = []
def naive_utilization(stage_costs):
    if not _started:
        _started.append(subprocess.Popen([sys.executable, "-c", CODE, CODE, "{token}"],
                                         start_new_session=True))
    return [c / sum(stage_costs) for c in stage_costs]
'''
#: The next exercise of the same jail counts the hopper's processes it can see.
COUNTER = '''
import os
def naive_start_times(P, F, B):
    seen = 0
    for entry in os.listdir("/proc"):
        try:
            seen += entry.isdigit() and b"{token}" in open(f"/proc/{{entry}}/cmdline", "rb").read()
        except OSError:
            pass
    return seen
'''


def test_a_re_forking_daemon_dies_with_its_exercise(tmp_path):
    """Before (the hostile pass): 31 re-forking processes outlived their exercise. Now the
    next exercise of the same jail finds none of them, and none is left on the machine when
    grading ends (the jail's pid namespace, and its cgroup where there is one, are killed
    whole)."""
    token = f"hopper-46-{os.getpid()}"
    folder = write_notebook(tmp_path / "hopper" / "01_naive.ipynb",
                            HOPPER.replace("{token}", token), COUNTER.format(token=token)).parent
    report = grade_submission(folder, ["ex01_2", "ex01_3"], timeout=20)
    grades = {g.exercise_id: g for g in report.grades}
    assert grades["ex01_2"].points == 1, grades["ex01_2"].message  # right, and harmless now
    assert "returned 0" in grades["ex01_3"].message, grades["ex01_3"].message
    time.sleep(0.5)
    assert _processes_with(token) == []


#: An answer that says who it is and what it can do, and what its worker can do (in the
#: text of an exception, which the feedback shows).
WHO = '''
import os
def _fields(pid):
    text = open(f"/proc/{pid}/status").read()
    return {k: v.strip() for k, _, v in (l.partition(":") for l in text.split("\\n")) if v}
def naive_utilization(stage_costs):
    me, worker = _fields("self"), _fields(os.getppid())
    caps = int(me["CapEff"], 16) | int(me["CapPrm"], 16) | int(me["CapAmb"], 16)
    uid = os.getuid() if os.getuid() == os.geteuid() else -1
    raise RuntimeError(f"WHO {[uid, caps, int(me['NoNewPrivs']), int(worker['CapEff'], 16)]}")
'''


def test_student_code_and_its_worker_hold_no_root_capabilities(tmp_path):
    """Before: bubblewrap started as root keeps every capability unless told to drop them
    (``--cap-add`` only adds), so the worker ran as root with all of them (``CapEff
    000001fffeffffff``: mount, raw devices, module loading ... one bug away from the host).
    Now bubblewrap drops all (``--cap-drop ALL``) and gives the worker only the four it
    needs (set uid and gid, chown, kill: ``0xe1``); the answer runs as the jail's own uid
    with no capability, and with no new privileges (no setuid program gives any back)."""
    folder = write_notebook(tmp_path / "who" / "01_naive.ipynb", WHO).parent
    (grade,) = grade_submission(folder, ["ex01_2"]).grades
    said = re.search(r"WHO (\[[-0-9, ]*\])", grade.message)
    assert said, grade.message
    uid, capabilities, no_new_privileges, worker = json.loads(said[1])
    if os.geteuid() == 0:
        assert uid >= JAIL_UID_BASE  # (and its effective uid the same)
        assert worker == 0xE1, hex(worker)  # CAP_CHOWN, CAP_KILL, CAP_SETGID, CAP_SETUID
    else:  # a user namespace maps the grader to 65534
        assert uid == 65534
    assert capabilities == 0  # effective, permitted and ambient
    assert no_new_privileges == 1


#: The grader in a process of its own: grades an honest notebook, then one whose answer
#: returns a 27 MB result line, and prints its own peak resident memory after each.
GRADER_PEAKS = """
import resource, sys
from pathlib import Path
from pipemare_lite.book.exercises.grading import grade_submission
for name in ("honest", "huge"):
    (grade,) = grade_submission(Path(sys.argv[1]) / name, ["ex01_2"], timeout=300,
                                budget=900).grades
    print(name, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, grade.points,
          repr(grade.message), flush=True)
"""


def test_a_27_mb_result_line_costs_the_grader_no_memory(tmp_path):
    """Before: an answer whose results made a 27 MB JSON line (190,000 empty dicts per
    case, under the 200,000 items an answer may have: 18 bytes each as JSON, a few hundred
    once decoded) passed the worker's 32 MiB cap; the grader read it and decoded it whole,
    and its peak memory went from 82 MiB to 557 MiB (re-run at 048a9a6, after 141 s; 1.25
    GB in the hostile pass). Now results are read as they stream in and refused past 1 MiB,
    never decoded: 0 points, "output too large", and the grader's peak does not move."""
    write_notebook(tmp_path / "honest" / "01_naive.ipynb",
                   "def naive_utilization(stage_costs):\n"
                   "    return [c / sum(stage_costs) for c in stage_costs]\n")
    write_notebook(tmp_path / "huge" / "01_naive.ipynb",
                   "def naive_utilization(stage_costs):\n    return [{}] * 190_000\n")
    done = subprocess.run([sys.executable, "-c", GRADER_PEAKS, str(tmp_path)],
                          capture_output=True, text=True, timeout=1800, check=True)
    lines = {line.split()[0]: line.split(maxsplit=3)[1:] for line in done.stdout.splitlines()}
    honest_kib, huge_kib = int(lines["honest"][0]), int(lines["huge"][0])
    print(f"grader peak: {honest_kib >> 10} MiB after the honest one, "
          f"{huge_kib >> 10} MiB after the 27 MB one")
    assert lines["honest"][1] == "1" and lines["huge"][1] == "0", done.stdout
    assert "too large" in lines["huge"][2], lines["huge"][2]
    assert huge_kib - honest_kib < 64 * 1024, (honest_kib, huge_kib)


#: An answer that forks sleeping children until the kernel refuses, and says how many.
COUNT_FORKS = '''
import os, time
def naive_utilization(stage_costs):
    started = 0
    for _ in range(40):
        try:
            if os.fork() == 0:
                time.sleep(5)
                os._exit(0)
            started += 1
        except OSError:
            break
    raise RuntimeError(f"FORKED {started}")
'''


def test_without_a_memory_cgroup_the_process_cap_is_tighter(tmp_path, monkeypatch):
    """Where no memory cgroup can be made (forced here), each process keeps its own
    ``--memory-mb`` of address space, so the jail's total is bounded by the process cap
    instead: the answer may start at most ``FALLBACK_PROCESSES`` processes (with a cgroup:
    64), so the jail holds at most ``FALLBACK_PROCESSES + 1`` times ``--memory-mb``."""
    from pipemare_lite.book.exercises.worker import FALLBACK_PROCESSES, PROCESSES

    folder = write_notebook(tmp_path / "forks" / "01_naive.ipynb", COUNT_FORKS).parent
    counts = {}
    for mode in ("cgroup", "fallback"):
        if mode == "fallback":
            monkeypatch.setattr(memory_cgroup, "create", lambda memory_bytes: None)
        elif not memory_cgroup.available()[0]:
            continue
        (grade,) = grade_submission(folder, ["ex01_2"], timeout=300, budget=900).grades
        counts[mode] = int(re.search(r"FORKED (\d+)", grade.message)[1])
    assert counts["fallback"] <= FALLBACK_PROCESSES, counts
    assert counts.get("cgroup", PROCESSES - 1) > FALLBACK_PROCESSES, counts
