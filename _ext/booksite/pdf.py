"""The single-page build that `make pdf` prints (scripts/make_pdf.py).

**Every node has its HTML writer in the single-page build.** Sphinx gives a builder the node
writers registered under its name and, only when there are none, those of its format.
sphinx-exercise registers writers for ``singlehtml``, so the single-page build found those and
none of the others registered for ``html`` (myst-nb's hidden-code cells among them) and
stopped with "unknown node type: HideCodeCellNode". :func:`html_writers_for_singlehtml` gives
the single-page build every HTML writer it does not have.
"""
from __future__ import annotations

from sphinx.application import Sphinx


def html_writers_for_singlehtml(app: Sphinx) -> None:
    """builder-inited: complete the ``singlehtml`` node writers with the ``html`` ones."""
    if app.builder.name != "singlehtml":
        return
    handlers = app.registry.translation_handlers
    single = handlers.setdefault("singlehtml", {})
    for name, pair in handlers.get("html", {}).items():
        single.setdefault(name, pair)
