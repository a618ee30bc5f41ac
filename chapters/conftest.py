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
"""
import importlib.util
import os
import platform

import nbval.plugin
import pytest

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
