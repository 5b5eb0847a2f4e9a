"""maxmargin.book.tables: a chapter's computed results as small tables with the digits that matter.

``table(rows, headers, formats)`` takes the rows a chapter computed, one header per column (words a
reader understands) and one format per column: a format spec such as ``".4f"``, ``".1e"``, ``"d"``
or ``","``, a function of the value, or ``None`` for ``str``. The result shows as an HTML table in a
notebook and on the site (``_repr_html_``) and as aligned plain text in a console, in ``print`` and
in the exported notebooks (``__repr__``). ``matrix`` labels the rows and columns of a 2-D array,
and ``vector`` writes a short vector inside a sentence, "(0.8446, 0.1711, 0)".
This module only formats: the values are the chapter's own, never typed in.
"""
from __future__ import annotations

import html
import numbers
from typing import Callable, Sequence

import numpy as np

Format = str | Callable[[object], str] | None

__all__ = ["Table", "table", "matrix", "vector"]


def _is_number(value) -> bool:
    """True for ints and floats (numpy's too), which align right; bools and text align left."""
    return isinstance(value, numbers.Number) and not isinstance(value, (bool, np.bool_))


def _cell(value, fmt: Format) -> str:
    """One value as text: through the column's format spec or function, else ``str``."""
    if fmt is None:
        return str(value)
    if callable(fmt):
        return fmt(value)
    return format(value, fmt)


class Table:
    """Rows of text cells under headers; numbers align right. Made by ``table`` or ``matrix``."""

    def __init__(self, headers: list[str], cells: list[list[str]], right: list[bool],
                 title: str | None = None):
        self.headers, self.cells, self.right, self.title = headers, cells, right, title

    def __repr__(self) -> str:
        widths = [max(len(text) for text in column)
                  for column in zip(self.headers, *self.cells)]

        def line(texts):
            return "  ".join(text.rjust(w) if right else text.ljust(w)
                             for text, w, right in zip(texts, widths, self.right)).rstrip()

        lines = [self.title] if self.title else []
        lines += [line(self.headers), "  ".join("-" * w for w in widths)]
        lines += [line(row) for row in self.cells]
        return "\n".join(lines)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        def row(tag, texts):
            return "<tr>" + "".join(
                f'<{tag} class="{"num" if right else "text"}">{html.escape(text)}</{tag}>'
                for text, right in zip(texts, self.right)) + "</tr>"

        caption = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        body = "".join(row("td", cells) for cells in self.cells)
        # the theme's box for a table wider than the column: it scrolls sideways, and the
        # book's scroll-hints.js says so under it (at phone width)
        return (f'<div class="pst-scrollable-table-container"><table class="mm-table">{caption}'
                f'<thead>{row("th", self.headers)}</thead><tbody>{body}</tbody></table></div>')


def table(rows: Sequence[Sequence], headers: Sequence[str],
          formats: Sequence[Format] | None = None, *, title: str | None = None) -> Table:
    """A table of ``rows`` under ``headers``, column j formatted by ``formats[j]``.

    Every row and ``formats`` must have one entry per header (a ValueError says which does not).
    A column aligns right when all its values are numbers.
    """
    headers = [str(h) for h in headers]
    formats = [None] * len(headers) if formats is None else list(formats)
    if len(formats) != len(headers):
        raise ValueError(f"formats: {len(formats)} for {len(headers)} columns")
    rows = [list(r) for r in rows]
    for i, r in enumerate(rows):
        if len(r) != len(headers):
            raise ValueError(f"row {i}: {len(r)} values for {len(headers)} columns")
    right = [bool(rows) and all(_is_number(r[j]) for r in rows) for j in range(len(headers))]
    cells = [[_cell(v, f) for v, f in zip(r, formats)] for r in rows]
    return Table(headers, cells, right, title)


def matrix(values, rows: Sequence[str], columns: Sequence[str], fmt: Format = ".4f", *,
           corner: str = "", title: str | None = None) -> Table:
    """A 2-D array as a table: row labels ``rows`` on the left, column labels ``columns`` on top.

    ``corner`` heads the label column (e.g. "rows p, columns q"); ``fmt`` formats every value.
    """
    values = np.asarray(values)
    if values.ndim != 2 or values.shape != (len(rows), len(columns)):
        raise ValueError(f"values: shape {values.shape}, labels for "
                         f"({len(rows)}, {len(columns)})")
    return table([[label, *line] for label, line in zip(rows, values.tolist())],
                 [corner, *columns], [None] + [fmt] * len(columns), title=title)


def vector(values, fmt: str = ".4g", *, zero: float = 1e-12) -> str:
    """A 1-D array as "(a, b, c)", each entry formatted by ``fmt`` (for a sentence, not a table).

    As numpy's ``suppress=True``, an entry below ``zero`` times the largest magnitude (a
    solver's rounding, 1e-16 next to 1) is written 0.
    """
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"values: expected a vector, got shape {values.shape}")
    if values.dtype.kind == "f" and values.size:
        values = np.where(np.abs(values) < zero * np.abs(values).max(), 0.0, values)
    return "(" + ", ".join(format(x, fmt) for x in values.tolist()) + ")"
