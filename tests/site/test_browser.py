"""Every page of the built site, opened in headless Chromium from a local server.

Checks: HTTP 200 for the page and every asset it requests, math typeset, images loaded, no
error output, and no console or page error beyond the known harmless ones. Full-page
screenshots go to _build/screenshots/<page>.png (light theme) and _build/screenshots/dark/.
"""
from __future__ import annotations

import re

import pytest

from bookutils import ROOT, toc_docnames

pytestmark = pytest.mark.browser
SCREENSHOTS = ROOT / "_build" / "screenshots"

# Console and page errors that appear even when everything renders (toolchain-notes section 6).
ALLOWED_ERRORS = [
    re.compile(r"Identifier 'THEBE_JS_URL' has already been declared"),  # sphinx-thebe, twice
    re.compile(r"Got invalid theme mode"),                               # pydata-sphinx-theme
    re.compile(r"reading 'Queue'"),       # html-manager calls MathJax 2 on widget pages
    re.compile(r"strict mode: "),         # ajv schema warnings on widget pages
    re.compile(r"Failed to load resource: .* 404 .*/favicon\.ico"),
]
ALLOWED_MISSING = re.compile(r"/favicon\.ico$")

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
BROKEN_IMAGES = """() => Array.from(document.images)
  .filter(img => !img.complete || img.naturalWidth === 0)
  .map(img => img.currentSrc || img.outerHTML.slice(0, 120))"""
OUTPUTS = """() => Array.from(document.querySelectorAll(
    '.output.error, .output.traceback, .output.stderr'))
  .map(n => ({kind: n.className, text: n.innerText}))"""


def screenshot_path(docname: str, scheme: str):
    folder = SCREENSHOTS if scheme == "light" else SCREENSHOTS / scheme
    folder.mkdir(parents=True, exist_ok=True)
    return folder / (docname.replace("/", "__") + ".png")


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("docname", toc_docnames())
def test_page_renders(docname, scheme, browser, site_url):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=scheme)
    page = context.new_page()
    errors, failed = [], []
    page.on("console", lambda m: m.type == "error" and errors.append(
        f"console: {m.text} {m.location.get('url', '')}"))
    page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
    page.on("requestfailed", lambda r: failed.append((r.url, r.failure)))
    page.on("response", lambda r: r.status >= 400 and failed.append((r.url, f"HTTP {r.status}")))
    try:
        response = page.goto(f"{site_url}/{docname}.html", wait_until="load")
        assert response is not None and response.status == 200, f"{docname}: page not served"
        page.evaluate(WAIT_FOR_MATH)
        page.wait_for_load_state("networkidle")

        if page.locator("span.math, div.math").count():
            assert page.locator("mjx-container").count() > 0, f"{docname}: math not typeset"
            text = page.evaluate(VISIBLE_TEXT)
            raw = [d for d in ("\\(", "\\[", "$$") if d in text]
            assert not raw, f"{docname}: raw TeX delimiters {raw} left in the text"

        broken = page.evaluate(BROKEN_IMAGES)
        assert not broken, f"{docname}: images that did not load: {broken}"
        bad_outputs = [o["text"][:500] for o in page.evaluate(OUTPUTS)
                       if "stderr" not in o["kind"] or re.search(r"Traceback|Error", o["text"])]
        assert not bad_outputs, f"{docname}: error outputs in the page:\n" + "\n".join(bad_outputs)

        page.screenshot(path=str(screenshot_path(docname, scheme)), full_page=True)
    finally:
        context.close()
    unexpected = [e for e in errors if not any(p.search(e) for p in ALLOWED_ERRORS)]
    assert not unexpected, f"{docname}: unexpected browser errors:\n" + "\n".join(unexpected)
    failed = [f"{url}: {why}" for url, why in failed if not ALLOWED_MISSING.search(url)]
    assert not failed, f"{docname}: requests that failed:\n" + "\n".join(failed)
