"""The paper-shape results as markdown tables (chapter 10 shows them; plain Python, no torch).

Every number comes from the stored results. A row's quality is mean (95 % interval) [min,
max] over seeds, a diverged seed counted as 0 (the one convention,
:func:`pipemare_lite.experiments.record.seed_quality`), with the diverged seeds counted by rule.
"""

from __future__ import annotations

import math
import re

from pipemare_lite.experiments import record
from pipemare_lite.experiments.paper_shape_claims import PIPEDREAM, PMW, cell_rows, onset_gaps
from pipemare_lite.experiments.paper_shape_design import LABELS, SYNC


def _num(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _seq(values) -> str:
    """A tuple or a list (JSON stores tuples as lists) the same way: ``4, 16``."""
    return ", ".join(map(str, values))


def _sci(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def mean_range(summary: dict | None, digits: int = 3) -> str:
    """``mean [min, max]`` of a seed summary ('-' when no seed gave a finite value)."""
    if summary is None or summary["mean"] is None:
        return "-"
    return (f"{summary['mean']:.{digits}f} [{summary['min']:.{digits}f}, "
            f"{summary['max']:.{digits}f}]")  # fmt: skip


def quality_cell(row: dict) -> str:
    """``mean (CI low..high) [min, max]``, then the diverged seeds by rule ('not run' when
    the row did not run); the interval cut to [0, 1] where it reached beyond (said so)."""
    if row["not_run"]:
        return "not run"
    q = row["summary"]["quality"]
    text = (f"{q['mean']:.3f} ({record.interval_text(*q['interval'])}) [{q['min']:.3f}, "
            f"{q['max']:.3f}] n={q['n']}")  # fmt: skip
    if row["diverged_seeds"]:
        text += (f"; diverged {row['diverged_seeds']}/{q['n']} (non-finite "
                 f"{row['diverged_non_finite']}, loss rule {row['diverged_loss_rule']})")
    return text


def _seed_range(seeds: list[int]) -> str:
    if seeds == list(range(seeds[0], seeds[0] + len(seeds))) and len(seeds) > 2:
        return f"{seeds[0]}..{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _check_cell_words(results: dict, row: dict) -> str:
    """What the check cell is, for a reader who never heard the name: the row, where, and
    why it has its own seeds."""
    return (f"{row['label']} at P = {row['P']}, lr {row['lr']:g}, run only as the "
            f"reproducibility check (`{results['command']} --check` re-runs one of its seeds "
            "against the stored ones); not in the tables, which show this row's grid seeds")


def seed_groups(results: dict) -> str:
    """Which rows ran which seeds, read from the stored rows (the meta's ``seeds`` is only
    the default set): the smaller groups named study by study, the largest "every other"."""
    groups: dict[tuple, dict[str, list[str]]] = {}
    for r in results["rows"]:
        if r["not_run"] or not r["seeds"]:
            continue
        what = _check_cell_words(results, r) if r["sweep"] == "check" else r["label"] + {
            "grid": "", "curvature": " (curvature runs)"}.get(
            r["sweep"], f" ({r['sweep']} cell)")  # fmt: skip
        names = groups.setdefault(tuple(s["seed"] for s in r["seeds"]), {})
        if what not in names.setdefault(r["study"], []):
            names[r["study"]].append(what)
    ordered = sorted(groups.items(), key=lambda g: sum(map(len, g[1].values())))
    lines = []
    for seeds, studies in ordered[:-1]:
        lines.append(f"seeds {_seed_range(list(seeds))} (n = {len(seeds)}):")
        lines += [f"    {study}: {', '.join(names)}" for study, names in studies.items()]
    if ordered:
        seeds = ordered[-1][0]
        lines.append(f"seeds {_seed_range(list(seeds))} (n = {len(seeds)}): every other row "
                     "and cell")
    return "\n".join(lines)


def stage0_delay(row: dict) -> tuple[str, str]:
    """Stage 0's measured forward delay (updates) over a row's seeds, and a note when the
    seeds differ: a run that diverged stops, and one that stopped before the pipeline was
    full applied only the delays it reached (its largest is then below the steady state).

    Returns ``(cell, note)``: ``"16"`` and ``""`` when every seed agrees, else the largest
    with the per-seed values and the updates the short seeds completed."""
    if row["not_run"]:
        return "-", ""
    delays = [s["forward_delay_max"][0] for s in row["seeds"]]
    largest = max(delays)
    if len(set(delays)) == 1:
        return str(largest), ""
    short = [s for s in row["seeds"] if s["forward_delay_max"][0] < largest]
    return (f"{largest} (seeds {'/'.join(map(str, delays))})",
            "; ".join(f"seed {s['seed']} "
                      + (f"diverged at update {s['divergence_step']}" if s["diverged"]
                         else f"ended after {s['steps']} updates")
                      + f" with stage 0's delay at {s['forward_delay_max'][0]}" for s in short))


def _rows(results: dict, study: str, sweep: str, P: int | None = None) -> list[dict]:
    return [r for r in results["rows"] if r["study"] == study and r["sweep"] == sweep
            and (P is None or r["P"] == P)]  # fmt: skip


def _study_config(results: dict, study: str) -> dict:
    return next(s for s in results["config"]["studies"] if s["name"] == study)


def _setting_line(results: dict, study: str) -> str:
    cfg, part = _study_config(results, study), results["studies"][study]
    arch = ", ".join(f"{k} {v}" for k, v in cfg["architecture"].items())
    data = part["dataset"]
    warm = (f", linear lr warm-up over {cfg['lr_warmup_fraction']:g} of the run"
            if cfg["lr_warmup_fraction"] else "")
    return (f"**{study}**: {cfg['model']} ({arch}) on {data['name']} ({data['train']} train / "
            f"{data['test']} test), {cfg['optimizer']}"
            + (f" momentum {cfg['momentum']}" if cfg["momentum"] else "")
            + f", {cfg['lr_schedule']} lr schedule{warm}, batch {cfg['batch_size']} = N "
            f"{cfg['num_microbatches']} microbatches, {cfg['epochs']} epochs "
            f"({part['planned_steps']} updates), P in {_seq(cfg['granularities'])}. T2's gamma "
            f"{results['config']['gamma']:g} for every T2 row, fixed in advance and untuned (no "
            f"gamma was swept on these networks). lr = "
            f"{part['chosen_lr']}: {part['lr_rule']}. Sweep: "
            + ", ".join(f"{e['lr']}: {mean_range(e['quality'])}"
                        + (f" ({e['diverged_seeds']} diverged)" if e["diverged_seeds"] else "")
                        for e in part["lr_sweep"])
            + (f". 1F1B bitwise the same at P = {cfg['sweep_P']} and every P of the study: "
               f"{part['sync_bitwise_same_at_every_P']}."
               if part["sync_bitwise_same_at_every_P"] is not None else "."))


def _grid_table(results: dict, study: str) -> list[str]:
    ps = _study_config(results, study)["granularities"]
    grid = {(r["P"], r["label"]): r for r in _rows(results, study, "grid")}
    labels = [x for x in LABELS if any((p, x) in grid for p in ps)]
    lines = ["| row | " + " | ".join(f"P = {p}" for p in ps) + " |",
             "|---|" + "---|" * len(ps)]  # fmt: skip
    for label in labels:
        lines.append(f"| {label} | " + " | ".join(
            quality_cell(grid[(p, label)]) if (p, label) in grid else "-" for p in ps) + " |")
    delays, notes = [], []
    for label in ("async", "PipeDream (stash)", "2BW"):
        cells = [(c["P"], *stage0_delay(c)) for p in ps if (c := grid.get((p, label)))]
        if cells:
            delays.append(f"{label} " + ", ".join(f"P={P}: {cell}" for P, cell, _ in cells))
            notes += [f"{label} P={P}: {note}" for P, _, note in cells if note]
    lines += ["", "Measured max forward delay of stage 0 (updates; the largest over seeds): "
              + "; ".join(delays) + "."]
    if notes:
        lines += ["", "A seed that diverged stops, and one that stopped before the pipeline was "
                  "full applied only the delays it reached: " + "; ".join(notes) + "."]
    return lines


def _detail_table(results: dict, study: str) -> list[str]:
    cfg = _study_config(results, study)
    P = cfg["granularities"][-1]
    lines = [f"| row (P = {P}) | test loss | steps to {cfg['target_accuracy']} | weights | "
             "stash | T2 buffer | optimizer | activations | utilization (sim.) | N |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in _rows(results, study, "grid", P):
        if r["not_run"]:
            lines.append(f"| {r['label']} | not run: {r['not_run']} |" + " |" * 8)
            continue
        m, s = r["memory_bytes"], r["summary"]
        reached = s["steps_to_target"]
        missed = reached["non_finite"]
        warm = sum(seed["steps_to_target"] is not None
                   and seed["steps_to_target"] <= r["warmup_minibatches"] for seed in r["seeds"])
        during = (f" (reached during the synchronous warm-up of {r['warmup_minibatches']} "
                  f"updates in {warm} of {len(r['seeds'])} seeds)") if warm else ""
        lines.append(
            f"| {r['label']} | {mean_range(s['final_loss'])} | "
            f"{mean_range(reached, 0)}{f' ({missed} never)' if missed else ''}{during} | "
            f"{m.get('weights', 0)} | {m.get('stash', 0)} | {m.get('t2_buffer', 0)} | "
            f"{m.get('optimizer', 0)} | {m.get('activations', 0)} | "
            f"{r['utilization']['utilization']:.3f} | {r['num_microbatches']} |")
    return lines


def _factor_table(results: dict, study: str) -> list[str]:
    rows = _rows(results, study, "horizon") + _rows(results, study, "warmup")
    if not rows:
        return []
    lines = ["| cell | K (updates) | warm-up (updates) | quality |", "|---|---|---|---|"]
    for r in _rows(results, study, "grid"):
        if r.get("t1"):
            lines.append(f"| {r['label']} (row: K = the whole asynchronous phase) | "
                         f"{results['studies'][study]['planned_steps'] - r['warmup_minibatches']}"
                         f" | {r['warmup_minibatches']} | {quality_cell(r)} |")
    for r in rows:
        what = (f"K = {r['t1_k_fraction']:g} of the run" if r["sweep"] == "horizon"
                else f"warm-up {r['warmup_fraction']:g} of the run")
        lines.append(f"| {r['label']}, {what} | {r['t1_horizon'] or '-'} | "
                     f"{r['warmup_minibatches']} | {quality_cell(r)} |")
    return lines


def _prediction_table(results: dict) -> list[str]:
    if not results.get("predictions"):
        return []
    first = results["predictions"][0]
    lines = ["Stability bounds used (largest stable lr x lam, momentum heavy ball) by delay: "
             + ", ".join(f"tau {t}: {b:.4g}" for t, b in first["bounds"].items()) + ".", "",
             "| cell | K | W | seed: measured / predicted (any update) / predicted (after the "
             "anneal) | agree (any update) | agree (after the anneal) | in order (any update) "
             "| in order (after the anneal) |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for p in results["predictions"]:
        what = p["label"] + ("" if p["sweep"] == "grid" else f" ({p['sweep']} cell)")
        pairs = "; ".join(f"{s['seed']}: {_num(s['measured'])} / "
                          f"{_num(s['any_update']['predicted'])} / "
                          f"{_num(s['after_anneal']['predicted'])}" for s in p["seeds"])
        order = [sum(g["in_order"] for g in onset_gaps(p, rule))
                 for rule in ("any_update", "after_anneal")]
        lines.append(f"| {what} | {p['t1_horizon']} | {p['warmup_minibatches']} | {pairs} | "
                     f"{p['agreeing']['any_update']}/{p['of']} | "
                     f"{p['agreeing']['after_anneal']}/{p['of']} | "
                     f"{order[0]}/{p['of']} | {order[1]}/{p['of']} |")
    lines += ["", f"Agreement (fixed in advance): both none, or within "
              f"{first['tolerance_updates']:g} updates either way. In order (a stricter reading "
              "added after the run, chapter 08): both none, or the onset at or after the "
              "predicted update and at most that many updates later; an onset before the "
              "predicted crossing cannot have been caused by it. '-': none."]
    return lines


def _evidence(results: dict, study: str) -> list[str]:
    P = _study_config(results, study)["granularities"][-1]
    lines = [f"Per-stage evidence, {study} at P = {P} (update norms against the 1F1B run of "
             "the same seed; onset: first update with norm >= "
             f"{results['config']['blowup_factor']:g}x sync's or non-finite):", ""]
    for r in _rows(results, study, "grid", P):
        if r["label"] == SYNC or r["not_run"]:
            continue
        parts = []
        for s in r["seeds"]:
            onsets = s["blowup_onset"]
            known = [k for k in onsets if k is not None]
            first = min(known) if known else None
            stages = [i for i, k in enumerate(onsets) if k == first] if known else []
            bad = [k for k in s["first_non_finite_update"] if k is not None]
            non_finite = [i for i, k in enumerate(s["first_non_finite_update"])
                          if bad and k == min(bad)]  # fmt: skip
            parts.append(f"seed {s['seed']}: onset "
                         + (f"stage(s) {','.join(map(str, stages))} at {first}" if known
                            else "none")
                         + (f", first non-finite stage(s) {','.join(map(str, non_finite))} at "
                            f"{min(bad)}" if bad else ""))
        lines.append(f"- {r['label']}: " + "; ".join(parts))
    return lines


CONVENTION = (
    "Quality: final test accuracy, a diverged seed (non-finite loss, or a last-window training "
    "loss above the fixed multiple of the first window's) counted as 0 in every table, "
    "interval and verdict. Cells: mean (95 % Student-t interval) [min, max] n=seeds; an "
    "interval that reached beyond the range an accuracy can take is shown cut to [0, 1] (a "
    "difference of two: to [-1, 1]) and marked 'cut' (with few seeds that disagree it says "
    "only that they disagree; no verdict changes, every threshold lies inside the range). "
    "Memory: "
    "peak bytes per kind measured by the executor, summed over stages (largest over seeds). "
    "Utilization: the row's schedule over the whole run, simulated with F = 1, B = 2.")


#: what each verdict says in plain words (the one place a verdict becomes a sentence)
PLAIN_WORDS = {
    "held": "the miniature supports it",
    "did not hold": "the miniature contradicts it",
    "not separable": "the miniature cannot tell: its seeds do not decide it",
    "uninformative": "the miniature says nothing: every compared run diverged",
}


def claim_scope(results: dict, number: str) -> str | None:
    """What claim ``number`` leaves out, from the stored rows; None when nothing is said.

    Claim 8 is the paper's memory claim, and like the paper it counts weight-sized memory
    only (weights, stash, T2 buffer, optimizer state); activations are outside it. The scope
    prints both totals, so a reader sees which way the whole memory goes. The claim itself is
    stored as the experiment fixed it (:mod:`~pipemare_lite.experiments.paper_shape_claims`).
    """
    if number != "8":
        return None
    rows = cell_rows(results, "resnet_long")
    if PIPEDREAM not in rows or PMW not in rows:
        return None
    pmw, dream = rows[PMW]["memory_bytes"], rows[PIPEDREAM]["memory_bytes"]
    weight_sized = sum(pmw[k] for k in ("weights", "stash", "t2_buffer", "optimizer"))
    total_pmw, total_dream = (sum(m[k] for k in ("weights", "stash", "t2_buffer", "optimizer",
                                                 "activations")) for m in (pmw, dream))
    way = "the other way" if total_pmw >= total_dream else "the same way"
    return (f"weight-sized memory only (weights, stash, T2 buffer, optimizer state); PipeMare-W's "
            f"activations are {pmw['activations'] / weight_sized:.0f}x its weight-sized bytes, "
            f"and with them the total goes {way}: PipeMare-W {total_pmw} B, PipeDream "
            f"{total_dream} B ({total_pmw / total_dream:.2f}x PipeDream's)")


def describe_claim(claim: dict, results: dict | None = None) -> str:
    """One claim as a chapter prints it: number, claim, verdict in plain words, numbers;
    given the ``results``, what the claim leaves out (:func:`claim_scope`) as well."""
    scope = None if results is None else claim_scope(results, claim["number"])
    return (f"claim {claim['number']}, {claim['claim']}: {claim['verdict'].upper()}, "
            f"{PLAIN_WORDS[claim['verdict']]}\n   test: {claim['test']}\n   "
            f"numbers: {claim['numbers']}" + ("" if scope is None else f"\n   scope: {scope}"))


def compared_seeds(claim: dict) -> list[int]:
    """The seed counts of the rows a claim compares, as its numbers print them (``n=8``);
    empty for a claim without seed noise (bytes, simulated utilization, per-seed tests)."""
    return [int(n) for n in re.findall(r"\bn=(\d+)", claim["numbers"])]


def claims_by_seed_count(results: dict) -> str:
    """One line per combination of seed counts: which claims compare rows of how many seeds."""
    groups: dict[str, list[str]] = {}
    for c in results["claims"]:
        counts = compared_seeds(c)
        if len(counts) == 3:  # a row against the midpoint of two others
            key = f"{counts[0]} seeds against the midpoint of {counts[1]} and {counts[2]}"
        elif counts:
            key = " against ".join(map(str, counts)) + " seeds"
        else:
            key = "no seed interval (bytes, simulated utilization, or every seed tested)"
        groups.setdefault(key, []).append(c["number"])
    return "\n".join(f"claims {', '.join(numbers)}: {key}" for key, numbers in groups.items())


def claims_numbered(results: dict, *numbers: str) -> list[dict]:
    """The stored claims with these numbers, in the order given (absent ones left out)."""
    by_number = {c["number"]: c for c in results["claims"]}
    return [by_number[n] for n in numbers if n in by_number]


def verdict_markdown(results: dict) -> str:
    """The verdict of chapter 10: one table, each claim with its answer in plain words and
    its numbers (mean, 95 % interval, min-max, seeds), every number read from ``results``;
    under a claim, in italics, what it leaves out (:func:`claim_scope`)."""
    lines = ["| # | PipeMare's claim (where tested) | test | answer | numbers |",
             "|---|---|---|---|---|"]  # fmt: skip
    for c in results["claims"]:
        scope = claim_scope(results, c["number"])
        claim = c["claim"] if scope is None else f"{c['claim']}; *scope: {scope}*"
        lines.append(f"| {c['number']} | {claim} | {c['test']} | **{c['verdict']}**: "
                     f"{PLAIN_WORDS[c['verdict']]} | {c['numbers']} |")
    return "\n".join(lines)


def verdict_table(results: dict) -> list[str]:
    """The verdict table: one line per claim."""
    lines = ["| # | claim | test (fixed in advance) | verdict | numbers |",
             "|---|---|---|---|---|"]  # fmt: skip
    for c in results["claims"]:
        lines.append(f"| {c['number']} | {c['claim']} | {c['test']} | **{c['verdict']}** | "
                     f"{c['numbers']} |")
    return lines


def markdown(results: dict) -> str:
    """The whole report: verdicts first, then the tables behind them."""
    quick = results["quick"]
    lines = [f"# PipeMare's shape in miniature{' (quick)' if quick else ''}", "",
             f"Regenerate with `{results['command']}` "
             f"({results['runs']} training runs, {results['wall_seconds']} s wall, "
             f"{results['cpu_seconds']} s CPU on the machine in the .meta.json).", "",
             CONVENTION, "", "## Verdicts against the paper's claims", ""]  # fmt: skip
    lines += verdict_table(results)
    prediction = _prediction_table(results)
    if prediction:
        lines += ["", "## T1's end predicted from chapter 06's bound (resnet_long)", ""]
        lines += prediction
    for study in results["studies"]:
        lines += ["", f"## {study}", "", _setting_line(results, study), "",
                  "Quality by row and P:", ""]
        lines += _grid_table(results, study)
        lines += [""] + _detail_table(results, study)
        factors = _factor_table(results, study)
        if factors:
            lines += ["", "T1 horizon and warm-up length (factor cells):", ""] + factors
        if study == "resnet_long":
            lines += ["", "### Where async goes wrong", ""] + _evidence(results, study)
    timing = ", ".join(f"{m} {p['cpu_seconds']} s" for m, p in results["studies"].items())
    lines += ["", f"Training CPU time per study: {timing}; {results['jobs']} process(es)."]
    return "\n".join(lines) + "\n"
