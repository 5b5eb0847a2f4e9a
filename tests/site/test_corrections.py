"""Two versions of a tiny book: the record of its numbers and verdicts, the version on its
pages, and an "Updates and corrections" page that lists exactly the planted changes."""
from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pytest

from sitebuild import BUILD_ARGS, build
from test_tiny_books import NOTEBOOK_HEADER, tiny_book

pytestmark = pytest.mark.book

# Version 1 of a chapter: a count, a cosine just below a rounding boundary of its 4 printed
# decimals, and a value that stays. Version 2 plants one change of a number (51 -> 39) and
# moves the cosine by 2e-8 across the boundary: printed 0.1234 then 0.1235, not a change.
CHAPTER = NOTEBOOK_HEADER + """
# Counts

```{{code-cell}} ipython3
from myst_nb import glue

glue("trapped", {trapped}, display=False)
glue("cos", {cos!r}, display=False)
glue("slack", 0.5, display=False)
```

Of the runs, {{glue:text}}`trapped:d` are trapped (see {{doc}}`appendix`). The cosine is
{{glue:text}}`cos:.4f` and the slack {{glue:text}}`slack:.2f`.
"""
# The appendix quotes both numbers in a table with a Status column; version 2 plants one
# changed verdict.
APPENDIX = """# Reproduction

| Claim | Measured | Status |
|---|---|---|
| the trap count | {{glue:text}}`01-counts.md::trapped:d` runs | {status} |
| the cosine | {{glue:text}}`01-counts.md::cos:.4f` | reproduced |
"""
UPDATES = "# Updates and corrections\n\n```{updates-and-corrections}\n```\n"
ROOT_PAGE = "# Tiny\n\nA tiny book.\n"


def write_version(book: Path, version: str, *, trapped: int, cos: float, status: str) -> None:
    (book / "pyproject.toml").write_text(f'[project]\nname = "tiny"\nversion = "{version}"\n')
    (book / "chapters" / "01-counts.md").write_text(CHAPTER.format(trapped=trapped, cos=cos))
    (book / "chapters" / "appendix.md").write_text(APPENDIX.format(status=status))


def change_rows(page: Path) -> list[tuple[list[str], list[str]]]:
    """(classes, cell texts) of each row of the updates page's tables."""
    text = page.read_text()
    rows = []
    for classes, body in re.findall(r'<tr class="([^"]*change-[^"]*)"[^>]*>(.*?)</tr>', text, re.S):
        cells = [" ".join(html.unescape(re.sub(r"<[^>]+>", "", c)).split())
                 for c in re.findall(r"<td[^>]*>(.*?)</td>", body, re.S)]
        rows.append((classes.split(), cells))
    return rows


def test_updates_page_lists_exactly_the_planted_changes(tmp_path, vendor):
    """Build 1 (version 0.1.0, no previous release): the page says "first release", the record
    has every printed value with its sentence or row and both verdicts, the version shows on
    the pages. Build 2 (0.2.0, build 1's record kept as releases/0.1.0): the page lists the
    count 51 -> 39 and the verdict reproduced -> deviates, nothing else (not the cosine whose
    last printed digit flipped), and links the count to where it is printed."""
    chapters = {"chapters/01-counts": "", "chapters/appendix": "", "updates": UPDATES}
    book = tiny_book(tmp_path / "book", ROOT_PAGE, docname="intro", chapters=chapters)
    write_version(book, "0.1.0", trapped=51, cos=0.12344999, status="reproduced")
    first = build(book, BUILD_ARGS + ["--all"])
    assert first.rc == 0 and not first.warnings(), \
        "\n".join(first.warnings()) or first.output[-5000:]

    record = json.loads((first.html / "_static" / "numbers.json").read_text())
    assert record["version"] == "0.1.0"
    printed = {(n["page"], n["key"]): n for n in record["numbers"] if n["format"]}
    assert set(printed) == {("chapters/01-counts", k) for k in ("trapped", "cos", "slack")} | \
        {("chapters/appendix", k) for k in ("trapped", "cos")}, sorted(printed)
    count = printed["chapters/01-counts", "trapped"]
    assert (count["chapter"], count["text"], count["raw"]) == ("chapters/01-counts", "51", "51")
    assert count["context"] == "Of the runs, 51 are trapped (see Reproduction).", count["context"]
    assert printed["chapters/01-counts", "cos"]["text"] == "0.1234"
    assert printed["chapters/appendix", "trapped"]["context"] == \
        "the trap count | 51 runs | reproduced"
    assert [(v["claim"], v["verdict"]) for v in record["verdicts"]] == \
        [("the trap count", "reproduced"), ("the cosine", "reproduced")]
    page = (first.html / "updates.html").read_text()
    assert "first release" in page and not change_rows(first.html / "updates.html")
    for name in ("intro.html", "chapters/01-counts.html"):
        assert re.search(r'class="book-version"[^>]*>\s*(<a [^>]*>)?v0\.1\.0<',
                         (first.html / name).read_text()), f"no version in the header of {name}"
        assert "Version 0.1.0 of the book" in (first.html / name).read_text()

    kept = book / "releases" / "0.1.0" / "numbers.json"
    kept.parent.mkdir(parents=True)
    shutil.copy(first.html / "_static" / "numbers.json", kept)
    write_version(book, "0.2.0", trapped=39, cos=0.12345001, status="deviates")
    second = build(book, BUILD_ARGS + ["--all"])
    assert second.rc == 0 and not second.warnings(), \
        "\n".join(second.warnings()) or second.output[-5000:]
    assert json.loads((second.html / "_static" / "numbers.json").read_text())["version"] == "0.2.0"
    page = second.html / "updates.html"
    rows = change_rows(page)
    assert len(rows) == 2, rows
    (number,) = [cells for classes, cells in rows if "change-number" in classes]
    (verdict,) = [cells for classes, cells in rows if "change-verdict" in classes]
    assert number[:4] == ["changed", "trapped", "51", "39"], number
    assert verdict[:4] == ["verdict changed", "the trap count", "reproduced", "deviates"], verdict
    text = page.read_text()
    assert "first release" not in text and "against version 0.1.0" in text
    assert "1 verdict changed" in text, "a changed verdict must stand out in its own box"
    link = re.search(r'href="([^"]+)"[^>]*>\s*Of the runs, 39 are trapped \(see Reproduction\)\.',
                     text)
    assert link and link.group(1) == "chapters/01-counts.html#num-trapped", link
    assert 'id="num-trapped"' in (second.html / "chapters" / "01-counts.html").read_text()
    assert 'v0.2.0' in (second.html / "chapters" / "01-counts.html").read_text()
