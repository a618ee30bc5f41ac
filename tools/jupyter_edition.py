"""The Jupyter edition: the book's notebooks with their MyST markup turned into Markdown that
Colab and JupyterLab render, every cross-reference, equation number and citation written as
the built book shows it and linked into the published book.

    python tools/jupyter_edition.py jupyter OUT [--html _build/html]   # what `make jupyter-edition` runs
    python tools/jupyter_edition.py student OUT [--html _build/html]   # what `make student-edition` runs
    python tools/jupyter_edition.py publish FOLDER REMOTE             # the publishing workflow's push

Numbers and link targets are read from the built book (``make book`` first): Sphinx's
inventory ``objects.inv`` maps each label to its page and anchor, and the pages' HTML hold the
numbers the reader sees (section numbers, ``(8.3)``, ``Exercise 8.1``, the bibliography's labels).
Nothing is numbered here, so the edition cannot disagree with the book. The pages come from
``_toc.yml`` (parts, chapters and their ``sections:``); a role, directive or label the converter
does not know is an error that names it, never text left in a cell.

The published book's address is ``html.baseurl`` in ``_config.yml`` when it is set, else the
GitHub Pages address of ``repository.url`` (``https://OWNER.github.io/NAME/``), where
``.github/workflows/publish.yml`` deploys it.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import pathlib
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile

import yaml
from bs4 import BeautifulSoup

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "_ext")]

from author_year_bibliography import plain, who  # noqa: E402  (the book's own "et al." rule)

import book_pages  # noqa: E402  (the toc's one list of pages; tools/ is on the path)

# --- where the book lives -------------------------------------------------------------------


def config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def book_url(settings: dict | None = None) -> str:
    """The published book's address, ending in '/'."""
    settings = settings or config()
    base = (settings.get("html") or {}).get("baseurl")
    if base:
        return base.rstrip("/") + "/"
    url = settings["repository"]["url"].rstrip("/")
    match = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+)", url)
    if not match:
        raise ValueError(f"_config.yml: repository.url should be https://github.com/OWNER/NAME "
                         f"(or set html.baseurl), got {url!r}")
    owner, name = match.groups()
    return f"https://{owner.lower()}.github.io/{name}/"


def edition_branch(settings: dict | None = None) -> str:
    """The branch the Colab and Binder buttons open (_ext/launch_jupyter_edition.py)."""
    return (settings or config())["sphinx"]["config"]["jupyter_edition_branch"]


def notebook_pages() -> list[str]:
    """The toc's pages that are notebooks (the ones with a Colab button), in reading order."""
    return [page.file for page in book_pages.toc_pages() if page.path.is_file()]


# --- what the built book shows ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Target:
    page: str      # e.g. "chapters/08_online_softmax.html"
    anchor: str    # "" for the page itself
    text: str      # what the reader sees, e.g. "Section 8.3, Streaming over keys" or "(8.3)"

    def url(self, base: str) -> str:
        return base + self.page + (f"#{self.anchor}" if self.anchor else "")


def _words(element) -> str:
    """An element's visible text without the '#' of its header link."""
    element = copy.copy(element)
    for link in element.select("a.headerlink"):
        link.decompose()
    return re.sub(r"\s+", " ", element.get_text()).strip()


def _numbered(number: str, title: str) -> str:
    """'Chapter 8, Title' for a page's number, 'Section 8.3, Title' below it, the title alone unnumbered."""
    number = number.strip().rstrip(".")
    if not number:
        return title
    return f"{'Chapter' if '.' not in number else 'Section'} {number}, {title}"


class Book:
    """The labels, equations, pages and bibliography entries of a built HTML book."""

    def __init__(self, html: pathlib.Path, bibfile: pathlib.Path = ROOT / "references.bib"):
        from sphinx.util.inventory import InventoryFile

        if not (html / "objects.inv").is_file():
            raise FileNotFoundError(f"{html} holds no built book (objects.inv is missing): run `make book` first")
        self.html = html
        with open(html / "objects.inv", "rb") as stream:
            inventory = InventoryFile.load(stream, "", posixpath.join)
        self.ids: dict[str, set[str]] = {}          # page -> every id on it
        self.shown: dict[tuple[str, str], str] = {}  # (page, anchor) -> what a reference to it reads
        self.equations: dict[str, Target] = {}
        self.page_titles: dict[str, str] = {}
        for path in sorted(html.rglob("*.html")):
            page = path.relative_to(html).as_posix()
            if page.startswith(("_", "genindex", "search")):
                continue
            self._read_page(page, BeautifulSoup(path.read_text(), "html.parser"))
        self.labels = {}
        for label, (_, _, uri, title) in inventory.get("std:label", {}).items():
            page, _, anchor = uri.partition("#")
            self.labels[label] = Target(page, anchor, self.shown.get((page, anchor), title))
        self.docs = {name: Target(uri, "", self.page_titles.get(uri, title))
                     for name, (_, _, uri, title) in inventory.get("std:doc", {}).items()}
        self.citations = self._read_bibliography(bibfile)

    def _read_page(self, page: str, soup: BeautifulSoup) -> None:
        self.ids[page] = {element["id"] for element in soup.find_all(id=True)}
        article = soup.find("article") or soup
        for heading in article.find_all(re.compile(r"^h[1-6]$")):
            section = heading.find_parent("section")
            number = heading.find("span", class_="section-number")
            title = _words(heading)
            if number:
                title = title[len(_words(number)):].strip()
            shown = _numbered(number.get_text() if number else "", title)
            if heading.name == "h1" and page not in self.page_titles:
                self.page_titles[page] = shown
            if section is None:
                continue
            anchors = [section.get("id")] + [span["id"] for span in section.find_all("span", id=True, recursive=False)]
            for anchor in filter(None, anchors):
                self.shown[(page, anchor)] = shown
        for block in article.find_all(id=re.compile(r"^equation-")):
            number = block.find("span", class_="eqno")
            if number:
                label = block["id"][len("equation-"):]
                self.equations[label] = Target(page, block["id"], _words(number))
        for caption in article.find_all("span", class_="caption-number"):
            owner = caption.find_parent(id=True)
            if owner is not None and owner.name != "section":
                self.shown[(page, owner["id"])] = _words(caption)  # "Fig. 13.1", "Exercise 8.1", as the book

    def _read_bibliography(self, bibfile: pathlib.Path) -> dict[str, Target]:
        """Citation key -> its entry in the bibliography, with the author-year text the book cites.

        The entry is the one whose label is that text (a letter after the year where two share it)
        and which holds the entry's title."""
        from pybtex.database import parse_file

        entries = parse_file(str(bibfile)).entries
        page = "bibliography.html"
        soup = BeautifulSoup((self.html / page).read_text(), "html.parser")
        listed = []  # (id, label without brackets, text of the entry)
        for item in soup.find_all("div", class_="citation"):
            label = _words(item.find("span", class_="label")).strip("[]")
            listed.append((item["id"], label, _words(item)))
        found = {}
        for key, entry in entries.items():
            text = f"{who(entry)}, {entry.fields.get('year', 'n.d.')}"
            title = plain(entry.fields.get("title", "")).lower()
            # a surname of two words is tied by a no-break space, which _words reads as a space
            spaced = " ".join(text.split())
            matches = [(anchor, label) for anchor, label, words in listed
                       if re.fullmatch(re.escape(spaced) + "[a-z]?", label) and title in words.lower()]
            if len(matches) == 1:
                # the text cites as the book's text does: without the list's letter (2024a)
                found[key] = Target(page, matches[0][0], spaced)
        return found

    # the references a role writes ---------------------------------------------------------

    def label(self, label: str, where: str) -> Target:
        if label not in self.labels:
            # sphinx-proof's labels are not in the inventory; its anchors are the labels themselves
            owners = [(page, anchor) for page, anchor in self.shown if anchor == label]
            if len(owners) == 1:
                return Target(*owners[0], self.shown[owners[0]])
            raise KeyError(f"{where}: the built book has no label {label!r} (is the book built from this source?)")
        return self.labels[label]

    def equation(self, label: str, where: str) -> Target:
        if label not in self.equations:
            raise KeyError(f"{where}: the built book has no numbered equation {label!r}")
        return self.equations[label]

    def doc(self, name: str, where: str) -> Target:
        if name not in self.docs:
            raise KeyError(f"{where}: the built book has no page {name!r}")
        return self.docs[name]

    def citation(self, key: str, where: str) -> Target:
        if key not in self.citations:
            raise KeyError(f"{where}: references.bib entry {key!r} is not in the built book's bibliography")
        return self.citations[key]


# --- Markdown -----------------------------------------------------------------------------------

# a role, or an inline code span, which is left as it is (leftmost match wins: a role's backticks
# are taken by the role)
_INLINE = re.compile(r"\{(?P<role>[A-Za-z][\w:+-]*)\}`(?P<content>[^`]*)`|(?P<code>`+)[^`].*?(?P=code)", re.S)
_DIRECTIVE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[^}\s]+)\}[ \t]*(?P<argument>.*?)\n"
                        r"(?P<body>.*?)^(?P=fence)[ \t]*$\n?", re.M | re.S)
_PLAIN_FENCE = r"^(?P<plain>`{3,}|~{3,})(?![{`~]).*?\n.*?^(?P=plain)[ \t]*$\n?"
# a directive (its body is converted inside), or a code fence (left as it is)
_BLOCK = re.compile(f"{_DIRECTIVE.pattern}|{_PLAIN_FENCE}", re.M | re.S)
_TARGET = re.compile(r"^\((?P<label>[^)\s]+)\)=[ \t]*\n", re.M)
# display math, labelled or not: taken pair by pair, so that a label never reaches back to an earlier block
_DISPLAY_MATH = re.compile(r"^(?P<indent>[ \t]*)\$\$(?P<body>(?:(?!\$\$).)*)\$\$(?:[ \t]*\((?P<label>[^)\s]+)\))?[ \t]*$", re.M | re.S)
_OPTION = re.compile(r"^:(?P<key>[\w-]+):[ \t]*(?P<value>.*)$")
_EXPLICIT = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", re.S)

# What a reader must not see in a converted Markdown cell: a role, a directive's fence, a
# target, a labelled equation, a directive's option line, a substitution.
MYST_LEFTOVER = re.compile(
    r"\{[A-Za-z][\w:+-]*\}`"            # {ref}`...`, {eq}`...`, {cite:t}`...`
    r"|^\s*(`{3,}|:{3,})\s*\{"          # ```{exercise}, :::{note}
    r"|^\s*:{3,}"                       # a colon fence of any kind
    r"|^\([^)\s]+\)=\s*$"               # (label)=
    r"|\$\$\s*\([^)\s]+\)"              # $$ (label)
    r"|^:(label|class|name|nonumber|width|alt|align):"  # a directive's options
    r"|\{\{[^}]*\}\}",                  # {{ substitution }}
    re.M)

ADMONITIONS = {"note": "Note", "tip": "Tip", "hint": "Hint", "important": "Important", "warning": "Warning",
               "caution": "Caution", "attention": "Attention", "danger": "Danger", "error": "Error",
               "seealso": "See also", "admonition": None}


@dataclasses.dataclass
class Converter:
    """Turns one page's Markdown into plain Markdown; counts what it converted, lists its links."""

    book: Book
    page: str                     # the toc name, e.g. "chapters/08_online_softmax"
    base: str                     # the published book's address
    counts: dict = dataclasses.field(default_factory=dict)
    links: list = dataclasses.field(default_factory=list)

    def count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def link(self, text: str, target: Target) -> str:
        self.links.append(target)
        return f"[{text}]({target.url(self.base)})"

    # roles ----------------------------------------------------------------------------------

    def role(self, name: str, content: str) -> str:
        where = f"{self.page}: {{{name}}}`{content}`"
        explicit = _EXPLICIT.fullmatch(content)
        text, target = (explicit.group("text"), explicit.group("target")) if explicit else (None, content.strip())
        self.count(f"role {name}")
        if name in ("ref", "prf:ref"):
            found = self.book.label(target, where)
            return self.link(text or found.text, found)
        if name == "numref":
            found = self.book.label(target, where)
            number = re.search(r"\d+(\.\d+)*", found.text)
            return self.link(text.replace("%s", number.group(0)) if text and number else found.text, found)
        if name == "eq":
            found = self.book.equation(target, where)
            return self.link(text or found.text, found)
        if name == "doc":
            found = self.book.doc(posixpath.normpath(posixpath.join(posixpath.dirname(self.page), target))
                                  if not target.startswith("/") else target.lstrip("/"), where)
            return self.link(text or found.text, found)
        if name in ("cite", "cite:p", "cite:t"):
            keys = [key.strip() for key in target.split(",") if key.strip()]
            found = [self.book.citation(key, where) for key in keys]
            if name == "cite:t":
                return "; ".join(self.link(re.sub(r", (\d{4}[a-z]?|n\.d\.)$", r" (\1)", c.text), c) for c in found)
            return "(" + "; ".join(self.link(c.text, c) for c in found) + ")"
        raise ValueError(f"{where}: the Jupyter edition does not know the role {{{name}}}")

    def inline(self, markdown: str) -> str:
        """Every role of ``markdown`` replaced; inline code spans kept as they are."""
        return _INLINE.sub(lambda m: self.role(m.group("role"), m.group("content")) if m.group("role")
                           else m.group(0), markdown)

    # blocks ---------------------------------------------------------------------------------

    def equation(self, match: re.Match) -> str:
        if not match.group("label"):
            return match.group(0)
        found = self.book.equation(match.group("label"), f"{self.page}: $$ ... $$ ({match.group('label')})")
        self.count("labelled equation")
        indent = match.group("indent")
        return f"{indent}$$\n{indent}{match.group('body').strip()}\n{indent}\\tag{{{found.text.strip('()')}}}\n{indent}$$"

    def directive(self, match: re.Match) -> str:
        name, argument = match.group("name"), match.group("argument").strip()
        options, lines = {}, match.group("body").split("\n")
        while lines and _OPTION.match(lines[0]):
            option = _OPTION.match(lines[0])
            options[option.group("key")] = option.group("value").strip()
            lines.pop(0)
        body = self.blocks("\n".join(lines).strip("\n"))
        where = f"{self.page}: {{{name}}} {argument}".rstrip()
        self.count(f"directive {name}")
        if name == "exercise":
            shown = self.book.label(options["label"], where).text if "label" in options else "Exercise"
            title = f" ({self.inline(argument)})" if argument else ""
            return f"### {shown}{title}\n\n{body}\n"
        if name == "solution":
            shown = self.book.label(argument, where).text
            return f"<details>\n<summary>Solution to {shown}</summary>\n\n{body}\n\n</details>\n"
        if name.startswith("prf:"):
            shown = (self.book.label(options["label"], where).text if "label" in options
                     else name[4:].capitalize())
            title = f" ({self.inline(argument)})" if argument else ""
            return _quote(f"**{shown}{title}.** {body}")
        if name in ADMONITIONS:
            title = self.inline(argument) if name == "admonition" else ADMONITIONS[name]
            if "dropdown" in options.get("class", ""):
                return f"<details>\n<summary>{title}</summary>\n\n{body}\n\n</details>\n"
            return _quote(f"**{title}**\n\n{body}")
        if name in ("figure", "image"):
            return self.figure(argument, options, body, where)
        if name == "math":
            tag = ""
            if "label" in options:
                tag = f"\n\\tag{{{self.book.equation(options['label'], where).text.strip('()')}}}"
            return f"$$\n{body}{tag}\n$$\n"
        raise ValueError(f"{where}: the Jupyter edition does not know the directive {{{name}}}")

    def figure(self, source: str, options: dict, caption: str, where: str) -> str:
        """An image from the repository (a notebook in Colab has no folder beside it)."""
        settings = config()
        url = settings["repository"]["url"].replace("https://github.com/", "https://raw.githubusercontent.com/")
        path = posixpath.normpath(posixpath.join(posixpath.dirname(self.page), source))
        alt = options.get("alt") or re.sub(r"[*_`$]", "", caption).strip() or source
        image = f'<img src="{url}/{settings["repository"].get("branch", "main")}/{path}" alt="{alt}"' + (
            f' width="{options["width"]}"' if "width" in options else "") + ">"
        if "name" in options and caption:
            caption = f"*{self.book.label(options['name'], where).text}.* {caption}"
        return f"{image}\n\n{caption}\n" if caption else f"{image}\n"

    def blocks(self, markdown: str) -> str:
        """Directives (outermost first, their bodies converted inside), targets, labelled equations
        and roles converted; code fences left as they are."""
        out, position = [], 0
        for match in _BLOCK.finditer(markdown):
            out.append(self.text(markdown[position:match.start()]))
            out.append(self.directive(match) if match.group("name") else match.group(0))
            position = match.end()
        out.append(self.text(markdown[position:]))
        return "".join(out)

    def text(self, markdown: str) -> str:
        markdown, targets = _TARGET.subn("", markdown)
        for _ in range(targets):
            self.count("target")
        out, position = [], 0
        for match in _DISPLAY_MATH.finditer(markdown):
            out += [self.inline(markdown[position:match.start()]), self.equation(match)]
            position = match.end()
        return "".join(out + [self.inline(markdown[position:])])


def _quote(markdown: str) -> str:
    return "\n".join(f"> {line}".rstrip() for line in markdown.strip("\n").split("\n")) + "\n"


# --- notebooks --------------------------------------------------------------------------------

HIDDEN_INPUT = {"remove-input", "hide-input"}
#: the tag of a Markdown cell that holds a live figure's placeholder (_static/live/)
LIVE_FIGURE = "live-figure"


def convert_notebook(notebook: dict, converter: Converter) -> dict:
    """A copy of ``notebook`` whose Markdown cells hold no MyST; the code cells the book hides
    are collapsed in JupyterLab (``jupyter.source_hidden``); live figures' placeholders are
    dropped (their static figures stay). Outputs are kept."""
    notebook = copy.deepcopy(notebook)
    # a live figure's placeholder is HTML for the book's scripts; the static figure after it stays
    notebook["cells"] = [cell for cell in notebook["cells"]
                         if LIVE_FIGURE not in cell.get("metadata", {}).get("tags", [])]
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = converter.blocks("".join(cell["source"])).splitlines(keepends=True)
            cell.get("metadata", {}).pop("tags", None)
        elif cell["cell_type"] == "code" and HIDDEN_INPUT & set(cell.get("metadata", {}).get("tags", [])):
            cell["metadata"].setdefault("jupyter", {})["source_hidden"] = True
    return notebook


def leftovers(notebook: dict) -> list[str]:
    """The lines of Markdown cells that still hold MyST syntax."""
    found = []
    for number, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] == "markdown":
            source = "".join(cell["source"])
            for match in MYST_LEFTOVER.finditer(source):
                line = source[source.rfind("\n", 0, match.start()) + 1:].split("\n", 1)[0]
                found.append(f"cell {number}: {line}")
    return found


def write_edition(out: pathlib.Path, book: Book, student: bool = False) -> dict[str, Converter]:
    """Write every notebook page of the toc, converted, to ``out`` at its own path.

    ``student``: the student edition, without solutions and with a check cell after each checked
    exercise (``attnlib.book.exercises.student_notebook``), converted the same way.
    Returns page -> its converter (counts and links).
    """
    if student:
        from attnlib.book import exercises
    base, done = book_url(), {}
    for page in notebook_pages():
        notebook = json.loads((ROOT / f"{page}.ipynb").read_text())
        if student:
            notebook = exercises.student_notebook(notebook)
        converter = Converter(book, page, base)
        converted = convert_notebook(notebook, converter)
        left = leftovers(converted)
        if left:
            raise ValueError(f"{page}: MyST left in the Jupyter edition:\n  " + "\n  ".join(left))
        target = out / f"{page}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(converted, indent=1, ensure_ascii=False) + "\n")
        done[page] = converter
    return done


# --- publishing ------------------------------------------------------------------------------


def publish(folder: pathlib.Path, remote: str, branch: str, message: str) -> None:
    """Force-push ``folder`` as the single commit of ``branch`` on ``remote``: the edition is made
    anew from the book on every publish, so its branch keeps no history (no outputs pile up)."""
    with tempfile.TemporaryDirectory() as git_dir:
        def git(*args: str) -> None:
            subprocess.run(["git", f"--git-dir={git_dir}", f"--work-tree={folder}", *args], check=True)

        git("init", "--quiet", f"--initial-branch={branch}")
        git("add", "--all")
        git("-c", "user.name=publish workflow", "-c", "user.email=actions@users.noreply.github.com",
            "commit", "--quiet", "-m", message)
        git("push", "--quiet", "--force", remote, f"HEAD:refs/heads/{branch}")


def write_binder_environment(folder: pathlib.Path, commit: str, settings: dict | None = None) -> None:
    """``binder/`` for the edition's branch, which the Binder button opens: the book's Binder
    environment (``binder/``: requirements.txt, runtime.txt) with attnlib installed from the
    repository at ``commit``, the commit the edition was made from, instead of from a checkout
    (the branch holds only the notebooks)."""
    url = (settings or config())["repository"]["url"].rstrip("/")
    source = (ROOT / "binder" / "requirements.txt").read_text()
    if source.splitlines().count("-e .") != 1:
        raise ValueError("binder/requirements.txt should install attnlib from the checkout with one '-e .' line")
    lines = [f"attnlib @ git+{url}@{commit}" if line == "-e ." else line for line in source.splitlines()]
    shutil.copytree(ROOT / "binder", folder / "binder", dirs_exist_ok=True)  # runtime.txt and any other file
    (folder / "binder" / "requirements.txt").write_text("\n".join(lines) + "\n")


EDITION_README = """# The Jupyter edition of *{title}*

Written by the publishing workflow from `{commit}` of {url} (`tools/jupyter_edition.py`);
do not edit it here. Each notebook is its chapter with the book's markup turned into Markdown
that Colab and JupyterLab render: cross-references, equation numbers and citations link into
the published book, {book}.
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python tools/jupyter_edition.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("jupyter", "the chapters for Colab and Jupyter"),
                            ("student", "the same without solutions, with check cells")):
        edition = sub.add_parser(name, help=help_text)
        edition.add_argument("out", type=pathlib.Path)
        edition.add_argument("--html", type=pathlib.Path, default=ROOT / "_build" / "html")
    push = sub.add_parser("publish", help="force-push an edition folder as the one commit of a branch")
    push.add_argument("folder", type=pathlib.Path)
    push.add_argument("remote")
    push.add_argument("--branch", help="default: jupyter_edition_branch in _config.yml, which the Colab button opens")
    push.add_argument("--commit", default="HEAD")
    args = parser.parse_args(argv)
    if args.command == "publish":
        settings = config()
        (args.folder / "README.md").write_text(EDITION_README.format(
            title=settings["title"], commit=args.commit, url=settings["repository"]["url"], book=book_url(settings)))
        write_binder_environment(args.folder, args.commit, settings)
        publish(args.folder, args.remote, args.branch or edition_branch(settings), f"Jupyter edition of {args.commit}")
        return
    try:
        book = Book(args.html)
    except FileNotFoundError as error:
        parser.error(str(error))
    for page, converter in write_edition(args.out, book, student=args.command == "student").items():
        summary = ", ".join(f"{n} {kind}" for kind, n in sorted(converter.counts.items()))
        print(f"wrote {args.out / page}.ipynb ({summary or 'nothing to convert'})")


if __name__ == "__main__":
    main()
