"""The job key under torchrun without PIPEMARE_JOB_TOKEN (issue 47, item 3: F4).

The key file used to sit in the shared temporary folder under a name anyone could compute
(the agent's pid, the run id), so another local user who created it first stopped the job.
It now lives in a folder only this user can write (faults.private_key_folder). The other
user is real where the tests run as root (a child process that drops to uid 65534,
"nobody", forked, not exec'd), working in a folder it can reach (so that the key folder's
own mode is what stops it); elsewhere those cases are skipped, and the refusal of a
folder others may write is still tested with its mode.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from pipemare_lite.engine.distributed import faults

OTHER_UID = 65534  # nobody
as_root = pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0,
                             reason="a second uid needs root here (setuid in a child)")


@pytest.fixture
def one_machine_job(tmp_path, monkeypatch):
    """torchrun's environment for two ranks on this machine, no token, a private runtime
    folder in tmp_path, and a home of its own (the real one's key folder is never made or
    touched)."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    (tmp_path / "fixture-home").mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(tmp_path / "fixture-home"))
    monkeypatch.delenv(faults.TOKEN_ENV, raising=False)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    return runtime / "pipemare-lite"


def _as_other_user(action) -> int:
    """``action()`` in a forked child that has become uid/gid 65534 first (no exec: the
    other user may not read this Python); returns its int result (0..255), or 99 if it
    raised."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 99
        try:
            os.setgroups([])
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            code = int(action())
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _refused(attempt) -> bool:
    try:
        attempt()
    except PermissionError:
        return True
    return False


@pytest.fixture
def reachable_runtime(monkeypatch):
    """A runtime folder that uid 65534 can reach and list (pytest's tmp_path sits under a
    0700 folder of root's, which would refuse the other user before the key folder's own
    mode is tried), writable only by this user; removed afterwards."""
    import shutil

    top = Path(tempfile.mkdtemp(prefix="pipemare-job-key-test-"))
    top.chmod(0o755)
    runtime = top / "runtime"
    runtime.mkdir(mode=0o755)
    runtime.chmod(0o755)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    yield runtime
    shutil.rmtree(top)


@as_root
def test_a_key_file_another_user_made_first_does_not_stop_the_job(one_machine_job,
                                                                  reachable_runtime):
    """F4 as the tester did it, with a real second uid: the old, predictable name in the
    shared temporary folder, created first by uid 65534 with a key of its own; then the
    other user, who can reach and list the runtime folder, tries the key folder itself."""
    one_machine_job = reachable_runtime / "pipemare-lite"
    folder = Path(tempfile.gettempdir())
    old_name = folder / f"pipemare-job-{os.getppid()}-{_run_hash('none')}.key"

    def plant_old():
        fd = os.open(old_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"attacker")
        return 0

    assert _as_other_user(plant_old) == 0
    try:
        assert old_name.stat().st_uid == OTHER_UID
        first, second = faults.torchrun_secret(), faults.torchrun_secret()  # two ranks
        assert first == second and len(first) == 64 and first != b"attacker"
        (key,) = one_machine_job.glob("pipemare-job-*.key")
        assert key.stat().st_uid == os.getuid() and key.stat().st_mode & 0o777 == 0o600
        assert one_machine_job.stat().st_mode & 0o777 == 0o700

        # the other user reaches the folder above it (so what stops it below is the key
        # folder's own mode, not a folder higher up) ...
        assert _as_other_user(lambda: os.listdir(reachable_runtime) == ["pipemare-lite"]) == 1

        def plant_read_list():  # ... but cannot plant, read or list in the key folder
            attempts = (
                lambda: os.open(key, os.O_WRONLY | os.O_TRUNC),  # the name it can compute
                lambda: os.open(one_machine_job / "planted.key", os.O_WRONLY | os.O_CREAT),
                lambda: key.read_bytes(),
                lambda: os.listdir(one_machine_job),
            )
            return sum(_refused(a) << i for i, a in enumerate(attempts))

        assert _as_other_user(plant_read_list) == 0b1111
        assert sorted(p.name for p in one_machine_job.iterdir()) == [key.name]
        faults.forget_torchrun_secret()
        assert not key.exists()
    finally:
        old_name.unlink()


def _run_hash(run_id: str) -> str:
    import hashlib

    return hashlib.sha256(run_id.encode()).hexdigest()[:16]


def test_a_folder_others_can_write_is_refused_and_the_token_asked_for(one_machine_job,
                                                                      monkeypatch, tmp_path):
    one_machine_job.mkdir(mode=0o700)
    one_machine_job.chmod(0o777)  # as if someone else had made it, open to all
    home = tmp_path / "home"
    (home / ".cache").mkdir(parents=True)
    (home / ".cache").chmod(0o777)  # a home whose cache others may write
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(ValueError) as refused:
        faults.torchrun_secret()
    said = str(refused.value)
    assert f"{one_machine_job} is owned by uid {os.getuid()} with mode 0o777 (needed: uid " \
           f"{os.getuid()}, 0700)" in said
    assert f"{home / '.cache'} is writable by others (uid {os.getuid()}, mode 0o777)" in said
    assert f"set {faults.TOKEN_ENV} to the same secret in every rank's environment" in said
    monkeypatch.setenv(faults.TOKEN_ENV, "given")  # the token needs no folder
    assert faults.torchrun_secret() == b"given"


def test_without_a_runtime_folder_the_key_goes_under_home(one_machine_job, monkeypatch,
                                                          tmp_path):
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    key = faults.torchrun_secret()
    assert len(key) == 64
    folder = home / ".cache" / "pipemare-lite" / "jobs"
    assert folder.stat().st_mode & 0o777 == 0o700
    assert [p.read_bytes().strip() for p in folder.glob("*.key")] == [key]


@as_root
def test_a_key_folder_another_user_made_first_is_not_used(one_machine_job, reachable_runtime,
                                                          monkeypatch, tmp_path):
    """A runtime folder others may write (sticky, as /tmp is): uid 65534 makes the
    ``pipemare-lite`` folder first, with a key file under the name the ranks will compute.
    The ranks refuse that folder (another owner) and keep their key under this user's
    home instead; the planted key is never read."""
    reachable_runtime.chmod(0o1777)
    planted_folder = reachable_runtime / "pipemare-lite"
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    name = f"pipemare-job-{os.getppid()}-{_run_hash('none')}.key"

    def plant():
        planted_folder.mkdir(mode=0o755)
        fd = os.open(planted_folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, b"attacker")
        return 0

    assert _as_other_user(plant) == 0
    assert planted_folder.stat().st_uid == OTHER_UID
    key = faults.torchrun_secret()
    assert key != b"attacker" and len(key) == 64 and faults.torchrun_secret() == key
    mine = home / ".cache" / "pipemare-lite" / "jobs" / name
    assert mine.read_bytes().strip() == key and mine.stat().st_uid == os.getuid()
    faults.forget_torchrun_secret()
    assert not mine.exists() and (planted_folder / name).exists()  # theirs left alone


@as_root
def test_a_folder_another_user_owns_is_refused(one_machine_job, monkeypatch, tmp_path):
    one_machine_job.mkdir(mode=0o700)
    os.chown(one_machine_job, OTHER_UID, OTHER_UID)  # made first by the other user
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    (tmp_path / "nohome").mkdir(mode=0o700)
    os.chown(tmp_path / "nohome", OTHER_UID, OTHER_UID)  # and a home that is not ours
    with pytest.raises(ValueError, match=f"{one_machine_job} is owned by uid {OTHER_UID}"):
        faults.torchrun_secret()
