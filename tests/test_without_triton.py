"""Where Triton has no wheels (macOS, Windows), the chapters still pass: their Triton cells
run, say in one line what they skipped, and are reported as skipped with the reason.

The chapters' conftest compares a cell tagged ``needs-triton`` only where Triton is
installed. Here Triton is hidden from a pytest process and its kernels
(``sys.modules["triton"] = None``: importing it fails, ``find_spec`` finds nothing), and
every page with Triton cells (Chapter 9's and Chapter 10's fused backward) is run under nbval
as a reader on a Mac would; the same run records what each Triton cell says.
"""
import re

import pytest

import book_pages
from hidden_packages import code_cells, mistagged_cells, nbval_without, printed_lines

CHAPTERS = book_pages.notebooks()
TAG = "needs-triton"
# how a cell asks whether Triton is there: the chapters' cell magic, attnlib's check, or find_spec
ASKS_FOR_TRITON = re.compile(r"^%%needs_triton|fused\.triton_installed\(\)|find_spec\(\"triton\"\)", re.M)
HIDDEN = ("triton",)


def test_every_cell_that_asks_for_triton_is_tagged_and_no_other():
    """An untagged Triton cell would fail nbval on a Mac; a tagged cell that never asks for
    Triton would hide its comparison there for no reason."""
    assert not mistagged_cells(CHAPTERS, ASKS_FOR_TRITON.search, TAG)


WITH_TRITON_CELLS = [path for path in CHAPTERS
                     if any(TAG in cell["metadata"].get("tags", []) for cell in code_cells(path))]


def test_the_pages_with_triton_cells_are_chapter_9_and_its_fused_backward():
    names = [path.name for path in WITH_TRITON_CELLS]
    assert "09_2_running_it.ipynb" in names and "10_4_fused_backward.ipynb" in names, names


@pytest.fixture(scope="module")
def run_without_triton(tmp_path_factory):
    return nbval_without(HIDDEN, WITH_TRITON_CELLS, TAG, tmp_path_factory.mktemp("without-triton"))


def test_the_triton_pages_pass_without_triton(run_without_triton):
    summary, _ = run_without_triton
    assert "Triton is not installed" in summary


def test_every_triton_cell_says_in_one_line_what_it_skipped_and_why(run_without_triton):
    """A reader without Triton (Colab's CPU runtime with an old torch, a Mac) sees one line
    per Triton cell, never an empty output or a missing figure without a word."""
    _, cells = run_without_triton
    for cell in cells:
        where, lines = cell["where"], printed_lines(cell)
        assert len(lines) == 1, f"{where} printed {lines}"
        assert not any("image/png" in out.get("data", {}) for out in cell["outputs"]), where
        if "find_spec(\"triton\")" in cell["source"]:  # the install cell
            assert lines[0].startswith("could not install Triton"), f"{where}: {lines[0]}"
        else:
            assert "Triton is not installed" in lines[0], f"{where}: {lines[0]}"
