"""The book's PDF (`make pdf`, scripts/make_pdf.py), read back with pypdf.

Built once per session from the single-page build (which takes the chapter stage's saved
runs, so nothing executes again), printed twice: with the solutions (the default) and without.
The expected titles, box, equation and figure numbers come from the label index of the pages
(scripts/bookindex.py), which the site tests compare with what Sphinx prints.
"""
from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path

import pytest

from bookutils import ROOT, chapter_notebooks, read_notebook

pytestmark = pytest.mark.browser
CHROMIUM = Path("/usr/bin/chromium")


def text_of(path: Path) -> tuple[int, str, list[str], int]:
    """(pages, the text of every page with ligatures and spacing normalised, the opening of
    each page with all whitespace as one space, the number of images drawn)."""
    import pypdf

    reader = pypdf.PdfReader(path)
    texts = [unicodedata.normalize("NFKC", page.extract_text() or "") for page in reader.pages]
    images = 0
    for page in reader.pages:
        objects = (page.get("/Resources") or {}).get("/XObject") or {}
        objects = objects.get_object() if hasattr(objects, "get_object") else objects
        images += sum(1 for x in objects.values() if x.get_object().get("/Subtype") == "/Image")
    openings = [re.sub(r"\s+", " ", t[:200]) for t in texts]
    return len(texts), re.sub(r"[ \t]+", " ", "\n".join(texts)), openings, images


@pytest.fixture(scope="module")
def pdf_files(tmp_path_factory, vendor) -> dict[str, Path]:
    """The PDF with the solutions ("full") and without ("no-solutions")."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    import make_pdf

    folder = tmp_path_factory.mktemp("pdf")
    make_pdf.build_single_page()
    out = {}
    for name, solutions in (("full", True), ("no-solutions", False)):
        out[name] = folder / f"{name}.pdf"
        make_pdf.print_pdf(make_pdf.SOURCE, out[name], solutions=solutions)
    return out


@pytest.fixture(scope="module")
def pdfs(pdf_files) -> dict[str, tuple[int, str, list[str], int]]:
    return {name: text_of(path) for name, path in pdf_files.items()}


def index():
    from bookindex import book_index

    return book_index(ROOT)


def test_title_page_gives_the_version(pdfs):
    """The first page is the title page: the book's title and "Version X.Y.Z, released DATE"
    with pyproject.toml's version and CITATION.cff's date, at its top."""
    import tomllib

    import yaml

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    released = yaml.safe_load((ROOT / "CITATION.cff").read_text())["date-released"]
    title = yaml.safe_load((ROOT / "_config.yml").read_text())["title"]
    for name in ("full", "no-solutions"):
        _, text, openings, _ = pdfs[name]
        first = openings[0]
        assert first.startswith(title), first
        assert f"Version {version}, released {released}" in first, first


def test_every_chapter_box_and_figure_is_in_the_pdf(pdfs):
    """Every page of the toc starts a PDF page with its title (the contents list alone would
    not do), every numbered box and exercise ("Definition 2.3") and figure number ("Fig.
    3.1") appears, every figure's image is drawn; a book-length page count. Bugs caught: a
    chapter missing from the single page, chapters run together, figures not loaded when
    printing, numbers lost."""
    pages, text, openings, images = pdfs["full"]
    assert 100 < pages < 2000, pages
    flat = re.sub(r"\s+", " ", text)
    book = index()
    titles = [t.title for name, t in book.pages.items() if name != next(iter(book.pages))]
    unstarted = [t for t in titles if not any(t in opening for opening in openings[1:])]
    assert not unstarted, f"no PDF page starts with: {unstarted}"
    figures = [t for t in book.labels.values() if t.kind == "figure"]
    assert images >= len(figures) > 0, (images, len(figures))
    numbered = {f"{'Fig.' if t.kind == 'figure' else t.kind.capitalize()} {t.number}"
                for t in book.labels.values()
                if t.number and t.kind not in ("equation", "section", "page")}
    assert len(numbered) > 40
    absent = sorted(n for n in numbered if n not in flat)
    assert not absent, f"numbers not in the PDF: {absent}"


def test_no_raw_myst_or_tex_in_the_pdf(pdfs):
    """MathJax typeset every formula and no MyST markup is printed. Bugs caught: printing
    before MathJax finished ($$, \\( left), a directive the single-page build did not
    render, a collapsed solution printed as its toggle ("Click to show")."""
    _, text, _, _ = pdfs["full"]
    leftovers = {what: text.count(what) for what in
                 ("$$", "\\(", "\\[", "\\begin{", "{glue", "{prf:", "```{", ":::", "{eq}",
                  "{ref}", "{doc}", "Click to show", "Math input error", "Undefined control")}
    assert not any(leftovers.values()), {k: v for k, v in leftovers.items() if v}


def test_solutions_are_printed_or_left_out_by_the_switch(pdfs):
    """With the answer key, every solution of the book is printed (its heading "Solution" and
    its code); with --no-solutions none is, and the exercises stay. Bug caught: solutions
    printed collapsed (title only), or the switch removing the exercises too."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import gates

    solved = []          # (exercise, every line of its chapter that students see)
    for path in chapter_notebooks():
        nb = read_notebook(path)
        seen = {line.strip() for cell in gates.student_notebook(nb).cells
                for line in cell.source.splitlines()}
        for exercise in gates.exercises(gates.pieces(nb)).values():
            if exercise.has_solution:
                solved.append((exercise, seen))
    assert solved
    # the chapters also print library source (book.source.show of mm.reference, ...)
    shown = {line.strip() for path in (ROOT / "lib" / "maxmargin").rglob("*.py")
             for line in path.read_text().splitlines()}
    full, bare = pdfs["full"][1], pdfs["no-solutions"][1]
    def own_line(exercise, seen) -> str:
        """A line of the solution's code that no other cell of the chapter, nor the library
        source the chapters show, has."""
        return next(re.sub(r"\s+", " ", line.strip()) for source in exercise.solutions
                    for line in source.splitlines()
                    if 12 < len(line.strip()) < 60 and line.strip() not in seen
                    and line.strip() not in shown)

    code = [own_line(e, seen) for e, seen in solved if e.solutions]
    headings = full.count("Solution") - bare.count("Solution")   # the prose may say it too
    assert headings >= len(solved), (headings, len(solved))
    flat_full, flat_bare = re.sub(r"\s+", " ", full), re.sub(r"\s+", " ", bare)
    assert all(line in flat_full for line in code), [c for c in code if c not in flat_full]
    assert not [line for line in code if line in flat_bare]
    exercises = sorted({f"Exercise {t.number}" for t in index().labels.values()
                        if t.kind == "exercise" and t.number})
    assert exercises and all(e in re.sub(r"\s+", " ", bare) for e in exercises)


def outline(path: Path) -> list[tuple[str, int, list]]:
    """The PDF's bookmarks as a tree: (title with spacing normalised, 0-based page, children)."""
    import pypdf

    reader = pypdf.PdfReader(path)

    def walk(items) -> list:
        nodes = []
        for item in items:
            if isinstance(item, list):          # pypdf: the children follow their parent
                nodes[-1][2].extend(walk(item))
            else:
                title = re.sub(r"\s+", " ", unicodedata.normalize("NFKC", item.title)).strip()
                nodes.append((title, reader.get_destination_page_number(item), []))
        return nodes

    return walk(reader.outline)


def test_the_outline_is_parts_chapters_sections(pdf_files):
    """The bookmarks are the book's: the introduction, then each part of _toc.yml ("Chapters",
    "Appendices") holding its pages in toc order (numbered "3. Title" in the numbered part),
    each page holding its sections ("3.2 ..."); every bookmark opens the page where its
    heading is, in reading order. Bugs caught: no outline at all (printed without
    outline=True), the parts missing (chapters at the top level), the title page's or the
    printed contents list's headings in it, titles run together or repeated (Chromium's own
    bookmark titles), chapters or sections out of place."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = index().pages
    tree = outline(pdf_files["full"])
    assert [t for t, _, _ in tree] == [pages[toc["root"]].title] + [
        part["caption"] for part in toc["parts"]], [t for t, _, _ in tree]
    _, _, openings, _ = text_of(pdf_files["full"])
    flat = []
    for (title, page, children), part in zip(tree[1:], toc["parts"]):
        expected = [pages[entry["file"]].title for entry in part["chapters"]]
        got = [t for t, _, _ in children]
        if part.get("numbered"):
            expected = [f"{k}. {t}" for k, t in enumerate(expected, start=1)]
        assert got == expected, (title, got, expected)
        assert openings[page].strip().startswith(title), (title, openings[page])
        for k, (chapter, start, sections) in enumerate(children, start=1):
            assert chapter.split(". ", 1)[-1] in openings[start], (chapter, openings[start])
            if part.get("numbered"):
                assert sections, f"{chapter}: no sections in the outline"
                assert all(t.startswith(f"{k}.{j}. ") for j, (t, _, _) in
                           enumerate(sections, start=1)), (chapter, sections)
            flat += [start] + [p for _, p, _ in sections]
    assert flat == sorted(flat), "bookmarks out of reading order"


# the background of a code cell's input (myst-nb's --mystnb-source-bg-color, #f7f7f7)
CODE_FRAME = (0.969, 0.969, 0.969)


def code_frames(path: Path, tall: float = 36.0) -> tuple[int, list[tuple[int, float]]]:
    """(how many code frames taller than ``tall`` pt the pages draw, [(1-based page, the share
    of the page's height) of each one that holds no text]). 36 pt is three lines of code: a
    lower bar also finds the padding of a framed cell (a 25-34 pt sliver on 2 pages) whose
    kept-together input moved on. Reads each page's drawing
    operations: the filled shapes in CODE_FRAME's colour (clipped to the page) and the
    origins of the text runs, both through the transformation matrices."""
    import pypdf
    from pypdf.generic import ContentStream

    def times(a, b):
        return [a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3],
                a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3],
                a[4] * b[0] + a[5] * b[2] + b[4], a[4] * b[1] + a[5] * b[3] + b[5]]

    def point(m, x, y):
        return m[0] * x + m[2] * y + m[4], m[1] * x + m[3] * y + m[5]

    reader = pypdf.PdfReader(path)
    frames, empty = 0, []
    for number, page in enumerate(reader.pages, start=1):
        height = float(page.mediabox.top)
        ctm, fill, stack, path_points, shapes, texts = [1, 0, 0, 1, 0, 0], None, [], [], [], []
        tm = line = [1, 0, 0, 1, 0, 0]
        for operands, op in ContentStream(page.get_contents(), reader).operations:
            values = [float(v) for v in operands] if op in (
                b"cm", b"rg", b"m", b"l", b"c", b"re", b"Tm", b"Td") else []
            if op == b"q":
                stack.append((ctm, fill))
            elif op == b"Q":
                ctm, fill = stack.pop()
            elif op == b"cm":
                ctm = times(values, ctm)
            elif op == b"rg":
                fill = tuple(round(v, 3) for v in values)
            elif op in (b"m", b"l", b"c"):
                path_points.append(point(ctm, *values[-2:]))
            elif op == b"re":
                x, y, w, h = values
                path_points += [point(ctm, x, y), point(ctm, x + w, y + h)]
            elif op in (b"f", b"f*", b"B", b"B*", b"b", b"b*"):
                if path_points and fill == CODE_FRAME:
                    xs, ys = [p[0] for p in path_points], [p[1] for p in path_points]
                    shapes.append((min(xs), max(0, min(ys)), max(xs), min(height, max(ys))))
                path_points = []
            elif op in (b"n", b"S", b"s"):
                path_points = []
            elif op == b"BT":
                tm = line = [1, 0, 0, 1, 0, 0]
            elif op == b"Tm":
                tm = line = values
            elif op == b"Td":
                tm = line = times([1, 0, 0, 1, *values], line)
            elif op in (b"Tj", b"TJ", b"'", b'"'):
                texts.append(point(times(tm, ctm), 0, 0))
        for x0, y0, x1, y1 in shapes:
            if y1 - y0 < tall or x1 - x0 < 40:
                continue
            frames += 1
            if not any(x0 <= x <= x1 and y0 <= y <= y1 for x, y in texts):
                empty.append((number, round((y1 - y0) / height, 2)))
    return frames, empty


def test_no_empty_code_frames(pdf_files):
    """No page shows a code cell's frame with nothing in it: printed code flows across pages
    (a short cell is kept whole). Bug caught: a code block that scrolls on screen
    (overflow:auto) cannot be split, so Chromium moved it whole to the next page and left its
    cell's frame empty at the foot of this one (60 pages before the fix, up to 72% of a
    page), and a block longer than a page was clipped."""
    for name, path in pdf_files.items():
        frames, empty = code_frames(path)
        # a bound that the frame colour was found at all (196 code frames in the full PDF when
        # the glue-only cells left the page, issue 39), not a count of the book's cells
        assert frames > 150, f"{name}: only {frames} code frames found: is CODE_FRAME the colour?"
        assert not empty, f"{name}: (page, share of the page) of empty code frames: {empty}"


# what the screen shows and paper cannot use: myst-nb's toggles of hidden code, the copy
# button's label, the hints under wide figures and tables ("swipe for ..."), the launch
# button's rocket icon, the live explorers' widgets
SCREEN_ONLY = ("Hide code cell", "Show code cell", "Copy to clipboard", "swipe for",
               "rocket", "Run this cell in Jupyter", "Toggle hidden content")


def test_no_screen_only_controls_or_words(pdfs):
    """The PDF says nothing that only makes sense on screen (SCREEN_ONLY). Bugs caught: the
    label of opened hidden code ("Hide code cell source" under the intro's figure), prose
    pointing at the "rocket icon", a live explorer's "run this cell" note printed."""
    for name in ("full", "no-solutions"):
        text = re.sub(r"\s+", " ", pdfs[name][1])
        found = {phrase: text.count(phrase) for phrase in SCREEN_ONLY if phrase in text}
        assert not found, (name, found)


def test_checks_are_printed_without_their_glue(pdfs):
    """The PDF prints the checks' code (the site folds it; the print opens it: the book's first
    40 assert lines are found) and never a glue call: the glue cells are hidden. Bug caught (issue 39): the checks ended in lines of
    glue(...) that were printed in the PDF."""
    for name in ("full", "no-solutions"):
        text = re.sub(r"\s+", " ", pdfs[name][1])
        assert "glue(" not in text and "myst_nb" not in text, name
        asserts = [re.sub(r"\s+", " ", line)[:24] for source in chapter_notebooks()
                   for cell in read_notebook(source).cells
                   if "check" in cell.metadata.get("tags", [])
                   and "remove-cell" not in cell.metadata.get("tags", [])
                   for line in cell.source.splitlines() if line.startswith("assert ")][:40]
        missing = [a for a in asserts if a not in text]
        assert asserts and not missing, (name, missing)


def test_wide_tables_are_printed_whole(pdfs):
    """A table wider than the printed column wraps its cells instead of being cut at the page's
    edge: the notation appendix's last columns are in the PDF. Bug caught: paper does not
    scroll, and the printed table stopped at "mm.least_d" under a "swipe for more columns"
    hint (the hint itself: test_no_screen_only_controls_or_words)."""
    for name in ("full", "no-solutions"):
        text = re.sub(r"\s+", "", pdfs[name][1])
        assert "mm.least_distance" in text and "mm.CvxpyProgram" in text, name
