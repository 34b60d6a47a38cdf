"""A cell's printed output merged into one block per stream, in linear time (book tooling).

The site shows each cell's prints as one block, however the kernel flushed them. myst-nb
can do this itself (``nb_merge_streams``), but its carriage-return rule is the regular
expression ``.*\\r(?=[^\\n])``, whose cost grows with the square of a line's length: a cell
that printed one long line (a chapter printing 1 GiB without a newline, cut to the
book's 20 MiB per cell) kept Sphinx busy for more than ten minutes, and the build never
ended (issue 47, F1). :func:`merge_streams` gives myst-nb's result (tested against it) by
splitting lines once, and the site's Sphinx configuration leaves the merge to it.
"""

from __future__ import annotations


def _carriage_returns(text: str) -> str:
    """What ``re.sub(r".*\\r(?=[^\\n])", "", text)`` gives, in one pass: on each line, the
    text up to its last ``\\r`` that is not the line's last character is dropped."""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        cut = line.rfind("\r", 0, len(line) - 1)
        if cut >= 0:
            lines[i] = line[cut + 1:]
    return "\n".join(lines)


def merge_streams(outputs: list) -> list:
    """A cell's outputs with each stream (stdout, stderr) merged into its first output, as
    myst-nb's ``coalesce_streams`` merges them: every piece right-stripped and ended with
    one newline (empty pieces after the first dropped), carriage returns applied, and a
    stdout block that directly follows a stderr block moved before it. Changes the
    stream outputs in place; returns the new list."""
    merged, pieces = [], {}
    for output in outputs:
        if output.get("output_type") != "stream":
            merged.append(output)
            continue
        text = output["text"]
        text = "".join(text) if isinstance(text, list) else text
        if output["name"] in pieces:
            if text.rstrip():
                pieces[output["name"]][1].append(text.rstrip() + "\n")
        else:
            pieces[output["name"]] = (output, [text.rstrip() + "\n"])
            merged.append(output)
    for output, texts in pieces.values():
        output["text"] = _carriage_returns("".join(texts))
    for i, output in enumerate(merged):  # myst-nb's order: stdout first
        if (output.get("output_type") == "stream" and output["name"] == "stderr"
                and i + 1 < len(merged) and merged[i + 1].get("output_type") == "stream"
                and merged[i + 1]["name"] == "stdout"):
            merged.insert(i, merged.pop(i + 1))
    return merged


def merge_cell_streams(nb) -> None:
    """:func:`merge_streams` on every code cell of ``nb``, in place."""
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.get("outputs"):
            cell.outputs = merge_streams(cell.outputs)
