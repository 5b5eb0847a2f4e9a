"""The exercise gates of a chapter (CONTRIBUTING.md, "Exercises"): one reading of them.

The student pack (:func:`student_notebook`), the nbgrader source (:mod:`nbgrader_source`) and
the tests all split a chapter with :func:`pieces`, so they agree on which cells are stubs,
solutions and checks. A chapter's gates are MyST directives, read by :mod:`mystreader`:

- ``{exercise-start}`` (with a ``:label:``) ... ``{exercise-end}``: the task; code cells tagged
  ``exercise-stub`` inside it are the stubs;
- ``{exercise}`` (with a ``:label:``): an ungated task (it can hold no stub);
- ``{solution-start} <label>`` ... ``{solution-end}``: everything between, code or text, is the
  solution; a ``{solution} <label>`` directive is a solution in one piece;
- code cells tagged ``exercise-check`` after an exercise (or its solution) are its checks.

An exercise without a label or with one already used, a solution without a label, a gate left
open or closed twice, and a gate inside another directive (a solution in a ``{note}``) raise
``ValueError`` naming the gate: a pack built from a misread chapter would leak or lose answers.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import nbformat

from mystreader import LITERAL, blocks, walk

STUB_TAG = "exercise-stub"
CHECK_TAG = "exercise-check"
GATES = {"exercise", "exercise-start", "exercise-end", "solution-start", "solution-end",
         "solution"}
ROLES = ("text", "code", "stub", "check", "solution-text", "solution-code")


@dataclass
class Piece:
    """One cell of the split chapter: its role (one of :data:`ROLES`), the cell (a markdown cell
    holds only the lines of that role), its exercise's label ("" outside exercises) and the
    index of the chapter cell it came from."""

    role: str
    cell: nbformat.NotebookNode
    label: str = ""
    origin: int = 0


@dataclass
class Exercise:
    """One exercise: the sources of its stub, solution and check cells."""

    label: str
    stubs: list[str] = field(default_factory=list)
    solutions: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    has_solution: bool = False


def _label(options: dict, line: str) -> str:
    label = str(options.get("label", "")).strip()
    if not label:
        raise ValueError(f"an exercise has no :label: ({line})")
    return label


def _refuse_nested_gates(block, where: str) -> None:
    """Raise when a gate sits inside the directive ``block`` (a solution in a {note} or a
    {dropdown}): the packs cut cells at top-level gates only, so it would reach students."""
    if block.name in LITERAL:
        return
    for inner in walk("\n".join(block.body)):
        if inner.kind == "directive" and inner.name in GATES:
            raise ValueError(f"{{{inner.name}}} inside {{{block.name}}} ({where}): put exercise "
                             f"and solution gates at the top level of a cell")


def pieces(nb: nbformat.NotebookNode) -> list[Piece]:
    """The cells of ``nb`` with their roles, markdown cells cut at the gates (the gate
    directives of exercises stay in the text, those of solutions go with the solution)."""
    out: list[Piece] = []
    exercise = solution = last = ""   # open exercise gate, open solution gate, check owner
    seen: set[str] = set()            # exercise labels met so far

    def add(role: str, cell, lines: list[str], label: str, origin: int) -> None:
        text = "\n".join(lines).strip("\n")
        if text.strip():
            new = copy.deepcopy(cell)
            new.source = text
            out.append(Piece(role, new, label, origin))

    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            tags = cell.metadata.get("tags", [])
            if solution:
                role, label = "solution-code", solution
            elif exercise and STUB_TAG in tags:
                role, label = "stub", exercise
            elif CHECK_TAG in tags and exercise:
                raise ValueError(f"an {CHECK_TAG} cell inside the exercise {exercise} (it comes "
                                 f"after the exercise, or after its solution)")
            elif CHECK_TAG in tags and last:
                role, label = "check", last
            else:
                role, label = "code", ""
            out.append(Piece(role, copy.deepcopy(cell), label, index))
            continue
        if cell.cell_type != "markdown":
            out.append(Piece("solution-text" if solution else "text", copy.deepcopy(cell),
                             solution, index))
            continue
        lines = cell.source.splitlines()
        pos, keep = 0, []
        for block in blocks(cell.source):
            if block.kind != "directive":
                continue
            _refuse_nested_gates(block, lines[block.start].strip())
            if block.name not in GATES:
                continue
            start, stop, name = block.start, block.stop, block.name
            where = lines[start].strip()
            if solution:
                add("solution-text", cell, lines[pos:start], solution, index)
            else:
                keep += lines[pos:start]
            if name in ("exercise-start", "exercise"):
                label = _label(block.options, where)
                if label in seen:
                    raise ValueError(f"two exercises are labelled {label} ({where})")
                seen.add(label)
                if name == "exercise-start":
                    exercise = label
                else:
                    last = label
                keep += lines[start:stop]
            elif name == "exercise-end":
                if not exercise:
                    raise ValueError(f"{where} without an open {{exercise-start}}")
                last, exercise = exercise, ""
                keep += lines[start:stop]
            elif name in ("solution-start", "solution"):
                if solution:
                    raise ValueError(f"{where} inside the open solution of {solution}")
                if not block.arg.strip():
                    raise ValueError(f"a solution names no exercise ({where})")
                add("text", cell, keep, "", index)
                keep = []
                if name == "solution-start":
                    solution = block.arg.strip()
                else:
                    add("solution-text", cell, lines[start:stop], block.arg.strip(), index)
            elif name == "solution-end":
                if not solution:
                    raise ValueError(f"{where} without an open {{solution-start}}")
                last, solution = solution, ""
            pos = stop
        if solution:
            add("solution-text", cell, lines[pos:], solution, index)
        else:
            keep += lines[pos:]
        add("text", cell, keep, "", index)
    if solution:
        raise ValueError(f"the solution of {solution} has no {{solution-end}}")
    if exercise:
        raise ValueError(f"the exercise {exercise} has no {{exercise-end}}")
    return out


def exercises(split: list[Piece]) -> dict[str, Exercise]:
    """The exercises of a split chapter (:func:`pieces`), by label, in order of appearance."""
    found: dict[str, Exercise] = {}
    fields = {"stub": "stubs", "solution-code": "solutions", "check": "checks"}
    for piece in split:
        if not piece.label:
            continue
        entry = found.setdefault(piece.label, Exercise(piece.label))
        if piece.role in fields:
            getattr(entry, fields[piece.role]).append(piece.cell.source)
        entry.has_solution |= piece.role.startswith("solution")
    return found


def student_cells(split: list[Piece]) -> list[nbformat.NotebookNode]:
    """The cells a student sees: no solution; the text left of one chapter cell stays one cell."""
    cells: list[nbformat.NotebookNode] = []
    previous: Piece | None = None
    for piece in split:
        if piece.role.startswith("solution"):
            continue
        if (piece.role == "text" and previous is not None and previous.role == "text"
                and previous.origin == piece.origin and piece.cell.cell_type == "markdown"):
            cells[-1].source += "\n" + piece.cell.source
        else:
            cells.append(copy.deepcopy(piece.cell))
        previous = piece
    return cells


def scan(nb: nbformat.NotebookNode) -> tuple[list[nbformat.NotebookNode], dict[str, Exercise]]:
    """``(student cells, exercises by label)`` of a chapter (see :func:`pieces`)."""
    split = pieces(nb)
    return student_cells(split), exercises(split)


def student_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``nb`` without solutions (see :func:`pieces`)."""
    new = copy.deepcopy(nb)
    new.cells = student_cells(pieces(nb))
    return new
