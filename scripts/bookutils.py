"""Helpers shared by the book scripts and the book tests: the toc, chapter notebooks, exercises.

Chapter conventions (exercise gates, tags) are documented in CONTRIBUTING.md.
"""
from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import jupytext
import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
STUB_TAG = "exercise-stub"
CHECK_TAG = "exercise-check"

# The opening line of a MyST directive, with backtick or colon fences: ```{name} argument
_DIRECTIVE = re.compile(r"^\s*(?P<fence>`{3,}|:{3,})\{(?P<name>[\w-]+)\}\s*(?P<arg>.*?)\s*$")
_GATES = {"exercise", "exercise-start", "exercise-end", "solution-start", "solution-end", "solution"}


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


# ----------------------------------------------------------------------------- exercises

@dataclass
class Exercise:
    """One gated exercise: its stub cells, its solution cells and its optional check cells."""

    label: str
    stubs: list[str] = field(default_factory=list)
    solutions: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    has_solution: bool = False


def _directive_blocks(lines: list[str]):
    """Yield (start, stop, name, arg, body) for every top-level gate directive in ``lines``."""
    i = 0
    while i < len(lines):
        m = _DIRECTIVE.match(lines[i])
        if not m or m["name"] not in _GATES:
            i += 1
            continue
        fence = m["fence"]
        j = i + 1
        while j < len(lines):
            closing = lines[j].strip()
            if closing and set(closing) == {fence[0]} and len(closing) >= len(fence):
                break
            j += 1
        yield i, min(j + 1, len(lines)), m["name"], m["arg"], lines[i + 1:j]
        i = j + 1


def _label(body: list[str]) -> str:
    for line in body:
        if line.strip().startswith(":label:"):
            return line.split(":label:", 1)[1].strip()
    return ""


def scan(nb: nbformat.NotebookNode):
    """Split a notebook along its exercise and solution gates.

    Returns ``(student_cells, exercises)``: the cells with every solution region and every
    ``{solution}`` directive removed (markdown cells are cut at the gate lines), and the
    exercises found, keyed by label.
    """
    exercises: dict[str, Exercise] = {}
    student: list[nbformat.NotebookNode] = []
    exercise: Exercise | None = None   # open exercise-start gate
    solution: Exercise | None = None   # open solution-start gate
    last: Exercise | None = None       # the exercise a check cell belongs to

    def get(label: str) -> Exercise:
        return exercises.setdefault(label, Exercise(label))

    for cell in nb.cells:
        if cell.cell_type == "code":
            tags = cell.metadata.get("tags", [])
            if solution is not None:
                solution.solutions.append(cell.source)
                continue
            if exercise is not None and STUB_TAG in tags:
                exercise.stubs.append(cell.source)
            if CHECK_TAG in tags and last is not None:
                last.checks.append(cell.source)
            student.append(cell)
            continue
        if cell.cell_type != "markdown":
            if solution is None:
                student.append(cell)
            continue
        lines = cell.source.splitlines()
        keep: list[str] = []
        pos = 0
        for start, stop, name, arg, body in _directive_blocks(lines):
            if solution is None:
                keep += lines[pos:start]
            if name == "exercise-start":
                exercise = get(_label(body) or f"unlabelled-{len(exercises)}")
                keep += lines[start:stop]
            elif name == "exercise":  # not gated: it cannot hold a stub, which the tests flag
                last = get(_label(body) or f"unlabelled-{len(exercises)}")
                keep += lines[start:stop]
            elif name == "exercise-end":
                last, exercise = exercise, None
                keep += lines[start:stop]
            elif name == "solution-start":
                solution = get(arg)
                solution.has_solution = True
            elif name == "solution-end":
                last, solution = solution, None
            elif name == "solution" and solution is None:
                get(arg).has_solution = True
            pos = stop
        if solution is None:
            keep += lines[pos:]
        text = "\n".join(keep).strip("\n")
        if text.strip():
            new = copy.deepcopy(cell)
            new.source = text
            student.append(new)
    return student, exercises


def student_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``nb`` without solutions (see :func:`scan`)."""
    cells, _ = scan(nb)
    new = copy.deepcopy(nb)
    new.cells = cells
    return new


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
