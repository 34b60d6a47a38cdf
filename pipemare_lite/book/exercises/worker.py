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

1. writes the notebooks into its working directory (the jail's private tmpfs) and, in a
   jail started by root, drops to uid/gid 65534 for good;
2. caps its own memory, CPU time, file sizes, open files and processes
   (:func:`resource.setrlimit`);
3. makes the registry, the references and the chapter modules unimportable (and
   ``check`` a no-op that returns True), so the student's code can neither read nor patch
   the exercise definitions: the grader judges with its own copies;
4. replaces every engine function that answers one of the notebook's exercises
   (``Exercise.engine_answers``) by one that raises, *before* the notebook loads: a wrapper
   fails however it reaches the engine (a thread, a profiler switched off, a table
   precomputed while the notebook loads);
5. loads each notebook with :func:`~pipemare_lite.book.exercises.loader.load_from_notebook`,
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
     "worker"}
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
    if sandboxed:  # counted per real uid: 65534 here, or the grader's own (a user namespace)
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


def _drop_privileges() -> None:
    """In a jail started by root: everything writable to 65534, then become 65534 for good."""
    if os.geteuid() != 0:
        return  # a user namespace already made us 65534
    from pipemare_lite.book.exercises.sandbox import SANDBOX_UID, TMP_DIR, WORK_DIR

    for place in (WORK_DIR, TMP_DIR, *os.listdir(WORK_DIR)):
        os.chown(place, SANDBOX_UID, SANDBOX_UID)
    os.setgroups([])
    os.setresgid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
    os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
    if os.getuid() != SANDBOX_UID or os.geteuid() != SANDBOX_UID:
        raise SystemExit("the grading worker could not drop its privileges")


def _disable_engine_answers(names: set[str]) -> list[str]:
    """Make each named engine function (or class) raise
    :class:`~pipemare_lite.book.exercises.originality.EngineAnswerSwitchedOff` when called,
    wherever it is referenced from (its code object is replaced, so every alias, import and
    caller inside the engine reaches the raising one). Returns the names that could not be
    resolved (not fatal: the watcher of rule 3 still sees those)."""
    from pipemare_lite.book.exercises.originality import resolve

    missing = []
    for name in sorted(names):
        try:
            target = resolve(name)
        except Exception:
            missing.append(name)
            continue
        if isinstance(target, type):
            raiser = _raiser(name, 0)
            target.__init__ = raiser
            target.__new__ = staticmethod(raiser)
            continue
        function = getattr(target, "__func__", target)
        function = getattr(function, "__wrapped__", function)
        code = getattr(function, "__code__", None)
        if code is None:
            missing.append(name)
            continue
        function.__code__ = _raiser(name, len(code.co_freevars)).__code__
    return missing


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
    job = pickle.loads(sys.stdin.buffer.read())  # from the grader, before any student code
    report = os.fdopen(int(argv[0]), "w", encoding="utf-8")
    sandboxed = "--sandboxed" in argv[1:]
    if not sandboxed:
        os.chdir(job["cwd"])  # a private copy the grader made
    _write_notebooks(job["notebooks"])
    if sandboxed:
        _drop_privileges()
    from pipemare_lite.book.exercises import evaluate
    from pipemare_lite.book.exercises.loader import load_from_notebook

    forbidden = {n for nb in job["notebooks"] for t in nb["tasks"] for n in t["engine_answers"]}
    for notebook in job["notebooks"]:  # the watcher of rule 3 needs the code objects first
        for task in notebook["tasks"]:
            task["codes"] = evaluate.forbidden_codes(task["engine_answers"])
    _disable_engine_answers(forbidden)
    _limit(job["memory_bytes"], job["cpu_seconds"], sandboxed)
    _hide_definitions()
    for notebook in job["notebooks"]:
        _send(report, {"event": "load", "notebook": notebook["path"]})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                names = [task["name"] for task in notebook["tasks"]]
                namespace = load_from_notebook(Path(notebook["path"]), names)
            except Exception as exc:  # an unreadable notebook costs its exercises only
                namespace = {}
                caught.append(warnings.WarningMessage(
                    f"{Path(notebook['path']).name}: {type(exc).__name__}: {exc}",
                    UserWarning, "", 0))
        texts = [str(w.message)[:500] for w in caught]
        if texts:
            _send(report, {"event": "warnings", "notebook": notebook["path"], "texts": texts})
        for task in notebook["tasks"]:
            _send(report, {"event": "start", "id": task["id"]})
            if task["name"] not in namespace:
                _send(report, {"event": "result", "id": task["id"], "missing": True})
                continue
            answer = namespace[task["name"]]
            if task["kind"] == "constant":
                evaluation = evaluate.read_constant(answer)
            else:
                evaluation = evaluate.run_function(
                    answer, task["cases"], task["engine_answers"], task.get("harness"),
                    codes=task["codes"],
                )
            _send(report, {"event": "result", "id": task["id"], **_encoded(evaluation)})
    report.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
