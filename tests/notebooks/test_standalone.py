"""Every chapter runs standalone: no cell reads a name an exercise binds or a later cell
binds again, no draw from a global random state, no generator shared between cells (re-running a cell after the
exercises must give the same output). Static; tests/chapters/test_execute.py re-runs one page for real."""
from __future__ import annotations

import nbformat
import pytest

from bookutils import chapter_notebooks, read_notebook
from standalone import code_cells, global_rng_uses, overwritten_reads, rebound_later

PAGES = chapter_notebooks()


@pytest.mark.parametrize("source", PAGES, ids=lambda p: p.stem)
def test_chapter_is_standalone(source):
    cells = code_cells(read_notebook(source))
    problems = overwritten_reads(cells) + rebound_later(cells) + global_rng_uses(cells)
    assert not problems, f"{source.name}:\n" + "\n".join(problems)


def notebook(*cells) -> nbformat.NotebookNode:
    """Cells given as (source, tags) or a markdown string starting with '#md '."""
    nb = nbformat.v4.new_notebook()
    for cell in cells:
        if isinstance(cell, str) and cell.startswith("#md "):
            nb.cells.append(nbformat.v4.new_markdown_cell(cell[4:]))
        else:
            source, tags = cell if isinstance(cell, tuple) else (cell, [])
            nb.cells.append(nbformat.v4.new_code_cell(source, metadata={"tags": tags}))
    return nb


EXERCISE = [
    "#md ```{exercise-start} E\n:label: ex-e\n```",
    ("def f():\n    raise NotImplementedError", ["exercise-stub"]),
    "#md ```{exercise-end}\n```\n\n```{solution-start} ex-e\n```",
    "def f():\n    return inst.X",
    "#md ```{solution-end}\n```",
]


def test_a_cell_reading_what_an_exercise_check_rebinds_is_flagged():
    """The realistic bug: an exercise check reuses `inst`, and re-running an earlier cell
    then plots the exercise's instance."""
    nb = notebook("inst = make()", "plot(inst)", *EXERCISE,
                  ("inst = other()\nassert f() is inst.X", ["exercise-check"]))
    assert overwritten_reads(code_cells(nb)) == [
        "code cell 1 reads 'inst', which exercise cell 4 binds"]


def test_names_of_its_own_loops_comprehensions_and_functions_are_not_flagged():
    nb = notebook("x = [s for s in range(3)]\nfor t in x:\n    print(t)\n"
                  "def g(s):\n    return s + 1\nt = 0\nt += 1",
                  *EXERCISE, ("s, t = 1, 2\nassert f() is not None", ["exercise-check"]))
    assert overwritten_reads(code_cells(nb)) == []
    nb = notebook("print(t)", *EXERCISE, ("t = 2", ["exercise-check"]))
    assert overwritten_reads(code_cells(nb)) == [
        "code cell 0 reads 't', which exercise cell 3 binds"]


@pytest.mark.parametrize("source, flagged", [
    ("x = np.random.normal(size=3)", "np.random.normal uses the global state"),
    ("np.random.seed(0)", "np.random.seed uses the global state"),
    ("x = torch.randn(3)", "torch.randn uses the global state"),
    ("torch.manual_seed(0)", "torch.manual_seed uses the global state"),
    ("import random\nx = random.random()", "random.random uses the global state"),
])
def test_global_random_state_is_flagged(source, flagged):
    problems = global_rng_uses(code_cells(notebook(source)))
    assert len(problems) == 1 and flagged in problems[0], problems


def test_seeded_generators_pass_unless_shared_between_cells():
    fine = notebook("rng = np.random.default_rng(0)\nx = rng.normal(size=3)",
                    "y = np.random.default_rng(1).normal()",
                    "g = torch.Generator().manual_seed(0)\nz = torch.randn(3, generator=g)")
    assert global_rng_uses(code_cells(fine)) == []
    shared = notebook("rng = np.random.default_rng(0)", "x = rng.normal(size=3)")
    assert global_rng_uses(code_cells(shared)) == [
        "code cell 1 draws from rng, created in code cell 0"]


def test_a_name_bound_again_later_is_flagged():
    """Chapter 5 read the ball radius `R` that later loops `for R in radii` rebind."""
    nb = notebook("R = 16.0", "print(R * 2)", "for R in [1, 2]:\n    print(R)",
                  "def at(run, R):\n    return R")
    assert rebound_later(code_cells(nb)) == [
        "code cell 1 reads 'R', which code cell 2 binds again"]


def test_a_glue_cell_may_read_a_name_bound_again_later():
    """A glue cell (hidden on the site, left out of the notebook) runs once, in order: it is
    not re-run by a reader, so reading a name that a later cell rebinds is no problem there."""
    nb = notebook("R = 16.0", ("glue('05-r', R, display=False)", ["glue", "remove-cell"]),
                  "print(R * 2)", "for R in [1, 2]:\n    print(R)")
    assert rebound_later(code_cells(nb)) == [
        "code cell 2 reads 'R', which code cell 3 binds again"]
