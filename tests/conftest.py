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


# pytest-xdist hands each file (--dist loadfile) to the next free worker in collection order
# (--no-loadscope-reorder: not its default, most tests first, which left the few-test files that
# run longest to the end, one worker busy while the other waited). The files that take longest in
# a fresh clone's `make test --durations` go first, so that the last files to run are short.
LONGEST_FIRST = [
    "tests/test_assignments.py",   # otter grades every chapter, under six seeds
    "tests/test_book.py",          # every page in Chromium at two widths (~120 s)
    "tests/test_book_pdf.py",      # the one-page build printed by Chromium (~80 s)
    "tests/test_gpu_session.py",   # the GPU session rehearsed, a step run to its limit (~65 s)
    "tests/test_without_triton.py",
    "chapters/14_4_sinks_and_caches.ipynb",
    "chapters/10_2_training.ipynb",
    "tests/test_resolution.py",    # uv resolves every requirement file against PyPI
    "tests/test_jupyter_edition.py",
    "chapters/14_5_summary_and_exercises.ipynb",
    "chapters/12_scale_in_real_models.ipynb",
    "tests/test_without_checkpoints.py",
    "tests/test_interactive_figures.py",
    "chapters/08_online_softmax.ipynb",
    "chapters/03_variance_monte_carlo.ipynb",
    "tests/test_fused_compile.py",
    "tests/test_checkpoints.py",
]


def pytest_collection_modifyitems(config, items):
    """Run the files of LONGEST_FIRST first, in its order; the others after, as collected."""
    rank = {config.rootpath / name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path, len(rank)))
