"""Notebook tooling for the book's chapters: list them, describe them, clean and check them.

Chapter 00 ("how to use this book") shows :func:`chapter_table`; authors run

    python -m pipemare_lite.book.notebooks run chapters/NN_x.ipynb  # execute, keep checked outputs
    python -m pipemare_lite.book.notebooks clean chapters/*.ipynb   # before every commit
    python -m pipemare_lite.book.notebooks check chapters/*.ipynb   # what the hygiene test checks
    python -m pipemare_lite.book.notebooks readme                   # README's chapter table

A committed chapter keeps outputs only in cells tagged ``nbval-check-output`` (the cells
``pytest --nbval-lax`` compares), stores no widget state and no execution counts, runs on the
kernel ``python3`` and follows the shape in ``chapters/README.md``. Torch-free.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import nbformat

from pipemare_lite.book.solutions import collapse_solutions
from pipemare_lite.files import atomic_write_text

#: Cells with this tag keep their outputs; ``pytest --nbval-lax`` compares only them.
CHECK_TAG = "nbval-check-output"
#: ``NN_snake_case.ipynb``
CHAPTER_NAME_RE = re.compile(r"^(\d\d)_([a-z0-9]+(?:_[a-z0-9]+)*)\.ipynb$")
#: First line of the first cell: ``# NN · Title``
TITLE_RE = re.compile(r"^#\s+(\d\d)\s+·\s+(\S.*)$")
#: A committed notebook larger than this almost certainly carries outputs or images.
MAX_NOTEBOOK_BYTES = 200_000
#: Where the book build records each chapter's run time (read by :func:`chapter_table`).
TIMINGS_FILE = "timings.json"
#: The committed record of chapter run times (``book --record-timings``), relative to the
#: repository root, with its ``.meta.json`` beside it; :func:`chapter_table` prefers it.
RECORDED_TIMINGS = Path("data") / "results" / "chapter_times.json"
#: Output types that only make sense in a live kernel and never belong in git.
_LIVE_ONLY_MIMETYPES = (
    "application/vnd.jupyter.widget-view+json",
    "application/vnd.jupyter.widget-state+json",
)

#: The path through the book (the design's chapter list); a chapter file may refine the title.
PLANNED_CHAPTERS: dict[int, str] = {
    0: "How to use this book",
    1: "Naive model parallelism",
    2: "GPipe and the bubble",
    3: "1F1B and activation memory",
    4: "Interleaving and zero-bubble",
    5: "Going asynchronous: PipeDream, 2BW and weight staleness",
    6: "Delayed gradients in theory: quadratic model, stability, discrepancy",
    7: "Async at fine granularity breaks",
    8: "T1: learning-rate rescheduling",
    9: "T2: discrepancy correction and warm-up",
    10: "The trade-off table: utilization, memory, quality",
    11: "Real processes: the distributed engine, traces, torchrun",
    12: "Beyond PipeMare: weight prediction, Nesterov-style correction",
}


@dataclass(frozen=True)
class BookPart:
    """A part of the book: the chapters numbered ``first`` to ``last`` (both included)."""

    title: str
    first: int
    last: int


#: The book's parts, in order; the book site groups its table of contents by them. A
#: chapter numbered past the last part's range joins the last part.
BOOK_PARTS: tuple[BookPart, ...] = (
    BookPart("Synchronous pipelines", 0, 4),
    BookPart("Asynchronous pipelines", 5, 7),
    BookPart("PipeMare's fixes", 8, 10),
    BookPart("Real processes and beyond", 11, 12),
)


def book_part(number: int) -> BookPart:
    """The part that chapter ``number`` belongs to (from its number alone, no file list)."""
    if not isinstance(number, int) or isinstance(number, bool) or number < 0:
        raise ValueError(f"chapter number must be an integer >= 0, got {number!r}")
    for part in BOOK_PARTS:
        if part.first <= number <= part.last:
            return part
    return BOOK_PARTS[-1]


# --------------------------------------------------------------------------- listing


def chapters_dir() -> Path:
    """The book's ``chapters/`` folder.

    The repository's folder next to the installed package when there is one (editable
    install, the normal case), else ``./chapters``, else the current directory (a kernel
    started inside ``chapters/`` by the book build or by Jupyter).
    """
    beside_package = Path(__file__).resolve().parents[2] / "chapters"
    for candidate in (beside_package, Path.cwd() / "chapters"):
        if candidate.is_dir():
            return candidate
    return Path.cwd()


def list_chapters(directory: str | Path | None = None) -> list[Path]:
    """Chapter notebooks (``NN_snake_case.ipynb``) in ``directory``, sorted by number."""
    folder = Path(directory) if directory is not None else chapters_dir()
    if not folder.is_dir():
        raise ValueError(f"chapters folder {str(folder)!r} does not exist")
    return sorted(p for p in folder.glob("*.ipynb") if CHAPTER_NAME_RE.match(p.name))


@dataclass(frozen=True)
class ChapterInfo:
    """What the book knows about one chapter file: number, title, one-line promise."""

    number: int
    slug: str
    title: str
    promise: str
    path: Path


def chapter_info(path: str | Path) -> ChapterInfo:
    """Read number, title (first heading) and promise (first paragraph after it) of a chapter."""
    path = Path(path)
    match = CHAPTER_NAME_RE.match(path.name)
    if not match:
        raise ValueError(f"{path.name!r} is not a chapter name; expected NN_snake_case.ipynb")
    nb = nbformat.read(path, as_version=4)
    title, promise = _title_and_promise(nb)
    return ChapterInfo(
        number=int(match.group(1)),
        slug=match.group(2),
        title=title or PLANNED_CHAPTERS.get(int(match.group(1)), match.group(2)),
        promise=promise,
        path=path,
    )


def _title_and_promise(nb) -> tuple[str, str]:
    """Title text of the first markdown heading and the first plain paragraph after it."""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        lines = cell.source.strip().splitlines()
        if not lines or not lines[0].startswith("#"):
            continue
        heading = lines[0].lstrip("#").strip()
        title = TITLE_RE.match(lines[0])
        text = title.group(2).strip() if title else heading
        rest = "\n".join(lines[1:]).strip().split("\n\n")[0].replace("\n", " ").strip()
        return text, rest
    return "", ""


@dataclass(frozen=True)
class ChapterRow:
    """One line of the chapter table: a written chapter or a planned one."""

    number: int
    title: str
    written: bool
    file: str
    seconds: float | None


class ChapterTable:
    """The path through the book, built from the chapters folder.

    Rows cover every planned chapter plus any extra chapter file; ``written`` tells which
    exist. ``seconds`` is a measured run time, never typed in: from the recorded
    ``data/results/chapter_times.json`` (``book --record-timings``) when it exists, else
    from the last book build's ``build/book/timings.json``, else None. ``timings`` is the
    file the times came from and ``meta`` its ``.meta.json`` (command, machine, date), if any.
    """

    def __init__(
        self,
        rows: Sequence[ChapterRow],
        timings: Path | None = None,
        meta: dict | None = None,
    ):
        self.rows = list(rows)
        self.timings = timings
        self.meta = dict(meta or {})

    @property
    def written(self) -> list[ChapterRow]:
        """Rows whose notebook exists."""
        return [r for r in self.rows if r.written]

    def to_markdown(self) -> str:
        """A Markdown table (what Jupyter displays)."""
        lines = ["| # | chapter | notebook | last measured run |", "|---|---|---|---|"]
        for r in self.rows:
            notebook = f"`{r.file}`" if r.written else "planned"
            seconds = "" if r.seconds is None else f"{r.seconds:.0f} s"
            lines.append(f"| {r.number:02d} | {r.title} | {notebook} | {seconds} |")
        source = self.source_line()
        return "\n".join(lines) + (f"\n\n{source}" if source else "")

    def source_line(self) -> str:
        """Where the times come from, in one sentence; "" when no chapter has a time."""
        if self.timings is None or all(r.seconds is None for r in self.written):
            return ""
        shown, resolved = self.timings, self.timings.resolve()
        if len(resolved.parents) > 2 and resolved == resolved.parents[2] / RECORDED_TIMINGS:
            shown = RECORDED_TIMINGS  # the repository's record: a path any reader can find
        line = f"Run times from {shown.as_posix()}"
        meta = self.meta
        if meta.get("command"):
            line += f", written by `{meta['command']}`"
        if meta.get("cpu_count"):
            line += f" on a machine with {meta['cpu_count']} CPU cores"
        if meta.get("date"):
            line += f" ({str(meta['date'])[:10]})"
        # what chapter 00 promises beside the times: the versions and how busy the machine was
        versions = [f"{name} {meta[key]}" for name, key in
                    (("pipemare-lite", "package_version"), ("torch", "torch_version"),
                     ("Python", "python_version")) if meta.get(key)]
        if versions:
            line += f", with {', '.join(versions)}"
        load = meta.get("load_average_1_5_15_min")
        if isinstance(load, (list, tuple)) and len(load) == 3:
            line += (f"; load average then {load[0]:g} / {load[1]:g} / {load[2]:g} "
                     "(1 / 5 / 15 min; a busier machine takes longer)")
        return line + "."

    def _repr_markdown_(self) -> str:
        return self.to_markdown()

    def __str__(self) -> str:
        """The plain-text table, with the Markdown table's column headers."""
        width = max([len("chapter"), *(len(r.title) for r in self.rows)])
        file_width = max([len("(planned)"), *(len(r.file) for r in self.rows)])
        out = [f"{'#':<2}  {'chapter':<{width}}  {'notebook':<{file_width}}  last measured run"]
        for r in self.rows:
            notebook = r.file if r.written else "(planned)"
            seconds = "" if r.seconds is None else f"  {r.seconds:5.0f} s"
            out.append(f"{r.number:02d}  {r.title:<{width}}  {notebook:<{file_width}}{seconds}")
        source = self.source_line()
        return "\n".join(line.rstrip() for line in out) + (f"\n\n{source}" if source else "")

    __repr__ = __str__


def chapter_table(
    directory: str | Path | None = None, timings: str | Path | None = None
) -> ChapterTable:
    """Every planned chapter and every chapter file, marking which are written.

    ``timings`` is a JSON file of chapter file name to seconds. By default the recorded
    :data:`RECORDED_TIMINGS` of the repository holding the chapters folder when it exists
    (written by ``python -m pipemare_lite book --record-timings``), else the last book
    build's ``build/book/timings.json``; with neither, the seconds column stays empty.
    """
    folder = Path(directory) if directory is not None else chapters_dir()
    infos = {info.number: info for info in map(chapter_info, list_chapters(folder))}
    if timings is None:
        root = folder.resolve().parent
        recorded = root / RECORDED_TIMINGS
        timings = recorded if recorded.is_file() else root / "build" / "book" / TIMINGS_FILE
    timings = Path(timings)
    measured = _read_timings(timings)
    rows = []
    for number in sorted(set(PLANNED_CHAPTERS) | set(infos)):
        info = infos.get(number)
        rows.append(
            ChapterRow(
                number=number,
                title=info.title if info else PLANNED_CHAPTERS[number],
                written=info is not None,
                file=info.path.name if info else "",
                seconds=measured.get(info.path.name) if info else None,
            )
        )
    return ChapterTable(rows, timings if measured else None, _read_meta(timings))


def meta_path(results: str | Path) -> Path:
    """The ``.meta.json`` beside a results file: ``a/b.json`` -> ``a/b.meta.json``."""
    results = Path(results)
    return results.with_name(f"{results.stem}.meta.json")


#: The README's chapter table sits between these two lines; ``readme`` rewrites it.
README_MARKERS = ("<!-- chapters:start -->", "<!-- chapters:end -->")


def readme_table(directory: str | Path | None = None) -> str:
    """The README's chapter table: written chapters link to their notebook, others are planned."""
    folder = Path(directory) if directory is not None else chapters_dir()
    lines = ["| # | chapter | notebook |", "|---|---|---|"]
    for r in chapter_table(folder, timings=folder / "no-timings").rows:
        where = f"[{r.file}]({folder.name}/{r.file})" if r.written else "planned"
        lines.append(f"| {r.number:02d} | {r.title} | {where} |")
    return "\n".join(lines)


def update_readme(readme: str | Path, directory: str | Path | None = None) -> bool:
    """Rewrite the chapter table between :data:`README_MARKERS`; True if the file changed."""
    readme = Path(readme)
    text = readme.read_text(encoding="utf-8")
    start, end = README_MARKERS
    if text.count(start) != 1 or text.count(end) != 1 or text.index(start) > text.index(end):
        raise ValueError(f"{readme} needs exactly one {start!r} line before one {end!r} line")
    head, rest = text.split(start)
    _, tail = rest.split(end)
    new = f"{head}{start}\n{readme_table(directory)}\n{end}{tail}"
    if new != text:
        atomic_write_text(readme, new)
    return new != text


def _read_meta(timings: Path) -> dict:
    path = meta_path(timings)
    if not path.is_file():
        return {}
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return {}  # a foreign or broken file: say nothing rather than fail
    return meta if isinstance(meta, dict) else {}


def _read_timings(path: Path) -> dict[str, float]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        return {str(k): float(v) for k, v in data.items()}
    except (ValueError, AttributeError, TypeError):
        return {}  # a half-written or foreign file: show no times rather than fail


# --------------------------------------------------------------------------- cleaning


def is_checked(cell) -> bool:
    """True for a cell whose output nbval compares (tag ``nbval-check-output``)."""
    return CHECK_TAG in cell.get("metadata", {}).get("tags", [])


def clean_notebook(nb):
    """Strip what must not be committed, in place, and return ``nb``.

    Outputs and execution counts go except in checked cells; notebook-level widget state
    and per-cell execution timings go; checked cells lose live-only outputs (widget views)
    and get a fixed execution count, their position among the code cells: nbval refuses to
    compare a cell without one ("Unrun reference cell has outputs"), and a fixed number keeps
    re-runs out of the diff. The kernelspec becomes ``python3``. Solution cells are marked
    to open collapsed in Jupyter (:func:`~pipemare_lite.book.solutions.collapse_solutions`).
    """
    collapse_solutions(nb)
    nb.metadata.pop("widgets", None)
    nb.metadata["kernelspec"] = {
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
        "name": "python3",
    }
    # language_info carries the author's Python version: noise in every diff
    nb.metadata["language_info"] = {"name": "python"}
    code_cells = 0
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        cell.metadata.pop("widgets", None)
        if cell.cell_type != "code":
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
            continue
        code_cells += 1
        if not is_checked(cell):
            cell.execution_count = None
            cell.outputs = []
            continue
        cell.execution_count = code_cells
        kept = []
        for output in cell.outputs:
            if "execution_count" in output:
                output["execution_count"] = code_cells
            data = output.get("data")
            if data is not None:
                for mimetype in _LIVE_ONLY_MIMETYPES:
                    data.pop(mimetype, None)
                if not data:
                    continue
            output.get("metadata", {}).pop("transient", None)
            output.pop("transient", None)
            kept.append(output)
        cell.outputs = kept
    return nb


def clean_file(path: str | Path) -> bool:
    """Clean one notebook file in place; True if it changed."""
    path = Path(path)
    before = path.read_text(encoding="utf-8")
    nb = clean_notebook(nbformat.reads(before, as_version=4))
    after = nbformat.writes(nb) + "\n"
    if after != before:
        atomic_write_text(path, after)
        return True
    return False


# --------------------------------------------------------------------------- checking


def imported_names(nb) -> list[tuple[str, str | None]]:
    """``(module, name)`` for every ``from pipemare_lite... import name`` in code cells.

    ``import pipemare_lite.x`` gives ``(module, None)``. Cells that are not valid Python
    (IPython magics) are skipped line by line.
    """
    found: list[tuple[str, str | None]] = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for tree in _parse_cell(cell.source):
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    if node.module.split(".")[0] == "pipemare_lite":
                        found += [(node.module, alias.name) for alias in node.names]
                elif isinstance(node, ast.Import):
                    found += [
                        (alias.name, None)
                        for alias in node.names
                        if alias.name.split(".")[0] == "pipemare_lite"
                    ]
    return found


def _parse_cell(source: str) -> list[ast.AST]:
    try:
        return [ast.parse(source)]
    except SyntaxError:
        # magics (%timeit, !pip) make the whole cell invalid Python; keep what parses
        trees = []
        for line in source.splitlines():
            if line.lstrip().startswith(("from ", "import ")):
                try:
                    trees.append(ast.parse(line.strip()))
                except SyntaxError:
                    pass
        return trees


def missing_names(pairs: Iterable[tuple[str, str | None]]) -> list[str]:
    """The ``module`` / ``module.name`` entries of ``pairs`` that cannot be imported."""
    missing = []
    for module, name in pairs:
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"{module} ({exc})")
            continue
        if name is None or name == "*" or hasattr(mod, name):
            continue
        try:  # ``from package import submodule``
            importlib.import_module(f"{module}.{name}")
        except ImportError:
            missing.append(f"{module}.{name}")
    return missing


def notebook_problems(path: str | Path, check_imports: bool = True) -> list[str]:
    """Everything that breaks the authoring rules of ``chapters/README.md``; [] when clean."""
    path = Path(path)
    problems: list[str] = []
    match = CHAPTER_NAME_RE.match(path.name)
    if not match:
        problems.append("file name must look like NN_snake_case.ipynb")
    size = path.stat().st_size
    if size > MAX_NOTEBOOK_BYTES:
        problems.append(f"{size} bytes; the cap is {MAX_NOTEBOOK_BYTES} (outputs or images left?)")
    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # any parse or schema error is the finding
        return problems + [f"not a valid notebook: {exc}"]

    kernel = nb.metadata.get("kernelspec", {}).get("name")
    if kernel != "python3":
        problems.append(f"kernelspec name is {kernel!r}; must be 'python3'")
    if "widgets" in nb.metadata:
        problems.append("notebook metadata stores widget state ('widgets'); run clean")

    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if not is_checked(cell):
            if cell.get("execution_count") is not None:
                problems.append(f"cell {index}: execution_count is set; run clean")
            if cell.outputs:
                problems.append(f"cell {index}: outputs, but no tag {CHECK_TAG}; run clean")
        elif not cell.outputs:
            problems.append(f"cell {index}: tagged {CHECK_TAG} but has no stored output to compare")
        elif cell.get("execution_count") is None:
            problems.append(
                f"cell {index}: checked cell without execution_count (nbval calls it unrun); "
                "run it, then clean"
            )

    first = nb.cells[0] if nb.cells else None
    first_line = first.source.strip().splitlines()[0] if first and first.source.strip() else ""
    title = TITLE_RE.match(first_line)
    if first is None or first.cell_type != "markdown" or not title:
        problems.append("first cell must be a markdown title '# NN · Title'")
    elif match and title.group(1) != match.group(1):
        problems.append(f"title number {title.group(1)} differs from file number {match.group(1)}")

    headings = [
        line.lstrip("#").strip().lower()
        for cell in nb.cells
        if cell.cell_type == "markdown"
        for line in cell.source.splitlines()
        if line.startswith("#")
    ]
    if not any(h.startswith("before you start") for h in headings):
        problems.append("no 'Before you start' section (a markdown heading)")
    if not any("summary" in h for h in headings):
        problems.append("no summary section (a markdown heading containing 'Summary')")
    if match and match.group(1) != "00":
        has_check = any(
            cell.cell_type == "code" and re.search(r"\bcheck\(", cell.source) for cell in nb.cells
        )
        if not has_check:
            problems.append("no exercise cell calling check()")
    if check_imports:
        problems += [f"imports a missing name: {m}" for m in missing_names(imported_names(nb))]
    return problems


# --------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    """``python -m pipemare_lite.book.notebooks {clean,check,run,list,readme} [paths]``."""
    parser = argparse.ArgumentParser(
        prog="python -m pipemare_lite.book.notebooks",
        description="Clean chapter notebooks before committing, check them, list them.",
    )
    sub = parser.add_subparsers(dest="action", required=True)
    for action, help_text in (
        ("clean", "strip outputs (except checked cells), widget state, execution counts"),
        ("check", "report every authoring-rule problem; exit 1 if any"),
        ("run", "execute in this environment, then clean: refreshes the checked outputs"),
        ("list", "print the chapter table"),
        ("readme", "rewrite the chapter table in README.md from the chapters folder"),
    ):
        p = sub.add_parser(action, help=help_text)
        p.add_argument("paths", nargs="*", help="notebooks (default: every chapter)")
    args = parser.parse_args(argv)

    if args.action == "list":
        print(chapter_table())
        return 0
    if args.action == "readme":
        readme = Path(args.paths[0]) if args.paths else chapters_dir().parent / "README.md"
        print(f"{'updated  ' if update_readme(readme) else 'unchanged'} {readme}")
        return 0
    paths = [Path(p) for p in args.paths] or list_chapters()
    for p in paths:
        if not p.is_file():
            raise SystemExit(f"no such notebook: {p}")
    if args.action == "run":
        return _run_and_clean(paths)
    if args.action == "clean":
        for p in paths:
            print(f"{'cleaned  ' if clean_file(p) else 'unchanged'} {p}")
        return 0
    bad = 0
    for p in paths:
        problems = notebook_problems(p)
        bad += bool(problems)
        print(f"{'ok  ' if not problems else 'FAIL'} {p}")
        for problem in problems:
            print(f"     - {problem}")
    return 1 if bad else 0


def _run_and_clean(paths: Sequence[Path], timeout: int = 300) -> int:
    """Execute each notebook top to bottom (as the book build does) and save it cleaned."""
    from pipemare_lite.book.execute import execute_chapter  # nbclient: only needed here

    failed = 0
    for path in paths:
        nb, seconds, error = execute_chapter(path, timeout)
        if error:
            failed += 1
            print(f"FAIL {path} ({seconds:.1f} s): not saved\n{error}")
            continue
        # never a half-written chapter, even if the run is interrupted while saving
        atomic_write_text(path, nbformat.writes(clean_notebook(nb)) + "\n")
        print(f"ran  {path} ({seconds:.1f} s), saved with checked outputs only")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
