"""Explorers: live ipywidgets versions for Jupyter/Binder and their static twins for the site.

Each explorer is one drawing function ``draw(ax, **params)`` used twice: by :func:`live`, which wires
it to sliders in a running kernel, and by :func:`small_multiples` or :func:`animation`, which
precompute a sweep so the static site says the same thing with no kernel and no JavaScript CDN.
Chapter-specific drawing functions live below, one section per chapter.
"""
from __future__ import annotations

import re
from typing import Callable, NamedTuple, Sequence

import matplotlib.pyplot as plt
import numpy as np

from . import _checks, data, plots
from .model import attention, optimal_risk, risk
from .optimality import feasible_selections
from .svm import att_svm, v_svm
from .train import gd, gd_joint


_CDN_STYLESHEET = re.compile(r'<link rel="stylesheet"\s+href="https?://[^"]*"\s*/?>')


def live(draw: Callable, width: float = 5.0, height: float = 4.0, **controls):
    """An ``ipywidgets.interactive`` that redraws ``draw(ax, **params)`` as the controls move.

    ``controls`` are ipywidgets (or anything ``interactive`` accepts) keyed by parameter name.
    """
    import ipywidgets

    def redraw(**params):
        fig, (ax,) = plots.panels(width=width, height=height)
        draw(ax, **params)
        plt.show()

    return ipywidgets.interactive(redraw, **controls)


def small_multiples(draw: Callable, settings: Sequence[dict], ncols: int = 3, width: float = 3.4,
                    height: float = 3.0, titles: Sequence[str] | None = None):
    """The static twin: one panel per parameter setting, ``draw(ax, **setting)`` in each."""
    nrows = int(np.ceil(len(settings) / ncols))
    fig, axes = plots.panels(ncols, nrows, width=width, height=height)
    for k, ax in enumerate(axes):
        if k >= len(settings):
            ax.set_visible(False)
            continue
        draw(ax, **settings[k])
        if titles is not None:
            ax.set_title(titles[k])
    return fig


def animation(draw: Callable, settings: Sequence[dict], width: float = 5.0, height: float = 4.0,
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


# --- chapter 01: the attention model -----------------------------------------------------------

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


def draw_prompt_plane(plane, bars, inst, points, names=None, grid=None, sequence: int = 0,
                      colorbar: bool = True):
    """Draw the loss landscape over the (p1, p2) plane and the attention at marked prompts.

    plane : Axes for the map of log10(L(p) - L*); bars : one Axes per point for the attention
    weights of sequence ``sequence``; inst : a :class:`maxmargin.data.Instance` with d >= 2;
    points : (k, 2) prompts (p1, p2) (other coordinates 0); names : k labels (default A, B, ...);
    grid : a precomputed :func:`maxmargin.plots.risk_gap_grid` (computed here if None).
    """

    points = np.atleast_2d(np.asarray(points, dtype=float))
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"points: expected shape (k, 2), got {points.shape}")
    if len(bars) != len(points):
        raise ValueError(f"bars: expected one Axes per point ({len(points)}), got {len(bars)}")
    n, T, d = inst.X.shape
    if not 0 <= sequence < n:
        raise ValueError(f"sequence: expected an index in [0, {n}), got {sequence}")
    names = [chr(ord("A") + j) for j in range(len(points))] if names is None else list(names)
    grid = plots.risk_gap_grid(inst.X, inst.Y, inst.v, inst.W) if grid is None else grid
    filled = plots.risk_gap_map(plane, grid)
    if colorbar:
        plane.figure.colorbar(filled, ax=plane, shrink=0.85, label=r"$\log_{10}(L(p) - L_\star)$")
    keys = inst.X if inst.W is None else inst.X @ inst.W
    plots.tokens(plane, keys[sequence, :, :2], optimal=inst.optimal[sequence], color="white",
                 labels=[f"$x_{t + 1}$" for t in range(T)], size=90)
    for label in plane.texts:
        label.set_color("white")
    svm = att_svm(inst.X, inst.optimal, W=inst.W)
    plots.direction(plane, svm.p, color=plots.VERMILLION, label=r"$p^{\mathrm{mm}}$ direction")
    P = np.zeros((len(points), d))
    P[:, :2] = points
    gaps = risk(inst.X, inst.Y, inst.v, P, W=inst.W) - optimal_risk(inst.X, inst.Y, inst.v)
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


def prompt_plane(inst, points, names=None, grid=None, sequence: int = 0):
    """Static twin of :func:`prompt_explorer`: the map with marked prompts and their attention bars.

    Returns the figure. See :func:`draw_prompt_plane` for the arguments.
    """
    fig, plane, bars = _prompt_plane_layout(len(np.atleast_2d(points)))
    draw_prompt_plane(plane, bars, inst, points, names=names, grid=grid, sequence=sequence)
    return fig


def prompt_explorer(inst, sequence: int = 0, max_norm: float = 10.0):
    """Live explorer: sliders for the angle (degrees) and norm of p in the (p1, p2) plane.

    Redraws the loss map with the current prompt and the attention weights of ``sequence``.
    """
    import ipywidgets

    grid = plots.risk_gap_grid(inst.X, inst.Y, inst.v, inst.W)

    def redraw(angle, norm):
        theta = np.deg2rad(angle)
        fig, plane, bars = _prompt_plane_layout(1)
        draw_prompt_plane(plane, bars, inst, [[norm * np.cos(theta), norm * np.sin(theta)]],
                          names=["p"], grid=grid, sequence=sequence)
        plt.show()

    return ipywidgets.interactive(
        redraw,
        angle=ipywidgets.FloatSlider(value=95.0, min=-180.0, max=180.0, step=1.0,
                                     description="angle (deg)"),
        norm=ipywidgets.FloatSlider(value=2.0, min=0.0, max=max_norm, step=0.1, description="norm"))


# --- chapter 02: locally-optimal tokens --------------------------------------------------------


FIG1_NAMES = ("x1", "x2", "x3")


def fig1_local_optima(ax, x3_score: float = 0.0, x2_x: float = 1.0, x2_y: float = 0.0,
                      title: bool = True):
    """Explorer panel: which selections of the moved Fig. 1 instance are locally optimal.

    Draws the tokens (labelled with their scores) and the ATT-SVM direction of every feasible
    selection (:func:`maxmargin.plots.selection_directions`). Returns the list of ``mm.Selection``.
    """

    inst = data.fig1_moved(x3_score, (x2_x, x2_y))
    found = feasible_selections(inst.X, inst.Y, inst.v, inst.W)
    gamma = inst.scores[0]
    top = int(np.argmax(gamma)) if np.sum(gamma == gamma.max()) == 1 else None
    ax.set_xlim(-2.0, 2.4)
    ax.set_ylim(-2.0, 2.0)
    plots.selection_directions(ax, inst.X[0, :, :2], found, names=FIG1_NAMES, scores=gamma,
                               optimal=top)
    if title:
        best = [FIG1_NAMES[s.alpha[0]] for s in found if s.locally_optimal]
        text = "locally optimal: {" + ", ".join(best) + "}"
        blocked = sorted(set(range(3)) - {s.alpha[0] for s in found})
        if blocked:
            text += "\ninfeasible: {" + ", ".join(FIG1_NAMES[t] for t in blocked) + "}"
        ax.set_title(text, fontsize=10)
    return found

# --- chapter 03: gradient descent to the SVM ---------------------------------------------------


def basin(inst, extent: float = 8.0, num: int = 61, steps: int = 200, lr: float = 0.1):
    """Where normalized GD ends from a grid of starts in the attended plane of a Fig. 1-like instance.

    Starts are p0 = (a, b, 0) for a, b on ``np.linspace(-extent, extent, num)``; all runs are one
    batched :func:`maxmargin.gd` call (logistic loss, eps 1e-12). Returns (grid (num,),
    selected (num, num) token index of sequence 0, row j is b = grid[j]).
    """

    grid = np.linspace(-extent, extent, num)
    A, B = np.meshgrid(grid, grid)
    p0 = np.zeros((A.size, inst.X.shape[2]))
    p0[:, 0], p0[:, 1] = A.ravel(), B.ravel()
    run = gd(inst.X, inst.Y, inst.v, p0, steps, lr, W=inst.W, normalized=True)
    return grid, run.selected_tokens()[:, 0].reshape(num, num)


def _svm_rays(ax, inst, locally_optimal_only: bool = True):
    """Draw the ATT-SVM direction of each (locally-optimal) selection of a one-sequence instance."""

    top = int(np.argmax(inst.scores[0]))
    for s in feasible_selections(inst.X, inst.Y, inst.v, inst.W):
        if locally_optimal_only and not s.locally_optimal:
            continue
        t = s.alpha[0]
        plots.direction(ax, s.svm.p, color=plots.GLOBAL_COLOR if t == top else plots.LOCAL_COLOR,
                        label=f"$p^{{mm}}$({FIG1_NAMES[t]})")


def draw_basin(ax, x3_score: float = 0.0, extent: float = 8.0, num: int = 41, steps: int = 200,
               title: bool = True, legend: bool = False):
    """Static-twin panel: the basin map of the Fig. 1 instance with x3's score set to ``x3_score``.

    Colours starting points by the token normalized GD (lr 0.1, ``steps`` steps) selects, and
    draws the tokens and the ATT-SVM rays of the locally-optimal selections; ``legend`` adds a
    legend of the colours and rays. Returns the fraction of starts that end at each token, shape (3,).
    """
    inst = data.fig1_moved(x3_score)
    grid, selected = basin(inst, extent, num, steps)
    _, handles = plots.selection_map(ax, grid, grid, selected, [f"ends at {t}" for t in FIG1_NAMES],
                                     colors=[plots.GLOBAL_COLOR, plots.LOCAL_COLOR, plots.GREEN])
    _svm_rays(ax, inst)
    plots.tokens(ax, inst.X[0, :, :2], optimal=0, size=70)
    if title:
        ax.set_title(f"score of x3 = {x3_score:g}", fontsize=10)
    if legend:
        ax.legend(handles=handles[:2] + ax.get_legend_handles_labels()[0], loc="upper left",
                  fontsize=7)
    return np.bincount(selected.ravel(), minlength=3) / selected.size


def draw_score_explorer(ax, x3_score: float = 0.0, angle: float = -80.0, norm: float = 1.0,
                        steps: int = 200):
    """Live-explorer panel: one normalized-GD path on the Fig. 1 instance with x3's score changed.

    The start is ``norm`` (cos angle, sin angle, 0) (angle in degrees). Draws the tokens, the
    ATT-SVM rays of the locally-optimal selections and the path; the title names the selected
    token. Returns the selected token index.
    """

    inst = data.fig1_moved(x3_score)
    a = np.deg2rad(angle)
    run = gd(inst.X, inst.Y, inst.v, [norm * np.cos(a), norm * np.sin(a), 0.0], steps, 0.1,
             W=inst.W, normalized=True)
    ax.set_xlim(-8, 20)
    ax.set_ylim(-10, 20)
    ax.set_aspect("equal")
    _svm_rays(ax, inst)
    plots.tokens(ax, inst.X[0, :, :2], optimal=0, size=70, labels=list(FIG1_NAMES))
    plots.paths(ax, run.p, color=plots.BLACK)
    t = int(run.selected_tokens()[0, 0])
    ax.set_title(f"score of x3 = {x3_score:.2f}: GD selects {FIG1_NAMES[t]}", fontsize=10)
    ax.legend(loc="upper right", fontsize=8)
    return t


def score_explorer():
    """The chapter 3 live explorer: sliders for x3's score and the start (angle, norm)."""
    import ipywidgets as w

    return live(draw_score_explorer, width=5.0, height=5.0,
                x3_score=w.FloatSlider(value=0.0, min=0.0, max=0.9, step=0.02, description="score x3"),
                angle=w.FloatSlider(value=-80.0, min=-180.0, max=180.0, step=2.0, description="angle"),
                norm=w.FloatSlider(value=1.0, min=0.25, max=8.0, step=0.25, description="norm"))

# --- chapter 05: regularization paths ----------------------------------------------------------


def ring_risk(X, Y, v, R: float, W=None, loss="logistic", num: int = 721):
    """Excess risk L(R u) - L* on the circle of radius R in the (p1, p2) plane (p3, ... = 0).

    Returns (angles in degrees (num,), excess risk (num,)); the paper's instances attend to the
    first two coordinates, so this circle holds every prompt of norm R that matters.
    """

    X = np.asarray(X, dtype=float)
    theta = np.linspace(-180.0, 180.0, num)
    ring = np.zeros((num, X.shape[2]))
    ring[:, 0], ring[:, 1] = R * np.cos(np.radians(theta)), R * np.sin(np.radians(theta))
    return theta, risk(X, Y, v, ring, W, loss) - optimal_risk(X, Y, v, loss)


def draw_fig4_ring(ax, R: float = 4.0, C: float = 10.0, legend: bool = True):
    """Explorer panel: excess risk around the circle of radius R on the Fig. 4 data, both losses.

    The ATT-SVM direction (1, 0, 0) is at angle 0 for every C; each loss's minimiser on the
    circle (a dot) is where the regularization path p_bar(R) points.
    """

    inst = data.fig4(C)
    for loss, color in (("correlation", plots.VERMILLION), ("logistic", plots.BLUE)):
        theta, gap = ring_risk(inst.X, inst.Y, inst.v, R, inst.W, loss)
        gap = np.maximum(gap, 1e-300)
        k = int(np.argmin(gap))
        ax.semilogy(theta, gap, color=color, label=f"{loss}: min at {theta[k]:+.1f} deg")
        ax.scatter([theta[k]], [gap[k]], color=color, s=40, zorder=5)
    ax.axvline(0.0, ls="--", color=plots.GLOBAL_COLOR, lw=1.2)
    ax.set(xlim=(-90, 90), xlabel="angle of p in the (p1, p2) plane (deg)", ylabel="L(p) - L*",
           title=f"R = {R:g}, C = {C:g}")
    if legend:
        ax.legend(loc="best", fontsize=8)
    return ax


def fig4_ring_explorer():
    """Live explorer: sliders for the radius R and the score C of the Fig. 4 data."""
    import ipywidgets

    return live(draw_fig4_ring, width=6.0, height=4.0,
                R=ipywidgets.FloatLogSlider(value=4.0, base=10, min=-0.5, max=1.5, step=0.05,
                                            description="R"),
                C=ipywidgets.FloatLogSlider(value=10.0, base=10, min=0.0, max=2.0, step=0.05,
                                            description="C"),
                legend=ipywidgets.fixed(True))

# --- chapter 06: joint training ----------------------------------------------------------------


FIG3_SETTINGS = dict(lr=0.1, eps_p=1e-19, eps_v=1e-9)  # the paper's joint-training run


class JointSVMs(NamedTuple):
    """The three max-margin problems of joint training (see :func:`joint_svms`)."""

    v: object        # VSVMResult: v^mm on the selected tokens, .support is the set S
    relaxed: object  # SVMResult: p^relax, sequences outside S only need margin >= 0
    full: object     # SVMResult: the ordinary ATT-SVM of the selection


def joint_svms(X, Y, alpha, W=None) -> JointSVMs:
    """v-SVM on the selected tokens r_i = x_{i,alpha_i}, the relaxed p-SVM and the full ATT-SVM.

    X : (n, T, d) tokens; Y : (n,) labels; alpha : (n,) selected token of each sequence;
    W : (d, d) or None. The relaxed p-SVM relaxes (margin >= 0) exactly the sequences that are
    not support vectors of the v-SVM. Returns a :class:`JointSVMs`.
    """

    X = _checks.tokens(X)
    n, T, _ = X.shape
    alpha = _checks.indices(alpha, n, T)
    vsvm = v_svm(X[np.arange(n), alpha], Y)
    return JointSVMs(vsvm, att_svm(X, alpha, W=W, relaxed=~vsvm.support), att_svm(X, alpha, W=W))


def joint_run(c: float, steps: int = 200):
    """Joint normalized GD on :func:`fig3_moved` (c) with the paper's settings; returns
    (instance, JointTrajectory, JointSVMs). The trajectory holds ``steps`` iterates (0..steps-1)."""

    steps = _checks.positive_int(steps, "steps", minimum=2)
    inst = data.fig3_moved(c)
    run = gd_joint(inst.X, inst.Y, inst.v0, inst.p0, steps=steps - 1, W=inst.W, **FIG3_SETTINGS)
    return inst, run, joint_svms(inst.X, inst.Y, [1, 1, 1], inst.W)


def joint_panel(ax, c: float = 1.5, steps: int = 200, legend: bool = False, title: bool = True):
    """Explorer panel: Fig. 3 with the third selected token at (0.5, c).

    Draws the joint paths of p and v over ``steps`` iterates with the relaxed p-SVM (red dashed),
    the full ATT-SVM (gray dashed) and v^mm (blue dashed); the title gives the angle of the last p
    and of both SVM directions. Returns the angles in degrees (gd, relaxed, full).
    """
    inst, run, svms = joint_run(c, steps)
    angle = lambda p: float(np.degrees(np.arctan2(p[1], p[0])))  # noqa: E731
    p_last = run.p[-1, 0]
    angles = (angle(p_last), angle(svms.relaxed.p), angle(svms.full.p))
    plots.joint_paths(ax, run.v[:, 0], run.p[:, 0], svms.relaxed.p, svms.v.v, X=inst.X,
                      full_dir=svms.full.p, legend=legend)
    if title:
        S = "{" + ", ".join(str(i + 1) for i in np.flatnonzero(svms.v.support)) + "}"
        ax.set_title(f"c = {c:g}: v-support {S}\n"
                     f"angle of p: GD {angles[0]:.1f}°, relaxed {angles[1]:.1f}°, "
                     f"full {angles[2]:.1f}°", fontsize=9)
    return angles


def joint_explorer(steps: int = 200):
    """Live explorer: a slider for c, the second coordinate of the third sequence's selected token."""
    import ipywidgets

    def draw(ax, c):
        joint_panel(ax, c=c, steps=steps, legend=True)

    return live(draw, width=6.0, height=5.0,
                c=ipywidgets.FloatSlider(value=1.5, min=0.6, max=2.0, step=0.05, description="c"))
