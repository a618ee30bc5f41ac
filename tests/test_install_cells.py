"""Every chapter opens with the install cell for the repository in _config.yml."""
import json
import re

import pytest

from install_cells import EXTRAS, TAG, chapter_paths, first_code_cell, install_cell_source, repository


def test_there_are_chapters():
    assert chapter_paths(), "_toc.yml lists no notebook under chapters/"


@pytest.mark.parametrize("path", chapter_paths(), ids=lambda p: p.name)
def test_install_cell_matches_config(path):
    cell = first_code_cell(json.loads(path.read_text()))
    url, branch = repository()
    assert "".join(cell["source"]) == install_cell_source(url, branch, EXTRAS.get(path.name))
    assert TAG in cell["metadata"].get("tags", []), "the install cell must be hidden in the HTML"


def test_repository_is_read_from_config():
    # branch names what the install cells install: a branch, a tag or a commit
    url, branch = repository()
    assert url.startswith("https://github.com/") and re.fullmatch(r"[\w./-]+", branch)
