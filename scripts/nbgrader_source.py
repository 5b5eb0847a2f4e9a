"""The nbgrader source version of a chapter (the third pack of scripts/make_course.py).

The chapter's exercise gates (CONTRIBUTING.md, section 6) become nbgrader cells (nbgrader 0.9,
cell metadata schema 3), so that `nbgrader generate_assignment` and `nbgrader autograde` run on
the result unchanged:

- the **stub** cell becomes an *autograded answer* cell: the stub's `def` lines and docstrings
  stay, and each function body is the solution's body between `### BEGIN SOLUTION` and
  `### END SOLUTION`. nbgrader replaces that region with `# YOUR CODE HERE` and
  `raise NotImplementedError()`, which gives back the stub of the student pack.
- solution code that is not a stubbed function (a demonstration, a helper) becomes an autograded
  answer cell of its own, wholly between the markers; students see nbgrader's code stub there.
- the solution's prose and its `{solution-start}` and `{solution-end}` gates are dropped, as in
  the student pack (nbgrader accepts a markdown answer cell only when it is graded by hand;
  the prose stays in the instructor pack).
- each **check** cell becomes an *autograder test* cell worth `points` points, locked.
- every other cell, text or code, is *read-only* (locked).
"""
from __future__ import annotations

import ast
import copy

import nbformat

from gates import exercises as exercises_of
from gates import pieces as split

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
SCHEMA_VERSION = 3
POINTS = 1


def nbgrader_metadata(grade_id: str, *, solution: bool = False, grade: bool = False,
                      locked: bool = False, points: int | None = None) -> dict:
    """The `nbgrader` cell metadata of one cell (nbgrader's schema 3)."""
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked,
            "schema_version": SCHEMA_VERSION, "solution": solution, "task": False}
    if grade:
        meta["points"] = points
    return meta


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def _functions(source: str) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in ast.parse(source).body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _head_and_body(lines: list[str], node: ast.FunctionDef) -> tuple[int, int, int]:
    """(first line of the head, first line of the body, end) of a function, 0-based, with the
    head being the decorators, the `def` lines and the docstring."""
    start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    first = node.body[0]
    docstring = (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                 and isinstance(first.value.value, str))
    body = first.end_lineno if docstring else first.lineno - 1
    if docstring and len(node.body) == 1:
        body = node.end_lineno
    return start, body, node.end_lineno


def _answer_cell(stub: str, solutions: list[str], label: str) -> tuple[str, set[str]]:
    """The stub with each function body replaced by the solution's, between the markers.

    Returns the new source and the names of the functions taken from the solutions."""
    solved: dict[str, tuple[list[str], ast.FunctionDef]] = {}
    for source in solutions:
        for name, node in _functions(source).items():
            solved[name] = (source.splitlines(), node)
    stub_lines = stub.splitlines()
    out, pos, used = [], 0, set()
    for name, node in sorted(_functions(stub).items(), key=lambda item: item[1].lineno):
        if name not in solved:
            raise ValueError(f"{label}: the solution does not define `{name}` from the stub")
        start, body, end = _head_and_body(stub_lines, node)
        sol_lines, sol_node = solved[name]
        s_start, s_body, s_end = _head_and_body(sol_lines, sol_node)
        head = [line.rstrip() for line in stub_lines[start:body]]
        if head != [line.rstrip() for line in sol_lines[s_start:s_body]]:
            raise ValueError(
                f"{label}: the `def {name}` lines and docstring of the solution differ from the "
                "stub's; make them identical (nbgrader keeps the stub's head and swaps the body)")
        new_body = sol_lines[s_body:s_end]
        if not any(line.strip() for line in new_body):
            raise ValueError(f"{label}: the solution's `{name}` has no body")
        indent = _indent(next(line for line in new_body if line.strip()))
        out += stub_lines[pos:body] + [indent + BEGIN] + new_body + [indent + END]
        pos = end
        used.add(name)
    out += stub_lines[pos:]
    return "\n".join(out), used


def _remainder(source: str, names: set[str]) -> str:
    """``source`` without the top-level functions ``names`` (already in the answer cell)."""
    lines = source.splitlines()
    drop = set()
    for name, node in _functions(source).items():
        if name in names:
            start, _, end = _head_and_body(lines, node)
            drop |= set(range(start, end))
    kept = [line for i, line in enumerate(lines) if i not in drop]
    code = [line for line in kept if line.strip() and not line.strip().startswith("#")]
    return "\n".join(kept).strip("\n") if code else ""


def nbgrader_notebook(nb: nbformat.NotebookNode, points: int = POINTS) -> nbformat.NotebookNode:
    """A copy of the chapter ``nb`` as an nbgrader source notebook (see the module docstring).

    Raises ValueError when an exercise cannot be graded: a stub without solution, or a solution
    whose function heads differ from the stub's."""
    pieces = split(nb)
    exercises = exercises_of(pieces)
    for label, entry in exercises.items():
        if entry.stubs and not entry.solutions:
            raise ValueError(f"{label}: the exercise has a stub but no solution code")

    cells, used_ids = [], set()

    def grade_id(base: str) -> str:
        name, n = base, 1
        while name in used_ids:
            n += 1
            name = f"{base}-{n}"
        used_ids.add(name)
        return name

    taken: dict[str, set[str]] = {}
    for index, piece in enumerate(pieces):
        cell, label = piece.cell, piece.label
        if piece.role == "stub":
            solutions = exercises[label].solutions
            cell.source, names = _answer_cell(cell.source, solutions, label)
            taken.setdefault(label, set()).update(names)
            meta = nbgrader_metadata(grade_id(f"{label}-answer"), solution=True)
        elif piece.role == "solution-code":
            rest = _remainder(cell.source, taken.get(label, set()))
            if not rest:
                continue
            cell.source = f"{BEGIN}\n{rest}\n{END}"
            meta = nbgrader_metadata(grade_id(f"{label}-answer"), solution=True)
        elif piece.role == "solution-text":
            continue
        elif piece.role == "check":
            meta = nbgrader_metadata(grade_id(f"{label}-check"), grade=True, locked=True,
                                     points=points)
        else:
            meta = nbgrader_metadata(grade_id(f"read-only-{index:03d}"), locked=True)
        cell.metadata["nbgrader"] = meta
        cells.append(cell)
    new = copy.deepcopy(nb)
    new.cells = cells
    return new


def lock_unmarked(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Make every cell without nbgrader metadata read-only (a cell that a later step added,
    such as the export's install cell), with a grade id no other cell has."""
    taken = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells if "nbgrader" in c.metadata}
    for index, cell in enumerate(nb.cells):
        if "nbgrader" not in cell.metadata:
            name, n = f"read-only-added-{index:03d}", 1
            while name in taken:
                n += 1
                name = f"read-only-added-{index:03d}-{n}"
            taken.add(name)
            cell.metadata["nbgrader"] = nbgrader_metadata(name, locked=True)
    return nb
