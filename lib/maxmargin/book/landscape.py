"""The risk landscape over a plane, rays and a circle of prompts, and the basins of GD's
selection: the grids behind the book's figures and explorers (chapters 01, 03, 05).

They moved here from the core (``maxmargin.excess_risk_on_plane`` and the others, and
``maxmargin.selection_basin``): each is one batched call of the core's kernels over a grid of
prompts or starts, validated once here. Results are named tuples, which unpack as before.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import _checks
from .._descent import Descent, _record_steps, _settings
from .._engines import _selected_tokens
from .._numerics import _excess_risk
from ..losses import LOGISTIC, Loss, get_loss
from ..problem import Problem, problem


class PlaneGrid(NamedTuple):
    """Excess risk on a grid of the (p1, p2) plane: gap[j, k] at p = (p1[k], p2[j], 0, ...)."""

    p1: np.ndarray   # (r,)
    p2: np.ndarray   # (r,)
    gap: np.ndarray  # (r, r)


class RayProfiles(NamedTuple):
    """Excess risk along rays: gaps[j, m] at R = radii[m] on direction j."""

    radii: np.ndarray  # (m,)
    gaps: np.ndarray   # (k, m)


class CircleProfile(NamedTuple):
    """Excess risk on a circle of the (p1, p2) plane, by angle."""

    angles: np.ndarray  # (num,) degrees from -180 to 180
    gap: np.ndarray     # (num,)


class Basin(NamedTuple):
    """The token GD selects from each start of a grid: selected[j, k] from (grid[k], grid[j])."""

    grid: np.ndarray      # (num,)
    selected: np.ndarray  # (num, num) token indices


def excess_risk_on_plane(X, Y, v, *, W=None, loss: str | Loss = "logistic",
                         extent=(-4.0, 8.0, -3.0, 7.0), resolution: int = 161) -> PlaneGrid:
    """The excess risk L(p) - L* over a grid of prompts in the plane of p's first two coordinates.

    The other coordinates of p are 0. ``extent`` is (p1_min, p1_max, p2_min, p2_max).
    Returns a :class:`PlaneGrid` (p1 (r,), p2 (r,), gap (r, r)), gap[j, k] at (p1[k], p2[j], 0, ...).
    """
    prob = _plane_problem(X, Y, v, W)
    loss = get_loss(loss)
    extent = _checks.as_float_array(extent, "extent")
    if extent.shape != (4,) or not np.all(np.isfinite(extent)) or extent[0] >= extent[1] \
            or extent[2] >= extent[3]:
        raise ValueError(f"extent: expected finite (p1_min, p1_max, p2_min, p2_max) with min < max, "
                         f"got {extent.tolist()}")
    resolution = _checks.positive_int(resolution, "resolution", minimum=2)
    _affordable_prompts("resolution", resolution, resolution ** 2, prob.shape)
    p1 = np.linspace(extent[0], extent[1], resolution)
    p2 = np.linspace(extent[2], extent[3], resolution)
    P = np.zeros((resolution, resolution, prob.shape[2]))
    P[..., 0], P[..., 1] = np.meshgrid(p1, p2)
    gap = _excess_risk(prob, P.reshape(-1, prob.shape[2]), loss)
    return PlaneGrid(p1, p2, gap.reshape(resolution, resolution))


def excess_risk_on_rays(X, Y, v, directions, *, W=None, radii=None,
                        loss: str | Loss = "logistic") -> RayProfiles:
    """Excess risk L(R u) - L* along rays R u, u = direction / ||direction||.

    directions : (k, d) non-zero directions; radii : (m,) values of R, default 81 in [0, 20].
    Returns a :class:`RayProfiles` (radii (m,), gaps (k, m)).
    """
    prob = problem(X, Y, v, W)
    loss = get_loss(loss)
    d = prob.shape[2]
    U = _checks.finite(_checks.as_float_array(directions, "directions"), "directions")
    if U.ndim != 2 or U.shape[1] != d:
        raise ValueError(f"directions: expected shape (k, {d}), got {U.shape}")
    norms = np.max(np.abs(U), axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError("directions: every direction must be non-zero")
    U = U / norms  # first by the largest entry, so that the norm cannot overflow
    norms = np.linalg.norm(U, axis=1, keepdims=True)
    if radii is None:
        radii = np.linspace(0.0, 20.0, 81)
    radii = _checks.finite(_checks.as_float_array(radii, "radii"), "radii")
    if radii.ndim != 1:
        raise ValueError(f"radii: expected shape (m,), got {radii.shape}")
    _affordable_prompts("radii", f"<{len(radii)} values>", len(U) * len(radii), prob.shape)
    P = (radii[None, :, None] * (U / norms)[:, None, :]).reshape(-1, d)
    return RayProfiles(radii, _excess_risk(prob, P, loss).reshape(len(U), len(radii)))


def excess_risk_on_circle(X, Y, v, radius: float, *, W=None, loss: str | Loss = "logistic",
                          num: int = 721) -> CircleProfile:
    """Excess risk L(R u) - L* on the circle of radius R in the (p1, p2) plane (p3, ... = 0).

    Returns a :class:`CircleProfile` (angles in degrees (num,) from -180 to 180, gap (num,));
    the paper's instances attend to the first two coordinates, so this circle holds every prompt
    of norm R that matters. The best direction on the circle is ``angles[np.argmin(gap)]``.
    """
    prob = _plane_problem(X, Y, v, W)
    loss = get_loss(loss)
    R = _checks.positive_float(radius, "radius")
    num = _checks.positive_int(num, "num", minimum=2)
    _affordable_prompts("num", num, num, prob.shape)
    theta = np.linspace(-180.0, 180.0, num)
    ring = np.zeros((num, prob.shape[2]))
    ring[:, 0], ring[:, 1] = R * np.cos(np.radians(theta)), R * np.sin(np.radians(theta))
    return CircleProfile(theta, _excess_risk(prob, ring, loss))


def selection_basin(X, Y, v, *, W=None, extent: float = 8.0, num: int = 61, steps: int = 200,
                    lr: float = 0.1, sequence: int = 0) -> Basin:
    """Which token normalized GD selects at step ``steps`` from each start of a grid in the
    (p1, p2) plane.

    Starts are p0 = (a, b, 0, ...) for a, b on ``np.linspace(-extent, extent, num)``; all runs are
    one batched :func:`maxmargin.gd` call (``steps`` normalized steps of size ``lr``, eps 1e-12). The label
    is read off a finite run: a run still turning from one token to another carries the token it
    leads with at that step, which need not be where it ends (chapter 03 labels its basins by a
    criterion under which the leading token is final, ``maxmargin.book.ch03.settle``).

    Returns
    -------
    :class:`Basin` (grid (num,), selected (num, num)): the index of the token with the largest attention at
    step ``steps`` in sequence ``sequence``; row j is b = grid[j], column k is a = grid[k].
    """
    prob = problem(X, Y, v, W)
    n, T, d = prob.shape
    if d < 2:
        raise ValueError(f"X: the prompt plane needs d >= 2, got d={d}")
    extent = _checks.positive_float(extent, "extent")
    num = _checks.positive_int(num, "num")
    if isinstance(sequence, bool) or not isinstance(sequence, (int, np.integer)) \
            or not 0 <= sequence < n:
        raise ValueError(f"sequence: expected an index in [0, {n}), got {sequence!r}")
    _checks.affordable("num", num, float(num) ** 2 * n * T * d, 8.0 * num ** 2 * (d + n * T),
                       "a grid of num x num starts")
    steps, lr, loss, eps = _settings(steps, lr, LOGISTIC, eps=1e-12)
    grid = np.linspace(-extent, extent, num)
    A, B = np.meshgrid(grid, grid)
    p0 = np.zeros((A.size, d))
    p0[:, 0], p0[:, 1] = A.ravel(), B.ravel()
    run = Descent(steps, lr, loss, True, (eps,), _record_steps(steps, None), "gd")
    return Basin(grid, _selected_tokens(prob, p0, run)[:, sequence].reshape(num, num))


def _affordable_prompts(name: str, value, count: int, shape: tuple) -> None:
    """Refuse a family of ``count`` prompts whose risks cost more than the library's limits
    (per prompt: n T d multiply-adds, and the prompt and its n T attention weights in memory)."""
    n, T, d = shape
    _checks.affordable(name, value, float(count) * n * T * d, 8.0 * count * (d + 2 * n * T),
                       "evaluating the risk at every prompt")


def _plane_problem(X, Y, v, W) -> Problem:
    """The validated problem of an instance whose prompts have a (p1, p2) plane, i.e. d >= 2."""
    prob = problem(X, Y, v, W)
    if prob.shape[2] < 2:
        raise ValueError(f"X: the prompt plane needs d >= 2, got d={prob.shape[2]}")
    return prob
