"""Chapter 3, gradient descent to the SVM: when a run has settled, the basin maps and the score
explorer on the moved Fig. 1 instance.

A run is classified only once it is *settled*: its iterate lies in a region that no step along
-grad L, of any length, can leave, and in which one token keeps the largest attention
(:func:`settled_tokens`; the proposition and its proof are in the chapter, section "When has a
run settled?"). Runs not yet in such a region are reported as not settled (:data:`NOT_SETTLED`),
never labelled by the token that leads at the step where they were stopped.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .. import _checks, data
from ..optimality import feasible_selections
from ..train import gd, load_compiled_engine
from . import plots
from .ch02 import FIG1_NAMES
from .explore import live

FIG1_KEYS = np.array([[-0.1, 1.0], [1.0, 0.0], [0.0, 0.0]])  # keys of x1, x2, x3 (attended plane)
NOT_SETTLED = -1
UNSETTLED_COLOR = "#303030"  # drawn at the maps' alpha 0.4: a mid grey


def fig1_family_score(inst) -> float:
    """The score g of x3 on an instance of the Fig. 1 family, which the settling criterion needs.

    The family: one sequence, label +1, the keys of Fig. 1 (x1 = (-0.1, 1), x2 = (1, 0),
    x3 = (0, 0) in the attended plane, 0 elsewhere) and scores (1, 0.9, g) with 0 <= g < 1
    (``mm.data.fig1`` and ``mm.data.fig1_moved`` with its default x2). Anything else raises a
    ValueError naming ``inst``: the criterion's proof uses exactly these numbers.
    """
    X = _checks.tokens(inst.X, "inst")
    n, T, d = X.shape
    W = np.eye(d) if inst.W is None else np.asarray(inst.W, dtype=float)
    keys = X[0] @ W if (n, T) == (1, 3) and d >= 2 else None
    if keys is None or not (np.array_equal(keys[:, :2], FIG1_KEYS) and not keys[:, 2:].any()):
        raise ValueError("inst: the settling criterion is derived for the Fig. 1 keys "
                         "x1 = (-0.1, 1), x2 = (1, 0), x3 = (0, 0) (one sequence of three tokens)")
    gamma = inst.scores[0]
    if not (inst.Y[0] == 1 and gamma[0] == 1.0 and gamma[1] == 0.9 and 0.0 <= gamma[2] < 1.0):
        raise ValueError(f"inst: the settling criterion needs label +1 and scores (1, 0.9, g) "
                         f"with 0 <= g < 1, got {gamma}")
    return float(gamma[2])


def settled_tokens(inst, P) -> np.ndarray:
    """Which token a run from each prompt of ``P`` (..., d) has settled on: 0 (x1), 1 (x2), or
    NOT_SETTLED (-1), on an instance of the Fig. 1 family (:func:`fig1_family_score`).

    With logits l1 = k1^T p, l2 = k2^T p (l3 = 0) and g the score of x3:

    * **x1** when x1 leads, l1 > max(l2, 0). There every step along -grad L, of any length,
      raises both logit gaps of x1 (to x2 and to x3), so x1 leads for ever.
    * **x2** when x2 leads, l2 > max(l1, 0), and the descent direction -grad L = (c1, c2) (up to
      a positive factor) has c1 > 0 and c2 <= 0.1 c1: a step moves p to the right and does not
      raise x1's logit over x3's. Both hold on the whole region {a' >= a, l1' <= l1}
      (p = (a, b)), because c2 / c1 only falls as l1 falls or a grows; so no step along
      -grad L, of any length, leaves that region, and x2 leads on all of it.

    Either condition, once met, is met at every later step of gradient descent or normalized
    gradient descent (any step size, any eps): the leading token is final.

    The second test evaluates the closed form of (c1, c2) / (s2 s3) in r1 = e^{l1} and
    1/r2 = e^{-l2}, with no overflow and no cancellation; the chapter checks it against
    ``mm.risk_grad``, the library tests against a 50-digit gradient.
    """
    g = fig1_family_score(inst)
    P = _checks.finite(_checks.as_float_array(P, "P"), "P")
    d = inst.X.shape[-1]
    if P.ndim == 0 or P.shape[-1] != d:
        raise ValueError(f"P: expected prompts of length {d} along the last axis, got {P.shape}")
    l1 = -0.1 * P[..., 0] + P[..., 1]
    l2 = P[..., 0]
    out = np.full(P.shape[:-1], NOT_SETTLED, dtype=int)
    out[(l1 > l2) & (l1 > 0)] = 0
    leads2 = (l2 > l1) & (l2 > 0)
    r1 = np.exp(np.minimum(l1, 3.0))           # c1 > 0 needs r1 < 8.2: larger l1 never passes
    inv_r2 = np.exp(-np.maximum(l2, 0.0))
    c1 = (0.9 - g) - 0.11 * r1 - 0.1 * (1 - g) * r1 * inv_r2     # c1 / (s2 s3)
    c2 = r1 * (0.1 + (1 - g) * inv_r2)                           # c2 / (s2 s3)
    out[leads2 & (c1 > 0) & (c2 <= 0.1 * c1)] = 1
    return out


@dataclass(frozen=True)
class Settling:
    """Runs continued until they settle (:func:`settle`).

    tokens : (B,) the settled token (0 or 1) or NOT_SETTLED; settled_by : (B,) the first step
    (among those checked) at which the run was settled, -1 if it never was; p : (B, d) the
    iterate at that step (at the last step run, for the unsettled); leading : (B,) the token
    with the largest attention after the first round (``steps`` steps), settled or not;
    checked : the steps at which the criterion was evaluated, the last being the horizon of the
    unsettled runs.
    """

    tokens: np.ndarray
    settled_by: np.ndarray
    p: np.ndarray
    leading: np.ndarray
    checked: tuple

    @property
    def horizon(self) -> int:
        """The number of steps the unsettled runs were given."""
        return int(self.checked[-1])


def settle(inst, p0, steps: int, max_steps: int, *, lr: float = 0.1, eps: float = 1e-9,
           growth: int = 4, progress: bool = False) -> Settling:
    """Normalized GD (``lr``, ``eps``) from each start of ``p0`` (B, d) on a Fig. 1-family
    instance, classified by :func:`settled_tokens` after ``steps`` steps; the runs not settled
    then are continued, alone, each round ending at ``growth`` times the steps of the last
    (``steps``, then 4 ``steps``, 16 ``steps``, ...), until they settle or ``max_steps`` steps
    in all. Each round is one batched ``mm.gd`` call that records only its last iterate; a
    settled run is not continued, since by :func:`settled_tokens` its token is final.
    ``progress``: print a line on stdout after each round (steps so far, runs settled), for
    the long calls of the chapter."""
    fig1_family_score(inst)
    P = np.atleast_2d(_checks.as_float_array(p0, "p0")).copy()
    if P.ndim != 2 or P.shape[1] != inst.X.shape[-1]:
        raise ValueError(f"p0: expected starts of shape (B, {inst.X.shape[-1]}), got {P.shape}")
    keys = inst.X[0] @ inst.W
    load_compiled_engine()
    steps = _checks.positive_int(steps, "steps")
    max_steps = _checks.positive_int(max_steps, "max_steps", minimum=steps)
    growth = _checks.positive_int(growth, "growth", minimum=2)
    tokens = np.full(len(P), NOT_SETTLED, dtype=int)
    settled_by = np.full(len(P), -1, dtype=int)
    active = np.arange(len(P))
    done, chunk, checked = 0, steps, []
    while len(active) and done < max_steps:
        chunk = min(chunk, max_steps - done)
        run = gd(inst.X, inst.Y, inst.v, P[active], chunk, lr, W=inst.W, normalized=True,
                 eps=eps, record_every=None)
        P[active] = run.p[-1]
        done += chunk
        checked.append(done)
        now = settled_tokens(inst, P[active])
        if done == steps:
            leading = np.argmax(P @ keys.T, axis=-1)
        hit = now != NOT_SETTLED
        tokens[active[hit]] = now[hit]
        settled_by[active[hit]] = done
        active = active[~hit]
        if progress:
            print(f"settle: {done:,} of at most {max_steps:,} steps, "
                  f"{len(P) - len(active)} of {len(P)} runs settled", flush=True)
        chunk = done * (growth - 1)       # the next round ends at growth times this one
    return Settling(tokens, settled_by, P, leading, tuple(checked))


@lru_cache(maxsize=64)
def _moved_selections(x3_score: float):
    """The moved Fig. 1 instance and its feasible selections, cached: the score explorer solves
    them again only when x3's score changes, not when the start moves."""
    inst = data.fig1_moved(x3_score=x3_score)
    return inst, tuple(feasible_selections(inst.X, inst.Y, inst.v, W=inst.W))


def _svm_rays(ax, inst, locally_optimal_only: bool = True, selections=None):
    """Draw the ATT-SVM direction of each (locally-optimal) selection of a one-sequence instance
    (``selections``: its precomputed feasible selections, found here if None)."""
    top = int(np.argmax(inst.scores[0]))
    if selections is None:
        selections = feasible_selections(inst.X, inst.Y, inst.v, W=inst.W)
    for s in selections:
        if locally_optimal_only and not s.locally_optimal:
            continue
        t = s.alpha[0]
        plots.direction(ax, s.svm.p, color=plots.GLOBAL_COLOR if t == top else plots.LOCAL_COLOR,
                        label=f"$p^{{mm}}$({FIG1_NAMES[t]})")


def draw_basin(ax, *, x3_score: float = 0.0, extent: float = 8.0, num: int = 41, steps: int = 200,
               max_steps: int = 51_200, eps: float = 1e-9, title: bool = True,
               legend: bool = False):
    """Static-twin panel: the basin map of the Fig. 1 instance with x3's score set to ``x3_score``.

    Each start of a ``num`` x ``num`` grid of [-extent, extent]^2 is coloured by the token its
    normalized-GD run (lr 0.1, ``eps``) has settled on (:func:`settle`: ``steps`` steps, then the
    unsettled runs continued up to ``max_steps``), grey where it has not settled; the tokens and
    the ATT-SVM rays of the locally-optimal selections are drawn on top, ``legend`` adds a legend.
    Returns the fractions of starts settled at x1, settled at x2 and not settled, shape (3,).
    """
    inst = data.fig1_moved(x3_score=x3_score)
    grid = np.linspace(-extent, extent, _checks.positive_int(num, "num"))
    A, B = np.meshgrid(grid, grid)
    p0 = np.stack([A.ravel(), B.ravel(), np.zeros(A.size)], axis=-1)
    found = settle(inst, p0, steps, max_steps, eps=eps)
    cells = np.where(found.tokens == NOT_SETTLED, 2, found.tokens).reshape(num, num)
    names = ["settled at x1", "settled at x2", "not settled"]
    _, handles = plots.selection_map(ax, grid, grid, cells, names,
                                     colors=[plots.GLOBAL_COLOR, plots.LOCAL_COLOR,
                                             UNSETTLED_COLOR])
    _svm_rays(ax, inst)
    plots.draw_tokens(ax, inst.X[0, :, :2], optimal=0, size=70)
    ax.set(xlabel="$p_1$", ylabel="$p_2$")
    if title:
        ax.set_title(f"score of x3 = {x3_score:g}", fontsize=10)
    if legend:
        ax.legend(handles=handles + ax.get_legend_handles_labels()[0], loc="upper left",
                  fontsize=7)
    return np.bincount(cells.ravel(), minlength=3) / cells.size


def draw_score_explorer(ax, *, x3_score: float = 0.0, angle: float = -80.0, norm: float = 1.0,
                        steps: int = 200, max_steps: int = 51_200, eps: float = 1e-9):
    """Live-explorer panel: one normalized-GD path on the Fig. 1 instance with x3's score changed.

    The start is ``norm`` (cos angle, sin angle, 0) (angle in degrees). Draws the tokens, the
    ATT-SVM rays of the locally-optimal selections and the first ``steps`` steps of the path
    (lr 0.1, ``eps``); the run is continued, unrecorded, up to ``max_steps`` if it has not
    settled by then (:func:`settle`), and the title names the token it settled on and when, or
    says that it has not settled. Returns the settled token index or NOT_SETTLED.
    """
    inst, selections = _moved_selections(float(x3_score))
    a = np.deg2rad(angle)
    run = gd(inst.X, inst.Y, inst.v, [norm * np.cos(a), norm * np.sin(a), 0.0], steps, 0.1,
             W=inst.W, normalized=True, eps=eps)
    t = int(settled_tokens(inst, run.p[-1, 0]))
    when = steps
    if t == NOT_SETTLED and max_steps > steps:
        later = settle(inst, run.p[-1], min(steps, max_steps - steps), max_steps - steps,
                       eps=eps)
        t = int(later.tokens[0])
        when = steps + (later.settled_by[0] if t != NOT_SETTLED else later.horizon)
    ax.set_xlim(-8, 20)
    ax.set_ylim(-10, 20)
    ax.set_aspect("equal")
    _svm_rays(ax, inst, selections=selections)
    plots.draw_tokens(ax, inst.X[0, :, :2], optimal=0, size=70, labels=list(FIG1_NAMES))
    plots.draw_paths(ax, run.p, color=plots.BLACK)
    ax.set(xlabel="$p_1$", ylabel="$p_2$")
    verdict = (f"not settled after {when} steps" if t == NOT_SETTLED
               else f"settled at {FIG1_NAMES[t]} by step {when}")
    ax.set_title(f"score of x3 = {x3_score:.2f}: {verdict}", fontsize=10)
    ax.legend(loc="upper right", fontsize=8)
    return t


def score_explorer():
    """The chapter 3 live explorer: sliders for x3's score and the start (angle, norm)."""
    import ipywidgets as w

    return live(draw_score_explorer, width=5.0, height=5.0,
                x3_score=w.FloatSlider(value=0.0, min=0.0, max=0.9, step=0.02, description="score x3"),
                angle=w.FloatSlider(value=-80.0, min=-180.0, max=180.0, step=2.0, description="angle"),
                norm=w.FloatSlider(value=1.0, min=0.25, max=8.0, step=0.25, description="norm"))
