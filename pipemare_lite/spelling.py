"""Close matches for a mistyped name, for error messages (every registry's and fit()'s).

``did_you_mean("1fb1", ["1f1b", "gpipe"])`` is ``" Did you mean '1f1b'?"``: appended to a
message that already lists what is allowed, so a typo's fix is the first thing read.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name, allowed: Iterable[str]) -> str:
    """``" Did you mean 'x'?"`` (or ``'x' or 'y'``) for the allowed names close to
    ``name``; ``""`` when none is close or ``name`` is not a string."""
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, [str(a) for a in allowed], n=2, cutoff=0.6)
    return f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
