"""The page "Teaching with this book" (chapters/teaching.md) agrees with the chapters: every
exercise listed once, under its chapter, with its title; prerequisites, reading times and
exercise counts as the chapters state them."""
from __future__ import annotations

import re

import pytest

from bookutils import ROOT, is_notebook, toc_docnames

PAGE = ROOT / "chapters" / "teaching.md"
CHAPTERS = [name for name in toc_docnames() if re.fullmatch(r"chapters/\d\d-[\w-]+", name)]
EXERCISE = re.compile(r"^```\{exercise-start\}\s*(?P<title>.+?)\s*\n:label:\s*(?P<label>\S+)",
                      re.M)
EXERCISE_REF = re.compile(r"\{ref\}`(?P<title>[^`<]+?)\s*<(?P<label>ex-[\w-]+)>`")
DOC = re.compile(r"\{doc\}`([^`]+)`")


def chapter_text(docname: str) -> str:
    return (ROOT / f"{docname}.md").read_text()


def opening_box_item(text: str, item: str) -> str:
    """The text of one item (`- **Prerequisites** ...`) of a chapter's opening box."""
    m = re.search(rf"^- \*\*{item}\*\*(.*?)(?=^- \*\*|^:::)", text, re.M | re.S)
    assert m, f"no '{item}' item in the chapter's opening box"
    return m[1]


def page_sections() -> dict[str, str]:
    """The page's exercise sections, keyed by the chapter their heading links to."""
    text = PAGE.read_text()
    exercises = text.split("\n## Exercises\n", 1)[1].split("\n## ", 1)[0]
    parts = re.split(r"^### \{doc\}`([^`]+)`\s*$", exercises, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_page_is_in_the_book_and_not_a_notebook():
    assert "chapters/teaching" in toc_docnames()
    assert not is_notebook(PAGE), "the page is plain Markdown, not exported as a notebook"


def test_every_exercise_is_listed_under_its_chapter():
    """The page lists each chapter's exercises, in order, with the titles the chapter gives
    them; an exercise added, removed, renamed or relabelled in a chapter fails here."""
    sections = page_sections()
    assert list(sections) == [name.split("/")[1] for name in CHAPTERS], \
        "the page's exercise sections must follow the chapters"
    for name in CHAPTERS:
        expected = [(m["label"], m["title"]) for m in EXERCISE.finditer(chapter_text(name))]
        listed = [(m["label"], m["title"]) for m in
                  EXERCISE_REF.finditer(sections[name.split("/")[1]])]
        assert listed == expected, f"{name}: the page lists {listed}, the chapter has {expected}"


def test_every_listed_exercise_has_a_difficulty_and_a_check():
    for chapter, section in page_sections().items():
        rows = [line for line in section.splitlines() if EXERCISE_REF.search(line)]
        for row in rows:
            cells = [c.strip() for c in row.strip().strip("|").split("|")]
            assert len(cells) == 3 and re.fullmatch(r"★{1,3}", cells[1]) and len(cells[2]) > 20, \
                f"{chapter}: a row needs the exercise, ★ to ★★★ and what its check tests: {row}"


@pytest.mark.parametrize("docname", CHAPTERS)
def test_chapter_map_row(docname):
    """The chapter map repeats the chapter's prerequisites, reading time and exercise count."""
    text = chapter_text(docname)
    stem = docname.split("/")[1]
    rows = [line for line in PAGE.read_text().splitlines()
            if line.startswith(f"| {{doc}}`{stem}` |")]
    assert len(rows) == 1, f"the chapter map needs one row for {stem}"
    builds_on, reading, exercises = [c.strip() for c in rows[0].strip().strip("|").split("|")][1:]
    assert DOC.findall(builds_on) == DOC.findall(opening_box_item(text, "Prerequisites"))
    minutes = re.search(r"about (\d+) minutes to read", opening_box_item(text, "Time"))[1]
    assert reading == f"about {minutes} minutes"
    assert int(exercises) == len(EXERCISE.findall(text))
