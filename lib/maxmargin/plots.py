"""The book's figure style and shared plotting helpers.

One look for every chapter: opaque white backgrounds (readable in dark mode), a colour-blind-safe
palette (Okabe-Ito), and fixed markers for the roles a token or direction plays:

* optimal token: star; other tokens: triangle; support tokens: a black ring around the marker;
* the globally-optimal SVM direction: vermillion dashed; a locally-optimal one: blue dashed;
* gradient-descent paths: grey lines with an arrow every few steps.

Every helper draws into a given ``Axes`` and returns it, so chapters compose panels freely.
Coordinates are 2-D: pass the attended plane (e.g. ``X[..., :2]``) for the paper's instances.
"""
from __future__ import annotations

from contextlib import contextmanager

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

# Okabe-Ito palette
BLACK, ORANGE, SKY, GREEN, YELLOW, BLUE, VERMILLION, PURPLE = (
    "#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7")
PALETTE = [BLUE, VERMILLION, GREEN, ORANGE, PURPLE, SKY, YELLOW, BLACK]
SEQUENCE_COLORS = [GREEN, SKY, ORANGE, PURPLE, BLUE, YELLOW]
GLOBAL_COLOR, LOCAL_COLOR, PATH_COLOR = VERMILLION, BLUE, "#7f7f7f"
OPTIMAL_MARKER, OTHER_MARKER = "*", "^"

STYLE = {
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
    "savefig.transparent": False,
    "figure.dpi": 110,
    "figure.figsize": (6.4, 4.0),
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "legend.fontsize": 9,
    "legend.framealpha": 0.9,
    "axes.grid": True,
    "grid.color": "#dddddd",
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": matplotlib.cycler(color=PALETTE),
    "lines.linewidth": 1.8,
    "image.cmap": "viridis",
}


def use_book_style() -> None:
    """Apply the book's matplotlib style globally (call once at the top of a chapter)."""
    plt.rcParams.update(STYLE)


@contextmanager
def book_style():
    """Context manager form of :func:`use_book_style`."""
    with plt.rc_context(STYLE):
        yield


def panels(ncols: int = 1, nrows: int = 1, width: float = 4.2, height: float = 3.6, **kw):
    """A figure of ``nrows x ncols`` panels of the given size in inches; returns (fig, axes array)."""
    with book_style():
        fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows),
                                 squeeze=False, layout="constrained", **kw)
    return fig, axes.ravel()


def tokens(ax, points, optimal=None, support=None, color=BLACK, labels=None, size=140, zorder=5):
    """Scatter the tokens of one sequence.

    points : (T, 2) token coordinates; optimal : index drawn as a star; support : (T,) bool mask
    drawn with a black ring; labels : T strings written next to the tokens.
    """
    points = np.asarray(points, dtype=float)
    for t, (x, y) in enumerate(points):
        star = optimal is not None and t == optimal
        ax.scatter(x, y, s=size * (1.6 if star else 1.0), marker=OPTIMAL_MARKER if star else OTHER_MARKER,
                   color=color, edgecolors="white", linewidths=0.8, zorder=zorder)
        if support is not None and support[t]:
            ax.scatter(x, y, s=size * 3.2, marker="o", facecolors="none", edgecolors=BLACK,
                       linewidths=1.4, zorder=zorder - 1)
        if labels is not None:
            ax.annotate(labels[t], (x, y), xytext=(7, 6), textcoords="offset points", fontsize=10)
    return ax


def sequences(ax, X2, optimal=None, support=None, colors=SEQUENCE_COLORS):
    """Tokens of several sequences, one colour per sequence. X2 is (n, T, 2)."""
    for i, points in enumerate(np.asarray(X2, dtype=float)):
        tokens(ax, points, None if optimal is None else optimal[i],
               None if support is None else support[i], color=colors[i % len(colors)], size=90)
    return ax


def direction(ax, p, color=GLOBAL_COLOR, label=None, length=None, style="--", lw=2.0):
    """A ray from the origin along the 2-D direction ``p`` (drawn to the axes' edge by default)."""
    p = np.asarray(p, dtype=float)[:2]
    u = p / np.linalg.norm(p)
    if length is None:
        x0, x1 = ax.get_xlim()
        y0, y1 = ax.get_ylim()
        length = 2 * np.hypot(max(abs(x0), abs(x1)), max(abs(y0), abs(y1)))
    ax.plot([0, length * u[0]], [0, length * u[1]], style, color=color, lw=lw, label=label, zorder=3)
    return ax


def hyperplane(ax, normal, through, color="#555555", label=None):
    """The line through ``through`` orthogonal to the 2-D ``normal`` (dotted, across the axes)."""
    normal = np.asarray(normal, dtype=float)[:2]
    along = np.array([-normal[1], normal[0]]) / np.linalg.norm(normal)
    x0, x1 = ax.get_xlim()
    reach = 4 * max(abs(x0), abs(x1), *np.abs(ax.get_ylim()))
    ends = np.asarray(through, dtype=float)[:2] + np.outer([-reach, reach], along)
    ax.plot(ends[:, 0], ends[:, 1], ":", color=color, lw=1.6, label=label, zorder=2)
    return ax


def paths(ax, P, color=PATH_COLOR, arrow_every: int = 10, label=None, lw=1.4, alpha=0.9):
    """Parameter paths: P is (steps + 1, B, 2) (or (steps + 1, 2)); an arrow every few steps."""
    P = np.asarray(P, dtype=float)[..., :2]
    if P.ndim == 2:
        P = P[:, None, :]
    for b in range(P.shape[1]):
        ax.plot(P[:, b, 0], P[:, b, 1], "-", color=color, lw=lw, alpha=alpha,
                label=label if b == 0 else None, zorder=4)
        for k in range(0, P.shape[0] - 1, arrow_every):
            start, end = P[k, b], P[k + 1, b]
            if np.linalg.norm(end - start) > 0:
                ax.annotate("", xy=end, xytext=start, zorder=4,
                            arrowprops=dict(arrowstyle="-|>", color=color, lw=lw, alpha=alpha,
                                            mutation_scale=10))
        ax.scatter(*P[0, b], s=18, color=color, zorder=4)
    return ax


def curves(ax, x, values, color=None, label=None, band=True, lw=1.8):
    """Mean of ``values`` (steps, runs) against ``x``, with a min-max band over the runs."""
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    line, = ax.plot(x, values.mean(axis=1), color=color, label=label, lw=lw)
    if band and values.shape[1] > 1:
        ax.fill_between(x, values.min(axis=1), values.max(axis=1), color=line.get_color(), alpha=0.2, lw=0)
    return ax


def token_legend(ax, extra=(), loc="best"):
    """A legend that explains the marker roles (optimal, other, support) plus ``extra`` handles."""
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], marker=OPTIMAL_MARKER, ls="", color=BLACK, markersize=12, label="optimal token"),
        Line2D([], [], marker=OTHER_MARKER, ls="", color=BLACK, markersize=8, label="other token"),
        Line2D([], [], marker="o", ls="", markerfacecolor="none", markeredgecolor=BLACK, markersize=13,
               label="support token"),
    ]
    handles += list(ax.get_legend_handles_labels()[0]) + list(extra)
    ax.legend(handles=handles, loc=loc)
    return ax


# --- chapter-specific figures: one section per chapter ----------------------------------------

# --- chapter 01: the attention model -----------------------------------------------------------

# --- chapter 02: locally-optimal tokens --------------------------------------------------------

# --- chapter 03: gradient descent to the SVM ---------------------------------------------------

# --- chapter 04: regularization paths ----------------------------------------------------------

# --- chapter 05: joint training ----------------------------------------------------------------
