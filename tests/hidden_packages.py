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

import book_pages

# In the pytest process that runs the pages: after each cell tagged TAG has run, what it
# printed and displayed (nbval keeps what the cell output, compared or not) goes to OUTPUTS.
RECORDER = """
import json, pathlib

class TaggedCellRecorder:
    def __init__(self, tag, path):
        self.tag, self.path, self.cells = tag, path, []

    def pytest_runtest_teardown(self, item):
        cell = getattr(item, "cell", None)
        if cell is not None and self.tag in cell.metadata.get("tags", []):
            self.cells.append({"where": f"{pathlib.Path(str(item.fspath)).name} cell {cell.get('id')}",
                               "source": cell.source, "outputs": item.test_outputs or []})

    def pytest_sessionfinish(self):
        pathlib.Path(self.path).write_text(json.dumps(self.cells))
"""


def code_cells(path):
    return [cell for cell in json.loads(path.read_text())["cells"] if cell["cell_type"] == "code"]


def mistagged_cells(pages, asks, tag) -> list[str]:
    """``page cell id: asks A, tagged T`` for every code cell of ``pages`` where ``asks(source)``
    and carrying ``tag`` disagree (an empty list: the tag marks exactly the cells that ask)."""
    return [f"{path.name} cell {cell.get('id')}: asks {asks_now}, tagged {not asks_now}"
            for path in pages for cell in code_cells(path)
            if (asks_now := bool(asks("".join(cell["source"])))) != (tag in cell["metadata"].get("tags", []))]


def hiding(names) -> str:
    """Python that hides the modules ``names``; a kernel's startup file or a process's first lines."""
    return "import sys; " + "; ".join(f"sys.modules[{name!r}] = None" for name in names) + "\n"


def environment_without(names, tmp_path) -> dict:
    """The environment of a kernel that cannot import ``names``, nor install them (no index)."""
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-hide-packages.py").write_text(hiding(names))
    return {**os.environ, "IPYTHONDIR": str(tmp_path / "ipython"), "PIP_NO_INDEX": "1"}


def nbval_without(names, pages, tag, tmp_path) -> tuple[str, list[dict]]:
    """Run ``pages`` under nbval with ``names`` hidden; assert that it passes with exactly the cells
    tagged ``tag`` skipped. Return pytest's summary and, for each tagged cell in the order it ran,
    ``{"where", "source", "outputs"}``: what it output in that run (one run serves both the
    comparison and the check of what a tagged cell tells the reader)."""
    recorded = tmp_path / "tagged-cells.json"
    run = subprocess.run(
        [sys.executable, "-c", hiding(names) + RECORDER + "import pytest\n"
         f"sys.exit(pytest.main(sys.argv[1:], plugins=[TaggedCellRecorder({tag!r}, {str(recorded)!r})]))",
         *map(str, pages), "-p", "no:cacheprovider", "-n", "0", "-q", "-rs", "--nbval", "--no-solutions"],
        cwd=book_pages.ROOT, env=environment_without(names, tmp_path), capture_output=True, text=True,
        timeout=600)
    summary = run.stdout[-3000:] + run.stderr[-2000:]
    assert run.returncode == 0, summary
    tagged = sum(tag in cell["metadata"].get("tags", []) for path in pages for cell in code_cells(path))
    skipped = re.search(r"(\d+) skipped", summary)
    assert skipped and int(skipped.group(1)) == tagged, summary
    cells = json.loads(recorded.read_text())
    assert len(cells) == tagged, f"{len(cells)} of the {tagged} tagged cells recorded"
    return summary, cells


def printed_lines(cell: dict) -> list[str]:
    """The lines a recorded cell printed (stdout and stderr)."""
    return "".join(out.get("text", "") for out in cell["outputs"]
                   if out.get("output_type") == "stream").splitlines()
