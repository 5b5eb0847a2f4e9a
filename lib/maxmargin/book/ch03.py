"""Chapter 3, gradient descent to the SVM: the basin maps and the score explorer on the moved
Fig. 1 instance."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .. import data
from ..optimality import feasible_selections
from ..train import gd, selection_basin
from . import plots
from .ch02 import FIG1_NAMES
from .explore import live


@lru_cache(maxsize=64)
def _moved_selections(x3_score: float):
    """The moved Fig. 1 instance and its feasible selections, cached: the score explorer solves
    them again only when x3's score changes, not when the start moves."""
    inst = data.fig1_moved(x3_score)
    return inst, tuple(feasible_selections(inst.X, inst.Y, inst.v, inst.W))


def _svm_rays(ax, inst, locally_optimal_only: bool = True, selections=None):
    """Draw the ATT-SVM direction of each (locally-optimal) selection of a one-sequence instance
    (``selections``: its precomputed feasible selections, found here if None)."""
    top = int(np.argmax(inst.scores[0]))
    if selections is None:
        selections = feasible_selections(inst.X, inst.Y, inst.v, inst.W)
    for s in selections:
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
    grid, selected = selection_basin(inst.X, inst.Y, inst.v, inst.W, extent, num, steps)
    _, handles = plots.selection_map(ax, grid, grid, selected, [f"ends at {t}" for t in FIG1_NAMES],
                                     colors=[plots.GLOBAL_COLOR, plots.LOCAL_COLOR, plots.GREEN])
    _svm_rays(ax, inst)
    plots.draw_tokens(ax, inst.X[0, :, :2], optimal=0, size=70)
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
    inst, selections = _moved_selections(float(x3_score))
    a = np.deg2rad(angle)
    run = gd(inst.X, inst.Y, inst.v, [norm * np.cos(a), norm * np.sin(a), 0.0], steps, 0.1,
             W=inst.W, normalized=True)
    ax.set_xlim(-8, 20)
    ax.set_ylim(-10, 20)
    ax.set_aspect("equal")
    _svm_rays(ax, inst, selections=selections)
    plots.draw_tokens(ax, inst.X[0, :, :2], optimal=0, size=70, labels=list(FIG1_NAMES))
    plots.draw_paths(ax, run.p, color=plots.BLACK)
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
