"""Where Triton has no wheels (macOS, Windows), the chapters still pass: their Triton cells
run, say in one line what they skipped, and are reported as skipped with the reason.

The chapters' conftest compares a cell tagged ``needs-triton`` only where Triton is
installed. Here Triton is hidden from a pytest process and its kernels
(``sys.modules["triton"] = None``: importing it fails, ``find_spec`` finds nothing), and
every page with Triton cells (Chapter 9's and Chapter 10's fused backward) is run under nbval
as a reader on a Mac would, and once more to read what each Triton cell says.
"""
import json
import os
import pathlib
import re
import subprocess
import sys

import nbformat
from nbclient import NotebookClient

import book_pages

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHAPTERS = book_pages.notebooks()
TAG = "needs-triton"
# how a cell asks whether Triton is there: the chapters' cell magic, attnlib's check, or find_spec
ASKS_FOR_TRITON = re.compile(r"^%%needs_triton|fused\.triton_installed\(\)|find_spec\(\"triton\"\)", re.M)
HIDE_TRITON = "import sys; sys.modules['triton'] = None\n"


def code_cells(path):
    return [cell for cell in json.loads(path.read_text())["cells"] if cell["cell_type"] == "code"]


def test_every_cell_that_asks_for_triton_is_tagged_and_no_other():
    """An untagged Triton cell would fail nbval on a Mac; a tagged cell that never asks for
    Triton would hide its comparison there for no reason."""
    for path in CHAPTERS:
        for cell in code_cells(path):
            asks = bool(ASKS_FOR_TRITON.search("".join(cell["source"])))
            tagged = TAG in cell["metadata"].get("tags", [])
            assert asks == tagged, f"{path.name} cell {cell.get('id')}: asks for Triton {asks}, tagged {tagged}"


WITH_TRITON_CELLS = [path for path in CHAPTERS
                     if any(TAG in cell["metadata"].get("tags", []) for cell in code_cells(path))]


def without_triton(tmp_path) -> dict:
    """The environment of a kernel that cannot import Triton, nor install it (no index)."""
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-hide-triton.py").write_text(HIDE_TRITON)
    return {**os.environ, "IPYTHONDIR": str(tmp_path / "ipython"), "PIP_NO_INDEX": "1"}


def test_the_pages_with_triton_cells_are_chapter_9_and_its_fused_backward():
    names = [path.name for path in WITH_TRITON_CELLS]
    assert "09_2_running_it.ipynb" in names and "10_4_fused_backward.ipynb" in names, names


def test_the_triton_pages_pass_without_triton(tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", HIDE_TRITON + "import pytest; sys.exit(pytest.main(sys.argv[1:]))",
         *map(str, WITH_TRITON_CELLS), "-p", "no:cacheprovider", "-n", "0", "-q", "-rs", "--nbval"],
        cwd=ROOT, env=without_triton(tmp_path), capture_output=True, text=True, timeout=600)
    summary = run.stdout[-3000:] + run.stderr[-2000:]
    assert run.returncode == 0, summary
    tagged = sum(TAG in cell["metadata"].get("tags", []) for path in WITH_TRITON_CELLS for cell in code_cells(path))
    skipped = re.search(r"(\d+) skipped", summary)
    assert skipped and int(skipped.group(1)) == tagged, summary
    assert "Triton is not installed" in summary


def test_every_triton_cell_says_in_one_line_what_it_skipped_and_why(tmp_path, monkeypatch):
    """A reader without Triton (Colab's CPU runtime with an old torch, a Mac) sees one line
    per Triton cell, never an empty output or a missing figure without a word."""
    for name, value in without_triton(tmp_path).items():
        monkeypatch.setenv(name, value)
    for path in WITH_TRITON_CELLS:
        notebook = nbformat.read(path, as_version=4)
        NotebookClient(notebook, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        for cell in notebook.cells:
            if cell.cell_type != "code" or TAG not in cell.metadata.get("tags", []):
                continue
            where = f"{path.name} cell {cell.get('id')}"
            lines = "".join(out.get("text", "") for out in cell.outputs
                            if out.get("output_type") == "stream").splitlines()
            assert len(lines) == 1, f"{where} printed {lines}"
            assert not any("image/png" in out.get("data", {}) for out in cell.outputs), where
            if "find_spec(\"triton\")" in "".join(cell.source):  # the install cell
                assert lines[0].startswith("could not install Triton"), f"{where}: {lines[0]}"
            else:
                assert "Triton is not installed" in lines[0], f"{where}: {lines[0]}"
