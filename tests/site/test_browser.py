"""Every page of the built site, opened in headless Chromium from a local server.

Checks: HTTP 200 for the page and every asset it requests (the favicon included), math typeset,
images loaded, no error output, no console or page error, the page
weight (bytes of the page and of everything it loads, written to _build/timings/page-weights.json
and printed at the end of the session), the layout at phone width (390 px), and search snippets
without raw TeX. Screenshots go to _build/screenshots/<page>.png (light theme),
_build/screenshots/dark/ and _build/screenshots/phone/: the first screen of each page, or the
whole page with BOOK_FULL_SCREENSHOTS=1 (a full-page PNG of a 30,000 px chapter took 10-16 s,
half of each test's time, and is a picture for people to look at, not a check).
"""
from __future__ import annotations

import fcntl
import gzip
import json
import os
import re
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from bookutils import ROOT, chapter_notebooks, read_notebook, source_path, toc_docnames

pytestmark = pytest.mark.browser
SCREENSHOTS = ROOT / "_build" / "screenshots"
WEIGHTS = ROOT / "_build" / "timings" / "page-weights.json"
# bytes: a chapter page and everything it loads (1.46 MB of it MathJax). 3.0 MB until chapter
# 3 came to show the plain reference's code and its explorer twin's controls (3.02 MB,
# measured 2026-12-07): 3.1 MB, still a bar that a stray heavy asset fails.
CHAPTER_WEIGHT_LIMIT = 3_100_000
# ... not counting the frame data of its explorer twin, which has its own budget of 1.5 MB
# (tests/site/test_explorer_twins.py): the JSON in the page's div.mm-explorer. Since issue 40 the
# frames are files loaded when the explorer comes into view, so the JSON is a few kB and a page
# loads one frame (5-23 kB) with it; the pages weigh 0.15-0.35 MB less than with inline frames.
EXPLORER_FRAMES = re.compile(r'<script type="application/json" class="mm-data">.*?</script>', re.S)
PHONE = {"width": 390, "height": 844}
FULL_PAGE = os.environ.get("BOOK_FULL_SCREENSHOTS", "") not in ("", "0")
# Playwright's waits (page load, MathJax, network idle) give up after this long. Its default of
# 30 s was exceeded once, by a network-idle wait on a machine loaded about three times over
# (`make test-site` runs two workers); the bound only limits a hang, it decides no check, and it is
# many times the longest wait seen under load (10 times the 30 s that load once exceeded).
WAIT_MS = 300_000

# Nothing may fail or log an error (the book has a favicon, _ext/booksite/static/favicon.svg, so
# Chromium does not ask for /favicon.ico).
ALLOWED_ERRORS: list[re.Pattern] = []
ALLOWED_MISSING = re.compile(r"(?!)")   # matches nothing

WAIT_FOR_MATH = """async () => {
  if (window.MathJax && MathJax.startup) await MathJax.startup.promise;
  await document.fonts.ready;
}"""
# The page's visible text without code, scripts and typeset math: raw TeX must not remain.
VISIBLE_TEXT = """() => {
  const main = (document.querySelector('main') || document.body).cloneNode(true);
  main.querySelectorAll('pre, code, script, style, mjx-container, .highlight')
      .forEach(n => n.remove());
  return main.innerText;
}"""
# MathJax's errors: TeX that did not parse is shown in red in place of the formula.
TEX_ERRORS = """() => Array.from(document.querySelectorAll('mjx-merror'))
  .map(e => e.getAttribute('data-mjx-error') || e.textContent)"""
# The library reference's text without code, signatures and typeset math.
REFERENCE_TEXT = """() => {
  const main = (document.querySelector('main') || document.body).cloneNode(true);
  main.querySelectorAll('pre, code, script, style, mjx-container, .highlight, dt.sig')
      .forEach(n => n.remove());
  return main.innerText;
}"""
BROKEN_IMAGES = """() => Array.from(document.images)
  .filter(img => !img.complete || img.naturalWidth === 0)
  .map(img => img.currentSrc || img.outerHTML.slice(0, 120))"""
OUTPUTS = """() => Array.from(document.querySelectorAll(
    '.output.error, .output.traceback, .output.stderr'))
  .map(n => ({kind: n.className, text: n.innerText}))"""


# At phone width: does the page itself scroll sideways, which tables are wider than the page
# without a box of their own that scrolls, and how tall the wide figures are drawn.
PHONE_LAYOUT = """() => {
  const width = document.documentElement.clientWidth;
  const scrolls = (el) => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  const boxed = (el) => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement)
      if (scrolls(p)) return p.clientWidth <= width;
    return false;
  };
  const main = document.querySelector('main') || document.body;
  return {
    width,
    pageWidth: document.documentElement.scrollWidth,
    tables: Array.from(main.querySelectorAll('table'))
      .filter(t => t.getBoundingClientRect().width > width - 32 && !boxed(t))
      .map(t => t.innerText.slice(0, 60)),
    figures: Array.from(main.querySelectorAll('img.book-figure'))
      .filter(img => img.getBoundingClientRect().width > width - 32 && !boxed(img))
      .map(img => img.getAttribute('src')),
  };
}"""
# Sphinx shows the results one by one, each with its snippet, then "Search finished, ...".
SEARCH_SNIPPETS = """async () => {
  for (let i = 0; i < 300; i++) {
    const status = document.querySelector('#search-results .search-summary');
    if (status && /finished/.test(status.innerText))
      return Array.from(document.querySelectorAll('#search-results li p.context'))
        .map(p => p.innerText);
    await new Promise(r => setTimeout(r, 100));
  }
  return [];
}"""


def screenshot_path(docname: str, scheme: str):
    folder = SCREENSHOTS if scheme == "light" else SCREENSHOTS / scheme
    folder.mkdir(parents=True, exist_ok=True)
    return folder / (docname.replace("/", "__") + ".png")


def record_weight(docname: str, urls: set[str], site_url: str, built_html) -> int:
    """Bytes of the files behind ``urls`` (the page and all it loaded), recorded in WEIGHTS with
    the number of files and the gzip size (what a server that compresses, as GitHub Pages does,
    would transfer)."""
    total, compressed, files = 0, 0, 0
    for url in urls:
        if not url.startswith(site_url):
            continue
        path = built_html / unquote(urlsplit(url).path).lstrip("/")
        if path.is_dir():
            path = path / "index.html"
        if path.is_file():
            data = path.read_bytes()
            total += len(data)
            compressed += len(gzip.compress(data, compresslevel=6, mtime=0))
            files += 1
    WEIGHTS.parent.mkdir(parents=True, exist_ok=True)
    with open(WEIGHTS.with_suffix(".lock"), "w") as lock:   # two workers write it
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = json.loads(WEIGHTS.read_text()) if WEIGHTS.exists() else {}
        data[docname] = {"bytes": total, "gzip_bytes": compressed, "files": files}
        WEIGHTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return total


def open_settled(page, url):
    """Open url, wait for MathJax and until no request has been in flight for 0.5 s; the
    response of the page.

    Not Playwright's ``wait_for_load_state("networkidle")``: in the full run on two workers it
    never resolved on a page now and then (a different page each run, light or dark) although
    no request of the page was open (listed by the listeners below), and a retry of goto + wait
    hung the same way. This waits for the same condition from the page's own request events and,
    if a request really stays open, fails naming it."""
    in_flight = set()
    page.on("request", lambda r: in_flight.add(r))
    page.on("requestfinished", lambda r: in_flight.discard(r))
    page.on("requestfailed", lambda r: in_flight.discard(r))
    response = page.goto(url, wait_until="load")
    page.evaluate(WAIT_FOR_MATH)
    deadline = time.monotonic() + WAIT_MS / 1000
    quiet_since = time.monotonic()
    while True:
        now = time.monotonic()
        if in_flight:
            quiet_since = now
        elif now - quiet_since >= 0.5:
            return response
        if now > deadline:
            raise AssertionError(f"{url}: requests still open after {WAIT_MS / 1000:.0f} s: "
                                 f"{sorted(r.url for r in in_flight)}")
        page.wait_for_timeout(100)


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("docname", toc_docnames())
def test_page_renders(docname, scheme, browser, site_url, built_html):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=scheme)
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    errors, failed, loaded = [], [], set()
    page.on("console", lambda m: m.type == "error" and errors.append(
        f"console: {m.text} {m.location.get('url', '')}"))
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    page.on("requestfailed", lambda r: failed.append((r.url, r.failure)))
    page.on("response", lambda r: r.status >= 400 and failed.append((r.url, f"HTTP {r.status}")))
    page.on("requestfinished", lambda r: loaded.add(r.url.split("?")[0].split("#")[0]))
    try:
        response = open_settled(page, f"{site_url}/{docname}.html")
        assert response is not None and response.status == 200, f"{docname}: page not served"

        if page.locator("span.math, div.math").count():
            assert page.locator("mjx-container").count() > 0, f"{docname}: math not typeset"
            text = page.evaluate(VISIBLE_TEXT)
            raw = [d for d in ("\\(", "\\[", "$$") if d in text]
            assert not raw, f"{docname}: raw TeX delimiters {raw} left in the text"
            tex_errors = page.evaluate(TEX_ERRORS)
            assert not tex_errors, f"{docname}: formulas MathJax could not parse: {tex_errors}"

        broken = page.evaluate(BROKEN_IMAGES)
        assert not broken, f"{docname}: images that did not load: {broken}"
        bad_outputs = [o["text"][:500] for o in page.evaluate(OUTPUTS)
                       if "stderr" not in o["kind"] or re.search(r"Traceback|Error", o["text"])]
        assert not bad_outputs, f"{docname}: error outputs in the page:\n" + "\n".join(bad_outputs)

        if scheme == "light":
            weight = record_weight(docname, loaded, site_url, built_html)
        page.screenshot(path=str(screenshot_path(docname, scheme)), full_page=FULL_PAGE)
    finally:
        context.close()
    unexpected = [e for e in errors if not any(p.search(e) for p in ALLOWED_ERRORS)]
    assert not unexpected, f"{docname}: unexpected browser errors:\n" + "\n".join(unexpected)
    failed = [f"{url}: {why}" for url, why in failed if not ALLOWED_MISSING.search(url)]
    assert not failed, f"{docname}: requests that failed:\n" + "\n".join(failed)
    if scheme == "light" and docname.startswith("chapters/0"):
        page_html = (built_html / f"{docname}.html").read_text(encoding="utf8")
        frames = sum(len(m.encode()) for m in EXPLORER_FRAMES.findall(page_html))
        assert weight - frames < CHAPTER_WEIGHT_LIMIT, (
            f"{docname} weighs {weight / 1e6:.2f} MB with everything it loads, "
            f"{(weight - frames) / 1e6:.2f} MB without its explorer frames "
            f"(limit {CHAPTER_WEIGHT_LIMIT / 1e6:.0f} MB)")


def test_library_reference_typesets_its_formulas(browser, site_url):
    """The library reference (chapters/appendix-api.md, the docstrings through
    _ext/booksite/apidoc.py) shows its formulas typeset: none of its text outside code,
    signatures and math reads as plain-text maths (``||p||``, ``x_it^T``, ``gamma_it``), and
    MathJax parsed every formula. Bug caught: issue 39, the page printed its formulas as
    ASCII-TeX (a formula written without its backquotes, or a py:data text without :math:)."""
    sys.path.insert(0, str(ROOT / "_ext"))
    from booksite.asciimath import PLAIN_TEXT_MATHS

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    try:
        open_settled(page, f"{site_url}/chapters/appendix-api.html")
        typeset = page.locator("mjx-container").count()
        tex_errors = page.evaluate(TEX_ERRORS)
        text = page.evaluate(REFERENCE_TEXT)
    finally:
        context.close()
    assert typeset > 300, f"only {typeset} typeset formulas on the library reference"
    assert not tex_errors, f"formulas MathJax could not parse: {tex_errors}"
    plain = sorted({line.strip() for line in text.splitlines() if PLAIN_TEXT_MATHS.search(line)})
    assert not plain, f"{len(plain)} lines with plain-text maths:\n" + "\n".join(plain)


# Formulas at phone width: an equation number's box against its formula's, and every formula
# wider than its box (its typeset width, mjx-math's, against the box's): it must scroll
# (overflow-x auto) and carry the "scrolls" mark that shows a shadow at the cut.
PHONE_MATHS = """() => {
  const covered = [], cut = [];
  document.querySelectorAll('div.math').forEach(d => {
    const no = d.querySelector(':scope > span.eqno'), mj = d.querySelector('mjx-container');
    if (!no || !mj) return;
    const a = no.getBoundingClientRect(), b = mj.getBoundingClientRect();
    const inner = mj.firstElementChild ? mj.firstElementChild.getBoundingClientRect() : b;
    const overlap = Math.min(a.right, inner.right) - Math.max(a.left, inner.left) > 1
                    && Math.min(a.bottom, inner.bottom) - Math.max(a.top, inner.top) > 1;
    if (overlap) covered.push(no.innerText.trim());
  });
  document.querySelectorAll('span.math, div.math').forEach(m => {
    const formula = m.querySelector('mjx-math');   // scrollWidth counts a letter's overhang
    if (!formula || formula.getBoundingClientRect().width <= m.clientWidth + 2) return;
    const scrolls = ['auto', 'scroll'].includes(getComputedStyle(m).overflowX);
    if (!scrolls || !m.classList.contains('scrolls')) cut.push(m.innerText.slice(0, 40));
  });
  return {covered, cut};
}"""


@pytest.mark.parametrize("docname", toc_docnames())
def test_phone_width(docname, browser, site_url):
    """At 390 px the page does not scroll sideways, and wide tables and figures scroll in their
    own box (that the figures' text stays legible is tests/site/test_figure_text.py's check)."""
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True,
                                  device_scale_factor=2)
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    try:
        open_settled(page, f"{site_url}/{docname}.html")
        layout = page.evaluate(PHONE_LAYOUT)
        maths = page.evaluate(PHONE_MATHS)
        page.screenshot(path=str(screenshot_path(docname, "phone")), full_page=FULL_PAGE)
    finally:
        context.close()
    # bugs caught (review R39): Eq. 1.4's number covered the end of its formula, and formulas
    # wider than the column were cut off with nothing saying the rest is a swipe away
    assert not maths["covered"], f"{docname}: equation numbers over their formula: {maths['covered']}"
    assert not maths["cut"], f"{docname}: formulas cut off, not scrolling or not marked: " \
        f"{maths['cut']}"
    assert layout["pageWidth"] <= layout["width"] + 1, \
        f"{docname}: the page is {layout['pageWidth']} px wide at {layout['width']} px"
    assert not layout["tables"], f"{docname}: tables wider than the page, not in a scrolling box: " \
        f"{layout['tables']}"
    assert not layout["figures"], f"{docname}: figures wider than the page, not in a scrolling " \
        f"box: {layout['figures']} (their text size: tests/site/test_figure_text.py)"


def test_search_snippets_have_no_raw_tex(browser, site_url):
    """Search results show math in their snippets as text, without TeX delimiters."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    snippets = []
    try:
        for query in ("softmax", "margin"):
            page.goto(f"{site_url}/search.html?q={query}", wait_until="load")
            snippets += page.evaluate(SEARCH_SNIPPETS)
        converted = page.evaluate("(tex) => window.bookTexToText(tex)",
                                  r"\(\lVert p \rVert \ge 1\)")
        # review R39: "barp", "operatorname*arg min", "tfrac12" in snippets
        accents = [page.evaluate("(tex) => window.bookTexToText(tex)", tex) for tex in
                   (r"\(\bar{p}(R)\)", r"\(\operatorname*{arg\,min}_p L\)", r"\(\tfrac12 x\)",
                    r"\(\frac{a}{n}\)")]
    finally:
        context.close()
    assert accents == ["p\u0304(R)", "arg min_pL", "1/2x", "a/n"], accents
    assert len(snippets) >= 5, f"too few search results to check: {snippets}"
    raw = [s for s in snippets if re.search(r"\\[()\[\]]|\$\$", s)]
    assert not raw, "search snippets with raw TeX delimiters:\n" + "\n".join(raw)
    assert converted == "‖p‖ ≥ 1", converted


NOTEBOOK_PAGES = [p.relative_to(ROOT).with_suffix("").as_posix() for p in chapter_notebooks()]


@pytest.mark.parametrize("docname", NOTEBOOK_PAGES)
def test_download_and_colab_buttons_give_the_plain_notebook(docname, browser, site_url,
                                                            built_html):
    """The page's ".ipynb" download (clicked in the download menu) gives the exported plain
    notebook, not myst-nb's intermediate one: valid, no MyST residue in its prose, the install
    cell first, then exactly the page's code cells (the notebook the chapter stage runs outside
    the repository). The Colab button opens the same file on the branch the workflow
    publishes. Bugs caught: the theme's _sources/ notebook (MyST roles, {glue:text}, no install
    cell), a download of another page's notebook, a Colab link to the MyST source or to a file
    the site does not publish."""
    import nbformat

    sys.path[:0] = [str(ROOT / "_ext"), str(ROOT / "tests" / "notebooks")]
    from booksite.launch import NOTEBOOK_BRANCH
    from residue import residue

    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    try:
        open_settled(page, f"{site_url}/{docname}.html")
        page.click('button[aria-label="Download this page"]')
        with page.expect_download() as download:
            page.locator("a.btn-download-notebook-button").click()
        text = Path(download.value.path()).read_text(encoding="utf8")
        name = download.value.suggested_filename
        page.click('button[aria-label="Launch interactive content"]')
        colab = page.locator("a.dropdown-item", has_text="Colab").get_attribute("href")
    finally:
        context.close()
    stem = docname.rsplit("/", 1)[-1]
    assert name == f"{stem}.ipynb"
    nb = nbformat.reads(text, as_version=4)
    nbformat.validate(nb)
    prose = "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert residue(prose) == [], f"{docname}: MyST left in the downloaded notebook"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[0].metadata.get("export", {}).get("install"), "the install cell is not first"
    page_code = [c.source for c in read_notebook(source_path(docname)).cells   # glue cells
                 if c.cell_type == "code" and "glue" not in c.metadata.get("tags", [])]  # stay out
    assert [c.source for c in code[1:]] == page_code, f"{docname}: not this page's code"
    assert not any(c.get("outputs") for c in code), "a download with stale outputs"
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo = config["repository"]["url"].removeprefix("https://github.com/")
    assert colab == (f"https://colab.research.google.com/github/{repo}/blob/"
                     f"{NOTEBOOK_BRANCH}/{stem}.ipynb"), colab
    assert (built_html / "notebooks" / f"{stem}.ipynb").read_text(encoding="utf8") == text


FIRST_SCREEN = """() => {
  const main = document.querySelector('main') || document.body;
  const h1 = main.querySelector('h1');
  const links = [...main.querySelectorAll('a')].map(a => {
    const r = a.getBoundingClientRect();
    return {text: a.textContent.trim(), href: a.href, top: r.top + window.scrollY,
            bottom: r.bottom + window.scrollY, visible: r.width > 0 && r.height > 0};
  });
  const paragraphs = [...main.querySelectorAll('section > p')].slice(0, 2).map(p => p.textContent);
  return {title: h1 ? h1.textContent : '', paragraphs, links, height: window.innerHeight};
}"""


@pytest.mark.parametrize("viewport", [{"width": 1280, "height": 900}, PHONE],
                         ids=["desktop", "phone"])
def test_first_screen_says_what_and_where_to_start(viewport, browser, site_url):
    """The landing page's first screen (no scrolling) says what the book is and why to read it,
    and links where to start: chapter 1, chapter 1 in Colab (the same URL as the chapter's
    Colab button), the PDF, and how to read it (a link that lands on its section).
    Bugs caught: the start links pushed below the fold by the story paragraph (the old page put
    "How to read this book" 2.8 screens down), a Colab link to a notebook the workflow does not
    publish, a dead anchor."""
    context = browser.new_context(viewport=viewport, is_mobile=viewport is PHONE)
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    try:
        open_settled(page, f"{site_url}/intro.html")
        screen = page.evaluate(FIRST_SCREEN)
        anchor = next((link["href"] for link in screen["links"]
                       if link["text"] == "how to read it"), None)
        target = anchor and page.evaluate(
            "(id) => !!document.getElementById(id)", anchor.split("#", 1)[-1])
    finally:
        context.close()
    assert "Why does attention" in screen["paragraphs"][0], screen["paragraphs"]
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    repo = config["repository"]["url"].removeprefix("https://github.com/")
    wanted = {
        "read chapter 1": lambda href: href.endswith("chapters/01-attention-model.html"),
        "run it in Colab": lambda href: href == (f"https://colab.research.google.com/github/"
                                                 f"{repo}/blob/notebooks/01-attention-model.ipynb"),
        "the whole book as a PDF": lambda href: href.endswith("/maxmargin-book.pdf"),
        "how to read it": lambda href: "#" in href,
    }
    for text, good in wanted.items():
        link = next((link for link in screen["links"] if link["text"] == text), None)
        assert link is not None, f"no start link {text!r} on the landing page"
        assert good(link["href"]), f"{text!r} links {link['href']}"
        assert link["visible"] and link["bottom"] <= screen["height"], \
            f"{text!r} is below the first screen ({link['bottom']:.0f} px of {screen['height']})"
    assert target, f"'how to read it' links {anchor}, which is not on the page"


def test_the_site_root_redirects_to_the_landing_page_and_names_its_icon(browser, site_url,
                                                                         built_html):
    """Opening the site's root (index.html, a redirect) lands on the landing page, no request
    fails on the way, and the redirect page names the book's icon: the bare redirect of
    sphinx-external-toc had none, so browsers asked for /favicon.ico, a 404 on every visit
    (headless Chromium does not ask, hence the check of the page itself)."""
    html = (built_html / "index.html").read_text(encoding="utf8")
    icon = re.search(r'<link rel="icon" href="([^"]+)"', html)
    assert icon, f"index.html names no icon:\n{html}"
    assert (built_html / icon.group(1)).is_file(), f"index.html's icon {icon.group(1)} is missing"
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    failed = []
    # (a request the redirect itself cuts short, net::ERR_ABORTED, is no missing file)
    page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.url}: HTTP {r.status}"))
    try:
        page.goto(f"{site_url}/", wait_until="load")
        page.wait_for_url("**/intro.html")
        open_settled(page, page.url)
        title = page.title()
    finally:
        context.close()
    assert not failed, "requests that failed:\n" + "\n".join(failed)
    assert "Max-Margin" in title, title


def test_phone_width_index_and_table_hints(browser, site_url):
    """At 390 px the general index does not widen the page (its three columns stack: it was 462
    px wide), and a table that scrolls in its box says so under it (the landing page's chapter
    table scrolled with no hint), while a table that fits says nothing."""
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    hint = """() => [...document.querySelectorAll('.pst-scrollable-table-container')].map(b => ({
        scrolls: b.scrollWidth > b.clientWidth + 1,
        hint: getComputedStyle(b, '::after').content}))"""
    try:
        open_settled(page, f"{site_url}/genindex.html")
        index_width = page.evaluate("() => document.documentElement.scrollWidth")
        open_settled(page, f"{site_url}/intro.html")
        phone_tables = page.evaluate(hint)
        page.set_viewport_size({"width": 1280, "height": 900})
        page.wait_for_timeout(300)
        desktop_tables = page.evaluate(hint)
    finally:
        context.close()
    assert index_width <= PHONE["width"] + 1, f"genindex is {index_width} px wide at 390 px"
    assert any(t["scrolls"] for t in phone_tables), "no table scrolls on the landing page at 390 px"
    for t in phone_tables + desktop_tables:
        assert ("swipe" in t["hint"]) == t["scrolls"], t


# Each check cell of a page: is its code hidden (inside a closed <details>, not rendered: a
# closed <details> keeps its content's boxes in Chromium, so getClientRects cannot tell) and the
# label of its toggle.
CHECK_CELLS = """() => Array.from(document.querySelectorAll('div.cell.tag_check')).map(cell => {
  const input = cell.querySelector('.cell_input');
  const details = input && input.closest('details');
  return {hidden: !input || (details !== null && !details.open && !input.checkVisibility()),
          toggle: details && details.parentElement === cell
                  ? details.querySelector('summary').innerText.trim() : null};
})"""


@pytest.mark.parametrize("docname", [d for d in toc_docnames() if d.startswith("chapters/0")])
def test_checks_are_folded_and_no_glue_is_shown(docname, browser, site_url):
    """Every check cell's code is folded behind "Show code cell source", one click shows it,
    and no text a reader can see (folded or not) holds a glue( call or myst_nb. Bug caught
    (issue 39): the checks were shown open, ending in up to seven lines of glue(...)."""
    visible = [c for c in read_notebook(source_path(docname)).cells
               if "check" in c.metadata.get("tags", [])
               and "remove-cell" not in c.metadata.get("tags", [])]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    try:
        open_settled(page, f"{site_url}/{docname}.html")
        checks = page.evaluate(CHECK_CELLS)
        assert len(checks) == len(visible), (len(checks), len(visible))
        shown = [i for i, c in enumerate(checks) if not c["hidden"]]
        assert not shown, f"{docname}: check cells {shown} show their code"
        assert {c["toggle"] for c in checks} == {"Show code cell source"}, checks
        text = page.evaluate("() => document.body.innerText")
        assert "glue(" not in text and "myst_nb" not in text
        first = page.locator("div.cell.tag_check").first
        first.locator("summary").first.click()
        assert first.locator(".cell_input").is_visible(), "one click does not show the check"
        first.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_path(docname, "check-opened")))
        opened = page.evaluate("""() => {
          document.querySelectorAll('div.cell.tag_check details').forEach(d => { d.open = true; });
          return document.body.innerText; }""")
        assert "glue(" not in opened and "myst_nb" not in opened, \
            f"{docname}: an opened check shows glue"
        # the download menu offers no MyST source, whose glue cells a reader would read
        # (bug caught, review R39: the ".md" item opened _sources/<page>.md)
        page.click('button[aria-label="Download this page"]')
        items = page.locator(".dropdown-download-buttons .dropdown-item")
        labels = [items.nth(k).inner_text().strip() for k in range(items.count())]
        assert ".ipynb" in labels and ".md" not in labels, labels
    finally:
        context.close()
