"""The interactive twins of the explorers on the built site (maxmargin.book.explore.interactive).

On each page with an explorer, in headless Chromium: every control of the twin exists, moving
it with the keyboard (arrow keys), the mouse and, at 390 px, touch changes the frame, the value
shown is the value of the frame, nothing is requested from outside the site, and the page does
not scroll sideways; without JavaScript and in print the twin is hidden and the static small
multiples remain. Without a browser: the frames written into each page are what the library
draws for their setting today (content hash of the drawn data, and the numbers the drawing
function returned), so the twin cannot drift from the maths; and the frames of one explorer
stay within the 1.5 MB budget. Screenshots of each twin at two positions, at 1280 and 390 px,
go to _build/screenshots/explorers/.
"""
from __future__ import annotations

import html as htmllib
import importlib
import json
import re

import numpy as np
import pytest

from bookutils import ROOT

pytestmark = pytest.mark.browser
EXPLORER_PAGES = ["chapters/01-attention-model", "chapters/02-locally-optimal-tokens",
                  "chapters/03-gd-to-svm", "chapters/05-regularization-paths",
                  "chapters/06-joint-training", "chapters/07-key-query-factorization"]
FRAMES_BUDGET = 1_500_000          # bytes of one explorer's frame data (the budget)
SHOTS = ROOT / "_build" / "screenshots" / "explorers"
SPEC = re.compile(r'<script type="application/json" class="mm-data">(.*?)</script>', re.S)
STATE = """(root) => ({
  frame: root.querySelector('img.mm-frame').dataset.frame,
  hash: root.querySelector('img.mm-frame').dataset.hash,
  params: JSON.parse(root.querySelector('img.mm-frame').dataset.params || 'null'),
  values: Array.from(root.querySelectorAll('input[type=range]')).map(i => Number(i.value)),
  shown: Array.from(root.querySelectorAll('output')).map(o => o.textContent),
  hidden: root.hidden, width: root.getBoundingClientRect().width,
})"""


def page_specs(built_html, docname) -> list[dict]:
    text = (built_html / f"{docname}.html").read_text(encoding="utf8")
    return [json.loads(htmllib.unescape(m) if m.startswith("{&") else m)
            for m in SPEC.findall(text)]


def consistent(state, spec):
    """The value each output shows, the frame index and the frame's setting all agree."""
    index = 0
    for control, position, shown in zip(spec["controls"], state["values"], state["shown"]):
        assert shown == control["shown"][position], (control["name"], shown, position)
        index = index * len(control["values"]) + position
    frame = spec["frames"][index]
    assert int(state["frame"]) == index and state["hash"] == frame["hash"]
    assert state["params"] == {c["name"]: c["values"][k]
                               for c, k in zip(spec["controls"], state["values"])}


def _open(browser, site_url, docname, **context_args):
    context = browser.new_context(**context_args)
    page = context.new_page()
    outside = []
    page.on("request", lambda r: None if r.url.startswith((site_url, "data:"))
            else outside.append(r.url))
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{site_url}/{docname}.html", wait_until="load")
    return context, page, outside, errors


@pytest.mark.parametrize("docname", EXPLORER_PAGES)
def test_twin_moves_with_keyboard_and_mouse(docname, browser, site_url, built_html):
    specs = page_specs(built_html, docname)
    assert len(specs) == 1, f"{docname}: expected one explorer twin, found {len(specs)}"
    spec = specs[0]
    SHOTS.mkdir(parents=True, exist_ok=True)
    name = docname.split("/")[-1][:2]
    context, page, outside, errors = _open(browser, site_url, docname,
                                           viewport={"width": 1280, "height": 900})
    try:
        root = page.locator("div.mm-explorer")
        root.scroll_into_view_if_needed()
        state = root.evaluate(STATE)
        assert not state["hidden"], f"{docname}: explorer.js did not show the twin"
        consistent(state, spec)
        inputs = root.locator("input[type=range]")
        assert inputs.count() == len(spec["controls"])
        root.screenshot(path=str(SHOTS / f"{name}-start-1280.png"))
        for k, control in enumerate(spec["controls"]):
            before = root.evaluate(STATE)
            inputs.nth(k).focus()
            page.keyboard.press("ArrowRight")
            after = root.evaluate(STATE)
            assert after["values"][k] == before["values"][k] + 1, control["name"]
            assert after["hash"] != before["hash"] or after["frame"] != before["frame"]
            consistent(after, spec)
            box = inputs.nth(k).bounding_box()     # the mouse: a click near the start, the end
            page.mouse.click(box["x"] + 0.03 * box["width"], box["y"] + box["height"] / 2)
            start = root.evaluate(STATE)
            assert start["values"][k] == 0 and start["frame"] != after["frame"], control["name"]
            consistent(start, spec)
            page.mouse.click(box["x"] + 0.97 * box["width"], box["y"] + box["height"] / 2)
            clicked = root.evaluate(STATE)
            assert clicked["values"][k] == len(control["values"]) - 1, control["name"]
            assert clicked["frame"] != start["frame"]
            consistent(clicked, spec)
        root.screenshot(path=str(SHOTS / f"{name}-end-1280.png"))
    finally:
        context.close()
    assert not outside, f"{docname}: requests outside the site: {outside}"
    assert not errors, f"{docname}: page errors: {errors}"


@pytest.mark.parametrize("docname", EXPLORER_PAGES)
def test_twin_at_phone_width_with_touch(docname, browser, site_url, built_html):
    spec = page_specs(built_html, docname)[0]
    SHOTS.mkdir(parents=True, exist_ok=True)
    name = docname.split("/")[-1][:2]
    context, page, outside, errors = _open(
        browser, site_url, docname, viewport={"width": 390, "height": 844}, is_mobile=True,
        has_touch=True, device_scale_factor=2)
    try:
        root = page.locator("div.mm-explorer")
        root.scroll_into_view_if_needed()
        state = root.evaluate(STATE)
        assert not state["hidden"] and state["width"] <= 390
        assert page.evaluate("document.documentElement.scrollWidth") <= 391
        root.screenshot(path=str(SHOTS / f"{name}-start-390.png"))
        for k, control in enumerate(spec["controls"]):
            box = root.locator("input[type=range]").nth(k).bounding_box()
            page.touchscreen.tap(box["x"] + 0.97 * box["width"], box["y"] + box["height"] / 2)
            tapped = root.evaluate(STATE)
            assert tapped["values"][k] == len(control["values"]) - 1, control["name"]
            consistent(tapped, spec)
        root.screenshot(path=str(SHOTS / f"{name}-end-390.png"))
    finally:
        context.close()
    assert not outside and not errors, (outside, errors)


@pytest.mark.parametrize("docname", EXPLORER_PAGES)
def test_without_javascript_and_in_print_the_static_twin_remains(docname, browser, site_url):
    context, page, _, _ = _open(browser, site_url, docname, java_script_enabled=False)
    try:
        assert page.locator("div.mm-explorer").is_hidden()
        static = page.locator("div.cell.tag_static-twin img")
        assert static.count() == 1 and static.first.is_visible()
    finally:
        context.close()
    context, page, _, _ = _open(browser, site_url, docname)
    try:
        page.emulate_media(media="print")
        assert page.locator("div.mm-explorer").is_hidden()
        assert page.locator("div.cell.tag_static-twin img").first.is_visible()
    finally:
        context.close()


def _call(where: str):
    module, _, name = where.partition(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("docname", EXPLORER_PAGES)
def test_twin_frames_are_what_the_library_draws(docname, built_html):
    """Three frames of each page (first, middle, last) recomputed by the function the page
    names: the same drawn data (hash) and the same returned numbers. Catches a twin built
    from stale or other code, frames in the wrong order, and a JS index off by a control."""
    import matplotlib

    matplotlib.use("Agg")
    from maxmargin.book import explore

    (spec,) = page_specs(built_html, docname)
    text = json.dumps(spec)
    assert len(text) <= FRAMES_BUDGET, f"{docname}: frames weigh {len(text) / 1e6:.2f} MB"
    draw = _call(spec["draw"])
    figure = _call(spec["figure"]) if spec["figure"] else None
    frames = spec["frames"]
    for frame in (frames[0], frames[len(frames) // 2], frames[-1]):
        (fig, result), = [(explore.frame_fingerprint(f), explore._jsonable(r))
                          for f, r in explore.render_frames(
                              draw, [{**spec["fixed"], **frame["params"]}], figure=figure,
                              width=spec["size"][0], height=spec["size"][1])]
        assert fig == frame["hash"], f"{docname}: frame {frame['params']} differs"
        if frame["result"] is not None:
            np.testing.assert_allclose(np.asarray(result, float),
                                       np.asarray(frame["result"], float), rtol=1e-9)
