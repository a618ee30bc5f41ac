import os
import pathlib
import subprocess
import sys

import pytest
from hypothesis import settings

# tests import their helpers (install_cells, reference) and tools/book_pages.py, the list of
# the book's notebooks that _toc.yml gives, as top-level modules
sys.path.insert(0, str(pathlib.Path(__file__).parent))
sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "tools"))

# No test reaches a model hub (attnlib.checkpoints reads local files only; this holds
# transformers to that everywhere, the notebooks' kernels included)
os.environ["HF_HUB_OFFLINE"] = "1"

# CI must pass or fail on the code, not on the draw: there, property tests
# replay a fixed sequence of examples; elsewhere each run explores new ones.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="session")
def book_html(tmp_path_factory) -> pathlib.Path:
    """The HTML book, built once per test session with warnings as errors (tests/test_book.py),
    for the tests that read what the book shows (the Jupyter edition, the assignments)."""
    root = pathlib.Path(__file__).resolve().parents[1]
    out = tmp_path_factory.mktemp("book")
    result = subprocess.run(
        [str(pathlib.Path(sys.executable).with_name("jupyter-book")), "build", str(root), "--path-output", str(out),
         "-W", "-n", "--keep-going"],
        capture_output=True, text=True, timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    return out / "_build" / "html"
