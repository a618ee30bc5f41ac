"""The book as one PDF: what `make pdf` runs.

    python tools/book_pdf.py [--out _build/html/book.pdf] [--path-output DIR] [--after-html-build]

The whole book is built on one HTML page (Sphinx's ``singlehtml`` builder, warnings as errors,
into ``_build/singlehtml``), given a table of contents, and printed by headless Chromium with
the book's print rules (``_static/layout.css``: code wraps, folded solutions and library sources
print open). The numbers are the HTML book's: the same Sphinx build numbers chapters, sections,
figures, equations and exercises, and MathJax typesets the formulas before the page is printed.
Chromium writes the PDF's bookmarks from the headings (``--generate-pdf-document-outline``).
The PDF goes beside the HTML book (``_ext/pdf_edition.py``'s ``PDF_NAME``), which every page's
download menu links; the publishing workflow publishes the two together.
"""
from __future__ import annotations

import argparse
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

from bs4 import BeautifulSoup

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "_ext"))

from pdf_edition import PDF_NAME  # noqa: E402

PRINTED_PAGE = "book-print.html"  # beside the one-page book, so that its relative links hold

# For the PDF only: A4 pages numbered at the foot, each chapter and back-matter page from a new
# page, the contents on their own pages.
PDF_STYLE = """<style>
@page { size: A4; margin: 16mm 15mm 18mm; @bottom-center { content: counter(page); font-size: 9pt; } }
@media print {
  div.toctree-wrapper > section, span[id^="document-"] + section { break-before: page; }
  nav#book-contents { font-size: 0.95em; }
  nav#book-contents ol { list-style: none; padding-left: 0; }
  nav#book-contents ol ol { padding-left: 1.6em; margin-bottom: 0.4em; }
  nav#book-contents > ol > li { margin-top: 0.35em; font-weight: 500; }
  nav#book-contents ol ol li { font-weight: 400; }
  nav#book-contents a { color: inherit; text-decoration: none; }
}
</style>"""


def chromium() -> str:
    # Debian's and Ubuntu's Chromium, or the Chrome that GitHub's Ubuntu runners ship
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not found:
        raise SystemExit("tools/book_pdf.py: the PDF is printed by Chromium, which is not installed "
                         "(Debian: apt-get install chromium; `make pdf` installs it when run as root)")
    return found


def build_single_page(jupyter_book: pathlib.Path, path_output: pathlib.Path, fresh: bool = True) -> pathlib.Path:
    """The whole book on one page, ``PATH_OUTPUT/_build/singlehtml/intro.html``; warnings are errors.
    ``fresh``: every page read anew (``--all``); otherwise Sphinx takes the pages it has already
    read from the environment in ``PATH_OUTPUT/_build/.doctrees``."""
    result = subprocess.run([str(jupyter_book), "build", str(ROOT), "--builder", "singlehtml", *(["--all"] * fresh),
                             "--path-output", str(path_output), "-W", "-n", "--keep-going"], cwd=ROOT)
    if result.returncode:
        raise SystemExit(result.returncode)
    return path_output / "_build" / "singlehtml" / "intro.html"


def contents(wrappers: list) -> str:
    """The table of contents: each page of the book (its numbered title) and its sections, a
    chapter's section pages (9.1, 9.2, ...) among them; titles keep their formulas for MathJax."""
    items = []
    markers = [marker for wrapper in wrappers
               for marker in wrapper.find_all("span", id=re.compile("^document-"), recursive=False)]
    for marker in markers:
        page = marker.find_next_sibling("section")
        if page is None or page.find(["h2"]) is None:
            continue
        sections = []
        for child in page.find_all(["section", "div"], recursive=False):
            if child.name == "section" and child.find("h3"):
                sections.append(child)
            elif "toctree-wrapper" in child.get("class", []):  # a chapter's section pages
                sections += [part.find_next_sibling("section")
                             for part in child.find_all("span", id=re.compile("^document-"), recursive=False)]
        listed = "".join(f'<li><a href="#{section["id"]}">{title(section.find(["h2", "h3"]))}</a></li>'
                         for section in sections if section is not None)
        items.append(f'<li><a href="#{page["id"]}">{title(page.find("h2"))}</a>'
                     + (f"<ol>{listed}</ol>" if listed else "") + "</li>")
    return f'<nav id="book-contents" aria-label="Contents"><h2>Contents</h2><ol>{"".join(items)}</ol></nav>'


def title(heading) -> str:
    """A heading's HTML with its section number and formulas, without its "#" permalink."""
    heading = BeautifulSoup(str(heading), "html.parser").find(["h2", "h3"])
    for link in heading.select("a.headerlink"):
        link.decompose()
    return heading.decode_contents()


def printable(page: pathlib.Path) -> pathlib.Path:
    """The one-page book with its table of contents and the PDF's page style, ready to print."""
    soup = BeautifulSoup(page.read_text(), "html.parser")
    # the parts' lists of pages (a chapter's list of section pages sits inside its page)
    wrappers = [wrapper for wrapper in soup.select("div.toctree-wrapper")
                if wrapper.find_parent("div", class_="toctree-wrapper") is None]
    if not wrappers:
        raise SystemExit(f"tools/book_pdf.py: {page} holds no chapters (no toctree-wrapper)")
    wrappers[0].insert_before(BeautifulSoup(contents(wrappers), "html.parser"))
    soup.head.append(BeautifulSoup(PDF_STYLE, "html.parser"))
    printed = page.with_name(PRINTED_PAGE)
    printed.write_text(str(soup))
    return printed


def print_to_pdf(page: pathlib.Path, out: pathlib.Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
             f"--user-data-dir={profile}", "--no-pdf-header-footer", "--generate-pdf-document-outline",
             # scripts (MathJax typesetting 2,000 formulas) run before the page is printed
             "--virtual-time-budget=120000", f"--print-to-pdf={out}", page.as_uri()],
            capture_output=True, text=True, timeout=1200)
    if result.returncode or not out.is_file():
        raise SystemExit(f"tools/book_pdf.py: Chromium printed no PDF: {result.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "_build" / "html" / PDF_NAME)
    parser.add_argument("--path-output", type=pathlib.Path, default=ROOT,
                        help="where the one-page build goes: PATH_OUTPUT/_build/singlehtml (default: the book's _build)")
    parser.add_argument("--after-html-build", action="store_true",
                        help="PATH_OUTPUT holds a whole HTML build of this checkout, just made: read the pages "
                             "from its environment instead of anew (the one-page book is the same, in seconds)")
    parser.add_argument("--jupyter-book", type=pathlib.Path,
                        default=pathlib.Path(sys.executable).with_name("jupyter-book"))
    args = parser.parse_args(argv)
    started = time.monotonic()
    page = build_single_page(args.jupyter_book, args.path_output.resolve(), fresh=not args.after_html_build)
    built = time.monotonic()
    print_to_pdf(printable(page), args.out)
    print(f"[tools/book_pdf.py] {args.out} written: one-page build {built - started:.0f} s, "
          f"printing {time.monotonic() - built:.0f} s", flush=True)


if __name__ == "__main__":
    main()
