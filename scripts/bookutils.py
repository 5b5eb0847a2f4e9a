"""Helpers shared by the book scripts and the book tests: the toc, chapter notebooks, export clean-up.

The exercise gates are read by :mod:`gates`, MyST by :mod:`mystreader`.
"""
from __future__ import annotations

import copy
import os
from pathlib import Path

import jupytext
import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]


def in_ci() -> bool:
    """True when the environment variable CI says so (CI=true): skips become failures."""
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def toc_docnames(root: Path = ROOT) -> list[str]:
    """Docnames (paths without suffix) of every page in ``_toc.yml``, in reading order."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    names = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                names.append(entry["file"])
            for key in ("parts", "chapters", "sections"):
                walk(entry.get(key))

    walk(toc.get("parts", []) + toc.get("chapters", []))
    return names


def source_path(docname: str, root: Path = ROOT) -> Path:
    """The source file of a docname (``.md`` or ``.ipynb``)."""
    for suffix in (".md", ".ipynb"):
        path = root / f"{docname}{suffix}"
        if path.exists():
            return path
    raise FileNotFoundError(f"_toc.yml lists {docname!r} but neither .md nor .ipynb exists")


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """Read a MyST Markdown notebook (or an .ipynb) as an nbformat v4 notebook."""
    return jupytext.read(path)


def is_notebook(path: Path) -> bool:
    """True for a MyST Markdown notebook (jupytext header with a kernelspec) or an .ipynb."""
    if path.suffix == ".ipynb":
        return True
    text = path.read_text()
    if not text.startswith("---"):
        return False
    front = yaml.safe_load(text.split("---", 2)[1]) or {}
    return "kernelspec" in front


def has_code_cells(path: Path) -> bool:
    """True when the page is a notebook with at least one code cell."""
    return is_notebook(path) and any(c.cell_type == "code" for c in read_notebook(path).cells)


def chapter_notebooks(root: Path = ROOT) -> list[Path]:
    """Source paths of the toc pages that are notebooks (the chapters and any notebook page)."""
    paths = [source_path(name, root) for name in toc_docnames(root)]
    return [p for p in paths if is_notebook(p)]


def clean_for_export(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop outputs, execution counts and jupytext metadata; give every cell a unique id."""
    nb = copy.deepcopy(nb)
    nb.metadata.pop("jupytext", None)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nb.nbformat, nb.nbformat_minor = 4, max(nb.get("nbformat_minor", 5), 5)
    return nb
