"""The results that ``benchmarks/`` scripts store, for the chapters to show.

They live inside the package, in ``attnlib/book/results/``, so that an install
from git (Colab) carries them: a chapter never downloads anything.
"""
from __future__ import annotations

import json
import pathlib

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def load(name: str) -> dict:
    """The stored JSON ``attnlib/book/results/<name>``, with its ``machine`` and ``date``."""
    path = RESULTS / name
    if not path.is_file():
        stored = sorted(p.name for p in RESULTS.glob("*.json"))
        raise FileNotFoundError(
            f"name must be one of the stored results {stored}, got {name!r}; "
            "the scripts in benchmarks/ write them"
        )
    return json.loads(path.read_text())
