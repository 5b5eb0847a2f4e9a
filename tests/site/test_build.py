"""The book builds warning-free, fails on a failing cell, has every page, and works offline."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from bookutils import ROOT, toc_docnames
from sitebuild import build

pytestmark = pytest.mark.book
DATA = Path(__file__).parent / "data"
NOTEBOOK_HEADER = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
"""
EXTERNAL = re.compile(r"<(?:script|link)\b[^>]*?\b(?:src|href)=\"(https?://[^\"]+)\"", re.I)


def tiny_book(folder: Path, page: str) -> Path:
    """A one-page book in ``folder`` with the project's _config.yml and ``page`` as its root."""
    folder.mkdir(parents=True)
    for name in ("_config.yml", "references.bib"):
        shutil.copy(ROOT / name, folder / name)
    (folder / "_vendor").symlink_to(ROOT / "_vendor")
    (folder / "_toc.yml").write_text("format: jb-book\nroot: page\n")
    (folder / "page.md").write_text(page)
    return folder


def test_book_builds_cleanly(book_build):
    """`jupyter-book build . -W -n --keep-going` succeeds with no warning at all."""
    warnings = book_build.warnings()
    assert not warnings, "the build warned:\n" + "\n".join(warnings)
    assert book_build.rc == 0, f"build failed (rc {book_build.rc}):\n{book_build.output[-5000:]}"


def test_failing_cell_fails_the_build(tmp_path, vendor):
    """A cell that raises fails the build, with -W and (through raise_on_error) without it."""
    cell = '```{code-cell} ipython3\nraise ValueError("injected failure")\n```\n'
    book = tiny_book(tmp_path / "book", NOTEBOOK_HEADER + "\n# Failing\n\n" + cell)
    strict = build(book)
    assert strict.rc != 0, "the -W build of a book with a failing cell succeeded"
    assert "injected failure" in strict.output, strict.output[-3000:]
    lenient = build(book, args=[])
    assert lenient.rc != 0, "raise_on_error is off: without -W a failing cell only warns"


def test_conventions_sample_builds(tmp_path, vendor):
    """The CONTRIBUTING.md conventions (tests/site/data/sample_chapter.md) build warning-free."""
    result = build(tiny_book(tmp_path / "book", (DATA / "sample_chapter.md").read_text()))
    assert result.rc == 0 and not result.warnings(), \
        "\n".join(result.warnings()) or result.output[-5000:]


def contributing_page() -> str:
    """The ````md snippets of CONTRIBUTING.md in order, as one page ({doc} links unlinked)."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    page = "\n\n".join(re.findall(r"^````md\n(.*?)^````$", text, re.S | re.M))
    return re.sub(r"\{doc\}`([^`]+)`", r"`\1`", page)


def test_contributing_snippets_build(tmp_path, vendor):
    """The snippets of CONTRIBUTING.md run against the library and build warning-free."""
    page = contributing_page()
    assert page.startswith("---\njupytext:"), "the first snippet must be the chapter header"
    result = build(tiny_book(tmp_path / "book", page))
    assert result.rc == 0 and not result.warnings(), \
        "\n".join(result.warnings()) or result.output[-5000:]


def test_every_toc_page_has_html(built_html):
    missing = [name for name in toc_docnames() if not (built_html / f"{name}.html").is_file()]
    assert not missing, f"no HTML for: {missing}"
    assert (built_html / "index.html").is_file()


def test_site_is_offline(built_html):
    """No page loads a script or stylesheet from the network; MathJax and require.js are local."""
    external = {f"{page.relative_to(built_html)}: {url}" for page in built_html.rglob("*.html")
                for url in EXTERNAL.findall(page.read_text())}
    assert not external, "external assets:\n" + "\n".join(sorted(external))
    for asset in ("mathjax/tex-mml-chtml.js", "require.js", "require-config.js",
                  "html-manager/embed-amd.js"):
        assert (built_html / "_static" / asset).is_file(), f"_static/{asset} was not copied"
    intro = (built_html / "intro.html").read_text()
    assert 'src="_static/mathjax/tex-mml-chtml.js' in intro


def test_no_static_folder_in_book_root():
    """Jupyter Book 1 injects every .js/.css under a root _static/ into every page."""
    assert not (ROOT / "_static").exists(), "use _vendor/ (html_static_path), not _static/"
