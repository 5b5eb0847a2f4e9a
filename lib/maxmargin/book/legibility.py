"""Figures a reader can read: every figure's smallest text is at least 9 CSS px on the site.

The site shows a figure's PNG at its natural size, shrunk to the text column when wider (about
672 CSS px at the 1280-px layout, 342 px on a 390-px phone). A reader sees the figure's smallest
text at ``text px x shown width / natural width``, so a wide figure needs larger text. When a
chapter shows a figure (``plt.show()``, a cell's last value or ``glue(name, fig)``), the PNG
formatter that :func:`install` registers (``plots.use_book_style`` calls it):

* raises every text under the size the figure needs: 9 CSS px in the 1280-px column, and, for
  a figure a phone could show whole (up to :data:`PHONE_WHOLE_PX` image px wide, one panel), in
  the phone's column too; the figure's layout is solved again with the larger text;
* records the smallest text, in image px (points x dpi / 72), in the PNG's text chunk
  :data:`TEXT_PX_KEY`.

A label's sub- and superscripts count at the size matplotlib draws them (0.7 of the font a level,
:func:`script_scale`): a legend entry ``$p^{mm}$`` is raised until its "mm" is legible.

The book's Sphinx extension (``_ext/booksite/pages.py``) reads that chunk and gives each figure a
CSS min-width that keeps its text at least 9 CSS px (a wide figure then scrolls sideways on a
phone), and tests/site/test_figure_text.py measures it in a browser.
"""
from __future__ import annotations

import math

MIN_TEXT_PX = 9.0        # CSS px: the book's rule for the smallest text of a figure
COLUMN_PX = 672          # CSS px: the figure column at the 1280-px layout
PHONE_COLUMN_PX = 342    # CSS px: the figure column at a 390-px viewport (measured in Chromium)
PHONE_WHOLE_PX = 640     # image px: a figure up to this wide is one panel, shown whole on a phone
TEXT_PX_KEY = "smallest-text-px"
SCRIPT_SHRINK = 0.7      # matplotlib.mathtext: a sub- or superscript at 0.7 of its font size


def script_scale(text: str) -> float:
    """The size of the smallest glyphs of a label relative to its font size: matplotlib's
    mathtext draws a sub- or superscript (``$p^{mm}$``, ``$W_k z_0$``) at 0.7 of the font
    (``SHRINK_FACTOR``), a script of a script at 0.7 of that; 1 for a label without one."""
    depth = 0
    for k, math_part in enumerate(text.split("$")):
        if k % 2 == 0:
            continue                     # outside $...$: plain text
        levels, level, script_next = [], 0, False
        for i, char in enumerate(math_part):
            escaped = i > 0 and math_part[i - 1] == "\\"
            if char in "_^" and not escaped:
                script_next = True
                continue
            inner = level + 1 if script_next else level
            if char == "{" and not escaped:
                levels.append(level)     # a group: its glyphs at ``inner``
                level = inner
            elif char == "}" and not escaped and levels:
                level = levels.pop()
            elif not char.isspace():
                depth = max(depth, inner)
            script_next = False
    return SCRIPT_SHRINK ** depth


def _visible_texts(fig):
    from matplotlib.text import Text

    return [t for t in fig.findobj(Text)
            if t.get_visible() and t.get_text().strip()
            and (t.axes is None or t.axes.get_visible())]


def smallest_text_pt(fig) -> float:
    """The size (points) of the smallest glyphs among the visible, non-empty texts of ``fig``
    (tick labels, legends, annotations and colour bars included), as last drawn: each text's
    font size times :func:`script_scale` (its sub- and superscripts count); inf when it has
    none."""
    return min((t.get_fontsize() * script_scale(t.get_text()) for t in _visible_texts(fig)),
               default=float("inf"))


def raise_small_text(fig, size: float) -> None:
    """Draw every text of ``fig`` whose smallest glyphs are under ``size`` points so that they
    are ``size`` points (a label with a subscript gets a font 1 / 0.7 larger than one without)."""
    from matplotlib.text import Text

    for text in fig.findobj(Text):
        needed = size / script_scale(text.get_text())
        if text.get_fontsize() < needed:
            text.set_fontsize(needed)


def needed_text_px(width_px: float) -> float:
    """The smallest text (image px) a figure ``width_px`` image px wide needs so that it shows
    at least :data:`MIN_TEXT_PX` CSS px in the 1280-px column and, when it is narrow enough to
    be shown whole on a phone, in the phone's column."""
    column = PHONE_COLUMN_PX if width_px <= PHONE_WHOLE_PX else COLUMN_PX
    return MIN_TEXT_PX * max(1.0, width_px / column)


def legible_png(fig, *, dpi: float | None = None, bbox_inches="tight") -> bytes:
    """The PNG of ``fig`` as the book shows it: small text raised to what its width needs (see
    the module's doc) and the smallest text, in image px, in the chunk :data:`TEXT_PX_KEY`."""
    from io import BytesIO

    from PIL import Image

    dpi = float(fig.dpi if dpi is None else dpi)
    for _ in range(3):      # larger text can widen a tight bounding box: measure again
        buffer = BytesIO()
        fig.canvas.print_figure(buffer, format="png", dpi=dpi, bbox_inches=bbox_inches,
                                facecolor=fig.get_facecolor(), edgecolor=fig.get_edgecolor())
        with Image.open(BytesIO(buffer.getvalue())) as image:
            width = image.size[0]
        text_px = math.floor(smallest_text_pt(fig) * dpi / 72 * 1000) / 1000   # as recorded
        needed = needed_text_px(width)
        if text_px >= needed:
            break
        raise_small_text(fig, math.ceil(needed * 1.01 * 72 / dpi * 10) / 10)   # 1-2 % above
    else:
        raise RuntimeError(f"legible_png: text still {text_px:.1f} px in a {width}-px figure "
                           f"after raising it three times (needed {needed:.1f} px)")
    from PIL.PngImagePlugin import PngInfo

    with Image.open(BytesIO(buffer.getvalue())) as image:
        info = PngInfo()
        for key, value in image.text.items():
            info.add_text(key, value)
        info.add_text(TEXT_PX_KEY, f"{text_px:.3f}")
        out = BytesIO()
        image.save(out, format="PNG", pnginfo=info, dpi=(dpi, dpi))
    return out.getvalue()


def _png_formatter(fig):
    """IPython's PNG formatter for a Figure: :func:`legible_png`, base64 as IPython's own."""
    from binascii import b2a_base64

    if not fig.axes and not fig.lines:
        return None                    # an empty figure shows nothing (as IPython's formatter)
    return b2a_base64(legible_png(fig), newline=False).decode("ascii")


def install() -> bool:
    """Show the Figures of the running IPython kernel with :func:`legible_png`; False outside
    IPython (nothing to do)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return False
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    # The inline backend registers IPython's own PNG formatter when it loads, which pyplot
    # defers to the first figure: load it now, so that it cannot replace this one later.
    plt.switch_backend(plt.get_backend())
    shell.display_formatter.formatters["image/png"].for_type(Figure, _png_formatter)
    return True
