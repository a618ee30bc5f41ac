"""The book as one PDF: what `make pdf` runs.

    python tools/book_pdf.py [--out _build/html/book.pdf] [--path-output DIR] [--after-html-build]

The whole book is built on one HTML page (Sphinx's ``singlehtml`` builder, warnings as errors,
into ``_build/singlehtml``), given a title page and a table of contents, and printed by headless
Chromium with the book's print rules (``_static/layout.css``: folded solutions and library
sources print open) and the PDF's own (``PDF_STYLE``). The numbers are the HTML book's: the same
Sphinx build numbers chapters, sections, figures, equations and exercises, and MathJax typesets
the formulas before the page is printed. Before printing, every link between the book's pages
becomes a jump within the PDF (the one-page build writes them as links to ``intro.html``, which
Chromium would print as ``file://`` links), a code line too long for the page is broken with a
"↪", and a small cell or output is marked to be kept on one page.

Two passes give the contents their page numbers: the first print names a destination for every
target of a link, whose pages give each contents entry's page; the front matter alone is then
printed again with only those numbers visible, laid out as in the first, and drawn over the
first print's pages (pypdf, an incremental update). pypdf also writes the outline, from the
contents with formulas as text (``tools/tex_text.py``), and the title and authors.
The PDF goes beside the HTML book (``_ext/pdf_edition.py``'s ``PDF_NAME``), which every page's
download menu links; the publishing workflow publishes the two together.
"""
from __future__ import annotations

import argparse
import html as html_module
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unicodedata
from dataclasses import dataclass, field

import pypdf
import yaml
from bs4 import BeautifulSoup, NavigableString

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "_ext"))
sys.path.insert(0, str(ROOT / "tools"))

from pdf_edition import PDF_NAME, relabel_pages  # noqa: E402
from tex_text import tex_text  # noqa: E402

PRINTED_PAGE = "book-print.html"  # beside the one-page book, so that its relative links hold
NUMBERS_PAGE = "book-print-numbers.html"  # the second pass: the contents' page numbers alone

# For the PDF only: A4 pages numbered at the foot, a title page, each chapter and back-matter page
# from a new page, the contents on their own pages with each entry's page number right-aligned
# after a dotted leader, code at a size that holds CODE_COLUMNS characters a line, and a line
# longer than that broken by wrap_code() with a "↪" where it continues.
PDF_STYLE = """<style>
@page { size: A4; margin: 16mm 15mm 18mm; @bottom-center { content: counter(page); font-size: 9pt; font-family: "TEXT_FONT"; } }
@page :first { @bottom-center { content: none; } }
@media print {
  html { font-size: 87.5%; }  /* 10.5-pt text */
  /* the theme's own font variables, so that every rule of the theme that names them takes the PDF's type */
  :root {
    --pst-font-family-base: "TEXT_FONT", "SIGNS_FONT", sans-serif;
    --pst-font-family-heading: "TEXT_FONT", "SIGNS_FONT", sans-serif;
    --pst-font-family-monospace: "CODE_FONT", "SIGNS_FONT", monospace;
  }
  section#title-page { break-after: page; text-align: center; padding-top: 60mm; }
  section#title-page h1 { font-size: 2.1rem; margin-bottom: 0.6em; }
  section#title-page p { margin: 0.4em 0; }
  section#title-page .subtitle { font-size: 1.15rem; font-style: italic; }
  section#title-page .author { font-size: 1.2rem; margin-top: 25mm; }
  section#title-page .edition { font-size: 0.85rem; margin-top: 70mm; }
  div.toctree-wrapper > section { break-before: page; }  /* each page (markers_into_pages) */
  nav#book-contents { font-size: 0.95em; break-before: page; }
  /* the theme hides an article's first h1 in print, for a title of its own (hidden by layout.css) */
  section#title-page h1 { display: block !important; }
  nav#book-contents ol { list-style: none; padding-left: 0; }
  nav#book-contents ol ol { padding-left: 1.6em; margin-bottom: 0.4em; }
  nav#book-contents > ol > li { margin-top: 0.35em; font-weight: 500; }
  nav#book-contents ol ol li { font-weight: 400; }
  nav#book-contents a { color: inherit; text-decoration: none; display: flex; align-items: baseline; }
  nav#book-contents .toc-leader { flex: 1 1 auto; margin: 0 0.4em; border-bottom: 1px dotted currentColor; min-width: 2em; }
  nav#book-contents .toc-page { flex: 0 0 2.2em; text-align: right; font-variant-numeric: tabular-nums; }
  /* a box's bottom margin that did not fit at a page's foot made a blank page of its own before
     the next chapter's forced break (after chapters 8 and 13) */
  section > :last-child { margin-bottom: 0 !important; }
  div.highlight pre, div.cell_output pre { font-size: CODE_SIZEpt !important; line-height: 1.3; }
  span.code-continued { color: #888; }
}
</style>"""
#: The PDF's type, the same on every machine that prints it: Fontsource's packages from npm
#: (tools/pdf_fonts/package.json and its lock, installed by install_fonts(); nothing is fetched while
#: printing), all under the SIL Open Font License. Source Code Pro is the first font the web book's
#: monospace list names, Source Sans 3 its companion for text; Noto Sans Math draws the signs neither
#: has (the "↪" of a broken code line). Chromium embeds each one subset to the glyphs printed.
TEXT_FONT, CODE_FONT, SIGNS_FONT = "Source Sans 3", "Source Code Pro", "Noto Sans Math"
#: family: its Fontsource package and the weight-style stylesheets printed (the theme's text, headings
#: and contents use 400 to 700; code is upright or italic, regular or bold)
FONT_STYLESHEETS = {
    TEXT_FONT: ("source-sans-3", ("400", "400-italic", "500", "600", "700", "700-italic")),
    CODE_FONT: ("source-code-pro", ("400", "400-italic", "700", "700-italic")),
    SIGNS_FONT: ("noto-sans-math", ("400",)),
}
FONTS_FOLDER = ROOT / "tools" / "pdf_fonts"
PRINTED_FONTS = "_static/pdf-fonts"  # beside the printed page
PDF_STYLE = (PDF_STYLE.replace("CODE_FONT", CODE_FONT).replace("TEXT_FONT", TEXT_FONT)
             .replace("SIGNS_FONT", SIGNS_FONT).replace("CODE_SIZE", "7.4"))
#: what a print line of code holds at PDF_STYLE's code size (Source Code Pro: 0.6 em a character;
#: the narrowest code box of the print, in a solution, is 560 px: 94 characters)
#: in a cell's box on an A4 page; a longer line is broken and its rest marked (d2l's listings do the same)
CODE_COLUMNS = 92
CONTINUED = "↪ "

# The second pass prints the front matter again with only the contents' page numbers visible,
# laid out exactly as in the first, and those pages are drawn over the first print's.
NUMBERS_STYLE = """<style>
@page { @bottom-center { content: none; } }
html, body { background: none !important; }
body * { visibility: hidden !important; }
nav#book-contents .toc-page, nav#book-contents .toc-page * { visibility: visible !important; }
</style>"""


def install_fonts() -> pathlib.Path:
    """Fontsource's packages of the PDF's fonts, installed by ``npm ci`` from the lock file (checked
    against the integrity hashes it records) where they are missing or older than the lock."""
    modules = FONTS_FOLDER / "node_modules"
    installed = modules / ".package-lock.json"  # npm ci's record of what it installed
    if not installed.is_file() or installed.stat().st_mtime < (FONTS_FOLDER / "package-lock.json").stat().st_mtime:
        npm = shutil.which("npm")
        if not npm:
            raise SystemExit("tools/book_pdf.py: the PDF's fonts are npm packages (tools/pdf_fonts), and npm is "
                             "not installed (Debian: apt-get install npm)")
        result = subprocess.run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=FONTS_FOLDER)
        if result.returncode:
            raise SystemExit("tools/book_pdf.py: npm ci could not install the PDF's fonts (tools/pdf_fonts)")
    return modules / "@fontsource"


def font_faces(packages: pathlib.Path, folder: pathlib.Path) -> str:
    """The ``@font-face`` rules of the PDF's fonts, their WOFF2 files copied into ``folder/PRINTED_FONTS``
    (so that the printed page names them relatively). Each family keeps the Unicode ranges of its
    files, except the signs' font: Fontsource labels its one file Latin, but it holds every sign."""
    target = folder / PRINTED_FONTS
    target.mkdir(parents=True, exist_ok=True)
    rules = []
    for family, (package, variants) in FONT_STYLESHEETS.items():
        for variant in variants:
            for rule in re.findall(r"@font-face\s*\{[^}]*\}", (packages / package / f"{variant}.css").read_text()):
                name = re.search(r"url\(\./files/([^)]+\.woff2)\)", rule).group(1)
                shutil.copyfile(packages / package / "files" / name, target / name)
                rule = re.sub(r"src:[^;]*;", f"src: url({PRINTED_FONTS}/{name}) format('woff2');", rule)
                if family == SIGNS_FONT:
                    rule = re.sub(r"\s*unicode-range:[^;]*;", "", rule)
                rules.append(rule)
    return "<style>\n" + "\n".join(rules) + "\n</style>"


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


@dataclass
class Entry:
    """One line of the contents and one bookmark: the anchor it jumps to, its title as HTML (with
    its formulas, for MathJax) and as text (for the PDF's outline), and the entries under it."""
    anchor: str
    html: str
    text: str
    children: list["Entry"] = field(default_factory=list)


def book_contents(wrappers: list) -> list[Entry]:
    """The book's pages (each numbered title) and their sections, a chapter's section pages (9.1,
    9.2, ...) among them, in reading order."""
    entries = []
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
        entries.append(entry(page, page.find("h2"),
                             [entry(section, section.find(["h2", "h3"])) for section in sections if section is not None]))
    return entries


def entry(section, heading, children: list[Entry] | None = None) -> Entry:
    heading = BeautifulSoup(str(heading), "html.parser").find(["h1", "h2", "h3"])
    for link in heading.select("a.headerlink"):
        link.decompose()
    html = heading.decode_contents()
    for math in heading.select("span.math"):
        math.replace_with(tex_text(math.get_text().strip().removeprefix("\\(").removesuffix("\\)")))
    text = re.sub(r"\s+", " ", heading.get_text()).strip()
    return Entry(section["id"], html, text, children or [])


def contents(entries: list[Entry]) -> str:
    """The table of contents, each entry with its page number (filled in by the second pass)."""
    def items(level: list[Entry]) -> str:
        return "".join(f'<li><a href="#{item.anchor}"><span class="toc-title">{item.html}</span>'
                       f'<span class="toc-leader"></span><span class="toc-page" data-anchor="{item.anchor}"></span></a>'
                       + (f"<ol>{items(item.children)}</ol>" if item.children else "") + "</li>"
                       for item in level)
    return f'<nav id="book-contents" aria-label="Contents"><h2>Contents</h2><ol>{items(entries)}</ol></nav>'


def title_page(soup: BeautifulSoup) -> str:
    """The book's title, what it is, its authors, and where the web edition is."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repository = config.get("repository", {}).get("url", "")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    edition = "The whole book as one PDF, printed from its HTML edition" + (f" at commit {commit}" if commit else "")
    return (f'<section id="title-page"><h1>{html_module.escape(config["title"])}</h1>'
            f'<p class="subtitle">{html_module.escape(SUBTITLE)}</p>'
            f'<p class="author">{html_module.escape(config["author"])}</p>'
            f'<p class="edition">{html_module.escape(edition)}'
            + (f'<br><a href="{repository}">{repository}</a>' if repository else "")
            + '</p><p class="to-contents"><a href="#book-contents">Contents</a></p></section>')


SUBTITLE = "The innermost computation of every transformer, worked out in code"


def unique_ids(soup: BeautifulSoup) -> None:
    """One id, one place: each page's sections have ids of their own ("summary", "exercises"),
    which repeat on the one page; a repeated id gets its page's name in front, and the links of
    its own page follow it (a link from another page names a label, which is unique)."""
    markers = soup.find_all("span", id=re.compile("^document-"))
    seen = {tag["id"] for tag in soup.find_all(id=True) if not tag.find_parent("div", class_="toctree-wrapper")}
    seen |= {marker["id"] for marker in markers}
    for marker in markers:
        page = marker.find_next_sibling("section")
        if page is None:
            continue
        renamed = {}
        for tag in [page, *page.find_all(id=True)]:
            if nested_page(tag, page):
                continue
            if tag["id"] in seen:
                renamed[tag["id"]] = f'{marker["id"].removeprefix("document-").replace("/", "-")}--{tag["id"]}'
                tag["id"] = renamed[tag["id"]]
            seen.add(tag["id"])
        if not renamed:
            continue
        for link in page.find_all("a", href=True):
            if nested_page(link, page):
                continue
            target = link["href"].partition("#")[2]
            if target in renamed and (link["href"].startswith("#") or not re.match(r"^[a-z][a-z0-9+.-]*:", link["href"])):
                link["href"] = "#" + renamed[target]


def nested_page(tag, page) -> bool:
    """Whether ``tag`` belongs to a section page inside ``page`` (a chapter's 9.1, 9.2, ...)."""
    for wrapper in tag.find_parents("div", class_="toctree-wrapper"):
        if page in wrapper.find_parents("section"):
            return True
    return False


def markers_into_pages(soup: BeautifulSoup) -> None:
    """Each page's marker, the empty ``<span id="document-NAME">`` that the one-page build puts
    before a page's section (where a link to the page jumps), goes inside the section, as its
    first child. Between two sections it stood in a line of its own: where a page ended at the
    foot of a sheet, Chromium put that line on the next sheet, and the next page's forced break
    left the sheet blank (before Chapter 14); a link to the page jumped there, or to the foot
    of the page before."""
    for marker in soup.find_all("span", id=re.compile("^document-")):
        page = marker.find_next_sibling()
        if page is not None and page.name == "section":
            page.insert(0, marker.extract())


def internal_links(soup: BeautifulSoup) -> None:
    """Every link between the book's pages jumps inside the PDF: the one-page build writes them as
    ``intro.html#target`` (a file beside the print), which Chromium would print as file:// links.
    A figure's link to its own PNG is dropped (the figure is on the page); any other relative link
    (a download, a source file) is dropped too: on paper it would point at the build machine."""
    ids = {tag["id"] for tag in soup.find_all(id=True)}
    for link in soup.find_all("a", href=True):
        href = link["href"]
        if href.startswith("#") or re.match(r"^[a-z][a-z0-9+.-]*:", href):
            continue  # a jump within the page, or a web address
        target = href.partition("#")[2]
        if target and target in ids:
            link["href"] = "#" + target
        else:
            del link["href"]


def full_web_addresses(soup: BeautifulSoup) -> None:
    """A link whose text is a shortened address ("tensorflow/mesh", Sphinx's GitHub links) prints
    its whole address (instead of layout.css's print rule, which adds it after the short one)."""
    for link in soup.select("a.reference.external[href^='http']"):
        text = link.get_text().strip()
        if text and text != link["href"] and re.fullmatch(r"[\w.-]+(/[\w.#-]+)+/?", text):
            link.string = link["href"]
            link["class"] = [name for name in link.get("class", []) if name != "github"]


def keep_small_boxes(soup: BeautifulSoup) -> None:
    """``print-keep`` (not split across two pages) for a code cell or an output of at most
    KEEP_LINES lines; a longer one may break, as a box kept whole moved to the next page left its
    frame alone on the page before (11 such pages)."""
    for box in soup.select("div.cell_input, div.cell_output > div.output"):
        if box.find_parent("details") is not None:
            continue
        lines = sum(max(1, -(-len(line) // CODE_COLUMNS)) for pre in box.find_all("pre")
                    for line in pre.get_text().splitlines())
        lines += 12 * len(box.find_all("img")) + sum(len(table.find_all("tr")) for table in box.find_all("table"))
        if lines <= KEEP_LINES:
            box["class"] = box.get("class", []) + ["print-keep"]


#: the tallest code cell or output kept on one page: about a third of an A4 page of code
KEEP_LINES = 24


def wrap_code(soup: BeautifulSoup) -> None:
    """Break every code line longer than CODE_COLUMNS at that column, the rest on a new line with
    a "↪" in the line's own indentation, inside Pygments' spans (which may hold several lines)."""
    for pre in soup.select("article pre, div.cell pre"):
        column, indent = 0, ""
        for text in list(pre.find_all(string=True)):
            if text.find_parent("span", class_="code-continued"):
                continue
            pieces, rest = [], str(text)
            while rest:
                newline = rest.find("\n")
                line = rest if newline < 0 else rest[:newline + 1]
                if column == 0:
                    indent = re.match(r" *", line).group(0)
                room = max(0, CODE_COLUMNS - column)  # 0: the line is full where this piece starts
                body = line.rstrip("\n")
                if len(body) > room and body[room:].strip():
                    pieces.append(line[:room])
                    pieces.append(None)  # the break
                    rest = line[room:] + rest[len(line):]
                    column = len(indent) + len(CONTINUED)
                    continue
                pieces.append(line)
                rest = rest[len(line):]
                column = 0 if line.endswith("\n") else column + len(line)
            if None not in pieces:
                continue
            nodes = []
            for piece in pieces:
                if piece is None:
                    mark = soup.new_tag("span", attrs={"class": "code-continued"})
                    mark.string = CONTINUED
                    nodes += [NavigableString("\n" + indent), mark]
                elif piece:
                    nodes.append(NavigableString(piece))
            for node in nodes:
                text.insert_before(node)
            text.extract()


def printable(page: pathlib.Path, numbers: dict[str, int] | None = None) -> tuple[pathlib.Path, list[Entry]]:
    """The one-page book ready to print, with a title page, its table of contents and the PDF's
    page style; and the contents. With ``numbers`` (anchor -> page), the second pass: the book up
    to the end of its contents, with only their page numbers shown."""
    soup = BeautifulSoup(page.read_text(), "html.parser")
    # the parts' lists of pages (a chapter's list of section pages sits inside its page)
    wrappers = [wrapper for wrapper in soup.select("div.toctree-wrapper")
                if wrapper.find_parent("div", class_="toctree-wrapper") is None]
    if not wrappers:
        raise SystemExit(f"tools/book_pdf.py: {page} holds no chapters (no toctree-wrapper)")
    unique_ids(soup)
    entries = book_contents(wrappers)
    wrappers[0].insert_before(BeautifulSoup(contents(entries), "html.parser"))
    article = soup.select_one("article") or soup.body
    first = article.find("section")
    first.insert_before(BeautifulSoup(title_page(soup), "html.parser"))
    internal_links(soup)
    full_web_addresses(soup)
    keep_small_boxes(soup)
    wrap_code(soup)
    markers_into_pages(soup)
    soup.head.append(BeautifulSoup(font_faces(install_fonts(), page.parent) + PDF_STYLE, "html.parser"))
    printed = page.with_name(PRINTED_PAGE)
    if numbers is not None:
        for number in soup.select("nav#book-contents .toc-page"):
            number.string = str(numbers[number["data-anchor"]])
        nav = soup.select_one("nav#book-contents")
        for later in list(nav.find_all_next()):  # nothing after the contents: the pages before them stay as they were
            if not later.find(id="book-contents") and later.find_parent(id="book-contents") is None \
                    and later.name not in ("script", "style", "link") and later.parent is not None:
                later.extract()
        soup.head.append(BeautifulSoup(NUMBERS_STYLE, "html.parser"))
        printed = page.with_name(NUMBERS_PAGE)
    printed.write_text(str(soup))
    return printed, entries


def print_to_pdf(page: pathlib.Path, out: pathlib.Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
             f"--user-data-dir={profile}", "--no-pdf-header-footer",
             # scripts (MathJax typesetting 2,000 formulas) run before the page is printed
             "--virtual-time-budget=120000", f"--print-to-pdf={out}", page.as_uri()],
            capture_output=True, text=True, timeout=1200)
    if result.returncode or not out.is_file():
        raise SystemExit(f"tools/book_pdf.py: Chromium printed no PDF: {result.stderr[-2000:]}")


def anchor_pages(reader: pypdf.PdfReader) -> dict[str, int]:
    """Each named destination's page, numbered from 1 as the pages' feet number them (Chromium
    names a destination after the id of every element a link of the page jumps to)."""
    return {name.lstrip("/"): reader.get_destination_page_number(destination) + 1
            for name, destination in reader.named_destinations.items()}


def title_start(text: str) -> str:
    """What a page shows of a contents entry's title, without whitespace: its number and first
    word ("13.4.What"), or, unnumbered, its start up to its first formula."""
    numbered = re.match(r"(\d+(\.\d+)*\.\s+\S+)", text)
    start = re.split(r"[^\x20-\x7e]", numbered.group(1) if numbered else text)[0]
    return re.sub(r"\s+", "", start)[:30]


def heading_pages(reader: pypdf.PdfReader, entries: list[Entry], pages: dict[str, int]) -> dict[str, int]:
    """``pages`` with each entry moved to the page after its anchor where the anchor's page does
    not show the title and the next one does: a section's anchor can sit at the foot of a page
    whose heading Chromium moved over, with the box it is kept with, to the next page."""
    texts: dict[int, str] = {}

    def shows(page: int, start: str) -> bool:
        if page not in texts:
            texts[page] = re.sub(r"\s+", "", unicodedata.normalize("NFKC", reader.pages[page - 1].extract_text()))
        return start in texts[page]

    moved = dict(pages)
    for item in (item for level in entries for item in [level, *level.children]):
        start, page = title_start(item.text), pages[item.anchor]
        if len(start) >= 4 and page < len(reader.pages) and not shows(page, start) and shows(page + 1, start):
            moved[item.anchor] = page + 1
    return moved


def finish(out: pathlib.Path, numbers_pdf: pathlib.Path, entries: list[Entry], pages: dict[str, int]) -> None:
    """The first print with the contents' page numbers drawn over its front pages, the outline
    built from the contents (titles as text), and the document's title and author. Written as an
    incremental update: the 30-MB print is copied, not parsed and rewritten."""
    numbers = pypdf.PdfReader(numbers_pdf)
    writer = pypdf.PdfWriter(out, incremental=True)
    if len(numbers.pages) > len(writer.pages):
        raise SystemExit("tools/book_pdf.py: the contents' second pass is longer than the book")
    for index, page in enumerate(numbers.pages):
        writer.pages[index].merge_page(page)
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    writer.add_metadata({"/Title": config["title"], "/Author": config["author"], "/Subject": SUBTITLE,
                         "/Creator": "tools/book_pdf.py (Jupyter Book, Chromium, pypdf)"})

    def add(level: list[Entry], parent=None) -> None:
        for item in level:
            mark = writer.add_outline_item(item.text, pages[item.anchor] - 1, parent=parent)
            add(item.children, mark)

    writer.add_outline_item(config["title"], 0)
    writer.add_outline_item("Contents", pages["book-contents"] - 1)
    add(entries)
    writer.page_mode = "/UseOutlines"
    written = out.with_suffix(".tmp.pdf")
    with written.open("wb") as stream:
        writer.write(stream)
    written.replace(out)


def make_pdf(page: pathlib.Path, out: pathlib.Path) -> float:
    """Print the book; read each contents entry's page from the print; print the front matter
    again with those numbers and draw them over the first print; add the outline and metadata.
    The seconds the second pass and the outline took."""
    printed, entries = printable(page)
    print_to_pdf(printed, out)
    started = time.monotonic()
    reader = pypdf.PdfReader(out)
    pages = anchor_pages(reader)
    anchors = ["book-contents", *(item.anchor for level in entries for item in [level, *level.children])]
    missing = [anchor for anchor in anchors if anchor not in pages]
    if missing:
        raise SystemExit(f"tools/book_pdf.py: the print has no page for the contents' entries {missing[:10]}")
    pages = heading_pages(reader, entries, pages)
    numbers_page, _ = printable(page, numbers=pages)
    numbers_pdf = out.with_name(out.stem + ".numbers.pdf")
    print_to_pdf(numbers_page, numbers_pdf)
    try:
        finish(out, numbers_pdf, entries, pages)
    finally:
        numbers_pdf.unlink(missing_ok=True)
    return time.monotonic() - started


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
    numbering = make_pdf(page, args.out)
    # the HTML book was built before its PDF: its menus say only "whole book (PDF)", or describe an older PDF
    relabelled = relabel_pages(args.out)
    print(f"[tools/book_pdf.py] {args.out} written: one-page build {built - started:.0f} s, "
          f"printing {time.monotonic() - built - numbering:.0f} s, the contents' page numbers and "
          f"the outline {numbering:.0f} s; the download menu of {relabelled} pages beside it relabelled", flush=True)


if __name__ == "__main__":
    main()
