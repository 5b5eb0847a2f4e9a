"""Chapter 2, locally-optimal tokens: the explorer panel of the moved Fig. 1 instance."""
from __future__ import annotations

from .. import data
from ..optimality import feasible_selections, optimal_indices
from . import plots


FIG1_NAMES = ("x1", "x2", "x3")


def fig1_local_optima(ax, *, x3_score: float = 0.0, x2_x: float = 1.0, x2_y: float = 0.0,
                      title: bool = True):
    """Explorer panel: which selections of the moved Fig. 1 instance are locally optimal.

    Draws the tokens (labelled with their scores) and the ATT-SVM direction of every feasible
    selection (:func:`maxmargin.book.plots.selection_directions`). Returns the list of
    ``mm.Selection``.
    """
    inst = data.fig1_moved(x3_score=x3_score, x2=(x2_x, x2_y))
    found = feasible_selections(inst.X, inst.Y, inst.v, W=inst.W)
    gamma = inst.scores[0]
    try:  # the library's tie rule (a slider's 0.9 may be 0.9 plus one ulp): no marker on a tie
        top = int(optimal_indices(inst.X, inst.Y, inst.v)[0])
    except ValueError:
        top = None
    ax.set_xlim(-2.0, 2.4)
    ax.set_ylim(-2.0, 2.0)
    plots.selection_directions(ax, inst.X[0, :, :2], found, names=FIG1_NAMES, scores=gamma,
                               optimal=top)
    ax.set_xlabel("first coordinate")
    ax.set_ylabel("second coordinate")
    if title:
        best = [FIG1_NAMES[s.alpha[0]] for s in found if s.locally_optimal]
        text = "locally optimal: {" + ", ".join(best) + "}"
        blocked = sorted(set(range(3)) - {s.alpha[0] for s in found})
        if blocked:
            text += "\ninfeasible: {" + ", ".join(FIG1_NAMES[t] for t in blocked) + "}"
        ax.set_title(text, fontsize=10)
    return found
