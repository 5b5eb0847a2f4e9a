"""Chapter 5, regularization paths: the Fig. 4 loss-effect paths and the ring explorer."""
from __future__ import annotations

import numpy as np

from .. import data
from .landscape import excess_risk_on_circle
from . import plots
from .explore import live


def loss_effect(ax, runs, color, *, label=None, dashed=(100.0,), alpha_step: float = 0.09):
    """Fig. 4 style paths: ``runs`` maps C to a (steps + 1, >= 2) path; solid lines whose alpha
    grows with C (0.09 (j + 1) for the j-th smallest C), dashed for the C values in ``dashed``."""
    solid = sorted(C for C in runs if C not in dashed)
    for j, C in enumerate(solid):
        P = np.asarray(runs[C], dtype=float)
        ax.plot(P[:, 0], P[:, 1], "-", color=color, alpha=min(1.0, alpha_step * (j + 1)), lw=1.8,
                label=label if j == len(solid) - 1 else None)
    for C in sorted(c for c in runs if c in dashed):
        P = np.asarray(runs[C], dtype=float)
        ax.plot(P[:, 0], P[:, 1], "--", color=color, lw=1.8, label=None if label is None else f"{label}, C={C:g}")
    return ax


def draw_fig4_ring(ax, *, R: float = 4.0, C: float = 10.0, legend: bool = True):
    """Explorer panel: excess risk around the circle of radius R on the Fig. 4 data, both losses.

    The ATT-SVM direction (1, 0, 0) is at angle 0 for every C; each loss's minimiser on the
    circle (a dot) is where the regularization path p_bar(R) points.
    """
    inst = data.fig4(C)
    for loss, color in (("correlation", plots.VERMILLION), ("logistic", plots.BLUE)):
        theta, gap = excess_risk_on_circle(inst.X, inst.Y, inst.v, R, W=inst.W, loss=loss)
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
