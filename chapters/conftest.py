"""nbval settings for the chapters.

- stderr (warnings, progress bars) is not compared.
- A cell tagged ``needs-triton`` prints what Triton's kernel computed, or says in one line
  that it skipped. Where Triton is not installed (it has no wheels for macOS or Windows) the
  cell still runs, so that the chapter goes on, but its stored output, made with Triton, is
  not compared: the cell is reported as skipped, with that reason.
"""
import importlib.util
import platform

import nbval.plugin
import pytest

TRITON_TAG = "needs-triton"
TRITON_INSTALLED = importlib.util.find_spec("triton") is not None

_compare_outputs = nbval.plugin.IPyNbCell.compare_outputs


def _without_stderr(outputs):
    return [out for out in outputs if not (out.get("output_type") == "stream" and out.get("name") == "stderr")]


def _why_triton_is_missing():
    if platform.system() == "Linux":
        return "Triton is not installed"
    return f"Triton publishes no wheels for {platform.system()}"


def compare_outputs(self, test, ref, skip_compare=None):
    if not TRITON_INSTALLED and TRITON_TAG in self.cell.metadata.get("tags", []):
        pytest.skip(f"its stored output was made with Triton's kernel; {_why_triton_is_missing()}")
    return _compare_outputs(self, _without_stderr(test), _without_stderr(ref), skip_compare)


nbval.plugin.IPyNbCell.compare_outputs = compare_outputs
