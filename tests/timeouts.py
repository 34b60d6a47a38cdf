"""A hard per-test time limit for multi-process tests: fail instead of hanging the suite."""

from __future__ import annotations

import contextlib
import signal


@contextlib.contextmanager
def hard_time_limit(seconds: int):
    """Raise TimeoutError in the main thread if the body runs longer than ``seconds``."""
    def expire(signum, frame):
        raise TimeoutError(f"test exceeded its hard timeout of {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
