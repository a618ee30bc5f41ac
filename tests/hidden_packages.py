"""Running chapters as a reader without some package would (Triton on a Mac, the checkpoint
wheels offline): the package is hidden from a pytest process and its kernels
(``sys.modules[name] = None``: importing it fails, ``find_spec`` finds nothing), and pip
finds no index to install it from. Used by tests/test_without_triton.py and
tests/test_without_checkpoints.py.
"""
import json
import os
import re
import subprocess
import sys

import nbformat
from nbclient import NotebookClient

import book_pages


def code_cells(path):
    return [cell for cell in json.loads(path.read_text())["cells"] if cell["cell_type"] == "code"]


def hiding(names) -> str:
    """Python that hides the modules ``names``; a kernel's startup file or a process's first lines."""
    return "import sys; " + "; ".join(f"sys.modules[{name!r}] = None" for name in names) + "\n"


def environment_without(names, tmp_path) -> dict:
    """The environment of a kernel that cannot import ``names``, nor install them (no index)."""
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-hide-packages.py").write_text(hiding(names))
    return {**os.environ, "IPYTHONDIR": str(tmp_path / "ipython"), "PIP_NO_INDEX": "1"}


def nbval_without(names, pages, tag, tmp_path) -> str:
    """Run ``pages`` under nbval with ``names`` hidden; assert that it passes with exactly the cells
    tagged ``tag`` skipped, and return pytest's summary."""
    run = subprocess.run(
        [sys.executable, "-c", hiding(names) + "import pytest; sys.exit(pytest.main(sys.argv[1:]))",
         *map(str, pages), "-p", "no:cacheprovider", "-n", "0", "-q", "-rs", "--nbval"],
        cwd=book_pages.ROOT, env=environment_without(names, tmp_path), capture_output=True, text=True,
        timeout=600)
    summary = run.stdout[-3000:] + run.stderr[-2000:]
    assert run.returncode == 0, summary
    tagged = sum(tag in cell["metadata"].get("tags", []) for path in pages for cell in code_cells(path))
    skipped = re.search(r"(\d+) skipped", summary)
    assert skipped and int(skipped.group(1)) == tagged, summary
    return summary


def executed_tagged_cells(path, tag):
    """Execute ``path`` in a fresh kernel (with the environment the caller set) and yield
    ``(where, cell, lines)`` for each code cell tagged ``tag``: its printed lines."""
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    for cell in notebook.cells:
        if cell.cell_type != "code" or tag not in cell.metadata.get("tags", []):
            continue
        lines = "".join(out.get("text", "") for out in cell.outputs
                        if out.get("output_type") == "stream").splitlines()
        yield f"{path.name} cell {cell.get('id')}", cell, lines
