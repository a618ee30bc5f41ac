"""Every page declares sphinx-thebe's configuration once.

sphinx-thebe (0.3.1) adds its configuration, an inline script of ``const``
declarations (``const THEBE_JS_URL = ...``), with ``app.add_js_file`` once
the builder exists; Sphinx 7 records such a script both in the registry and
in the builder, and the page then carries it twice. The second copy is a
``SyntaxError: Identifier 'THEBE_JS_URL' has already been declared`` on
every page. Sphinx drops a repeated script file by its name but not a
repeated inline script, so this drops repeated inline scripts (same body,
same attributes) from each page's script list, keeping the first.
"""
from __future__ import annotations

from sphinx.application import Sphinx


def inline_script_key(script) -> tuple | None:
    """What makes an inline script the same as another; None for a script loaded from a file."""
    if script.filename or not script.attributes.get("body"):
        return None
    return tuple(sorted(script.attributes.items()))


def drop_repeated_inline_scripts(app: Sphinx, pagename, templatename, context, doctree) -> None:
    seen, kept = set(), []
    for script in context.get("script_files", []):
        key = inline_script_key(script)
        if key is None or key not in seen:
            kept.append(script)
        if key is not None:
            seen.add(key)
    context["script_files"] = kept


def setup(app: Sphinx) -> dict:
    # after the theme and sphinx-thebe have added theirs
    app.connect("html-page-context", drop_repeated_inline_scripts, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
