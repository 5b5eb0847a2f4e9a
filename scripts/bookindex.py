"""Titles, labels and numbers of every page of the book, as the site shows them.

The notebook export (scripts/export.py) resolves `{prf:ref}`, `{eq}`, `{numref}`, `{ref}` and
`{doc}` with it: "Definition 3.1 (title)", "(3.1)", "Fig. 3.1", per chapter and kind, like
sphinx-proof, Sphinx's numfig and sphinx-exercise number them in the built site.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

from bookutils import ROOT, is_notebook, source_path, toc_docnames

PROOF_KINDS = {
    "axiom", "theorem", "lemma", "definition", "remark", "conjecture", "corollary",
    "algorithm", "criterion", "example", "property", "observation", "proposition",
    "assumption", "notation",
}


@dataclass
class Target:
    """Something a reference can point to: its page, its displayed name, its kind."""

    docname: str
    title: str = ""
    number: str = ""       # "3.1" for numbered boxes, equations and figures
    kind: str = ""         # "theorem", "equation", "figure", "exercise", "section", "page"


# MyST syntax: a directive's opening fence, a code fence, a target line `(label)=`, the end of a
# labelled display equation `$$ (label)`, a heading.
DIRECTIVE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,}|:{3,})\{(?P<name>[\w:-]+)\}"
                       r"[ \t]*(?P<arg>.*?)\s*$")
CODE_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
TARGET_LINE = re.compile(r"^\(([\w:.-]+)\)=\s*$")
MATH_LABEL = re.compile(r"^(?P<pre>.*?)\$\$\s*\((?P<label>[\w:.-]+)\)\s*$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def split_directive(lines: list[str], i: int):
    """The directive opened at ``lines[i]``: (name, arg, options, body lines, next index)."""
    m = DIRECTIVE.match(lines[i])
    fences = [m["fence"]]          # the open fences, innermost last
    j = i + 1
    while j < len(lines):
        stripped = lines[j].strip()
        code = CODE_FENCE.match(lines[j])
        opened = DIRECTIVE.match(lines[j]) or (code if code and code["info"].strip() else None)
        top = fences[-1]
        if opened:
            fences.append(opened["fence"])
        elif stripped and set(stripped) == {top[0]} and len(stripped) >= len(top):
            fences.pop()
            if not fences:
                break
        j += 1
    if j >= len(lines):
        raise ValueError(f"unclosed directive {{{m['name']}}} opened by {lines[i]!r}")
    body = lines[i + 1:j]
    options: dict = {}
    if body and body[0].strip() == "---":
        end = next(k for k in range(1, len(body)) if body[k].strip() == "---")
        options = dict(yaml.safe_load("\n".join(body[1:end])) or {})
        body = body[end + 1:]
    else:
        while body and re.match(r"^\s*:[\w-]+:", body[0]):
            key, _, value = body[0].strip()[1:].partition(":")
            options[key] = value.strip()
            body = body[1:]
    return m["name"], m["arg"], options, body, j + 1


def _chapter_numbers(root: Path) -> dict[str, str]:
    """Docname -> chapter number for the pages of numbered toc parts ('3' for the third)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    numbers: dict[str, str] = {}
    for part in toc.get("parts", []):
        if part.get("numbered"):
            for k, entry in enumerate(part.get("chapters", []), start=len(numbers) + 1):
                numbers[entry["file"]] = str(k)
    return numbers


class BookIndex:
    """Titles, numbers and labels of every page of the toc, for references across pages.

    Numbers follow the site: per page and per kind, prefixed with the chapter number
    ("Definition 3.1", equation "(3.1)", "Fig. 3.1", "Exercise 3.1"); boxes with
    ``:nonumber:`` have none.
    """

    def __init__(self, root: Path = ROOT):
        self.root = root
        self.chapter = _chapter_numbers(root)
        self.labels: dict[str, Target] = {}
        self.pages: dict[str, Target] = {}
        config = yaml.safe_load((root / "_config.yml").read_text())
        self.repo_url = config["repository"]["url"].rstrip("/")
        self.branch = config["repository"].get("branch", "main")
        for docname in toc_docnames(root):
            self.add_page(docname, source_path(docname, root).read_text(encoding="utf8"))

    def number(self, docname: str, counters: dict[str, int], kind: str) -> str:
        counters[kind] = counters.get(kind, 0) + 1
        prefix = self.chapter.get(docname)
        return f"{prefix}.{counters[kind]}" if prefix else str(counters[kind])

    def add_page(self, docname: str, text: str) -> None:
        """Index one page's title, labels, numbered boxes, equations and figures."""
        lines = text.splitlines()
        counters: dict[str, int] = {}
        page = Target(docname, kind="page")
        self.pages[docname] = page
        pending_label = None
        i = 0
        if lines and lines[0].strip() == "---":
            i = lines.index("---", 1) + 1
        while i < len(lines):
            line = lines[i]
            heading = HEADING.match(line)
            if heading and not page.title:
                page.title = heading[2]
            if heading and pending_label:
                self.labels[pending_label] = Target(docname, heading[2], kind="section")
                pending_label = None
            label = TARGET_LINE.match(line)
            if label:
                pending_label = label[1]
            math = MATH_LABEL.match(line)
            if math:
                self.labels[math["label"]] = Target(
                    docname, number=self.number(docname, counters, "equation"), kind="equation")
            opened = DIRECTIVE.match(line)
            if opened:
                name, arg, options, _, after = split_directive(lines, i)
                if name == "code-cell":
                    fig = figure_options(options)
                    if fig is not None:
                        number = self.number(docname, counters, "figure")
                        if fig.get("name"):
                            self.labels[fig["name"]] = Target(
                                docname, fig.get("caption", ""), number, "figure")
                    i = after
                    continue
                kind = name.removeprefix("prf:")
                if name.startswith("prf:") and kind in PROOF_KINDS or name in (
                        "exercise", "exercise-start"):
                    kind = "exercise" if name.startswith("exercise") else kind
                    number = "" if "nonumber" in options else self.number(
                        docname, counters, kind)
                    if options.get("label"):
                        self.labels[options["label"]] = Target(docname, arg, number, kind)
                if name == "math" and options.get("label"):
                    self.labels[options["label"]] = Target(
                        docname, number=self.number(docname, counters, "equation"),
                        kind="equation")
                if name in ("figure", "glue:figure") and options.get("name"):
                    self.labels[options["name"]] = Target(
                        docname, "", self.number(docname, counters, "figure"), "figure")
                if name in ("code-cell", "code-block", "code", "math"):
                    i = after
                    continue
            i += 1

    def link(self, docname: str, from_doc: str, notebook_map: dict[str, str] | None) -> str:
        """Where a reader of ``from_doc``'s notebook finds ``docname``: the sibling notebook,
        else the page's source in the repository."""
        if notebook_map is not None and docname in notebook_map:
            return notebook_map[docname]
        if notebook_map is None and docname in self.exported:
            return f"{PurePosixPath(docname).name}.ipynb"
        suffix = source_path(docname, self.root).suffix
        return f"{self.repo_url}/blob/{self.branch}/{docname}{suffix}"

    @functools.cached_property
    def exported(self) -> set[str]:
        """Docnames of the pages exported as notebooks (the toc pages that are notebooks)."""
        return {d for d in self.pages if is_notebook(source_path(d, self.root))}


def figure_options(options: dict) -> dict | None:
    """The ``mystnb: figure:`` options of a code cell's yaml header (None if not a figure)."""
    mystnb = options.get("mystnb")
    if isinstance(mystnb, dict) and isinstance(mystnb.get("figure"), dict):
        return mystnb["figure"]
    return None


_INDEX_CACHE: dict[Path, BookIndex] = {}


def book_index(root: Path = ROOT) -> BookIndex:
    """The :class:`BookIndex` of ``root`` (built once per process)."""
    if root not in _INDEX_CACHE:
        _INDEX_CACHE[root] = BookIndex(root)
    return _INDEX_CACHE[root]
