"""Issue 46, the open results of the independent hostile pass: what a student's report shows
and what it is called.

Each attack test says what it did before (main at 048a9a6, re-run there) and asserts what it
does now. The reports are parsed with a CommonMark parser (markdown-it-py, which the book's
site builder brings): the student's text must come out as text, never as a heading, a link,
an image or HTML.
"""

from __future__ import annotations

import pytest

from pipemare_lite.book.exercises.grading import (
    SubmissionReport,
    grade_class,
    markdown_code_block,
    markdown_text,
    report_name,
    report_names,
    write_reports,
)
from tests.notebook_files import write_notebook
from tests.sandbox_required import _sandbox_or_fail, requires_sandbox  # noqa: F401

markdown_it = pytest.importorskip("markdown_it")

#: A folder name that tries to write its own heading and score into its report.
EVIL_NAME = "eve\n# Grade report: zed\n**2 of 2 points** <img src=x onerror=alert(1)>"
#: Load-time code whose exception text is Markdown with a heading, a link and HTML.
LOAD_TIME = '''
def naive_utilization(stage_costs):
    return [c / sum(stage_costs) for c in stage_costs]
raise ValueError("\\n## All exercises passed\\n[see here](http://evil.example) <b>2/2</b>")
'''
#: An answer whose exception text tries to close the feedback's code block.
CLOSING_FENCE = '''
def naive_start_times(P, F, B):
    raise ValueError("\\n`````\\n# You passed\\n[link](http://evil.example)\\n`````")
'''


def _blocks(text: str) -> list:
    """The report's tokens (block and inline), flattened."""
    tokens = []
    for token in markdown_it.MarkdownIt("commonmark").parse(text):
        tokens.append(token)
        tokens.extend(token.children or [])
    return tokens


def _headings(tokens: list) -> list[str]:
    return [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]


@requires_sandbox
def test_student_text_in_a_report_is_text(tmp_path):
    """Before: the report wrote the folder name, the load warnings (an exception's text) and
    the feedback raw, so a folder name with newlines, a load-time exception or an answer's
    exception closing the code block added headings (``# Grade report: zed``, ``## All
    exercises passed``, ``# You passed``), links and HTML to the student's own report (re-run
    at 048a9a6: 7 headings where the report has 5, 1 link, 3 pieces of HTML). Now every
    student-controlled string is escaped: the report has exactly its own 5 headings, no
    link, no image, no HTML, and the student's text shows whole (newlines as
    ``\\u000a``)."""
    write_notebook(tmp_path / "class" / EVIL_NAME / "01_naive.ipynb", LOAD_TIME, CLOSING_FENCE)
    (report,) = grade_class(tmp_path / "class", ["ex01_2", "ex01_3"], timeout=300, budget=900)
    written = write_reports([report], tmp_path / "reports")
    text = written[EVIL_NAME].read_text()
    tokens = _blocks(text)
    headings = _headings(tokens)
    assert len(headings) == 5, headings  # title, Feedback, 2 exercises, While loading
    assert headings[0] == "Grade report: " + markdown_text(EVIL_NAME)
    kinds = {t.type for t in tokens}
    assert not kinds & {"link_open", "image", "html_inline", "html_block"}, kinds
    rendered = markdown_it.MarkdownIt("commonmark").render(text)
    assert "Grade report: eve\\u000a# Grade report: zed\\u000a**2 of 2 points** &lt;img" in rendered
    assert "## All exercises passed" in rendered.replace("\\u000a", "\n")
    assert report.grades[0].points == 1 and report.grades[1].points == 0


def test_markdown_text_escapes_what_commonmark_reads():
    """Each ASCII punctuation character is escaped, each invisible character shown as its
    code, and the parser gives back the original characters (plain text, one line)."""
    sample = "a*b_c `d` [e](f) <g> #h |i| \\j &amp; ~k~ !l\tm\x0bn\u2028o\u202ep"
    (paragraph,) = [t for t in _blocks(markdown_text(sample)) if t.type == "inline"]
    assert [c.type for c in paragraph.children] == ["text"] * len(paragraph.children)
    shown = "".join(c.content for c in paragraph.children)
    expected = sample
    for character in "\t\x0b\u2028\u202e":
        expected = expected.replace(character, f"\\u{ord(character):04x}")
    assert shown == expected


def test_a_feedback_block_cannot_be_closed_from_inside():
    message = "ok\n```\n# out\n````\n`````"
    tokens = _blocks(markdown_code_block(message))
    assert [t.type for t in tokens] == ["fence"] and tokens[0].content == message + "\n"


def _report(student: str) -> SubmissionReport:
    return SubmissionReport(student, None, [])


def test_report_names_are_one_to_one_whatever_the_order(tmp_path):
    """Before: ``a b`` and ``a_b`` both mapped to ``a_b``; the second graded got ``a_b-2.md``,
    so which student got which name depended on the order, and a folder named ``a_b-2``
    could take a classmate's name first (re-run at 048a9a6: ``a_b-2``, ``a b`` and ``a_b``
    gave ``a_b-2.md``, ``a_b.md`` and ``a_b-3.md``: ``a_b`` lost its own name). Now each
    name is escaped one-to-one (``%XX``), the same in any order, and no two students share
    a file."""
    students = ["a b", "a_b", "a%20b", "a_b-2", "a.b", ".hidden", "José", "x" * 250, "x" * 251]
    names = report_names([_report(s) for s in students])
    assert names[:7] == ["a%20b", "a_b", "a%2520b", "a_b-2", "a%2Eb", "%2Ehidden", "Jos%C3%A9"]
    assert len(set(names)) == len(students)
    assert all(len(n) <= 217 for n in names)
    assert report_names([_report(s) for s in reversed(students)]) == names[::-1]
    written = write_reports([_report(s) for s in students], tmp_path)
    for student in students:
        assert written[student].name == report_name(student) + ".md"
        title = written[student].read_text().split("\n")[0]
        assert title == "# Grade report: " + markdown_text(student)


def test_names_that_differ_only_in_case_are_refused_where_case_is_ignored():
    assert report_names([_report("Alice"), _report("alice")]) == ["Alice", "alice"]
    with pytest.raises(ValueError, match="'Alice' and 'alice'.*case ignored"):
        report_names([_report("Alice"), _report("alice")], ignore_case=True)
