"""The book shows the Triton cells of Chapter 9 without their first line, `%%needs_triton`.

That cell magic (defined in the chapter's collapsed setup cell) lets a cell run only where
Triton is installed, and say in one line that it skipped elsewhere (macOS, Windows): it is
for a reader who runs the notebook, not for one who reads the book, whose outputs were made
with Triton. The notebook keeps the line; only the rendered listing drops it.
"""
from __future__ import annotations

from docutils import nodes
from sphinx.application import Sphinx

GATE = "%%needs_triton\n"


def drop_the_gate(app: Sphinx, doctree: nodes.document) -> None:
    for block in doctree.findall(nodes.literal_block):
        source = block.astext()
        if source.startswith(GATE):
            shown = source[len(GATE):]
            block.rawsource = shown
            block.children = [nodes.Text(shown)]


def setup(app: Sphinx) -> dict:
    app.connect("doctree-read", drop_the_gate)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
