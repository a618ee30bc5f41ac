"""The book builds with warnings as errors, and the HTML has what a reader needs."""
import functools
import html as html_module
import http.server
import json
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter

import pytest
from bs4 import BeautifulSoup

import book_pages
import jupyter_edition
from devtools_pipe import Browser

ROOT = pathlib.Path(__file__).resolve().parents[1]


def toc_files() -> list[str]:
    """Every page of _toc.yml, chapters' section pages included, in reading order."""
    return [page.file for page in book_pages.toc_pages()]


@pytest.fixture(scope="module")
def html(own_book_html) -> pathlib.Path:
    return own_book_html  # built once per run (tests/conftest.py); Chromium's probes go beside its pages


def test_every_chapter_in_the_toc_exists_and_every_chapter_is_in_the_toc():
    listed = {f for f in toc_files() if f.startswith("chapters/")}
    on_disk = {f"chapters/{p.stem}" for p in (ROOT / "chapters").glob("[0-9][0-9]_*.ipynb")}
    assert listed == on_disk


def test_no_chapter_stores_widget_state():
    """Stored widget state makes the book load require.js and a widget manager from CDNs
    for widgets that need a kernel; a widget's page shows a static figure instead."""
    stored = [path.name for path in book_pages.notebooks()
              if "widgets" in json.loads(path.read_text())["metadata"]]
    assert not stored, f"widget state in {stored}: re-execute with tests/execute_chapters.py"


@pytest.mark.book
def test_every_toc_entry_is_built(html):
    for name in toc_files():
        assert (html / f"{name}.html").is_file(), name


def has_formula(name: str) -> bool:
    """Whether a page's Markdown cells hold a formula (a ``$`` outside code)."""
    cells = json.loads((ROOT / f"{name}.ipynb").read_text())["cells"]
    text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return "$" in re.sub(r"```.*?```|`[^`]*`", "", text, flags=re.S)


def shows_code(name: str) -> bool:
    """Whether a page's notebook shows a code cell: a chapter's landing page holds only its
    introduction and the hidden install cell."""
    cells = json.loads((ROOT / f"{name}.ipynb").read_text())["cells"]
    return any(c["cell_type"] == "code" and "remove-cell" not in c["metadata"].get("tags", []) for c in cells)


@pytest.mark.book
def test_chapters_have_numbered_equations_launch_buttons_and_hidden_install_cells(html):
    """Colab and Binder open the Jupyter edition (tests/test_jupyter_edition.py), whose Markdown
    they render; a landing page with nothing to run (9, 10, 12, 14) has no launch buttons."""
    url = re.search(r"^\s+url:\s*(\S+)", (ROOT / "_config.yml").read_text(), flags=re.M).group(1)
    repo_path = url.removeprefix("https://github.com/")
    landing = []
    for name in toc_files():
        if not name.startswith("chapters/"):
            continue
        page = (html / f"{name}.html").read_text()
        if not shows_code(name):
            landing.append(name)
            assert "colab.research.google.com" not in page and "mybinder.org" not in page, \
                f"{name} holds no code to run but has launch buttons"
            continue
        assert f"colab.research.google.com/github/{repo_path}/blob/jupyter-edition/{name}.ipynb" in page, name
        assert f"mybinder.org/v2/gh/{repo_path}/jupyter-edition?urlpath=tree/{name}.ipynb" in page, name
        assert f"mybinder.org/v2/gh/{repo_path}/main" not in page, f"{name}: Binder opens the MyST source"
        assert "Installs attnlib from the book" not in page, f"{name}: the install cell is visible"
        if has_formula(name):  # a page with no formula (14.1) has none to typeset
            assert 'class="eqno"' in page or "math notranslate" in page, name
    assert landing == ["chapters/09_fused_kernel", "chapters/10_backward_and_training",
                       "chapters/12_scale_in_real_models", "chapters/14_trained_models"], landing


@pytest.mark.book
def test_every_page_links_the_books_pdf(html):
    """The download menu offers the whole book as one PDF (make pdf writes it beside the pages)."""
    for name in ["intro", *toc_files()]:
        page = (html / f"{name}.html").read_text()
        links = re.findall(r'href="([^"]*book\.pdf)"', page)
        assert len(links) == 1, f"{name}: {links}"
        assert ((html / name).parent / links[0]).resolve() == (html / "book.pdf").resolve(), (name, links)


@pytest.mark.book
def test_bibliography_is_rendered(html):
    page = (html / "bibliography.html").read_text()
    assert "attention is all you need" in page.lower()


@pytest.mark.book
def test_bibliography_lists_what_the_text_cites_by_author_and_year_with_links(html):
    """One style: the list's labels read as the text cites ([Vaswani et al., 2017]),
    only cited works, each with a DOI, arXiv or web link."""
    page = (html / "bibliography.html").read_text()
    entries = re.findall(r'<div class="citation" id="[^"]*" role="doc-biblioentry">(.*?)</div>', page, flags=re.S)
    assert entries, "the bibliography lists nothing"
    cited = {}  # list entry id -> how the text cites it
    for name in ["intro", *toc_files()]:
        if (html / f"{name}.html").is_file():
            for target, text in re.findall(r'href="[^"]*bibliography\.html#(id\d+)"[^>]*>(.*?)</a>',
                                           (html / f"{name}.html").read_text(), flags=re.S):
                cited[target] = re.sub(r"<[^>]+>", "", text)
    listed = dict(re.findall(r'<div class="citation" id="(id\d+)" role="doc-biblioentry">\s*'
                             r'<span class="label"><span class="fn-bracket">\[</span>(.*?)<span', page, flags=re.S))
    assert len(listed) == len(entries)
    assert set(listed) <= set(cited), f"listed but never cited: {sorted(set(listed) - set(cited))}"
    compared = 0
    for target, label in listed.items():
        if re.fullmatch(r".+, \d{4}", cited[target]):  # a parenthetical citation, not {cite:t} or {cite:year}
            assert re.fullmatch(re.escape(cited[target]) + "[a-z]?", label), \
                f"the text cites [{cited[target]}], the list labels it [{label}]"
            compared += 1
    assert compared >= len(listed) // 2, (compared, len(listed))
    for entry in entries:
        label = re.sub(r"<[^>]+>", "", re.search(r'<span class="label">(.*?)</span>\s*</span>', entry, flags=re.S).group(1))
        assert re.fullmatch(r"\[[^\]]+, (\d{4}[a-z]?|n\.d\.)\]", label.strip()), f"not an author-year label: {label!r}"
        text = re.sub(r"<[^>]+>", "", entry)
        assert "$" not in text, f"raw TeX in the bibliography: {text[:200]}"
        assert re.search(r'href="https://(doi\.org|arxiv\.org|[^"]+)"', entry), f"no DOI, arXiv or web link: {text[:200]}"


# TeX a reader would see raw: a command (\\operatorname, \\texttt), MathJax's delimiters, a
# $-delimited formula, a braced sub- or superscript
RAW_TEX = re.compile(r"\\[A-Za-z]{2,}|\\[()\[\]]|\$[^$\s][^$]*\$|[_^]\{")


def raw_tex(page: str) -> list[str]:
    """The stretches of a built page's text, outside its formulas and code, that hold TeX: what
    MyST or BibTeX left unparsed, as in a line of a formula that began with "- " (MyST read it as
    a list item). Every part of the page counts, the folded solutions and exercises included."""
    soup = BeautifulSoup(page, "html.parser")
    article = soup.select_one("article") or soup.body
    for tag in article.select("span.math, div.math, pre, code, script, style, div.cell_output"):
        tag.decompose()
    return [" ".join(text.split())[:160] for text in article.find_all(string=RAW_TEX)]


def test_raw_tex_is_found_in_a_folded_solution():
    """The check reads what the dropdowns hold (Solution 2.5's broken formula was in one)."""
    broken = ('<article><div class="solution dropdown admonition"><p>uncorrelated:\n$\\operatorname{Cov}(q_a^2)'
              '</p><ul><li><p>\\operatorname{E}[q_a]$</p></li></ul></div>'
              '<p><span class="math">\\(\\sqrt{d_k}\\)</span> <code>a\\b</code></p></article>')
    assert len(raw_tex(broken)) == 2
    assert not raw_tex('<article><p>A <span class="math">\\(\\sqrt{d}\\)</span> costs $5.</p></article>')


@pytest.mark.book
def test_no_page_shows_raw_tex(html):
    """No page, its solutions, exercises and bibliography included, shows TeX as text."""
    found = {name: raw_tex((html / f"{name}.html").read_text()) for name in ["intro", *toc_files()]}
    found = {name: stretches for name, stretches in found.items() if stretches}
    assert not found, "raw TeX in the text:\n" + "\n".join(
        f"  {name}: {stretch!r}" for name, stretches in found.items() for stretch in stretches)


@pytest.mark.book
def test_an_author_list_ending_in_others_is_cited_and_listed_with_et_al(html):
    """BibTeX's "and others" prints as "et al." in the text and in the list, never as
    "Dehghani and others"."""
    assert " and others}" in (ROOT / "references.bib").read_text(), "no entry left to check"
    for name in ["intro", *toc_files()]:
        page = re.sub(r"<[^>]+>", "", (html / f"{name}.html").read_text())
        assert " and others" not in page, f"{name}: {page[page.index(' and others') - 60:][:80]!r}"


@pytest.mark.book
def test_one_search_box_and_a_licence_on_every_page(html):
    """No second header bar with a second search field (pydata-sphinx-theme's
    navbar_persistent); every page's footer names the licence and links LICENSE."""
    url = re.search(r"^\s+url:\s*(\S+)", (ROOT / "_config.yml").read_text(), flags=re.M).group(1)
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    for name in ["intro", *toc_files()]:
        page = (html / f"{name}.html").read_text()
        assert "navbar-persistent" not in page, f"{name}: the header bar with a second search box is back"
        assert f'href="{url}/blob/main/LICENSE"' in page, f"{name}: no licence link in the footer"


@pytest.mark.book
def test_every_page_names_its_favicon(html):
    """A page without one makes the browser ask for /favicon.ico, a 404 on every first visit."""
    for name in ["intro", *toc_files()]:
        links = re.findall(r'<link rel="icon" href="([^"]+)"', (html / f"{name}.html").read_text())
        assert len(links) == 1 and ((html / name).parent / links[0]).resolve().is_file(), (name, links)


@pytest.mark.book
def test_no_page_names_a_binder_repository_or_a_loader_the_book_does_not_use(html):
    """The book runs its code in Colab and on the book's own Binder (the launch buttons): sphinx-thebe's
    kernel configuration named its default repository, binder-examples/jupyter-stacks-datascience,
    on every page, with a loader from unpkg.com, none of it used (_ext/no_thebe.py)."""
    named = {}
    for page in sorted(html.rglob("*.html")):
        text = page.read_text()
        found = re.findall(r"binder-examples/[\w.-]+|jupyter-stacks-datascience|unpkg\.com|thebe", text, flags=re.I)
        if found:
            named[str(page.relative_to(html))] = sorted(set(found))
    assert not named, f"pages naming a Binder repository or loader the book does not use: {named}"
    assert not list((html / "_static").glob("*thebe*")), "sphinx-thebe's files are copied into the book"


def test_a_book_that_turns_on_the_thebe_button_is_told_why_it_cannot():
    """_ext/no_thebe.py leaves out what the thebe button would need: turned on, the build stops
    and names the setting."""
    sys.path.insert(0, str(ROOT / "_ext"))
    import no_thebe
    from sphinx.errors import ConfigError

    config = type("Config", (), {"html_theme_options": {"launch_buttons": {"thebe": True}}})()
    with pytest.raises(ConfigError, match="launch_buttons.thebe"):
        no_thebe.leave_thebe_out(None, config)


def pins(path: pathlib.Path) -> dict[str, list[str]]:
    """Package name -> its requirement lines (specifier and marker, spaces removed), from a requirements file."""
    found: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*([=<>!~].*)", line)
        if match:
            found.setdefault(match.group(1).lower(), []).append(match.group(2).replace(" ", ""))
    return found


def test_binder_runs_the_chapters_with_the_books_versions_and_without_its_tools():
    """binder/requirements.txt (Binder reads it before the top-level file): the CPU
    build of the pinned torch, the pinned numeric packages, attnlib itself; none of
    the book's build or test tools."""
    binder, book = pins(ROOT / "binder" / "requirements.txt"), pins(ROOT / "requirements.txt")
    lines = (ROOT / "binder" / "requirements.txt").read_text().splitlines()
    assert "-e .[book]" in lines, "Binder must install attnlib, with its book extra, from the checkout"
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines, "Binder takes torch's CPU build"
    for name, specs in binder.items():
        assert book.get(name) == specs, f"binder pins {name}{specs}, requirements.txt {name}{book.get(name)}"
    for name, specs in book.items():
        if any(spec.startswith("==") for spec in specs):
            assert name in binder or name in TOOLS, f"{name}{specs} is pinned for the chapters but not installed on Binder"
    assert not set(binder) & TOOLS, f"the book's tools on Binder: {sorted(set(binder) & TOOLS)}"


# what requirements.txt holds to build and test the book, not to run a chapter
TOOLS = {"jupyter-book", "sphinx-exercise", "sphinx-proof", "sphinxcontrib-bibtex", "pytest", "pytest-xdist",
         "hypothesis", "nbval", "colorspacious", "uv", "django-static-mathjax", "nbconvert", "otter-grader", "ipykernel", "pypdf"}


MATHJAX_SCRIPT = "_static/mathjax/tex-mml-chtml.js"


@pytest.mark.book
def test_mathjax_ships_with_the_book_and_no_page_loads_it_from_a_cdn(html):
    """_build/html works offline: MathJax is a local file, its fonts beside it."""
    assert (html / MATHJAX_SCRIPT).is_file()
    fonts = list((html / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))
    assert len(fonts) >= 20, fonts
    shipped = sum(p.stat().st_size for p in (html / "_static" / "mathjax").rglob("*") if p.is_file())
    assert shipped < 4_000_000, f"{shipped} bytes of MathJax shipped; only the combined file, fonts and TeX extensions are needed"
    pages = sorted(html.rglob("*.html"))
    assert len(pages) > len(toc_files())
    with_math = 0
    for page in pages:
        source = page.read_text()
        scripts = re.findall(r'<script[^>]*src="([^"]*mathjax[^"]*)"', source, flags=re.I)
        for src in scripts:
            assert "://" not in src, f"{page.relative_to(html)} loads MathJax from {src}"
            assert (page.parent / src).resolve() == (html / MATHJAX_SCRIPT).resolve(), f"{page.relative_to(html)}: {src}"
        assert not re.search(r"(cdn\.jsdelivr\.net|cdnjs\.cloudflare\.com|unpkg\.com)/[^\"']*mathjax", source, flags=re.I), \
            f"{page.relative_to(html)} references MathJax on a CDN"
        with_math += bool(scripts)
    assert with_math >= 2


@pytest.mark.book
def test_no_page_loads_a_script_or_stylesheet_from_another_host(html):
    """Every script and stylesheet a page loads ships with the book (the widget manager and
    require.js that stored widget state brought in from CDNs were the last ones)."""
    remote = {}
    for page in sorted(html.rglob("*.html")):
        found = re.findall(r'<script[^>]*\bsrc="(https?://[^"]*)"|<link[^>]*rel="stylesheet"[^>]*href="(https?://[^"]*)"',
                           page.read_text())
        if found:
            remote[str(page.relative_to(html))] = [a or b for a, b in found]
    assert not remote, f"pages that load from another host: {remote}"


# ---------------------------------------------------------------------------
# The book in a real browser: headless Chromium renders every page at a desktop
# width and at a phone's, exactly as built (MathJax from _static/), and a probe
# appended to a copy of each page measures its layout once MathJax has typeset.

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium); make test installs it when run as root")
DESKTOP, PHONE = 1400, 390
#: a phone's window height (390 x 844: an iPhone 12 to 14), of its viewport and of the live figures' phone frame
PHONE_HEIGHT = 844

# Run on load, after MathJax's first typeset and the fonts: open every toggle and
# dropdown (a reader can), then measure code blocks, outputs, tables, equations and
# figures against their own box and the article column, and the page against the
# window. The JSON report is written into the DOM, where the test reads it.
PROBE = r"""
<script>
(function () {
  const clean = s => (s || "").replace(/\s+/g, " ").trim();
  function tex(el) {
    try {
      const items = MathJax.startup.document.getMathItemsWithin(el);
      if (items.length) return items.map(m => m.math).join(" ");
    } catch (e) {}
    return null;
  }
  function snippet(el) {
    if (el.matches("pre")) {
      const lines = el.textContent.split("\n");
      const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), "");
      return longest.length + " chars: " + longest.trim().slice(0, 110);
    }
    if (el.matches("img")) return el.getAttribute("alt") || el.getAttribute("src");
    return clean(tex(el) || el.textContent).slice(0, 110);
  }
  function where(el) {
    const box = el.closest(".solution, .exercise, .proof, .admonition");  // "Solution to Exercise 2.3"
    const title = box && box.querySelector(".admonition-title, .proof-title");
    const section = (box || el).closest("section");
    const h = section && section.querySelector("h1, h2, h3, h4");
    const place = clean(h ? h.textContent : (section ? section.id : "")).replace(/#$/, "");
    return title ? place + " / " + clean(title.textContent).slice(0, 40) : place;
  }
  function kind(el) {
    // library source shown by a cell (IPython's Code): it scrolls inside its own box
    if (el.matches(".cell_output div.text_html div.highlight pre")) return "listing";
    const out = el.closest(".cell_output") ? "output " : "";
    if (el.matches("div.math, mjx-container")) return out + "equation";
    if (el.matches("table, .pst-scrollable-table-container")) return out + "table";
    if (el.matches("img")) return out + "figure";
    if (out) return "output";
    return "code";
  }
  function innermost(items) {
    return items.filter(a => !items.some(b => b.el !== a.el && a.el.contains(b.el)));
  }
  function measure() {
    const column = document.querySelector("article.bd-article") || document.querySelector("main") || document.body;
    const col = column.getBoundingClientRect();
    // the theme makes a display equation's mjx-container scroll, beside its number
    const selector = "pre, div.math, mjx-container[display='true'], table, .pst-scrollable-table-container, .cell_output .output, img";
    const found = [];
    for (const el of column.querySelectorAll(selector)) {
      const r = el.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;  // not rendered
      const inside = el.scrollWidth - el.clientWidth;            // content wider than its box
      const outside = Math.max(r.right - col.right, col.left - r.left);  // box past the column
      if (inside > 1 || outside > 1) {
        found.push({el, kind: kind(el), where: where(el), snippet: snippet(el),
                    content: Math.max(el.scrollWidth, Math.round(r.width)), box: el.clientWidth || Math.round(r.width)});
      }
    }
    // what sticks out of the window and is not inside a box that scrolls or clips
    const vw = document.documentElement.clientWidth;
    const sticking = [];
    for (const el of document.body.querySelectorAll("*")) {
      const r = el.getBoundingClientRect();
      if (r.width === 0 || r.right <= vw + 1) continue;
      // an off-canvas drawer (position: fixed) does not widen the page
      let contained = getComputedStyle(el).position === "fixed";
      for (let a = el.parentElement; a && a !== document.body && !contained; a = a.parentElement) {
        const style = getComputedStyle(a);
        contained = style.overflowX !== "visible" || style.position === "fixed";
      }
      if (!contained) sticking.push({el, kind: el.tagName.toLowerCase() + (el.className && typeof el.className === "string" ? "." + el.className.split(" ")[0] : ""),
                                     where: where(el), snippet: clean(el.textContent).slice(0, 110), right: Math.round(r.right)});
    }
    // every figure in the column: its drawn aspect ratio against its file's, and its alt text
    const figures = [];
    for (const img of column.querySelectorAll("img")) {
      const r = img.getBoundingClientRect();
      if (r.width === 0 || !img.naturalWidth) continue;
      const src = img.getAttribute("src") || "";
      // its own size: the width myst-nb writes inline (the PNG is stored at twice that)
      const own = parseFloat(img.style.width) || img.naturalWidth / 2;
      const caption = img.closest("figure") && img.closest("figure").querySelector(":scope > figcaption");
      figures.push({where: where(img), src: src.split("/").pop(), alt: img.getAttribute("alt"),
                    drawn: r.width / r.height, file: img.naturalWidth / img.naturalHeight,
                    scale: r.width / own, linked: !!img.closest("a.image-reference"),
                    scrolls: !!img.closest("a.image-reference") && img.closest("a.image-reference").scrollWidth > img.closest("a.image-reference").clientWidth + 1,
                    fades: !!img.closest("a.image-reference") && getComputedStyle(img.closest("a.image-reference")).maskImage.includes("gradient"),
                    hint: caption ? clean(getComputedStyle(caption, "::before").content.replace(/^"|"$/g, "")) : ""});
    }
    // math: inline formulas cut off by a box that clips, the sizes of inline and display
    // formulas, how far an equation's number sits from it, and formulas in the Tab order
    const inlineSizes = [], displaySizes = [], clippedMath = [], numberGaps = [];
    let mathTabStops = 0;
    for (const el of column.querySelectorAll("mjx-container")) {
      const r = el.getBoundingClientRect();
      if (r.width === 0) continue;
      if (el.tabIndex >= 0) mathTabStops += 1;
      const display = el.getAttribute("display") === "true";
      const size = parseFloat(getComputedStyle(el).fontSize);
      if (display) {
        displaySizes.push({where: where(el), snippet: snippet(el), size: size, fits: el.scrollWidth <= el.clientWidth + 1});
        continue;
      }
      inlineSizes.push(size);
      for (let a = el.parentElement; a && a !== column; a = a.parentElement) {
        const style = getComputedStyle(a);
        if (style.overflowX === "visible") continue;
        const box = a.getBoundingClientRect();
        if ((style.overflowX === "hidden" || style.overflowX === "clip") && (r.right > box.right + 1 || r.left < box.left - 1))
          clippedMath.push({kind: "inline formula", where: where(el), snippet: snippet(el), content: Math.round(r.width), box: Math.round(box.width)});
        break;
      }
    }
    // inline formulas as text: one that draws a scrollbar (offsetHeight counts a horizontal
    // scrollbar, clientHeight does not: with classic scrollbars, as on Windows and Linux desktops)
    // or takes the focus (Chromium makes a scroll box with nothing focusable in it a Tab stop) is
    // one too many, unless it is wider than its line and marked so (math-wide), one labelled stop
    const barredMath = [], focusableMath = [], wideMath = [];
    const before = document.activeElement;
    for (const el of column.querySelectorAll("span.math")) {
      if (el.getBoundingClientRect().width === 0) continue;
      const item = {where: where(el), snippet: snippet(el), content: el.scrollWidth, box: el.clientWidth};
      const wide = el.classList.contains("math-wide");
      el.focus({preventScroll: true});
      const focusable = document.activeElement === el;
      if (wide) {
        wideMath.push({...item, tabIndex: el.tabIndex, label: el.getAttribute("aria-label") || "", focusable: focusable});
        continue;
      }
      if (el.offsetHeight !== el.clientHeight) barredMath.push({...item, bar: el.offsetHeight - el.clientHeight});
      if (focusable || el.tabIndex >= 0) focusableMath.push(item);
    }
    if (document.activeElement && document.activeElement !== before) document.activeElement.blur();
    for (const number of column.querySelectorAll("div.math > span.eqno")) {
      const equation = number.parentElement.querySelector("mjx-container");
      if (!equation) continue;
      const e = equation.getBoundingClientRect(), n = number.getBoundingClientRect();
      const gap = n.top >= e.bottom - 1 ? n.top - e.bottom : (e.top >= n.bottom - 1 ? e.top - n.bottom : 0);
      numberGaps.push({where: where(number), number: clean(number.textContent), gap: Math.round(gap)});
    }
    // what scrolls sideways inside its own box without a shadow at its edge to show it, and
    // listings and code cells taller than the window whose sideways scrollbar is then screens away
    const unmarked = [], coveredShadows = [], tallListings = [];
    // a computed colour's opacity: rgb(...) 1, rgba(r, g, b, a) and color(srgb r g b / a) a
    function alphaOf(color) {
      const inner = (color.match(/\(([^()]*)\)\s*$/) || [null, ""])[1];
      if (inner.includes("/")) return parseFloat(inner.split("/")[1]);
      const parts = inner.split(/[\s,]+/).filter(Boolean);
      return color.startsWith("rgba") && parts.length === 4 ? parseFloat(parts[3]) : 1;
    }
    const scrollers = "div.math mjx-container[display='true'], span.math, .pst-scrollable-table-container, " +
                      "div.cell_output div.output.text_html, figure a.image-reference";
    for (const el of column.querySelectorAll(scrollers)) {
      if (el.scrollWidth - el.clientWidth <= 1 || ["hidden", "clip", "visible"].includes(getComputedStyle(el).overflowX)) continue;
      if (!getComputedStyle(el).backgroundImage.includes("gradient"))
        unmarked.push({where: where(el), kind: kind(el), snippet: snippet(el), content: el.scrollWidth, box: el.clientWidth});
      // the shadow is the box's background: what it holds must not paint over it (a figure's
      // opaque image fades at the edge instead, layout.css)
      if (el.matches("figure a.image-reference")) continue;
      const covers = [...el.querySelectorAll("*")].filter(inner => {
        const style = getComputedStyle(inner);
        return style.backgroundImage !== "none" || alphaOf(style.backgroundColor) > 0.2;
      });
      if (covers.length)
        coveredShadows.push({where: where(el), kind: kind(el), snippet: snippet(el), content: el.scrollWidth, box: el.clientWidth,
                             covers: [...new Set(covers.map(c => c.tagName.toLowerCase() + " " + getComputedStyle(c).backgroundColor))].join(", ")});
    }
    for (const el of column.querySelectorAll(".cell_output div.text_html div.highlight pre, div.cell_input div.highlight pre")) {
      if (el.scrollWidth - el.clientWidth > 1 && el.clientHeight > window.innerHeight)
        tallListings.push({where: where(el), kind: kind(el), snippet: snippet(el), height: el.clientHeight});
    }
    // the intro's chapter table: how far it scrolls in its box, and the module names broken over lines
    function chapterTable() {
      const table = document.querySelector("section#the-chapters table");
      if (!table) return null;
      const box = table.closest(".pst-scrollable-table-container") || table;
      return {content: box.scrollWidth, box: box.clientWidth,
              broken: [...table.querySelectorAll("td code")].filter(c => c.getClientRects().length > 1).map(c => c.textContent)};
    }
    let mathMenu = false;
    try { mathMenu = !!(MathJax.startup.document.menu && MathJax.startup.document.menu.menu); } catch (e) {}
    const strip = items => innermost(items).map(({el, ...rest}) => rest);
    const mathErrors = [];  // the TeX of every formula MathJax could not typeset, for the author
    if (window.MathJax && MathJax.startup && MathJax.startup.document) {
      for (const item of MathJax.startup.document.math) {
        const root = item.typesetRoot;
        const error = root && (root.getAttribute("data-mjx-error") || (root.querySelector("[data-mjx-error]") || {}).dataset?.mjxError
                               || (root.querySelector("mjx-merror") ? "merror" : null));
        if (error !== null && error !== undefined) mathErrors.push({tex: item.math.slice(0, 200), error: error});
      }
    }
    const fonts = [];
    if (document.fonts) document.fonts.forEach(f => { if (/MJX/.test(f.family)) fonts.push([f.family, f.status]); });
    return {
      window: window.innerWidth,
      column: Math.round(col.width),
      pageWidth: Math.max(document.documentElement.scrollWidth, document.body.scrollWidth),
      overflowing: strip(found),
      sticking: strip(sticking).slice(0, 30),
      fonts: fonts,
      figures: figures,
      inlineMathSizes: inlineSizes,
      displayMathSizes: displaySizes,
      clippedMath: clippedMath,
      numberGaps: numberGaps,
      mathTabStops: mathTabStops,
      inlineMath: column.querySelectorAll("span.math").length,
      barredMath: barredMath,
      focusableMath: focusableMath,
      wideMath: wideMath,
      mathMenu: mathMenu,
      unmarkedScrolls: unmarked,
      coveredShadows: coveredShadows,
      chapterTable: chapterTable(),
      tallListings: tallListings,
      scriptErrors: window.__scriptErrors || [],
      mathErrors: mathErrors,
      mathjax: !!(window.MathJax && MathJax.startup && MathJax.startup.document),
      height: document.documentElement.scrollHeight,  // every toggle open
      // what the page loaded or asked for, MathJax's own later requests included
      resources: [...document.querySelectorAll("script[src], link[rel=stylesheet][href]")].map(e => e.src || e.href),
    };
  }
  async function run() {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
    document.querySelectorAll("details").forEach(d => { d.open = true; });
    document.querySelectorAll(".toggle-hidden").forEach(e => e.classList.remove("toggle-hidden"));
    if (document.fonts) await document.fonts.ready;
    await new Promise(r => setTimeout(r, 50));  // let layout settle (no frames are drawn headless)
    return measure();
  }
  function write(report) {
    const pre = document.createElement("pre");
    pre.id = "layout-report";
    pre.hidden = true;
    pre.textContent = JSON.stringify(report);
    document.body.appendChild(pre);
  }
  window.addEventListener("load", () => run().then(write, e => write({error: String(e && e.stack || e)})));
})();
</script>
"""


# The first script of the page: it records every uncaught script error and console.error
# call from then on (a script that does not parse, such as a doubled `const`, included;
# a file that cannot be fetched offline is not a script error and is not recorded).
ERROR_CATCHER = """<script>
window.__scriptErrors = [];
window.addEventListener("error", e => { window.__scriptErrors.push(String(e.message)); });
(function () {
  const original = console.error;
  console.error = function (...args) { window.__scriptErrors.push(args.map(String).join(" ")); original.apply(console, args); };
})();
</script>"""


# The live figures' phone (tests/test_interactive_figures.py): Chromium will not make a window
# narrower than 500 px, so there a phone is a 390-px frame in a wider window, whose probe posts its
# report to this page. The book's pages are measured in a phone's own viewport (phone_viewport).
PHONE_FRAME = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body style="margin:0">
<iframe src="{src}" style="width:{width}px;height:{height}px;border:0"></iframe>
<script>
window.addEventListener("message", e => {{
  const pre = document.createElement("pre");
  pre.id = "layout-report";
  pre.textContent = e.data;
  document.body.appendChild(pre);
}});
</script></body></html>
"""


#: How long a page may take to load, typeset and report in the browser.
PAGE_TIMEOUT = 120
#: The height of a desktop browser's page in a 1000-px-high window (its bars take the rest), as
#: headless Chromium's --window-size=W,1000 gives it
VIEWPORT_HEIGHT = 857

def phone_viewport(browser: Browser) -> None:
    """A phone's own viewport (390 x 844, device pixel ratio 2, a mobile browser's layout), not a
    390-px frame in a wider window: what a phone's Chromium lays out."""
    browser.call("Emulation.setDeviceMetricsOverride", page=True, width=PHONE, height=PHONE_HEIGHT,
                 deviceScaleFactor=2, mobile=True)


def render(page: pathlib.Path, width: int, browser: Browser) -> tuple[str, dict]:
    """The page's DOM once the probe has reported, in ``browser`` (headless Chromium kept open
    for every page at this width: a launch per page cost about a second more), and the report."""
    probe = page.with_name(f"{page.stem}.probe-{width}.html")  # beside the page: same relative links
    source = page.read_text()
    assert source.count("</body>") == 1 and source.count("<head>") == 1, page
    probe.write_text(source.replace("<head>", "<head>" + ERROR_CATCHER).replace("</body>", PROBE + "</body>"))
    try:
        browser.open(probe.as_uri(), timeout=PAGE_TIMEOUT)
        deadline = time.monotonic() + PAGE_TIMEOUT
        while (text := browser.evaluate("document.getElementById('layout-report')?.textContent")) is None:
            assert time.monotonic() < deadline, f"{page.name} at {width} px: the probe wrote no report"
            time.sleep(0.05)
        dom = browser.evaluate("document.documentElement.outerHTML")
    finally:
        probe.unlink()
        browser.events.clear()  # the page's requests and console messages; the probe reports its errors
    report = json.loads(text)
    assert "error" not in report, f"{page.name} at {width} px: the probe failed: {report['error']}"
    assert report["window"] == width, f"{page.name}: the window is {report['window']} px wide, not {width}"
    return dom, report


# A control for classic scrollbars: the width a scroll box's vertical scrollbar takes
# (offsetWidth - clientWidth), 0 where scrollbars are hidden or overlaid
SCROLLBAR_PROBE = """(() => {
  const box = document.createElement("div");
  box.style.cssText = "width: 100px; height: 100px; overflow: scroll; position: absolute; top: 0";
  document.body.appendChild(box);
  const width = box.offsetWidth - box.clientWidth;
  box.remove();
  return width;
})()"""


def show_scrollbars(browser: Browser, shown: bool) -> int:
    """Headless Chromium hides scrollbars (its --hide-scrollbars default): ``shown`` draws classic
    ones, as Chrome and Edge on Windows and Linux do, that take room from what they scroll; a
    phone's overlay scrollbars take none. The width one takes, measured on a control box."""
    browser.call("Emulation.setScrollbarsHidden", page=True, hidden=not shown)
    browser.open("about:blank")
    return browser.evaluate(SCROLLBAR_PROBE)


#: the width of a classic scrollbar in the desktop browser of ``rendered`` (0: none drawn)
DESKTOP_SCROLLBAR = {}


@pytest.fixture(scope="module")
def rendered(html) -> dict:
    """(page name, width) -> (DOM, layout report), for every page of the book at both widths; the
    desktop with classic scrollbars shown, the phone, in a phone's own viewport, with none (overlay
    scrollbars)."""
    # Chromium's window is at least 500 px wide; the phone's viewport is emulated in it
    browsers = {width: Browser(CHROMIUM, window, VIEWPORT_HEIGHT) for width, window in ((DESKTOP, DESKTOP), (PHONE, 600))}
    phone_viewport(browsers[PHONE])
    try:
        DESKTOP_SCROLLBAR["width"] = show_scrollbars(browsers[DESKTOP], True)
        show_scrollbars(browsers[PHONE], False)
        return {(name, width): render(html / f"{name}.html", width, browsers[width])
                for name in ["intro", *toc_files()] for width in (DESKTOP, PHONE)}
    finally:
        for browser in browsers.values():
            browser.close()


def findings(rendered, key: str) -> dict:
    """The pages' reports of KEY that list something, by "page at width px"."""
    return {f"{name} at {width} px": report[key]
            for (name, width), (_, report) in rendered.items() if report[key]}


def print_counts(rendered, key: str, what: str) -> None:
    """How many items KEY lists over all pages, at each width (shown with -rP)."""
    for width in (DESKTOP, PHONE):
        count = sum(len(report[key]) for (_, w), (_, report) in rendered.items() if w == width)
        print(f"At {width} px, {count} {what}")


def describe(items: list[dict], column: int | None = None) -> str:
    """One line per element: kind, its content's width in its box's (or the column's), where, what."""
    lines = []
    for item in items:
        size = (f"{item['content']} px in {min(item['box'], column or item['box'])} px" if "content" in item
                else f"right edge at {item['right']} px")
        lines.append(f"    {item['kind']:<16} {size:<18} [{item['where']}]: {item['snippet']}")
    return "\n".join(lines)


@pytest.mark.book
@needs_chromium
def test_math_renders_offline_without_errors_in_a_browser(html, rendered):
    """Every formula typesets in MathJax 3 as the book ships it (no network here), its
    fonts load, and no page asks for anything outside _build/html."""
    checked = 0
    for name in ["intro", *toc_files()]:
        dom, report = rendered[(name, DESKTOP)]
        outside = [url for url in report["resources"] if not url.startswith("file:")]
        source = (html / f"{name}.html").read_text()
        formulas = source.count('class="math notranslate')
        if formulas == 0:
            continue
        assert report["mathjax"], f"{name}: MathJax did not start"
        mathjax_outside = [url for url in outside if "mathjax" in url.lower()]
        assert not mathjax_outside, f"{name}: MathJax loads files from the network: {mathjax_outside}"
        typeset = dom.count("<mjx-container")
        assert typeset >= formulas, f"{name}: {typeset} of {formulas} formulas typeset"
        # a syntax error becomes <mjx-merror>; an unknown macro is typeset as red text
        errors = re.findall(r'data-mjx-error="([^"]*)"|<mjx-merror|<mjx-mtext[^>]*color: red', dom)
        assert not errors and not report["mathErrors"], \
            f"{name}: {len(errors)} MathJax errors: " + "; ".join(f"{e['error']!r} in {e['tex']!r}" for e in report["mathErrors"])
        fonts = dict(report["fonts"])
        assert fonts and "error" not in fonts.values(), f"{name}: MathJax fonts: {report['fonts']}"
        assert "loaded" in fonts.values(), f"{name}: no MathJax font loaded: {report['fonts']}"
        checked += 1
    assert checked >= 2, "expected the intro and at least one chapter to hold formulas"


def overflow_summary(width: int, rendered: dict, key: str) -> tuple[int, str]:
    count, parts = 0, []
    for (name, w), (_, report) in rendered.items():
        if w != width or not report[key]:
            continue
        count += len(report[key])
        parts.append(f"  {name} ({len(report[key])}; column {report['column']} px):\n{describe(report[key], report['column'])}")
    return count, "\n".join(parts)


def only(rendered: dict, keep) -> dict:
    """The rendered pages with only the overflowing elements for which keep(element) holds."""
    return {key: (dom, {**report, "overflowing": [item for item in report["overflowing"] if keep(item)]})
            for key, (dom, report) in rendered.items()}


@pytest.mark.book
@needs_chromium
def test_nothing_is_wider_than_its_column_at_desktop_width(rendered):
    """At 1400 px no code block, output, table, equation or figure is wider than its
    box or the article column (with every toggle and dropdown opened). The library's
    own source (lines up to about 110 characters) scrolls inside its box instead of
    breaking inside a token: reported, not failed."""
    count, summary = overflow_summary(DESKTOP, only(rendered, lambda item: item["kind"] == "listing"), "overflowing")
    print(f"At {DESKTOP} px, {count} library listings scroll inside their box:\n{summary}")
    count, summary = overflow_summary(DESKTOP, only(rendered, lambda item: item["kind"] != "listing"), "overflowing")
    print(f"At {DESKTOP} px, {count} elements wider than their column:\n{summary}")
    assert count == 0, (
        f"At {DESKTOP} px, {count} elements are wider than their column "
        f"(kind, content width px in box width px [section]: longest line or formula):\n{summary}")


@pytest.mark.book
@needs_chromium
def test_the_page_never_scrolls_sideways_on_a_phone(rendered):
    """At 390 px a page never scrolls sideways; what scrolls inside its own box
    (code, outputs, equations) is reported, not failed."""
    count, summary = overflow_summary(PHONE, rendered, "overflowing")
    print(f"At {PHONE} px, {count} elements scroll inside their own box:\n{summary}")
    if count:  # a short note in every run; the list above with -rP
        kinds = {}
        for (name, width), (_, report) in rendered.items():
            for item in report["overflowing"] if width == PHONE else []:
                kinds.setdefault(name, Counter())[item["kind"]] += 1
        warnings.warn(f"At {PHONE} px, {count} elements scroll inside their own box (pytest tests/test_book.py "
                      f"-k phone -rP lists them): " + "; ".join(
                          f"{name} " + ", ".join(f"{n} {kind}" for kind, n in sorted(c.items())) for name, c in kinds.items()),
                      stacklevel=1)
    wide = {name: r for (name, w), (_, r) in rendered.items() if w == PHONE and r["pageWidth"] > r["window"]}
    assert not wide, f"At {PHONE} px these pages scroll sideways:\n" + "\n".join(
        f"  {name}: {r['pageWidth']} px wide, because of:\n{describe(r['sticking'])}" for name, r in wide.items())


def looks_like_a_file_name(alt: str | None, src: str) -> bool:
    """No alt text, or the file's name or path standing in for one (myst-nb's default)."""
    alt = (alt or "").strip()
    return not alt or alt == src or bool(re.fullmatch(r"\S+\.(png|svg|jpe?g|gif|webp)", alt, flags=re.I))


@pytest.mark.book
@needs_chromium
def test_every_figure_keeps_its_aspect_ratio_and_has_alt_text_at_both_widths(rendered):
    """An image drawn more than 1% wider or taller than its file (an inline height that
    stays while the width shrinks) fails, and so does one whose alt text is missing or
    only its file name."""
    squashed, unnamed, figures = [], [], 0
    for (name, width), (_, report) in rendered.items():
        for figure in report["figures"]:
            figures += 1
            ratio = figure["drawn"] / figure["file"]
            if abs(ratio - 1) > 0.01:
                squashed.append(f"  {name} at {width} px [{figure['where']}]: drawn at {ratio:.0%} of its "
                                f"file's width/height ({figure['src']})")
            if looks_like_a_file_name(figure["alt"], figure["src"]):
                unnamed.append(f"  {name} [{figure['where']}]: alt {figure['alt']!r} ({figure['src']})")
    assert figures >= 2 * 30, f"only {figures} figures measured at both widths"
    assert not squashed, "figures drawn out of their aspect ratio:\n" + "\n".join(squashed)
    assert not unnamed, "figures without alt text:\n" + "\n".join(sorted(set(unnamed)))


def test_a_file_name_is_not_alt_text():
    assert looks_like_a_file_name(None, "a.png") and looks_like_a_file_name(" ", "a.png")
    assert looks_like_a_file_name("../_images/3f2a.png", "3f2a.png")
    assert not looks_like_a_file_name("Log-log plot of Var(q.k / d) against d", "3f2a.png")


@pytest.mark.book
@needs_chromium
def test_no_page_has_a_script_error_in_the_console(rendered):
    """Every script parses and runs without an uncaught error or a console.error (a doubled
    inline `const` declaration from sphinx-thebe was one on every page), at both widths."""
    errors = findings(rendered, "scriptErrors")
    assert not errors, "script errors:\n" + "\n".join(f"  {page}: {e}" for page, e in errors.items())


@pytest.mark.book
@needs_chromium
def test_no_display_equation_scrolls_sideways_on_a_phone(rendered):
    """At 390 px every display equation, in the text or printed by a cell, fits its column:
    a long one is broken into aligned lines (MathJax 3 does not break lines itself), and
    the phone layout gives an equation the column's width, its number below it."""
    wide = {name: [item for item in report["overflowing"] if item["kind"].endswith("equation")]
            for (name, width), (_, report) in rendered.items() if width == PHONE}
    wide = {name: items for name, items in wide.items() if items}
    assert not wide, f"At {PHONE} px these display equations are wider than their column:\n" + "\n".join(
        f"  {name}:\n{describe(items)}" for name, items in wide.items())


# With every toggle and dropdown open, at 1400 px. Chapter 10 was one page of 48,600 px
# before it was split into section pages; the longest page after it is under 27,000 px.
LONGEST_PAGE = 30_000


@pytest.mark.book
@needs_chromium
def test_no_page_is_a_wall(rendered):
    """No page is longer than LONGEST_PAGE px at 1400 px with everything open: a chapter
    that grows past it is split into section pages (the toc's ``sections:``)."""
    heights = sorted(((report["height"], name) for (name, width), (_, report) in rendered.items() if width == DESKTOP),
                     reverse=True)
    print("The longest pages at 1400 px, everything open: " + ", ".join(
        f"{name} {height:,} px ({height / VIEWPORT_HEIGHT:.1f} screens)" for height, name in heights[:5]))
    long = {name: report["height"] for (name, width), (_, report) in rendered.items()
            if width == DESKTOP and report["height"] > LONGEST_PAGE}
    assert not long, f"pages over {LONGEST_PAGE:,} px at {DESKTOP} px: " + ", ".join(
        f"{name} {height:,} px" for name, height in long.items())


@pytest.mark.book
@needs_chromium
def test_the_exercise_catalogue_fits_a_phone_with_its_math_typeset(rendered):
    """At 390 px the instructor page's catalogue needs no sideways scrolling (each exercise is
    a card), and its prompts' math is typeset, not ASCII ("Var(q . k)")."""
    _, report = rendered[("instructor", PHONE)]
    wide = [item for item in report["overflowing"] if item["where"].lower().startswith("the exercise catalogue")]
    assert not wide, f"At {PHONE} px the catalogue scrolls sideways:\n{describe(wide)}"
    dom, _ = rendered[("instructor", PHONE)]
    start = dom.index('id="the-exercise-catalogue"')
    catalogue = dom[start:dom.index("</section>", start)]
    assert catalogue.count("<mjx-container") >= 20, "the catalogue's math is not typeset"
    assert "Var(q . k)" not in catalogue and "sigma_q" not in catalogue


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # one line per request would bury a failure's report
        pass


@pytest.mark.book
@needs_chromium
def test_search_results_quote_plain_text(html, tmp_path):
    """A search's results quote each page in words: no TeX source ("\\sqrt{d_k}") and none of the
    article header's buttons or the print-only contents (".pdf", "Contents"). The pages are
    served over HTTP, as published: Sphinx's search fetches them, which a file:// page cannot."""
    handler = functools.partial(QuietHandler, directory=str(html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=30000", "--dump-dom",
             f"http://127.0.0.1:{server.server_address[1]}/search.html?q=saturation"],
            capture_output=True, text=True, timeout=180)
    finally:
        server.shutdown()
    quotes = [html_module.unescape(re.sub(r"<[^>]+>", "", quote))
              for quote in re.findall(r'<p class="context">(.*?)</p>', result.stdout, flags=re.S)]
    assert len(quotes) >= 5, f"the search found {len(quotes)} pages with quotes: {result.stderr[-1000:]}"
    raw = [q for q in quotes if re.search(r"\\[()\[\]]|\\[a-zA-Z]+", q) or "Contents" in q or ".pdf" in q]
    assert not raw, "quotes with TeX or header text:\n" + "\n".join(q[:200] for q in raw)


# Open the download menu as a reader does, and fetch what its ".ipynb" entry links to.
DOWNLOAD_NOTEBOOK = """(() => {
  window.__download = null;
  document.querySelector(".dropdown-download-buttons > button.dropdown-toggle").click();
  setTimeout(async () => {
    const link = [...document.querySelectorAll(".dropdown-download-buttons .dropdown-menu a")]
      .find(a => a.textContent.trim() === ".ipynb");
    if (!link) { window.__download = {missing: true}; return; }
    const box = link.getBoundingClientRect();
    const response = await fetch(link.href);
    window.__download = {href: link.href, status: response.status, text: await response.text(),
                         shown: box.width > 0 && box.left >= 0 && box.right <= window.innerWidth};
  }, 300);
})()"""


@pytest.mark.book
@needs_chromium
def test_the_download_menus_notebook_renders_in_jupyter_at_both_widths(html):
    """At 1400 and 390 px the download menu's ".ipynb", opened and followed as a reader would, gives
    the page's Jupyter edition: its Markdown holds no MyST role or directive, which Jupyter and Colab
    show as raw text (the theme's entry served the chapter's source from _sources/). The pages are
    served over HTTP, as published."""
    handler = functools.partial(QuietHandler, directory=str(html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    wrong = []
    try:
        for width in (DESKTOP, PHONE):
            browser = Browser(CHROMIUM, max(width, 600), VIEWPORT_HEIGHT)
            try:
                if width == PHONE:
                    phone_viewport(browser)
                # a chapter, a section page and a landing page (no launch buttons, still a notebook)
                for page in ("chapters/04_softmax_saturation", "chapters/10_2_training", "chapters/14_trained_models"):
                    browser.open(f"http://127.0.0.1:{server.server_address[1]}/{page}.html", timeout=PAGE_TIMEOUT)
                    browser.evaluate(DOWNLOAD_NOTEBOOK)
                    deadline = time.monotonic() + PAGE_TIMEOUT
                    while (download := browser.evaluate("window.__download")) is None:
                        assert time.monotonic() < deadline, f"{page} at {width} px: the download did not finish"
                        time.sleep(0.05)
                    assert not download.get("missing"), f"{page} at {width} px: no .ipynb in the download menu"
                    assert download["shown"], f"{page} at {width} px: the menu's .ipynb is off the screen"
                    assert download["status"] == 200, f"{page} at {width} px: {download['href']} gave {download['status']}"
                    left = jupyter_edition.leftovers(json.loads(download["text"]))
                    print(f"{page} at {width} px: {download['href']}, {len(left)} lines of MyST")
                    if left:
                        wrong.append(f"  {page} at {width} px, {download['href']}: " + "; ".join(left[:3]))
            finally:
                browser.close()
    finally:
        server.shutdown()
    assert not wrong, "the download menu's notebook holds MyST:\n" + "\n".join(wrong)


#: a search and the page a reader looks for first: the chapter on the subject
SEARCHES = {"softmax": "chapters/04_softmax_saturation", "online softmax": "chapters/08_online_softmax",
            "mask": "chapters/05_stability_and_masks", "ring attention": "chapters/11_beyond_one_device",
            "saturation": "chapters/04_softmax_saturation"}


@pytest.mark.book
@needs_chromium
def test_search_puts_the_chapter_on_the_subject_first(html):
    """Sphinx scored a word in a page's title no higher than in a section's, so "softmax" listed
    chapter 4 fourth and "online softmax" did not list chapter 8 among the first four
    (_static/search_snippets.js raises a result whose page or section title holds every word)."""
    handler = functools.partial(QuietHandler, directory=str(html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    browser = Browser(CHROMIUM, DESKTOP, VIEWPORT_HEIGHT)
    try:
        wrong = []
        for query, first in SEARCHES.items():
            url = f"http://127.0.0.1:{server.server_address[1]}/search.html?q={query.replace(' ', '+')}"
            browser.open(url)
            deadline = time.monotonic() + PAGE_TIMEOUT
            while not browser.evaluate("!!document.querySelector('#search-results .search-summary')?.textContent.match(/found/i)"):
                assert time.monotonic() < deadline, f"{query!r}: the search did not finish"
                time.sleep(0.05)
            found = browser.evaluate("[...document.querySelectorAll('#search-results ul.search > li > a')]"
                                     ".map(a => a.getAttribute('href').split(/[?#]/)[0].replace(/\\.html$/, ''))")
            print(f"{query!r}: {found[:5]}")
            if not found or found[0] != first:
                wrong.append(f"  {query!r}: {found[:5]}, not {first} first")
    finally:
        browser.close()
        server.shutdown()
    assert not wrong, "searches that do not list the chapter on their subject first:\n" + "\n".join(wrong)


# The smallest text the book's figures are drawn with (attnlib/book/diagrams.py's labels, chapter 6's
# tick labels; the house style's is 10 pt), at attnlib.book.plots' figure.dpi: a figure's own size is
# its width at that resolution, which myst-nb writes inline (the PNG is stored at twice it).
FIGURE_TEXT_PT = 9
FIGURE_DPI = 100
LEGIBLE_PX = 9  # the smallest text on screen that a reader can read without zooming


def figure_text_px(figure: dict) -> float:
    """A figure's smallest text as drawn on the screen: its size at the figure's own size, times
    the scale the page draws the figure at."""
    return FIGURE_TEXT_PT * FIGURE_DPI / 72 * figure["scale"]


def test_no_figure_is_drawn_with_text_smaller_than_the_legibility_test_assumes():
    """FIGURE_TEXT_PT is the smallest font size in the code that draws the figures: attnlib's
    plotting and diagram modules and the chapters' code cells (a named size, "small", would
    escape the count and is refused)."""
    sources = {str(path.relative_to(ROOT)): path.read_text() for path in (ROOT / "attnlib").rglob("*.py")}
    for path in book_pages.notebooks():
        cells = json.loads(path.read_text())["cells"]
        sources[path.name] = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    sizes = {}
    for name, text in sources.items():
        for size in re.findall(r"\b(?:fontsize|labelsize)\s*=\s*([0-9.]+)", text):
            sizes.setdefault(float(size), set()).add(name)
        for size in re.findall(r'"[a-z.]*(?:font\.|label|title)size":\s*([0-9.]+)', text):
            sizes.setdefault(float(size), set()).add(name)
        named = re.findall(r"\b(?:fontsize|labelsize)\s*=\s*[\"']", text)
        assert not named, f"{name}: a named font size; give figures' text sizes in points"
    assert min(sizes) == FIGURE_TEXT_PT, f"the smallest figure text is {min(sizes)} pt in {sorted(sizes[min(sizes)])}"
    assert '"figure.dpi": 100' in sources["attnlib/book/plots.py"] and FIGURE_DPI == 100


@pytest.mark.book
@needs_chromium
def test_every_figures_text_is_legible_at_both_widths_and_a_phone_says_a_tap_enlarges_it(rendered):
    """Measured in the browser from the figure's drawn scale: its smallest text is at least
    LEGIBLE_PX on screen at 1400 and at 390 px (on a phone a wide figure keeps a legible size
    and scrolls in its box, fading at the edge where more of it is: the shadow behind the opaque
    image never showed), and on a phone every figure that links its full-size PNG says so."""
    small, silent, unfaded, lines, figures = [], [], [], [], 0
    for (name, width), (_, report) in rendered.items():
        for figure in report["figures"]:
            figures += 1
            text = figure_text_px(figure)
            lines.append(f"  {name} at {width} px [{figure['where']}]: {text:.1f} px ({figure['src']})")
            if text < LEGIBLE_PX - 0.05:
                small.append(lines[-1])
            if width == PHONE and figure["linked"] and "tap" not in figure["hint"].lower():
                silent.append(f"  {name} [{figure['where']}]: caption hint {figure['hint']!r}")
            if figure["scrolls"] and not figure["fades"]:
                unfaded.append(f"  {name} at {width} px [{figure['where']}] ({figure['src']})")
    print("Smallest figure text on screen:\n" + "\n".join(lines))
    assert figures >= 2 * 30, f"only {figures} figures measured"
    assert not small, f"figures whose {FIGURE_TEXT_PT}-pt text is under {LEGIBLE_PX} px on screen:\n" + "\n".join(small)
    assert not silent, "figures that link their full size without saying so on a phone:\n" + "\n".join(silent)
    assert not unfaded, "figures that scroll in their box without fading at the edge:\n" + "\n".join(unfaded)


@pytest.mark.book
@needs_chromium
def test_no_inline_formula_is_cut_off_at_either_width(rendered):
    """An inline formula wider than its line scrolls; none is clipped by a box that hides its
    overflow (Solution 1.1's "= (0.616, 0.616)" was, on a phone)."""
    clipped = findings(rendered, "clippedMath")
    assert not clipped, "inline formulas cut off:\n" + "\n".join(
        f"  {page}:\n{describe(items)}" for page, items in clipped.items())


# the least a display equation too wide for a phone's column is scaled to, to fit it
# (_static/phone_fit.js): the size every display equation had on a phone before
MIN_EQUATION_SCALE = 0.7


@pytest.mark.book
@needs_chromium
def test_display_math_is_as_large_as_inline_math_and_numbers_sit_by_their_equations(rendered):
    """At both widths a display equation is set at the size of the inline formulas around it (a
    phone rule once set every one at 71 % of them); only on a phone, one too wide for the column
    is set just small enough to fit it, and no smaller than MIN_EQUATION_SCALE. An equation's
    number sits beside it or tight under it (22 px below it on a phone, before), measured with every
    toggle open in a phone's own viewport, as the review measured. (Its 10 px at (8.9) lay between
    the number and the equation of a closed dropdown, both hidden; opened, they touch.)"""
    shrunk, apart, numbers, fitted = [], [], 0, Counter()
    for (name, width), (_, report) in rendered.items():
        inline, display = report["inlineMathSizes"], report["displayMathSizes"]
        if not inline:
            continue
        text_size = sorted(inline)[len(inline) // 2]  # the inline formulas of the text (a heading's are larger)
        for equation in display:
            if equation["size"] >= text_size - 0.5:
                continue
            if width == PHONE and equation["fits"] and equation["size"] >= MIN_EQUATION_SCALE * text_size - 0.5:
                fitted[name] += 1
                continue
            shrunk.append(f"  {name} at {width} px [{equation['where']}]: {equation['size']:.1f} px against "
                          f"inline {text_size:.1f} px{'' if equation['fits'] else ', and wider than its box'}: {equation['snippet']}")
        for number in report["numberGaps"]:
            numbers += 1
            if number["gap"] > 6:
                apart.append(f"  {name} at {width} px [{number['where']}]: {number['number']} {number['gap']} px from its equation")
    print(f"At {PHONE} px, {sum(fitted.values())} display equations set smaller to fit the column: {dict(fitted)}")
    assert numbers >= 2 * 50, f"only {numbers} numbered equations measured"
    assert not shrunk, "display math smaller than inline math:\n" + "\n".join(shrunk)
    assert not apart, "equation numbers apart from their equations:\n" + "\n".join(apart)


@pytest.mark.book
@needs_chromium
def test_formulas_are_not_tab_stops_and_keep_their_menu(rendered):
    """A keyboard reader tabs through links and toggles, not through every formula (2,095 were
    Tab stops); MathJax's menu is still there, on each formula's context menu."""
    stops = findings(rendered, "mathTabStops")
    assert not stops, f"formulas in the Tab order: {stops}"
    with_math = [name for (name, width), (_, report) in rendered.items() if report["inlineMathSizes"]]
    assert with_math and all(rendered[(name, DESKTOP)][1]["mathMenu"] for name in with_math), "MathJax's menu is off"


@pytest.mark.book
@needs_chromium
def test_inline_formulas_draw_no_scrollbar_and_take_no_focus_at_both_widths(rendered):
    """Classic scrollbars shown at 1400 px (a control box proves they take room): no inline formula
    draws one (offsetHeight == clientHeight) or takes the focus, except one measured wider than its
    line, which scrolls and is one labelled Tab stop. Making every formula a scroll box drew a
    scrollbar under 2,047 of 2,682 of them (a glyph overhanging its box by a pixel was enough)."""
    assert DESKTOP_SCROLLBAR.get("width", 0) >= 8, f"the desktop browser draws no classic scrollbars: {DESKTOP_SCROLLBAR}"
    barred, focusable, unlabelled, formulas, wide = [], [], [], 0, Counter()
    for (name, width), (_, report) in rendered.items():
        formulas += report["inlineMath"]
        barred += [f"  {name} at {width} px: a {item['bar']}-px bar [{item['where']}]: {item['snippet']}"
                   for item in report["barredMath"]]
        focusable += [f"  {name} at {width} px [{item['where']}]: {item['snippet']}" for item in report["focusableMath"]]
        for item in report["wideMath"]:
            wide[f"{name} at {width} px"] += 1
            if item["tabIndex"] != 0 or not item["label"] or not item["focusable"]:
                unlabelled.append(f"  {name} at {width} px [{item['where']}]: {item}")
    print(f"{formulas} inline formulas; wider than their line, scrolling: {dict(wide)}")
    assert formulas >= 2 * 2000, formulas
    assert not barred, f"{len(barred)} inline formulas draw a scrollbar:\n" + "\n".join(barred[:40])
    assert not focusable, f"{len(focusable)} inline formulas take the focus:\n" + "\n".join(focusable[:40])
    assert not unlabelled, "wide formulas that are not one labelled Tab stop:\n" + "\n".join(unlabelled)
    assert sum(wide.values()) < 0.01 * formulas, f"too many formulas marked wider than their line: {dict(wide)}"


def tab_stops(browser: Browser, url: str, presses: int) -> list[str]:
    """What the focus lands on at each of ``presses`` real Tab presses from the top of ``url``, once
    MathJax has typeset it: "formula" (inside a span.math, a div.math or an mjx-container), "wide
    formula" (a span.math.math-wide), or the element's tag and text."""
    browser.open(url, timeout=PAGE_TIMEOUT)
    browser.evaluate("MathJax.startup.promise.then(() => setTimeout(() => { window.__typeset = true; }, 300))")
    deadline = time.monotonic() + PAGE_TIMEOUT
    while not browser.evaluate("window.__typeset === true"):
        assert time.monotonic() < deadline, f"{url}: MathJax did not typeset"
        time.sleep(0.05)
    stops = []
    for _ in range(presses):
        browser.press("Tab")
        stops.append(browser.evaluate("""(() => {
          const a = document.activeElement;
          if (a.closest("span.math.math-wide")) return "wide formula";
          if (a.closest("span.math, div.math, mjx-container")) return "formula";
          return a.tagName.toLowerCase() + ": " + (a.getAttribute("aria-label") || a.textContent || "").trim().slice(0, 40);
        })()"""))
    return stops


#: how many Tab presses test_tab_never_stops_on_a_formula walks (the review counted 133 formulas
#: among the first 259 stops of chapter 4 at 1400 px, 139 at 390 px)
TAB_PRESSES = 259


@pytest.mark.book
@needs_chromium
def test_tab_never_stops_on_a_formula(html):
    """Real Tab presses (trusted key events) through chapter 4, the page with the most formulas in
    its first screens, at 1400 px with classic scrollbars and at 390 px in a phone's viewport: the
    focus moves through links, buttons and controls, never onto a formula, except one marked wider
    than its line (a deliberate, labelled stop)."""
    page = (html / "chapters" / "04_softmax_saturation.html").as_uri()
    for width in (DESKTOP, PHONE):
        browser = Browser(CHROMIUM, width, VIEWPORT_HEIGHT)
        try:
            if width == PHONE:
                phone_viewport(browser)
            assert show_scrollbars(browser, width == DESKTOP) >= (8 if width == DESKTOP else 0)
            stops = tab_stops(browser, page, TAB_PRESSES)
            assert browser.evaluate("window.innerWidth") == width
        finally:
            browser.close()
        counts = Counter(stop if "formula" in stop else "other" for stop in stops)
        print(f"chapter 4 at {width} px, {TAB_PRESSES} Tab presses: {dict(counts)}")
        assert len(set(stops)) > 20, f"the focus hardly moved: {Counter(stops).most_common(5)}"
        assert counts["formula"] == 0, f"at {width} px {counts['formula']} of {TAB_PRESSES} Tab stops are formulas"


@pytest.mark.book
@needs_chromium
def test_what_scrolls_sideways_shows_it_and_long_code_keeps_its_scrollbar_in_reach(rendered):
    """At both widths every box that scrolls sideways (an equation, an inline formula, a table, a
    stored result, a figure on a phone) has the edge shadow that shows it continues; a library
    listing or a code cell with lines wider than its box is no taller than the window, so that its
    scrollbar is on the screen where its first long line is (at 390 px 12 code cells of chapters 3,
    5, 6, 7 and 9.2 were both wider and taller than an 844-px window)."""
    unmarked = findings(rendered, "unmarkedScrolls")
    assert not unmarked, "boxes that scroll sideways with nothing to show it:\n" + "\n".join(
        f"  {page}:\n{describe(items)}" for page, items in unmarked.items())
    tall = findings(rendered, "tallListings")
    print_counts(rendered, "tallListings", "listings and code cells are wider and taller than the window")
    assert not tall, "listings and code cells wider and taller than the window:\n" + "\n".join(
        f"  {page}: " + "; ".join(f"{item['kind']} {item['height']} px high [{item['where']}]: {item['snippet']}"
                                for item in items) for page, items in tall.items())


@pytest.mark.book
@needs_chromium
def test_a_scroll_boxs_edge_shadow_shows_over_what_it_holds(rendered):
    """The edge shadow of a box that scrolls sideways is the box's background: at both widths
    nothing inside it (a table's rows, its heading, inline code) paints an opaque background over
    it. The theme's white and grey rows did, and a phone showed the shadow only as a sliver above
    the header row (of 34 boxes at 390 px, every table and stored result)."""
    covered = findings(rendered, "coveredShadows")
    print_counts(rendered, "coveredShadows", "scroll boxes hold something that paints over their edge shadow")
    assert not covered, "scroll boxes whose edge shadow is painted over by what they hold:\n" + "\n".join(
        f"  {page}:\n" + "\n".join(f"    {item['kind']} {item['content']} px in {item['box']} px [{item['where']}]: "
                                    f"covered by {item['covers']}" for item in items)
        for page, items in covered.items())


@pytest.mark.book
@needs_chromium
def test_the_intros_chapter_table_fits_both_widths_and_never_breaks_a_module_name(rendered):
    """The intro's table of chapters fits its column at 1400 and at 390 px without scrolling
    sideways (on a phone it was 654 px wide in a 358-px box; there each chapter is a card), and
    no module's name in it (integrations.transformers) breaks over two lines at either width."""
    for width in (DESKTOP, PHONE):
        table = rendered[("intro", width)][1]["chapterTable"]
        assert table is not None, "the intro has no section#the-chapters table"
        print(f"At {width} px the chapter table is {table['content']} px wide in its {table['box']}-px box")
        assert table["content"] <= table["box"] + 1, \
            f"At {width} px the chapter table scrolls: {table['content']} px in {table['box']} px"
        assert not table["broken"], f"At {width} px module names break over two lines: {table['broken']}"


def wait_for_typeset(browser: Browser, url: str) -> None:
    browser.open(url, timeout=PAGE_TIMEOUT)
    browser.evaluate("(window.MathJax ? MathJax.startup.promise : Promise.resolve())"
                     ".then(() => document.fonts.ready).then(() => setTimeout(() => { window.__typeset = true; }, 300))")
    deadline = time.monotonic() + PAGE_TIMEOUT
    while not browser.evaluate("window.__typeset === true"):
        assert time.monotonic() < deadline, f"{url}: MathJax did not typeset"
        time.sleep(0.05)


# In dark mode, every figure in the column: its CSS filter, its background and padding, and the
# scale its drawing (the image less its card's padding) is set at against its own size; and every
# derivation's step label's background (chapter 2: it drew light bars between the equations)
DARK_PROBE = """(() => {
  const shown = [...document.querySelectorAll(".bd-content figure img, .bd-content div.cell_output img")].filter(
    img => img.getBoundingClientRect().width > 0);  // a live figure hides its static image
  const figures = shown.map(img => {
    const style = getComputedStyle(img), padding = parseFloat(style.paddingLeft) + parseFloat(style.paddingRight);
    return {src: img.getAttribute("src").split("/").pop().slice(0, 12), filter: style.filter,
            background: style.backgroundColor, padding: padding,
            scale: (img.getBoundingClientRect().width - padding) / parseFloat(img.style.width)};
  });
  const steps = [...document.querySelectorAll(".bd-content div.cell_output .text_html:has(> .derivation-step)")].map(
    box => getComputedStyle(box).backgroundColor + " " + getComputedStyle(box).backgroundImage);
  return {theme: document.documentElement.dataset.theme, figures: figures, steps: steps};
})()"""


@pytest.mark.book
@needs_chromium
def test_the_book_follows_the_readers_dark_mode_and_shows_figures_undimmed_on_white(html):
    """A system set to dark (Chromium's emulated prefers-color-scheme) gets the dark book, one set to
    light the light book (a dark system got the light book, before), and the theme's switch still
    changes it; the page is dark from its first paint (the theme's "auto" matched no style until its
    deferred script ran). In dark mode no figure is dimmed by the theme's CSS filter (Fig 8.3's white tiles
    turned grey): each sits on a white padded card, inside which its text is still legible on a phone
    (LEGIBLE_PX); a derivation's step label sits on the page, with no light bar."""
    pages = {name: (html / "chapters" / f"{name}.html").as_uri()
             for name in ("02_variance_symbolic", "08_online_softmax")}
    # each page as it stands when the body begins to be drawn, before its deferred scripts have run
    first_paint = {}
    for name in pages:
        copy = html / "chapters" / f"{name}.first-paint.html"
        copy.write_text(re.sub(r"(<body[^>]*>)", r"\1<script>window.__themeAtFirstPaint = document.documentElement.dataset.theme;</script>",
                               (html / "chapters" / f"{name}.html").read_text(), count=1))
        first_paint[name] = copy
    try:
        for width in (DESKTOP, PHONE):
            browser = Browser(CHROMIUM, max(width, 600), VIEWPORT_HEIGHT)
            try:
                if width == PHONE:
                    phone_viewport(browser)
                for scheme in ("light", "dark"):
                    browser.call("Emulation.setEmulatedMedia", page=True,
                                 features=[{"name": "prefers-color-scheme", "value": scheme}])
                    for name, url in pages.items():
                        wait_for_typeset(browser, first_paint[name].as_uri())
                        first = browser.evaluate("window.__themeAtFirstPaint")
                        wait_for_typeset(browser, url)
                        seen = browser.evaluate(DARK_PROBE)
                        where = f"{name} at {width} px, the system {scheme}"
                        assert first == scheme, f"{where}: the page is {first!r} until its scripts have run"
                        assert seen["theme"] == scheme, f"{where}: the book is {seen['theme']}"
                        assert seen["figures"], f"{where}: no figure measured"
                        for figure in seen["figures"]:
                            assert figure["filter"] == "none", f"{where}: a figure is dimmed: {figure}"
                            if scheme == "dark":
                                assert figure["background"] == "rgb(255, 255, 255)" and figure["padding"] >= 8, \
                                    f"{where}: a figure is not on a white card: {figure}"
                            assert figure_text_px(figure) >= LEGIBLE_PX - 0.05, f"{where}: a figure's text is small: {figure}"
                        if name == "02_variance_symbolic" and scheme == "dark":
                            assert seen["steps"], f"{where}: no derivation step measured"
                            assert set(seen["steps"]) == {"rgba(0, 0, 0, 0) none"}, f"{where}: {set(seen['steps'])}"
                browser.evaluate("document.querySelector('.theme-switch-button').click()")
                assert browser.evaluate("document.documentElement.dataset.theme") == "light", \
                    f"at {width} px the theme's switch does not turn a dark system's book light"
            finally:
                browser.close()
    finally:
        for copy in first_paint.values():
            copy.unlink()


# Without JavaScript, every figure in the column and the scale its drawing is set at against its own
# size (the width myst-nb writes inline)
FIGURE_SCALES = """[...document.querySelectorAll(".bd-content figure img")].filter(img => img.getBoundingClientRect().width > 0)
  .map(img => ({src: img.getAttribute("src").split("/").pop().slice(0, 12),
                scale: img.getBoundingClientRect().width / parseFloat(img.style.width)}))"""


@pytest.mark.book
@needs_chromium
def test_figures_keep_their_legible_size_on_a_phone_without_javascript(html):
    """With JavaScript off, at 1400 px and in a phone's 390-px viewport, every figure of chapters 8
    and 10.2 (Figs 10.2 and 10.3 are the widest, 675 px) is drawn large enough for its 9-pt text to
    be LEGIBLE_PX: a figure's own width is in the page (_ext/figure_own_width.py), not set by a
    script (then the figures shrank to the column, their text to 5-7 px)."""
    small, measured = [], 0
    for width in (DESKTOP, PHONE):
        browser = Browser(CHROMIUM, max(width, 600), VIEWPORT_HEIGHT)
        try:
            if width == PHONE:
                phone_viewport(browser)
            browser.call("Emulation.setScriptExecutionDisabled", page=True, value=True)
            for name in ("08_online_softmax", "10_2_training"):
                browser.open((html / "chapters" / f"{name}.html").as_uri(), timeout=PAGE_TIMEOUT)
                deadline = time.monotonic() + PAGE_TIMEOUT
                while not (figures := browser.evaluate(FIGURE_SCALES)):
                    assert time.monotonic() < deadline, f"{name} at {width} px: no figure drawn"
                    time.sleep(0.05)
                assert browser.evaluate("typeof DOCUMENTATION_OPTIONS") == "undefined", "JavaScript ran"
                measured += len(figures)
                small += [f"  {name} at {width} px: {figure_text_px(figure):.1f} px ({figure['src']})"
                          for figure in figures if figure_text_px(figure) < LEGIBLE_PX - 0.05]
        finally:
            browser.close()
    assert measured >= 2 * 6, f"only {measured} figures measured"
    assert not small, "without JavaScript, figures whose 9-pt text is small:\n" + "\n".join(small)
