"""Explorers: live ipywidgets versions for Jupyter/Binder and their static twins for the site.

Each explorer is one drawing function ``draw(ax, **params)`` used twice: by :func:`live`, which wires
it to sliders in a running kernel, and by :func:`small_multiples` or :func:`animation`, which
precompute a sweep so the static site says the same thing with no kernel and no JavaScript CDN.
The prompt-plane explorer (any instance) is here too; the panels of one chapter's explorers are in
that chapter's module (``ch02``, ``ch03``, ``ch05``, ``ch06``). ipywidgets is imported on first use.
"""
from __future__ import annotations

import re
from typing import Callable, Sequence

import matplotlib.pyplot as plt
import numpy as np

from .. import _checks
from ..model import attention, excess_risk, keys
from .landscape import excess_risk_on_plane
from ..svm import att_svm
from . import plots
from .legibility import raise_small_text, smallest_text_pt


_CDN_STYLESHEET = re.compile(r'<link rel="stylesheet"\s+href="https?://[^"]*"\s*/?>')

# The interactive twin's frames and the book's rule that text is at least 9 CSS px at a 390-px
# viewport. There the page gives a frame about 340 CSS px (tests/site/test_explorer_twins.py
# measures it); a frame at most TWIN_MAX_WIDTH inches wide is shown at 72 CSS px per inch or
# more, never scaled down, so its text of TWIN_MIN_FONT points or more is 9 CSS px or more.
TWIN_MAX_WIDTH = 4.6        # inches (331 CSS px at 72 px per inch)
TWIN_MIN_FONT = 9.0         # points: smaller text in a frame is drawn at this size
# On a wide screen a frame is shown at 1.5 CSS px per point (as the book's 110-dpi figures),
# from a 144-dpi PNG: sharp there and on a phone's 2x screen.
TWIN_CSS_PER_INCH = 108.0
TWIN_DPI = 144.0


def live(draw: Callable, *, width: float = 5.0, height: float = 4.0, **controls):
    """An ``ipywidgets.interactive`` that redraws ``draw(ax, **params)`` as the controls move.

    ``controls`` are ipywidgets (or anything ``interactive`` accepts) keyed by parameter name.
    One figure serves every update (its ``figure`` attribute): the axes are cleared and redrawn,
    and the constrained layout is solved once, at the first update, then frozen, since solving it
    again took most of an update's time.
    """
    import ipywidgets

    fig, (ax,) = plots.panels(width=width, height=height)
    plt.close(fig)  # displayed by each update, not by the inline backend at the end of the cell

    def redraw(**params):
        ax.clear()
        draw(ax, **params)
        _show(fig)

    widget = ipywidgets.interactive(redraw, **controls)
    widget.figure = fig
    return widget


def _show(fig) -> None:
    """Display ``fig`` in the widget's output; the first time, fix its layout for good."""
    from IPython.display import display

    if fig.get_layout_engine() is not None:
        fig.canvas.draw()                  # the constrained layout places the axes once
        fig.set_layout_engine("none")
    display(fig)


def small_multiples(draw: Callable, settings: Sequence[dict], *, ncols: int = 3, width: float = 3.4,
                    height: float = 3.0, titles: Sequence[str] | None = None):
    """The static twin: one panel per parameter setting, ``draw(ax, **setting)`` in each."""
    nrows = int(np.ceil(len(settings) / ncols))
    fig, axes = plots.panels(ncols=ncols, nrows=nrows, width=width, height=height)
    for k, ax in enumerate(axes):
        if k >= len(settings):
            ax.set_visible(False)
            continue
        draw(ax, **settings[k])
        if titles is not None:
            ax.set_title(titles[k])
    return fig


def animation(draw: Callable, settings: Sequence[dict], *, width: float = 5.0, height: float = 4.0,
              interval: int = 200):
    """The static twin as a self-contained JavaScript animation (``to_jshtml``), one frame a setting."""
    from matplotlib.animation import FuncAnimation
    from IPython.display import HTML

    fig, (ax,) = plots.panels(width=width, height=height)

    def frame(k):
        ax.clear()
        draw(ax, **settings[k])
        return ()

    anim = FuncAnimation(fig, frame, frames=len(settings), interval=interval, blit=False)
    page = anim.to_jshtml(default_mode="once")
    plt.close(fig)
    # matplotlib links Font Awesome from a CDN for the player's buttons; the site must work
    # offline, and the theme's own icon font already draws them.
    return HTML(_CDN_STYLESHEET.sub("", page))


# ----------------------------------------------------------------------------------------------
# The prompt plane: the loss landscape over (p1, p2) and the attention at chosen prompts
# ----------------------------------------------------------------------------------------------


def _prompt_plane_layout(k: int, width: float | None = None, height: float | None = None,
                         stacked: bool = False):
    """A figure with the prompt-plane map and k attention-bar panels.

    One panel: map and bars side by side (the live explorer), or stacked as below when
    ``stacked``. Several: the map on top and the bars in a row below it, so that the figure
    stays legible at page width.
    """
    with plots.book_style():
        if k == 1 and not stacked:
            fig = plt.figure(figsize=(width or 8.4, height or 4.0), layout="constrained")
            outer = fig.add_gridspec(1, 2, width_ratios=[1.6, 1.0])
            plane = fig.add_subplot(outer[0])
            bars = [fig.add_subplot(outer[1])]
        else:
            fig = plt.figure(figsize=(width or 8.0, height or 7.4), layout="constrained")
            outer = fig.add_gridspec(2, k, height_ratios=[2.3, 1.0])
            plane = fig.add_subplot(outer[0, :])
            bars = [fig.add_subplot(outer[1, j]) for j in range(k)]
    return fig, plane, bars


def draw_prompt_plane(plane, bars, inst, points, *, names=None, grid=None, sequence: int = 0,
                      colorbar: bool = True, svm=None):
    """Draw the loss landscape over the (p1, p2) plane and the attention at marked prompts.

    plane : Axes for the map of log10(L(p) - L*); bars : one Axes per point for the attention
    weights of sequence ``sequence``; inst : a :class:`maxmargin.data.Instance` with d >= 2;
    points : (k, 2) prompts (p1, p2) (other coordinates 0); names : k labels (default A, B, ...);
    grid : a precomputed :func:`maxmargin.book.landscape.excess_risk_on_plane` (computed here if None);
    svm : the instance's precomputed :func:`maxmargin.att_svm` (solved here if None).
    Returns the excess risks (k,) at the points.
    """
    points = _checks.finite(np.atleast_2d(_checks.as_float_array(points, "points")), "points")
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"points: expected shape (k, 2), got {points.shape}")
    if len(bars) != len(points):
        raise ValueError(f"bars: expected one Axes per point ({len(points)}), got {len(bars)}")
    n, T, d = inst.X.shape
    if isinstance(sequence, bool) or not isinstance(sequence, (int, np.integer)):
        raise TypeError(f"sequence: expected an integer index, got {sequence!r}")
    if not 0 <= sequence < n:
        raise ValueError(f"sequence: expected an index in [0, {n}), got {sequence}")
    names = [chr(ord("A") + j) for j in range(len(points))] if names is None else list(names)
    grid = excess_risk_on_plane(inst.X, inst.Y, inst.v, W=inst.W) if grid is None else grid
    filled = plots.risk_gap_map(plane, grid)
    if colorbar:
        plane.figure.colorbar(filled, ax=plane, shrink=0.85, label=r"$\log_{10}(L(p) - L_\star)$")
    K = keys(inst.X, W=inst.W)
    plots.draw_tokens(plane, K[sequence, :, :2], optimal=inst.optimal[sequence], color="white",
                      labels=[f"$x_{t + 1}$" for t in range(T)], size=90)
    for label in plane.texts:
        label.set_color("white")
    svm = att_svm(inst.X, inst.optimal, W=inst.W) if svm is None else svm
    plots.direction(plane, svm.p, color=plots.VERMILLION, label=r"$p^{\mathrm{mm}}$ direction")
    P = np.zeros((len(points), d))
    P[:, :2] = points
    gaps = excess_risk(inst.X, inst.Y, inst.v, P, W=inst.W)
    weights = attention(inst.X, P, W=inst.W)[:, sequence]
    for name, p, ax, s, gap in zip(names, points, bars, weights, gaps):
        plane.scatter(*p, s=70, color="white", edgecolors=plots.BLACK, linewidths=1.2, zorder=6)
        plane.annotate(name, p, xytext=(6, -12), textcoords="offset points", color="white",
                       fontweight="bold", zorder=6)
        plots.attention_bars(ax, s, optimal=inst.optimal[sequence])
        ax.set_title(rf"{name}: $\|p\|$ = {np.linalg.norm(p):.1f}" "\n"
                     rf"$L - L_\star$ = {gap:.1e}", fontsize=10)
    bars[0].set_ylabel("attention weight")
    plane.legend(loc="lower left")
    return gaps


def prompt_plane(inst, points, *, names=None, grid=None, sequence: int = 0):
    """Static twin of :func:`prompt_explorer`: the map with marked prompts and their attention bars.

    Returns the figure. See :func:`draw_prompt_plane` for the arguments.
    """
    fig, plane, bars = _prompt_plane_layout(len(np.atleast_2d(points)))
    draw_prompt_plane(plane, bars, inst, points, names=names, grid=grid, sequence=sequence)
    return fig


from functools import lru_cache  # noqa: E402


@lru_cache(maxsize=4)
def _fig1_plane(variant: str):
    """The Fig. 1 instance of ``variant``, its loss map over the prompt plane and its SVM."""
    from .. import data

    inst = data.fig1(variant=variant)
    return (inst, excess_risk_on_plane(inst.X, inst.Y, inst.v, W=inst.W, extent=_TWIN_EXTENT),
            att_svm(inst.X, inst.optimal, W=inst.W))


# The twin's map: wide enough that every prompt of norm up to 8 is on it (the live explorer's
# default map, (-4, 8, -3, 7), left 7 of the twin's 32 positions off the map).
_TWIN_EXTENT = (-8.5, 8.5, -8.5, 8.5)


def prompt_frame_figure():
    """The figure of one prompt-explorer frame: ``(fig, (plane, bars))``, the bars under the map
    so that the frame is no wider than a phone's column (:data:`TWIN_MAX_WIDTH`)."""
    fig, plane, bars = _prompt_plane_layout(1, width=TWIN_MAX_WIDTH, height=6.0, stacked=True)
    return fig, (plane, bars)


def prompt_frame(axes, *, angle: float, norm: float, variant: str = "a", sequence: int = 0):
    """One frame of :func:`prompt_explorer` on ``data.fig1(variant)``: the prompt at ``angle``
    (degrees) and ``norm`` in the (p1, p2) plane. axes : ``(plane, [bars])``. Returns the excess
    risk there, shape (1,)."""
    plane, bars = axes
    inst, grid, svm = _fig1_plane(variant)
    theta = np.deg2rad(angle)
    first = len(plane.figure.axes) == 2  # the colour bar once: it is kept between frames
    return draw_prompt_plane(plane, bars, inst, [[norm * np.cos(theta), norm * np.sin(theta)]],
                             names=["p"], grid=grid, sequence=sequence, svm=svm, colorbar=first)


def prompt_explorer(inst, *, sequence: int = 0, max_norm: float = 10.0):
    """Live explorer: sliders for the angle (degrees) and norm of p in the (p1, p2) plane.

    Redraws the loss map with the current prompt and the attention weights of ``sequence``.
    """
    import ipywidgets

    grid = excess_risk_on_plane(inst.X, inst.Y, inst.v, W=inst.W)
    svm = att_svm(inst.X, inst.optimal, W=inst.W)
    fig, plane, bars = _prompt_plane_layout(1)
    plt.close(fig)  # displayed by each update (see :func:`live`)

    def redraw(angle, norm):
        theta = np.deg2rad(angle)
        first = fig.get_layout_engine() is not None
        plane.clear()
        bars[0].clear()
        draw_prompt_plane(plane, bars, inst, [[norm * np.cos(theta), norm * np.sin(theta)]],
                          names=["p"], grid=grid, sequence=sequence, colorbar=first, svm=svm)
        _show(fig)

    widget = ipywidgets.interactive(
        redraw,
        angle=ipywidgets.FloatSlider(value=95.0, min=-180.0, max=180.0, step=1.0,
                                     description="angle (deg)"),
        norm=ipywidgets.FloatSlider(value=2.0, min=0.0, max=max_norm, step=0.1, description="norm"))
    widget.figure = fig
    return widget


# ----------------------------------------------------------------------------------------------
# The interactive twin: the live explorer's controls on the static page, frames computed at build
# ----------------------------------------------------------------------------------------------


def _importable(func: Callable, name: str) -> str:
    """``"module:qualname"`` of a module-level function, so a test can call it again by name."""
    import importlib

    where = f"{getattr(func, '__module__', '')}:{getattr(func, '__qualname__', '')}"
    module, _, qualname = where.partition(":")
    try:
        found = getattr(importlib.import_module(module), qualname)
    except (ImportError, AttributeError, ValueError):
        found = None
    if found is not func:
        raise ValueError(f"{name}: expected a module-level function (importable by name), "
                         f"got {func!r}")
    return where


def frame_fingerprint(fig) -> str:
    """SHA-256 (hex) of what ``fig`` draws: every line's, collection's and image's data, every
    bar and every text, at 8 significant digits (ulp-level differences between runs vanish;
    a different computation does not). Layout and colours are left out."""
    import hashlib

    from matplotlib.collections import Collection
    from matplotlib.image import AxesImage
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle
    from matplotlib.text import Text

    digest = hashlib.sha256()

    def add(tag, values=None, text=None):
        digest.update(tag.encode() + b"\0")
        if values is not None:
            a = np.ma.filled(np.ma.asarray(values, dtype=float), np.nan).ravel()
            digest.update(" ".join(f"{x:.8g}" for x in a).encode() + b"\0")
        if text is not None:
            digest.update(text.encode() + b"\0")

    for k, ax in enumerate(fig.axes):
        add(f"axes {k}", text=f"{ax.get_xscale()} {ax.get_yscale()}")
        for artist in ax.get_children():
            if not artist.get_visible():
                continue
            if isinstance(artist, Line2D):
                add("line", artist.get_xydata())
            elif isinstance(artist, Collection):
                add("collection", artist.get_offsets())
                if artist.get_array() is not None:
                    add("values", artist.get_array())
                for path in artist.get_paths():
                    add("path", path.vertices)
            elif isinstance(artist, AxesImage):
                add("image", artist.get_array())
            elif isinstance(artist, Rectangle) and artist is not ax.patch:
                add("bar", [artist.get_x(), artist.get_y(), artist.get_width(), artist.get_height()])
            elif isinstance(artist, Text) and artist.get_text():
                add("text", text=artist.get_text())
    return digest.hexdigest()


def _png_uri(fig, colors: int) -> str:
    """``fig`` as a data URI of a PNG of at most ``colors`` palette colours."""
    import base64
    import io

    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=fig.dpi)
    with Image.open(io.BytesIO(buffer.getvalue())) as png:
        palette = png.convert("RGB").quantize(colors=colors, method=Image.Quantize.MEDIANCUT,
                                              dither=Image.Dither.NONE)
    buffer = io.BytesIO()
    palette.save(buffer, "PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _jsonable(value):
    """A draw function's return value as JSON numbers where it is numeric, else None."""
    try:
        a = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        return None
    return np.where(np.isfinite(a), a, np.nan).tolist() if a.size else None


def _axes_list(axes) -> list:
    """The Axes in ``axes`` (one Axes, or nested sequences of them)."""
    if hasattr(axes, "clear") and hasattr(axes, "figure"):
        return [axes]
    return [a for item in axes for a in _axes_list(item)]


def render_frames(draw: Callable, settings: Sequence[dict], *, figure: Callable | None = None,
                  width: float = 5.0, height: float = 4.0, dpi: float | None = None,
                  max_width: float | None = None, min_fontsize: float | None = None):
    """Draw ``draw(axes, **setting)`` for each setting into one figure; yields (fig, result).

    figure : ``figure()`` returning ``(fig, axes)`` passed as draw's first argument (default: one
    panel of ``width`` x ``height`` inches, the Axes itself passed). As in :func:`live`, the axes
    are cleared between settings (other axes, such as a colour bar, are kept) and the constrained
    layout is solved once, at the first setting, then frozen: solving it again was most of a
    frame's time. max_width : a wider figure is narrowed to it (inches, height kept) before the
    layout is solved; min_fontsize : smaller text of each frame is drawn at this size (points).
    The figure is closed at the end.
    """
    if figure is None:
        fig, (axes,) = plots.panels(width=width, height=height)
    else:
        fig, axes = figure()
    if max_width is not None and fig.get_figwidth() > max_width:
        fig.set_figwidth(max_width)
    if dpi is not None:
        fig.set_dpi(dpi)
    engine = None
    try:
        for k, setting in enumerate(settings):
            if k:
                for ax in _axes_list(axes):
                    ax.clear()
            with plots.book_style():
                result = draw(axes, **setting)
            if min_fontsize is not None:
                # tick labels get their text ($10^{-1}$ on a log axis) only when drawn: draw
                # first, so that the rule sees their scripts
                fig.draw_without_rendering()
                raise_small_text(fig, min_fontsize)
            if k == 0 and fig.get_layout_engine() is not None:
                engine = fig.get_layout_engine()
                fig.canvas.draw()
                fig.set_layout_engine("none")
            elif k and engine is not None and _titles_cut(fig):
                fig.set_layout_engine(engine)   # a taller title than the first frame's: solve
                fig.canvas.draw()               # the layout again for this frame only
                fig.set_layout_engine("none")
            yield fig, result
    finally:
        plt.close(fig)


def _titles_cut(fig) -> bool:
    """Whether a title or label of ``fig`` reaches beyond the figure's edges."""
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    for ax in fig.axes:
        for text in (ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label):
            if text.get_text() and text.get_visible():
                extent = text.get_window_extent(renderer)
                if (extent.y1 > box.y1 + 0.5 or extent.y0 < box.y0 - 0.5
                        or extent.x0 < box.x0 - 0.5 or extent.x1 > box.x1 + 0.5):
                    return True
    return False


def interactive(draw: Callable, controls: dict, *, fixed: dict | None = None,
                figure: Callable | None = None, width: float = 5.0, height: float = 4.0,
                dpi: float = TWIN_DPI, colors: int = 64, labels: dict | None = None,
                formats: dict | None = None, alt: str = "", note: str = ""):
    """The interactive twin: the live explorer's sliders on the static site, with no kernel.

    draw : a module-level ``draw(axes, **params)`` (the live explorer's drawing function);
    controls : ``{name: values}``, the positions of each slider (1-d, in slider order); every
    combination is drawn at build time (``itertools.product`` order, the last control fastest);
    fixed : keyword arguments passed to every call; figure : see :func:`render_frames`;
    width, height : inches; a frame is at most :data:`TWIN_MAX_WIDTH` wide (a wider figure is
    narrowed, its height kept) and its text at least :data:`TWIN_MIN_FONT` points, so that on a
    phone the text is at least 9 CSS px; dpi : of the PNG frames (shown at
    :data:`TWIN_CSS_PER_INCH` CSS px per inch where the page is wide enough);
    labels / formats : per control, its label and a ``str.format`` spec of the value shown;
    alt : the frames' alt text (the setting is appended); note : a sentence added below.
    Each frame records its smallest font size (``font``, points); the spec, the figure's
    ``size`` in inches. The booksite extension moves the frames' PNGs out of the page into
    files that ``explorer.js`` loads when needed.
    Returns an ``IPython.display.HTML``: a hidden ``div.mm-explorer`` that the book's
    ``explorer.js`` shows and wires (a range input and an output per control, one image), so
    without JavaScript (and in print) only the static twin before it is seen.
    """
    import base64
    import html
    import itertools
    import json

    from IPython.display import HTML

    where = _importable(draw, "draw")
    if figure is not None:
        _importable(figure, "figure")
    if not isinstance(controls, dict) or not controls:
        raise ValueError(f"controls: expected a non-empty dict name -> values, got {controls!r}")
    fixed = dict(fixed or {})
    labels, formats = dict(labels or {}), dict(formats or {})
    grid = {}
    for name, values in controls.items():
        values = [v.item() if isinstance(v, np.generic) else v for v in values]
        if not values or len(set(values)) != len(values):
            raise ValueError(f"controls: {name!r} needs distinct values, got {values!r}")
        if name in fixed:
            raise ValueError(f"fixed: {name!r} is also a control")
        grid[name] = values
    names = list(grid)
    combos = [dict(zip(names, combo)) for combo in itertools.product(*grid.values())]
    frames = []
    drawn = render_frames(draw, [{**fixed, **params} for params in combos], figure=figure,
                          width=width, height=height, dpi=dpi, max_width=TWIN_MAX_WIDTH,
                          min_fontsize=TWIN_MIN_FONT)
    for params, (fig, result) in zip(combos, drawn):
        src = _png_uri(fig, colors)           # drawn: the texts below are the ones in the PNG
        frames.append({"src": src, "hash": frame_fingerprint(fig), "font": smallest_text_pt(fig),
                       "params": params, "result": _jsonable(result)})
        size = [float(x) for x in fig.get_size_inches()]
    drawn.close()  # closes the figure now, not at garbage collection (the inline backend shows it)
    shown = {name: [format(v, formats.get(name, "g")) for v in values]
             for name, values in grid.items()}
    spec = {"draw": where, "figure": None if figure is None else _importable(figure, "figure"),
            "fixed": fixed, "size": size,
            "controls": [{"name": n, "label": labels.get(n, n), "values": grid[n],
                          "shown": shown[n]} for n in names],
            "alt": alt, "frames": frames}
    key = "mm-" + frame_fingerprint_key(where, fixed, grid)
    rows = []
    for n in names:
        rows.append(
            f'<div class="mm-control"><label for="{key}-{n}">{html.escape(labels.get(n, n))}</label>'
            f'<input type="range" id="{key}-{n}" name="{n}" min="0" max="{len(grid[n]) - 1}" '
            f'step="1" value="0" data-control="{n}">'
            f'<output for="{key}-{n}">{html.escape(shown[n][0])}</output></div>')
    sizes = ", ".join(str(len(v)) for v in grid.values())
    total = len(frames)
    weight = sum(len(base64.b64decode(f["src"].split(",", 1)[1])) for f in frames)  # PNG bytes
    text = (f"{total} positions "
            f"({' x '.join(f'{len(v)} {labels.get(n, n)}' for n, v in grid.items())}), "
            f"each computed and drawn by <code>{html.escape(where)}</code> when the book was "
            f"built ({weight / 1e3:.0f} kB of PNG frames). {note}").strip()
    payload = json.dumps(spec, separators=(",", ":")).replace("</", "<\\/")
    first = frames[0]
    return HTML(
        f'<div class="mm-explorer" id="{key}" hidden data-draw="{html.escape(where)}" '
        f'data-positions="{sizes}">'
        f'<div class="mm-controls">{"".join(rows)}</div>'
        # no src: explorer.js sets it from the frames (the div is hidden without JavaScript, so
        # the first frame written here too would only be loaded twice)
        f'<img class="mm-frame" alt="{html.escape(alt)}" data-frame="0" '
        f'width="{round(size[0] * TWIN_CSS_PER_INCH)}" '
        f'height="{round(size[1] * TWIN_CSS_PER_INCH)}" data-hash="{first["hash"]}">'
        f'<p class="mm-note">{text}</p>'
        f'<script type="application/json" class="mm-data">{payload}</script></div>')


def frame_fingerprint_key(where: str, fixed: dict, grid: dict) -> str:
    """A short id for an explorer's element, stable across builds (12 hex digits)."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps([where, fixed, grid], sort_keys=True, default=str)
                          .encode()).hexdigest()[:12]
