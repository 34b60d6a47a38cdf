"""A cell's prints merged into one block per stream (pipemare_lite/book/site/streams.py),
equal to myst-nb's own merge and linear in a line's length (issue 47, F1: myst-nb's took
more than ten minutes on a chapter cell's 20 MiB line)."""

from __future__ import annotations

import copy
import random
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook, new_output

from pipemare_lite.book.site.pages import site_notebook
from pipemare_lite.book.site.streams import merge_streams


def _random_outputs(rng: random.Random) -> list:
    outputs = []
    for _ in range(rng.randint(0, 6)):
        if rng.random() < 0.2:
            outputs.append(new_output("display_data", data={"text/plain": "shown"}))
        else:
            text = "".join(rng.choice("ab \r\n\b") for _ in range(rng.randint(0, 12)))
            outputs.append(new_output("stream", name=rng.choice(["stdout", "stderr"]),
                                      text=text))
    return outputs


def test_merge_equals_myst_nb_s_coalesce_streams():
    from myst_nb.core.utils import coalesce_streams  # the reference: what the site did

    rng = random.Random(0)
    for trial in range(3000):
        outputs = _random_outputs(rng)
        expected = coalesce_streams(copy.deepcopy(outputs))
        assert merge_streams(copy.deepcopy(outputs)) == expected, (trial, outputs)


def test_a_long_line_is_merged_in_linear_time():
    line = "x" * (20 * 2**20)  # the book's per-cell cap, printed without a newline
    outputs = [new_output("stream", name="stdout", text=line[:2**20]),
               new_output("stream", name="stdout", text=line[2**20:] + "\rdone")]
    began = time.process_time()
    (merged,) = merge_streams(outputs)
    took = time.process_time() - began
    # each piece ends a line (myst-nb's rule); the carriage return rewinds the second
    assert merged["text"] == line[:2**20] + "\ndone\n"
    # a few passes over 20 MiB; myst-nb's expression needed minutes for 1 MiB here
    assert took < 5, took


def test_the_site_notebook_has_one_block_per_stream(tmp_path):
    nb = new_notebook(cells=[new_code_cell("for i in range(2): print(i)", outputs=[
        new_output("stream", name="stdout", text="0\n"),
        new_output("stream", name="stdout", text="1\n")])])
    path = tmp_path / "01_x.ipynb"
    nbformat.write(nb, path)
    page, _ = site_notebook(nb, path, Path(tmp_path), 1.0, False)
    (cell,) = [c for c in page.cells if c.cell_type == "code"]
    assert [(o["name"], o["text"]) for o in cell.outputs] == [("stdout", "0\n1\n")]
