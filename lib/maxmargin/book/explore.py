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


_CDN_STYLESHEET = re.compile(r'<link rel="stylesheet"\s+href="https?://[^"]*"\s*/?>')


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


def _prompt_plane_layout(k: int, width: float | None = None, height: float | None = None):
    """A figure with the prompt-plane map and k attention-bar panels.

    One panel: map and bars side by side (the live explorer). Several: the map on top and the
    bars in a row below it, so that the figure stays legible at page width.
    """
    with plots.book_style():
        if k == 1:
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
