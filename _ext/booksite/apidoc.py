"""The library reference (chapters/appendix-api.md): docstrings in the book's convention as RST.

The library's docstrings use numpydoc's section titles, but under Parameters, Returns, Raises
and Attributes each entry is ``name : shapes and meaning`` (``X : (n, T, d) tokens.``), not
numpydoc's ``name : type``. Napoleon would read "(n, T, d) tokens." as a type and
cross-reference each word, which the build's nitpicky mode (``-n``) reports as dozens of
missing targets. :func:`docstring_sections` turns each section into a rubric and a definition
list (the entry's names in code, its text as the definition); Examples and Notes stay as they
are (doctest blocks and paragraphs are RST already).
"""
from __future__ import annotations

import re

SECTIONS = ("Parameters", "Returns", "Raises", "Attributes", "Examples", "Notes", "See Also")
ENTRY_SECTIONS = {"Parameters", "Returns", "Raises", "Attributes"}
_ENTRY = re.compile(r"^(?P<names>[\w.*]+(?:\s*,\s*[\w.*]+)*)\s+:\s*(?P<text>.*)$")


_LITERAL = re.compile(r"(``.+?``|:\w+:`[^`]+`|`[^`]+`)")   # code, roles: left as written


def escape(text: str) -> str:
    """``text`` with the characters that RST would read as markup in the library's plain-text
    formulas (``|value - b_i|``, ``||p||``, ``a * b``) escaped, code and roles untouched."""
    pieces = _LITERAL.split(text)
    return "".join(piece if k % 2 else re.sub(r"([|*])", r"\\\1", piece)
                   for k, piece in enumerate(pieces))


def convert(lines: list[str]) -> list[str]:
    """The docstring ``lines`` (dedented, as autodoc gives them) with its sections as RST."""
    out: list[str] = []
    section = None
    in_entry = False
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
        else:
            if in_entry:
                out.append("")                       # a definition list ends with a blank
                in_entry = False
            bullet = re.match(r"\s*[*-] ", line)          # a list item's marker stays one
            out.append(line if section == "Examples" or line.lstrip().startswith(">>>")
                       else line[:bullet.end()] + escape(line[bullet.end():]) if bullet
                       else escape(line))
        k += 1
    return out


def docstring_sections(app, what, name, obj, options, lines: list[str]) -> None:
    """autodoc-process-docstring: rewrite the docstring of a ``maxmargin`` object in place."""
    if name.startswith("maxmargin"):
        lines[:] = convert(lines)
