"""The Colab button opens the Jupyter edition of a chapter, not its source.

In the source notebooks the book's markup (cross-references, equation numbers, citations,
exercises) is MyST, which Colab shows as raw text. The publishing workflow writes the Jupyter
edition (``tools/jupyter_edition.py``: the same notebooks, their markup as Markdown that Colab
renders) to the branch ``jupyter_edition_branch`` at the same paths. This extension points only
the Colab button there: Binder keeps the source branch, where ``binder/`` and attnlib live.
"""
from __future__ import annotations

from sphinx.application import Sphinx


def colab_url(url: str, source_branch: str, edition_branch: str) -> str:
    """``.../github/OWNER/NAME/blob/SOURCE/PATH`` with the edition's branch in place of the source's."""
    marker = f"/blob/{source_branch}/"
    if url.count(marker) != 1:
        raise ValueError(f"colab_jupyter_edition: expected one {marker!r} in the Colab link, got {url!r}")
    return url.replace(marker, f"/blob/{edition_branch}/")


def point_colab_at_the_edition(app: Sphinx, pagename, templatename, context, doctree) -> None:
    source = context.get("theme_repository_branch") or app.config.html_theme_options.get("repository_branch") or "main"
    for group in context.get("header_buttons", []):
        if group.get("label") != "launch-buttons":
            continue
        for button in group["buttons"]:
            if button.get("text") == "Colab":
                button["url"] = colab_url(button["url"], source, app.config.jupyter_edition_branch)


def setup(app: Sphinx) -> dict:
    app.add_config_value("jupyter_edition_branch", "jupyter-edition", "html", types=[str])
    # after sphinx-book-theme's add_launch_buttons (priority 501)
    app.connect("html-page-context", point_colab_at_the_edition, priority=502)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
