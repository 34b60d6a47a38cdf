"""The map's assessment, from its stored runs alone (issue 43; chapter 10).

Everything :mod:`pipemare_lite.experiments.lr_map`'s docstring fixed before the runs, computed
from the JSON (plain Python and numpy, no torch), so a test or a chapter re-derives it:

- :func:`phase_cells`: per study, row, P and lr, the quality over seeds, its interval, the
  diverged seeds, and the difference from sync at the same lr with its Welch interval;
- :func:`verdicts_by_lr`: the claims at every (P, lr), "uninformative" where every seed of
  every compared row diverged;
- :func:`predictions`: chapter 06's bound per seed (heavy-ball for the ResNet, Adam's
  preconditioned sharpness at the switch for the Transformer) against what happened, and
  :func:`confusion` over them;
- :func:`preregistered`: the momentum-aware T1's test.
"""

from __future__ import annotations

from collections import defaultdict

from pipemare_lite.experiments.paper_shape_claims import (
    UNINFORMATIVE,
    _better,
    _reaches,
    _recovers,
    _worse,
    informative,
    judge,
)
from pipemare_lite.experiments.record import difference_interval, mean_interval

SYNC = "1F1B (sync)"
ASYNC = "async"
T1 = "async + T1"
T1T2 = "async + T1 + T2"
PMW = "PipeMare-W (T1 + T2 + warm-up)"
PMW_M = "PipeMare-W, momentum-aware T1"
CONFIDENCE = 0.95
MARGIN = 0.01  # d and delta, as paper-shape
PREREGISTERED_LR = 0.03  # the Transformer lr at which the test (a) was registered


# --------------------------------------------------------------------------- cells


def cell_seeds(study: dict) -> dict[tuple, list[dict]]:
    """``(label, P, lr) -> [seed outcome, ...]`` of a stored study (sharpness runs left out);
    sync, run at one P, is listed under every P of the study."""
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for run in study["runs"]:
        if run["measure"]:
            continue
        Ps = study["design"]["granularities"] if run["label"] == SYNC else [run["P"]]
        for P in Ps:
            cells[run["label"], P, run["lr"]].append(run["outcome"])
    return dict(cells)


def qualities(seeds: list[dict]) -> list[float]:
    """Each seed's quality (0 for a diverged seed: the book's one convention)."""
    return [float(s["quality"]) for s in seeds]


def phase_cells(results: dict) -> list[dict]:
    """Every (study, row, P, lr) cell: mean quality, interval, diverged seeds, and the
    difference from sync at the same lr (None for sync itself)."""
    out = []
    for name, study in results["studies"].items():
        cells = cell_seeds(study)
        for (label, P, lr), seeds in sorted(cells.items(), key=lambda kv: (
                study["design"]["rows"].index(kv[0][0]), kv[0][1], kv[0][2])):
            q = qualities(seeds)
            sync = qualities(cells[SYNC, P, lr])
            diff = None if label == SYNC else difference_interval([(1, q), (-1, sync)],
                                                                  CONFIDENCE)
            reach = None
            if label != SYNC:  # non-inferiority at 5 %, one-sided: the 90 % interval
                reach = _labelled(_reaches("", "", q, sync, MARGIN, CONFIDENCE), seeds,
                                  cells[SYNC, P, lr])["verdict"]
            out.append({"study": name, "label": label, "P": P, "lr": lr, "n": len(q),
                        "mean": sum(q) / len(q), "interval": mean_interval(q, CONFIDENCE),
                        "diverged": sum(bool(s["diverged"]) for s in seeds),
                        "minus_sync": diff, "reaches_sync": reach})
    return out


LENGTH_STUDY = "transformer by run length"


def transformer_by_length(lr_map: dict, paper_shape: dict | None) -> list[dict]:
    """The Transformer's map over learning rate and run length: the map's ``transformer_long``
    cells (2,048 updates) beside paper-shape's ``transformer`` study (1,024 updates, its rows
    at P = 8), as phase cells whose ``P`` holds the run length in updates (for
    :func:`~pipemare_lite.figures.viz.phase_map_figure` with ``y_name="updates"``)."""
    out = []
    sources = []
    if "transformer_long" in lr_map.get("studies", {}):
        study = lr_map["studies"]["transformer_long"]
        sources.append((study["planned_steps"], cell_seeds(study)))
    if paper_shape and "transformer" in paper_shape.get("studies", {}):
        cells: dict[tuple, list[dict]] = defaultdict(list)
        for row in paper_shape["rows"]:
            if row["study"] == "transformer" and row["P"] == 8 and row["seeds"] \
                    and row["sweep"] == "grid":
                cells[row["label"], 8, row["lr"]] += row["seeds"]
        sources.append((paper_shape["studies"]["transformer"]["planned_steps"], dict(cells)))
    for updates, cells in sources:
        for (label, P, lr), seeds in sorted(cells.items()):
            sync = cells.get((SYNC, P, lr))
            if label == SYNC or not sync or label not in (PMW, PMW_M):
                continue
            q = qualities(seeds)
            out.append({"study": LENGTH_STUDY, "label": label, "P": updates, "lr": lr,
                        "n": len(q), "mean": sum(q) / len(q),
                        "interval": mean_interval(q, CONFIDENCE),
                        "diverged": sum(bool(s["diverged"]) for s in seeds),
                        "minus_sync": difference_interval([(1, q), (-1, qualities(sync))],
                                                          CONFIDENCE)})
    return out


# --------------------------------------------------------------------------- verdicts


def _labelled(claim: dict, *seed_lists: list[dict]) -> dict:
    """:func:`~.paper_shape_claims.informative` on this module's seed lists."""
    return informative(claim, *({"seeds": seeds} for seeds in seed_lists))


def verdicts_by_lr(results: dict) -> list[dict]:
    """The claims of the design at every (P, lr) of each study, each with its verdict."""
    out = []
    c = CONFIDENCE
    for name, study in results["studies"].items():
        cells = cell_seeds(study)
        rows = study["design"]["rows"]
        for P in study["design"]["granularities"]:
            for lr in study["design"]["lr_grid"]:
                get = {label: cells.get((label, P, lr)) for label in rows}
                q = {label: qualities(v) for label, v in get.items() if v}
                where = {"study": name, "P": P, "lr": lr}
                if ASYNC in q:
                    out.append({**where, **_labelled(_worse(
                        "1", "async degrades at fine granularity", "async", q[ASYNC], "1F1B",
                        q[SYNC], MARGIN, c), get[ASYNC], get[SYNC])})
                if T1 in q and ASYNC in q:
                    out.append({**where, **_labelled(_recovers(
                        "3", "T1 recovers most of it", q[T1], q[ASYNC], q[SYNC], c),
                        get[T1], get[ASYNC], get[SYNC])})
                if T1T2 in q and T1 in q:
                    out.append({**where, **_labelled(_better(
                        "5", "T2 adds to T1", "async + T1 + T2", q[T1T2], "async + T1", q[T1],
                        c), get[T1T2], get[T1])})
                if PMW in q and T1T2 in q:
                    out.append({**where, **_labelled(_better(
                        "6", "warm-up adds to T1 + T2", "PipeMare-W", q[PMW], "async + T1 + T2",
                        q[T1T2], c), get[PMW], get[T1T2])})
                for label in (PMW, PMW_M):
                    if label in q:
                        claim = _reaches("7", f"{label} reaches sync quality within {MARGIN}",
                                         q[label], q[SYNC], MARGIN, c)
                        claim["test"] = claim["test"].replace("PipeMare-W", label)
                        out.append({**where, "row": label,
                                    **_labelled(claim, get[label], get[SYNC])})
    return out


# --------------------------------------------------------------------------- prediction


def stage_lr(lr: float, label: str, stage_delay: int, update: int, *, total: int,
             warmup: int, momentum: float) -> tuple[float, int]:
    """``(lr_s(k), tau_s(k))`` of one stage at update k: the cosine base times the row's
    factor, and the delay in force (0 during a warm-up)."""
    from pipemare_lite.analysis.stage_lr import base_lr, effective_delay, rescheduling_factor

    base = base_lr(update, lr, "cosine", total_updates=total)
    if update < warmup:
        return base, 0
    tau = max(stage_delay, 1)
    horizon = total - warmup
    if label in (T1, T1T2, PMW):
        return base * rescheduling_factor(update, tau, horizon, warmup), tau
    if label == PMW_M:
        return base * rescheduling_factor(update, effective_delay(tau, momentum), horizon,
                                          warmup), tau
    return base, tau


def _bound(tau: int, momentum: float, cache: dict) -> float:
    from pipemare_lite.analysis.theory import momentum_stability_bound

    if (tau, momentum) not in cache:
        cache[tau, momentum] = momentum_stability_bound(tau, momentum)
    return cache[tau, momentum]


def _sharpness_at(measured: list, update: int) -> list[float]:
    """The latest measurement at or before ``update`` (the first one before it exists)."""
    chosen = measured[0][1]
    for step, values in measured:
        if step <= update:
            chosen = values
    return chosen


def _measured_first_stage(seed: dict) -> int | None:
    firsts = seed.get("first_non_finite_update") or []
    finite = [(k, s) for s, k in enumerate(firsts) if k is not None]
    return min(finite)[1] if finite else None


def predictions(results: dict) -> list[dict]:
    """Per asynchronous seed: the predicted and the measured divergence (module doc)."""
    out = []
    for name, study in results["studies"].items():
        kind = study["design"]["sharpness"]
        if kind == "hessian":
            out += _hessian_predictions(name, study)
        elif kind == "adam":
            out += _adam_predictions(name, study)
    return out


#: the rows that run PipeMare-W's synchronous warm-up (lr_map.ROWS' "warmup" switch)
WARM_ROWS = (PMW, PMW_M)


def _warmup(study: dict, label: str, fraction: float = 0.2) -> int:
    """W of a row: the design's warm-up fraction (paper-shape's 1/5) of the run, or 0."""
    return round(fraction * study["planned_steps"]) if label in WARM_ROWS else 0


def _hessian_predictions(name: str, study: dict) -> list[dict]:
    total, m = study["planned_steps"], study["momentum"] or 0.0
    sharp = {(r["P"], r["lr"]): r["outcome"]["sharpness"] for r in study["runs"] if r["measure"]}
    cache: dict = {}
    out = []
    for run in study["runs"]:
        label, P, lr, seed = run["label"], run["P"], run["lr"], run["outcome"]
        if run["measure"] or label == SYNC:
            continue
        delays, warmup = seed["forward_delay_max"], _warmup(study, label)
        onset, stage, worst = None, None, 0.0
        for k in range(total):
            lams = _sharpness_at(sharp[P, lr], k)
            for s, delay in enumerate(delays):
                step, tau = stage_lr(lr, label, delay, k, total=total, warmup=warmup, momentum=m)
                ratio = step * max(lams[s], 0.0) / _bound(tau, m, cache)
                if ratio >= 1.0 and ratio > worst:
                    worst, stage = ratio, s
            if stage is not None:
                onset = k
                break
        out.append({"study": name, "label": label, "P": P, "lr": lr, "seed": seed["seed"],
                    "predicted": onset is not None, "predicted_onset": onset,
                    "predicted_stage": stage, "measured": bool(seed["diverged"]),
                    "measured_onset": seed["loss_onset"],
                    "measured_stage": _measured_first_stage(seed)})
    return out


def _adam_predictions(name: str, study: dict) -> list[dict]:
    total = study["planned_steps"]
    beta1 = 0.9  # torch's Adam default, which fit uses
    width = study["design"]["eval_every"]
    cells = cell_seeds(study)
    cache: dict = {}
    out = []
    for run in study["runs"]:
        label, P, lr, seed = run["label"], run["P"], run["lr"], run["outcome"]
        if label == SYNC:
            continue
        pairs = _paired_sync(cells, P, lr)
        warmup = _warmup(study, label)
        measured = seed.get("adam_sharpness") or []
        at_switch = next((v for step, v in measured if step == warmup), None)
        after = next((v for step, v in measured if step > warmup), None)
        stage, worst = None, 0.0
        for s, delay in enumerate(seed["forward_delay_max"] if at_switch else []):
            step, tau = stage_lr(lr, label, delay, warmup, total=total, warmup=warmup,
                                 momentum=beta1)
            ratio = step * (1 - beta1) * max(at_switch[s], 0.0) / _bound(tau, beta1, cache)
            if ratio >= 1.0 and ratio > worst:
                worst, stage = ratio, s
        onset = seed["loss_onset"]
        collapsed = onset is not None and warmup - width < onset <= warmup + 0.1 * total
        sync = pairs.get(seed["seed"])
        leaving = stage_excess(seed, sync, width, warmup, windows=1) if sync else []
        finite = [(x, s) for s, x in enumerate(leaving) if x is not None]
        out.append({"study": name, "label": label, "P": P, "lr": lr, "seed": seed["seed"],
                    "predicted": stage is not None, "predicted_onset": warmup if stage is not
                    None else None, "predicted_stage": stage, "measured": collapsed,
                    "measured_onset": onset,
                    "measured_stage": max(finite)[1] if collapsed and finite else None,
                    "sharpness_at_switch": at_switch, "sharpness_after_switch": after})
    return out


def confusion(rows: list[dict]) -> dict:
    """The 2x2 table of predicted against measured, and the design's verdict on the theory."""
    table = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
    for r in rows:
        key = ("t" if r["predicted"] == r["measured"] else "f") + ("p" if r["predicted"]
                                                                   else "n")
        table[key] += 1
    n = sum(table.values())
    positives = table["tp"] + table["fn"]
    accuracy = (table["tp"] + table["tn"]) / n if n else None
    majority = max(positives, n - positives) / n if n else None
    precision = table["tp"] / (table["tp"] + table["fp"]) if table["tp"] + table["fp"] else None
    recall = table["tp"] / positives if positives else None
    if n == 0:
        verdict = UNINFORMATIVE
    elif accuracy <= majority:
        verdict = "fails (no better than always answering the majority class)"
    elif precision is not None and recall is not None and min(precision, recall) >= 0.8:
        verdict = "holds (precision and recall >= 0.8)"
    else:
        verdict = "partly"
    stages = [r for r in rows if r["predicted"] and r["measured"]
              and r["measured_stage"] is not None]
    return {**table, "n": n, "accuracy": accuracy, "majority": majority,
            "precision": precision, "recall": recall, "verdict": verdict,
            "stage_matches": sum(r["predicted_stage"] == r["measured_stage"] for r in stages),
            "stage_compared": len(stages)}


# --------------------------------------------------------------------------- stages


def stage_excess(seed: dict, sync: dict, width: int, start: int = 0,
                 windows: int | None = None) -> list[float | None]:
    """Per stage, ``rms u_s / rms u_s^sync`` over the update-norm windows (of ``width``
    updates) from the one holding update ``start`` on (``windows`` of them, or all), where
    both runs' windows are finite; None where no window is (chapter 07's excess, from the
    stored windows: an RMS of equal windows is the RMS of their updates)."""
    from pipemare_lite.experiments.stage_evidence import excess

    first = start // width
    last = None if windows is None else first + windows
    mine = [w[first:last] for w in seed["update_norm_windows"]]
    theirs = [w[first:last] for w in sync["update_norm_windows"]]
    return excess(mine, theirs)


def _paired_sync(cells: dict, P: int, lr: float) -> dict[int, dict]:
    return {s["seed"]: s for s in cells.get((SYNC, P, lr), [])
            if len(s["update_norm_windows"]) == P}


def stalest_first(results: dict) -> list[dict]:
    """Chapter 07's claim 10b on every asynchronous cell of the map whose sync run has the
    same stages: in every seed, the stalest quarter of the stages has a larger mean excess
    update norm (after the switch, for warm-up rows) than the freshest quarter. Also the
    stage with the largest excess, per seed. Seeds with no finite window are left out;
    "uninformative" where none is left."""
    out = []
    for name, study in results["studies"].items():
        cells, width = cell_seeds(study), study["design"]["eval_every"]
        for (label, P, lr), seeds in sorted(cells.items()):
            pairs = _paired_sync(cells, P, lr)
            if label == SYNC or not pairs:
                continue
            quarter = max(1, P // 4)
            start = _warmup(study, label)
            shown, stale_more, largest = [], 0, []
            for seed in seeds:
                ex = stage_excess(seed, pairs[seed["seed"]], width, start)
                stale = [x for x in ex[:quarter] if x is not None]
                fresh = [x for x in ex[P - quarter:] if x is not None]
                if not stale or not fresh:
                    continue
                stale_more += sum(stale) / len(stale) > sum(fresh) / len(fresh)
                finite = [(x, s) for s, x in enumerate(ex) if x is not None]
                largest.append(max(finite)[1])
                shown.append(seed["seed"])
            n = len(shown)
            verdict = (UNINFORMATIVE if n == 0 else "held" if stale_more == n
                       else "did not hold" if stale_more == 0 else "not separable")
            out.append({"study": name, "label": label, "P": P, "lr": lr, "seeds": n,
                        "stale_quarter_larger": stale_more, "largest_excess_stage": largest,
                        "verdict": verdict})
    return out


# --------------------------------------------------------------------------- the new method


def preregistered(results: dict) -> dict:
    """The momentum-aware T1's test (lr_map's docstring, item 4): (a) on the Transformer,
    (b) on every ResNet cell where PipeMare-W trained, in every ResNet study. (a) is the
    registered lr's (:data:`PREREGISTERED_LR`); the Transformer's other lrs are reported in
    ``a_other_lrs`` as exploration, not as the test."""
    out: dict = {"a": None, "a_other_lrs": [], "b": []}
    studies = results["studies"]
    if "transformer_long" in studies:
        study = studies["transformer_long"]
        cells = cell_seeds(study)
        preds = {(p["label"], p["lr"], p["seed"]): p
                 for p in _adam_predictions("transformer_long", study)}
        for lr in study["design"]["lr_grid"]:
            m, w = cells.get((PMW_M, 8, lr)), cells.get((PMW, 8, lr))
            if m and w:
                claim = _better("4a", "the momentum-aware T1 removes the collapse at the switch",
                                "PipeMare-W (momentum-aware)", qualities(m), "PipeMare-W",
                                qualities(w), CONFIDENCE)
                collapses = {label: sum(preds[label, lr, s["seed"]]["measured"] for s in seeds)
                             for label, seeds in ((PMW, w), (PMW_M, m))}
                entry = {**claim, "lr": lr, "collapses": collapses, "seeds": len(w)}
                if lr == PREREGISTERED_LR:
                    out["a"] = entry
                else:
                    out["a_other_lrs"].append(entry)
    for name, study in studies.items():
        if study["design"].get("base") != "resnet":
            continue
        cells = cell_seeds(study)
        for P in study["design"]["granularities"]:
            for lr in study["design"]["lr_grid"]:
                m, w = cells.get((PMW_M, P, lr)), cells.get((PMW, P, lr))
                if not (m and w) or any(s["diverged"] for s in w):
                    continue
                diff = difference_interval([(1, qualities(m)), (-1, qualities(w))],
                                           2 * CONFIDENCE - 1)
                out["b"].append({"study": name, "P": P, "lr": lr, "difference": diff,
                                 "verdict": judge(diff["low"], diff["high"], -MARGIN)})
    b = out["b"]
    out["at_no_cost"] = (None if not b else all(x["verdict"] == "held" for x in b))
    out["removes_collapse"] = None if out["a"] is None else out["a"]["verdict"] == "held"
    return out


def plain_answer(assessment: dict, study: str) -> list[str]:
    """The map in words, one sentence per method and P: at which learning rates the method
    reached 1F1B's quality within the margin (the one-sided non-inferiority test of every
    phase cell), where it fell short, where seeds cannot tell and where every run diverged."""
    words = {"held": "reached 1F1B within 0.01", "did not hold": "fell short",
             "not separable": "cannot be told apart", UNINFORMATIVE: "diverged in every seed"}
    by_method: dict[tuple, dict[str, list]] = {}
    for c in assessment["phase"]:
        if c["study"] == study and c["reaches_sync"] is not None:
            groups = by_method.setdefault((c["label"], c["P"]), {})
            groups.setdefault(c["reaches_sync"], []).append(f"{c['lr']:g}")
    lines = []
    for (label, P), groups in by_method.items():
        parts = [f"{words[v]} at lr {', '.join(groups[v])}" for v in words if v in groups]
        lines.append(f"{label}, P = {P}: " + "; ".join(parts) + ".")
    return lines


def no_cost_text(pre: dict) -> str:
    """The pre-registered test's two answers in words: (a)'s verdict, and (b) held in how many
    ResNet cells (it holds only where it held in every one)."""
    a = "not run" if pre["a"] is None else pre["a"]["verdict"]
    counts: dict[str, int] = {}
    for b in pre["b"]:
        counts[b["verdict"]] = counts.get(b["verdict"], 0) + 1
    b = ", ".join(f"{v} in {n}" for v, n in sorted(counts.items())) or "no cell"
    return (f"removes the collapse at the switch (a): {a}; at no cost on the ResNet (b), of "
            f"{len(pre['b'])} cells where PipeMare-W trained: {b} (holds only if held in every "
            f"one: {'yes' if pre['at_no_cost'] else 'no'})")


def assess(results: dict) -> dict:
    """Everything the design reports, from the stored runs."""
    preds = predictions(results)
    by_study = {name: confusion([p for p in preds if p["study"] == name])
                for name in results["studies"] if any(p["study"] == name for p in preds)}
    return {"phase": phase_cells(results), "verdicts": verdicts_by_lr(results),
            "predictions": preds, "confusion": by_study, "preregistered": preregistered(results),
            "stalest_first": stalest_first(results)}


# --------------------------------------------------------------------------- tables


def _fmt(x, digits=3) -> str:
    return "-" if x is None else (f"{x:.{digits}f}" if isinstance(x, float) else str(x))


def markdown(results: dict) -> str:
    """The phase diagrams, verdicts by lr, confusion tables and the pre-registered test."""
    a = results.get("assessment") or assess(results)
    lines = ["# lr-map: where asynchronous pipeline training works", ""]
    for name, study in results["studies"].items():
        lrs = study["design"]["lr_grid"]
        lines += [f"## {name}: quality minus 1F1B's at the same lr (diverged seeds / seeds)",
                  "", f"regenerate: {study['command']}", ""]
        for P in study["design"]["granularities"]:
            lines += [f"P = {P}", "", "| row | " + " | ".join(f"lr {lr}" for lr in lrs) + " |",
                      "|---|" + "---|" * len(lrs)]
            for label in study["design"]["rows"]:
                cells = {c["lr"]: c for c in a["phase"] if c["study"] == name
                         and c["label"] == label and c["P"] == P}
                texts = []
                for lr in lrs:
                    c = cells.get(lr)
                    if c is None:
                        texts.append("not run")
                        continue
                    value = c["mean"] if c["minus_sync"] is None else c["minus_sync"]["estimate"]
                    sign = "" if c["minus_sync"] is None else "+"
                    texts.append(f"{value:{sign}.3f} ({c['diverged']}/{c['n']})")
                lines.append(f"| {label} | " + " | ".join(texts) + " |")
            lines.append("")
    lines += ["## Verdicts by lr", "", "| study | P | lr | claim | verdict |",
              "|---|---|---|---|---|"]
    for v in a["verdicts"]:
        lines.append(f"| {v['study']} | {v['P']} | {v['lr']} | {v['number']}. {v['claim']} | "
                     f"{v['verdict']} |")
    lines += ["", "## Chapter 06's bound as a classifier of divergence", "",
              "| study | n | predicted & diverged | predicted, trained | missed | trained, as "
              "predicted | accuracy | majority | verdict |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, c in a["confusion"].items():
        lines.append(f"| {name} | {c['n']} | {c['tp']} | {c['fp']} | {c['fn']} | {c['tn']} | "
                     f"{_fmt(c['accuracy'])} | {_fmt(c['majority'])} | {c['verdict']} |")
    lines += ["", "The predicted failing stage against the measured one (ResNet: the first stage "
              "with a non-finite update; Transformer: the stage whose update norm left sync's "
              "most in the window holding the switch), in the seeds predicted and measured to "
              "fail:", ""]
    for name, c in a["confusion"].items():
        lines.append(f"- {name}: the same stage in {c['stage_matches']} of "
                     f"{c['stage_compared']}")
    lines += ["", "## The stalest stages leave sync's path most (chapter 07's claim 10b, every "
              "cell)", "", "| study | row | P | lr | seeds | stalest quarter larger | stage "
              "with the largest excess, per seed | verdict |", "|---|---|---|---|---|---|---|---|"]
    for x in a.get("stalest_first", []):
        lines.append(f"| {x['study']} | {x['label']} | {x['P']} | {x['lr']} | {x['seeds']} | "
                     f"{x['stale_quarter_larger']} | "
                     f"{', '.join(map(str, x['largest_excess_stage'])) or '-'} | "
                     f"{x['verdict']} |")
    pre = a["preregistered"]
    lines += ["", "## The momentum-aware T1's pre-registered test", ""]
    if pre["a"]:
        lines.append(f"(a) Transformer at lr {pre['a']['lr']}: {pre['a']['numbers']}; "
                     f"collapses at the switch {pre['a']['collapses']} of {pre['a']['seeds']} "
                     f"seeds each: **{pre['a']['verdict']}**")
    for x in pre.get("a_other_lrs", []):
        lines.append(f"(exploration, not the registered test) Transformer at lr {x['lr']}: "
                     f"{x['numbers']}; collapses at the switch {x['collapses']} of "
                     f"{x['seeds']} seeds each: {x['verdict']}")
    for b in pre["b"]:
        d = b["difference"]
        where = f"{b['study']}, " if b.get("study", "resnet_lr_map") != "resnet_lr_map" else ""
        lines.append(f"(b) ResNet {where}P = {b['P']}, lr {b['lr']}: momentum-aware - PipeMare-W "
                     f"{d['estimate']:+.3f} (90% CI {d['low']:+.3f}..{d['high']:+.3f}): "
                     f"non-inferior within {MARGIN}: **{b['verdict']}**")
    lines += ["", no_cost_text(pre), ""]
    return "\n".join(lines)

