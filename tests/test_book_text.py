"""What a reader sees in the book's prose agrees with the code beside it (issue 30).

The committed notebooks and the Markdown documents are read as text (nothing is run, except
the shell commands they show, each with ``--help``):

1. **Link labels name their targets.** A link whose label is a path (`` [`engine/stage.py`](...) ``)
   must point to a file whose path ends with that label; a label that is a dotted module
   names the module the target is; a label that is a Python name is defined in the target.
2. **No TeX outside math.** ``z^{t+1}`` or ``\\theta`` in Markdown text shows its braces on
   the site; formulas go between ``$...$`` (MyST's dollarmath) or are written in Unicode.
3. **Every result number in a chapter's prose has a source in the chapter** (every chapter,
   none exempt): it appears in a code cell (an input the chapter sets) or in a checked cell's
   stored output (which nbval compares with a fresh run), or it is a quotation of a paper
   ("..." in a cell that cites it), or it is the value of the arithmetic written just before
   it (``138/32 = 4.31``), which the test evaluates. A version (``v2.13``), a year and an
   arXiv id are not results; a value the reader sets goes in code (``weight=0.2``).
4. **Every shell command shown is runnable**: each ``make`` target exists; each
   ``python -m MODULE [SUBCOMMAND]`` (also inside ``torchrun`` and ``pipemare-lite``) answers
   ``--help`` with a usage line and exit status 0; other modules are importable.

Each check has a companion test that feeds it the text the chapters had when issue 30 was
filed and shows that it fails there.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("[01][0-9]_*.ipynb"))
DOCUMENTS = [ROOT / "README.md", ROOT / "chapters" / "README.md",
             *sorted((ROOT / "docs").glob("*.md"))]  # fmt: skip
CHECK_TAG = "nbval-check-output"


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def markdown_texts(paths=None):
    """``(where, text, path)`` for every Markdown cell of the chapters and every document."""
    for path in CHAPTERS if paths is None else paths:
        for i, cell in enumerate(_cells(path)):
            if cell["cell_type"] == "markdown":
                yield f"{path.name}[{i}]", _source(cell), path
    if paths is None:
        for path in DOCUMENTS:
            yield path.relative_to(ROOT).as_posix(), path.read_text(), path


def without_code(text: str) -> str:
    """Markdown with fenced blocks and inline code spans removed (they are shown verbatim)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


# ------------------------------------------------------------------------------ 1. links

LINK = re.compile(r"\[(`?)([^`\]]+?)`?\]\(([^)\s#]+)(?:#[^)]*)?\)")
PATH_LABEL = re.compile(r"[\w./-]+\.(?:py|md|json|ipynb|toml|cfg|csv|yml)|[\w.-]+/[\w./-]*")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?")


def link_label_problem(label: str, target: str, base: Path, code: bool = True) -> str | None:
    """Why the label of a local link does not name its target (None when it does)."""
    if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
        return None
    file = (base / target).resolve()
    if not file.exists():
        return f"target {target} does not exist"
    rel = file.relative_to(ROOT).as_posix() if file.is_relative_to(ROOT) else file.as_posix()
    if PATH_LABEL.fullmatch(label):
        wanted = label.rstrip("/")
        if rel != wanted and not rel.endswith("/" + wanted):
            return f"label {label!r} is not the end of the target's path {rel}"
    elif re.fullmatch(r"pipemare_lite(\.\w+)*", label):
        module = rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        if module != label:
            return f"label {label!r} names another module than the target's {module}"
    elif code and IDENTIFIER.fullmatch(label) and file.suffix == ".py":
        name = label.split(".")[-1]
        if not re.search(rf"^\s*(?:def|class)\s+{name}\b|^{name}\s*[:=]", file.read_text(),
                         flags=re.M):
            return f"label {label!r} is not defined in {rel}"
    return None


def link_problems(texts) -> list[str]:
    """Every local link in ``texts`` whose label disagrees with its target."""
    problems = []
    for where, text, path in texts:
        for match in LINK.finditer(re.sub(r"```.*?```", "", text, flags=re.S)):
            code, label, target = match.groups()
            problem = link_label_problem(label, target, path.parent, code=bool(code))
            if problem:
                problems.append(f"{where}: {problem}")
    return problems


def test_link_labels_name_their_targets():
    problems = link_problems(markdown_texts())
    assert not problems, "\n".join(problems)


def test_the_link_check_catches_the_old_labels(tmp_path):
    # issue 30: labels kept the pre-layering paths after their targets moved
    old = ["[`executor/stage.py`](../pipemare_lite/engine/stage.py)",
           "[`train.py`](../pipemare_lite/training/loop.py)",
           "[`schedules/gpipe.py`](../pipemare_lite/schedules/builders/gpipe.py)",
           "[`NoSuchScheduler`](../pipemare_lite/methods/lr_rescheduling.py)"]
    chapter = ROOT / "chapters" / "05_planted.ipynb"
    problems = link_problems([(f"old[{i}]", text, chapter) for i, text in enumerate(old)])
    assert len(problems) == len(old), problems
    good = "[`builders/gpipe.py`](../pipemare_lite/schedules/builders/gpipe.py)"
    assert link_problems([("new", good, chapter)]) == []


# ------------------------------------------------------------------------------ 2. TeX

TEX_OUTSIDE_MATH = re.compile(r"\\[A-Za-z]+|[\^_]\{")


def tex_problems(texts) -> list[str]:
    """TeX commands or braced super/subscripts outside ``$...$`` in Markdown text."""
    problems = []
    for where, text, _ in texts:
        text = re.sub(r"\$\$.*?\$\$", "", without_code(text), flags=re.S)
        text = re.sub(r"(?<!\\)\$[^$\n]+?(?<!\\)\$", "", text)
        problems += [f"{where}: {text[max(m.start() - 30, 0):m.end() + 15]!r}"
                     for m in TEX_OUTSIDE_MATH.finditer(text)]
    return problems


def test_no_tex_outside_math_delimiters():
    problems = tex_problems(markdown_texts())
    assert not problems, "raw TeX shows its braces on the site:\n" + "\n".join(problems)


def test_the_tex_check_catches_the_old_text():
    # issue 30: chapter 06 [11] and [20] as they were
    old = ["Putting it into the recurrence gives\nz^{t+1} = z^t − αλ z^{t−τ}, and dividing",
           "There the root is z = e^{iθ}, and", r"the bound $2\sin\theta$ and \alpha alone"]
    assert [len(tex_problems([("old", t, None)])) for t in old] == [2, 1, 1]
    assert tex_problems([("new", r"gives $z^{t+1} = z^t$ and `x_{i}` in code", None)]) == []


# ------------------------------------------------------------------------------ 3. numbers

# a result-like number: a decimal, a ratio (4.3x), a percentage, or an integer of 100 and more
RESULT_NUMBER = re.compile(
    r"(?<![\w.\-−/^:])(\d+(?:\.\d+)?\s?[x×%](?!\w)|\d+\.\d+|\d{1,3}(?:,\d{3})+|[1-9]\d{2,})"
    r"(?![\w.,]\d)")
YEAR_OR_ID = re.compile(r"(?:arXiv:|v)\s*$")
CITES = re.compile(r"arXiv|et al\.|abstract|\(\d{4}\)", re.I)
QUOTED = re.compile(r"\"(?:[^\"\n]|\n(?!\n))*\"|“[^”]*”")
# conventions, not results: the confidence of every interval the experiments report
# (experiments.record.mean_interval's default)
CONVENTIONS = {"95 %"}
# arithmetic written in prose just before '=' or '≈': digits, π, sin/cos/√, + − · × / ( )
ARITHMETIC = re.compile(r"((?:[\d.π()+\-−·×/^ ]|sin|cos|√)+?)\s*[=≈]\s*$")


def _evaluates_to(expression: str, number: str) -> bool:
    """Whether the prose arithmetic ending ``expression`` rounds to ``number`` as printed."""
    # the expression's start is not marked: try every tail ("1. 2 sin(π/14)" -> "2 sin(π/14)")
    return any(_tail_evaluates_to(expression[k:], number) for k in range(len(expression)))


def _tail_evaluates_to(expression: str, number: str) -> bool:
    python = (expression.replace("π", "pi").replace("−", "-").replace("·", "*")
              .replace("×", "*").replace("√", "sqrt").replace("^", "**"))  # fmt: skip
    python = re.sub(r"(\d)\s*(pi|sin|cos|sqrt|\()", r"\1*\2", python)
    if not re.search(r"(?:[\d)]|pi)\s*[-+*/]|sin|cos|sqrt", python):
        return False  # a bare number or name before '=' is a definition, not arithmetic
    try:
        value = eval(python, {"__builtins__": {}},  # noqa: S307 - digits and math only
                     {"pi": math.pi, "sin": math.sin, "cos": math.cos, "sqrt": math.sqrt})
    except (SyntaxError, TypeError, ZeroDivisionError, NameError):
        return False
    digits = len(number.split(".")[1]) if "." in number else 0
    return abs(value - float(number)) <= 0.5 * 10**-digits + 1e-12


def _plain(number: str) -> str:
    return re.sub(r"\s?[x×%]$", "", number).replace(",", "")


def chapter_number_problems(cells: list[dict], name: str) -> list[str]:
    """Result numbers in a chapter's Markdown that no cell of the chapter is a source of."""
    code = "\n".join(_source(c) for c in cells if c["cell_type"] == "code")
    outputs = "\n".join(
        "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
        for c in cells if CHECK_TAG in c.get("metadata", {}).get("tags", [])
        for o in c.get("outputs", []))  # fmt: skip
    texts = [re.sub(r"\$[^$]*\$|\]\([^)]*\)", "", without_code(_source(c)))
             if c["cell_type"] == "markdown" else "" for c in cells]
    # a number quoted from a cited paper, or named in the chapter's Sources box, is a source
    # for the chapter's later mentions of it
    quotations = "\n".join(m.group(0) for text in texts if CITES.search(text)
                           for m in QUOTED.finditer(text))  # fmt: skip
    boxes = "\n".join(text for text in texts if text.lstrip().startswith("> **Sources.**"))
    plain_sources = (code + "\n" + outputs + "\n" + quotations + "\n" + boxes).replace(",", "")
    problems = []
    for i, text in enumerate(texts):
        for match in RESULT_NUMBER.finditer(text):
            number, before = match.group(1), text[:match.start()]
            plain = _plain(number)
            if (YEAR_OR_ID.search(before) or re.fullmatch(r"(19|20)\d\d", plain)
                    or number in CONVENTIONS):
                continue  # a year, an arXiv id, a version or a convention
            if re.search(rf"(?<![\d.]){re.escape(plain)}(?![\d])", plain_sources):
                continue
            arithmetic = ARITHMETIC.search(before)
            if arithmetic and _evaluates_to(arithmetic.group(1), plain):
                plain_sources += "\n" + plain  # derived: later mentions may repeat it
                continue
            context = text[max(match.start() - 50, 0):match.end() + 20].replace("\n", " ")
            problems.append(f"{name}[{i}] {number!r}: ...{context}...")
    return problems


def test_the_number_check_covers_every_chapter():
    # no chapter is exempt: the test below runs on every chapter the book has, 00-12 at least
    assert {f"{n:02d}" for n in range(13)} <= {p.name[:2] for p in CHAPTERS}


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name[:2])
def test_every_result_number_in_the_prose_has_a_source_in_the_chapter(path):
    problems = chapter_number_problems(_cells(path), path.name)
    assert not problems, (
        "print these from a cell (or check the cell's output), quote the paper, or show the "
        "arithmetic:\n" + "\n".join(problems))


def _md(text: str) -> dict:
    return {"cell_type": "markdown", "source": [text], "metadata": {}}


def _flagged_numbers(sentences: list[str]) -> tuple[list[str], list[str]]:
    """The numbers the check flags in ``sentences`` (each a markdown cell), and its report."""
    found = chapter_number_problems([_md(t) for t in sentences], "old")
    return [re.search(r"\] '([^']+)'", p).group(1) for p in found], found


def test_the_number_check_catches_the_old_text():
    # issue 30: chapter 05 [12] stated the paper's 4.3x as fact; chapter 07 [50] and
    # chapter 09 [38] typed the stored experiment's lengths; a typo in arithmetic
    old = ['They are (N+P-1)/N times faster (PipeMare\'s "4.3x higher utilization" is this '
           "ratio for P = 107 and N = 32).",
           "the finest cut trained four times as long, 1,680 updates, with 8 seeds",
           "with P = 107 and N = 32 it is 138/32 = 4.13"]
    numbers, found = _flagged_numbers(old)
    assert numbers == ["4.3x", "107", "1,680", "107", "138", "4.13"], found
    # the same sentences with a source: a cell that prints it, a quotation, correct arithmetic
    new = [_md('PipeMare\'s abstract (arXiv:1910.05124) says "4.3x higher utilization".'),
           _md("the paper's 4.3x; 138/32 = 4.31, and 1. 2 sin(π/14) ≈ 0.445"),
           _md("the finest cut, trained for 1,680 updates"),
           {"cell_type": "code", "source": ["print(1680, 138)"], "metadata": {}, "outputs": []}]
    assert chapter_number_problems(new, "new") == []


def test_the_number_check_catches_chapters_01_and_04_as_they_were():
    # before the check covered them: chapter 01 [12] typed the memory of large models, chapter
    # 04 [43] wrote a version like a result and [51] a slider setting as a bare number
    old = ["With 7 billion parameters that is 112 GB: more than an 80 GB accelerator holds, and "
           "most of a 141 GB one before any activation; with 70 billion it is 1.1 TB",
           "the engine's order is PyTorch 2.13's `ScheduleDualPipeV`, step for step",
           "make **W** cheap (0.2) or expensive (3): which part of the bubble comes back?"]
    numbers, found = _flagged_numbers(old)
    assert numbers == ["112", "141", "1.1", "2.13", "0.2"], found
    # as they are now: printed by a cell, a version marked as one, the call that sets a slider
    new = [_md("a model of 7 billion parameters needs more than an 80 GB accelerator holds and "
               "most of a 141 GB one"),
           {"cell_type": "code", "source": ["accelerator_gb = (80, 141)"], "metadata": {},
            "outputs": []},
           _md("PyTorch's `ScheduleDualPipeV` in torch v2.13, step for step"),
           _md('make **W** cheap (`schedule_explorer("zb-h1", weight=0.2)`, then `weight=3`)')]
    assert chapter_number_problems(new, "new") == []


# ------------------------------------------------------------------------------ 4. commands

COMMAND_START = r"(?:\.venv/bin/)?python3? -m |torchrun |make |pipemare-lite "
SPAN_COMMAND = re.compile(rf"`((?:{COMMAND_START})[^`]*)`")
BLOCK_COMMAND = re.compile(rf"^\s*(?:\$\s*)?((?:{COMMAND_START})[^\n]*)", re.M)
# commands inside a code cell's string literals, e.g. a torchrun line a chapter prints
LITERAL_COMMAND = re.compile(rf"[\"']((?:{COMMAND_START})[^\"'\n]*)")


def shown_commands() -> list[tuple[str, str]]:
    """``(where, command)`` for every shell command the chapters and documents show."""
    found = []
    for where, text, _ in markdown_texts():
        for block in re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S):
            found += [(where, m.group(1)) for m in BLOCK_COMMAND.finditer(block)]
        outside = re.sub(r"```.*?```", "", text, flags=re.S)
        found += [(where, m.group(1)) for m in SPAN_COMMAND.finditer(outside)]
    for path in CHAPTERS:
        for i, cell in enumerate(_cells(path)):
            if cell["cell_type"] == "code":
                found += [(f"{path.name}[{i}]", m.group(1))
                          for m in LITERAL_COMMAND.finditer(_source(cell))]
                found += [(f"{path.name}[{i}]", c) for c in list_commands(_source(cell))]
    return found


def list_commands(source: str) -> list[str]:
    """Commands a code cell holds as a list of words (``["torchrun", "--nnodes", ...]``)."""
    import ast

    try:
        tree = ast.parse(re.sub(r"^[%!].*$", "", source, flags=re.M))
    except SyntaxError:
        return []
    commands = []
    for node in ast.walk(tree):
        words = [e.value for e in getattr(node, "elts", []) if isinstance(e, ast.Constant)]
        if (isinstance(node, ast.List) and words and len(words) == len(node.elts)
                and all(isinstance(w, str) for w in words)
                and words[0] in ("torchrun", "python", "python3")):
            commands.append(" ".join(words))
    return commands


def command_invocation(command: str) -> tuple[str, str | None, str | None]:
    """What a command needs: ``("make", target, None)``, ``("module", name, subcommand)``."""
    words = command.replace("\\\n", " ").split()
    if words[0] == "make":
        target = next((w for w in words[1:] if "=" not in w), "help")
        return "make", target, None
    if words[0] == "pipemare-lite":
        words = ["python", "-m", "pipemare_lite", *words[1:]]
    module = words[words.index("-m") + 1] if "-m" in words else None
    if module is None:
        return "none", None, None
    rest = words[words.index("-m") + 2:]
    sub = rest[0] if rest and re.fullmatch(r"[a-z][a-z-]*", rest[0]) else None
    return "module", module, sub


@cache
def make_targets() -> set[str]:
    """The targets the Makefile defines."""
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), flags=re.M))


def command_problem(kind: str, name: str | None, sub: str | None) -> str | None:
    """Why a shown command cannot run as shown (None when it can)."""
    if kind == "make":
        return None if name in make_targets() else f"the Makefile has no target {name!r}"
    if kind != "module":
        return None
    if not name.startswith("pipemare_lite"):
        return None if importlib.util.find_spec(name.split(".")[0]) else f"{name} not installed"
    args = [sys.executable, "-m", name, *([sub] if sub else []), "--help"]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or "usage" not in done.stdout.lower():
        return (f"`{' '.join(args[1:])}` exited {done.returncode} without a usage line: "
                f"{(done.stdout + done.stderr)[-300:]!r}")
    return None


def _invocations():
    seen: dict[tuple, list[str]] = {}
    for where, command in shown_commands():
        seen.setdefault(command_invocation(command), []).append(where)
    return sorted(seen.items(), key=lambda item: tuple(map(str, item[0])))


def test_the_chapters_and_documents_show_commands():
    kinds = {invocation[0] for invocation, _ in _invocations()}
    modules = {invocation[1] for invocation, _ in _invocations()}
    assert kinds >= {"make", "module"}
    assert {"pipemare_lite", "pipemare_lite.training"} <= modules, modules
    # chapter 11 holds its torchrun command as a list of words; it is found too
    assert any(where.startswith("11_") and "torchrun" in command and "-m" in command
               for where, command in shown_commands())


@pytest.mark.slow  # one Python process per distinct command, each with --help
@pytest.mark.parametrize("invocation, where", _invocations(),
                         ids=lambda v: " ".join(map(str, filter(None, v)))
                         if isinstance(v, tuple) else "")
def test_every_shown_command_runs(invocation, where):
    problem = command_problem(*invocation)
    assert problem is None, f"shown in {', '.join(sorted(set(where)))}: {problem}"


def test_the_command_check_catches_the_old_torchrun_command():
    # issue 30: chapter 11 [42-43] ran `torchrun ... -m pipemare_lite.training.fit`, which
    # exited 0 and trained nothing (fit has no command line)
    old = ("torchrun --nnodes 1 --nproc-per-node 2 -m pipemare_lite.training.fit "
           "--executor dist --method 1f1b --stages 2")
    invocation = command_invocation(old)
    assert invocation == ("module", "pipemare_lite.training.fit", None)
    assert command_problem(*invocation) is not None
    assert command_problem("make", "no-such-target", None) is not None
    new = old.replace("training.fit", "training")
    assert command_problem(*command_invocation(new)) is None


# ------------------------------------------------------------------------------ 5. outputs

# calls whose value the reader must see: a figure or widget is shown only as a cell's last
# value; a bare seeding call as a cell's last value prints an object's repr instead
SEEDING_CALLS = {"manual_seed"}


def _figure_names() -> set[str]:
    import pipemare_lite.figures.viz as viz
    import pipemare_lite.figures.widgets as figure_widgets

    names = set(viz.__all__) | set(figure_widgets.__all__)
    return names - {"divergence_step", "idle_intervals", "gantt_traces"}  # they return data


def _call_name(node) -> str | None:
    import ast

    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        func = node.value.func
        return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return None


def cell_output_problems(source: str, figures: set[str]) -> list[str]:
    """Why a code cell's output is not what it means to show (empty when it is)."""
    import ast

    try:
        body = ast.parse(re.sub(r"^[%!].*$", "", source, flags=re.M)).body
    except SyntaxError:
        return []
    if not body:
        return []
    last, problems = body[-1], []
    if _call_name(last) in SEEDING_CALLS:
        problems.append(f"the cell ends in {_call_name(last)}(...): it prints a Generator's repr")
    if isinstance(last, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
        for inner in ast.walk(last):
            if isinstance(inner, ast.Expr) and _call_name(inner) in figures:
                problems.append(f"{_call_name(inner)}(...) inside a block is never shown; "
                                "assign it and end the cell with it")
    return problems


def test_every_figure_and_value_a_cell_ends_with_is_shown():
    figures, problems = _figure_names(), []
    for path in CHAPTERS:
        for i, cell in enumerate(_cells(path)):
            if cell["cell_type"] == "code":
                problems += [f"{path.name}[{i}]: {p}"
                             for p in cell_output_problems(_source(cell), figures)]
    assert not problems, "\n".join(problems)


def test_the_output_check_catches_the_old_cells():
    # issue 30: chapter 12 [31] drew memory_bars inside an if; chapter 11 [2] ended in a seed
    figures = _figure_names()
    old = ['if stored is not None:\n    memory_bars(rows, labels=labels, title="peak")',
           "import torch\n\ntorch.manual_seed(0)"]
    assert [len(cell_output_problems(s, figures)) for s in old] == [1, 1]
    new = ['figure = None\nif stored is not None:\n    figure = memory_bars(rows)\nfigure',
           "import torch\n\ntorch.manual_seed(0)\ntorch.set_num_threads(1)"]
    assert [cell_output_problems(s, figures) for s in new] == [[], []]


# ------------------------------------------------------------------------------ 6. takeaways

TAKEAWAY = "> **Takeaway.**"


def takeaway_problem(cells: list[dict]) -> str | None:
    """Why a chapter does not close with a takeaway box of three to five sentences."""
    last = _source(cells[-1]) if cells else ""
    if cells[-1]["cell_type"] != "markdown" or not last.startswith(TAKEAWAY):
        return f"the last cell is not a '{TAKEAWAY}' box"
    text = re.sub(r"^> ?", "", last, flags=re.M).removeprefix("**Takeaway.**").strip()
    sentences = [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z0-9*])", text) if s]
    if not 3 <= len(sentences) <= 5:
        return f"the takeaway has {len(sentences)} sentences; three to five are asked for"
    return None


def test_every_chapter_closes_with_a_takeaway_box():
    problems = {p.name[:2]: takeaway_problem(_cells(p)) for p in CHAPTERS}
    problems = {number: problem for number, problem in problems.items() if problem}
    assert not problems, problems


def test_the_takeaway_check_catches_a_missing_or_long_box():
    summary = _md("## Summary\n\n- one\n- two")
    assert "not a" in takeaway_problem([summary])
    long = _md(TAKEAWAY + " " + " ".join(f"Sentence {i} ends." for i in range(6)))
    assert "6 sentences" in takeaway_problem([summary, long])
    assert takeaway_problem([summary, _md(TAKEAWAY + " One. Two. Three.")]) is None
