"""Regression tests for bugs that a mutation run showed the suite could not see (issue 11, item 6).

Each test names the bug it catches. References are independent of the library: geometry worked
out by hand, and gradients evaluated in arbitrary precision (mpmath) straight from the formula.
"""
from __future__ import annotations

import mpmath
import numpy as np
import pytest

import maxmargin as mm

# ----------------------------------------------------------------------------------------------
# Support detection: the tolerance must be relative to the size of each constraint
# ----------------------------------------------------------------------------------------------
#
# A constraint g^T p = b is computed with a rounding error of order eps * ||g|| ||p||. When a
# support token's key difference is long but nearly orthogonal to p (||g|| ||p|| ~ 1e9), that
# error is ~1e-7, far above the default tol = 1e-8: an absolute test |g^T p - b| <= tol misses
# the support token, the documented relative test |g^T p - b| <= tol * max(1, ||g|| ||p||)
# finds it. The problems are scale invariant, so the same must hold on data rescaled by 1e-6
# and 1e6 (the solution scales by 1/c, the support does not change).

LONG = 1e9  # length of the key differences that are orthogonal to the solution
SCALES = [1e-6, 1.0, 1e6]


def rotation(seed: int) -> np.ndarray:
    """A random 3 x 3 rotation (QR of a Gaussian matrix, signs fixed)."""
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def long_tokens(seed: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """One sequence: selected token e1, then 0, -e1, +-LONG e2, in rotated coordinates.

    By hand: the constraints are p1 >= 1, 2 p1 >= 1, p1 -+ LONG p2 >= 1, so p = e1 (rotated), and
    tokens 1, 3 and 4 are tight (support) while token 2 has value 2. Returns (X (1, 5, 3), p).
    """
    Q = rotation(seed)
    X = np.array([[[1.0, 0, 0], [0, 0, 0], [-1.0, 0, 0], [0, LONG, 0], [0, -LONG, 0]]]) @ Q.T
    return scale * X, Q[:, 0] / scale


SUPPORT = [False, True, False, True, True]


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("seed", range(4))
def test_att_svm_finds_long_support_tokens_at_every_scale(seed, scale):
    """Bug caught: the support tolerance of ATT-SVM made absolute (long tight rows are missed)."""
    X, p = long_tokens(seed, scale)
    result = mm.att_svm(X, [0])
    np.testing.assert_allclose(result.p, p, rtol=1e-9, atol=1e-9 / scale)
    np.testing.assert_array_equal(result.support[0], SUPPORT)
    assert mm.support_tokens(X, [0])[0].tolist() == SUPPORT


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("seed", range(4))
def test_v_svm_finds_long_support_vectors_at_every_scale(seed, scale):
    """Bug caught: the v-SVM support tolerance made absolute.

    By hand: rows r = e1, e1 +- LONG e2, 2 e1 with labels +1 give v = e1 and margins (1, 1, 1, 2).
    """
    Q = rotation(10 + seed)
    R = scale * np.array([[1.0, 0, 0], [1.0, LONG, 0], [1.0, -LONG, 0], [2.0, 0, 0]]) @ Q.T
    result = mm.v_svm(R, np.ones(4))
    np.testing.assert_allclose(result.v, Q[:, 0] / scale, rtol=1e-9, atol=1e-9 / scale)
    assert result.support.tolist() == [True, True, True, False]


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("per_sequence_query", [False, True])
def test_w_svm_finds_long_support_tokens_at_every_scale(scale, per_sequence_query):
    """Bug caught: the W-SVM support tolerance made absolute (closed form and generic solver).

    With one query z the W-SVM is W = u z^T / ||z||^2 with u the ATT-SVM on the raw tokens, so
    its support is the ATT-SVM's.
    """
    X, _ = long_tokens(3, scale)
    z = np.array([0.3, -1.2, 0.5])
    result = mm.w_svm(X, [0], queries=z[None] if per_sequence_query else z)
    assert result.support[0].tolist() == SUPPORT


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("seed", range(3))
def test_set_svm_finds_long_support_tokens_at_every_scale(seed, scale):
    """Bug caught: the set-SVM support tolerance made absolute.

    By hand: the set {e1, e1 + e3} forces p3 = 0; the other tokens are those of
    :func:`long_tokens`, so p = e1 and the tokens 0, +-LONG e2 are the support.
    """
    Q = rotation(20 + seed)
    X = scale * np.array([[[1.0, 0, 0], [1.0, 0, 1.0], [0, 0, 0], [-1.0, 0, 0],
                           [0, LONG, 0], [0, -LONG, 0]]]) @ Q.T
    sets = np.array([[True, True, False, False, False, False]])
    result = mm.set_svm(X, sets)
    np.testing.assert_allclose(result.p, Q[:, 0] / scale, rtol=1e-9, atol=1e-9 / scale)
    assert result.support[0].tolist() == [False, False, True, False, True, True]


def test_locally_optimal_verdict_uses_the_long_support_tokens():
    """Bug caught (downstream of the absolute tolerance): a missed support token with a higher
    score than the selected token hides a violation of local optimality.

    Token 3 (at +LONG e2) is a support token of the selection {0} and scores above token 0, so
    {0} is not locally optimal.
    """
    X, _ = long_tokens(1, 1.0)
    Y = np.ones(1)
    w = np.linalg.lstsq(X[0, [0, 1, 3]], [1.0, 0.0, 2.0], rcond=None)[0]  # scores 1, 0, ., 2
    gamma = mm.scores(X, Y, w)[0]
    assert gamma[3] > gamma[0]
    selection = mm.check_selection(X, Y, w, [0])
    assert not selection.locally_optimal
    assert (0, 3) in selection.violations


# ----------------------------------------------------------------------------------------------
# Normalized steps: a gradient below 1e-150 must still give a step of length lr
# ----------------------------------------------------------------------------------------------
#
# Along a max-margin direction the gradient decays like exp(-||p||). At ||p|| = 400 it is about
# 1e-174, whose squares underflow: a norm computed naively is 0, and with eps = 1e-300 the step
# g / (0 + eps) is ~1e126 instead of a unit vector. The reference is the gradient direction in
# arbitrary precision; the expected step is -lr g / (||g|| + eps) = -lr g / ||g|| to 1e-130.

TINY_X = np.array([[[1.0, 0.5], [0.0, 0.0], [-0.5, 1.0]]])  # one sequence, T = 3, d = 2
TINY_Y = np.ones(1)
TINY_V = np.array([1.0, 0.2])                               # scores 1.1, 0, -0.3
TINY_P = np.array([400.0, 0.0])                            # logits 400, 0, -200


def mp_gradient(X, Y, v, p, W=None, loss="logistic"):
    """grad_p of the risk, in 60 + digits, straight from the formula
    (1/n) sum_i l'(z_i) sum_t s_it (gamma_it - z_i) W^T x_it."""
    derivative = {"logistic": lambda z: -1 / (1 + mpmath.exp(z)), "exponential": lambda z: -mpmath.exp(-z),
                  "correlation": lambda z: mpmath.mpf(-1)}[loss]
    W = np.eye(X.shape[2]) if W is None else W
    K = X @ W
    with mpmath.workdps(400):
        grad = [mpmath.mpf(0)] * X.shape[2]
        for Xi, Ki, yi in zip(X, K, Y):
            logit = [mpmath.fsum(mpmath.mpf(a) * mpmath.mpf(b) for a, b in zip(k, p)) for k in Ki]
            e = [mpmath.exp(l - max(logit)) for l in logit]
            s = [x / mpmath.fsum(e) for x in e]
            gamma = [mpmath.mpf(yi) * mpmath.fsum(mpmath.mpf(a) * mpmath.mpf(b) for a, b in zip(x, v)) for x in Xi]
            z = mpmath.fsum(a * b for a, b in zip(s, gamma))
            weight = derivative(z) / len(Y)
            for j in range(X.shape[2]):
                grad[j] += weight * mpmath.fsum(st * (g - z) * mpmath.mpf(k[j]) for st, g, k in zip(s, gamma, Ki))
        norm = mpmath.sqrt(mpmath.fsum(g * g for g in grad))
        return float(norm), np.array([float(g / norm) for g in grad])


def test_the_reference_gradient_is_below_1e_150():
    norm, _ = mp_gradient(TINY_X, TINY_Y, TINY_V, TINY_P)
    assert 0 < norm < 1e-150
    assert norm**2 == 0.0  # its square underflows in float64: the naive norm is 0


@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
def test_gd_normalized_step_of_a_tiny_gradient_has_length_lr(loss):
    """Bug caught: the normalized step's underflow guard removed (a 1e-174 gradient with
    eps = 1e-300 then gives a step of about 1e126)."""
    _, unit = mp_gradient(TINY_X, TINY_Y, TINY_V, TINY_P, loss=loss)
    traj = mm.gd(TINY_X, TINY_Y, TINY_V, TINY_P, 1, 0.1, loss=loss, normalized=True, eps=1e-300)
    np.testing.assert_allclose(traj.p[1, 0] - TINY_P, -0.1 * unit, rtol=0, atol=1e-12)


def test_gd_stack_normalized_step_of_a_tiny_gradient_has_length_lr():
    """Bug caught: the underflow guard removed, in the stacked (many-instance) engine; the second
    instance has an ordinary gradient, so each run must be normalized by its own norm."""
    X = np.stack([TINY_X, TINY_X])
    P0 = np.stack([TINY_P[None], np.array([[0.3, -0.2]])])
    traj = mm.gd_stack(X, np.ones((2, 1)), TINY_V, P0, 1, 0.1, normalized=True, eps=1e-300)
    for m in range(2):
        _, unit = mp_gradient(TINY_X, TINY_Y, TINY_V, P0[m, 0])
        np.testing.assert_allclose(traj.p[1, m, 0] - P0[m, 0], -0.1 * unit, rtol=0, atol=1e-12)


def test_gd_joint_normalized_p_step_of_a_tiny_gradient_has_length_lr():
    """Bug caught: the underflow guard removed, in joint training (eps_p = 1e-300)."""
    _, unit = mp_gradient(TINY_X, TINY_Y, TINY_V, TINY_P)
    traj = mm.gd_joint(TINY_X, TINY_Y, TINY_V, TINY_P, 1, 0.1, normalized=True, eps_v=1e-12, eps_p=1e-300)
    np.testing.assert_allclose(traj.p[1, 0] - TINY_P, -0.1 * unit, rtol=0, atol=1e-12)
    assert np.linalg.norm(traj.v[1, 0] - TINY_V) == pytest.approx(0.1, rel=1e-9)


def test_gd_W_normalized_step_of_a_tiny_gradient_has_length_lr():
    """Bug caught: the underflow guard removed, in GD on W. With one query z the W-gradient is
    g z^T (g the gradient in u = W z), so the normalized step is -lr (g / ||g||)(z / ||z||)^T."""
    z = np.array([0.6, 0.8])
    W0 = np.outer(TINY_P, z)  # W0 z = TINY_P
    _, unit = mp_gradient(TINY_X, TINY_Y, TINY_V, TINY_P)
    traj = mm.gd_W(TINY_X, TINY_Y, TINY_V, W0, z, 1, 0.1, normalized=True, eps=1e-300)
    np.testing.assert_allclose(traj.W[1, 0] - W0, -0.1 * np.outer(unit, z), rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# Bugs of the fast least-distance solver found while writing the mutation check (issue 11),
# fixed in issue 13: an exact solve on the active rows with a KKT certificate, and feasibility
# decided in units of the data.
# ----------------------------------------------------------------------------------------------


def test_att_svm_is_accurate_for_a_solution_of_norm_1e7():
    """By hand: the rows (1e-7, +-1) give p1 1e-7 +- p2 >= 1, so p = (1e7, 0), well inside the
    documented range ||p|| < 1 / tol = 1e10. Before issue 13 the fast solver returned
    (1.0235e7, -0.0057)."""
    X = np.array([[[1e-7, 1.0], [0.0, 0.0]], [[1e-7, -1.0], [0.0, 0.0]]])
    result = mm.att_svm(X, [0, 0])
    np.testing.assert_allclose(result.p, [1e7, 0.0], rtol=1e-8, atol=1e-6)


def test_badly_scaled_infeasible_att_svm_is_reported_infeasible():
    """Seven sequences of two tokens (g_j, 0) whose rows g_j span 1e-9 to 3e7: the LP
    G p >= 1 is infeasible (HiGHS; cvxpy/Clarabel names the group [2, 4, 5]), yet before issue 13
    the fast solver returned p = (-inf, inf) with margin 0 and ``is_feasible`` said True."""
    from scipy.optimize import linprog

    G = np.array([[2e-2, -6e-1], [9.0, 2.0], [2e-9, 4e-9], [-2.0, -10.0], [4e-5, -3e-5],
                  [-3e7, 1e7], [1.0, -0.8]])
    assert linprog(np.zeros(2), A_ub=-G, b_ub=-np.ones(7), bounds=[(None, None)] * 2,
                   method="highs").status == 2  # infeasible
    X = np.stack([G, np.zeros_like(G)], axis=1)
    with np.errstate(all="ignore"):
        assert not mm.is_feasible(X, np.zeros(7, int))
        with pytest.raises(ValueError, match="infeasible"):
            mm.att_svm(X, np.zeros(7, int))
