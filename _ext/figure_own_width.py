"""Each figure's own width in its page's HTML, for the phone rules of _static/layout.css.

A figure is drawn with 9-10 pt text at its own size, the width myst-nb writes inline on its image
(``style="width: 380px; height: 360px;"``). On a phone layout.css draws it at no less than 0.72 of
that width, read from the custom property ``--figure-own-width``, which CSS cannot take from the
``width`` declaration beside it. Written into the same inline style when the page is written, it
needs no script: without JavaScript a phone's figure still keeps its legible size (set by a script,
the figures shrank to the column again, their 9-pt text to 5-7 px).
"""
from __future__ import annotations

import re

from sphinx.application import Sphinx

# a figure's linked image, as Sphinx writes it (a reference around an img with a size in px)
FIGURE_IMAGE = re.compile(r'(<a class="reference internal image-reference" href="[^"]*"><img [^>]*?style=")'
                          r'(width: ([0-9.]+px);)')


def add_own_width(body: str) -> str:
    return FIGURE_IMAGE.sub(r"\1\2 --figure-own-width: \3;", body)


def write_own_widths(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    if "body" in context:
        context["body"] = add_own_width(context["body"])


def setup(app: Sphinx) -> dict:
    app.connect("html-page-context", write_own_widths)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
