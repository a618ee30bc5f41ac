"""The book builds with warnings as errors, and the HTML has what a reader needs."""
import importlib.util
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
JUPYTER_BOOK = pathlib.Path(sys.executable).with_name("jupyter-book")


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [chapter["file"] for part in toc["parts"] for chapter in part["chapters"]]


@pytest.fixture(scope="module")
def html(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("book")
    result = subprocess.run(
        [str(JUPYTER_BOOK), "build", str(ROOT), "--path-output", str(out), "-W", "-n", "--keep-going"],
        capture_output=True, text=True, timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    return out / "_build" / "html"


def test_every_chapter_in_the_toc_exists_and_every_chapter_is_in_the_toc():
    listed = {f for f in toc_files() if f.startswith("chapters/")}
    on_disk = {f"chapters/{p.stem}" for p in (ROOT / "chapters").glob("[0-9][0-9]_*.ipynb")}
    assert listed == on_disk


@pytest.mark.book
def test_every_toc_entry_is_built(html):
    for name in toc_files():
        assert (html / f"{name}.html").is_file(), name


@pytest.mark.book
def test_chapters_have_numbered_equations_launch_buttons_and_hidden_install_cells(html):
    url = re.search(r"^\s+url:\s*(\S+)", (ROOT / "_config.yml").read_text(), flags=re.M).group(1)
    repo_path = url.removeprefix("https://github.com/")
    for name in toc_files():
        if not name.startswith("chapters/"):
            continue
        page = (html / f"{name}.html").read_text()
        assert f"colab.research.google.com/github/{repo_path}/blob/main/{name}.ipynb" in page, name
        assert f"mybinder.org/v2/gh/{repo_path}/main" in page, name
        assert "Installs attnlib from the book" not in page, f"{name}: the install cell is visible"
        assert 'class="eqno"' in page or "math notranslate" in page, name


@pytest.mark.book
def test_bibliography_is_rendered(html):
    page = (html / "bibliography.html").read_text()
    assert "attention is all you need" in page.lower()


MATHJAX_CDN = "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def render_in_browser(page: pathlib.Path) -> str:
    """The page's DOM after headless Chromium has run its scripts (MathJax included)."""
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         f"--user-data-dir={page.parent / '.chromium-profile'}", "--virtual-time-budget=20000",
         "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.mark.book
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium); make test installs it when run as root")
def test_math_renders_without_errors_in_a_browser(html):
    """Every formula of every chapter typesets in MathJax 3 (served from a local copy: no network here)."""
    local_mathjax = html / "_static" / "mathjax-local"
    shutil.copytree(pathlib.Path(importlib.util.find_spec("mathjax").submodule_search_locations[0])
                    / "static" / "mathjax" / "es5", local_mathjax)
    checked = 0
    for name in ["intro", *toc_files()]:
        page = html / f"{name}.html"
        source = page.read_text()
        formulas = source.count('class="math notranslate')
        if formulas == 0:
            continue
        assert MATHJAX_CDN in source, f"{name}: MathJax is no longer loaded from {MATHJAX_CDN}"
        local = page.with_name(page.stem + ".offline.html")
        relative = pathlib.Path("../" * name.count("/")) / "_static" / "mathjax-local" / "tex-mml-chtml.js"
        local.write_text(source.replace(MATHJAX_CDN, relative.as_posix()))
        dom = render_in_browser(local)
        typeset = dom.count("<mjx-container")
        assert typeset >= formulas, f"{name}: {typeset} of {formulas} formulas typeset"
        # a syntax error becomes <mjx-merror>; an unknown macro is typeset as red text
        errors = re.findall(r'data-mjx-error="([^"]*)"|<mjx-merror|<mjx-mtext[^>]*color: red', dom)
        assert not errors, f"{name}: {len(errors)} MathJax errors, e.g. {errors[:3]}"
        checked += 1
    assert checked >= 2, "expected the intro and at least one chapter to hold formulas"
