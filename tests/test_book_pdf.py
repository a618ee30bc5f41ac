"""The book's PDF (`make pdf`, tools/book_pdf.py): printed from the one-page build with the
book's print rules, it has a title page and the book's title and authors in its metadata, the
book's pages, an outline built from its contents (formulas as text) with a bookmark for every
chapter and section page, contents with page numbers, links that jump inside the file (or to the
web, never to the build machine's disk), the HTML book's equation, figure and exercise numbers,
its solutions and library sources open, no page left with only an empty frame, and every code line
whole (a line cut at its box's edge loses its end on paper), a long one broken with a mark. It is
set in fonts it embeds (never the printing machine's), prints no web-only toggle labels, and the
download menu of the pages beside it says how long and large it is."""
import json
import pathlib
import re
import shutil
import subprocess
import sys
import time
import unicodedata
from typing import NamedTuple

import pytest
import yaml
from bs4 import BeautifulSoup

import book_pages

ROOT = pathlib.Path(__file__).resolve().parents[1]
pypdf = pytest.importorskip("pypdf", reason="pypdf reads the PDF (requirements.txt installs it)")

import book_pdf  # noqa: E402
from book_pdf import CONTINUED, chromium  # noqa: E402  (tools/ is on the path: tests/conftest.py)
from tex_text import tex_text  # noqa: E402

pytestmark = pytest.mark.book


def squeezed(text: str) -> str:
    """Text without whitespace and the marks of a broken code line, ligatures unfolded: what
    survives a PDF's line breaks."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text).replace(CONTINUED.strip(), ""))


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
    for name in MENU_PAGES:  # two pages of the HTML book beside the PDF, for make pdf to relabel
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(book_html / name, folder / name)
    started = time.monotonic()
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "book_pdf.py"), "--out", str(folder / "book.pdf"),
                             "--path-output", str(book_html.parent.parent), "--after-html-build"],
                            capture_output=True, text=True, timeout=1500)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    assert "WARNING" not in result.stdout + result.stderr, "the one-page build warned"
    print(f"make pdf's build and print: {time.monotonic() - started:.0f} s; {result.stdout.splitlines()[-1]}")
    print(f"{(folder / 'book.pdf').stat().st_size / 1e6:.1f} MB")
    reader = pypdf.PdfReader(folder / "book.pdf")
    # each page's text without the page number its foot carries (which pypdf reads first)
    texts = [page.extract_text() for page in reader.pages]
    marks = sum(text.count(CONTINUED.strip()) for text in texts)
    texts = [squeezed(text).removeprefix(str(number)) for number, text in enumerate(texts, start=1)]
    return Printed(reader, texts, marks, folder)


MENU_PAGES = ["intro.html", "chapters/01_four_steps.html"]


class Printed(NamedTuple):
    reader: "pypdf.PdfReader"
    texts: list[str]  # each page's text, squeezed, without its page number
    marks: int        # the "↪" that mark where a code line continues
    folder: pathlib.Path  # the PDF and MENU_PAGES beside it


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
    return [item.title for item in outline_items(outline)]


def outline_items(outline) -> list:
    items = []
    for item in outline:
        items.extend(outline_items(item) if isinstance(item, list) else [item])
    return items


def heading_text(heading) -> str:
    """A heading as the outline writes it: its formulas as text."""
    heading = BeautifulSoup(str(heading), "html.parser")
    for math in heading.select("span.math"):
        math.replace_with(tex_text(math.get_text().strip().removeprefix("\\(").removesuffix("\\)")))
    return heading.get_text()


def pages(book_html) -> dict[str, BeautifulSoup]:
    """Every page of the HTML book, without the "#" permalinks of its headings and numbers."""
    soups = {}
    for name in ["intro", *(page.file for page in book_pages.toc_pages())]:
        soups[name] = BeautifulSoup((book_html / f"{name}.html").read_text(), "html.parser")
        for link in soups[name].select("a.headerlink"):
            link.decompose()
    return soups


def test_the_pdf_has_the_books_pages_and_a_bookmark_for_every_page_of_the_book(pdf, book_html):
    reader = pdf.reader
    print(f"{len(reader.pages)} pages")
    assert 250 <= len(reader.pages) <= 900, len(reader.pages)
    marks = {squeezed(title) for title in bookmarks(reader.outline)}
    for name, soup in pages(book_html).items():
        heading = soup.select_one("article h1")
        assert squeezed(heading_text(heading)) in marks, f"no bookmark for {name}: {heading.get_text()!r}"


def looks_garbled(title: str) -> bool:
    """A bookmark as Chromium's own outline wrote 45 of 212: doubled ("SizesSizes", "9.1.3. 9.1.3."),
    words run together ("Attention,executable"), a formula dropped ("14.2.1. , layer by layer"),
    TeX left in."""
    return (not title.strip() or "\\" in title or "$" in title or "  " in title or bool(re.search(r"(.{4,})\1", title))
            or bool(re.match(r"(\d+(?:\.\d+)*\.)\s+\1\s", title)) or bool(re.search(r"[a-z],[A-Za-z]", title))
            or bool(re.search(r"(^|\s)[,.:;?]", title.split(" ", 1)[-1])) or title.rstrip() != title)


def test_the_garbled_bookmarks_of_chromiums_outline_are_recognised():
    for title in ["SizesSizes", "9.1.3. 9.1.3. The kernelThe kernel", "The chaptersThe chapters",
                  "Scaled Dot-Product Attention,executable", "14.2.1. , layer by layer", "1.5. A worked example: , ",
                  "10.3.1. Does LayerNorm keep  near 1?", "5.3.4. Encoding a mask as a number: ,finfo.min and "]:
        assert looks_garbled(title), title
    for title in ["1.5. A worked example: n = 3, dₖ = 4", "6.3. √(d_model) instead of √dₖ", "Notation",
                  "10.3. LayerNorm, wider heads and QK-norm", "Scaled Dot-Product Attention, executable"]:
        assert not looks_garbled(title), title


def test_the_outline_is_the_contents_in_plain_text_and_each_bookmark_opens_its_page(pdf):
    """Chromium's own outline doubled 33 titles ("SizesSizes"), ran words together and dropped
    formulas ("14.2.1. , layer by layer"); this one is the book's contents, formulas as text, and
    each bookmark's page shows the start of its title (up to its first formula)."""
    reader, texts = pdf.reader, pdf.texts
    items = outline_items(reader.outline)
    assert len(items) >= 120, len(items)
    garbled = []
    for item in items:
        title = item.title
        if looks_garbled(title):
            garbled.append(title)
            continue
        # what the page shows of the title: its number and first word, or, unnumbered, its start
        numbered = re.match(r"(\d+(\.\d+)*\.\s+\S+)", title)
        start = squeezed(re.split(r"[^\x20-\x7e]", numbered.group(1) if numbered else title)[0])[:30]
        page = reader.get_destination_page_number(item)
        if len(start) >= 4 and start not in texts[page]:
            garbled.append(f"{title!r} opens p. {page + 1}, which does not show {start!r}")
    assert not garbled, "bookmarks garbled or on the wrong page:\n" + "\n".join(garbled)
    assert any("dₖ" in title for title in bookmarks(reader.outline)), "no bookmark keeps its formula as text"


def entry_key(title: str) -> str:
    """A contents entry by its number ("6.1."), or by its title where it has none (a formula in a
    title reads differently in the contents, typeset, than in the bookmark)."""
    number = re.match(r"\s*(\d+(\.\d+)*\.)\s", title)
    return number.group(1) if number else squeezed(title)


def test_the_contents_give_each_chapters_page(pdf):
    """The contents print each chapter's and section's page number after its title, right-aligned
    (read with pypdf's layout mode, which keeps a line's title and number together): the page its
    bookmark opens."""
    reader = pdf.reader
    items = outline_items(reader.outline)
    assert items[1].title == "Contents", [item.title for item in items[:3]]
    first, last = reader.get_destination_page_number(items[1]), reader.get_destination_page_number(items[2])
    printed = {}
    for page in reader.pages[first:last]:
        for line in page.extract_text(extraction_mode="layout").splitlines():
            match = re.fullmatch(r"\s*(\S.*?)\s{3,}(\d+)\s*", line)
            if match:
                printed[entry_key(match.group(1))] = int(match.group(2))
    checked = 0
    for item in items[2:]:
        number = reader.get_destination_page_number(item) + 1
        key = entry_key(item.title)
        assert printed.get(key) == number, f"contents: {item.title!r} on p. {printed.get(key)}, its bookmark opens p. {number}"
        checked += 1
    assert checked >= 100, checked


def test_every_link_jumps_inside_the_pdf_or_to_the_web(pdf):
    """Cross-references and citations jump within the file: the one-page build writes them as
    links to intro.html, which Chromium printed as file:///.../_build/... (606 of them), and the
    figures linked their PNGs the same way. Every link left is a web address."""
    reader = pdf.reader
    internal, web, local = 0, 0, []
    for number, page in enumerate(reader.pages, start=1):
        for annotation in page.get("/Annots") or []:
            annotation = annotation.get_object()
            if annotation.get("/Subtype") != "/Link":
                continue
            action = annotation.get("/A")
            action = action.get_object() if action is not None else {}
            if "/Dest" in annotation or action.get("/S") == "/GoTo":
                internal += 1
            elif "/URI" in action:
                uri = str(action["/URI"])
                web += uri.startswith(("http://", "https://"))
                if not uri.startswith(("http://", "https://")):
                    local.append(f"p. {number}: {uri}")
    print(f"{internal} links within the PDF, {web} to the web")
    assert not local, f"{len(local)} links that are not web addresses:\n" + "\n".join(local[:20])
    assert internal >= 900, internal  # the contents' 130 and the 606 that were file:// links, at least


def test_a_title_page_and_the_books_title_and_authors_in_the_metadata(pdf):
    reader, texts = pdf.reader, pdf.texts
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert reader.metadata.title == config["title"] and reader.metadata.author == config["author"], reader.metadata
    assert texts[0].startswith(squeezed(config["title"])), texts[0][:200]
    assert squeezed(config["author"]) in texts[0]


def test_no_page_is_blank_or_holds_only_an_empty_frame(pdf):
    """A box kept whole (break-inside: avoid) that is taller than the space left on a page moved
    to the next one and left its frame alone on this one: 11 pages held nothing else. And a page's
    marker between two chapters (book_pdf.markers_into_pages) made a sheet of its own before
    Chapter 14, blank but for its number. No page is without text or a picture."""
    reader, texts = pdf.reader, pdf.texts
    framed, blank = [], []
    for number, (page, text) in enumerate(zip(reader.pages, texts), start=1):
        if len(text) >= 3 or list(page.images):
            continue
        drawing = page.get_contents().get_data()
        rectangles = len(re.findall(rb"\sre\s", drawing)) + len(re.findall(rb"\s[Ss]\n", drawing))
        (framed if rectangles > 1 else blank).append(number)
    assert not framed, f"pages that hold only a box's frame: {framed}"
    assert not blank, f"pages with nothing on them but the page number: {blank}"


def test_a_link_to_a_page_jumps_to_its_title():
    """The one-page build's marker of a page (the target of a link to the page) goes inside the
    page's section, which starts a sheet: standing before it, it was left at the foot of the page
    before, or on a blank sheet of its own."""
    soup = BeautifulSoup('<div class="toctree-wrapper"><section id="a"><h2>A</h2><p>text</p></section>\n'
                         '<span id="document-b"></span>\n<section id="b"><span id="ch-b"></span><h2>B</h2></section>'
                         '<span id="document-c"></span></div>', "html.parser")
    book_pdf.markers_into_pages(soup)
    wrapper = soup.div
    assert [child.name for child in wrapper.find_all(True, recursive=False)] == ["section", "section", "span"]
    assert [child.get("id") for child in soup.find(id="b").find_all(True, recursive=False)] == ["document-b", "ch-b", None]


def test_a_link_to_a_page_lands_on_the_sheet_of_its_title(pdf, book_html):
    """In the print, each page's marker (where a link to the page jumps) is on the sheet where the
    page's section starts: before markers_into_pages, all 29 were on the sheet before it (14's on a blank one)."""
    printed = BeautifulSoup((book_html.parent / "singlehtml" / book_pdf.PRINTED_PAGE).read_text(), "html.parser")
    pages = book_pdf.anchor_pages(pdf.reader)
    compared, apart = 0, []
    for marker in printed.find_all("span", id=re.compile("^document-")):
        section = marker.find_parent("section")
        if section is None or marker["id"] not in pages or section.get("id") not in pages:
            continue
        compared += 1
        if pages[marker["id"]] != pages[section["id"]]:
            apart.append((marker["id"], pages[marker["id"]], pages[section["id"]]))
    assert compared >= 25 and not apart, (compared, apart)


def test_a_code_line_too_long_for_the_page_is_broken_with_a_mark(pdf, book_html):
    """A code line longer than the printed box breaks where the PDF's style says, its rest on the
    next line after a "↪" (as d2l's listings mark them), not at column 0 as if it were new code."""
    long_lines = sum(1 for soup in pages(book_html).values() for pre in soup.select("article pre")
                     for line in pre.get_text().splitlines() if len(line.rstrip()) > book_pdf.CODE_COLUMNS)
    marks = pdf.marks
    print(f"{long_lines} code lines longer than {book_pdf.CODE_COLUMNS} characters, {marks} marks")
    assert long_lines >= 50 and marks >= long_lines, (long_lines, marks)


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


def test_a_long_code_line_is_broken_in_its_own_indentation_with_a_mark():
    """wrap_code breaks inside Pygments' spans, every piece at most CODE_COLUMNS wide, the rest of
    the line in the line's indentation after "↪"; the text is the line's, once the marks are out."""
    width = book_pdf.CODE_COLUMNS
    lines = ["a" * (width - 5) + "b" * 10, "    " + "c" * (2 * width), "short"]
    html = ('<article><pre><span class="n">' + lines[0][:width - 5] + '</span><span class="o">' + lines[0][width - 5:]
            + '</span>\n    <span class="s">' + lines[1].strip() + "</span>\nshort\n</pre></article>")
    soup = BeautifulSoup(html, "html.parser")
    book_pdf.wrap_code(soup)
    printed = soup.pre.get_text().splitlines()
    assert all(len(line) <= width for line in printed), printed
    assert [line.startswith("    ↪ ") for line in printed[2:5]] == [False, True, True], printed
    assert printed[1].startswith("↪ ") and printed[-1] == "short"
    assert squeezed("".join(printed)) == squeezed("".join(lines))


def test_links_between_the_books_pages_jump_within_the_print():
    soup = BeautifulSoup('<p id="eq-1"></p><section id="s"></section><a href="intro.html#eq-1">(4.1)</a>'
                         '<a class="reference external" href="https://arxiv.org/abs/1">paper</a>'
                         '<a class="reference internal image-reference" href="_images/fig.png"><img></a>'
                         '<a href="intro.html#gone">gone</a><a href="#s">here</a>', "html.parser")
    book_pdf.internal_links(soup)
    assert [link.get("href") for link in soup.find_all("a")] == ["#eq-1", "https://arxiv.org/abs/1", None, None, "#s"]


def test_a_headings_formula_reads_as_text_in_a_bookmark():
    assert tex_text(r"\operatorname{Var}(q \cdot k)/d_k") == "Var(q · k)/dₖ"
    assert tex_text(r"-10^9") == "−10⁹" and tex_text(r"-\infty") == "−∞"
    assert tex_text(r"\sqrt{d_{\text{model}}}") == "√(d_model)" and tex_text(r"\sqrt{d_k}") == "√dₖ"


def font_names(reader) -> dict[str, bool]:
    """Each font of the PDF's pages by its PostScript name (without the subset's tag "ABCDEF+"), and
    whether the file carries it: a TrueType or CFF program, or a Type 3 font's glyph drawings."""
    fonts = {}
    for page in reader.pages:
        for font in (page["/Resources"].get_object().get("/Font") or {}).values():
            font = font.get_object()
            if font["/Subtype"] == "/Type3":
                name, embedded = font["/FontDescriptor"]["/FontName"], "/CharProcs" in font
            else:
                described = font["/DescendantFonts"][0].get_object() if font["/Subtype"] == "/Type0" else font
                descriptor = described["/FontDescriptor"].get_object()
                name = font["/BaseFont"]
                embedded = any(key in descriptor for key in ("/FontFile", "/FontFile2", "/FontFile3"))
            fonts[re.sub(r"^[A-Z]{6}\+", "", str(name).lstrip("/"))] = embedded
    return fonts


def test_the_pdf_is_set_in_the_fonts_it_embeds_not_the_printing_machines(pdf):
    """Text and headings in Source Sans 3, code in Source Code Pro, the signs they lack ("↪") in Noto
    Sans Math, formulas in MathJax's fonts and the theme's icons in Font Awesome, every one embedded.
    Printed with the machine's fonts, the PDF was set in DejaVu Sans, DejaVu Sans Mono and (its page
    numbers) Liberation Serif: another machine would print another book."""
    fonts = font_names(pdf.reader)
    print(sorted(fonts))
    for family in ("SourceSans3", "SourceCodePro", "NotoSansMath"):
        assert any(name.startswith(family) for name in fonts), f"no {family} font in the PDF: {sorted(fonts)}"
    intended = ("SourceSans3", "SourceCodePro", "NotoSansMath", "MathJax_", "FontAwesome6")
    fallback = sorted(name for name in fonts if not name.startswith(intended))
    assert not fallback, f"fonts the book does not ship: {fallback}"
    assert all(fonts.values()), f"fonts not embedded: {[name for name, embedded in fonts.items() if not embedded]}"


def test_a_toggles_web_only_label_does_not_print(pdf, book_html):
    """A folded cell prints open, so its button's "Show code cell content" or "Hide the source" says
    nothing on paper: no title of a fold's button prints as the button says it (a titled fold prints
    its title without the "Show")."""
    labels = {re.sub(r"\s+", " ", title.get_text()).strip()
              for soup in pages(book_html).values()
              for title in soup.select("details > summary .collapsed, details > summary .expanded")}
    assert {"Show code cell output", "Hide code cell source"} <= labels and len(labels) >= 20, sorted(labels)
    joined = whole(pdf.texts)
    printed = sorted(label for label in labels if squeezed(label) in joined)
    assert not printed, f"web-only labels in the PDF: {printed}"


def test_the_download_menu_says_how_long_and_large_the_pdf_is(pdf, book_html):
    """make pdf runs after the HTML book is built, and relabels the menus of the pages beside the PDF
    with what the PDF it made has: pages and megabytes. Before the PDF exists, the label is plain."""
    pages_count, megabytes = len(pdf.reader.pages), (pdf.folder / "book.pdf").stat().st_size / 1e6
    for name in MENU_PAGES:
        labels = re.findall(r">\s*(whole book \(PDF[^<]*)<", (pdf.folder / name).read_text())
        assert len(labels) == 1, (name, labels)
        numbers = re.fullmatch(r"whole book \(PDF, (\d+) pp\., (\d+) MB\)", labels[0])
        assert numbers, labels[0]
        assert int(numbers.group(1)) == pages_count, (labels[0], pages_count)
        assert abs(int(numbers.group(2)) - megabytes) <= 0.5, (labels[0], megabytes)
    assert re.findall(r">\s*(whole book \(PDF[^<]*)<", (book_html / "intro.html").read_text()) == ["whole book (PDF)"]


def test_a_pages_own_print_shows_its_folds_open_under_print_titles(book_html, tmp_path):
    """The download menu's "this page (print)" prints a page with the book's print rules too: a fold
    prints open under its title without the button's "Show" ("The section's setup"), or under no
    title where the button names no content ("Show code cell output"); no button title prints."""
    try:
        chromium()
    except SystemExit as missing:
        pytest.skip(str(missing))
    page = book_html / "chapters" / "09_1_the_kernel.html"
    soup = BeautifulSoup(page.read_text(), "html.parser")
    labels = {re.sub(r"\s+", " ", title.get_text()).strip()
              for title in soup.select("details > summary .collapsed, details > summary .expanded")}
    assert {"Show the section's setup", "Show code cell output"} <= labels, labels
    book_pdf.print_to_pdf(page, tmp_path / "page.pdf")
    text = squeezed("".join(sheet.extract_text() for sheet in pypdf.PdfReader(tmp_path / "page.pdf").pages))
    assert squeezed("The section's setup") in text
    assert not [label for label in labels if squeezed(label) in text], sorted(labels)
