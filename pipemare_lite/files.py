"""Atomic file writes: a crash mid-write never leaves a half-written file behind.

Everything the project writes that someone will read later (checkpoints, stored results in
``data/results/``, chapter sources rewritten by the notebook tools, the book's timings) goes
through :func:`atomic_write`: write a temporary file in the same folder, flush and fsync it,
then ``os.replace`` it over the target (atomic on POSIX and Windows), then fsync the folder
so the rename itself survives a power cut. :func:`json_ready` makes values strict JSON.
Torch-free.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


class WriteError(OSError):
    """An output file could not be written (a full disk, a quota, an I/O error).

    ``strerror`` is one line naming the file: ``cannot write <path>: No space left on
    device``; ``errno`` is the system's. The command line prints it as it is, without a
    traceback (the disk, not the program, is at fault).
    """


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _mode_for(path: Path) -> int:
    """Keep an existing file's permissions; a new file gets the usual 0o666 minus umask
    (``mkstemp`` would leave it owner-only, 0o600)."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], object]) -> Path:
    """Call ``write(handle)`` on a temporary binary file, then move it over ``path``.

    If ``write`` raises (or the process dies), ``path`` keeps its previous content and the
    temporary file is removed (or, after a kill, left as a hidden ``.name.*.tmp``).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise WriteError(exc.errno, f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        os.chmod(tmp_name, _mode_for(path))
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except OSError as exc:  # a full disk (ENOSPC), a quota, an I/O error: name the file
        Path(tmp_name).unlink(missing_ok=True)
        raise WriteError(exc.errno, f"cannot write {path}: {exc.strerror or exc}; the old "
                      "file, if any, is unchanged") from exc
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def check_writable(path: str | os.PathLike, what: str) -> None:
    """Raise ValueError naming ``what`` (e.g. ``--out``) and ``path`` unless a file can be
    written there, before a long run that would write it only at its end.

    Probed the way :func:`atomic_write` writes: the folder is made if missing, and a
    temporary file is created in it and removed (a read-only disk, a missing permission, a
    file where a folder should be all fail here).
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {str(path)!r} is a folder; give a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=path.parent)
    except OSError as exc:
        raise ValueError(f"{what} {str(path)!r} cannot be written: "
                         f"{exc.strerror or exc} ({exc.filename or path.parent})") from None
    os.close(fd)
    os.unlink(probe)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    return atomic_write(path, lambda handle: handle.write(data))


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (UTF-8 by default)."""
    return atomic_write_bytes(path, text.encode(encoding))


def json_ready(value):
    """``value`` with every NaN/inf replaced by None, so ``json.dumps`` writes strict JSON.

    Used by ``train --json`` and by the results ``pipemare-lite reproduce`` stores.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value
