"""The grading worker: a fresh interpreter that runs a student's answers, reports what they return.

Started by :mod:`pipemare_lite.book.exercises.grading` as
``python -m pipemare_lite.book.exercises.worker FD``, once per submission (and again after an
answer that timed out or crashed it). It reads its job from stdin (pickled by the grader,
before any student code runs): the notebooks, and for each exercise the name to read, the
cases to call it on, the engine functions it must not call and, for an answer that a
harness uses (:mod:`~pipemare_lite.book.exercises.harness`), the harness's name. Then it

1. caps its own memory, CPU time and file sizes (:func:`resource.setrlimit`);
2. makes the registry, the references and the chapter modules unimportable (and
   ``check`` a no-op that returns True), so the student's code can neither read nor patch
   the exercise definitions: the grader judges with its own copies;
3. loads each notebook with :func:`~pipemare_lite.book.exercises.loader.load_from_notebook`,
   runs each answer on its cases (:mod:`~pipemare_lite.book.exercises.evaluate`) and writes
   one JSON line per event to file descriptor FD: ``load``, ``warnings``, ``start``,
   ``result`` (values as :mod:`~pipemare_lite.book.exercises.plain` JSON, never pickles).

The worker never decides whether an answer is right; the grader trusts it only for what
the student's code returned. It is a process boundary, not a sandbox: the student's code
can still read and write files as the user running the grader (run untrusted submissions
in a container or a throwaway account). For instructors:
docs/instructors.md. Torch-free (the student's code may import torch).
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


def _limit(memory_bytes: int, cpu_seconds: int) -> None:
    for limit, value in (
        (resource.RLIMIT_AS, memory_bytes),
        (resource.RLIMIT_CPU, cpu_seconds),
        (resource.RLIMIT_FSIZE, 256 * 2**20),  # no file written larger than 256 MiB
        (resource.RLIMIT_CORE, 0),
    ):
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
    _limit(job["memory_bytes"], job["cpu_seconds"])
    from pipemare_lite.book.exercises import evaluate
    from pipemare_lite.book.exercises.loader import load_from_notebook

    _hide_definitions()
    os.chdir(job["cwd"])
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
                    answer, task["cases"], task["engine_answers"], task.get("harness")
                )
            _send(report, {"event": "result", "id": task["id"], **_encoded(evaluation)})
    report.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
