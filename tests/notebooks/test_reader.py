"""The one MyST reader (scripts/mystreader.py) and what reads through it: the index of labels
(bookindex), the exercise gates (gates, nbgrader_source).

The reference is myst-parser itself: the docutils doctree it builds for the site. Bugs caught
are the ones the hand-written regular expressions had: a directive shown inside a ````md code
block read as a real one (the student pack cut at an exercise that is only an example, the
index gained a label no page defines), a ``$$`` that continues a paragraph taken for a labelled
equation, and a misread gate passed over in silence.
"""
from __future__ import annotations

import nbformat
import pytest
from docutils import nodes
from docutils.core import publish_doctree
from myst_parser.parsers.docutils_ import Parser

import gates
import mystreader
from bookindex import BookIndex
from nbgrader_source import nbgrader_notebook

SNIPPETS = [
    "$$\ny = 2\n$$ (eq-block)\n",
    "$$ x = 1 $$ (eq-one-line)\n",
    "A paragraph\n$$ z = 3 $$ (eq-continues-paragraph)\n",
    "A paragraph\n\n$$ z = 3 $$ (eq-after-blank)\n",
    "- an item\n\n  $$\n  a = b\n  $$ (eq-in-list)\n",
    "> a quote\n>\n> $$ q = 1 $$ (eq-in-quote)\n",
    ":::{note}\n$$ n = 1 $$ (eq-in-note)\n:::\n",
    "````md\n$$ m = 1 $$ (eq-shown-in-code)\n````\n",
    "<!-- $$ c = 1 $$ (eq-in-comment) -->\n",
    "\\begin{equation}\nw = 4\n\\end{equation}\n",
]


def doctree_equation_labels(text: str) -> set[str]:
    """Labels of the display equations myst-parser's docutils parser finds (the site's; a
    ``{math}`` directive's ``:label:`` is Sphinx's, so the snippets leave it out)."""
    doctree = publish_doctree(text, parser=Parser(), settings_overrides={
        "myst_enable_extensions": list(mystreader.site_extensions()), "report_level": 5})
    return {name for block in doctree.findall(nodes.math_block) for name in block["ids"]}


def reader_equation_labels(text: str) -> set[str]:
    found = set()
    for block in mystreader.walk(text):
        if block.kind == "math" and block.name:
            found.add(block.name)
    return found


@pytest.mark.parametrize("snippet", SNIPPETS)
def test_equation_labels_match_myst_parser(snippet):
    """Bug caught: a reader that calls a ``$$ ... $$ (label)`` line an equation where the site
    does not (it continues a paragraph, sits in a code block or a comment) or misses one the
    site numbers (in a list, a quote or a directive)."""
    assert reader_equation_labels(snippet) == doctree_equation_labels(snippet)


def test_the_snippets_cover_both_answers():
    """The parametrised comparison above means something only if the site finds labels in some
    snippets and none in others."""
    found = [bool(doctree_equation_labels(s)) for s in SNIPPETS]
    assert any(found) and not all(found), found


SHOWN = """\
An example of the syntax, not an exercise:

````md
```{prf:theorem} Shown only
:label: thm-shown-only
```

```{exercise-start} Shown only
:label: ex-shown-only
```
````
"""


def test_index_skips_directives_shown_in_code():
    """Bug caught: the index of labels reading a label from a ````md example (a {ref} to it
    would resolve in the notebooks and fail on the site)."""
    index = BookIndex.__new__(BookIndex)
    index.labels, index.pages, index.chapter = {}, {}, {}
    index.add_page("chapters/01-x", SHOWN + "\n```{prf:theorem} Real\n:label: thm-real\n```\n")
    assert set(index.labels) == {"thm-real"}
    assert index.labels["thm-real"].number == "1"


def notebook(*cells) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    for kind, source, *tags in cells:
        make = nbformat.v4.new_markdown_cell if kind == "md" else nbformat.v4.new_code_cell
        cell = make(source)
        if tags:
            cell.metadata["tags"] = list(tags)
        nb.cells.append(cell)
    return nb


def test_gates_skip_directives_shown_in_code():
    """Bug caught: the gates reading an exercise from a ````md example (the regular
    expressions they replaced listed ex-shown-only as an exercise of such a page, so a
    stub-tagged cell after it became its stub) or cutting the example's text."""
    nb = notebook(("md", SHOWN), ("code", "x = 1"))
    student = gates.student_notebook(nb)
    assert [c.source for c in student.cells] == [SHOWN.strip(), "x = 1"]
    assert gates.exercises(gates.pieces(nb)) == {}


GATED = [
    ("md", "```{exercise-start} Square\n:label: ex-square\n```\nWrite `square`."),
    ("code", "def square(x):\n    ...", "exercise-stub"),
    ("md", "```{exercise-end}\n```"),
    ("md", "```{solution-start} ex-square\n```"),
    ("code", "def square(x):\n    return x * x"),
    ("md", "```{solution-end}\n```"),
    ("code", "assert square(3) == 9", "exercise-check"),
]


def test_a_gated_exercise_splits_into_stub_solution_check():
    """The reference reading that the error cases below depart from (so a test that raises for
    every chapter would fail here)."""
    found = gates.exercises(gates.pieces(notebook(*GATED)))
    assert list(found) == ["ex-square"]
    assert found["ex-square"].stubs == ["def square(x):\n    ..."]
    assert found["ex-square"].solutions == ["def square(x):\n    return x * x"]
    assert found["ex-square"].checks == ["assert square(3) == 9"]
    student = gates.student_notebook(notebook(*GATED))
    assert "return x * x" not in "\n".join(c.source for c in student.cells)


@pytest.mark.parametrize("broken, message", [
    ([("md", "```{exercise-start} Square\n```")] + GATED[1:], "no :label:"),
    (GATED[:3] + [("md", "```{solution-start}\n```")] + GATED[4:], "solution"),
    (GATED[:5] + GATED[6:], r"has no \{solution-end\}"),
    (GATED[:3] + [("md", "```{solution-end}\n```")] + GATED[6:], "solution-end"),
    ([("md", "```{exercise} Square\n\nNo fence close\n")], "never closes"),
])
def test_misread_gates_raise_in_every_pack(broken, message):
    """An unlabelled exercise, a solution without a label, a solution gate never closed, a
    stray solution-end or an unclosed fence raise ValueError in both the student pack and the
    nbgrader source. Bug caught: one of the two packs guessing (the old student pack kept an
    unlabelled exercise while the nbgrader source dropped it; an open solution gate leaked the
    rest of the chapter as a solution, or hid it)."""
    with pytest.raises(ValueError, match=message):
        gates.student_notebook(notebook(*broken))
    with pytest.raises(ValueError, match=message):
        nbgrader_notebook(notebook(*broken))


@pytest.mark.parametrize("broken, message", [
    (GATED + [("md", "```{exercise} Again\n:label: ex-square\n```")], "two exercises"),
    ([("md", "```{exercise-end}\n```")], "without an open"),
    (GATED[:2], r"has no \{exercise-end\}"),
    ([("md", "```{exercise} E\n:label: ex-d\n```\n\n::::{note}\n:::{solution} ex-d\nSECRET\n"
             ":::\n::::")], r"\{solution\} inside \{note\}"),
    ([("md", "```{exercise} E\n:label: ex-d\n```\n\n::::{dropdown} Answer\n"
             ":::{solution-start} ex-d\n:::\n::::")], r"\{solution-start\} inside \{dropdown\}"),
])
def test_gates_that_cannot_be_split_raise(broken, message):
    """Bugs caught (found by an independent review): a {solution} inside a {note} or a
    {dropdown} kept in the student pack and the nbgrader source (the gates were read at the
    top level only, so SECRET reached students); a duplicate label or a stray or missing
    exercise-end passed over."""
    with pytest.raises(ValueError, match=message):
        gates.student_notebook(notebook(*broken))
    with pytest.raises(ValueError, match=message):
        nbgrader_notebook(notebook(*broken))


def test_a_fence_with_a_space_before_its_directive_is_a_directive():
    """```` ``` {solution} ex ```` (a space after the backticks) is a solution on the site, as
    myst-parser strips the fence's info string. Bug caught (found by an independent review):
    the reader kept the space, took it for a plain code block, and the student pack printed
    the solution in a code block."""
    nb = notebook(("md", "```{exercise} E\n:label: ex-s\n```\n\n``` {solution} ex-s\n"
                         "Because SECRET.\n```"))
    text = "\n".join(c.source for c in gates.student_notebook(nb).cells)
    assert "SECRET" not in text and "{exercise}" in text


def test_a_check_inside_its_exercise_is_refused():
    """An exercise-check cell before {exercise-end} would be neither a check nor graded: it
    raises. Bug caught: the misplaced check silently became an ordinary locked cell."""
    broken = GATED[:2] + [GATED[6]] + GATED[2:6]
    with pytest.raises(ValueError, match="inside the exercise ex-square"):
        gates.student_notebook(notebook(*broken))
