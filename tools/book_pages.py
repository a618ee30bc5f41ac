"""The book's notebooks as ``_toc.yml`` lists them: each chapter, then its section pages.

One list for everything that walks the chapters (nbval's and the re-execution's list, the
install cells, the exercise catalogue, the assignments, the book tests), so that a chapter or a
section page added to the toc is found everywhere and a notebook left out of the toc is not.
A chapter split into pages (the toc's ``sections:``) keeps its number as the first two
characters of every page's file name: ``chapters/10_backward_and_training`` and its page
``chapters/10_2_training``.
"""
from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Page:
    file: str       # as the toc names it, without suffix: "chapters/10_2_training"
    chapter: str    # the toc's chapter entry the page belongs to (itself for a chapter page)

    @property
    def path(self) -> pathlib.Path:
        return ROOT / f"{self.file}.ipynb"


def _entries(entry: dict, chapter: str) -> list[Page]:
    pages = [Page(entry["file"], chapter)]
    for section in entry.get("sections", []):
        pages += _entries(section, chapter)
    return pages


def toc_pages(toc: pathlib.Path = ROOT / "_toc.yml") -> list[Page]:
    """Every entry of the toc, front and back matter included, in reading order."""
    parts = yaml.safe_load(toc.read_text())["parts"]
    return [page for part in parts for entry in part["chapters"] for page in _entries(entry, entry["file"])]


def chapter_pages() -> list[Page]:
    """The pages under ``chapters/`` (each a notebook), in reading order."""
    return [page for page in toc_pages() if page.file.startswith("chapters/")]


def notebooks() -> list[pathlib.Path]:
    """The chapters' notebooks, section pages included, in reading order."""
    return [page.path for page in chapter_pages()]


def chapter_title(page: Page) -> str:
    """The title of the chapter ``page`` belongs to: the first '# ' heading of its chapter page."""
    for cell in json.loads((ROOT / f"{page.chapter}.ipynb").read_text())["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    raise ValueError(f"{page.chapter}.ipynb should open with a '# Title' heading, and has none")
