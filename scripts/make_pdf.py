"""The whole book as one PDF: make_pdf.py [--out FILE] [--no-solutions] (`make pdf`).

The route: Jupyter Book's single-page HTML build (``--builder singlehtml``) printed by Debian's
Chromium (the browser the tests already drive, through Playwright). It keeps what the site
shows and a LaTeX build would have to redo: MathJax typesets the same TeX (amsmath, the
macros of _config.yml), the figures are the executed outputs, sphinx-proof's boxes and the
equation and figure numbers are Sphinx's, and no TeX distribution (about 1 GB of Debian
packages) is needed. Before printing, the site's chrome (sidebars, header buttons, search) is
hidden, the collapsed solutions are opened (an answer key, in place after each exercise) or,
with ``--no-solutions``, removed (the exercises and their checks stay), and a title page is put
first: the book's title, authors, version (pyproject.toml's) and release date (CITATION.cff's).
The PDF's outline (bookmarks) is the book's: parts, chapters, sections (PART_HEADINGS). Printed
code flows across pages instead of leaving empty frames, and what only works on screen (code
toggles, copy buttons, live explorers) is left out (PRINT_CSS).

The pages' outputs come from the chapter stage's saved runs when they are current
(scripts/executed.py), so `make test-chapters` then `make pdf` executes nothing; otherwise the
build executes every chapter, as `make book` does.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import subprocess
import sys
import threading
from pathlib import Path

import executed
import yaml
from bookutils import ROOT, chapter_notebooks, toc_docnames
from release import package_version

OUT = ROOT / "_build" / "pdf" / "maxmargin-book.pdf"
SOURCE = ROOT / "_build" / "singlehtml"
CHROMIUM = Path("/usr/bin/chromium")
ROOT_PAGE = toc_docnames()[0]     # the single page (index.html only redirects to it)
# what a printed page does not need, and a solution when the answer key is left out
PRINT_CSS = """
.bd-header, .bd-sidebar-primary, .bd-sidebar-secondary, .header-article, .bd-footer,
.bd-footer-article, .prev-next-area, .toggle-button, .headerlink, .search-button,
#pst-back-to-top, .sidebar-toggle { display: none !important; }
.bd-main .bd-content .bd-article-container { max-width: 100% !important; }
.bd-page-width { max-width: 100% !important; }
.toggle-hidden { display: block !important; visibility: visible !important; height: auto !important; }
img { max-width: 100% !important; page-break-inside: avoid; }
figure, .admonition, .proof { page-break-inside: avoid; }
span[id^="document-"] + section { break-before: page; }   /* each page of the book */
h1, h2, h3, h4, h5, h6, .admonition-title, p.caption { break-after: avoid; }
pre { white-space: pre-wrap !important; overflow-wrap: anywhere; font-size: 0.78em !important; }
/* A scrolling box cannot be split across pages (Chromium moves it whole to the next page),
   so a code block with overflow:auto left its cell's frame empty at the foot of a page and
   was clipped when longer than a page: printed code flows line by line; a short cell
   (marked pdf-keep by KEEP_SHORT_CELLS) stays on one page. */
pre, div.highlight, div.cell_input, div.cell_output, .figure-scroll { overflow: visible !important; max-height: none !important; }
div.highlight, div[class*="highlight-"] { break-inside: auto !important; }   /* the theme's avoid */
pre { orphans: 3; widows: 3; }
.pdf-keep { break-inside: avoid !important; }
/* a code input too long to keep whole starts on the page where its frame does: one line of
   code is enough there (with the default 3, the frame's top was left empty at a page's foot) */
div.cell_input:not(.pdf-keep) pre { orphans: 1; }
/* the theme's print header: its title is the title page's, its contents a page of their own;
   the introduction's title, which the theme hides in print, is shown instead */
#jb-print-docs-body > h1 { display: none !important; }
#jb-print-docs-body { break-after: page; }
.pdf-contents-title { font-size: 2em; margin: 1em 0 0.5em; }
.bd-main .bd-content .bd-article h1:first-of-type { display: block !important; }
/* screen-only controls and words: the labels of collapsed code ("Show/Hide code cell
   source"), copy buttons, the hint to swipe a wide figure, and the live explorers (a widget
   that runs only in Jupyter, with its note; the paper has the static twin that follows) */
details.hide > summary, .copybtn, .figure-scroll::after, .cell.tag_live-explorer,
.pst-scrollable-table-container::after,
.admonition:has(+ .cell.tag_live-explorer) { display: none !important; }
/* paper does not scroll: a table wider than the column wraps its cells (the notation
   appendix's tables were cut at the page's edge under a "swipe for more columns" hint), and a
   formula keeps no cut-edge shadow */
.pst-scrollable-table-container { overflow: visible !important; }
.pst-scrollable-table-container table:not(.mm-table) { table-layout: fixed; width: 100% !important;
                                                       font-size: 0.85em; }
table th, table td, table td code span.pre { white-space: normal !important;
                                             overflow-wrap: anywhere; }
span.math.scrolls, div.math.scrolls { box-shadow: none !important; }
/* the parts of the book (PART_HEADINGS) each on a page of their own */
h1.pdf-part { break-before: page; break-after: page; text-align: center; padding-top: 30vh;
              font-size: 2.4em; }
"""
NO_SOLUTIONS_CSS = ".solution { display: none !important; }"
TITLE_PAGE_CSS = """
.pdf-title-page { break-after: page; text-align: center; padding-top: 30vh; }
.pdf-title-page .pdf-title { font-size: 2.2em; font-weight: 600; margin-bottom: 0.6em; }
.pdf-title-page p { margin: 0.4em 0; }
.pdf-title-page .pdf-version { font-size: 1.3em; font-weight: 600; margin-bottom: 2em; }
"""
ADD_TITLE_PAGE = """(html) => {
  const page = document.createElement('div');
  page.className = 'pdf-title-page';
  page.innerHTML = html;
  document.body.prepend(page);
}"""
OPEN_ALL = """() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'));
}"""
# The outline (PDF bookmarks) comes from the headings: the intro's title and the chapters are
# h1 and h2 in the single page, and the parts of _toc.yml ("Chapters", "Appendices") are no
# heading at all (Sphinx drops a toctree's caption when it inlines the pages). One h1 per part
# before its pages makes the outline parts > chapters > sections.
PART_HEADINGS = """(captions) => {
  const parts = document.querySelectorAll('.bd-article div.toctree-wrapper');
  if (parts.length !== captions.length)
    return `${parts.length} toctrees in the page for ${captions.length} parts of _toc.yml`;
  parts.forEach((part, i) => {
    const heading = document.createElement('h1');
    heading.className = 'pdf-part';
    heading.textContent = captions[i];
    part.before(heading);
  });
  return null;
}"""
# The theme's printed contents list is no heading (the outline starts at the introduction).
CONTENTS_NOT_HEADINGS = """() => {
  document.querySelectorAll('#jb-print-toc h2').forEach(h => {
    const p = document.createElement('p');
    p.className = 'pdf-contents-title';
    p.textContent = h.textContent.trim();
    h.replaceWith(p);
  });
  document.querySelectorAll('#jb-print-docs-body [role=heading]').forEach(e => {
    e.removeAttribute('role'); e.removeAttribute('aria-level');
  });
}"""
# The printed headings in order, [level, text]: Chromium's own bookmark titles run the lines of
# a heading together ("Locally-optimal tokens and theattention SVM"), repeat some, and drop
# the math; these replace them (a formula by the text of MathJax's MathML copy).
HEADINGS = """() => [...document.querySelectorAll('h1, h2, h3, h4, h5, h6')]
  .filter(h => h.getClientRects().length > 0)
  .map(h => {
    const copy = h.cloneNode(true);
    copy.querySelectorAll('a.headerlink, mjx-container > :not(mjx-assistive-mml)')
        .forEach(e => e.remove());
    return [Number(h.tagName[1]), copy.textContent.replace(/\\s+/g, ' ').trim()];
  })"""
# A code cell (or its input, or output) shorter than a third of a page is kept on one page (CSS
# cannot test a height); a tag_check cell draws its frame on the cell itself, so one shorter
# than two thirds of a page is kept whole too (split, its frame's top could be left empty at
# the foot of a page when its first lines moved on).
KEEP_SHORT_CELLS = """(limit) => {
  document.querySelectorAll('div.cell.tag_check').forEach(cell => {
    if (cell.getBoundingClientRect().height < 2 * limit) cell.classList.add('pdf-keep');
  });
  document.querySelectorAll('div.cell, div.cell_input, div.cell_output').forEach(cell => {
    if (cell.getBoundingClientRect().height < limit) cell.classList.add('pdf-keep');
  });
}"""
WAIT_FOR_MATH = """async () => {
  if (window.MathJax && MathJax.startup) await MathJax.startup.promise;
  await document.fonts.ready;
}"""


def build_single_page(out: Path = SOURCE) -> None:
    """The single-page HTML build of the book into ``out`` (-W: a warning fails it)."""
    pages = [p.relative_to(ROOT).with_suffix("").as_posix() for p in chapter_notebooks()]
    cache = ROOT / "_build" / "reused-pdf" / "jupyter_cache"
    missing = executed.jupyter_cache(pages, cache)
    args = ["--builder", "singlehtml", "-W", "-n", "--keep-going"]
    if not missing:
        args += ["--config", str(executed.reusing_config(ROOT, cache))]
    else:
        print(f"no current saved run of {len(missing)} pages: the build executes them")
    run = subprocess.run([str(Path(sys.executable).parent / "jupyter-book"), "build",
                          str(ROOT), *args], cwd=ROOT)
    if run.returncode != 0:
        raise SystemExit(f"the single-page build failed (rc {run.returncode})")
    if not (out / f"{ROOT_PAGE}.html").is_file():
        raise SystemExit(f"the single-page build wrote no {out / ROOT_PAGE}.html")


def title_page_html(root: Path = ROOT) -> str:
    """The PDF's title page: title, subtitle, authors, version and release date, site URL."""
    from html import escape

    config = yaml.safe_load((root / "_config.yml").read_text())
    cff = yaml.safe_load((root / "CITATION.cff").read_text())
    version = package_version(root)
    released = cff.get("date-released")
    title = escape(config["title"])   # not a heading: the outline starts at the intro's title
    lines = [f'<p class="pdf-title">{title}</p>',
             f'<p class="pdf-version">Version {escape(version)}'
             + (f", released {escape(str(released))}" if released else "") + "</p>",
             "<p>The executable companion to <em>Max-Margin Token Selection in Attention "
             "Mechanism</em></p>",
             f"<p>{escape(config['author'])}</p>",
             f"<p>{escape(cff['url'])}</p>"]
    return "\n".join(lines)


def part_captions(root: Path = ROOT) -> list[str]:
    """The captions of _toc.yml's parts, in order ("Chapters", "Appendices")."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    return [part["caption"] for part in toc.get("parts", [])]


def print_pdf(source: Path, out: Path, *, solutions: bool) -> None:
    """Print the single page of ``source`` to ``out`` with Chromium, A4, math typeset first."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        raise SystemExit(f"{CHROMIUM} is missing: apt-get install chromium")
    handler = functools.partial(_Quiet, directory=str(source))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM),
                                        args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1100, "height": 1400})
            page.set_default_timeout(300_000)
            page.goto(f"http://127.0.0.1:{server.server_address[1]}/{ROOT_PAGE}.html",
                      wait_until="load")
            page.evaluate(WAIT_FOR_MATH)
            page.add_style_tag(content=PRINT_CSS + TITLE_PAGE_CSS
                               + ("" if solutions else NO_SOLUTIONS_CSS))
            page.evaluate(ADD_TITLE_PAGE, title_page_html())
            problem = page.evaluate(PART_HEADINGS, part_captions())
            if problem:
                raise SystemExit(f"the parts of the outline: {problem}")
            page.evaluate(CONTENTS_NOT_HEADINGS)
            page.evaluate(OPEN_ALL)
            page.emulate_media(media="print")
            page.evaluate(WAIT_FOR_MATH)
            page.evaluate(KEEP_SHORT_CELLS, 300)    # CSS px: about a third of an A4 page
            headings = page.evaluate(HEADINGS)
            out.parent.mkdir(parents=True, exist_ok=True)
            page.pdf(path=str(out), format="A4", print_background=True,
                     outline=True, tagged=True,      # bookmarks from the h1-h6 headings
                     margin={"top": "18mm", "bottom": "18mm", "left": "16mm", "right": "16mm"},
                     display_header_footer=True, header_template="<span></span>",
                     footer_template='<div style="font-size:8px; width:100%; text-align:center">'
                                     '<span class="pageNumber"></span></div>')
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    titled_outline(out, headings)


def titled_outline(path: Path, headings: list[tuple[int, str]]) -> None:
    """Rewrite the bookmarks of the PDF at ``path``: Chromium's (one per printed heading, in
    order, each opening the heading's place) nested by the headings' levels and titled with
    their text. A count that differs from the headings' is an error, not a guess."""
    import pypdf
    from pypdf.generic import Fit

    reader = pypdf.PdfReader(path)

    def flat(items):
        for item in items:
            yield from (flat(item) if isinstance(item, list) else [item])

    marks = list(flat(reader.outline))
    if len(marks) != len(headings):
        raise SystemExit(f"Chromium made {len(marks)} bookmarks for {len(headings)} headings")
    writer = pypdf.PdfWriter()
    writer.append(reader, import_outline=False)
    parents: list[tuple[int, object]] = []          # (level, bookmark) of the open headings
    for mark, (level, title) in zip(marks, headings):
        while parents and parents[-1][0] >= level:
            parents.pop()
        top = mark.get("/Top")
        item = writer.add_outline_item(
            title, reader.get_destination_page_number(mark),
            parent=parents[-1][1] if parents else None,
            fit=Fit.xyz(left=mark.get("/Left"), top=top) if top is not None else Fit.fit())
        parents.append((level, item))
    writer.page_mode = "/UseOutlines"
    with open(path, "wb") as f:
        writer.write(f)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--no-solutions", action="store_true",
                        help="leave the solutions out (default: printed after each exercise)")
    parser.add_argument("--no-build", action="store_true",
                        help="print the existing single-page build")
    args = parser.parse_args(argv)
    if not args.no_build:
        build_single_page()
    print_pdf(SOURCE, args.out, solutions=not args.no_solutions)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
