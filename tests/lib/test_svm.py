"""Tests of maxmargin.svm: paper values, fast vs cvxpy, KKT certificates, errors, properties.

The KKT checks and the constraint rows used here are rebuilt from X with plain loops, so they
share no code with the solvers.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from scipy.optimize import minimize

from maxmargin.svm import (
    SVMResult,
    att_svm,
    att_svm_problem,
    is_feasible,
    least_distance,
    set_svm,
    set_svm_problem,
    v_svm,
    w_svm,
)

SOLVERS = ["fast", "cvxpy"]
W3 = np.diag([1.0, 1.0, 0.0])  # the paper's W = diag(1, 1, 0)


# ----------------------------------------------------------------------------------------------
# helpers written independently of the solvers
# ----------------------------------------------------------------------------------------------


def rows(X, alpha, W=None, relaxed=None):
    """Constraint rows g = W^T (x_ia - x_it) and right-hand sides, with their (i, t), by loops."""
    n, T, d = X.shape
    W = np.eye(d) if W is None else W
    relaxed = np.zeros(n, bool) if relaxed is None else relaxed
    G, h, where = [], [], []
    for i in range(n):
        for t in range(T):
            if t != alpha[i]:
                G.append(W.T @ (X[i, alpha[i]] - X[i, t]))
                h.append(0.0 if relaxed[i] else 1.0)
                where.append((i, t))
    return np.array(G), np.array(h), where


def assert_kkt(X, alpha, result: SVMResult, W=None, relaxed=None, atol=1e-7):
    """Primal feasibility, dual feasibility, complementary slackness and stationarity."""
    G, h, where = rows(X, alpha, W, relaxed)
    mu = np.array([result.multipliers[i, t] for i, t in where])
    slack = G @ result.p - h
    assert slack.min() >= -atol, "primal feasibility"
    assert mu.min() >= 0, "dual feasibility"
    assert np.max(np.abs(mu * slack)) <= atol, "complementary slackness"
    np.testing.assert_allclose(G.T @ mu, result.p, atol=atol, err_msg="stationarity")
    for i in range(X.shape[0]):
        assert result.constraints[i, alpha[i]] == np.inf
        assert not result.support[i, alpha[i]]
        assert result.multipliers[i, alpha[i]] == 0
    assert np.all(result.multipliers[~result.support] == 0)


def planted(rng, n, T, d, W=None, relaxed_fraction=0.0, gap=0.1):
    """A feasible ATT-SVM instance: the selected token is pushed along a random direction r
    until it beats every other token by ``gap``. Returns X, alpha, relaxed and a feasible p."""
    X = rng.normal(size=(n, T, d))
    alpha = rng.integers(0, T, size=n)
    r = rng.normal(size=d)
    r /= np.linalg.norm(r)
    for i in range(n):
        others = [t for t in range(T) if t != alpha[i]]
        lead = max((X[i, t] - X[i, alpha[i]]) @ r for t in others)
        X[i, alpha[i]] += (max(lead, 0.0) + gap) * r
    relaxed = rng.random(n) < relaxed_fraction
    # with keys W^T x the logit is x^T W p, so p = W^{-1} r scores x along r
    p = r if W is None else np.linalg.solve(W, r)
    G, h, _ = rows(X, alpha, W, relaxed)
    worst = min(G[h > 0] @ p) if np.any(h > 0) else 1.0
    return X, alpha, relaxed, p / worst


# ----------------------------------------------------------------------------------------------
# values from the paper's figures
# ----------------------------------------------------------------------------------------------

FIG1 = np.array([[[-0.1, 1.0, 1.0], [1.0, 0.0, 0.9], [0.0, 0.0, 0.9]]])


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize(
    "alpha, p, support",
    [
        (0, [-10 / 101, 100 / 101, 0.0], [False, False, True]),
        (1, [1.0, 0.0, 0.0], [False, False, True]),
        (2, [-1.0, -1.1, 0.0], [True, True, False]),
    ],
)
def test_fig1(solver, alpha, p, support):
    result = att_svm(FIG1, [alpha], W=W3, solver=solver, tol=1e-6)
    np.testing.assert_allclose(result.p, p, atol=1e-6)
    np.testing.assert_array_equal(result.support[0], support)
    assert result.margin == pytest.approx(1 / np.linalg.norm(p), abs=1e-6)
    assert_kkt(FIG1, [alpha], result, W3, atol=1e-6)


FIG3 = np.array([[[0.0, 0.0], [1.0, 1.0]], [[0.0, 0.0], [1.0, -1.0]], [[0.0, 0.0], [0.5, 1.0]]])
FIG3_RELAXED = FIG3.copy()
FIG3_RELAXED[2, 1] = [0.5, 1.5]
Y3 = np.array([1.0, -1.0, 1.0])


@pytest.mark.parametrize("solver", SOLVERS)
def test_fig3_tight(solver):
    result = att_svm(FIG3, [1, 1, 1], solver=solver)
    np.testing.assert_allclose(result.p, [4 / 3, 1 / 3], atol=1e-6)
    np.testing.assert_allclose(result.constraints[:, 0], [5 / 3, 1.0, 1.0], atol=1e-6)
    np.testing.assert_array_equal(result.support[:, 0], [False, True, True])
    assert_kkt(FIG3, [1, 1, 1], result)

    v = v_svm(FIG3[:, 1], Y3, solver=solver, tol=1e-6)
    np.testing.assert_allclose(v.v, [0.0, 1.0], atol=1e-6)
    np.testing.assert_array_equal(v.support, [True, True, True])
    np.testing.assert_allclose(v.margins, [1.0, 1.0, 1.0], atol=1e-6)


@pytest.mark.parametrize("solver", SOLVERS)
def test_fig3_relaxed(solver):
    full = att_svm(FIG3_RELAXED, [1, 1, 1], solver=solver)
    np.testing.assert_allclose(full.p, [1.25, 0.25], atol=1e-6)
    relaxed = np.array([False, False, True])
    result = att_svm(FIG3_RELAXED, [1, 1, 1], relaxed=relaxed, solver=solver)
    np.testing.assert_allclose(result.p, [1.0, 0.0], atol=1e-6)
    np.testing.assert_array_equal(result.relaxed, relaxed)
    assert_kkt(FIG3_RELAXED, [1, 1, 1], result, relaxed=relaxed)

    v = v_svm(FIG3_RELAXED[:, 1], Y3, solver=solver, tol=1e-6)
    np.testing.assert_allclose(v.v, [0.0, 1.0], atol=1e-6)
    np.testing.assert_array_equal(v.support, [True, True, False])
    np.testing.assert_allclose(v.margins, [1.0, 1.0, 1.5], atol=1e-6)


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("C", [1.0, 10.0, 100.0])
def test_fig4(solver, C):
    X = np.array([[[0, 0, 0], [1, 1, C]], [[0, 0, 0], [1, -1, 1]]], dtype=float)
    result = att_svm(X, [1, 1], W=W3, solver=solver)
    np.testing.assert_allclose(result.p, [1.0, 0.0, 0.0], atol=1e-6)
    assert_kkt(X, [1, 1], result, W3)


# ----------------------------------------------------------------------------------------------
# fast solver against cvxpy, KKT and a generic NLP solver
# ----------------------------------------------------------------------------------------------

CASES = [  # seed, n, T, d, random W, relaxed fraction
    (0, 1, 2, 1, False, 0.0),
    (1, 3, 2, 2, False, 0.0),
    (2, 5, 4, 3, True, 0.0),
    (3, 10, 5, 4, False, 0.3),
    (4, 20, 6, 5, True, 0.3),
    (5, 40, 8, 6, True, 0.5),
    (6, 50, 3, 8, False, 0.0),
    (7, 30, 10, 10, True, 0.2),
    (8, 100, 10, 10, False, 0.0),
    (9, 8, 20, 2, False, 0.0),  # many more constraints than dimensions
    (10, 60, 4, 12, True, 0.9),
    (11, 15, 6, 3, True, 0.0),
]


def random_W(rng, d):
    return np.eye(d) + 0.3 * rng.normal(size=(d, d))


@pytest.mark.parametrize("seed, n, T, d, with_W, relaxed_fraction", CASES)
def test_fast_matches_cvxpy(seed, n, T, d, with_W, relaxed_fraction):
    rng = np.random.default_rng(seed)
    W = random_W(rng, d) if with_W else None
    X, alpha, relaxed, p_feasible = planted(rng, n, T, d, W, relaxed_fraction)
    fast = att_svm(X, alpha, W=W, relaxed=relaxed)
    slow = att_svm(X, alpha, W=W, relaxed=relaxed, solver="cvxpy")
    np.testing.assert_allclose(fast.p, slow.p, atol=1e-6)
    assert fast.norm <= np.linalg.norm(p_feasible) + 1e-9
    assert_kkt(X, alpha, fast, W, relaxed, atol=1e-9)
    assert_kkt(X, alpha, slow, W, relaxed, atol=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_no_smaller_feasible_point_slsqp(seed):
    rng = np.random.default_rng(100 + seed)
    n, T, d = 4, 3, 3
    W = random_W(rng, d) if seed % 2 else None
    X, alpha, relaxed, p_feasible = planted(rng, n, T, d, W, relaxed_fraction=0.25)
    G, h, _ = rows(X, alpha, W, relaxed)
    best = minimize(
        lambda p: p @ p,
        x0=p_feasible * 1.5,
        jac=lambda p: 2 * p,
        constraints=[{"type": "ineq", "fun": lambda p: G @ p - h, "jac": lambda p: G}],
        method="SLSQP",
        # ftol is absolute and ||p||^2 ~ 50 is known only to ~u 50 = 6e-15: a goal of 1e-14 sits at
        # the rounding level, where SLSQP's line search stops (status 8) with some OpenBLAS kernels
        # (Prescott, Nehalem, Sandybridge: seed 1); 1e-12 converges with all, to 1e-11 in p.
        options={"ftol": 1e-12, "maxiter": 500},
    )
    assert best.success
    p = att_svm(X, alpha, W=W, relaxed=relaxed).p
    assert np.linalg.norm(p) <= np.linalg.norm(best.x) + 1e-7
    np.testing.assert_allclose(p, best.x, atol=1e-5)


def test_all_relaxed_gives_zero():
    rng = np.random.default_rng(3)
    X, alpha, _, _ = planted(rng, 4, 3, 2)
    for solver in SOLVERS:
        result = att_svm(X, alpha, relaxed=np.ones(4, bool), solver=solver)
        np.testing.assert_array_equal(result.p, 0.0)
        assert result.margin == np.inf and np.all(result.direction == 0)
        # every constraint reads 0 >= 0 with equality, but none carries a multiplier
        assert result.support.sum() == 4 * 2 and np.all(result.multipliers == 0)
    # the least-distance solver itself returns the origin when every h is <= 0
    G, h, _ = rows(X, alpha, relaxed=np.ones(4, bool))
    np.testing.assert_array_equal(least_distance(G, h), 0.0)


def test_result_is_immutable_and_consistent():
    result = att_svm(FIG3, [1, 1, 1])
    with pytest.raises(AttributeError):
        result.p = np.zeros(2)
    with pytest.raises(ValueError):
        result.p[0] = 1.0
    assert result.norm == pytest.approx(np.linalg.norm(result.p))
    # the margin is the geometric one, computed from the tokens: the smallest distance of a
    # constraint (x_{i alpha_i} - x_it)^T p / ||p|| (1 / ||p|| only if some constraint is tight)
    X = np.asarray(FIG3)
    gaps = [(X[i, 1] - X[i, t]) @ result.p for i in range(len(X)) for t in range(X.shape[1]) if t != 1]
    assert result.margin == pytest.approx(min(gaps) / np.linalg.norm(result.p), rel=1e-9)
    assert np.linalg.norm(result.direction) == pytest.approx(1.0)
    assert result.alpha.dtype.kind == "i"


def test_cvxpy_problem_is_the_textbook_formulation():
    problem, p = att_svm_problem(FIG3, [1, 1, 1])
    assert p.shape == (2,)
    assert len(problem.constraints) == 1
    problem.solve(solver="CLARABEL")
    np.testing.assert_allclose(p.value, [4 / 3, 1 / 3], atol=1e-6)
    assert problem.value == pytest.approx(17 / 9, abs=1e-6)  # ||p||^2


def test_is_feasible():
    assert is_feasible(FIG3, [1, 1, 1])
    X = np.array([[[1.0, 0.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]]])
    assert not is_feasible(X, [0, 1])  # p_1 >= 1 and -p_1 >= 1
    X = np.array([[[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]]])
    assert not is_feasible(X, [1])  # the middle token lies between the others
    assert is_feasible(X, [2]) and is_feasible(X, [0])


# ----------------------------------------------------------------------------------------------
# least_distance directly
# ----------------------------------------------------------------------------------------------


def test_least_distance_small_cases():
    np.testing.assert_allclose(least_distance([[1.0, 0.0]], [2.0]), [2.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(least_distance([[1.0, 1.0], [1.0, -1.0]], [0.0, -3.0]), 0.0)
    assert least_distance([[1.0], [-1.0]], [1.0, 1.0]) is None
    assert least_distance([[0.0, 0.0]], [1.0]) is None
    np.testing.assert_allclose(least_distance([[0.0, 0.0]], [0.0]), [0.0, 0.0])
    np.testing.assert_allclose(least_distance(np.zeros((0, 3)), np.zeros(0)), np.zeros(3))


def test_least_distance_degenerate_many_tight_rows():
    """20 constraints all tight at the optimum in 3 dimensions (with repeated rows)."""
    rng = np.random.default_rng(0)
    p_star = np.array([0.5, -1.0, 2.0])
    basis = np.linalg.svd(p_star[None, :])[2][1:]  # orthonormal complement of p_star
    w = rng.normal(size=(10, 2)) @ basis
    G = np.vstack([p_star + w, p_star - w])  # symmetric offsets: p_star is in their cone
    G = np.vstack([G, G[:3]])
    h = G @ p_star
    p = least_distance(G, h)
    np.testing.assert_allclose(p, p_star, atol=1e-12)
    assert np.min(G @ p - h) >= -1e-12


# ----------------------------------------------------------------------------------------------
# Set-SVM
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("seed", range(3))
def test_set_svm_singletons_equal_att_svm(solver, seed):
    rng = np.random.default_rng(200 + seed)
    W = random_W(rng, 4) if seed else None
    X, alpha, _, _ = planted(rng, 12, 5, 4, W)
    sets = np.zeros((12, 5), bool)
    sets[np.arange(12), alpha] = True
    result = set_svm(X, sets, W=W, solver=solver)
    reference = att_svm(X, alpha, W=W, solver=solver)
    np.testing.assert_allclose(result.p, reference.p, atol=1e-7)
    np.testing.assert_array_equal(result.support, reference.support)
    np.testing.assert_allclose(
        np.where(sets, 0.0, result.constraints), np.where(sets, 0.0, reference.constraints)
    )


@pytest.mark.parametrize("solver", SOLVERS)
def test_set_svm_by_hand(solver):
    # tokens 0 and 1 must tie: p1 = p2; then (x0 - x2)^T p = 2 p1 + p2 = 3 p1 >= 1
    X = np.array([[[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]]])
    sets = np.array([[True, True, False]])
    result = set_svm(X, sets, solver=solver)
    np.testing.assert_allclose(result.p, [1 / 3, 1 / 3], atol=1e-7)
    np.testing.assert_array_equal(result.support, [[False, False, True]])
    assert result.margin == pytest.approx(3 / np.sqrt(2), abs=1e-6)


def test_set_svm_ties_up_to_rounding():
    # 0.1 + 0.2 != 0.3 in floating point; the two keys still tie
    X = np.array([[[0.1 + 0.2], [0.3], [0.0]]])
    for solver in SOLVERS:
        result = set_svm(X, [[True, True, False]], solver=solver)
        np.testing.assert_allclose(result.p, [1 / 0.3], rtol=1e-7)


def planted_sets(rng, n, T, d, W=None, gap=0.2):
    """Sets of 1 to 3 tokens that tie along r and beat the other tokens by ``gap``."""
    X = rng.normal(size=(n, T, d))
    r = rng.normal(size=d)
    r /= np.linalg.norm(r)
    sets = np.zeros((n, T), bool)
    for i in range(n):
        inside = rng.choice(T, size=rng.integers(1, min(3, T - 1) + 1), replace=False)
        sets[i, inside] = True
        level = (X[i] @ r).max() + gap
        X[i, inside] += (level - X[i, inside] @ r)[:, None] * r
    p = r if W is None else np.linalg.solve(W, r)
    return X, sets, p / gap


@pytest.mark.parametrize("seed, with_W", [(0, False), (1, True), (2, False), (3, True)])
def test_set_svm_matches_cvxpy_and_ties_the_set(seed, with_W):
    rng = np.random.default_rng(300 + seed)
    d = 6
    W = random_W(rng, d) if with_W else None
    X, sets, p_feasible = planted_sets(rng, 10, 6, d, W)
    fast = set_svm(X, sets, W=W)
    slow = set_svm(X, sets, W=W, solver="cvxpy")
    np.testing.assert_allclose(fast.p, slow.p, atol=1e-6)
    assert fast.norm <= np.linalg.norm(p_feasible) + 1e-9
    K = X if W is None else X @ W
    for result in (fast, slow):
        scores = K @ result.p
        for i in range(len(X)):
            inside, outside = scores[i, sets[i]], scores[i, ~sets[i]]
            assert np.ptp(inside) <= 1e-6  # equalities
            assert inside.min() - outside.max() >= 1 - 1e-6  # inequalities
    # the printed cvxpy problem gives the same point
    problem, p = set_svm_problem(X, sets, W=W)
    problem.solve(solver="CLARABEL")
    np.testing.assert_allclose(p.value, fast.p, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# v-SVM
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_v_svm_matches_cvxpy(seed):
    rng = np.random.default_rng(400 + seed)
    n, d = 30, 5
    R = rng.normal(size=(n, d))
    v_true = rng.normal(size=d)
    Y = np.sign(R @ v_true)
    R += 0.2 * Y[:, None] * v_true / np.linalg.norm(v_true)  # a margin along v_true
    fast, slow = v_svm(R, Y), v_svm(R, Y, solver="cvxpy")
    np.testing.assert_allclose(fast.v, slow.v, atol=1e-6)
    G = Y[:, None] * R
    for result in (fast, slow):
        assert result.margins.min() >= 1 - 1e-7
        np.testing.assert_allclose(G.T @ result.multipliers, result.v, atol=1e-6)
        assert np.all(result.multipliers[~result.support] == 0)
    scale = np.maximum(1.0, np.linalg.norm(R, axis=1) * np.linalg.norm(fast.v))
    np.testing.assert_array_equal(fast.support, np.abs(G @ fast.v - 1) <= 1e-8 * scale)
    assert fast.support.sum() >= 1


# ----------------------------------------------------------------------------------------------
# W-SVM
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_w_svm_closed_form_generic_and_cvxpy(seed):
    rng = np.random.default_rng(500 + seed)
    n, T, d = 8, 4, 3
    X, alpha, _, _ = planted(rng, n, T, d)
    z = rng.normal(size=d)
    closed = w_svm(X, alpha, queries=z)
    generic = w_svm(X, alpha, queries=np.tile(z, (n, 1)))  # the d^2-variable LDP
    slow = w_svm(X, alpha, queries=z, solver="cvxpy")
    assert np.linalg.norm(closed.W - generic.W) < 1e-6
    assert np.linalg.norm(closed.W - slow.W) < 1e-6
    assert closed.norm == pytest.approx(np.linalg.norm(closed.W))
    # the closed form: W = u p^T / ||p||^2 with u the ATT-SVM solution on raw tokens
    u = att_svm(X, alpha).p
    np.testing.assert_allclose(closed.W, np.outer(u, z) / (z @ z), atol=1e-12)
    assert closed.norm == pytest.approx(np.linalg.norm(u) / np.linalg.norm(z))
    np.testing.assert_array_equal(closed.support, generic.support)


@pytest.mark.parametrize("seed", range(3))
def test_w_svm_per_sequence_queries(seed):
    rng = np.random.default_rng(600 + seed)
    n, T, d = 10, 4, 3
    X, alpha, _, _ = planted(rng, n, T, d)
    Z = rng.normal(size=(n, d))
    Z *= np.sign(Z @ np.ones(d))[:, None]  # keep a common W feasible: W = r 1^T works
    fast = w_svm(X, alpha, queries=Z)
    slow = w_svm(X, alpha, queries=Z, solver="cvxpy")
    assert np.linalg.norm(fast.W - slow.W) < 1e-6
    for i in range(n):
        for t in range(T):
            value = (X[i, alpha[i]] - X[i, t]) @ fast.W @ Z[i]
            if t == alpha[i]:
                assert fast.constraints[i, t] == np.inf and not fast.support[i, t]
            else:
                assert value >= 1 - 1e-8
                assert fast.constraints[i, t] == pytest.approx(value)
    assert fast.margin == pytest.approx(1 / fast.norm)


# ----------------------------------------------------------------------------------------------
# infeasible problems and bad inputs
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("solver", SOLVERS)
def test_infeasible_convex_hull_names_sequence(solver):
    rng = np.random.default_rng(7)
    X, alpha, _, _ = planted(rng, 4, 3, 2)
    X[2] = [[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]]
    alpha[2] = 1
    with pytest.raises(ValueError, match=r"^alpha: .*sequence 2 token 1 .*convex hull"):
        att_svm(X, alpha, solver=solver)


@pytest.mark.parametrize("solver", SOLVERS)
def test_infeasible_duplicate_token_names_it(solver):
    X = np.array([[[1.0, 1.0], [0.0, 0.0]], [[0.5, 2.0], [-1.0, 3.0]], [[0.0, 0.0], [0.0, 0.0]]])
    with pytest.raises(ValueError, match=r"^alpha: .*sequence 2 token 0 .*token 1 .*same key"):
        att_svm(X, [0, 0, 0], solver=solver)


def test_infeasible_through_W_names_sequence():
    # tokens differ only in the coordinate that W = diag(1, 1, 0) removes
    X = np.array([[[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], [[0.0, 0.0, 5.0], [0.0, 0.0, 0.0]]])
    with pytest.raises(ValueError, match=r"^alpha: .*sequence 1 token 0 .*same key"):
        att_svm(X, [0, 0], W=W3)


@pytest.mark.parametrize("solver", SOLVERS)
def test_jointly_infeasible_names_group(solver):
    # sequences 0 and 2 need p_2 >= 1; sequence 1 needs p_1 >= 1 and sequence 3 needs p_1 <= -1
    X = np.array(
        [
            [[0.0, 1.0], [0.0, 0.0]],
            [[1.0, 0.0], [0.0, 0.0]],
            [[0.3, 2.0], [0.0, -1.0]],
            [[-1.0, 0.0], [0.0, 0.0]],
        ]
    )
    with pytest.raises(ValueError, match=r"^alpha: .*on its own.*sequences \[1, 3\] cannot"):
        att_svm(X, [0, 0, 0, 0], solver=solver)


@pytest.mark.parametrize("seed", range(4))
def test_reported_group_is_a_minimal_conflict(seed):
    rng = np.random.default_rng(800 + seed)
    X, alpha, _, _ = planted(rng, 8, 3, 2, gap=0.5)
    X[5] = -X[1]  # the mirror image of sequence 1 needs the opposite direction
    alpha[5] = alpha[1]
    with pytest.raises(ValueError, match="on its own") as error:
        att_svm(X, alpha)
    group = [int(i) for i in str(error.value).split("sequences [")[1].split("]")[0].split(",")]
    assert not is_feasible(X[group], alpha[group])
    for drop in group:
        rest = [i for i in group if i != drop]
        assert is_feasible(X[rest], alpha[rest])


def test_relaxed_sequence_can_conflict():
    # sequence 0 needs p_1 >= 1, relaxed sequence 1 needs -p_1 >= 0, sequence 2 needs p_2 >= 1
    X = np.array([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [0.0, 0.0]]])
    relaxed = np.array([False, True, False])
    assert is_feasible(X, [0, 0, 0]) is False
    with pytest.raises(ValueError, match=r"sequences \[0, 1\] \(relaxed among them: \[1\]\)"):
        att_svm(X, [0, 0, 0], relaxed=relaxed)
    relaxed_ok = att_svm(X, [0, 1, 0], relaxed=relaxed)  # now sequence 1 asks p_1 >= 0
    np.testing.assert_allclose(relaxed_ok.p, [1.0, 1.0], atol=1e-12)


def test_cvxpy_false_infeasibility_is_a_runtime_error():
    # margin 1e-6 in one sequence: the fast solver finds p = (1e6, 1), Clarabel gives up
    X = np.array([[[1e-6, 0.0], [0.0, 0.0]], [[0.0, 1.0], [0.0, 0.0]]])
    np.testing.assert_allclose(att_svm(X, [0, 0]).p, [1e6, 1.0], rtol=1e-12)
    try:
        slow = att_svm(X, [0, 0], solver="cvxpy")
    except RuntimeError as error:
        assert "use solver='fast'" in str(error)
    else:  # a future Clarabel may cope; then it must agree
        np.testing.assert_allclose(slow.p, [1e6, 1.0], rtol=1e-3)


def test_v_svm_infeasible():
    R = np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match=r"^R, Y: .*not linearly separable.*row 1 of R is zero"):
        v_svm(R, [1, 1, 1])
    R = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match=r"^R, Y: .*samples \[0, 2\]"):
        v_svm(R, [1, 1, -1], solver="cvxpy")


def test_set_svm_infeasible():
    # tokens 0 and 1 tie only if p_1 = p_2, and then token 2 = (1, 1) / 2 ties with them too
    X = np.array([[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]])
    with pytest.raises(ValueError, match=r"^sets: .*sequence 0 .*\[0, 1\]"):
        set_svm(X, [[True, True, False]])


def test_w_svm_infeasible():
    X = np.array([[[1.0, 0.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]]])
    with pytest.raises(ValueError, match=r"^alpha: W-SVM .*sequence 1 is zero"):
        w_svm(X, [0, 0], queries=[[1.0, 0.0], [0.0, 0.0]])
    X3 = np.array([[[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]]])
    with pytest.raises(ValueError, match=r"^alpha: W-SVM .*sequence 0 token 1 .*convex hull"):
        w_svm(X3, [1], queries=[1.0, 0.0])


EMPTY_SET = [[False, False], [True, False], [False, True]]
FULL_SET = [[True, True], [True, False], [False, True]]
BAD_INPUTS = {  # id: (call, error type, message pattern naming the argument)
    "X not 3-D": (lambda: att_svm(np.zeros((2, 3)), [0, 0]), ValueError, "^X: expected shape"),
    "X NaN": (lambda: att_svm(FIG3 * np.nan, [1, 1, 1]), ValueError, "^X: non-finite"),
    "alpha out of range": (lambda: att_svm(FIG3, [1, 2, 1]), ValueError, "^alpha: index 2 .*range"),
    "alpha fractional": (lambda: att_svm(FIG3, [1.0, 0.5, 1.0]), TypeError, "^alpha: expected int"),
    "alpha short": (lambda: att_svm(FIG3, [1, 1]), ValueError, "^alpha: expected one index"),
    "unknown solver": (
        lambda: att_svm(FIG3, [1, 1, 1], solver="mosek"), ValueError, "^solver: expected one of"
    ),
    "relaxed not bool": (
        lambda: att_svm(FIG3, [1, 1, 1], relaxed=[0, 0, 1]), TypeError, "^relaxed: expected a bool"
    ),
    "relaxed shape": (
        lambda: att_svm(FIG3, [1, 1, 1], relaxed=np.ones(2, bool)), ValueError, "^relaxed: expected"
    ),
    "W shape": (lambda: att_svm(FIG3, [1, 1, 1], W=np.eye(3)), ValueError, "^W: expected shape"),
    "tol negative": (lambda: att_svm(FIG3, [1, 1, 1], tol=-1.0), ValueError, "^tol: must be"),
    "labels not +-1": (lambda: v_svm(FIG3[:, 1], [1, 0, 1]), ValueError, "^Y: labels must be -1"),
    "R not 2-D": (lambda: v_svm([1.0, 2.0], [1]), ValueError, "^R: expected shape"),
    "set empty": (lambda: set_svm(FIG3, EMPTY_SET), ValueError, "^sets: .*sequence 0 is empty"),
    "set full": (lambda: set_svm(FIG3, FULL_SET), ValueError, "^sets: .*sequence 0 holds every"),
    "sets not bool": (
        lambda: set_svm(FIG3, [[1, 0], [1, 0], [0, 1]]), TypeError, "^sets: expected a boolean"
    ),
    "queries shape": (lambda: w_svm(FIG3, [1, 1, 1], queries=np.ones((2, 2))), ValueError, "^queries: expected shape"),
    "queries zero": (lambda: w_svm(FIG3, [1, 1, 1], queries=np.zeros(2)), ValueError, "^queries: the query vector is"),
    "G not 2-D": (lambda: least_distance([1.0, 2.0], [1.0]), ValueError, "^G: expected shape"),
    "h length": (lambda: least_distance([[1.0, 2.0]], [1.0, 2.0]), ValueError, "^h: expected"),
}


@pytest.mark.parametrize("call, error, message", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_inputs_name_the_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ----------------------------------------------------------------------------------------------
# property: the fast solution is feasible and no longer than a planted feasible point
# ----------------------------------------------------------------------------------------------


@st.composite
def planted_instances(draw):
    n = draw(st.integers(1, 8))
    T = draw(st.integers(2, 5))
    d = draw(st.integers(1, 4))
    X = draw(hnp.arrays(np.float64, (n, T, d), elements=st.floats(-3, 3, width=32)))
    alpha = np.array(draw(st.lists(st.integers(0, T - 1), min_size=n, max_size=n)))
    r = draw(hnp.arrays(np.float64, d, elements=st.floats(-1, 1, width=32)))
    if np.linalg.norm(r) < 1e-2:
        r = np.ones(d)
    r = r / np.linalg.norm(r)
    gap = draw(st.floats(0.01, 2.0))
    relaxed = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    for i in range(n):  # push the selected token ahead along r by at least ``gap``
        lead = max((X[i, t] - X[i, alpha[i]]) @ r for t in range(T) if t != alpha[i])
        X[i, alpha[i]] += (max(lead, 0.0) + gap) * r
    return X, alpha, relaxed, r


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planted_instances())
def test_property_feasible_and_not_longer_than_planted(instance):
    X, alpha, relaxed, r = instance
    G, h, _ = rows(X, alpha, relaxed=relaxed)
    binding = G[h > 0] @ r
    p_planted = r / binding.min() if len(binding) else np.zeros_like(r)  # feasible by construction
    assert np.all(G @ p_planted - h >= -1e-9)
    result = att_svm(X, alpha, relaxed=relaxed)
    scale = max(1.0, np.linalg.norm(result.p) * np.abs(G).max())
    assert np.all(G @ result.p - h >= -1e-9 * scale)
    assert result.norm <= np.linalg.norm(p_planted) * (1 + 1e-9) + 1e-12
