"""The book as one PDF: every page links it, and the one-page HTML build it is printed from works.

``tools/book_pdf.py`` (``make pdf``) builds the whole book on one HTML page with Sphinx's
``singlehtml`` builder, prints it with Chromium and puts the PDF beside the HTML book as
``PDF_NAME``; the publishing workflow publishes it with the book. This extension

- adds "whole book (PDF)" to every page's download menu, and renames the theme's ".pdf", which
  prints only the page shown, "this page (print)". Where the PDF is there, the label says how long
  and large it is ("whole book (PDF, 451 pp., 34 MB)"), read from the file: ``make pdf`` writes the
  PDF after the HTML book, and relabels the built pages itself (``relabel_pages``);
- gives each fold of a code cell a title for print, where it prints open (``_static/print.css``
  shows it there instead of the button's): its own name without the "Show" that only a button says,
  or none where the button names no content ("Show code cell output");
- gives ``singlehtml`` the node handlers registered for ``html``. Sphinx falls back to those for
  another HTML builder only when no extension has registered any for it by name; sphinx-exercise
  and sphinx-proof register theirs for ``singlehtml``, so myst-nb's (the folded code cells) were
  missing and the one-page build failed at the first one.
"""
from __future__ import annotations

import functools
import pathlib
import re

from sphinx.application import Sphinx

#: the PDF's file name, at the root of the HTML book
PDF_NAME = "book.pdf"
#: the menu's label, with or without what pdf_label() adds
LABEL = re.compile(r">whole book \(PDF[^<)]*\)<")


def pdf_label(pdf: pathlib.Path) -> str:
    """The menu's label of the PDF ``pdf``: with its pages and megabytes where it exists."""
    if not pdf.is_file():
        return "whole book (PDF)"
    import pypdf  # the book's environment has it (requirements.txt); only a built PDF needs it
    return f"whole book (PDF, {len(pypdf.PdfReader(pdf).pages)} pp., {pdf.stat().st_size / 1e6:.0f} MB)"


def relabel_pages(pdf: pathlib.Path) -> int:
    """Give the menu of every page of the HTML book beside ``pdf`` the PDF's label; how many pages."""
    label, relabelled = pdf_label(pdf), 0
    for page in pdf.parent.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        changed = LABEL.sub(f">{label}<", text)
        if changed != text:
            page.write_text(changed, encoding="utf-8")
            relabelled += 1
    return relabelled


#: a fold's two button titles (myst-nb): shown folded, shown open
FOLD_TITLES = re.compile(r'(<p class="collapsed admonition-title">(.*?)</p>\s*<p class="expanded admonition-title">.*?</p>)',
                         re.S)


def print_title(folded: str) -> str | None:
    """A fold's title on paper, from its folded button's title (HTML)."""
    if re.fullmatch(r"Show code cell \w+", folded.strip()):
        return None
    return re.sub(r"^(\s*)Show (\w)", lambda match: match.group(1) + match.group(2).upper(), folded)


def print_titles(app: Sphinx, pagename, templatename, context, doctree) -> None:
    def titled(match: re.Match) -> str:
        title = print_title(match.group(2))
        return match.group(1) + (f'<p class="print-title admonition-title">{title}</p>' if title else "")

    if context.get("body"):
        context["body"] = FOLD_TITLES.sub(titled, context["body"])


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
            "text": built_label(pathlib.Path(app.outdir) / PDF_NAME),
            "tooltip": "Download the whole book as one PDF",
            "icon": "fas fa-book",
            "label": "download-book-pdf-button",
        })


def built_label(pdf: pathlib.Path) -> str:
    """pdf_label(), the PDF read once for all the pages of a build."""
    stat = pdf.stat() if pdf.is_file() else None
    return cached_label(pdf, stat and (stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=1)
def cached_label(pdf: pathlib.Path, version) -> str:
    return pdf_label(pdf)


def setup(app: Sphinx) -> dict:
    app.connect("builder-inited", share_html_handlers)
    # after sphinx-book-theme's add_header_buttons
    app.connect("html-page-context", link_the_pdf, priority=502)
    app.connect("html-page-context", print_titles)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
