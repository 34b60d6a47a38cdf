"""The grading worker: runs no student code itself; forks one process per exercise that does.

Started by :mod:`pipemare_lite.book.exercises.grading` as
``python -m pipemare_lite.book.exercises.worker FD [--sandboxed]``, once per submission (and
again after an answer that timed out), inside a bubblewrap jail
(:mod:`~pipemare_lite.book.exercises.sandbox`) unless the instructor passed ``--no-sandbox``.
Its stdin carries length-prefixed frames from the grader (:func:`frame`): first the setup
(the locked engine modules' text, the notebooks' *contents*, which the grader read refusing
symbolic links, the limits and the jail's uid: no case and no exercise), then, one exercise
at a time, a header (the exercise's id, the name to read, the engine functions to switch
off) followed by that exercise's cases. The worker

1. imports the engine files that define a graded exercise's answer from the setup's text
   (those files are empty in the jail:
   :func:`~pipemare_lite.book.exercises.sandbox.locked_sources`) and forgets the text, so no
   answer can re-execute an engine function's source; imports what the notebooks need; makes
   the registry, the references and the chapter modules unimportable (and ``check`` a no-op
   that returns True); stays as it started (root in a jail started by root);
2. for each exercise: copies its notebook afresh onto its shelf (a folder of its own,
   read-only to the student's uid), forks the exercise's process, *then* reads the cases
   (so that process never holds them, nor any other exercise's), and talks to it over two
   pipes of its own: the process sends its load warnings and ``loaded``, gets its cases,
   and sends one ``result``; the worker passes on the first result under the id *it* is
   grading, only the keys of :data:`RESULT_KEYS`, and zeroes the cases' bytes; afterwards,
   in the jail, every process the exercise left is killed and the temporary files removed;
3. in the exercise's process (:func:`_exercise_process`), before any student code: every
   file descriptor but its two pipes is closed (no report pipe, no job pipe), the uid is
   dropped for good to the jail's own, memory, CPU time, file sizes, open files and
   processes are capped (:func:`resource.setrlimit`; the jail's memory as a whole by its
   cgroup where there is one, else by a tighter process cap: :data:`FALLBACK_PROCESSES`),
   it is made the first the OOM killer ends, and the engine functions answering
   this exercise and every exercise not graded yet are replaced, for good, by ones that
   raise: a wrapper fails however it reaches the engine (a thread, a profiler switched off,
   a table precomputed while the notebook loads), and no copy of the original code is left
   for an answer to dig out (the rule-3 watcher knows the functions by fingerprint only).
   It loads the notebook with :func:`~pipemare_lite.book.exercises.loader.load_from_notebook`
   and runs the answer on its cases (:mod:`~pipemare_lite.book.exercises.evaluate`).

The worker writes one JSON line per event to file descriptor FD: ``ready`` (once, before any
student code: the grader then sets the jail's memory cap and sends the first exercise),
``load``, ``warnings``,
``start``, ``result`` (values as :mod:`~pipemare_lite.book.exercises.plain` JSON, never
pickles), ``crashed`` (an exercise's process ended without a result: its exit code) and
``too big``. It never decides whether an answer is right; the grader trusts it only for what
the student's code returned, and decodes that with a fixed list of plain types. For
instructors: docs/instructors.md. Torch-free (the student's code may import torch).
"""

from __future__ import annotations

import importlib.abc
import json
import os
import pickle
import resource
import signal
import struct
import sys
import warnings
from collections.abc import Iterable
from pathlib import Path

#: Submodules of pipemare_lite.book.exercises the worker itself needs; all others are blocked.
ALLOWED = frozenset(
    {"check", "evaluate", "exercise", "harness", "hashing", "loader", "originality", "plain",
     "sandbox", "worker"}
)
PACKAGE = "pipemare_lite.book.exercises"


class _BlockExerciseDefinitions(importlib.abc.MetaPathFinder):
    """Refuses every ``pipemare_lite.book.exercises`` submodule outside :data:`ALLOWED`."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(PACKAGE + "."):
            if fullname[len(PACKAGE) + 1 :].split(".")[0] not in ALLOWED:
                raise ImportError(
                    f"{fullname} is not available while grading (the grader keeps the "
                    "exercise definitions to itself)"
                )
        return None


def _no_check(*_args, **_kwargs) -> bool:
    """``check`` while grading: the grader judges, so a check cell does nothing."""
    return True


#: Most processes (threads count) the student's code may have, beyond the worker's own,
#: where the jail has a memory cgroup (:mod:`~pipemare_lite.book.exercises.memory_cgroup`:
#: its processes together are capped at ``--memory-mb``).
PROCESSES = 64
#: The same without a memory cgroup: each process has its own ``--memory-mb`` of address
#: space, so the jail's total stays below ``FALLBACK_PROCESSES + 1`` times it.
FALLBACK_PROCESSES = 8
#: Most open files.
OPEN_FILES = 256


def _processes_of_this_uid() -> int:
    uid, count = os.getuid(), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                count += os.stat(f"/proc/{entry}").st_uid == uid
            except OSError:
                pass
    return count


def _limit(memory_bytes: int, cpu_seconds: int, sandboxed: bool = False,
           processes: int = PROCESSES) -> None:
    limits = [
        (resource.RLIMIT_AS, memory_bytes),
        (resource.RLIMIT_CPU, cpu_seconds),
        (resource.RLIMIT_FSIZE, 256 * 2**20),  # no file written larger than 256 MiB
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NOFILE, OPEN_FILES),
    ]
    if sandboxed:  # counted per real uid, this jail's own (or 65534 in its own user namespace)
        limits.append((resource.RLIMIT_NPROC, _processes_of_this_uid() + processes))
    for limit, value in limits:
        if value:
            _soft, hard = resource.getrlimit(limit)
            capped = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(limit, (capped, capped))


def _hide_definitions() -> None:
    for name in list(sys.modules):
        if name.startswith(PACKAGE + ".") and name[len(PACKAGE) + 1 :] not in ALLOWED:
            del sys.modules[name]
    sys.meta_path.insert(0, _BlockExerciseDefinitions())
    package = sys.modules[PACKAGE]
    package.check = _no_check  # the chapters' `from pipemare_lite.book.exercises import check`


def _drop_privileges(uid: int) -> None:
    """In a jail started by root: everything writable to ``uid`` (this jail's own, from the
    grader: :func:`~pipemare_lite.book.exercises.sandbox.worker_uid`), then become it for
    good, gid too."""
    if os.geteuid() != 0:
        return  # a user namespace already made us 65534
    from pipemare_lite.book.exercises.sandbox import TMP_DIR, WORK_DIR

    if isinstance(uid, bool) or not isinstance(uid, int) or not 0 < uid < 2**31:
        raise SystemExit(f"the grading worker got no usable uid to run as: {uid!r}")
    for place in (WORK_DIR, TMP_DIR):  # the notebooks' shelf stays root's, read-only
        os.chown(place, uid, uid)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise SystemExit("the grading worker could not drop its privileges")


class _CodePrints:
    """The engine's answering functions as the rule-3 watcher knows them in a notebook's
    process: by a fingerprint of their code (its hash and name), never the code itself. A
    process that held the original code objects (as a dict of them did) let an answer dig
    one out with :func:`gc.get_objects` and rebuild the function, never switched off."""

    def __init__(self, codes: dict):
        self.names = {(hash(code), code.co_name): name for code, name in codes.items()}

    def __contains__(self, code) -> bool:
        return (hash(code), code.co_name) in self.names

    def __getitem__(self, code) -> str:
        return self.names[(hash(code), code.co_name)]

    def __len__(self) -> int:
        return len(self.names)


def _switch_off(names: set[str]) -> None:
    """Engine functions (or classes) that answer exercises, switched off for good in this
    process, keeping no copy of what they were.

    A function's code object is replaced by one that raises
    :class:`~pipemare_lite.book.exercises.originality.EngineAnswerSwitchedOff`, so every alias,
    import and caller inside the engine reaches the raising one; a class's ``__init__`` and
    ``__new__`` raise. Nothing holds the original code afterwards (the process that needs a
    function on again is another fork of the worker), so no answer can find it. A name that
    cannot be resolved is left alone (the watcher of rule 3 still sees it).
    """
    from pipemare_lite.book.exercises.originality import resolve

    for name in sorted(names):
        try:
            target = resolve(name)
        except Exception:  # noqa: BLE001
            continue
        if isinstance(target, type):
            raiser = _raiser(name, 0)
            target.__init__ = raiser
            target.__new__ = staticmethod(raiser)
            continue
        function = getattr(target, "__func__", target)
        function = getattr(function, "__wrapped__", function)
        code = getattr(function, "__code__", None)
        if code is not None:
            function.__code__ = _raiser(name, len(code.co_freevars)).__code__


def _raiser(name: str, free_variables: int):
    """A function that raises EngineAnswerSwitchedOff(name), with as many free variables as
    the code it replaces (a closure's code needs the same number)."""
    names = [f"_v{i}" for i in range(free_variables)] or ["_unused"]
    source = (
        "def outer():\n"
        + "".join(f"    {n} = None\n" for n in names)
        + "    def inner(*_a, **_k):\n"
        + (f"        ({', '.join(names)},)\n" if free_variables else "")
        # an import, not a global: the code runs with the engine module's globals
        + "        from pipemare_lite.book.exercises.originality import EngineAnswerSwitchedOff\n"
        + f"        raise EngineAnswerSwitchedOff({name!r})\n"
        + "    return inner\n"
    )
    namespace: dict = {}
    exec(source, namespace)  # the grader's own text: a name from its registry
    return namespace["outer"]()


def _send(stream, event: dict) -> None:
    stream.write(json.dumps(event) + "\n")
    stream.flush()


def _encoded(evaluation) -> dict:
    from pipemare_lite.book.exercises.plain import to_plain

    result = {"status": evaluation.status, "detail": evaluation.detail, "outcomes": []}
    try:
        result["value"] = to_plain(evaluation.value)
    except ValueError as exc:
        result["value"] = None
        result["detail"] = f"the value cannot be graded: {exc}"
    for outcome in evaluation.outcomes:
        if outcome.error is not None:
            result["outcomes"].append({"error": outcome.error})
            continue
        try:
            result["outcomes"].append({"value": to_plain(outcome.value)})
        except ValueError as exc:
            result["outcomes"].append({"error": f"returned a value that cannot be graded: {exc}"})
    return result


#: Bytes of a frame's length prefix (grader -> worker, worker -> exercise process).
_FRAME = struct.Struct(">Q")
#: Largest frame the worker reads (the notebooks travel in the first one).
MAX_FRAME_BYTES = 1 << 30
#: Most bytes one message of an exercise's process may have: read as it streams in and
#: refused past this ("too big"), never decoded. Every reference answer's results on the
#: graded cases take under 6 KB of JSON; a 27 MB result line (the hostile pass's), read and
#: decoded whole, took the grader to 1.25 GB.
MAX_EVENT_BYTES = 2**20
#: Most warnings (and characters each) an exercise's process sends of its notebook's load;
#: the rest are counted, not sent.
MAX_WARNINGS, MAX_WARNING_CHARS = 50, 500
#: Keys of an exercise process's ``result`` message the worker passes on (nothing else).
RESULT_KEYS = ("status", "detail", "outcomes", "value", "missing")


def frame(data: bytes) -> bytes:
    """``data`` with its length in front, as the worker reads it (:func:`_read_frame`)."""
    return _FRAME.pack(len(data)) + data


def _read_into(fd: int, buffer: bytearray) -> bool:
    """Fill ``buffer`` from ``fd`` in place (no copy of it left elsewhere); False at EOF."""
    view, got = memoryview(buffer), 0
    while got < len(buffer):
        count = os.readv(fd, [view[got:]])
        if count == 0:
            return False
        got += count
    return True


def _read_frame(fd: int) -> bytearray | None:
    """The next frame on ``fd`` as a bytearray (to be zeroed after use), None at EOF."""
    head = bytearray(_FRAME.size)
    if not _read_into(fd, head):
        return None
    (size,) = _FRAME.unpack(head)
    if size > MAX_FRAME_BYTES:
        raise SystemExit(f"the grading worker got a frame of {size} bytes")
    body = bytearray(size)
    return body if _read_into(fd, body) else None


def _wipe(buffer: bytearray | None) -> None:
    """Zero ``buffer`` in place: the next exercise's process, forked later, finds no trace."""
    if buffer is not None:
        buffer[:] = bytes(len(buffer))


def main(argv: list[str]) -> int:
    """Run the grader's jobs from stdin and report on file descriptor ``argv[0]`` (see the
    module docstring). This process runs no student code: each exercise runs in a process
    forked from it (:func:`_exercise_process`)."""
    sandboxed = "--sandboxed" in argv[1:]
    setup = _read_frame(0)
    if setup is None:
        return 0
    # from the grader, before any student code: the locked engine modules' text first (the
    # job's cases may be engine objects whose unpickling imports those modules)
    layers = pickle.loads(setup)
    _wipe(setup)
    _import_locked(layers["locked"])
    job = pickle.loads(layers.pop("job"))
    report = os.fdopen(int(argv[0]), "w", encoding="utf-8")
    if sandboxed:  # nothing importable from the working directory, where students write
        sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd(), ".")]
    else:
        os.chdir(job["cwd"])  # a private folder the grader made
    notebooks = {Path(nb["path"]).name: bytes(nb["data"]) for nb in job.pop("notebooks")}
    shelf = _make_shelf(sandboxed)
    from pipemare_lite.book.exercises import evaluate  # noqa: F401 - imported once, here

    _preload(notebooks.values(), job.get("needs_torch", False), job.get("answers", ()))
    _warm_up_the_loader()
    _hide_definitions()
    _not_traceable()
    _send(report, {"event": "ready"})  # no student code yet: the grader sets the memory cap
    while True:
        header = _read_frame(0)
        if header is None:
            break
        task = pickle.loads(header)  # names and options only: the cases come after the fork
        _wipe(header)
        _one_exercise(task, notebooks, shelf, job, report, sandboxed)
    report.close()
    return 0


def _make_shelf(sandboxed: bool) -> Path:
    """The folder the notebooks are copied into before each load: made by this process
    (root, in a jail started by root), so the student's uid can read it, not write it."""
    from pipemare_lite.book.exercises.sandbox import SHELF_DIR

    shelf = Path(SHELF_DIR if sandboxed else "notebooks").resolve()
    shelf.mkdir(mode=0o755, exist_ok=True)
    return shelf


def _shelve(shelf: Path, name: str, data: bytes) -> Path:
    """A fresh, read-only copy of notebook ``name`` on the shelf (whatever was there before,
    a previous exercise's process included, is replaced)."""
    os.chmod(shelf, 0o755)
    path = shelf / Path(name).name
    if path.is_symlink() or path.exists():
        if path.is_dir() and not path.is_symlink():
            import shutil

            shutil.rmtree(path)
        else:
            path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(shelf, 0o555)
    return path


def _one_exercise(task: dict, notebooks: dict, shelf: Path, job: dict, report,
                  sandboxed: bool) -> None:
    """Fork the process that runs exercise ``task``, hand it its cases once it has loaded
    the notebook, and pass on to the grader what it says, for ``task``'s id only, once."""
    _send(report, {"event": "load", "id": task["id"], "notebook": task["notebook"]})
    path = _shelve(shelf, task["notebook"], notebooks.get(task["notebook"], b""))
    result_r, result_w = os.pipe()
    cases_r, cases_w = os.pipe()
    child = os.fork()
    if child == 0:
        code = 0
        try:
            os.close(result_r)
            os.close(cases_w)
            _exercise_process(task, path, result_w, cases_r, job, sandboxed)
        except BaseException:  # noqa: BLE001 - whatever the student's code did
            code = 70
        os._exit(code)
    os.close(result_w)
    os.close(cases_r)
    cases = _read_frame(0)  # read after the fork: the exercise's process never had it
    try:
        _converse(task, child, result_r, cases_w, cases, report)
    finally:
        _wipe(cases)
        for fd in (result_r, cases_w):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(child, 0)
        except ChildProcessError:
            pass
        if sandboxed:
            _clean_up_after()


def _converse(task: dict, child: int, result_r: int, cases_w: int, cases, report) -> None:
    """Read the exercise process's messages: its load warnings (before it has loaded),
    ``loaded`` (then it gets its cases), one ``result`` (passed on, keys of
    :data:`RESULT_KEYS` only, under ``task``'s id). Anything else is dropped; an end without
    a result is reported as ``crashed`` with the exit code."""
    exercise, loaded, warned, buffer = task["id"], False, False, b""
    while True:
        chunk = os.read(result_r, 1 << 20)
        if not chunk:
            break
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            try:
                message = json.loads(line)
            except (ValueError, RecursionError):  # garbled, or nested past any answer
                continue
            kind = message.get("event") if isinstance(message, dict) else None
            if kind == "warnings" and not loaded and not warned:
                warned = True
                _send(report, _capped_warnings(exercise, task["notebook"], message))
            elif kind == "loaded" and not loaded:
                loaded = True
                _send(report, {"event": "start", "id": exercise})
                try:
                    os.write(cases_w, _FRAME.pack(len(cases or b"")))
                    view = memoryview(cases or b"")
                    while view:
                        view = view[os.write(cases_w, view):]
                    os.close(cases_w)
                except OSError:
                    pass
            elif kind == "result" and loaded:
                kept = {k: message[k] for k in RESULT_KEYS if k in message}
                _send(report, {"event": "result", "id": exercise, **kept})
                return
        if len(buffer) > MAX_EVENT_BYTES:
            _send(report, {"event": "too big", "id": exercise})
            return
    _pid, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    _send(report, {"event": "crashed", "id": exercise, "code": code})


def _capped_warnings(exercise: str, notebook: str, message: dict) -> dict:
    """The load warnings an exercise's process sent, at most :data:`MAX_WARNINGS` of
    :data:`MAX_WARNING_CHARS` characters, with the count and size of what was dropped."""
    texts = message.get("texts") if isinstance(message.get("texts"), list) else []
    kept = [str(t)[:MAX_WARNING_CHARS] for t in texts[:MAX_WARNINGS]]
    more = message.get("more", 0)
    more = more if type(more) is int and more >= 0 else 0
    return {"event": "warnings", "id": exercise, "notebook": notebook, "texts": kept,
            "more": more + max(0, len(texts) - MAX_WARNINGS)}


def _only_these_files(keep: set[int]) -> None:
    """Close every file descriptor but 1, 2 and ``keep``; stdin becomes /dev/null. The
    worker's report pipe and the grader's job pipe are gone from this process for good."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for entry in os.listdir("/proc/self/fd"):
        fd = int(entry)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _first_to_go() -> None:
    """This process and all it starts are the first the kernel's OOM killer ends when the
    jail reaches its memory cap (raising one's own score needs no privilege), never the
    worker."""
    try:
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")
    except OSError:
        pass


def _exercise_process(task: dict, path: Path, result_w: int, cases_r: int, job: dict,
                      sandboxed: bool) -> None:
    """One exercise, in a process of its own that holds only what the exercise needs.

    Before any student code: every file but its own two pipes is closed (no report pipe, no
    job pipe: its only voice is ``result_w``, read by the worker, which runs no student code
    and passes on one result under the id it chose), the student's uid is taken for good
    (in a jail started by root), the limits are set and the engine answers of every exercise
    not graded yet are switched off (``task["off"]``: those of exercises graded before stay
    on, a later answer may use them honestly: ex08_2 uses ex08_1's
    ``rescheduling_factor``). The notebook loads (its imports and definitions only) from a
    read-only copy; its warnings go out before the cases come in, through ``cases_r``."""
    from pipemare_lite.book.exercises import evaluate
    from pipemare_lite.book.exercises.loader import load_from_notebook

    _only_these_files({result_w, cases_r})
    _first_to_go()
    # the watcher of rule 3 needs the code objects' fingerprints before they are switched off
    codes = _CodePrints(evaluate.forbidden_codes(task["engine_answers"]))
    if sandboxed:
        _drop_privileges(job.get("uid"))
    _limit(job["memory_bytes"], job["cpu_seconds"], sandboxed,
           PROCESSES if job.get("memory_cgroup") else FALLBACK_PROCESSES)
    _switch_off(set(task["off"]) | set(task["engine_answers"]))
    out = os.fdopen(result_w, "w", encoding="utf-8")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            namespace = load_from_notebook(path, [task["name"]])
        except Exception as exc:  # an unreadable notebook costs its exercises only
            namespace = {}
            caught.append(warnings.WarningMessage(
                f"{path.name}: {type(exc).__name__}: {exc}", UserWarning, "", 0))
    texts = [str(w.message)[:MAX_WARNING_CHARS] for w in caught[:MAX_WARNINGS]]
    if texts:
        _send(out, {"event": "warnings", "texts": texts,
                    "more": max(0, len(caught) - MAX_WARNINGS)})
    del caught
    _send(out, {"event": "loaded"})
    cases = _read_frame(cases_r)
    os.close(cases_r)
    if task["name"] not in namespace:
        _send(out, {"event": "result", "missing": True})
        return
    answer = namespace[task["name"]]
    if task["kind"] == "constant":
        evaluation = evaluate.read_constant(answer)
    else:
        evaluation = evaluate.run_function(
            answer, pickle.loads(cases) if cases else [], task["engine_answers"],
            task.get("harness"), codes=codes, max_lines=task.get("max_lines"),
        )
    _send(out, {"event": "result", **_encoded(evaluation)})
    out.close()


class _LockedSources(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports the engine modules whose files are empty in the jail, from the job's text."""

    def __init__(self, sources: dict[str, dict]):
        self.sources = sources

    def find_spec(self, fullname, path=None, target=None):
        """A spec at the module's own path (``__file__`` as usual) for a locked module."""
        import importlib.util

        entry = self.sources.get(fullname)
        if entry is None:
            return None
        folder = [str(Path(entry["path"]).parent)] if entry["package"] else None
        return importlib.util.spec_from_file_location(
            fullname, entry["path"], loader=self, submodule_search_locations=folder)

    def create_module(self, spec):
        """The default module object."""
        return None

    def exec_module(self, module) -> None:
        """Run the module's text from the job (compiled under its real path)."""
        entry = self.sources[module.__name__]
        exec(compile(entry["source"], entry["path"], "exec", dont_inherit=True), module.__dict__)

    def get_source(self, fullname):
        """None: the text is gone once the worker has imported the modules."""
        return None


def _import_locked(sources: dict[str, dict]) -> None:
    """Import every locked module from its text (they import one another through the
    finder), then drop the finder and the text: ``inspect.getsource``, ``linecache`` and
    the files themselves give nothing afterwards. A module that fails to import is left
    out (an answer importing it fails the same way)."""
    import importlib

    finder = _LockedSources(sources)
    sys.meta_path.insert(0, finder)
    try:
        for name in sorted(sources):
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - e.g. torch missing: the answer will say
                sys.modules.pop(name, None)
    finally:
        sys.meta_path.remove(finder)
        sources.clear()


#: Packages the worker may import for the notebooks before any student code runs (each
#: notebook's process is forked from the worker and inherits them: an import is slow).
PRELOAD = frozenset({"numpy", "torch", "pipemare_lite", "math", "fractions", "itertools",
                     "functools", "collections", "random", "dataclasses", "typing", "heapq"})


def _preload(notebooks: Iterable[bytes], needs_torch: bool, answers: Iterable[str]) -> None:
    """Import, once and before any student code, what the exercises' processes will need:
    the modules of the engine answers they switch off (``answers``), torch when an exercise
    needs it, and the modules of :data:`PRELOAD` that the notebooks' ``import`` statements
    name (read with :mod:`ast`; nothing else is imported)."""
    import ast
    import importlib

    from pipemare_lite.book.exercises.originality import resolve

    for name in answers:
        try:
            resolve(name)
        except Exception:  # noqa: BLE001 - the exercise's process leaves it alone too
            pass
    wanted: set[str] = {"torch"} if needs_torch else set()
    for data in notebooks:
        try:
            cells = json.loads(data).get("cells", [])
        except Exception:  # noqa: BLE001 - the loader will say what is wrong
            continue
        for cell in cells if isinstance(cells, list) else []:
            if not isinstance(cell, dict) or cell.get("cell_type") != "code":
                continue
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else str(source)
            try:
                lines = source.split("\n")  # as the loader does (not str.splitlines)
                tree = ast.parse("\n".join(
                    line for line in lines if not line.lstrip().startswith(("%", "!"))))
            except (SyntaxError, ValueError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    wanted |= {alias.name for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    wanted.add(node.module)
    for name in sorted(wanted):
        if name.split(".")[0] in PRELOAD and not name.startswith(PACKAGE):
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the notebook's own import will say why
                pass


def _warm_up_the_loader() -> None:
    """Import nbformat and let it build its notebook validator once, here: every exercise's
    process is forked from the worker and would otherwise pay for both (seconds each on a
    loaded machine)."""
    import nbformat
    from nbformat.v4 import new_notebook

    nbformat.reads(nbformat.writes(new_notebook()), as_version=4)


def _not_traceable() -> None:
    """No process of the student's (same uid) may ptrace this one or read its memory."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:  # noqa: BLE001 - not Linux: no jail either
        pass


def _clean_up_after() -> None:
    """In the jail, after an exercise's process ended: kill every other process it left
    (``kill(-1)`` reaches all of the jail's uid in this pid namespace but this one), and
    empty the temporary and working directories: the next exercise starts from nothing the
    last one left (its notebook comes fresh from the shelf)."""
    import shutil

    from pipemare_lite.book.exercises.sandbox import TMP_DIR, WORK_DIR

    try:
        os.kill(-1, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG) == (0, 0):
                break
        except ChildProcessError:
            break
    for place in (Path(TMP_DIR), Path(WORK_DIR)):
        for entry in place.iterdir():
            try:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink()
            except OSError:
                pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
