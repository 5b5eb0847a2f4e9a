"""Every figure of every page, in headless Chromium: its smallest text as a reader sees it.

Issue 39: a 1,200-px three-panel PNG shrunk into the 672-px column at 1280 px showed its 9-pt
legend at about 7.7 CSS px, and at 390 px chapter 8's 5.4-inch single panels (606 px, drawn
342 px wide) showed theirs at about 8 px. The book's rule: a figure's smallest text is at least
9 CSS px at the 1280-px layout and on a 390-px phone; at 1280 px no figure is wider than its
column (it would scroll sideways on a desktop).

Each figure's PNG records its smallest text in image px (maxmargin.book.legibility, when the
chapter shows it); the site writes it into the image as ``data-text-px``. In the browser, the
text a reader sees is that size x the image's drawn width / its natural width. Every figure is
also a link to its PNG (a click opens it at full size): checked on every figure, and clicked on
the first of each page. The measurements go to _build/timings/figure-text-px.json.
"""
from __future__ import annotations

import json

import pytest

from bookutils import ROOT, toc_docnames

pytestmark = pytest.mark.browser
MIN_TEXT_PX = 9.0
VIEWPORTS = {
    "1280": dict(viewport={"width": 1280, "height": 900}),
    "390": dict(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True,
                device_scale_factor=2),
}
# Every image of the page's article but the explorer twins' frames (their own test:
# tests/site/test_explorer_twins.py), each as drawn once the page (and every image) has loaded.
FIGURES = """() => Array.from(document.querySelectorAll('main article img'))
  .filter(img => !img.closest('.mm-explorer'))
  .map(img => { const link = img.closest('a');
    return {src: img.getAttribute('src'), url: img.currentSrc, complete: img.complete,
            natural: img.naturalWidth, width: img.getBoundingClientRect().width,
            textPx: img.dataset.textPx === undefined ? null : Number(img.dataset.textPx),
            link: link ? link.href : null,
            box: img.parentElement.closest('.figure-scroll, figure, div').clientWidth}; })"""
MEASURED = ROOT / "_build" / "timings" / "figure-text-px.json"


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
@pytest.mark.parametrize("docname", toc_docnames())
def test_every_figure_text_is_at_least_9_css_px(docname, viewport, browser, site_url):
    context = browser.new_context(**VIEWPORTS[viewport])
    try:
        page = context.new_page()
        page.goto(f"{site_url}/{docname}.html", wait_until="load")
        figures = page.evaluate(FIGURES)
    finally:
        context.close()
    assert all(f["complete"] and f["natural"] for f in figures), \
        f"{docname}: figures that did not load: {[f['src'] for f in figures if not f['natural']]}"
    unknown = [f["src"] for f in figures if f["textPx"] is None]
    assert not unknown, f"{docname}: figures whose text size is not recorded: {unknown}"
    shown = [dict(f, shown=f["textPx"] * f["width"] / f["natural"]) for f in figures]
    _record(docname, viewport, shown)
    small = [f"{f['src'].rsplit('/', 1)[-1][:12]}: {f['shown']:.1f} CSS px ({f['textPx']:g} px "
             f"in a {f['natural']}-px image drawn {f['width']:.0f} px wide)"
             for f in shown if f["shown"] < MIN_TEXT_PX]
    assert not small, f"{docname} at {viewport} px: figure text under {MIN_TEXT_PX:g} CSS px:\n" \
        + "\n".join(small)
    if viewport == "1280":      # at the desktop layout a figure fits its column: no sideways scroll
        wide = [f"{f['src']}: {f['width']:.0f} px in a {f['box']} px column" for f in figures
                if f["width"] > f["box"] + 0.5]
        assert not wide, f"{docname}: figures wider than the column at 1280 px: {wide}"
    unlinked = [f["src"] for f in figures if f["link"] != f["url"]]
    assert not unlinked, f"{docname}: figures that do not open at full size on a click: {unlinked}"


@pytest.mark.parametrize("docname", [d for d in toc_docnames() if d.startswith("chapters/0")])
def test_a_click_opens_the_figure_full_size(docname, browser, site_url):
    context = browser.new_context(**VIEWPORTS["1280"])
    try:
        page = context.new_page()
        page.goto(f"{site_url}/{docname}.html", wait_until="load")
        figures = page.locator("main article img:not(.mm-frame)")
        if not figures.count():
            pytest.skip(f"{docname} has no figure")
        figure = figures.first
        url = figure.evaluate("img => img.currentSrc")
        figure.scroll_into_view_if_needed()
        figure.click()
        page.wait_for_load_state("load")
        assert page.url == url, f"{docname}: a click on the first figure opened {page.url}"
        natural = page.evaluate("() => document.images.length && document.images[0].naturalWidth")
        assert natural > 0, f"{docname}: the opened page shows no image"
    finally:
        context.close()


def _record(docname, viewport, shown):
    """The measurements, for the issue's notes: the smallest text of each figure in CSS px."""
    MEASURED.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(MEASURED.read_text()) if MEASURED.exists() else {}
    data.setdefault(docname, {})[viewport] = {
        f["src"].rsplit("/", 1)[-1][:16]: {"text_css_px": round(f["shown"], 2),
                                          "drawn_px": round(f["width"]), "natural_px": f["natural"]}
        for f in shown}
    MEASURED.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
