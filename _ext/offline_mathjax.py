"""Ship MathJax 3 with the built book, so that its formulas typeset offline.

Sphinx loads MathJax from a CDN by default: opened from a USB stick, or
behind a firewall, every formula of the book would stay raw TeX. This
extension copies the few MathJax files the book needs from the PyPI package
``django-static-mathjax`` (importable as ``mathjax``; it is in
requirements.txt) into ``_build/html/_static/mathjax/``, and ``mathjax_path``
in ``_config.yml`` points at the copy.

Why an extension and not ``html_static_path``: that setting copies a whole
folder, and Jupyter Book adds every ``.js`` file under a static folder to
every page as a script, so pointing it at the package (24 MB of MathJax,
every component) would load them all. Committing the files to ``_static/``
would do the same. Copying after the build keeps the shipped files to the
ones MathJax actually loads (about 2 MB).
"""
from __future__ import annotations

import importlib.util
import pathlib
import shutil

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

#: where the copy goes, relative to the HTML output's ``_static`` folder
TARGET = "mathjax"

#: the combined component the pages load, and what it loads from beside it:
#: its fonts, and the TeX extensions that it autoloads when a formula uses
#: a macro outside its core packages (\boldsymbol, \cancel, \color, ...)
FILES = [
    "tex-mml-chtml.js",
    "output/chtml/fonts/woff-v2",
    "input/tex/extensions",
]


def mathjax_es5() -> pathlib.Path:
    """The ``es5`` folder of the installed MathJax package."""
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise ExtensionError(
            "offline_mathjax: the MathJax package is missing; "
            "install it with `pip install django-static-mathjax` (it is in requirements.txt)"
        )
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / "static" / "mathjax" / "es5"


def check_path(app: Sphinx, config) -> None:
    """``mathjax_path`` must name the local copy, not a CDN."""
    expected = f"{TARGET}/{FILES[0]}"
    if config.mathjax_path != expected:
        raise ExtensionError(
            f"offline_mathjax: set `mathjax_path: {expected}` in _config.yml's sphinx.config "
            f"(it is {config.mathjax_path!r}); the pages would not load the shipped copy"
        )
    mathjax_es5()  # fail at the start of the build, not at its end


def copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    source = mathjax_es5()
    target = pathlib.Path(app.outdir) / "_static" / TARGET
    for name in FILES:
        path = source / name
        if path.is_dir():
            shutil.copytree(path, target / name, dirs_exist_ok=True)
        else:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / name)


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", check_path)
    app.connect("build-finished", copy_mathjax)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
