"""The paper-shape verdicts: each of PipeMare's claims tested on seed ranges (chapter 10).

The claims and their tests are the ones fixed in advance in
:mod:`pipemare_lite.experiments.paper_shape`'s docstring; this module computes them from
the stored rows alone (plain Python, no torch), so a test or a chapter can re-derive every
verdict from the JSON. A seed's quality is its final test accuracy, 0 when it diverged.

Verdicts (:func:`pipemare_lite.experiments.record.verdict`): **held** when the claim holds
with every compared row at the unfavourable end of its seed range, **did not hold** when it
fails even at the favourable end, else **not separable from noise**. Byte counts and
simulated utilizations have no seed noise: they hold or do not.
"""

from __future__ import annotations

import math

from pipemare_lite.experiments.record import verdict

SYNC = "1F1B (sync)"
ASYNC = "async"
T1 = "async + T1"
T2 = "async + T2"
T1T2 = "async + T1 + T2"
PMW = "PipeMare-W (T1 + T2 + warm-up)"
PIPEDREAM = "PipeDream (stash)"
NOT_SEPARABLE = "not separable from noise"


def qualities(row: dict) -> list[float]:
    """Each seed's final test accuracy, 0 for a diverged seed."""
    out = []
    for s in row["seeds"]:
        value = s["final_accuracy"]
        bad = s["diverged"] or value is None or not math.isfinite(value)
        out.append(0.0 if bad else float(value))
    return out


def at_least(x: list[float], y: list[float], d: float) -> str:
    """"X >= Y - d" judged on the seed ranges."""
    return verdict(min(x) >= max(y) - d, max(x) < min(y) - d)


def below(x: list[float], y: list[float], d: float) -> str:
    """"X < Y - d" (X is materially worse) judged on the seed ranges."""
    return verdict(max(x) < min(y) - d, min(x) >= max(y) - d)


def above(x: list[float], y: list[float]) -> str:
    """"X > Y" judged on the seed ranges."""
    return verdict(min(x) > max(y), max(x) <= min(y))


def _show(values: list[float]) -> str:
    return f"{sum(values) / len(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def _grid(results: dict, model: str, P: int) -> dict[str, dict]:
    return {r["label"]: r for r in results["rows"]
            if r["model"] == model and r["sweep"] == "grid" and r["P"] == P}  # fmt: skip


def _claim(number: str, claim: str, test: str, outcome: str, numbers: str) -> dict:
    return {"number": number, "claim": claim, "test": test, "verdict": outcome,
            "numbers": numbers}  # fmt: skip


def _quality_claims(results: dict, model: str, first: int, full: bool) -> list[dict]:
    """Claims 1-7 (``full``) or 1, 3, 7 for one model at its finest P."""
    config = results["config"]
    d = config["material"]
    granularities = config[model]["granularities"]
    finest, coarsest = granularities[-1], granularities[0]
    rows = _grid(results, model, finest)
    q = {label: qualities(row) for label, row in rows.items() if row["seeds"]}
    sync, plain = q[SYNC], q[ASYNC]
    at = f"{model}, P = {finest}"
    out = []
    degrade = below(plain, sync, d)
    out.append(_claim(f"{first}", f"async degrades at fine granularity ({at})",
                      f"async < 1F1B - {d}", degrade,
                      f"1F1B {_show(sync)}, async {_show(plain)}, "
                      f"async diverged {rows[ASYNC]['diverged_seeds']}/{len(plain)}"))
    if full and coarsest != finest:
        coarse = qualities(_grid(results, model, coarsest)[ASYNC])
        out.append(_claim(f"{first + 1}", "... and more as stages get finer",
                          f"async at P = {coarsest} > async at P = {finest}",
                          above(coarse, plain),
                          f"async P = {coarsest} {_show(coarse)}, P = {finest} {_show(plain)}"))
    t1 = q[T1]
    if degrade == "held":
        low = (max(sync) + max(plain)) / 2, (min(sync) + min(plain)) / 2
        recovered = verdict(min(t1) >= low[0], max(t1) < low[1])
        note = f"midpoint {low[1]:.3f}..{low[0]:.3f}"
    else:
        recovered, note = NOT_SEPARABLE, "no separated damage to recover"
    out.append(_claim(f"{first + 2 if full else first + 1}", f"T1 recovers most of it ({at})",
                      "async + T1 above the midpoint of async and 1F1B", recovered,
                      f"async + T1 {_show(t1)}; {note}"))
    if full:
        out.append(_claim(f"{first + 3}", f"T2 helps on its own ({at})", "async + T2 > async",
                          above(q[T2], plain), f"async + T2 {_show(q[T2])}, async {_show(plain)}"))
        out.append(_claim(f"{first + 4}", f"T2 adds to T1 ({at})",
                          "async + T1 + T2 > async + T1", above(q[T1T2], t1),
                          f"async + T1 + T2 {_show(q[T1T2])}, async + T1 {_show(t1)}"))
        out.append(_claim(f"{first + 5}", f"warm-up adds to T1 + T2 ({at})",
                          "PipeMare-W > async + T1 + T2", above(q[PMW], q[T1T2]),
                          f"PipeMare-W {_show(q[PMW])}, async + T1 + T2 {_show(q[T1T2])}"))
    out.append(_claim(f"{first + 6 if full else first + 2}",
                      f"PipeMare-W reaches sync quality ({at})", f"PipeMare-W >= 1F1B - {d}",
                      at_least(q[PMW], sync, d), f"PipeMare-W {_show(q[PMW])}, 1F1B {_show(sync)}"))
    return out


def _weight_bytes(row: dict) -> int:
    m = row["memory_bytes"]
    return sum(m.get(k, 0) for k in ("weights", "stash", "t2_buffer", "optimizer"))


def _memory_claim(results: dict) -> dict:
    P = results["config"]["resnet"]["granularities"][-1]
    rows = _grid(results, "resnet", P)
    pmw, dream, sync = (_weight_bytes(rows[k]) for k in (PMW, PIPEDREAM, SYNC))
    stash = rows[PMW]["memory_bytes"].get("stash", 0)
    return _claim("8", f"memory: no stash, less than PipeDream (resnet, P = {P})",
                  "PipeMare-W weights + stash + T2 buffer + optimizer < PipeDream's; stash 0",
                  "held" if pmw < dream and stash == 0 else "did not hold",
                  f"PipeMare-W {pmw} B (stash {stash}), PipeDream {dream} B "
                  f"({dream / pmw:.2f}x), 1F1B {sync} B; activations: PipeMare-W "
                  f"{rows[PMW]['memory_bytes'].get('activations', 0)} B, PipeDream "
                  f"{rows[PIPEDREAM]['memory_bytes'].get('activations', 0)} B, 1F1B "
                  f"{rows[SYNC]['memory_bytes'].get('activations', 0)} B")


def _utilization_claim(results: dict) -> dict:
    config = results["config"]["resnet"]
    P, N = config["granularities"][-1], config["num_microbatches"]
    rows = _grid(results, "resnet", P)
    a, s = (rows[k]["utilization"]["utilization"] for k in (ASYNC, SYNC))
    w = rows[PMW]["utilization"]["utilization"]
    return _claim("9", f"utilization near 1 where sync pays the bubble (resnet, P = {P})",
                  "simulated utilization: async > 1F1B", "held" if a > s else "did not hold",
                  f"async {a:.3f}, 1F1B {s:.3f} (ratio {a / s:.2f}, formula (N + P - 1) / N = "
                  f"{(N + P - 1) / N:.2f}); PipeMare-W with its flushed warm-up {w:.3f}")


def _stalest_claims(results: dict) -> list[dict]:
    P = results["config"]["resnet"]["granularities"][-1]
    row = _grid(results, "resnet", P)[ASYNC]
    quarter = max(1, P // 4)
    stale, fresh = set(range(quarter)), set(range(P - quarter, P))
    seeds_with_onset, ok, firsts = 0, 0, []
    for s in row["seeds"]:
        onsets = s["blowup_onset"]
        known = [k for k in onsets if k is not None]
        if not known:
            firsts.append("none")
            continue
        first = min(known)
        stages = [i for i, k in enumerate(onsets) if k == first]
        firsts.append(f"stage(s) {','.join(map(str, stages))} at update {first}")
        seeds_with_onset += 1
        ok += set(stages) <= stale
    if seeds_with_onset == 0:
        onset_verdict = NOT_SEPARABLE
    else:
        onset_verdict = verdict(ok == seeds_with_onset, ok == 0)
    onset = _claim("10a", f"the stalest stages fail first (resnet async, P = {P})",
                   f"earliest blow-up onset (update norm >= {results['config']['blowup_factor']:g}"
                   f"x sync's, or non-finite) among stages 0..{quarter - 1} in every seed "
                   "that has one", onset_verdict,
                   "; ".join(f"seed {s['seed']}: {f}" for s, f in zip(row["seeds"], firsts))
                   + ("" if seeds_with_onset else " (nothing to locate)"))
    stale_more, shown = 0, []
    for s in row["seeds"]:
        ex = s["excess"]
        a = [ex[i] for i in sorted(stale) if ex[i] is not None]
        b = [ex[i] for i in sorted(fresh) if ex[i] is not None]
        if not a or not b:
            shown.append(f"seed {s['seed']}: -")
            continue
        ma, mb = sum(a) / len(a), sum(b) / len(b)
        stale_more += ma > mb
        shown.append(f"seed {s['seed']}: {ma:.3g} vs {mb:.3g}")
    n = len(row["seeds"])
    excess = _claim("10b", f"the stalest stages leave sync's path most (resnet async, P = {P})",
                    f"mean excess update norm (rms async / rms sync) of stages 0..{quarter - 1} "
                    f"> that of stages {P - quarter}..{P - 1}, in every seed",
                    verdict(stale_more == n, stale_more == 0), "; ".join(shown))
    return [onset, excess]


def claims(results: dict) -> list[dict]:
    """Every claim the stored rows can test (the quick run lacks some cells)."""
    out = _quality_claims(results, "resnet", 1, full=True)
    out += [_memory_claim(results), _utilization_claim(results)]
    out += _stalest_claims(results)
    out += _quality_claims(results, "transformer", 11, full=False)
    return out
