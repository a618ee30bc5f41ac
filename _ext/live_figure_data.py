"""A live figure's stored data loads on the page that shows the figure, and on no other.

Jupyter Book adds every ``.js`` file under ``_static/`` to every page (``html_js_files``).
For the figures' scripts (a few kB each) that is harmless; for the trained head's stored
queries and keys (``_static/live/trained_heads_data.js``, about 370 kB,
``benchmarks/live_trained_heads.py``) it made every page of the book load them. This
extension takes the data files of :data:`FIGURE_DATA` out of that list and adds each one,
in ``html-page-context``, only to a page whose body holds its figure's placeholder
(``<div class="live-figure" data-figure="NAME">``, ``_static/live/common.js``). The file is
still copied with ``_static/``; a script added for one page comes after the book's own, in
the page's head, so it has run before ``common.js`` builds the figures (on
``DOMContentLoaded``).
"""
from __future__ import annotations

from sphinx.application import Sphinx
from sphinx.config import Config

#: a live figure's name (its placeholder's ``data-figure``) -> the data files its page loads,
#: relative to ``_static/``
FIGURE_DATA = {"trained-head": ("live/trained_heads_data.js",)}
PAGE_ONLY = {path for paths in FIGURE_DATA.values() for path in paths}


def _name(entry) -> str:
    return entry if isinstance(entry, str) else entry[0]


def drop_from_every_page(app: Sphinx, config: Config) -> None:
    config.html_js_files = [entry for entry in config.html_js_files if _name(entry) not in PAGE_ONLY]


def add_to_the_figures_page(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    body = context.get("body", "")
    for figure, paths in FIGURE_DATA.items():
        if f'data-figure="{figure}"' in body:
            for path in paths:
                app.add_js_file(path)


def setup(app: Sphinx) -> dict:
    # before Sphinx turns html_js_files into its assets (config-inited, priority 800)
    app.connect("config-inited", drop_from_every_page, priority=400)
    app.connect("html-page-context", add_to_the_figures_page)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
