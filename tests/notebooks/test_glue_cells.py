"""The checks stay out of the reader's way (issue 39; CONTRIBUTING.md, section 3): on every
notebook page a check cell is folded on the site (`hide-input`), no cell a reader sees calls
`glue` or imports `myst_nb` (the glue calls live in hidden cells tagged `glue` and
`remove-cell`, which the export leaves out), a glue cell binds nothing that a later cell reads,
and the exported notebook holds no glue, folds the checks and does not install myst-nb."""
from __future__ import annotations

import ast
import re

import nbformat
import pytest
from standalone import _bound, _free_reads

import export
from bookutils import chapter_notebooks, read_notebook

PAGES = chapter_notebooks()
GLUE_CALL = re.compile(r"\bglue\(|myst_nb")
GLUE_CELL = {"glue", "remove-cell"}       # its tags: left out of the export, hidden on the site


def tags(cell) -> set[str]:
    return set(cell.metadata.get("tags", []))


def code(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def glue_problems(nb) -> list[str]:
    """What breaks the convention in a page: glue in a cell the reader sees, a glue cell not
    hidden, a check not folded, a later cell reading a name that only a glue cell binds (the
    exported notebook, without glue cells, would fail there or compute with another value)."""
    problems, only_glue = [], {}
    for index, cell in enumerate(code(nb)):
        hidden = GLUE_CELL <= tags(cell)
        if "glue" in tags(cell) and not hidden:
            problems.append(f"code cell {index}: a glue cell must be tagged {sorted(GLUE_CELL)}")
        if GLUE_CALL.search(cell.source) and not hidden:
            problems.append(f"code cell {index}: glue in a cell the reader sees "
                            f"(tags {sorted(tags(cell))}): {cell.source[:60]!r}")
        if "check" in tags(cell) and not tags(cell) & {"hide-input", "remove-cell"}:
            problems.append(f"code cell {index}: a check must be tagged hide-input (folded)")
        tree = ast.parse(cell.source)
        if hidden:
            only_glue.update(dict.fromkeys(_bound(tree), index))
            continue
        for name in sorted(_free_reads(tree) & set(only_glue)):
            problems.append(f"code cell {index} reads {name!r}, which only glue cell "
                            f"{only_glue[name]} binds (the exported notebook leaves it out)")
        for name in _bound(tree):
            only_glue.pop(name, None)
    return problems


@pytest.mark.parametrize("source", PAGES, ids=lambda p: p.stem)
def test_checks_are_folded_and_glue_is_hidden(source):
    """Bug caught: check cells shown open on the site, ending in up to seven lines of
    glue(...) that do nothing for a reader; the set-up cell importing myst_nb."""
    problems = glue_problems(read_notebook(source))
    assert not problems, f"{source.name}:\n" + "\n".join(problems)


class AnyValue(dict):
    """Every glued value is 1: the export is checked for its code, not its numbers."""

    def __contains__(self, key) -> bool:
        return True

    def __getitem__(self, key) -> str:
        return "1"


@pytest.mark.parametrize("source", PAGES, ids=lambda p: p.stem)
def test_exported_notebook_holds_no_glue(source):
    """Bug caught: every exported notebook imported myst_nb and called glue(...) in its checks,
    and its install cell installed myst-nb (with Sphinx, docutils, jupyter-cache and
    SQLAlchemy: 252 s on Colab) for calls that do nothing there; its checks were shown open."""
    plain = export.export_notebook(source, AnyValue(), config=export.read_config())
    cells = code(plain)
    install = cells[0]
    assert install.metadata.get("export") == {"install": True}
    assert not re.search(r"myst", install.source, re.I), "the install cell installs myst-nb"
    glued = [i for i, c in enumerate(cells[1:], 1) if GLUE_CALL.search(c.source)]
    assert not glued, f"{source.name}: code cells {glued} of the export glue or import myst_nb"
    checks = {c.source for c in code(read_notebook(source)) if "check" in tags(c)}
    unfolded = [i for i, c in enumerate(cells) if c.source in checks
                and not (c.metadata.get("jupyter", {}).get("source_hidden")
                         and c.metadata.get("cellView") == "form")]
    assert not unfolded, f"{source.name}: check cells {unfolded} are not folded"


def notebook(*cells: tuple[str, list[str]]) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source, metadata={"tags": t}) for source, t in cells]
    return nb


CHECK = ("x = 1.0\nassert x > 0", ["check", "hide-input"])


@pytest.mark.parametrize("cells, flagged", [
    ([CHECK, ("glue('k', x, display=False)", ["glue", "remove-cell"])], None),
    ([("x = 1.0\nassert x > 0\nglue('k', x, display=False)", ["check", "hide-input"])],
     "glue in a cell the reader sees"),
    ([("from myst_nb import glue\nimport numpy as np", [])], "glue in a cell the reader sees"),
    ([("x = 1.0\nassert x > 0", ["check"])], "must be tagged hide-input"),
    ([CHECK, ("glue('k', x, display=False)", ["remove-cell"])], "glue in a cell"),
    ([CHECK, ("glue('k', x, display=False)", ["glue"])], "must be tagged"),
    ([CHECK, ("low = x / 2\nglue('k', low, display=False)", ["glue", "remove-cell"]),
      ("print(low)", [])], "reads 'low', which only glue cell 1 binds"),
    ([CHECK, ("low = x / 2\nglue('k', low, display=False)", ["glue", "remove-cell"]),
      ("low = 3\nprint(low)", [])], None),
])
def test_the_convention_check_can_fail(cells, flagged):
    problems = glue_problems(notebook(*cells))
    if flagged is None:
        assert problems == []
    else:
        assert any(flagged in p for p in problems), problems
