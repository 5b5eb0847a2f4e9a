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
def pdfs(tmp_path_factory, vendor) -> dict[str, tuple[int, str]]:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    import make_pdf

    folder = tmp_path_factory.mktemp("pdf")
    make_pdf.build_single_page()
    out = {}
    for name, solutions in (("full", True), ("no-solutions", False)):
        make_pdf.print_pdf(make_pdf.SOURCE, folder / f"{name}.pdf", solutions=solutions)
        out[name] = text_of(folder / f"{name}.pdf")
    return out


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
    full, bare = pdfs["full"][1], pdfs["no-solutions"][1]
    def own_line(exercise, seen) -> str:
        """A line of the solution's code that no other cell of the chapter has."""
        return next(re.sub(r"\s+", " ", line.strip()) for source in exercise.solutions
                    for line in source.splitlines()
                    if 12 < len(line.strip()) < 60 and line.strip() not in seen)

    code = [own_line(e, seen) for e, seen in solved if e.solutions]
    headings = full.count("Solution") - bare.count("Solution")   # the prose may say it too
    assert headings >= len(solved), (headings, len(solved))
    flat_full, flat_bare = re.sub(r"\s+", " ", full), re.sub(r"\s+", " ", bare)
    assert all(line in flat_full for line in code), [c for c in code if c not in flat_full]
    assert not [line for line in code if line in flat_bare]
    exercises = sorted({f"Exercise {t.number}" for t in index().labels.values()
                        if t.kind == "exercise" and t.number})
    assert exercises and all(e in re.sub(r"\s+", " ", bare) for e in exercises)
