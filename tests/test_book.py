"""The book builds with warnings as errors, and the HTML has what a reader needs."""
import pathlib
import re
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
