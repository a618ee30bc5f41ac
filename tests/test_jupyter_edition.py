"""The Jupyter edition (tools/jupyter_edition.py): every notebook page of the toc converts; no
Markdown cell keeps MyST; every link it writes opens a page and an anchor of the built book and
reads as the book's own rendering of the same reference; a converted chapter runs and prints its
stored outputs; the Colab button opens the edition on the branch the publishing workflow writes."""
import json
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import book_pages  # noqa: E402
import jupyter_edition  # noqa: E402
from install_cells import EXTRAS, first_code_cell, install_cell_source, repository  # noqa: E402

# builds the book (tests/conftest.py: book_html), like tests/test_book.py
pytestmark = pytest.mark.book

BASE = jupyter_edition.book_url()
LINK = re.compile(r"\]\((?P<url>" + re.escape(BASE) + r"[^)\s]*)\)")
# a link and the text it shows: [text](url)
SHOWN_LINK = re.compile(r"\[(?P<text>[^\[\]]+)\]\((?P<url>" + re.escape(BASE) + r"[^)\s]*)\)")


@pytest.fixture(scope="module")
def book(book_html):
    return jupyter_edition.Book(book_html)


@pytest.fixture(scope="module")
def editions(book, tmp_path_factory):
    """The Jupyter and the student edition, written once: (folder, page -> converter) for each."""
    written = {}
    for kind in ("jupyter", "student"):
        out = tmp_path_factory.mktemp(kind)
        written[kind] = out, jupyter_edition.write_edition(out, book, student=kind == "student")
    return written


def markdown_cells(path: pathlib.Path) -> list[str]:
    return ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "markdown"]


def test_every_notebook_page_of_the_toc_is_listed_with_its_section_pages():
    listed = jupyter_edition.notebook_pages()
    assert listed == [page.file for page in book_pages.chapter_pages()]
    assert {"chapters/08_online_softmax", "chapters/10_backward_and_training",
            "chapters/10_2_training"} <= set(listed)


def test_the_book_address_is_its_github_pages_site_unless_the_config_names_one():
    assert jupyter_edition.book_url({"repository": {"url": "https://github.com/Owner/name"}}) == \
        "https://owner.github.io/name/"
    assert jupyter_edition.book_url({"html": {"baseurl": "https://book.example.org"},
                                     "repository": {"url": "https://github.com/o/n"}}) == "https://book.example.org/"
    with pytest.raises(ValueError, match="repository.url"):
        jupyter_edition.book_url({"repository": {"url": "https://gitlab.com/o/n"}})


def test_every_notebook_page_converts(editions):
    for kind, (out, converters) in editions.items():
        assert list(converters) == jupyter_edition.notebook_pages(), kind
        for page in converters:
            source = json.loads((ROOT / f"{page}.ipynb").read_text())
            converted = json.loads((out / f"{page}.ipynb").read_text())
            if kind == "jupyter":
                # every cell but the live figures' placeholders (their static figures stay)
                kept = [c for c in source["cells"]
                        if jupyter_edition.LIVE_FIGURE not in c.get("metadata", {}).get("tags", [])]
                assert len(converted["cells"]) == len(kept), page
                code = [(c["source"], c["outputs"]) for c in converted["cells"] if c["cell_type"] == "code"]
                assert code == [(c["source"], c["outputs"]) for c in source["cells"] if c["cell_type"] == "code"], \
                    f"{page}: the code cells and their stored outputs must be the chapter's"


def test_the_pattern_finds_every_kind_of_myst_markup():
    for markup in ["see {ref}`ch:x`", "{eq}`eq-a`", "{cite:t}`key`", "```{exercise} T", "````{solution} ex-1",
                   ":::{note}", ":::", "(ch:x)=", "$$ x $$ (eq-a)", ":label: ex-1", ":class: dropdown",
                   "{{ value }}"]:
        assert jupyter_edition.leftovers({"cells": [{"cell_type": "markdown", "source": markup}]}), markup
    for plain in ["```python\nx = {1: 2}\n```", "$f(x)$ (see below)", "[(8.1)](https://a.b/c.html#equation-x)",
                  "<details>\n<summary>Solution to Exercise 8.1</summary>\n\n</details>"]:
        assert not jupyter_edition.leftovers({"cells": [{"cell_type": "markdown", "source": plain}]}), plain
    # the control: the source chapters hold MyST, so the check can fail
    assert jupyter_edition.leftovers(json.loads((ROOT / "chapters" / "08_online_softmax.ipynb").read_text()))


def test_no_markdown_cell_of_either_edition_holds_myst(editions):
    for kind, (out, converters) in editions.items():
        for page in converters:
            assert not jupyter_edition.leftovers(json.loads((out / f"{page}.ipynb").read_text())), (kind, page)


def test_every_role_and_directive_of_the_chapters_is_converted(editions):
    """The counts match the markup in the source: none slips through unconverted as plain text."""
    _, converters = editions["jupyter"]
    for page, converter in converters.items():
        text = "\n".join(markdown_cells(ROOT / f"{page}.ipynb"))
        roles = len(re.findall(r"\{[A-Za-z][\w:+-]*\}`", text))
        directives = len(re.findall(r"^(`{3,}|:{3,})\{", text, flags=re.M))
        counts = converter.counts
        assert sum(n for kind, n in counts.items() if kind.startswith("role ")) == roles, page
        assert sum(n for kind, n in counts.items() if kind.startswith("directive ")) == directives, page


def test_every_link_opens_a_page_and_an_anchor_of_the_built_book(editions, book_html):
    checked = 0
    for kind, (out, converters) in editions.items():
        for page in converters:
            for cell in markdown_cells(out / f"{page}.ipynb"):
                for match in LINK.finditer(cell):
                    path, _, anchor = match.group("url")[len(BASE):].partition("#")
                    target = book_html / path
                    assert target.is_file(), f"{kind} {page}: {match.group('url')} names no page of the book"
                    if anchor:
                        assert f'id="{anchor}"' in target.read_text(), \
                            f"{kind} {page}: {match.group('url')} names no anchor of {path}"
                    checked += 1
    written = sum(len(c.links) for _, converters in editions.values() for c in converters.values())
    assert checked == written and checked > 500, (checked, written)


def rendered_references(html: str) -> dict[str, set[str]]:
    """What the built page shows for each internal reference: target (page#anchor) -> link texts."""
    from bs4 import BeautifulSoup

    shown = {}
    for link in BeautifulSoup(html, "html.parser").select("article a.reference.internal[href]"):
        shown.setdefault(link["href"], set()).add(re.sub(r"\s+", " ", link.get_text()).strip())
    return shown


def test_links_read_as_the_book_renders_the_same_reference(editions, book_html):
    """Equation numbers and citations are the text of the book's own link to the same target; a
    cross-reference's visible text holds the title the book shows (plus its number)."""
    out, converters = editions["jupyter"]
    compared = {"eq": 0, "cite": 0, "ref": 0}
    for page in converters:
        page_html = f"{page}.html"
        book_links = {}
        for href, texts in rendered_references((book_html / page_html).read_text()).items():
            target = (pathlib.PurePosixPath(page_html).parent / href).as_posix() if not href.startswith("#") \
                else page_html + href
            target = re.sub(r"[^/]+/\.\./", "", target)
            book_links.setdefault(target, set()).update(texts)
        for cell in markdown_cells(out / f"{page}.ipynb"):
            for match in SHOWN_LINK.finditer(cell):
                text, target = match.group("text"), match.group("url")[len(BASE):]
                if target not in book_links:
                    continue
                if "#equation-" in target:
                    assert text in book_links[target], (page, text, book_links[target])
                    compared["eq"] += 1
                elif target.startswith("bibliography.html#"):
                    # {cite:t} reads "Dao et al. (2022)" where the book writes "Dao et al. [2022]",
                    # linking the year only
                    textual = re.fullmatch(r".+ \((\d{4}[a-z]?|n\.d\.)\)", text)
                    assert (textual.group(1) if textual else text) in book_links[target], \
                        (page, text, book_links[target])
                    compared["cite"] += 1
                else:
                    assert any(shown in text for shown in book_links[target]), (page, text, book_links[target])
                    compared["ref"] += 1
    assert min(compared.values()) >= 10, compared


def test_chapter_8_reads_with_numbers_links_and_collapsed_solutions(editions):
    out, _ = editions["jupyter"]
    text = "\n".join(markdown_cells(out / "chapters" / "08_online_softmax.ipynb"))
    assert text.startswith("# Online softmax and tiling\n")
    assert f"[Chapter 7, The cost of attention]({BASE}chapters/07_cost_of_attention.html#ch-cost-of-attention)" in text
    assert "\\tag{8.1}" in text and f"[(8.1)]({BASE}chapters/08_online_softmax.html#equation-eq-row-output)" in text
    assert re.search(r"\(\[Dao et al\., 2022\]\(" + re.escape(BASE) + r"bibliography\.html#id\d+\)", text)
    assert "### Exercise 8.1 (The order of merging does not matter)" in text
    assert "<details>\n<summary>Solution to Exercise 8.1</summary>" in text
    assert "> **Proposition 8.1 (Merging is exact).**" in text
    student = "\n".join(markdown_cells(editions["student"][0] / "chapters" / "08_online_softmax.ipynb"))
    # the chapter's other collapsed parts (the backward, the threads) stay; only solutions go
    assert "### Exercise 8.1" in student and "<summary>Solution" not in student and "Solution to" not in student
    assert "<summary>The tiled backward, tile by tile</summary>" in student


def test_an_unknown_role_or_directive_is_an_error_that_names_it(book):
    converter = jupyter_edition.Converter(book, "chapters/08_online_softmax", BASE)
    with pytest.raises(ValueError, match=r"chapters/08_online_softmax: \{kbd\}`C`.*role \{kbd\}"):
        converter.blocks("press {kbd}`C`")
    with pytest.raises(ValueError, match=r"directive \{glue:figure\}"):
        converter.blocks("```{glue:figure} fig\n```\n")
    with pytest.raises(KeyError, match="no label 'ch:nowhere'"):
        converter.blocks("{ref}`ch:nowhere`")
    code = "`x = {1: 2}` stays code, and so does a fence:\n\n```python\nprint({1: 2})\n```\n"
    assert converter.blocks(code) == code


def test_citations_follow_the_books_et_al_rule(book):
    from pybtex.database import parse_string

    entries = parse_string("""
        @article{one, author = {Ré, Christopher}, title = {A}, year = {2020}}
        @article{two, author = {Dao, Tri and Ré, Christopher}, title = {B}, year = {2021}}
        @article{many, author = {Dao, Tri and Fu, Daniel and Ré, Christopher}, title = {C}, year = {2022}}
        @article{others, author = {Dehghani, Mostafa and others}, title = {D}, year = {2023}}""", "bibtex").entries
    assert [jupyter_edition.who(entries[k]) for k in ("one", "two", "many", "others")] == \
        ["Ré", "Dao and Ré", "Dao et al.", "Dehghani et al."]
    keys = set(re.findall(r"^@\w+\{([^,]+),", (ROOT / "references.bib").read_text(), flags=re.M))
    cited = set()
    for page in jupyter_edition.notebook_pages():
        for cell in markdown_cells(ROOT / f"{page}.ipynb"):
            for group in re.findall(r"\{cite(?::\w+)?\}`([^`]*)`", cell):
                cited.update(key.strip() for key in group.split(","))
    assert cited <= keys and cited <= set(book.citations), sorted(cited - set(book.citations))


def test_the_install_cell_is_the_one_the_install_cell_test_checks(editions):
    for kind, (out, converters) in editions.items():
        for page in converters:
            cell = first_code_cell(json.loads((out / f"{page}.ipynb").read_text()))
            extra = EXTRAS.get(pathlib.Path(page).name + ".ipynb")
            assert "".join(cell["source"]) == install_cell_source(*repository(), extra), (kind, page)


def test_a_converted_chapter_runs_and_prints_its_stored_outputs(editions, tmp_path):
    """nbval on the Jupyter edition of chapter 8, with the chapters' nbval settings."""
    out, _ = editions["jupyter"]
    folder = tmp_path / "chapters"
    folder.mkdir()
    shutil.copy(out / "chapters" / "08_online_softmax.ipynb", folder)
    shutil.copy(ROOT / "chapters" / "conftest.py", folder)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", str(folder / "08_online_softmax.ipynb"), "--nbval", "-p", "no:cacheprovider",
         "-p", "no:xdist", "-q", "--rootdir", str(tmp_path), "-c", "/dev/null", "--nbval-cell-timeout=600", "--no-solutions"],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert re.search(r"\b\d{2,} passed", result.stdout), result.stdout[-500:]


def test_the_download_menus_notebook_is_the_edition_served_with_the_book(editions, book_html):
    """Every notebook page's download menu offers ".ipynb": the Jupyter edition of that page, which
    the build writes beside the pages (_ext/launch_jupyter_edition.py), the same notebook the launch
    buttons open; the theme's link served the MyST source from _sources/."""
    out, _ = editions["jupyter"]
    for page in jupyter_edition.notebook_pages():
        html = (book_html / f"{page}.html").read_text()
        menu = html[html.index('class="dropdown dropdown-download-buttons"'):]
        menu = menu[:menu.index("</ul>")]
        links = re.findall(r'<a href="([^"]+)"[^>]*>(?:(?!</a>).)*?>\.ipynb</span>', menu, flags=re.S)
        assert len(links) == 1, f"{page}: the download menu's .ipynb links {links}"
        [link] = links
        assert "_sources" not in link, f"{page}: the download menu serves the MyST source {link}"
        served = (book_html / page).parent / link
        assert served.resolve() == (book_html / "jupyter-edition" / f"{page}.ipynb").resolve(), (page, link)
        assert served.read_text() == (out / f"{page}.ipynb").read_text(), f"{page}: not the Jupyter edition"


def test_the_launch_buttons_open_the_edition_on_the_branch_the_workflow_writes(editions, book_html, tmp_path):
    """Each chapter's Colab and Binder links name the edition's branch and the chapter's path; the
    workflow's publish step force-pushes the edition there, with a Binder environment that installs
    attnlib from the commit it was made from; after it every link names a notebook on that branch,
    and none of them holds MyST (what a reader would see raw)."""
    url, branch = repository()
    owner_name = url.removeprefix("https://github.com/")
    edition_branch = jupyter_edition.edition_branch()
    assert edition_branch != branch
    colab, binder, landing = {}, {}, []
    for page in jupyter_edition.notebook_pages():
        html = (book_html / f"{page}.html").read_text()
        found = set(re.findall(r'https://colab\.research\.google\.com/github/[^"]+', html))
        if not found:  # a chapter's landing page, with nothing to run (tests/test_book.py)
            landing.append(page)
            continue
        [colab[page]] = found
        assert colab[page] == f"https://colab.research.google.com/github/{owner_name}/blob/{edition_branch}/{page}.ipynb"
        [binder[page]] = set(re.findall(r'https://mybinder\.org/v2/gh/[^"]+', html))
        assert binder[page] == f"https://mybinder.org/v2/gh/{owner_name}/{edition_branch}?urlpath=tree/{page}.ipynb"
    assert landing == ["chapters/09_fused_kernel", "chapters/10_backward_and_training",
                       "chapters/12_scale_in_real_models", "chapters/14_trained_models"], landing
    steps = yaml.safe_load((ROOT / ".github" / "workflows" / "publish.yml").read_text())["jobs"]["build"]["steps"]
    runs = [step.get("run", "").strip() for step in steps]
    book_step = runs.index("make book")
    [edition_step] = [i for i, run in enumerate(runs) if "tools/jupyter_edition.py publish" in run]
    lines = runs[edition_step].splitlines()
    assert edition_step > book_step and lines[0] == "make jupyter-edition"
    assert lines[1].split()[:4] == [".venv/bin/python", "tools/jupyter_edition.py", "publish", "_build/jupyter"]
    assert "secrets.GITHUB_TOKEN" in steps[edition_step]["env"]["EDITION_REMOTE"]
    # the step's command, run against a local repository in GitHub's place, twice: one commit stays
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(remote)], check=True)
    out, _ = editions["jupyter"]
    for commit in ("first", "second"):
        subprocess.run([sys.executable, *lines[1].split()[1:3], str(out), str(remote), "--commit", commit],
                       check=True, cwd=ROOT)
    log = subprocess.run(["git", f"--git-dir={remote}", "log", "--format=%s", edition_branch],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    assert log[0] == "Jupyter edition of second" and log[1:] == [""], log
    def on_the_branch(path: str) -> str:
        shown = subprocess.run(["git", f"--git-dir={remote}", "show", f"{edition_branch}:{path}"],
                               capture_output=True, text=True)
        assert shown.returncode == 0, f"no {path} on the edition's branch"
        return shown.stdout

    for page in colab:
        assert not jupyter_edition.leftovers(json.loads(on_the_branch(f"{page}.ipynb"))), page
    # Binder builds the branch's binder/: the book's environment, attnlib from the edition's commit
    requirements = on_the_branch("binder/requirements.txt").splitlines()
    assert f"attnlib[book] @ git+{url}@second" in requirements and "-e .[book]" not in requirements, requirements
    source = (ROOT / "binder" / "requirements.txt").read_text().splitlines()
    assert ([line for line in requirements if not line.startswith("attnlib[book] @")]
            == [line for line in source if line != "-e .[book]"])
    assert on_the_branch("binder/runtime.txt") == (ROOT / "binder" / "runtime.txt").read_text()
