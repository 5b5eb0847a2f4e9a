"""Page assets: each inline script once, lighter images, legible figures, search.

**Each inline script once.** With Sphinx 7.4, inline scripts that extensions add after the
builder starts are registered twice (once with filename None, once with ''), so every page
declared sphinx-thebe's `const THEBE_JS_URL` twice, a console error. Duplicates are dropped.

**Lighter pages.** pydata-sphinx-theme loads `fontawesome.js` (1.5 MB) on every page only so
that sites can add custom icons; the book adds none and the theme's icons come from its
stylesheet's webfonts, so `templates/layout.html` drops that script. The figures' PNGs are
stored as 256-colour palettes (matplotlib's line plots use a few thousand anti-aliasing
shades; the palette version looks the same and is about a third of the size). Together they
keep every chapter page, with everything it loads, under 3.1 MB (tests/site/test_browser.py).

**Figures a reader can read, and search snippets.** Each PNG figure sits in a box that scrolls
sideways and carries a CSS min-width that keeps its smallest text at least 9 CSS px (from the
text size :mod:`maxmargin.book.legibility` records in the PNG), so it shrinks to the column only
down to that width; a click on it opens the PNG at full size (`legible_figures`;
tests/site/test_figure_text.py measures every figure at 1280 and 390 px). `search-snippets.js`
(search page) shows math in search results as text instead of raw TeX delimiters (the ranking
by section is :mod:`booksite.search`'s);
`scroll-hints.js` (all pages) marks the tables and figures that scroll sideways in their box,
which `booksite.css` then labels ("swipe for more columns"); the general index stacks its columns.

**Explorers without a kernel.** `explorer.js` (about 2.5 kB, only on pages with an explorer twin)
shows each `div.mm-explorer` that :func:`maxmargin.book.explore.interactive` wrote into the page
and maps its range inputs to frames the library drew at build time; no CDN, no server. The
frames come out of the notebook as PNG data in the div's JSON; `explorer_frames` writes each to
`_static/explorers/<hash>.png` and leaves its relative URL in the JSON, so the page carries none
of them: `explorer.js` loads the first frame, and the others once the explorer comes into view
or a control is touched (plain image requests: they work from file:// too).
"""
from __future__ import annotations

import base64
import hashlib
import html as htmllib
import json
import math
import re
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx

STATIC = Path(__file__).parent / "static"
TEMPLATES = Path(__file__).parent / "templates"
MIN_TEXT_PX = 9.0          # CSS px: a figure's smallest text on the site (as maxmargin.book.legibility)
TEXT_PX_KEY = "smallest-text-px"   # the PNG text chunk maxmargin.book.legibility writes


def dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        key = (getattr(script, "filename", script) or "", getattr(script, "priority", 0),
               tuple(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique


def search_page_assets(app, pagename, templatename, context, doctree) -> None:
    if pagename == "search":
        app.add_js_file("search-snippets.js", defer="defer")


EXPLORER_DATA = re.compile(r'(<script type="application/json" class="mm-data">)(.*?)(</script>)', re.S)


def explorer_frames(app, pagename, templatename, context, doctree) -> None:
    """Move the PNG frames of each explorer twin in the page to files (see the module's doc)."""
    body = context.get("body") or ""
    if 'class="mm-data"' not in body or "pathto" not in context:
        return
    folder = Path(app.outdir, "_static", "explorers")

    def externalize(match):
        text = match.group(2)
        escaped = text.startswith("{&")       # the JSON as the page holds it
        spec = json.loads(htmllib.unescape(text) if escaped else text)
        for frame in spec.get("frames", []):
            head, _, data = frame.get("src", "").partition(",")
            if head != "data:image/png;base64":
                continue
            png = base64.b64decode(data)
            name = hashlib.sha256(png).hexdigest()[:20] + ".png"
            folder.mkdir(parents=True, exist_ok=True)
            if not (folder / name).exists():
                (folder / name).write_bytes(png)
            frame["src"] = context["pathto"](f"_static/explorers/{name}", 1)
            frame["bytes"] = len(png)
        out = json.dumps(spec, separators=(",", ":")).replace("</", "<\\/")
        return match.group(1) + (htmllib.escape(out, quote=False) if escaped else out) + match.group(3)

    context["body"] = EXPLORER_DATA.sub(externalize, body)


def explorer_assets(app, pagename, templatename, context, doctree) -> None:
    """`explorer.js` on the pages with an interactive explorer twin (`div.mm-explorer`)."""
    if 'class="mm-explorer"' in (context.get("body") or ""):
        app.add_js_file("explorer.js", defer="defer")


def box_figures(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Give each PNG figure the class `book-figure` and a box that scrolls sideways."""
    for image in list(doctree.findall(nodes.image)):
        uri = image.get("uri", "")
        if not uri.endswith(".png") or "://" in uri or not Path(app.srcdir, uri).exists():
            continue
        box = nodes.container(classes=["figure-scroll"])
        image.parent.replace(image, box)  # not replace_self: it would copy the image's classes
        box += image
        image["classes"].append("book-figure")


FIGURE_IMG = re.compile(r'<img (?P<attrs>[^>]*?class="(?:[^"]* )?book-figure(?: [^"]*)?"[^>]*?)'
                        r'\s*/?>')
SRC = re.compile(r'\bsrc="([^"]+)"')


def legible_figures(app, pagename, templatename, context, doctree) -> None:
    """Each figure at least 9 CSS px in its smallest text, and a link to it at full size.

    The PNG's text chunk ``smallest-text-px`` (written by :mod:`maxmargin.book.legibility`)
    becomes the image's ``data-text-px`` and a CSS ``min-width`` of natural width x 9 /
    text px: the figure shrinks to the column down to that width, and a narrower column (a
    phone) scrolls it sideways in its box. Each figure is a link to its PNG (a click opens it
    full size).
    """
    body = context.get("body") or ""
    if "book-figure" not in body:
        return
    sources = {Path(dest).name: uri for uri, dest in app.builder.images.items()}

    def annotate(match):
        attrs = match.group("attrs")
        src = SRC.search(attrs).group(1)
        uri = sources.get(Path(src).name)
        extra = ""
        if uri is not None:
            width, text_px = figure_text(Path(app.srcdir, uri))
            if text_px is not None:
                extra = f' data-text-px="{text_px:g}" data-natural-width="{width}"'
                if math.isfinite(text_px):
                    extra += f' style="min-width: {math.ceil(width * MIN_TEXT_PX / text_px)}px"'
        return (f'<a class="reference internal image-reference figure-full" href="{src}" '
                f'title="Open the figure at full size"><img {attrs}{extra} /></a>')

    context["body"] = FIGURE_IMG.sub(annotate, body)


def figure_text(path: Path) -> tuple[int, float | None]:
    """A figure PNG's width (px) and smallest text (image px), None when not recorded."""
    from PIL import Image

    with Image.open(path) as png:
        value = getattr(png, "text", {}).get(TEXT_PX_KEY)
        return png.size[0], None if value is None else float(value)


def add_static(app: Sphinx) -> None:
    app.config.html_static_path.append(str(STATIC))


def add_templates(app: Sphinx, config) -> None:
    config.templates_path.insert(0, str(TEMPLATES))


def palette_images(app: Sphinx, exception: Exception | None) -> None:
    """Store the site's PNG figures as 256-colour palettes when that makes them smaller."""
    if exception is not None or app.builder.format != "html":
        return
    import io

    from PIL import Image

    for path in Path(app.outdir, "_images").glob("*.png"):
        with Image.open(path) as png:
            if png.mode == "P":
                continue
            rgb = png.convert("RGB")
        palette = rgb.quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                               dither=Image.Dither.NONE)
        buffer = io.BytesIO()
        palette.save(buffer, "PNG", optimize=True)
        if buffer.tell() < path.stat().st_size:
            path.write_bytes(buffer.getvalue())


def redirect_page(app: Sphinx, exception) -> None:
    """The site's index.html: a redirect to the root page that names the book and its icon.

    sphinx-external-toc writes a bare ``<meta http-equiv="Refresh">`` when the root page is not
    ``index``; a browser opening it then requests ``/favicon.ico``, which the site does not have
    (a 404 on every visit). Written before that handler runs (priority 400), so it keeps this one.
    """
    if exception or app.builder.format != "html" or app.config.root_doc == "index":
        return
    if app.builder.name not in ("html", "dirhtml"):
        return
    target = app.builder.get_target_uri(app.config.root_doc)
    icon = Path(app.config.html_favicon or "").name
    title = app.config.html_title or app.config.project
    from html import escape

    (Path(app.outdir) / "index.html").write_text(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
        f"<title>{escape(title)}</title>\n"
        + (f'<link rel="icon" href="_static/{escape(icon)}">\n' if icon else "")
        + f'<meta http-equiv="Refresh" content="0; url={escape(target)}">\n'
        f'</head><body><p><a href="{escape(target)}">{escape(title)}</a></p></body></html>\n',
        encoding="utf8")
