"""Chapter 6, joint training: Fig. 3 panels of the joint paths of (v, p) and their explorer."""
from __future__ import annotations

import atexit
import threading
from functools import lru_cache

import numpy as np

from .. import _checks, data
from ..svm import joint_svms
from ..train import gd_joint
from . import plots
from .explore import live

FIG3_SETTINGS = dict(lr=0.1, normalized=True, eps_p=1e-19, eps_v=1e-9)  # the paper's joint-training run
FIG3_WINDOW = ((-2.0, 15.0), (-3.0, 12.0))


def joint_paths(ax, v_path, p_path, p_dir, v_dir, *, X=None, full_dir=None, arrow_every: int = 10,
                window=FIG3_WINDOW, legend: bool = True):
    """One panel of Fig. 3: the paths of p (vermillion) and v (blue) with the SVM directions.

    v_path, p_path : (steps + 1, 2) iterates of one joint run (e.g. ``run.v[:200, 0]``);
    p_dir : (2,) the relaxed p-SVM direction (red dashed); v_dir : (2,) the v-SVM direction (blue
    dashed); X : (n, T, 2) tokens to draw, selected token 1 as a star, one colour per sequence;
    full_dir : (2,) the full ATT-SVM direction (gray dashed), drawn when given.
    window : ((x0, x1), (y0, y1)) axis limits, the paper's [-2, 15] x [-3, 12] by default.
    Returns ``ax``.
    """
    v_path = np.asarray(v_path, dtype=float)
    p_path = np.asarray(p_path, dtype=float)
    for name, path in (("v_path", v_path), ("p_path", p_path)):
        if path.ndim != 2 or path.shape[1] != 2 or len(path) < 2:
            raise ValueError(f"{name}: expected shape (steps + 1, 2) with steps >= 1, got {path.shape}")
        if not np.all(np.isfinite(path)):
            raise ValueError(f"{name}: contains non-finite values")
    for name, vec in (("p_dir", p_dir), ("v_dir", v_dir), ("full_dir", full_dir)):
        if vec is not None and (np.shape(vec) != (2,) or not np.linalg.norm(vec) > 0):
            raise ValueError(f"{name}: expected a nonzero vector of shape (2,), got {np.asarray(vec)}")
    (x0, x1), (y0, y1) = window
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.axhline(0, color="#999999", lw=0.8, zorder=1)
    ax.axvline(0, color="#999999", lw=0.8, zorder=1)
    if X is not None:
        X = np.asarray(X, dtype=float)
        if X.ndim != 3 or X.shape[2] != 2:
            raise ValueError(f"X: expected shape (n, T, 2), got {X.shape}")
        plots.sequences(ax, X, optimal=[X.shape[1] - 1] * X.shape[0])
    if full_dir is not None:
        plots.direction(ax, full_dir, color="#666666", label="full ATT-SVM", lw=1.6)
    plots.direction(ax, p_dir, color=plots.GLOBAL_COLOR, label=r"$p^{\mathrm{relax}}$ (p-SVM)")
    plots.direction(ax, v_dir, color=plots.LOCAL_COLOR, label=r"$v^{\mathrm{mm}}$ (v-SVM)")
    plots.draw_paths(ax, p_path, color=plots.GLOBAL_COLOR, arrow_every=arrow_every,
                     label="p (gradient descent)")
    plots.draw_paths(ax, v_path, color=plots.LOCAL_COLOR, arrow_every=arrow_every,
                     label="v (gradient descent)")
    ax.set_xlabel("first coordinate")
    ax.set_ylabel("second coordinate")
    if legend:
        ax.legend(loc="upper left")
    return ax


def joint_run(c: float, *, steps: int = 199):
    """Joint normalized GD on :func:`maxmargin.data.fig3_moved` (c) with the paper's settings; returns
    (instance, JointTrajectory, JointSVMs). ``steps`` updates, as everywhere in the library: the
    trajectory holds steps + 1 iterates (the default: 200, as in the chapter's figure)."""
    steps = _checks.positive_int(steps, "steps")
    inst = data.fig3_moved(c)
    run = gd_joint(inst.X, inst.Y, inst.v0, inst.p0, steps=steps, W=inst.W, **FIG3_SETTINGS)
    return inst, run, joint_svms(inst.X, inst.Y, [1, 1, 1], W=inst.W)


@lru_cache(maxsize=256)
def _cached_joint_run(c: float, steps: int):
    """:func:`joint_run`, remembered: the explorer's slider revisits the same values of c."""
    return joint_run(c, steps=steps)


def joint_panel(ax, *, c: float = 1.5, steps: int = 199, legend: bool = False, title: bool = True):
    """Explorer panel: Fig. 3 with the selected token of sequence 2 at (0.5, c).

    Draws the joint paths of p and v over ``steps`` updates with the relaxed p-SVM (red dashed),
    the full ATT-SVM (gray dashed) and v^mm (blue dashed); the title gives the angle of the last p
    and of both SVM directions. Returns the angles in degrees (gd, relaxed, full).
    """
    inst, run, svms = _cached_joint_run(round(float(c), 10), int(steps))
    angle = lambda p: float(np.degrees(np.arctan2(p[1], p[0])))  # noqa: E731
    p_last = run.p[-1, 0]
    angles = (angle(p_last), angle(svms.relaxed.p), angle(svms.full.p))
    joint_paths(ax, run.v[:, 0], run.p[:, 0], svms.relaxed.p, svms.v.v, X=inst.X,
                      full_dir=svms.full.p, legend=legend)
    if title:
        S = "{" + ", ".join(str(i) for i in np.flatnonzero(svms.v.support)) + "}"
        ax.set_title(f"c = {c:g}: v-support {S}\n"
                     f"angle of p: GD {angles[0]:.1f}°, relaxed {angles[1]:.1f}°, "
                     f"full {angles[2]:.1f}°", fontsize=9)
    return angles


def joint_explorer(*, steps: int = 199):
    """Live explorer: a slider for c, the second coordinate of sequence 2's selected token r_2."""
    import ipywidgets

    def draw(ax, c):
        joint_panel(ax, c=c, steps=steps, legend=True)

    slider = ipywidgets.FloatSlider(value=1.5, min=0.6, max=2.0, step=0.05, description="c")
    values = [float(c) for c in np.round(np.arange(slider.min, slider.max + 1e-9, slider.step), 10)]
    # Computing a joint run takes most of an update: precompute the slider's values in the
    # background, so that a slider move only draws.
    stop = threading.Event()

    def precompute():
        for c in values:
            if stop.is_set():
                return
            _cached_joint_run(c, steps)

    worker = threading.Thread(target=precompute, daemon=True)
    worker.start()
    atexit.register(lambda: (stop.set(), worker.join()))  # never stop torch mid-run at exit
    return live(draw, width=6.0, height=5.0, c=slider)
