import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

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


BOOK_BUILD_TIMEOUT = 1200


def build_book(out: pathlib.Path) -> str:
    """Build the HTML book into ``out/_build/html`` with warnings as errors; "" if it built, else
    the end of its log."""
    root = pathlib.Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [str(pathlib.Path(sys.executable).with_name("jupyter-book")), "build", str(root), "--path-output", str(out),
         "-W", "-n", "--keep-going"],
        capture_output=True, text=True, timeout=BOOK_BUILD_TIMEOUT,
    )
    return "" if result.returncode == 0 else (result.stdout[-6000:] + result.stderr[-3000:] or "no output")


@pytest.fixture(scope="session")
def book_html(tmp_path_factory, request) -> pathlib.Path:
    """The HTML book, built once per test run with warnings as errors (tests/test_book.py), for
    the tests that read what the book shows (the Jupyter edition, the assignments, the PDF).

    Under pytest-xdist the workers share one build: the first to ask makes the folder ``book``
    beside their own temporary folders (os.mkdir either creates it or fails, atomically) and
    builds; the others wait for its ``built.json``, which says whether it built and with what log."""
    if not hasattr(request.config, "workerinput"):  # not a pytest-xdist worker
        out = tmp_path_factory.mktemp("book")
        log = build_book(out)
        assert not log, log
        return out / "_build" / "html"
    out = tmp_path_factory.getbasetemp().parent / "book"
    outcome = out.with_name("built.json")
    try:
        out.mkdir()
    except FileExistsError:
        deadline = time.monotonic() + BOOK_BUILD_TIMEOUT + 60
        while not outcome.is_file():
            assert time.monotonic() < deadline, f"another worker's build of the book wrote no {outcome}"
            time.sleep(1)
    else:
        log = "the worker that built the book stopped with an error (its report has it)"
        try:
            log = build_book(out)
        finally:
            written = outcome.with_suffix(".partial")
            written.write_text(json.dumps({"log": log}))
            os.replace(written, outcome)  # atomic: a waiting worker reads all of it or nothing
    log = json.loads(outcome.read_text())["log"]
    assert not log, log
    return out / "_build" / "html"


@pytest.fixture(scope="module")
def own_book_html(book_html, tmp_path_factory) -> pathlib.Path:
    """A copy of the shared build for a module whose browser tests write probe pages beside the
    book's pages (for their relative links): another worker reading the shared build meanwhile
    (its pages listed with rglob) never meets them."""
    copy = tmp_path_factory.mktemp("own-book") / "html"
    shutil.copytree(book_html, copy)
    return copy


# pytest-xdist hands each file (--dist loadfile) to the next free worker in collection order
# (--no-loadscope-reorder: not its default, most tests first, which left the few-test files that
# run longest to the end, one worker busy while the other waited). The files that take longest in
# a fresh clone's `make test --durations` go first, so that the last files to run are short. The
# first file builds the book (book_html); the second needs no book, so that neither worker waits.
LONGEST_FIRST = [
    "tests/test_assignments.py",   # otter grades every chapter, under six seeds
    "tests/test_gpu_session.py",   # the GPU session rehearsed, a step run to its limit (~65 s)
    "tests/test_book.py",          # every page in Chromium at two widths (~120 s)
    "tests/test_book_pdf.py",      # the one-page book printed by Chromium (~60 s)
    # Triton compiles 95 kernels in a child: with its cache empty, as in CI (.ci/run), about 1.3 s
    # of CPU each (a sample of 8), against 0.03 s from a warm cache
    "tests/test_fused_compile.py",
    "tests/test_without_triton.py",
    "chapters/14_4_sinks_and_caches.ipynb",
    "chapters/10_2_training.ipynb",
    "tests/test_resolution.py",    # uv resolves every requirement file against PyPI
    "tests/test_jupyter_edition.py",
    "chapters/14_5_summary_and_exercises.ipynb",
    "chapters/12_2_positions.ipynb",
    "tests/test_without_checkpoints.py",
    "tests/test_interactive_figures.py",
    "chapters/08_online_softmax.ipynb",
    "chapters/03_variance_monte_carlo.ipynb",
    "tests/test_checkpoints.py",
]


def pytest_collection_modifyitems(config, items):
    """Run the files of LONGEST_FIRST first, in its order; the others after, as collected."""
    rank = {config.rootpath / name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path, len(rank)))
