"""The book's PDF (`make pdf`, tools/book_pdf.py): printed from the one-page build with the
book's print rules, it has the book's pages, a bookmark for every chapter and section page, the
HTML book's equation, figure and exercise numbers, its solutions and library sources open, and
every code line whole (a line cut at its box's edge loses its end on paper)."""
import json
import pathlib
import re
import subprocess
import sys
import time
import unicodedata

import pytest
from bs4 import BeautifulSoup

import book_pages

ROOT = pathlib.Path(__file__).resolve().parents[1]
pypdf = pytest.importorskip("pypdf", reason="pypdf reads the PDF (requirements.txt installs it)")

from book_pdf import chromium  # noqa: E402  (tools/ is on the path: tests/conftest.py)

pytestmark = pytest.mark.book


def squeezed(text: str) -> str:
    """Text without whitespace, ligatures unfolded: what survives a PDF's line breaks."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text))


@pytest.fixture(scope="module")
def pdf(tmp_path_factory, book_html):
    """make pdf's one-page build and print. The build reads the pages from the environment of the
    HTML build the other tests read (tests/conftest.py), as --all would read them anew: its page is
    the same byte for byte, without reading 60 notebooks a second time."""
    try:
        chromium()
    except SystemExit as missing:
        pytest.skip(str(missing))
    folder = tmp_path_factory.mktemp("pdf")
    started = time.monotonic()
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "book_pdf.py"), "--out", str(folder / "book.pdf"),
                             "--path-output", str(book_html.parent.parent), "--after-html-build"],
                            capture_output=True, text=True, timeout=1500)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    assert "WARNING" not in result.stdout + result.stderr, "the one-page build warned"
    print(f"make pdf's build and print: {time.monotonic() - started:.0f} s; {result.stdout.splitlines()[-1]}")
    reader = pypdf.PdfReader(folder / "book.pdf")
    # each page's text without the page number its foot carries (which pypdf reads first)
    texts = [squeezed(page.extract_text()).removeprefix(str(number))
             for number, page in enumerate(reader.pages, start=1)]
    return reader, texts


def whole(texts: list[str]) -> str:
    return "".join(texts)


def in_the_pdf(text: str, texts: list[str], joined: str) -> bool:
    """Whether squeezed ``text`` is in the PDF: on one page, or begun at the end of one page and
    ended on the next (Chromium may draw a box's continuation after the page's other text)."""
    if text in joined:
        return True
    for page, following in zip(texts, texts[1:]):
        for cut in range(len(text) - 1, 4, -1):
            if page.endswith(text[:cut]):
                if text[cut:] in following:
                    return True
                break
    return False


def bookmarks(outline) -> list[str]:
    titles = []
    for item in outline:
        titles.extend(bookmarks(item) if isinstance(item, list) else [item.title])
    return titles


def pages(book_html) -> dict[str, BeautifulSoup]:
    """Every page of the HTML book, without the "#" permalinks of its headings and numbers."""
    soups = {}
    for name in ["intro", *(page.file for page in book_pages.toc_pages())]:
        soups[name] = BeautifulSoup((book_html / f"{name}.html").read_text(), "html.parser")
        for link in soups[name].select("a.headerlink"):
            link.decompose()
    return soups


def test_the_pdf_has_the_books_pages_and_a_bookmark_for_every_page_of_the_book(pdf, book_html):
    reader, _ = pdf
    print(f"{len(reader.pages)} pages")
    assert 250 <= len(reader.pages) <= 900, len(reader.pages)
    marks = {squeezed(title) for title in bookmarks(reader.outline)}
    for name, soup in pages(book_html).items():
        heading = soup.select_one("article h1")
        assert squeezed(heading.get_text()) in marks, f"no bookmark for {name}: {heading.get_text()!r}"


def test_the_pdf_numbers_equations_figures_and_exercises_as_the_html_book(pdf, book_html):
    text = whole(pdf[1])
    numbers = []
    for soup in pages(book_html).values():
        numbers += [span.get_text() for span in soup.select("span.eqno")]
        numbers += [span.get_text() for span in soup.select("span.caption-number")]
    assert len(numbers) >= 56 + 40, len(numbers)
    missing = [number for number in numbers if squeezed(number) not in text]
    assert not missing, f"numbers of the HTML book not in the PDF: {missing}"


def test_the_pdf_prints_solutions_and_library_sources_open(pdf, book_html):
    """Each solution's and folded cell's text is in the PDF: the longest stretch of its prose
    without a formula, the longest line of its first listing, or the longest cell of its first
    table (a folded output may be a table alone)."""
    texts = pdf[1]
    joined, folded = whole(texts), 0
    for name, soup in pages(book_html).items():
        for box in soup.select("div.solution, details.hide"):
            for math in box.select("span.math, div.math"):
                math.replace_with("\0")
            stretches = [part for p in box.select("p:not(.admonition-title)") for part in p.get_text().split("\0")]
            stretches += [line for pre in box.select("pre")[:1] for line in pre.get_text().splitlines()]
            stretches += [cell.get_text() for table in box.select("table")[:1] for cell in table.select("td, th")]
            stretch = max(stretches, key=lambda part: len(squeezed(part)))
            assert len(squeezed(stretch)) >= 10, f"{name}: nothing to look for in {box.get_text()[:200]!r}"
            assert in_the_pdf(squeezed(stretch)[:60], texts, joined), f"{name}: not in the PDF: {stretch.strip()[:120]!r}"
            folded += 1
    assert folded >= 46, folded


def test_no_code_line_is_cut_in_the_pdf(pdf, book_html):
    """Every line of every code cell, output and listing is whole in the PDF: print wraps them."""
    texts = pdf[1]
    joined, lines, cut = whole(texts), 0, []
    for name, soup in pages(book_html).items():
        for pre in soup.select("article pre"):
            for line in pre.get_text().splitlines():
                if squeezed(line):
                    lines += 1
                    if not in_the_pdf(squeezed(line), texts, joined):
                        cut.append(f"  {name}: {len(line)} chars: {line.strip()[:100]}")
    print(f"{lines} code lines, {len(cut)} not whole in the PDF")
    assert lines > 5000, lines
    assert not cut, f"{len(cut)} code lines not whole in the PDF:\n" + "\n".join(cut[:40])
