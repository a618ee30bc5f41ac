"""Re-execute chapters in place, top to bottom in a fresh kernel, as nbval will.

    python tests/execute_chapters.py chapters/05_stability_and_masks.ipynb [...]
    python tests/execute_chapters.py            # every chapter and section page in _toc.yml

The stored notebook keeps no per-cell timestamps, so a re-execution that
prints the same thing leaves the file unchanged. Run it from the book's
environment (``.venv/bin/python``), whose pinned versions the stored outputs
must match.
"""
from __future__ import annotations

import pathlib
import sys

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import book_pages  # noqa: E402


def execute(path: pathlib.Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    # no widget state: with it the book would load require.js and a widget manager from
    # CDNs for a widget it cannot run (chapter 4's shows a static figure instead)
    NotebookClient(notebook, timeout=600, kernel_name="python3", record_timing=False,
                   store_widget_state=False, resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
    nbformat.write(notebook, path)


if __name__ == "__main__":
    paths = [pathlib.Path(p) for p in sys.argv[1:]] or book_pages.notebooks()
    for path in paths:
        print(f"executing {path.name}", file=sys.stderr)
        execute(path.resolve())
