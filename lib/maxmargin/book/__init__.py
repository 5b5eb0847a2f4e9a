"""maxmargin.book: the book's figures and explorers, kept apart from the library's mathematics.

``plots`` holds the figure style and the generic drawing helpers, ``legibility`` the figures'
text size on the site (small text raised, the smallest recorded in the PNG), ``explore`` the
live explorers and their static twins, ``landscape`` the risk grids and GD basins behind the figures, and
``ch02`` ... ``ch07`` what only that chapter draws, ``source`` the source of a library function
as a code block (the plain reference ``mm.reference`` next to the equation it computes), ``tables``
a chapter's results as small tables with the digits that matter.
Chapters import what they use, e.g. ``from maxmargin.book import explore, plots``. This package
loads matplotlib (and ipywidgets when a live explorer is built); the core library never imports it.
"""
from __future__ import annotations

import importlib

__all__ = ["plots", "legibility", "explore", "landscape", "ch02", "ch03", "ch04", "ch05", "ch06",
           "ch07", "source", "tables"]


def __getattr__(name: str):
    """Import a submodule on first access, so that ``mm.book.plots`` works without an import."""
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
