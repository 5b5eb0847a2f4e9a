"""The whole book, built once per session (tests/site/conftest.py): no warning, every page, offline,
one script each, the repository linked, chapter times measured."""
from __future__ import annotations

import re

import pytest
import yaml

from bookutils import ROOT, chapter_notebooks, toc_docnames

pytestmark = pytest.mark.book
# A script or a <link> from the network (not the canonical URL, which is the page's own address).
EXTERNAL = re.compile(r"<(?:script|link)\b(?![^>]*\brel=\"canonical\")[^>]*?\b(?:src|href)="
                      r"\"(https?://[^\"]+)\"", re.I)


def test_book_builds_cleanly(book_build):
    """`jupyter-book build . -W -n --keep-going` succeeds with no warning at all, and the log has
    no kernel chatter that a reader would take for an error."""
    warnings = book_build.warnings()
    assert not warnings, "the build warned:\n" + "\n".join(warnings)
    assert book_build.rc == 0, f"build failed (rc {book_build.rc}):\n{book_build.output[-5000:]}"
    noise = [line for line in book_build.output.splitlines()
             if re.search(r"IPKernelApp|Debugger warning|frozen modules|ERROR|Traceback", line)]
    assert not noise, "the build log has alarming lines:\n" + "\n".join(noise)
    assert not (book_build.html / "reports").exists() or not any(
        (book_build.html / "reports").rglob("*.err.log")), "a clean build left failure reports"
    if book_build.reused:
        # The chapter stage's runs were handed over (tests/site/conftest.py): a page whose
        # outputs the cache does not match would be executed again, doubling the suite's time.
        executed = [line for line in book_build.output.splitlines()
                    if "Executing notebook" in line]
        cached = [line for line in book_build.output.splitlines()
                  if "Using cached notebook" in line]
        assert not executed and len(cached) == len(chapter_notebooks()), \
            f"pages executed again: {executed}; cached: {len(cached)}"


def test_no_chapter_output_is_a_raw_repr(built_html):
    """Bug caught (issue 39): a result shown on the site as Python's repr, e.g. chapter 7's
    `{'NGD on W': {'alpha': [2, 3, 7, 4, 7, 0], 'gap': 30.592858...`, instead of a table
    (maxmargin.book.tables). Reads the notebooks this build executed (or took from the cache)."""
    import json
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "chapters"))
    from raw_reprs import raw_reprs

    executed = sorted((built_html.parent / "jupyter_execute" / "chapters").glob("*.ipynb"))
    assert len(executed) == sum(p.parent.name == "chapters" for p in chapter_notebooks())
    found = {p.stem: raw_reprs(json.loads(p.read_text(encoding="utf8"))) for p in executed}
    found = {stem: lines for stem, lines in found.items() if lines}
    assert not found, "raw reprs on the site:\n" + "\n".join(
        f"{stem} {line}" for stem, lines in found.items() for line in lines)


def test_every_toc_page_has_html(built_html):
    missing = [name for name in toc_docnames() if not (built_html / f"{name}.html").is_file()]
    assert not missing, f"no HTML for: {missing}"
    assert (built_html / "index.html").is_file()


def test_site_is_offline(built_html):
    """No page loads a script or stylesheet from the network; MathJax is local."""
    external = {f"{page.relative_to(built_html)}: {url}" for page in built_html.rglob("*.html")
                for url in EXTERNAL.findall(page.read_text())}
    assert not external, "external assets:\n" + "\n".join(sorted(external))
    assert (built_html / "_static" / "mathjax" / "tex-mml-chtml.js").is_file(), \
        "_static/mathjax/tex-mml-chtml.js was not copied"
    intro = (built_html / "intro.html").read_text()
    assert 'src="_static/mathjax/tex-mml-chtml.js' in intro


def test_no_widget_javascript(built_html):
    """No page embeds widget state, so no widget JavaScript is loaded or shipped (it was a
    7.5 MB html-manager copy that no page used)."""
    pages = [page for page in built_html.rglob("*.html")
             if "application/vnd.jupyter.widget" in page.read_text()]
    assert not pages, f"pages with widget state (they would need widget JavaScript): {pages}"
    shipped = [p for p in ("html-manager", "require.js", "require-config.js")
               if (built_html / "_static" / p).exists()]
    assert not shipped, f"widget JavaScript shipped in _static/: {shipped}"


def test_page_scripts_are_declared_once(built_html):
    """Each inline script once per page (sphinx-thebe's `const THEBE_JS_URL` was declared twice,
    a console error), and the theme's colour mode defaults to a valid value ("auto")."""
    for page in [built_html / "intro.html", *sorted((built_html / "chapters").glob("*.html"))]:
        html = page.read_text()
        inline = re.findall(r"<script>(.*?)</script>", html, re.S)
        twice = sorted({body for body in inline if inline.count(body) > 1})
        assert not twice, f"{page.name}: inline scripts repeated: {twice}"
        assert 'localStorage.getItem("mode") || "auto"' in html, \
            f"{page.name}: the theme's default mode is not 'auto' (html_context.default_mode)"


def test_repository_url_is_a_link(built_html):
    """Where the landing page and the running appendix give the repository URL, it is a link."""
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    for page in ("intro.html", "chapters/appendix-running.html"):
        html = (built_html / page).read_text()
        article = html[html.find('<article class="bd-article"'):html.find("</article>")]
        assert f'href="{repo}"' in article, f"{page}: the repository URL is not a link"


def test_chapter_times_are_measured(built_html):
    """The running appendix shows each chapter's execution time, measured by this build."""
    html = (built_html / "chapters" / "appendix-running.html").read_text()
    start = html.find('class="chapter-times')
    assert start >= 0, "no chapter-times table in the running appendix"
    table = html[start:html.find("</table>", start)]
    for docname in toc_docnames():
        if docname.startswith("chapters/0"):
            page = docname.split("/")[-1] + ".html"
            row = re.search(r"<tr[^>]*>(?:(?!</tr>).)*?" + re.escape(page) + r".*?</tr>", table, re.S)
            assert row, f"no execution-time row for {docname}"
            assert re.search(r"<td><p>\d+\.\d</p></td>\s*<td><p>ran</p></td>", row.group(0)), \
                row.group(0)


def test_no_static_folder_in_book_root():
    """Jupyter Book 1 injects every .js/.css under a root _static/ into every page."""
    assert not (ROOT / "_static").exists(), "use _vendor/ (html_static_path), not _static/"


def test_published_notebooks_have_no_dead_links(built_html):
    """Every link of the site's downloadable notebooks leads somewhere: a sibling notebook that
    is published, a page (and heading) of the site, a file of the repository. Bugs caught: a
    relative `[text](<page>.md)` link left as it was (no such file beside the notebook), links to
    appendices sent to GitHub's raw MyST, a section anchor the site does not have."""
    from notebook_links import dead_links, hrefs

    import nbformat

    notebooks = sorted((built_html / "notebooks").glob("*.ipynb"))
    assert len(notebooks) == len(chapter_notebooks())
    dead = [f"{path.name}: {d}" for path in notebooks for d in dead_links(path, built_html)]
    assert not dead, "\n".join(dead)
    count = sum(len(hrefs(nbformat.read(p, as_version=4))) for p in notebooks)
    assert count > 20, f"only {count} links: the link reader is broken"
