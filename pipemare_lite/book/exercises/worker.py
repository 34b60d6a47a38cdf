"""The grading worker: a fresh interpreter that runs a student's answers, reports what they return.

Started by :mod:`pipemare_lite.book.exercises.grading` as
``python -m pipemare_lite.book.exercises.worker FD [--sandboxed]``, once per submission (and
again after an answer that timed out or crashed it), inside a bubblewrap jail
(:mod:`~pipemare_lite.book.exercises.sandbox`) unless the instructor passed ``--no-sandbox``.
It reads its job from stdin (pickled by the grader, before any student code runs): the
notebooks' *contents* (the grader read them, refusing symbolic links), and for each
exercise the name to read, the cases to call it on, the engine functions it must not call
and, for an answer that a harness uses (:mod:`~pipemare_lite.book.exercises.harness`), the
harness's name. Then it

1. writes the notebooks into its working directory (the jail's private tmpfs), imports the
   engine files that define a graded exercise's answer from the text in the job (those
   files are empty in the jail: :func:`~pipemare_lite.book.exercises.sandbox.locked_sources`)
   and forgets that text, so no answer can re-execute an engine function's source; in a
   jail started by root, it then drops to the uid/gid the grader chose for this jail, for good;
2. caps its own memory, CPU time, file sizes, open files and processes
   (:func:`resource.setrlimit`);
3. makes the registry, the references and the chapter modules unimportable (and
   ``check`` a no-op that returns True), so the student's code can neither read nor patch
   the exercise definitions: the grader judges with its own copies;
4. runs each exercise in a process of its own (forked, so torch is imported once), in
   which the engine functions that answer that exercise and the notebook's later ones are
   replaced, for good, by ones that raise, *before* the notebook loads: a wrapper fails
   however it reaches the engine (a thread, a profiler switched off, a table precomputed
   while the notebook loads), and no copy of the original code is left in the process for
   an answer to dig out (the rule-3 watcher knows the functions by fingerprint only);
   between exercises, in the jail, every process the last one left is killed and the
   temporary files are removed;
5. loads the notebook with :func:`~pipemare_lite.book.exercises.loader.load_from_notebook`,
   runs each answer on its cases (:mod:`~pipemare_lite.book.exercises.evaluate`) and writes
   one JSON line per event to file descriptor FD: ``load``, ``warnings``, ``start``,
   ``result`` (values as :mod:`~pipemare_lite.book.exercises.plain` JSON, never pickles).

The worker never decides whether an answer is right; the grader trusts it only for what
the student's code returned, and decodes that with a fixed list of plain types. For
instructors: docs/instructors.md. Torch-free (the student's code may import torch).
"""

from __future__ import annotations

import importlib.abc
import json
import os
import pickle
import resource
import sys
import warnings
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


#: Most processes (threads count) the student's code may have, beyond the worker's own.
PROCESSES = 64
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


def _limit(memory_bytes: int, cpu_seconds: int, sandboxed: bool = False) -> None:
    limits = [
        (resource.RLIMIT_AS, memory_bytes),
        (resource.RLIMIT_CPU, cpu_seconds),
        (resource.RLIMIT_FSIZE, 256 * 2**20),  # no file written larger than 256 MiB
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NOFILE, OPEN_FILES),
    ]
    if sandboxed:  # counted per real uid, this jail's own (or 65534 in its own user namespace)
        limits.append((resource.RLIMIT_NPROC, _processes_of_this_uid() + PROCESSES))
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


def _write_notebooks(notebooks: list[dict]) -> None:
    """The notebooks the grader sent, as files in the working directory."""
    for notebook in notebooks:
        name = Path(notebook["path"]).name
        Path(name).write_bytes(notebook.pop("data"))
        notebook["path"] = name


def _drop_privileges(uid: int) -> None:
    """In a jail started by root: everything writable to ``uid`` (this jail's own, from the
    grader: :func:`~pipemare_lite.book.exercises.sandbox.worker_uid`), then become it for
    good, gid too."""
    if os.geteuid() != 0:
        return  # a user namespace already made us 65534
    from pipemare_lite.book.exercises.sandbox import TMP_DIR, WORK_DIR

    if isinstance(uid, bool) or not isinstance(uid, int) or not 0 < uid < 2**31:
        raise SystemExit(f"the grading worker got no usable uid to run as: {uid!r}")
    for place in (WORK_DIR, TMP_DIR, *os.listdir(WORK_DIR)):
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


def main(argv: list[str]) -> int:
    """Run the job on stdin and report on file descriptor ``argv[0]`` (see the docstring)."""
    # from the grader, before any student code: the locked engine modules' text first (the
    # job's cases may be engine objects whose unpickling imports those modules)
    layers = pickle.loads(sys.stdin.buffer.read())
    _import_locked(layers["locked"])
    job = pickle.loads(layers.pop("job"))
    report = os.fdopen(int(argv[0]), "w", encoding="utf-8")
    sandboxed = "--sandboxed" in argv[1:]
    if sandboxed:  # nothing importable from the working directory, where students write
        sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd(), ".")]
    if not sandboxed:
        os.chdir(job["cwd"])  # a private copy the grader made
    _write_notebooks(job["notebooks"])
    from pipemare_lite.book.exercises import evaluate
    from pipemare_lite.book.exercises.loader import load_from_notebook

    for notebook in job["notebooks"]:  # the watcher of rule 3 needs the code objects first
        for task in notebook["tasks"]:
            task["codes"] = _CodePrints(evaluate.forbidden_codes(task["engine_answers"]))
    _preload(job["notebooks"])
    _warm_up_the_loader()
    if sandboxed:  # after the imports: nothing imported later reads a locked file
        _drop_privileges(job.get("uid"))
    _limit(job["memory_bytes"], job["cpu_seconds"], sandboxed)
    _hide_definitions()
    _not_traceable()
    report.flush()
    for notebook in job["notebooks"]:
        for k in range(len(notebook["tasks"])):
            # one process per exercise: exercise k's and the later ones' engine answers off
            # for good from before the notebook loads (see _run_exercise)
            child = os.fork()
            if child == 0:
                code = 0
                try:
                    _run_exercise(notebook, k, report, evaluate, load_from_notebook)
                    report.flush()
                except BaseException:  # noqa: BLE001 - whatever the student's code did
                    code = 70
                os._exit(code)
            _pid, status = os.waitpid(child, 0)
            if sandboxed:
                _clean_up_after(job["notebooks"])
            code = os.waitstatus_to_exitcode(status)
            if code != 0:  # the grader sees the crash (exit code) and starts again after it
                os._exit(code if code > 0 else 128 - code)
    report.close()
    return 0


def _run_exercise(notebook: dict, k: int, report, evaluate, load_from_notebook) -> None:
    """Load the notebook and run its exercise ``k`` (in a process of its own).

    Before the notebook loads, the engine functions answering exercise ``k`` and every
    exercise after it are switched off for good; those of exercises graded before it stay on
    (a later answer may use an earlier exercise's engine function honestly: chapter 08's
    ex08_2 uses ex08_1's ``rescheduling_factor``). The loader runs only the notebook's
    imports and definitions, so loading once per exercise costs little."""
    tasks = notebook["tasks"]
    _switch_off({n for t in tasks[k:] for n in t["engine_answers"]})
    _send(report, {"event": "load", "notebook": notebook["path"]})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            names = [task["name"] for task in tasks]
            namespace = load_from_notebook(Path(notebook["path"]), names)
        except Exception as exc:  # an unreadable notebook costs its exercises only
            namespace = {}
            caught.append(warnings.WarningMessage(
                f"{Path(notebook['path']).name}: {type(exc).__name__}: {exc}",
                UserWarning, "", 0))
    texts = [str(w.message)[:500] for w in caught]
    if texts and k == 0:  # the same warnings in every exercise's process: sent once
        _send(report, {"event": "warnings", "notebook": notebook["path"], "texts": texts})
    task = tasks[k]
    _send(report, {"event": "start", "id": task["id"]})
    if task["name"] not in namespace:
        _send(report, {"event": "result", "id": task["id"], "missing": True})
        return
    answer = namespace[task["name"]]
    if task["kind"] == "constant":
        evaluation = evaluate.read_constant(answer)
    else:
        evaluation = evaluate.run_function(
            answer, task["cases"], task["engine_answers"], task.get("harness"),
            codes=task["codes"], max_lines=task.get("max_lines"),
        )
    _send(report, {"event": "result", "id": task["id"], **_encoded(evaluation)})


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


def _preload(notebooks: list[dict]) -> None:
    """Import, once and before any student code, what the notebooks' processes will need:
    the modules of the engine functions switched off (resolved for the watcher already),
    torch when an exercise needs it, and the modules of :data:`PRELOAD` that the notebooks'
    ``import`` statements name (read with :mod:`ast`; nothing else is imported)."""
    import ast
    import importlib

    wanted: set[str] = set()
    if any(task.get("needs_torch") for nb in notebooks for task in nb["tasks"]):
        wanted.add("torch")
    for notebook in notebooks:
        try:
            cells = json.loads(Path(notebook["path"]).read_bytes()).get("cells", [])
        except Exception:  # noqa: BLE001 - the loader will say what is wrong
            continue
        for cell in cells if isinstance(cells, list) else []:
            if not isinstance(cell, dict) or cell.get("cell_type") != "code":
                continue
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else str(source)
            try:
                lines = source.splitlines()
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


def _clean_up_after(notebooks: list[dict]) -> None:
    """In the jail, after a notebook's process ended: kill every other process it left
    (``kill(-1)`` reaches all of the jail's uid in this pid namespace but this one), and empty
    the temporary and working directories but for the notebooks: the next notebook starts
    from nothing the last one left."""
    import shutil
    import signal

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
    keep = {Path(nb["path"]).name for nb in notebooks}
    for place in (Path(TMP_DIR), Path(WORK_DIR)):
        for entry in place.iterdir():
            if place == Path(WORK_DIR) and entry.name in keep:
                continue
            try:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink()
            except OSError:
                pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
