"""The library reference (chapters/appendix-api.md): docstrings in the book's convention as RST.

The library's docstrings use numpydoc's section titles, but under Parameters, Returns, Raises
and Attributes each entry is ``name : shapes and meaning`` (``X : (n, T, d) tokens.``), not
numpydoc's ``name : type``. Napoleon would read "(n, T, d) tokens." as a type and
cross-reference each word, which the build's nitpicky mode (``-n``) reports as dozens of
missing targets. :func:`docstring_sections` turns each section into a rubric and a definition
list (the entry's names in code, its text as the definition); Examples and Notes stay as they
are (doctest blocks and paragraphs are RST already). A formula between single backquotes
(```||p||^2```, the notation of :mod:`booksite.asciimath`) becomes a ``:math:`` role, so the
page typesets it and ``help()`` in a console still reads it as typed.
"""
from __future__ import annotations

import re

from .asciimath import to_tex

SECTIONS = ("Parameters", "Returns", "Raises", "Attributes", "Examples", "Notes", "See Also")
ENTRY_SECTIONS = {"Parameters", "Returns", "Raises", "Attributes"}
_ENTRY = re.compile(r"^(?P<names>[\w.*]+(?:\s*,\s*[\w.*]+)*)\s+:\s*(?P<text>.*)$")


_LITERAL = re.compile(r"(``.+?``|:\w+:`[^`]+`|`[^`]+`)")   # code, roles: left as written


def escape(text: str) -> str:
    """``text`` with its formulas (single backquotes) as ``:math:`` roles and the characters
    that RST would read as markup elsewhere (``|``, ``*``) escaped, code and roles untouched."""
    return _each_piece(text, lambda piece: re.sub(r"([|*])", r"\\\1", piece))


def typeset(text: str) -> str:
    """``text`` with its formulas as ``:math:`` roles and nothing else changed (the prose of
    an Examples section)."""
    return _each_piece(text, lambda piece: piece)


def _each_piece(text: str, plain) -> str:
    """``text`` with ``plain`` applied outside code, roles and formulas, and each formula typeset;
    a backquote left over (a formula broken across lines) raises ``ValueError``."""
    pieces = _LITERAL.split(text)
    if any("`" in piece for piece in pieces[::2]):
        raise ValueError(f"a formula or code must end on its line: {text!r}")
    return "".join(formula(piece) if k % 2 else plain(piece) for k, piece in enumerate(pieces))


def formula(piece: str) -> str:
    """A literal piece of a docstring line: a formula (```x_it^T W p```) as a ``:math:``
    role, code (````x````) and roles (``:func:`gd```) as written."""
    if piece.startswith("``") or not piece.startswith("`"):
        return piece
    return f":math:`{to_tex(piece[1:-1])}`"


def convert(lines: list[str]) -> list[str]:
    """The docstring ``lines`` (dedented, as autodoc gives them) with its sections as RST."""
    out: list[str] = []
    section = None
    in_entry = in_doctest = False
    k = 0
    while k < len(lines):
        line = lines[k]
        underline = lines[k + 1] if k + 1 < len(lines) else ""
        if line.strip() in SECTIONS and re.fullmatch(r"-{3,}", underline.strip()):
            section, in_entry = line.strip(), False
            out += ["", f".. rubric:: {section}", ""]
            k += 2
            continue
        entry = _ENTRY.match(line) if section in ENTRY_SECTIONS else None
        if entry:
            names = ", ".join(f"``{name.strip()}``" for name in entry["names"].split(","))
            out += [names, f"    {escape(entry['text'])}" if entry["text"] else "    .."]
            in_entry = True
        elif in_entry and line.startswith(" ") and line.strip():
            out.append("    " + escape(line.strip()))   # the entry's continuation
        elif not line.strip():
            out.append(line)                         # blank: the entry may go on after it
            in_doctest = False
        else:
            if in_entry:
                out.append("")                       # a definition list ends with a blank
                in_entry = False
            bullet = re.match(r"\s*[*-] ", line)          # a list item's marker stays one
            in_doctest = in_doctest or line.lstrip().startswith(">>>")
            out.append(line if in_doctest                 # a doctest and its output: as written
                       else typeset(line) if section == "Examples"
                       else line[:bullet.end()] + escape(line[bullet.end():]) if bullet
                       else escape(line))
        k += 1
    return out


def docstring_sections(app, what, name, obj, options, lines: list[str]) -> None:
    """autodoc-process-docstring: rewrite the docstring of a ``maxmargin`` object in place."""
    if name.startswith("maxmargin"):
        lines[:] = convert(lines)
