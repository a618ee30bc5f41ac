"""The book as one PDF: every page links it, and the one-page HTML build it is printed from works.

``tools/book_pdf.py`` (``make pdf``) builds the whole book on one HTML page with Sphinx's
``singlehtml`` builder, prints it with Chromium and puts the PDF beside the HTML book as
``PDF_NAME``; the publishing workflow publishes it with the book. This extension

- adds "whole book (PDF)" to every page's download menu, and renames the theme's ".pdf", which
  prints only the page shown, "this page (print)";
- gives ``singlehtml`` the node handlers registered for ``html``. Sphinx falls back to those for
  another HTML builder only when no extension has registered any for it by name; sphinx-exercise
  and sphinx-proof register theirs for ``singlehtml``, so myst-nb's (the folded code cells) were
  missing and the one-page build failed at the first one.
"""
from __future__ import annotations

from sphinx.application import Sphinx

#: the PDF's file name, at the root of the HTML book
PDF_NAME = "book.pdf"


def share_html_handlers(app: Sphinx) -> None:
    if app.builder.name != "singlehtml":
        return
    handlers = app.registry.translation_handlers
    single = handlers.setdefault("singlehtml", {})
    for name, pair in handlers.get("html", {}).items():
        single.setdefault(name, pair)


def link_the_pdf(app: Sphinx, pagename, templatename, context, doctree) -> None:
    for group in context.get("header_buttons", []):
        if group.get("label") != "download-buttons":
            continue
        for button in group["buttons"]:
            if button.get("label") == "download-pdf-button":
                button["tooltip"] = "Print this page, or save it as a PDF"
                button["text"] = "this page (print)"
        group["buttons"].append({
            "type": "link",
            "url": context["pathto"](PDF_NAME, 1),
            "text": "whole book (PDF)",
            "tooltip": "Download the whole book as one PDF",
            "icon": "fas fa-book",
            "label": "download-book-pdf-button",
        })


def setup(app: Sphinx) -> dict:
    app.connect("builder-inited", share_html_handlers)
    # after sphinx-book-theme's add_header_buttons
    app.connect("html-page-context", link_the_pdf, priority=502)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
