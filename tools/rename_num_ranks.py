"""Rename ``Schedule.num_stages`` (it counts ranks) to ``num_ranks`` (issue 11).

Run from the repository root: ``python3 tools/rename_num_ranks.py``. Idempotent.
Three identifier-level rules, applied to an explicit file set:

1. FULL: every ``num_stages`` token -> ``num_ranks`` in files where it always means
   ranks (the schedule builders, the registry, ``build_method_schedule``, tradeoff).
2. ATTR: ``<schedule>.num_stages`` -> ``<schedule>.num_ranks`` in every .py/.ipynb/.md,
   where ``<schedule>`` is a name that holds a Schedule (list below).
3. KEYWORD: ``Schedule(name=..., num_stages=`` -> ``num_ranks=``.

Not touched (``num_stages`` is true there, or is someone else's API): ``fit(num_stages=)``
and its config key, ``partition``, ``paper_arithmetic.group_layers``, ``placement``,
``methods/hooks.StageContext``, ``training/history``, ``StalenessTable.num_stages``
(its rows are virtual stages), ``viz/stages.stage_color``, the torch-interop
``PipelineStage``/``_add_send_recv(num_stages=...)`` calls, ``PartitionedModel``.
"""
import pathlib
import re

FULL = [
    *sorted(str(p) for p in pathlib.Path("pipemare_lite/schedules").glob("*.py")),
    "pipemare_lite/methods/registry.py",
    "pipemare_lite/analysis/tradeoff.py",
    "tests/test_schedules.py",
    "tests/test_schedules_io.py",
]
SKIP_DIRS = (".venv", ".git", "data", "tools", "_build", "node_modules")
HOLDERS = (r"schedule|s|short|pattern|made|given|ran|value|self\.schedule|"
           r"timeline\.schedule|planned\.schedule|measured\.schedule|job\.schedule")
ATTR = re.compile(rf"(?<![\w.])((?:{HOLDERS}))\.num_stages\b")
KEYWORD = re.compile(r"(Schedule\(name=[^,()]*,\s*)num_stages=")
# extra, file-specific line rewrites: (file, old, new)
EXTRA = [
    ("tests/test_schedules_validate.py", '"custom"), num_stages=len(rows)',
     '"custom"), num_ranks=len(rows)'),
    ("tests/test_cli_schedule.py", "multiple of num_stages=", "multiple of num_ranks="),
    ("pipemare_lite/book/exercises/exercise.py", '("name", "num_stages",', '("name", "num_ranks",'),
    ("tests/test_custom_schedules.py", "def rows(num_stages, num_microbatches",
     "def rows(num_ranks, num_microbatches"),
    ("tests/test_custom_schedules.py", 'build_schedule("async", num_stages,',
     'build_schedule("async", num_ranks,'),
    ("docs/write-a-schedule.md", "def gpipe_rows(num_stages,", "def gpipe_rows(num_ranks,"),
    ("docs/write-a-schedule.md", "for stage in range(num_stages):",
     "for stage in range(num_ranks):"),
    ("pipemare_lite/training/run_schedule.py",
     "def schedule_for_run(choice: ScheduleChoice, num_stages:",
     "def schedule_for_run(choice: ScheduleChoice, num_ranks:"),
    ("pipemare_lite/training/run_schedule.py", "build_schedule(choice.name, num_stages,",
     "build_schedule(choice.name, num_ranks,"),
    ("pipemare_lite/training/run_schedule.py", "sized by ``num_stages``", "sized by ``num_ranks``"),
]
NO_ATTR = {"pipemare_lite/analysis/staleness.py:self"}  # documented: table property kept


def files():
    for p in sorted(pathlib.Path(".").rglob("*")):
        if p.suffix in (".py", ".ipynb", ".md") and not any(d in p.parts for d in SKIP_DIRS):
            yield p


def main() -> None:
    counts = {"full": 0, "attr": 0, "keyword": 0, "extra": 0}
    for p in files():
        text = old = p.read_text()
        name = str(p)
        if name in FULL:
            text, n = re.subn(r"\bnum_stages\b", "num_ranks", text)
            counts["full"] += n
        text, n = ATTR.subn(r"\1.num_ranks", text)
        counts["attr"] += n
        text, n = KEYWORD.subn(r"\1num_ranks=", text)
        counts["keyword"] += n
        for f, a, b in EXTRA:
            if f == name and a in text:
                counts["extra"] += text.count(a)
                text = text.replace(a, b)
        if text != old:
            p.write_text(text)
            print("rewrote", name)
    print(counts)


if __name__ == "__main__":
    main()
