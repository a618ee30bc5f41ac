"""A footer on every page that names the licence and links the LICENSE file.

The link is made from ``repository.url`` and ``repository.branch`` in
``_config.yml`` (Jupyter Book passes them to the theme as
``repository_url`` and ``repository_branch``), so the repository's address
stays written in one place. A footer set in ``_config.yml``
(``html.extra_footer``) wins over this one.
"""
from __future__ import annotations

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

FOOTER = (
    '<p>The text and the code of this book are under the '
    '<a href="{url}/blob/{branch}/LICENSE">MIT licence</a>.</p>'
)


def licence_footer(options: dict) -> str:
    url = options.get("repository_url", "").rstrip("/")
    if not url:
        raise ExtensionError("licence_footer: set repository.url in _config.yml; the footer links its LICENSE")
    return FOOTER.format(url=url, branch=options.get("repository_branch") or "main")


def add_footer(app: Sphinx, config) -> None:
    options = config.html_theme_options
    if not options.get("extra_footer"):
        options["extra_footer"] = licence_footer(options)


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", add_footer)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
