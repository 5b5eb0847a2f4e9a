"""The book's figure style and generic drawing helpers (chapter-specific figures are in ``chNN``).

One look for every chapter: opaque white backgrounds (readable in dark mode), a colour-blind-safe
palette (Okabe-Ito), and fixed markers for the roles a token or direction plays:

* optimal token: star; other tokens: triangle; support tokens: a black ring around the marker;
* the globally-optimal SVM direction: vermillion dashed; a locally-optimal one: blue dashed;
* gradient-descent paths: grey lines with an arrow every few steps.

Every helper draws into a given ``Axes`` and returns it, so chapters compose panels freely; what
a figure shows is computed by the library (``maxmargin``), never here. Coordinates are 2-D: pass
the attended plane (e.g. ``X[..., :2]``) for the paper's instances.
"""
from __future__ import annotations

from contextlib import contextmanager

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from ..losses import get_loss
from .landscape import excess_risk_on_rays

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
    """Apply the book's matplotlib style globally (call once at the top of a chapter); in a
    kernel, figures are then shown with text a reader can read (:mod:`.legibility`)."""
    from . import legibility

    plt.rcParams.update(STYLE)
    legibility.install()


@contextmanager
def book_style():
    """Context manager form of :func:`use_book_style`."""
    with plt.rc_context(STYLE):
        yield


def panels(*, ncols: int = 1, nrows: int = 1, width: float = 4.2, height: float = 3.6, **kw):
    """A figure of ``nrows x ncols`` panels of the given size in inches; returns (fig, axes array)."""
    with book_style():
        fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows),
                                 squeeze=False, layout="constrained", **kw)
    return fig, axes.ravel()


# ----------------------------------------------------------------------------------------------
# Tokens and directions
# ----------------------------------------------------------------------------------------------


def draw_tokens(ax, points, *, optimal=None, support=None, color=BLACK, labels=None, size=140, zorder=5):
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


def sequences(ax, X2, *, optimal=None, support=None, colors=SEQUENCE_COLORS):
    """Tokens of several sequences, one colour per sequence. X2 is (n, T, 2)."""
    for i, points in enumerate(np.asarray(X2, dtype=float)):
        draw_tokens(ax, points, optimal=None if optimal is None else optimal[i],
               support=None if support is None else support[i], color=colors[i % len(colors)], size=90)
    return ax


def direction(ax, p, *, color=GLOBAL_COLOR, label=None, length=None, style="--", lw=2.0):
    """A ray from the origin along the 2-D direction ``p`` (drawn to the axes' edge by default)."""
    p = np.asarray(p, dtype=float)[:2]
    u = p / np.linalg.norm(p)
    if length is None:
        x0, x1 = ax.get_xlim()
        y0, y1 = ax.get_ylim()
        length = 2 * np.hypot(max(abs(x0), abs(x1)), max(abs(y0), abs(y1)))
    ax.plot([0, length * u[0]], [0, length * u[1]], style, color=color, lw=lw, label=label, zorder=3)
    return ax


def hyperplane(ax, normal, through, *, color="#555555", label=None):
    """The line through ``through`` orthogonal to the 2-D ``normal`` (dotted, across the axes)."""
    normal = np.asarray(normal, dtype=float)[:2]
    along = np.array([-normal[1], normal[0]]) / np.linalg.norm(normal)
    x0, x1 = ax.get_xlim()
    reach = 4 * max(abs(x0), abs(x1), *np.abs(ax.get_ylim()))
    ends = np.asarray(through, dtype=float)[:2] + np.outer([-reach, reach], along)
    ax.plot(ends[:, 0], ends[:, 1], ":", color=color, lw=1.6, label=label, zorder=2)
    return ax


def cone(ax, direction, half_angle, *, radius=None, color=LOCAL_COLOR, alpha=0.18, label=None):
    """Shade the 2-D cone of directions within ``half_angle`` degrees of ``direction``.

    direction : (>= 2,) vector, its first two coordinates are used; half_angle : degrees in
    (0, 180); radius : length of the wedge (default: to the axes' edge). Returns ``ax``.
    """
    from matplotlib.patches import Wedge

    u = np.asarray(direction, dtype=float)
    if u.ndim != 1 or u.shape[0] < 2 or not np.all(np.isfinite(u)) or not np.any(u[:2]):
        raise ValueError(f"direction: expected a finite vector with a nonzero 2-D part, got {direction!r}")
    if not np.isfinite(half_angle) or not 0 < half_angle < 180:
        raise ValueError(f"half_angle: expected degrees in (0, 180), got {half_angle!r}")
    if radius is None:
        x0, x1 = ax.get_xlim()
        y0, y1 = ax.get_ylim()
        radius = 2 * np.hypot(max(abs(x0), abs(x1)), max(abs(y0), abs(y1)))
    centre = np.degrees(np.arctan2(u[1], u[0]))
    ax.add_patch(Wedge((0.0, 0.0), radius, centre - half_angle, centre + half_angle, color=color,
                       alpha=alpha, lw=0, label=label, zorder=1))
    return ax


def selection_directions(ax, points, selections, *, names=None, scores=None, optimal=None,
                         length=1.5):
    """One sequence's tokens and the ATT-SVM direction of each of its feasible selections.

    points : (T, 2) tokens in the attended plane; selections : list of ``mm.Selection`` of a
    one-sequence instance (e.g. from ``mm.feasible_selections``); names : T token names;
    scores : (T,) token scores, written next to the names; optimal : index of the highest-score
    token (drawn as a star). A locally-optimal selection's direction is solid (vermillion for the
    optimal token, blue otherwise); a feasible one that is not locally optimal is grey and dotted.
    Each ray has unit direction and ``length`` and is labelled with the selected token's name.
    Returns ``ax``.
    """
    points = np.asarray(points, dtype=float)
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"points: expected shape (T, 2), got {points.shape}")
    T = len(points)
    names = [f"x{t + 1}" for t in range(T)] if names is None else list(names)
    if len(names) != T:
        raise ValueError(f"names: expected {T} names, got {len(names)}")
    if scores is not None and np.shape(scores) != (T,):
        raise ValueError(f"scores: expected shape ({T},), got {np.shape(scores)}")
    for sel in selections:
        if len(sel.alpha) != 1:
            raise ValueError(f"selections: expected one-sequence selections, got alpha={sel.alpha}")
        t = sel.alpha[0]
        u = np.asarray(sel.svm.direction, dtype=float)[:2]
        u = u / np.linalg.norm(u)
        if sel.locally_optimal:
            color, style = (GLOBAL_COLOR if t == optimal else LOCAL_COLOR), "-"
        else:
            color, style = PATH_COLOR, ":"
        ax.plot([0, length * u[0]], [0, length * u[1]], style, color=color, lw=2.2, zorder=3)
        ax.annotate(f"$p^{{mm}}$({names[t]})", length * u, xytext=8 * u, textcoords="offset points",
                    color=color, fontsize=9, ha="left" if u[0] > 0.3 else ("right" if u[0] < -0.3 else "center"),
                    va="bottom" if u[1] > 0.3 else ("top" if u[1] < -0.3 else "center"))
    text = names if scores is None else [f"{a}: {g:.3g}" for a, g in zip(names, scores)]
    draw_tokens(ax, points, optimal=optimal, labels=text, size=110)
    ax.set_aspect("equal", adjustable="box")
    return ax


def token_legend(ax, *, extra=(), loc="best"):
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


# ----------------------------------------------------------------------------------------------
# Paths and curves
# ----------------------------------------------------------------------------------------------


def draw_paths(ax, P, *, color=PATH_COLOR, arrow_every: int = 10, label=None, lw=1.4, alpha=0.9):
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


def draw_regularization_path(ax, points, *, radii=None, color=PURPLE, label="regularization path",
                        annotate: bool = True, marker="o"):
    """Path points p_bar(R), (k, >= 2), as markers joined by a line; ``radii`` (k,) label them."""
    P = np.asarray(points, dtype=float)[:, :2]
    ax.plot(P[:, 0], P[:, 1], "-", color=color, lw=1.4, alpha=0.8, zorder=5)
    ax.scatter(P[:, 0], P[:, 1], s=36, marker=marker, color=color, edgecolors="white", linewidths=0.8,
               zorder=6, label=label)
    if annotate and radii is not None:
        for R, (x, y) in zip(radii, P):
            ax.annotate(f"R={R:g}", (x, y), xytext=(5, -12), textcoords="offset points", fontsize=8,
                        color=color)
    return ax


def curves(ax, x, values, *, color=None, label=None, band=True, lw=1.8):
    """Mean of ``values`` (steps, runs) against ``x``, with a min-max band over the runs."""
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        values = values[:, None]
    line, = ax.plot(x, values.mean(axis=1), color=color, label=label, lw=lw)
    if band and values.shape[1] > 1:
        ax.fill_between(x, values.min(axis=1), values.max(axis=1), color=line.get_color(), alpha=0.2, lw=0)
    return ax


def quantile_curves(ax, x, values, *, color=None, label=None, q=(0.1, 0.9), lw=1.8):
    """Median of ``values`` (steps, runs) against ``x`` with a band between the quantiles ``q``.

    Suited to log axes, where a mean is dominated by the largest run. Returns ``ax``.
    """
    values = np.asarray(values, dtype=float)
    if values.ndim != 2 or values.shape[0] != len(x):
        raise ValueError(f"values: expected shape ({len(x)}, runs), got {values.shape}")
    line, = ax.plot(x, np.median(values, axis=1), color=color, label=label, lw=lw)
    lo, hi = np.quantile(values, q, axis=1)
    ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, lw=0)
    return ax


def mean_with_error(ax, x, samples, *, color=None, label=None, marker="o"):
    """Mean over seeds with standard-error bars.

    x : (k,) settings; samples : (k, S) one value per setting and seed (S >= 2). The bar is
    std(ddof=1) / sqrt(S). Returns ``ax``.
    """
    x = np.asarray(x, dtype=float)
    samples = np.asarray(samples, dtype=float)
    if samples.ndim != 2 or samples.shape[0] != x.shape[0] or samples.shape[1] < 2:
        raise ValueError(f"samples: expected shape ({x.shape[0]}, S) with S >= 2, got {samples.shape}")
    mean = samples.mean(axis=1)
    se = samples.std(axis=1, ddof=1) / np.sqrt(samples.shape[1])
    ax.errorbar(x, mean, yerr=se, color=color, label=label, marker=marker, capsize=3, lw=1.6)
    return ax


# ----------------------------------------------------------------------------------------------
# Losses and attention
# ----------------------------------------------------------------------------------------------

_LOSS_TEX = {"logistic": r"$\log(1+e^{-x})$", "exponential": r"$e^{-x}$", "correlation": r"$-x$"}


def loss_curves(axes, *, x=None, names=("logistic", "exponential", "correlation")):
    """Margin losses l(x) in ``axes[0]`` and their derivatives l'(x) in ``axes[1]``.

    axes : two Axes; x : (m,) margins, default 241 points in [-3, 3]; names : losses known to
    :func:`maxmargin.get_loss`. Returns ``axes``.
    """
    if len(axes) != 2:
        raise ValueError(f"axes: expected two Axes (values, derivatives), got {len(axes)}")
    x = np.linspace(-3.0, 3.0, 241) if x is None else np.asarray(x, dtype=float)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"x: expected a 1-D array of at least two margins, got shape {x.shape}")
    for name, color in zip(names, [BLUE, VERMILLION, GREEN, ORANGE, PURPLE]):
        loss = get_loss(name)
        tex = _LOSS_TEX.get(loss.name, loss.formula)
        axes[0].plot(x, loss.value(x), color=color, label=f"{loss.name} {tex}")
        axes[1].plot(x, loss.derivative(x), color=color, label=loss.name)
    axes[0].set(xlabel=r"margin $x = Y f(X)$", ylabel=r"$\ell(x)$", ylim=(-3, 6), title="loss")
    axes[1].set(xlabel=r"margin $x = Y f(X)$", ylabel=r"$\ell'(x)$", ylim=(-4, 0.5),
                title="derivative")
    for ax in axes:
        ax.axhline(0, color="#999999", lw=0.8, zorder=1)
    axes[0].legend(loc="upper right")
    return axes


def attention_bars(ax, s, *, labels=None, optimal=None, color=BLUE, annotate=True):
    """Bar chart of one sequence's attention weights.

    s : (T,) softmax weights; labels : T tick labels (default x1..xT); optimal : index of the
    optimal token, drawn in the global-optimum colour. Returns ``ax``.
    """
    s = np.asarray(s, dtype=float)
    if s.ndim != 1:
        raise ValueError(f"s: expected the (T,) attention weights of one sequence, got shape {s.shape}")
    labels = [f"$x_{t + 1}$" for t in range(s.size)] if labels is None else list(labels)
    if len(labels) != s.size:
        raise ValueError(f"labels: expected {s.size} labels, got {len(labels)}")
    colors = [GLOBAL_COLOR if optimal is not None and t == optimal else color for t in range(s.size)]
    ax.bar(range(s.size), s, color=colors, width=0.7, zorder=3)
    ax.set_xticks(range(s.size), labels)
    ax.set_ylim(0, 1.12)
    ax.grid(axis="x", visible=False)
    if annotate:
        for t, value in enumerate(s):
            ax.annotate(f"{value:.2f}", (t, value), xytext=(0, 2), textcoords="offset points",
                        ha="center", va="bottom", fontsize=8)
    return ax


# ----------------------------------------------------------------------------------------------
# Maps over a plane of prompts or starts
# ----------------------------------------------------------------------------------------------


def risk_gap_map(ax, grid, *, floor: float = 1e-12, levels: int = 14):
    """Filled contours of log10(L(p) - L*) from :func:`maxmargin.book.landscape.excess_risk_on_plane`; returns the contour set."""
    p1, p2, gap = grid
    logs = np.log10(np.maximum(gap, floor))
    filled = ax.contourf(p1, p2, logs, levels=levels, cmap="viridis", zorder=0)
    ax.contour(p1, p2, logs, levels=filled.levels, colors="white", linewidths=0.3, alpha=0.5, zorder=1)
    ax.set(xlabel="$p_1$", ylabel="$p_2$", xlim=(p1[0], p1[-1]), ylim=(p2[0], p2[-1]))
    ax.set_aspect("equal")
    ax.grid(False)
    return filled


def excess_risk_along_rays(ax, X, Y, v, directions, *, W=None, radii=None, labels=None, colors=None,
                           loss="logistic"):
    """Excess risk L(R u) - L* against R for unit directions u, on a log scale.

    directions : (k, d) directions (normalised by :func:`maxmargin.book.landscape.excess_risk_on_rays`);
    radii : (m,) values of R, default 0..20. Returns (ax, gaps (k, m)).
    """
    radii, gaps = excess_risk_on_rays(X, Y, v, directions, W=W, radii=radii, loss=loss)
    colors = PALETTE if colors is None else colors
    for k in range(gaps.shape[0]):
        ax.semilogy(radii, np.maximum(gaps[k], 1e-17), color=colors[k % len(colors)],
                    label=None if labels is None else labels[k])
    ax.set(xlabel=r"$R = \|p\|$", ylabel=r"$L(Ru) - L_\star$")
    return ax, gaps


def selection_map(ax, xs, ys, selected, names, *, colors=None, alpha: float = 0.4, equal: bool = True):
    """Colour a grid of starting points by the token gradient descent ends up selecting.

    xs : (a,) and ys : (b,) grid coordinates (the attended plane); selected : (b, a) int labels in
    ``range(len(names))`` (row j is ``ys[j]``); names : legend text per label; colors : one
    colour per label (default: vermillion, blue, green, ...); equal : equal axis scales (a plane
    of prompts); False for other coordinates. Returns (ax, legend patches).
    """
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.patches import Patch

    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    selected = np.asarray(selected)
    if selected.shape != (len(ys), len(xs)):
        raise ValueError(f"selected: expected shape ({len(ys)}, {len(xs)}), got {selected.shape}")
    k = len(names)
    if selected.size and (selected.min() < 0 or selected.max() >= k):
        raise ValueError(f"selected: labels must lie in [0, {k}), got {selected.min()}..{selected.max()}")
    colors = list(colors) if colors is not None else [GLOBAL_COLOR, LOCAL_COLOR, GREEN, ORANGE, PURPLE][:k]
    if len(colors) < k:
        raise ValueError(f"colors: need {k} colours, got {len(colors)}")
    cmap = ListedColormap(colors[:k])
    ax.pcolormesh(xs, ys, selected, cmap=cmap, norm=BoundaryNorm(np.arange(k + 1) - 0.5, k),
                  alpha=alpha, shading="nearest", zorder=0, rasterized=True)
    ax.set_xlim(xs[0], xs[-1])
    ax.set_ylim(ys[0], ys[-1])
    if equal:
        ax.set_aspect("equal")
    handles = [Patch(color=colors[j], alpha=alpha, label=names[j]) for j in range(k)]
    return ax, handles


def signed_log_map(ax, xs, ys, values, *, linthresh: float = 1e-8, vmax: float | None = None):
    """Heat map of a signed quantity on a grid with a symmetric log scale (blue > 0, red < 0).

    xs : (a,), ys : (b,), values : (b, a). Values with magnitude below ``linthresh`` are drawn
    (near-)white. Returns the mappable, for ``fig.colorbar``.
    """
    from matplotlib.colors import SymLogNorm

    values = np.asarray(values, dtype=float)
    if values.shape != (len(ys), len(xs)):
        raise ValueError(f"values: expected shape ({len(ys)}, {len(xs)}), got {values.shape}")
    vmax = float(np.max(np.abs(values))) if vmax is None else float(vmax)
    norm = SymLogNorm(linthresh=linthresh, vmin=-vmax, vmax=vmax, base=10)
    mesh = ax.pcolormesh(xs, ys, values, cmap="RdBu", norm=norm, shading="nearest", rasterized=True)
    ax.set_aspect("equal")
    return mesh
