"""The book's version on every page, read from its one source, ``pyproject.toml``.

**One version.** The version of the book is the library's: ``[project] version`` of
``pyproject.toml`` (of the book's folder when it has one, else of this repository). At
``config-inited`` it becomes Sphinx's ``version`` and ``release``, the MyST substitutions
``{{ book_version }}`` and ``{{ book_bibtex }}`` (the landing page's "Citing this book": the
BibTeX of this version, from CITATION.cff, by scripts/release.py) and the template variable
``book_version``. ``CITATION.cff`` carries the same number and the release date;
``scripts/release.py check`` (the release workflow's first job) refuses a tag that disagrees.

**Shown on every page.** ``templates/book-version.html`` puts "vX.Y.Z" in the article header,
next to the sidebar toggle, on every page and at every width (the header stays at 390 px where
the sidebar folds away); ``templates/book-version-footer.html`` adds "Version X.Y.Z" with a
link to the "Updates and corrections" page to the footer. The PDF prints it on its title page
(scripts/make_pdf.py).
"""
from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from sphinx.application import Sphinx

REPOSITORY = Path(__file__).resolve().parents[2]
HEADER_ITEM = "book-version.html"
FOOTER_ITEM = "book-version-footer.html"


def book_version(folder: Path) -> str:
    """``[project] version`` of the pyproject.toml in ``folder``, else in this repository."""
    path = Path(folder) / "pyproject.toml"
    if not path.is_file():
        path = REPOSITORY / "pyproject.toml"
    return tomllib.loads(path.read_text())["project"]["version"]


def bibtex(folder: Path, version: str) -> str:
    """scripts/release.py's BibTeX of the book at ``version`` (CITATION.cff of ``folder`` when
    it has one, else of this repository)."""
    if str(REPOSITORY / "scripts") not in sys.path:
        sys.path.insert(0, str(REPOSITORY / "scripts"))
    from release import book_bibtex

    return book_bibtex(folder if (folder / "CITATION.cff").is_file() else REPOSITORY, version)


def set_version(app: Sphinx, config) -> None:
    """config-inited: the version everywhere a page or a template can read it."""
    version = book_version(Path(app.srcdir))
    config.version = config.release = version
    config.html_context = {**(config.html_context or {}), "book_version": version}
    config.myst_substitutions = {**(config.myst_substitutions or {}), "book_version": version,
                                 "book_bibtex": f"```bibtex\n{bibtex(Path(app.srcdir), version)}\n```"}
    options = config.html_theme_options
    header = list(options.get("article_header_start") or ["toggle-primary-sidebar.html"])
    if HEADER_ITEM not in header:
        options["article_header_start"] = header + [HEADER_ITEM]
    footer = list(options.get("footer_content_items")
                  or ["author.html", "copyright.html", "last-updated.html", "extra-footer.html"])
    if FOOTER_ITEM not in footer:
        options["footer_content_items"] = footer + [FOOTER_ITEM]
