"""Every library name on the notation page (the "Library name" column) exists in maxmargin."""
from __future__ import annotations

import importlib
import re

from bookutils import ROOT

PAGE = ROOT / "chapters" / "appendix-notation.md"
COLUMN = "Library name"
NAME = re.compile(r"`mm\.([A-Za-z_][\w.]*)`")
CELL_SPLIT = re.compile(r"(?<!\\)\|")


def library_names(markdown: str) -> list[str]:
    """The `mm.*` names in the "Library name" column of every pipe table, in page order."""
    names, column = [], None
    for line in markdown.splitlines():
        if not line.lstrip().startswith("|"):
            column = None
            continue
        cells = [c.strip() for c in CELL_SPLIT.split(line.strip().strip("|"))]
        if column is None:
            column = cells.index(COLUMN) if COLUMN in cells else -1
        elif column >= 0 and len(cells) > column:
            names += NAME.findall(cells[column])
    return names


def test_page_lists_the_public_api():
    """Every public name of maxmargin (its __all__, modules aside) has a row, and the
    datasets too. Bug caught: a name added to the library and never explained here."""
    import inspect

    mm = importlib.import_module("maxmargin")
    names = set(library_names(PAGE.read_text()))
    public = [n for n in mm.__all__ if not inspect.ismodule(getattr(mm, n))]
    assert len(public) > 60
    missing = [n for n in public + ["data.fig1"] if n not in names]
    assert not missing, f"{PAGE.name} does not list: {', '.join('mm.' + n for n in missing)}"


def test_listed_names_exist():
    mm = importlib.import_module("maxmargin")
    missing = []
    for name in library_names(PAGE.read_text()):
        obj = mm
        for part in name.split("."):
            obj = getattr(obj, part, None)
        if obj is None:
            missing.append(f"mm.{name}")
    assert not missing, f"{PAGE.name} lists names that maxmargin does not provide: {missing}"
