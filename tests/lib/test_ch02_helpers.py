"""Chapter 02 helpers: the selection census (against brute force), the cone and selection plots,
the error-bar helper and the Fig. 1 explorer."""
from __future__ import annotations

import itertools

import cvxpy as cp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.patches import Wedge  # noqa: E402
from scipy.optimize import linprog  # noqa: E402

import maxmargin as mm  # noqa: E402
from maxmargin.book import ch02, plots  # noqa: E402
from maxmargin.optimality import selection_census  # noqa: E402


def constraint_rows(X, alpha, W):
    """ATT-SVM rows g = W^T (x_{i,alpha_i} - x_it), t != alpha_i, built by loops, with their (i, t)."""
    n, T, d = X.shape
    W = np.eye(d) if W is None else W
    rows = [(W.T @ (X[i, alpha[i]] - X[i, t]), (i, t)) for i in range(n) for t in range(T) if t != alpha[i]]
    return np.array([g for g, _ in rows]), [where for _, where in rows]


def separable(G) -> bool:
    """Some p has G p > 0 (strictly): the LP max s s.t. G p >= s, |p_j| <= 1 has s > 0 (HiGHS)."""
    m, d = G.shape
    res = linprog(np.r_[np.zeros(d), -1.0], A_ub=np.hstack([-G, np.ones((m, 1))]), b_ub=np.zeros(m),
                  bounds=[(-1.0, 1.0)] * d + [(None, 1.0)], method="highs")
    assert res.status == 0, res.message
    return -res.fun > 1e-9


def min_norm_point(G) -> np.ndarray:
    """argmin ||p|| s.t. G p >= 1, written here in cvxpy and solved by Clarabel."""
    p = cp.Variable(G.shape[1])
    problem = cp.Problem(cp.Minimize(cp.sum_squares(p)), [G @ p >= 1])
    problem.solve(solver=cp.CLARABEL)
    assert problem.status == cp.OPTIMAL, problem.status
    return p.value


def brute_force(X, Y, v, W=None):
    """Every selection in T**n with its own feasibility LP, its own SVM solve, its own support
    test (slack within 1e-6 relative) and its own score comparison: no library routine."""
    n, T, _ = X.shape
    gamma = Y[:, None] * np.einsum("ntd,d->nt", X, v)
    feasible, local = 0, []
    for alpha in itertools.product(range(T), repeat=n):
        G, where = constraint_rows(X, alpha, W)
        if not separable(G):
            continue
        feasible += 1
        p = min_norm_point(G)
        tight = G @ p - 1 <= 1e-6 * np.maximum(1.0, np.linalg.norm(G, axis=1) * np.linalg.norm(p))
        if all(gamma[i, t] < gamma[i, alpha[i]] for (i, t), on in zip(where, tight) if on):
            local.append(alpha)
    return feasible, tuple(local)


@pytest.mark.parametrize("shape", [(1, 4, 3), (2, 3, 2), (2, 4, 3), (3, 3, 3)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_census_matches_brute_force(shape, seed):
    inst = mm.data.gaussian_instance(*shape, seed=seed)
    census = selection_census(inst.X, inst.Y, inst.v, W=inst.W)
    feasible, local = brute_force(inst.X, inst.Y, inst.v, inst.W)
    assert census.total == shape[1] ** shape[0]
    assert census.feasible == feasible
    assert sorted(census.locally_optimal) == sorted(local)
    opt = tuple(int(t) for t in np.argmax(mm.scores(inst.X, inst.Y, inst.v), axis=1))
    assert census.global_selection == opt
    assert census.global_feasible == mm.is_feasible(inst.X, list(opt), W=inst.W)
    if census.global_feasible:  # the global selection beats every token, so it is locally optimal
        assert census.global_is_locally_optimal


def test_census_fig1():
    a, b = (selection_census(i.X, i.Y, i.v, W=i.W) for i in (mm.data.fig1(variant="a"), mm.data.fig1(variant="b")))
    assert (a.feasible, a.locally_optimal) == (3, ((0,),))
    assert (b.feasible, b.locally_optimal, b.n_locally_optimal) == (3, ((0,), (1,)), 2)


def test_census_bad_input():
    inst = mm.data.fig1(variant="a")
    with pytest.raises(ValueError, match="Y"):
        selection_census(inst.X, np.array([2.0]), inst.v, W=inst.W)
    X = inst.X.copy()
    X[0, 2, 2] = 1.0  # x3 ties x1 for the highest score
    with pytest.raises(ValueError, match="tied"):
        selection_census(X, inst.Y, inst.v, W=inst.W)


def test_cone_wedge_angles():
    fig, ax = plt.subplots()
    ax.set_xlim(-2, 2)
    ax.set_ylim(-2, 2)
    plots.cone(ax, [0.0, 1.0, 0.0], 10.0, radius=3.0)
    (wedge,) = [p for p in ax.patches if isinstance(p, Wedge)]
    assert wedge.theta1 == pytest.approx(80.0) and wedge.theta2 == pytest.approx(100.0)
    assert wedge.r == pytest.approx(3.0)
    with pytest.raises(ValueError, match="half_angle"):
        plots.cone(ax, [1.0, 0.0], 0.0)
    with pytest.raises(ValueError, match="direction"):
        plots.cone(ax, [0.0, 0.0, 1.0], 5.0)
    plt.close(fig)


def test_selection_directions_styles():
    inst = mm.data.fig1(variant="a")
    found = mm.feasible_selections(inst.X, inst.Y, inst.v, W=inst.W)
    fig, ax = plt.subplots()
    plots.selection_directions(ax, inst.X[0, :, :2], found, scores=inst.scores[0], optimal=0)
    lines = ax.get_lines()
    assert len(lines) == 3  # one ray per feasible selection
    styles = [line.get_linestyle() for line in lines]
    assert styles == ["-", ":", ":"]  # only x1 is locally optimal in Fig. 1a
    end = lines[1].get_xydata()[-1]
    assert end / np.linalg.norm(end) == pytest.approx([1.0, 0.0])  # p_mm(x2) = (1, 0, 0)
    with pytest.raises(ValueError, match="points"):
        plots.selection_directions(ax, inst.X[0], found)
    plt.close(fig)


def test_mean_with_error():
    fig, ax = plt.subplots()
    samples = np.array([[1.0, 3.0], [2.0, 2.0]])
    plots.mean_with_error(ax, [0, 1], samples)
    line = ax.get_lines()[0]
    assert line.get_ydata() == pytest.approx([2.0, 2.0])
    with pytest.raises(ValueError, match="samples"):
        plots.mean_with_error(ax, [0, 1, 2], samples)
    plt.close(fig)


def test_fig1_moved_and_explorer():
    assert np.array_equal(mm.data.fig1_moved(x3_score=0.9).X, mm.data.fig1(variant="a").X)
    assert np.array_equal(mm.data.fig1_moved(x3_score=0.0).X, mm.data.fig1(variant="b").X)
    with pytest.raises(ValueError, match="x2"):
        mm.data.fig1_moved(x3_score=0.0, x2=(1.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="x3_score"):
        mm.data.fig1_moved(x3_score=np.nan)
    fig, ax = plt.subplots()
    found = ch02.fig1_local_optima(ax, x3_score=0.0)
    assert [s.alpha for s in found if s.locally_optimal] == [(0,), (1,)]
    assert "x1, x2" in ax.get_title()
    ax.clear()
    found = ch02.fig1_local_optima(ax, x3_score=0.0, x2_x=-0.05, x2_y=0.5)  # x2 on segment x1-x3
    assert [s.alpha for s in found] == [(0,), (2,)]
    assert "infeasible: {x2}" in ax.get_title()
    plt.close(fig)


def test_explorer_star_follows_the_library_tie_rule():
    """Bug caught: the explorer panel starred the optimal token by float equality
    (``gamma == gamma.max()``), so x3's score 0.1 added ten times (1 - 1 ulp, decimal 1 exactly,
    as a slider's steps produce) left x1 (score 1) starred as the unique optimum, while
    ``mm.optimal_indices`` calls the two tied. Reference: the decimal sum is exactly 1 (Fraction),
    a tie with x1, so no token is starred; with x3 at 0.5, x1 is."""
    from fractions import Fraction

    score = sum([0.1] * 10)
    assert score != 1.0 and sum([Fraction("0.1")] * 10) == 1
    star = 110 * 1.6  # selection_directions draws tokens of size 110, the optimal one 1.6 times
    for x3_score, stars in ((score, 0), (0.5, 1)):
        fig, ax = plt.subplots()
        ch02.fig1_local_optima(ax, x3_score=x3_score)
        sizes = [float(c.get_sizes()[0]) for c in ax.collections if len(c.get_sizes())]
        plt.close(fig)
        assert sum(s == pytest.approx(star) for s in sizes) == stars, (x3_score, sizes)
