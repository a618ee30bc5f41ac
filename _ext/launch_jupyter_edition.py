"""The launch buttons open the Jupyter edition of a chapter, and the download menu's ".ipynb" is
that edition, not the chapter's source; a page with no code to run has no launch buttons.

In the source notebooks the book's markup (cross-references, equation numbers, citations,
exercises) is MyST, which Colab and Jupyter show as raw text. The publishing workflow writes the
Jupyter edition (``tools/jupyter_edition.py``: the same notebooks, their markup as Markdown that
Colab and Jupyter render) to the branch ``jupyter_edition_branch`` at the same paths, with a
``binder/`` folder that installs attnlib from the commit the edition was made from. This
extension points the Colab and the Binder button there. It also writes the same edition into the
HTML book, ``EDITION_FOLDER/`` at the pages' paths, once the book is built (the edition reads its
numbers and links from the built pages), and points the download menu's ".ipynb" at it: the
theme's link served ``_sources/``, the MyST source, whose roles and directives a notebook shows as
raw text. The edition in the book is served with the pages, so it downloads offline as well.

The landing pages of the chapters split into section pages (9, 10, 12, 14) hold only an introduction and
a hidden install cell: launching them would open a notebook with nothing to run, so they get no
launch buttons.
"""
from __future__ import annotations

import json
import pathlib
import sys

from sphinx.application import Sphinx

#: the folder of the HTML book that holds the Jupyter edition, which the download menu links
EDITION_FOLDER = "jupyter-edition"


def colab_url(url: str, source_branch: str, edition_branch: str) -> str:
    """``.../github/OWNER/NAME/blob/SOURCE/PATH`` with the edition's branch in place of the source's."""
    marker = f"/blob/{source_branch}/"
    if url.count(marker) != 1:
        raise ValueError(f"launch_jupyter_edition: expected one {marker!r} in the Colab link, got {url!r}")
    return url.replace(marker, f"/blob/{edition_branch}/")


def binder_url(url: str, source_branch: str, edition_branch: str) -> str:
    """``.../v2/gh/OWNER/NAME/SOURCE?urlpath=...`` with the edition's branch in place of the source's."""
    marker = f"/{source_branch}?urlpath="
    if url.count(marker) != 1:
        raise ValueError(f"launch_jupyter_edition: expected one {marker!r} in the Binder link, got {url!r}")
    return url.replace(marker, f"/{edition_branch}?urlpath=")


def has_code_to_run(notebook: pathlib.Path) -> bool:
    """Whether a notebook shows a code cell (one not removed from the page with ``remove-cell``)."""
    cells = json.loads(notebook.read_text())["cells"]
    return any(cell["cell_type"] == "code" and "remove-cell" not in cell.get("metadata", {}).get("tags", [])
               for cell in cells)


def buttons_of(groups: list[dict], label: str):
    """The buttons of the theme's header groups labelled LABEL ("download-buttons", "launch-buttons")."""
    for group in groups:
        if group.get("label") == label:
            yield from group["buttons"]


def point_launch_buttons_at_the_edition(app: Sphinx, pagename, templatename, context, doctree) -> None:
    source = context.get("theme_repository_branch") or app.config.html_theme_options.get("repository_branch") or "main"
    edition = app.config.jupyter_edition_branch
    buttons = context.get("header_buttons", [])
    notebook = pathlib.Path(app.srcdir, f"{pagename}.ipynb")
    if not notebook.is_file():
        return
    for button in buttons_of(buttons, "download-buttons"):
        if button.get("text") == ".ipynb":
            button["url"] = context["pathto"](f"{EDITION_FOLDER}/{pagename}.ipynb", 1)
            button["tooltip"] = "Download this page as a notebook for Jupyter or Colab"
    if not has_code_to_run(notebook):
        buttons[:] = [group for group in buttons if group.get("label") != "launch-buttons"]
        return
    for button in buttons_of(buttons, "launch-buttons"):
        if button.get("text") == "Colab":
            button["url"] = colab_url(button["url"], source, edition)
        elif button.get("text") == "Binder":
            button["url"] = binder_url(button["url"], source, edition)


def write_the_edition_into_the_book(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.name != "html":
        return
    tools = str(pathlib.Path(__file__).resolve().parent.parent / "tools")
    if tools not in sys.path:
        sys.path.insert(0, tools)
    import jupyter_edition  # tools/: it reads the built pages, so it runs after them

    html = pathlib.Path(app.outdir)
    jupyter_edition.write_edition(html / EDITION_FOLDER, jupyter_edition.Book(html))


def setup(app: Sphinx) -> dict:
    app.add_config_value("jupyter_edition_branch", "jupyter-edition", "html", types=[str])
    # after sphinx-book-theme's add_launch_buttons (priority 501)
    app.connect("html-page-context", point_launch_buttons_at_the_edition, priority=502)
    app.connect("build-finished", write_the_edition_into_the_book)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
