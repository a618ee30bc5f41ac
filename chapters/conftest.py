"""nbval settings for the chapters.

- stderr (warnings, progress bars) is not compared.
- A cell tagged ``needs-triton`` prints what Triton's kernel computed, or says in one line
  that it skipped. Where Triton is not installed (it has no wheels for macOS or Windows) the
  cell still runs, so that the chapter goes on, but its stored output, made with Triton, is
  not compared: the cell is reported as skipped, with that reason.
- A cell tagged ``needs-checkpoints`` (Chapter 14) does the same for the trained checkpoints
  that attnlib.checkpoints loads: where their packages are missing it prints one line, and
  its stored output is not compared.
- No model hub is reached: HF_HUB_OFFLINE=1 for every kernel nbval starts.
- After a page's cells, its solutions run in the same kernel (items such as ``Solution ex-08-why-max``).
"""
import importlib.util
import os
import pathlib
import platform
import sys
from collections import defaultdict

import nbformat
import nbval.plugin
import pytest

# tests/solution_cells.py (the solutions' code blocks), imported where solutions are collected: a
# copy of this file run elsewhere (tests/test_jupyter_edition.py) passes --no-solutions
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))

TRITON_TAG = "needs-triton"
TRITON_INSTALLED = importlib.util.find_spec("triton") is not None
CHECKPOINTS_TAG = "needs-checkpoints"
os.environ["HF_HUB_OFFLINE"] = "1"

_compare_outputs = nbval.plugin.IPyNbCell.compare_outputs


def _without_stderr(outputs):
    return [out for out in outputs if not (out.get("output_type") == "stream" and out.get("name") == "stderr")]


def _why_triton_is_missing():
    if platform.system() == "Linux":
        return "Triton is not installed"
    return f"Triton publishes no wheels for {platform.system()}"


def _checkpoints_missing():
    from attnlib import checkpoints
    return sorted({package for name in checkpoints.CHECKPOINTS for package in checkpoints.missing(name)})


def compare_outputs(self, test, ref, skip_compare=None):
    if not TRITON_INSTALLED and TRITON_TAG in self.cell.metadata.get("tags", []):
        pytest.skip(f"its stored output was made with Triton's kernel; {_why_triton_is_missing()}")
    if CHECKPOINTS_TAG in self.cell.metadata.get("tags", []) and _checkpoints_missing():
        pytest.skip(f"its stored output was made with the trained checkpoints; not installed: "
                    f"{', '.join(_checkpoints_missing())}")
    return _compare_outputs(self, _without_stderr(test), _without_stderr(ref), skip_compare)


nbval.plugin.IPyNbCell.compare_outputs = compare_outputs


# Every page's solutions, after its own cells and in its kernel: one execution of the page serves
# nbval's comparison and the solutions. Not in the second numeric environment nor where a package
# is hidden (--no-solutions): a solution has no stored output to compare there.
def pytest_addoption(parser):
    parser.addoption("--no-solutions", action="store_true",
                     help="do not run each page's solutions after its cells (chapters/conftest.py)")


class SolutionCell(nbval.plugin.IPyNbCell):
    """A solution's code, run in its page's kernel after the page's cells, as a student who
    copies it to the end of the chapter would: it must run, and ``attnlib.book.exercises.check``
    must not answer "not yet"."""

    def runtest(self):
        import solution_cells
        if not TRITON_INSTALLED and solution_cells.RUNS_TRITON.search(self.cell.source):
            pytest.skip(f"it runs Triton's kernel; {_why_triton_is_missing()}")
        super().runtest()  # no stored output: nbval only runs it
        printed = "".join(out.get("text", "") for out in self.test_outputs if out.get("output_type") == "stream")
        if "not yet" in printed:
            self.raise_cell_error(f"{self.name}: a check answered 'not yet'", printed)

    def reportinfo(self):
        return self.fspath, 0, f"{self.fspath.relto(self.config.rootdir)}::{self.name}"


_collect_cells = nbval.plugin.IPyNbFile.collect


def collect_cells_then_solutions(self):
    yield from _collect_cells(self)
    if self.config.getoption("no_solutions", False):
        return
    import solution_cells
    blocks = solution_cells.solution_blocks(self.nb)
    for number, (name, (_, code)) in enumerate(zip(solution_cells.item_names(blocks), blocks)):
        yield SolutionCell.from_parent(self, name=name, cell_num=len(self.nb.cells) + number,
                                       cell=nbformat.v4.new_code_cell(code), options=defaultdict(bool))


nbval.plugin.IPyNbFile.collect = collect_cells_then_solutions
