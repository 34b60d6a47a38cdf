"""A measured trace as text: every action, when it ran and which weights it saw (chapter 05).

The trace is the debugger: when an asynchronous run misbehaves, reading which weight version
each forward and backward used is usually the fastest way to see why. ::

    print(trace_text(result))
       start_ms   end_ms  rank  action  version  d
          0.012    0.310     0  0F0           0
          ...
          4.051    4.390     0  0B0           2  2

``version`` is the weight version the action used (for U: the version it updated); ``d``
is the discrepancy ``v_B - v_F`` of a backward that saw newer weights than its forward.
"""

from __future__ import annotations

from pipemare_lite.analysis.timeline import Timeline


def trace_rows(trace: Timeline) -> list[dict]:
    """One dict per action, sorted by start time: start/end (s), rank, action, version, d."""
    versions = trace.extra.get("versions", {})
    distances = trace.extra.get("distances", {})
    rows = []
    for entry in sorted(trace.entries, key=lambda e: (e.start, e.rank)):
        action = entry.action
        d = distances.get((action.stage, action.index)) if action.kind in ("B", "I") else None
        rows.append({"start": entry.start, "end": entry.end, "rank": entry.rank,
                     "action": str(action), "version": versions.get(str(action)),
                     "d": d or None})
    return rows


def trace_text(result_or_trace, limit: int | None = None) -> str:
    """A fixed-width table of :func:`trace_rows` (``limit`` rows at most)."""
    trace = getattr(result_or_trace, "trace", result_or_trace)
    lines = [f"{'start_ms':>10} {'end_ms':>10} {'rank':>5}  {'action':<7} {'version':>7} {'d':>3}"]
    rows = trace_rows(trace)
    for row in rows[:limit]:
        version = "" if row["version"] is None else row["version"]
        d = "" if row["d"] is None else row["d"]
        lines.append(f"{row['start'] * 1e3:10.3f} {row['end'] * 1e3:10.3f} {row['rank']:>5}  "
                     f"{row['action']:<7} {version!s:>7} {d!s:>3}")
    if limit is not None and len(rows) > limit:
        lines.append(f"... {len(rows) - limit} more actions")
    return "\n".join(lines)
