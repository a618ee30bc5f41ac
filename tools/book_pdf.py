"""The book as one PDF: what `make pdf` runs.

    python tools/book_pdf.py [--out _build/html/book.pdf]

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
import shutil
import subprocess
import sys
import tempfile
import time

from bs4 import BeautifulSoup

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "_ext"))

from pdf_edition import PDF_NAME  # noqa: E402

SINGLE_PAGE = ROOT / "_build" / "singlehtml"
PRINTED_PAGE = "book-print.html"  # beside the one-page book, so that its relative links hold

# For the PDF only: A4 pages numbered at the foot, each chapter and back-matter page from a new
# page, the contents on their own pages.
PDF_STYLE = """<style>
@page { size: A4; margin: 16mm 15mm 18mm; @bottom-center { content: counter(page); font-size: 9pt; } }
@media print {
  div.toctree-wrapper > section, span[id^="document-"] + section { break-before: page; }
  nav#book-contents { break-after: page; font-size: 0.95em; }
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


def build_single_page(jupyter_book: pathlib.Path) -> pathlib.Path:
    """The whole book on one page, ``_build/singlehtml/intro.html``; warnings are errors."""
    result = subprocess.run([str(jupyter_book), "build", str(ROOT), "--builder", "singlehtml", "--all",
                             "-W", "-n", "--keep-going"], cwd=ROOT)
    if result.returncode:
        raise SystemExit(result.returncode)
    return SINGLE_PAGE / "intro.html"


def contents(soup: BeautifulSoup) -> str:
    """The table of contents: each page of the book (its numbered title) and its sections."""
    items = []
    for marker in soup.select('div.toctree-wrapper span[id^="document-"]'):
        page = marker.find_next_sibling("section")
        if page is None or page.find("h2") is None:
            continue
        sections = "".join(f'<li><a href="#{section["id"]}">{title(section.find("h3"))}</a></li>'
                           for section in page.find_all("section", recursive=False) if section.find("h3"))
        items.append(f'<li><a href="#{page["id"]}">{title(page.find("h2"))}</a>'
                     + (f"<ol>{sections}</ol>" if sections else "") + "</li>")
    return f'<nav id="book-contents" aria-label="Contents"><h2>Contents</h2><ol>{"".join(items)}</ol></nav>'


def title(heading) -> str:
    """A heading's text with its section number, without its "#" permalink."""
    heading = BeautifulSoup(str(heading), "html.parser")
    for link in heading.select("a.headerlink"):
        link.decompose()
    return heading.get_text(" ", strip=True)


def printable(page: pathlib.Path) -> pathlib.Path:
    """The one-page book with its table of contents and the PDF's page style, ready to print."""
    soup = BeautifulSoup(page.read_text(), "html.parser")
    place = soup.select_one("div.toctree-wrapper")
    if place is None:
        raise SystemExit(f"tools/book_pdf.py: {page} holds no chapters (no toctree-wrapper)")
    place.insert_before(BeautifulSoup(contents(soup), "html.parser"))
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
    parser.add_argument("--jupyter-book", type=pathlib.Path,
                        default=pathlib.Path(sys.executable).with_name("jupyter-book"))
    args = parser.parse_args(argv)
    started = time.monotonic()
    page = build_single_page(args.jupyter_book)
    built = time.monotonic()
    print_to_pdf(printable(page), args.out)
    print(f"[tools/book_pdf.py] {args.out} written: one-page build {built - started:.0f} s, "
          f"printing {time.monotonic() - built:.0f} s", flush=True)


if __name__ == "__main__":
    main()
