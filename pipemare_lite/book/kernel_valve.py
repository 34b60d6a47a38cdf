"""Inside a chapter's kernel: a cell's printed output capped where it is made (book tooling).

The book build caps each cell's output (:mod:`pipemare_lite.book.execute`), but it can only
drop a message once it has received it, and a kernel sends what a cell printed in a few
large messages: a cell printing 1 GiB still cost the builder 4.2 GB of memory to receive
and drop (issue 47, F1). The build therefore starts every chapter's kernel with
:func:`install`, which wraps ``sys.stdout`` and ``sys.stderr`` so that a cell sends at most
``cap`` characters of them; the rest is counted, not sent, and after the cell one line
starting with :data:`HELD_MARK` tells the builder how many characters were held back (it
adds them to the cell's "left out" note). Rich outputs (figures, HTML) are not touched:
the builder's own caps apply to them. Plain Python, no torch: the kernel imports it first.
"""

from __future__ import annotations

import sys

#: The start of the line a kernel sends after a cell whose output it held back.
HELD_MARK = "\x1b]pipemare-book-held:"


def install(cap: int) -> None:
    """Cap each cell's stdout and stderr, together, at ``cap`` characters in this kernel.

    The wrappers go on at the start of every cell (the kernel's streams, and IPython's own
    per-cell wrapper of their ``write``, are only in place by then), outermost.
    """
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:  # not in a kernel: nothing to cap
        return
    state = {"sent": 0, "held": 0}

    def wrap(stream) -> None:
        write = stream.write
        if getattr(write, "capped_by_pipemare_book", False):
            return

        def write_capped(text):
            room = cap - state["sent"]
            if len(text) <= room:
                state["sent"] += len(text)
                return write(text)
            if room > 0:
                write(text[:room])
                state["sent"] = cap
            state["held"] += len(text) - max(room, 0)
            return len(text)

        write_capped.capped_by_pipemare_book = True
        stream.write = write_capped

    def before_cell(*_):
        state.update(sent=0, held=0)
        wrap(sys.stdout)
        wrap(sys.stderr)

    def after_cell(*_):
        if state["held"]:
            type(sys.stderr).write(sys.stderr, f"{HELD_MARK}{state['held']}\n")  # unwrapped
            sys.stderr.flush()

    shell.events.register("pre_run_cell", before_cell)
    shell.events.register("post_run_cell", after_cell)
