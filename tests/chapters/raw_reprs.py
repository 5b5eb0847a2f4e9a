"""Raw Python reprs among a chapter's outputs: what a reader should see as a small table instead.

A chapter shows a result through ``maxmargin.book.tables`` (a table, or a vector inside a
sentence), never as the repr Python or numpy prints for a dict, a list of tuples, an array,
a dataclass, or a float with all its digits (issue 39). ``raw_reprs(nb)`` lists the outputs of an
executed notebook that still look like one, each as "cell N: the offending line".
"""
from __future__ import annotations

import re

_NUMBER = r"-?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?"
_RULES = [
    # a dict, a tuple of results, a list of tuples or lists, a nested numpy array
    ("a dict", re.compile(r"^\(?\{\s*(?:'[^']*'|\"[^\"]*\"|-?[\d.]+|\([^)]*\))\s*:")),
    ("a list of tuples or lists", re.compile(r"^\(?\[\s*[(\[]")),
    ("a tuple of results", re.compile(r"^\((?:array\(|\{|\[)")),
    # numpy's reprs wherever they stand
    ("a numpy repr", re.compile(r"\barray\(|\bnp\.(?:int|float|bool_?)\d*\(")),
    # a dataclass or namedtuple repr: Name(field=...
    ("a dataclass repr", re.compile(r"^[A-Z]\w*\(\w+=")),
    # numpy's str of an array inside a line: numbers in brackets separated by spaces only
    ("a numpy array", re.compile(rf"\[\s*{_NUMBER}(?:\s+{_NUMBER})+\s*\]")),
    # a Python list of three or more numbers (two in brackets is an interval, e.g. [95, 100])
    ("a list of numbers", re.compile(rf"\[\s*{_NUMBER}(?:,\s*{_NUMBER}){{2,}}\s*\]")),
    # a float with all its digits (repr gives 16 or 17; nobody formats 10 on purpose)
    ("a float's full repr", re.compile(r"(?<![\w.])-?\d*\.\d*[1-9]\d*(?:e[-+]?\d+)?(?![\w.])")),
]
_BARE_FLOAT = re.compile(rf"^{_NUMBER}$")


def _significant(token: str) -> int:
    """Significant digits of a decimal number written out."""
    mantissa = token.lstrip("-").split("e")[0].replace(".", "").lstrip("0")
    return len(mantissa)


def line_problem(line: str) -> str | None:
    """What raw repr the line shows, or None."""
    text = line.strip()
    if _BARE_FLOAT.match(text) and _significant(text) > 6:
        return "a bare float with more than 6 significant digits"
    for what, rule in _RULES[:-1]:
        if rule.search(text):
            return what
    if any(_significant(m.group()) >= 10 for m in _RULES[-1][1].finditer(text)):
        return _RULES[-1][0]
    return None


def _texts(cell) -> list[str]:
    """The plain texts a reader sees from one code cell: printed text and plain-text results
    (a result that also has an HTML or image form is shown as that on the site)."""
    texts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            text = out.get("text", "")
            texts.append(text if isinstance(text, str) else "".join(text))
        elif out.get("output_type") in ("execute_result", "display_data"):
            data = out.get("data", {})
            if "text/plain" in data and not {"text/html", "image/png",
                                              "text/markdown"} & set(data):
                plain = data["text/plain"]
                texts.append(plain if isinstance(plain, str) else "".join(plain))
    return texts


def raw_reprs(nb) -> list[str]:
    """'cell N: <line> (what it is)' for every output line of ``nb`` that shows a raw repr.

    A printed cvxpy problem ("minimize ... subject to ...") is the problem as the solver reads
    it, which the chapter explains line by line: it is not checked.
    """
    problems = []
    for index, cell in enumerate(nb["cells"]):
        if cell.get("cell_type") != "code":
            continue
        for text in _texts(cell):
            if text.lstrip().startswith(("minimize ", "maximize ")):
                continue
            for line in text.splitlines():
                what = line_problem(line)
                if what:
                    problems.append(f"cell {index}: {line.strip()[:100]} ({what})")
                    break
    return problems
