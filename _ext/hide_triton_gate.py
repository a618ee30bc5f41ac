"""The book shows the Triton cells of Chapter 9 without their first line, `%%needs_triton`,
and the checkpoint cells of Chapter 14 without theirs, `%%needs_checkpoints NAMES: what`.

Those cell magics (defined in the chapter's collapsed setup cell, and in
`attnlib.checkpoints`) let a cell run only where Triton, or the checkpoint packages, are
installed, and say in one line that it skipped elsewhere: they are for a reader who runs
the notebook, not for one who reads the book, whose outputs were made with them. The
notebook keeps the line; only the rendered listing drops it.
"""
from __future__ import annotations

from docutils import nodes
from sphinx.application import Sphinx

GATES = ("%%needs_triton", "%%needs_checkpoints")


def drop_the_gate(app: Sphinx, doctree: nodes.document) -> None:
    for block in doctree.findall(nodes.literal_block):
        source = block.astext()
        first, _, rest = source.partition("\n")
        if first.split(" ", 1)[0] in GATES:
            shown = rest
            block.rawsource = shown
            block.children = [nodes.Text(shown)]


def setup(app: Sphinx) -> dict:
    app.connect("doctree-read", drop_the_gate)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
