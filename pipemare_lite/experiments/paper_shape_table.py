"""The paper-shape results as markdown tables (chapter 10 shows them; plain Python, no torch).

Every number comes from the stored results: mean [min, max] over seeds, a diverged seed
shown in the count of diverged seeds (and counted as accuracy 0 by the verdicts only).
"""

from __future__ import annotations

import math

LABELS = (
    "1F1B (sync)", "PipeDream (stash)", "2BW", "async", "async + T1", "async + T2",
    "async + T1 + T2", "PipeMare-W (T1 + T2 + warm-up)",
)  # fmt: skip


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


def _accuracy_cell(row: dict) -> str:
    if row["not_run"]:
        return "not run"
    text = mean_range(row["summary"]["final_accuracy"])
    if row["diverged_seeds"]:
        steps = [s["divergence_step"] for s in row["seeds"] if s["diverged"]]
        text += f" (diverged {row['diverged_seeds']}/{len(row['seeds'])}: step " + \
            ", ".join(map(str, steps)) + ")"
    return text


def _rows(results: dict, model: str, sweep: str, P: int | None = None) -> list[dict]:
    return [r for r in results["rows"] if r["model"] == model and r["sweep"] == sweep
            and (P is None or r["P"] == P)]  # fmt: skip


def _setting_line(results: dict, model: str) -> str:
    cfg, part = results["config"][model], results["models"][model]
    arch = ", ".join(f"{k} {v}" for k, v in cfg["architecture"].items())
    data = part["dataset"]
    return (f"**{model}** ({arch}) on {data['name']} ({data['train']} train / {data['test']} "
            f"test), {cfg['optimizer']}" + (f" momentum {cfg['momentum']}" if cfg["momentum"]
                                           else "")
            + f", cosine lr schedule, batch {cfg['batch_size']} = N {cfg['num_microbatches']} "
            f"microbatches, {cfg['epochs']} epochs ({part['planned_steps']} steps), P in "
            f"{_seq(cfg['granularities'])}; seeds {_seq(results['config']['seeds'])}. lr = "
            f"{part['chosen_lr']}: {part['lr_rule']}. Sweep: "
            + ", ".join(f"{e['lr']}: {mean_range(e['final_accuracy'])}"
                        + (f" ({e['diverged_seeds']} diverged)" if e["diverged_seeds"] else "")
                        for e in part["lr_sweep"])
            + f". 1F1B bitwise the same at every P: {part['sync_bitwise_same_at_every_P']}.")


def _granularity_table(results: dict, model: str) -> list[str]:
    ps = results["config"][model]["granularities"]
    grid = {(r["P"], r["label"]): r for r in _rows(results, model, "grid")}
    lines = ["| row | " + " | ".join(f"P = {p}" for p in ps) + " |",
             "|---|" + "---|" * len(ps)]  # fmt: skip
    for label in LABELS:
        lines.append(f"| {label} | " + " | ".join(_accuracy_cell(grid[(p, label)]) for p in ps)
                     + " |")
    delays = []
    for label in ("async", "PipeDream (stash)", "2BW"):
        cells = [grid[(p, label)] for p in ps]
        delays.append(f"{label} " + ", ".join(
            f"P={c['P']}: {c['forward_delay_max'][0] if not c['not_run'] else '-'}" for c in cells))
    lines += ["", "Measured max forward delay of stage 0 (updates): " + "; ".join(delays) + "."]
    return lines


def _detail_table(results: dict, model: str) -> list[str]:
    P = results["config"][model]["granularities"][-1]
    target = results["config"][model]["target_accuracy"]
    lines = [f"| row (P = {P}) | test accuracy | test loss | steps to {target} | weights | "
             "stash | T2 buffer | optimizer | activations | utilization (sim.) | N |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in _rows(results, model, "grid", P):
        if r["not_run"]:
            lines.append(f"| {r['label']} | not run: {r['not_run']} |" + " |" * 9)
            continue
        m, s = r["memory_bytes"], r["summary"]
        reached = s["steps_to_target"]
        missed = reached["non_finite"]
        lines.append(
            f"| {r['label']} | {_accuracy_cell(r)} | {mean_range(s['final_loss'])} | "
            f"{mean_range(reached, 0)}{f' ({missed} never)' if missed else ''} | "
            f"{m.get('weights', 0)} | {m.get('stash', 0)} | {m.get('t2_buffer', 0)} | "
            f"{m.get('optimizer', 0)} | {m.get('activations', 0)} | "
            f"{r['utilization']['utilization']:.3f} | {r['num_microbatches']} |")
    return lines


def _sweep_table(results: dict, sweep: str, key: str, title: str) -> list[str]:
    rows = _rows(results, "resnet", sweep)
    if not rows:
        return []
    lines = [f"| {title} | test accuracy | test loss |", "|---|---|---|"]
    for r in rows:
        lines.append(f"| {_num(r[key], 4)} | {_accuracy_cell(r)} | "
                     f"{mean_range(r['summary']['final_loss'])} |")
    return lines


def _evidence(results: dict) -> list[str]:
    P = results["config"]["resnet"]["granularities"][-1]
    lines = [f"Per-stage evidence, resnet at P = {P} (update norms against the 1F1B run of "
             "the same seed; onset: first update with norm >= "
             f"{results['config']['blowup_factor']:g}x sync's or non-finite):", ""]
    for r in _rows(results, "resnet", "grid", P):
        if r["label"] == "1F1B (sync)" or r["not_run"]:
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
            ex = [v for v in s["excess"] if v is not None]
            parts.append(f"seed {s['seed']}: onset "
                         + (f"stage(s) {','.join(map(str, stages))} at {first}" if known
                            else "none")
                         + (f", first non-finite stage(s) {','.join(map(str, non_finite))} at "
                            f"{min(bad)}" if bad else "")
                         + (f", excess stage 0 {_sci(s['excess'][0])} / stage {P - 1} "
                            f"{_sci(s['excess'][-1])}" if ex else ""))
        lines.append(f"- {r['label']}: " + "; ".join(parts))
    return lines


def markdown(results: dict) -> str:
    """The whole report: verdicts first, then the tables behind them."""
    quick = results["quick"]
    lines = [f"# PipeMare's shape in miniature{' (quick)' if quick else ''}", "",
             f"Regenerate with `{results['command']}` "
             f"({results['runs']} training runs, {results['wall_seconds']} s wall, "
             f"{results['cpu_seconds']} s CPU on the machine in the .meta.json).", "",
             "## Verdicts against the paper's claims", "",
             "| # | claim | test (fixed in advance) | verdict | numbers (mean [min, max] over "
             "seeds) |", "|---|---|---|---|---|"]  # fmt: skip
    for c in results["claims"]:
        lines.append(f"| {c['number']} | {c['claim']} | {c['test']} | **{c['verdict']}** | "
                     f"{c['numbers']} |")
    for model in ("resnet", "transformer"):
        lines += ["", f"## {model}", "", _setting_line(results, model), "",
                  "Final test accuracy, mean [min, max] over seeds:", ""]
        lines += _granularity_table(results, model)
        lines += [""] + _detail_table(results, model)
        lines += ["", "A diverged seed's accuracy and loss are its last evaluation (the "
                  "weights when the loss turned non-finite); the verdicts count its accuracy "
                  "as 0. Memory: peak bytes per kind measured by the executor, summed over "
                  "stages (largest over seeds). Utilization: the row's schedule over the "
                  "whole run, simulated with F = 1, B = 2."]
    k = _sweep_table(results, "k", "t1_k_fraction", "T1 horizon K (fraction of the run)")
    g = _sweep_table(results, "gamma", "gamma", "T2 gamma")
    if k or g:
        P = results["config"]["resnet"]["granularities"][-1]
        lines += ["", f"## Sweeps at P = {P} (resnet)", "", "async + T1 over K:", ""] + k
        lines += ["", "async + T1 + T2 over gamma (K = 1/4):", ""] + g
    lines += ["", "## Where async goes wrong", ""] + _evidence(results)
    timing = ", ".join(f"{m} {p['cpu_seconds']} s" for m, p in results["models"].items())
    lines += ["", f"Training CPU time per model: {timing}; {results['jobs']} process(es)."]
    return "\n".join(lines) + "\n"
