"""Cases students never see: the grader redraws each exercise's random cases from a secret.

``check()`` in a notebook runs an exercise's ``cases()``: fixed edge cases, then cases drawn
from ``random.Random(seed)`` with a seed written in the chapter module. A student has that
module, so a table of the answers to exactly those cases (computed once with the engine)
passes ``check()``. The grader therefore grades other cases: :func:`graded_cases` runs the
same ``cases()`` with every ``random.Random(seed)`` of the chapter module seeded instead from
``sha256(secret, exercise id, seed, sha256(salt))``, the salt fresh for every grading run and
student. The fixed cases stay (they are the edge cases that
matter), the random ones come from the same distribution but are new, and their number is
the same, so an honest answer scores exactly as with ``check()``'s cases.

The secret is the instructor's (:func:`instructor_secret`): the environment variable
``PIPEMARE_GRADING_SECRET``, else the file named by ``PIPEMARE_GRADING_SECRET_FILE``, else
``~/.config/pipemare_lite/grading_secret`` (created with 32 random bytes, mode 600, the first
time). It is in neither the repository nor the handout, and this module is an empty file
inside the grading jail (:mod:`~pipemare_lite.book.exercises.sandbox`).

Every function exercise draws some of its cases at random (a test holds each to it; an
exercise that drew none would be graded on ``check()``'s cases, which a lookup table passes):
:func:`drawn_at_random` says whether one does. Torch-free.
"""

from __future__ import annotations

import hashlib
import os
import random
import secrets
import sys
import types
from pathlib import Path

from pipemare_lite.book.exercises.exercise import Exercise

SECRET_ENV, SECRET_FILE_ENV = "PIPEMARE_GRADING_SECRET", "PIPEMARE_GRADING_SECRET_FILE"
DEFAULT_SECRET_FILE = Path("~/.config/pipemare_lite/grading_secret")


def instructor_secret() -> bytes:
    """The instructor's secret (see the module docstring); created on first use."""
    if os.environ.get(SECRET_ENV):
        return os.environ[SECRET_ENV].encode()
    path = Path(os.environ.get(SECRET_FILE_ENV) or DEFAULT_SECRET_FILE).expanduser()
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32) + "\n")
    return path.read_bytes().strip()


class _SecretRandom(types.ModuleType):
    """Stands for the ``random`` module in a chapter module while its cases are drawn."""

    def __init__(self, secret: bytes, exercise_id: str, salt: bytes = b""):
        super().__init__("random")
        self.secret, self.exercise_id, self.salt, self.draws = secret, exercise_id, salt, 0

    def __getattr__(self, name):
        return getattr(random, name)

    def Random(self, seed=None):  # noqa: N802 - the name the chapter modules call
        self.draws += 1
        parts = [self.secret, self.exercise_id.encode(), repr(seed).encode()]
        if self.salt:  # (no salt: the digest of before salts existed, so old runs repeat)
            parts.append(hashlib.sha256(self.salt).digest())
        digest = hashlib.sha256(b"\0".join(parts)).digest()
        return random.Random(int.from_bytes(digest[:16], "big"))


def _drawing(exercise: Exercise, secret: bytes, salt: bytes = b"") -> tuple[list[dict], int]:
    module = sys.modules.get(getattr(exercise.cases, "__module__", ""), None)
    namespace = getattr(module, "__dict__", None)
    if namespace is None or namespace.get("random") is not random:
        return exercise.cases(), 0
    shim = _SecretRandom(secret, exercise.id, salt)
    namespace["random"] = shim
    try:
        return exercise.cases(), shim.draws
    finally:
        namespace["random"] = random


def graded_cases(exercise: Exercise, secret: bytes, salt: bytes = b"") -> list[dict]:
    """The cases the grader runs ``exercise`` on: ``cases()`` with the random ones redrawn
    from ``secret`` and ``salt`` ([] for a constant exercise). The grader salts every run
    and every student (:func:`~pipemare_lite.book.exercises.grading.grade_submission`): the
    same distributions, other draws, so a case that leaked is worth nothing next time.

    Raises:
        TypeError: ``secret`` or ``salt`` is not bytes.
    """
    for name, value in (("secret", secret), ("salt", salt)):
        if not isinstance(value, bytes):
            raise TypeError(f"{name} must be bytes, got {type(value).__name__}")
    if exercise.kind != "function":
        return []
    return _drawing(exercise, secret, salt)[0]


def drawn_at_random(exercise: Exercise) -> bool:
    """True when some of ``exercise``'s cases are drawn at random (so the grader's differ)."""
    return exercise.kind == "function" and _drawing(exercise, b"probe")[1] > 0
