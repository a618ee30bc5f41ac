"""The results that ``benchmarks/`` scripts store, for the chapters to plot.

In a checkout of the repository they are read from ``benchmarks/results/``;
where only the notebook is at hand (Colab) they are fetched from the book's
repository.
"""
from __future__ import annotations

import json
import pathlib
import urllib.request

REPOSITORY_RAW = "https://raw.githubusercontent.com/attnlib/sdpa-executable/main"
LOCAL = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def load(name: str) -> dict:
    """The stored JSON ``benchmarks/results/<name>``, with its ``machine`` and ``date``."""
    local = LOCAL / name
    if local.exists():
        return json.loads(local.read_text())
    with urllib.request.urlopen(f"{REPOSITORY_RAW}/benchmarks/results/{name}", timeout=30) as response:
        return json.load(response)
