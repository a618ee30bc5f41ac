"""No page carries sphinx-thebe's loader or its kernel configuration: the book's code runs in Colab
and on Binder (the launch buttons, _ext/launch_jupyter_edition.py), not on the page.

Jupyter Book loads sphinx-thebe into every book, with or without a thebe button
(``launch_buttons.thebe``), and sphinx-thebe then gave every page an inline script naming its
loader on unpkg.com, ``sphinx-thebe.js``, its stylesheet and a kernel configuration naming
sphinx-thebe's default Binder repository, ``binder-examples/jupyter-stacks-datascience``: none of
it used without the button, and a reader of the page source was told the book runs there. Sphinx 7
also put the inline script on each page twice, a ``SyntaxError`` on every page. This extension
disconnects sphinx-thebe's handlers that add them, and refuses a configuration with the thebe
button, which would need them.
"""
from __future__ import annotations

import sphinx_thebe
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.errors import ConfigError

#: what sphinx-thebe adds to the book: its files in _static/, the loader's scripts, and each page's
#: kernel configuration
THEBE_HANDLERS = (sphinx_thebe.st_static_path, sphinx_thebe.init_thebe_core, sphinx_thebe.update_thebe_context)
THEBE_STYLESHEET = "sphinx-thebe.css"


def leave_thebe_out(app: Sphinx, config: Config) -> None:
    if (config.html_theme_options.get("launch_buttons") or {}).get("thebe"):
        raise ConfigError("_ext/no_thebe.py leaves sphinx-thebe out of the pages: take it out of "
                          "_config.yml's local_extensions before turning on launch_buttons.thebe")
    for listeners in list(app.events.listeners.values()):
        for listener in list(listeners):
            if listener.handler in THEBE_HANDLERS:
                app.disconnect(listener.id)
    app.registry.css_files = [(name, attributes) for name, attributes in app.registry.css_files
                              if name != THEBE_STYLESHEET]


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", leave_thebe_out)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
