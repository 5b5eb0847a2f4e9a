"""Titles, labels and numbers of every page of the book, as the site shows them.

The notebook export (scripts/export.py) resolves `{prf:ref}`, `{eq}`, `{numref}`, `{ref}` and
`{doc}` with it: "Definition 3.1 (title)", "(3.1)", "Fig. 3.1", per chapter and kind, like
sphinx-proof, Sphinx's numfig and sphinx-exercise number them in the built site.
"""
from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

from bookutils import ROOT, is_notebook, source_path, toc_docnames
from mystreader import walk

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
        # the published site (html: baseurl), where pages without a notebook are read
        self.site_url = (config.get("html") or {}).get("baseurl", "").rstrip("/")
        self.substitutions = dict((config.get("parse") or {}).get("myst_substitutions") or {})
        if (root / "pyproject.toml").is_file():   # as _ext/booksite/release.py adds it
            project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
            self.substitutions.setdefault("book_version", project["version"])
        if (root / "CITATION.cff").is_file():
            from release import book_bibtex

            self.substitutions.setdefault("book_bibtex", f"```bibtex\n{book_bibtex(root)}\n```")
        for docname in toc_docnames(root):
            self.add_page(docname, source_path(docname, root).read_text(encoding="utf8"))

    def number(self, docname: str, counters: dict[str, int], kind: str) -> str:
        counters[kind] = counters.get(kind, 0) + 1
        prefix = self.chapter.get(docname)
        return f"{prefix}.{counters[kind]}" if prefix else str(counters[kind])

    def add_page(self, docname: str, text: str) -> None:
        """Index one page's title, labels, numbered boxes, equations and figures."""
        counters: dict[str, int] = {}
        page = Target(docname, kind="page")
        self.pages[docname] = page
        pending_label = None      # a `(label)=` target: it names the block that follows it
        for block in walk(text):
            if block.kind == "heading":
                page.title = page.title or block.name
                if pending_label:
                    self.labels[pending_label] = Target(docname, block.name, kind="section")
            pending_label = block.name if block.kind == "target" else None
            if block.kind == "math" and block.name:
                self.labels[block.name] = Target(
                    docname, number=self.number(docname, counters, "equation"), kind="equation")
            elif block.kind == "math" and block.arg == "amsmath" and _numbered(block):
                self.number(docname, counters, "equation")   # Sphinx numbers it, unlabelled
            if block.kind != "directive":
                continue
            name, arg, options = block.name, block.arg, block.options
            if name == "code-cell":
                fig = figure_options(options)
                if fig is not None:
                    number = self.number(docname, counters, "figure")
                    if fig.get("name"):
                        self.labels[fig["name"]] = Target(
                            docname, fig.get("caption", ""), number, "figure")
                continue
            kind = name.removeprefix("prf:")
            if name.startswith("prf:") and kind in PROOF_KINDS or name in (
                    "exercise", "exercise-start"):
                kind = "exercise" if name.startswith("exercise") else kind
                number = "" if "nonumber" in options else self.number(docname, counters, kind)
                if options.get("label"):
                    self.labels[options["label"]] = Target(docname, arg, number, kind)
            if name == "math" and options.get("label"):
                self.labels[options["label"]] = Target(
                    docname, number=self.number(docname, counters, "equation"), kind="equation")
            if name in ("figure", "glue:figure") and options.get("name"):
                self.labels[options["name"]] = Target(
                    docname, "", self.number(docname, counters, "figure"), "figure")

    def link(self, docname: str, from_doc: str, notebook_map: dict[str, str] | None) -> str:
        """Where a reader of ``from_doc``'s notebook finds ``docname``: the sibling notebook
        (``notebook_map``, default: every exported page), else the page on the published site
        (``html: baseurl`` of _config.yml), else its source in the repository."""
        if notebook_map is not None and docname in notebook_map:
            return notebook_map[docname]
        if notebook_map is None and docname in self.exported:
            return f"{PurePosixPath(docname).name}.ipynb"
        if self.site_url:
            return f"{self.site_url}/{docname}.html"
        suffix = source_path(docname, self.root).suffix
        return f"{self.repo_url}/blob/{self.branch}/{docname}{suffix}"

    @functools.cached_property
    def exported(self) -> set[str]:
        """Docnames of the pages exported as notebooks (the toc pages that are notebooks)."""
        return {d for d in self.pages if is_notebook(source_path(d, self.root))}


def _numbered(block) -> bool:
    """An amsmath environment that takes an equation number on the site (Sphinx numbers every
    unstarred one, ``\\begin{align}`` and ``\\begin{pmatrix}`` alike, once per block)."""
    found = re.match(r"\\begin\{([^}]+)\}", block.body[0].strip()) if block.body else None
    return bool(found) and not found[1].endswith("*")


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
