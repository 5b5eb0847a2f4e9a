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


def smallest_text_pt(fig) -> float:
    """The smallest font size (points) of the visible, non-empty texts of ``fig`` (tick labels,
    legends, annotations and colour bars included), as last drawn; inf when it has none."""
    from matplotlib.text import Text

    sizes = [t.get_fontsize() for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip()
             and (t.axes is None or t.axes.get_visible())]
    return min(sizes, default=float("inf"))


def raise_small_text(fig, size: float) -> None:
    """Draw every text of ``fig`` under ``size`` points at ``size`` points."""
    from matplotlib.text import Text

    for text in fig.findobj(Text):
        if text.get_fontsize() < size:
            text.set_fontsize(size)


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
