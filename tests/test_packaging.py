"""The wheel: the whole library with the book's helpers and stored results, its metadata,
and an install beside torch alone that runs the README's snippet without the book's
packages."""
import email
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import jupyter_edition  # noqa: E402
import make  # noqa: E402

#: what attnlib[book] installs; the library must neither install nor import any of them
BOOK_PACKAGES = ("matplotlib", "sympy", "scipy", "IPython", "ipywidgets", "tqdm", "numpy")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    """The wheel pip builds from the project (from a copy, so that no build/ folder is left behind)."""
    folder = tmp_path_factory.mktemp("wheel")
    source = folder / "source"
    shutil.copytree(ROOT / "attnlib", source / "attnlib", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(folder),
         str(source)],
        check=True, capture_output=True, text=True,
    )
    (built,) = folder.glob("attnlib-*.whl")
    return built


def metadata_of(wheel: pathlib.Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(archive.read(name))


def readme_snippet(path: pathlib.Path, section: str | None = None) -> str:
    """The first Python block of ``path`` (of its ``## section`` when given)."""
    text = path.read_text()
    if section is not None:
        text = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", text, flags=re.S).group(1)


def test_wheel_holds_every_module_and_the_stored_results(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    package = ROOT / "attnlib"
    shipped = {p for p in package.rglob("*.py") if "__pycache__" not in p.parts}
    shipped |= set((package / "book" / "results").glob("*.json")) | set((package / "book" / "data").glob("*.txt"))
    shipped |= {package / "py.typed"}
    expected = {p.relative_to(ROOT).as_posix() for p in shipped}
    assert expected <= names, f"missing from the wheel: {sorted(expected - names)}"
    assert any(n.endswith(".dist-info/licenses/attnlib/book/data/NOTICE.txt") for n in names), sorted(names)


def test_metadata_names_no_dependency_but_the_extras_and_describes_the_library(wheel):
    metadata = metadata_of(wheel)
    requirements = metadata.get_all("Requires-Dist")
    assert all("extra ==" in r for r in requirements), f"the library must need nothing but torch: {requirements}"
    assert not any(r.startswith("torch") for r in requirements), "torch is a prerequisite, never a dependency"
    book = {re.match(r"[\w-]+", r).group(0) for r in requirements if 'extra == "book"' in r}
    assert book == {"numpy", "sympy", "scipy", "matplotlib", "tqdm", "ipywidgets"}, book
    assert set(metadata.get_all("Provides-Extra")) == {"book", "gpu", "transformers", "checkpoints"}
    # the PSF's text ships in attnlib/book/data, so its licence is in the expression
    assert metadata["License-Expression"] == "MIT AND PSF-2.0"
    assert set(metadata.get_all("License-File")) == {"LICENSE", "attnlib/book/data/NOTICE.txt"}
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL"))
    settings = jupyter_edition.config()
    assert urls["Source"] == urls["Homepage"] == settings["repository"]["url"]
    assert urls["Documentation"] == jupyter_edition.book_url(settings)
    assert "Typing :: Typed" in metadata.get_all("Classifier")
    description = metadata.get_payload()
    assert description.strip() == (ROOT / "attnlib" / "README.md").read_text().strip()
    assert "make " not in description, "the library's description is not the book's README"
    assert f"({jupyter_edition.book_url()}api.html)" in description, "it links the book's API reference"


def test_the_package_readme_shows_the_books_readme_snippet():
    assert readme_snippet(ROOT / "attnlib" / "README.md") == readme_snippet(ROOT / "README.md", "Using attnlib")


def test_requirements_pins_fall_in_the_book_extras_ranges():
    """make installs requirements.txt and attnlib with --no-deps: its pins must satisfy attnlib[book]."""
    from packaging.requirements import Requirement

    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate():
                pins[requirement.name.lower()] = requirement.specifier
    extra = re.search(r"^book = \[(.*)\]$", (ROOT / "pyproject.toml").read_text(), flags=re.M).group(1)
    for text in re.findall(r'"([^"]+)"', extra):
        wanted = Requirement(text)
        pinned = pins[wanted.name.lower()]
        # the pinned version, or the lowest one a range allows, must be one the extra allows
        lowest = [s.version for s in pinned if s.operator in ("==", ">=")]
        assert lowest and all(wanted.specifier.contains(v) for v in lowest), \
            f"requirements.txt asks for {wanted.name}{pinned}, which attnlib[book] ({wanted}) does not allow"


def torch_install_arguments(version: str) -> list[str]:
    """pip's arguments for the torch this test runs with: a CPU build (``+cpu``) comes from
    PyTorch's CPU index when it can be reached, as ``make`` installs it, else from pip's own."""
    arguments = [f"torch=={version}"]
    if version.endswith("+cpu") and make.index_reachable(f"{make.CPU_INDEX}/torch/")[0]:
        arguments += ["--extra-index-url", make.CPU_INDEX]
    return arguments


LIBRARY_CHECK = """
import importlib.util, json, sys
import torch, attnlib
from attnlib import MultiHeadAttention
q, k, v = (torch.randn(1, 2, 600, 16, requires_grad=True) for _ in range(3))
attnlib.scaled_dot_product_attention(q, k, v, is_causal=True, backend="tiled").sum().backward()
MultiHeadAttention(32, 4, 2)(torch.randn(2, 5, 32))
import attnlib.masks, attnlib.positions, attnlib.checkpoints
book = {BOOK!r}
print(json.dumps({"installed": sorted(n for n in book if importlib.util.find_spec(n) is not None),
                  "imported": sorted(n for n in book if n in sys.modules)}))
"""


def test_the_wheel_installs_beside_torch_alone_and_runs_the_readme_snippet(wheel, tmp_path):
    """A new venv with torch alone (no system packages), then the wheel without its extras:
    pip installs nothing else, the README's snippet runs, and no book package is imported."""
    venv = tmp_path / "venv"
    # this pip installs into the new venv (--python), which then needs no pip of its own; no
    # byte-compiling of torch's files (--no-compile): the two cut the test's time by half
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = make.venv_file(venv, "python")
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1"}

    def pip(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), *args],
                              capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    pip("install", "--quiet", "--no-compile", *torch_install_arguments(torch.__version__))
    with_torch = pip("list", "--format=freeze").splitlines()
    # --no-index: the wheel must need nothing that is not installed already
    pip("install", "--quiet", "--no-compile", "--no-index", str(wheel))
    added = sorted(set(pip("list", "--format=freeze").splitlines()) - set(with_torch))
    assert added == ["attnlib==0.1.0"], added

    book_installed_by_torch = [name for name in BOOK_PACKAGES
                               if any(line.lower().startswith(f"{name.lower()}==") for line in with_torch)]
    snippet = readme_snippet(ROOT / "README.md", "Using attnlib")
    run = subprocess.run([str(python), "-c", snippet + LIBRARY_CHECK.replace("{BOOK!r}", repr(BOOK_PACKAGES))],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "backend='auto' ran 'naive'" in run.stdout, run.stdout  # the snippet's print(attnlib.last_dispatch())
    found = json.loads(run.stdout.splitlines()[-1])
    # what torch itself requires (sympy, for torch.fx's symbolic shapes) may be there; nothing else
    assert set(found["installed"]) == set(book_installed_by_torch), found
    assert found["imported"] == [], found
