"""Property tests (hypothesis) of the SVM solvers on extreme data (issue 13).

* Scale covariance: X -> c X gives p -> p / c for ATT-SVM, v-SVM and W-SVM, for c from 1e-150
  to 1e150; the reference is cvxpy/Clarabel on the unscaled data, on a formulation written here.
  The locally-optimal selections do not change with the scale.
* KKT certificate on random ill-conditioned instances: every returned ATT-SVM passes the
  certificate stated in ``maxmargin._least_distance`` (relative tolerance 1e-9), recomputed here
  from the rows, or the call raises ``mm.IllConditionedError``; never an uncertified return.

Examples are few (the solves are cheap, cvxpy is not), derandomized for reproducible CI runs.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import maxmargin as mm

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True)
SCALES = st.integers(-150, 150).map(lambda k: 10.0 ** k)
CERTIFICATE_TOL = 1e-9  # the tolerance stated in maxmargin._least_distance


def clarabel(G: np.ndarray) -> np.ndarray:
    """min ||x||^2 s.t. G x >= 1, by cvxpy/Clarabel."""
    import cvxpy as cp

    x = cp.Variable(G.shape[1])
    problem = cp.Problem(cp.Minimize(cp.sum_squares(x)), [G @ x >= 1])
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    assert problem.status == cp.OPTIMAL
    return np.asarray(x.value)


def planted(seed: int, n: int = 3, T: int = 4, d: int = 3):
    """Random tokens whose token 0 leads along a random direction (so ATT-SVM is feasible)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, T, d))
    r = rng.normal(size=d)
    r /= np.linalg.norm(r)
    lead = (X[:, 1:] @ r).max(axis=1) - X[:, 0] @ r
    X[:, 0] += (np.maximum(lead, 0.0) + 0.3)[:, None] * r
    return X


def att_rows(X: np.ndarray) -> np.ndarray:
    """Rows x_i0 - x_it for t >= 1 (selection alpha = 0), by loops."""
    return np.array([X[i, 0] - X[i, t] for i in range(X.shape[0]) for t in range(1, X.shape[1])])


@lru_cache(maxsize=None)
def att_reference(seed: int) -> np.ndarray:
    return clarabel(att_rows(planted(seed)))


@given(seed=st.integers(0, 3), c=SCALES)
@SETTINGS
def test_att_svm_is_scale_covariant(seed, c):
    """Bug caught: feasibility or convergence tolerances absolute (the solution then depends on
    the units of X), or the scale-back done by c instead of 1 / c."""
    X = planted(seed)
    result = mm.att_svm(X * c, np.zeros(3, int))
    np.testing.assert_allclose(result.p * c, att_reference(seed), rtol=1e-6,
                               atol=1e-8 * np.linalg.norm(att_reference(seed)))
    assert result.margin / c == pytest.approx(1 / np.linalg.norm(att_reference(seed)), rel=1e-6)


@lru_cache(maxsize=None)
def v_data(seed: int):
    rng = np.random.default_rng(100 + seed)
    R = rng.normal(size=(8, 3))
    w = rng.normal(size=3)
    Y = np.sign(R @ w)
    R += 0.3 * Y[:, None] * w / np.linalg.norm(w)  # separable through the origin
    return R, Y, clarabel(Y[:, None] * R)


@given(seed=st.integers(0, 3), c=SCALES)
@SETTINGS
def test_v_svm_is_scale_covariant(seed, c):
    """Bug caught: v_svm(R * 1e-12, Y) called infeasible (an absolute feasibility tolerance)."""
    R, Y, reference = v_data(seed)
    result = mm.v_svm(R * c, Y)
    np.testing.assert_allclose(result.v * c, reference, rtol=1e-6,
                               atol=1e-8 * np.linalg.norm(reference))


@lru_cache(maxsize=None)
def w_data(seed: int):
    """Tokens, one query per sequence, and the W-SVM by Clarabel on vec(W) (row-major)."""
    X = planted(200 + seed, n=3, T=3, d=3)  # 6 constraints on 9 entries: feasible
    Z = np.random.default_rng(seed).normal(size=(3, 3))
    rows = np.array([np.outer(X[i, 0] - X[i, t], Z[i]).ravel() for i in range(3)
                     for t in range(1, 3)])
    return X, Z, clarabel(rows).reshape(3, 3)


@given(seed=st.integers(0, 3), c=SCALES)
@SETTINGS
def test_w_svm_is_scale_covariant(seed, c):
    """Bug caught: w_svm(X * 1e-11, ...) called infeasible; W^mm must scale like 1 / c."""
    X, Z, reference = w_data(seed)
    result = mm.w_svm(X * c, np.zeros(3, int), queries=Z)
    np.testing.assert_allclose(result.W * c, reference, rtol=1e-6,
                               atol=1e-8 * np.linalg.norm(reference))


WIDE_SCALES = st.integers(-300, 300).map(lambda k: 10.0 ** k)


@lru_cache(maxsize=None)
def shared_query_data(seed: int):
    """Tokens, one shared query p, and the W-SVM u p^T / ||p||^2 with u the ATT-SVM of the raw
    tokens by Clarabel (the constraints see W only through W p)."""
    X = planted(300 + seed)
    p = np.random.default_rng(seed).normal(size=3)
    return X, p, np.outer(clarabel(att_rows(X)), p) / (p @ p)


@given(seed=st.integers(0, 3), c=WIDE_SCALES)
@SETTINGS
def test_w_svm_with_a_shared_query_is_scale_covariant(seed, c):
    """Bug caught (issue 22, cause 2): the shared-query closed form divided by p @ p, which
    overflows for p * 1e200 (W came out 0) and underflows for p * 1e-200 (W inf), and lost
    accuracy without refusal at p * 1e-160. W^mm must scale like 1 / c."""
    X, p, reference = shared_query_data(seed)
    result = mm.w_svm(X, np.zeros(3, int), queries=p * c)
    np.testing.assert_allclose(result.W * c, reference, rtol=1e-6,
                               atol=1e-8 * np.linalg.norm(reference))
    assert np.all(np.isfinite(result.constraints[:, 1:]))


@given(seed=st.integers(0, 3), c=WIDE_SCALES)
@SETTINGS
def test_w_svm_with_per_sequence_queries_is_scale_covariant(seed, c):
    """Bug caught: queries scaled by c solved in absolute units (W^mm must scale like 1 / c)."""
    X, Z, reference = w_data(seed)
    result = mm.w_svm(X, np.zeros(3, int), queries=Z * c)
    np.testing.assert_allclose(result.W * c, reference, rtol=1e-6,
                               atol=1e-8 * np.linalg.norm(reference))


def test_w_svm_refuses_queries_whose_constraint_values_leave_float64():
    """Bug caught (issue 22, cause 2): queries of scales 1e-200, 1 and 1e200 returned a W whose
    constraint values for the third sequence were NaN (their exact values are about 1e400:
    the multipliers of that sequence vanish, so W z_3 is of order ||W|| ||z_3||, 1e200 * 1e200)."""
    X, Z, _ = w_data(0)
    with pytest.raises(ValueError, match=r"^queries: .* sequence 2 .* exceed float64"):
        mm.w_svm(X, np.zeros(3, int), queries=Z * np.array([1e-200, 1.0, 1e200])[:, None])


@given(c=SCALES)
@settings(max_examples=6, deadline=None, derandomize=True)
def test_locally_optimal_selections_do_not_depend_on_the_scale(c):
    """Bug caught: a rescaled instance loses (or gains) selections through absolute tolerances.
    The selections of the paper's Fig. 1 (b) are tokens 0 and 1 (the paper's figure)."""
    inst = mm.data.fig1(variant="b")
    assert mm.locally_optimal_indices(inst.X * c, inst.Y, inst.v, W=inst.W) == [(0,), (1,)]


# ----------------------------------------------------------------------------------------------
# KKT certificate on ill-conditioned instances
# ----------------------------------------------------------------------------------------------


def ill_conditioned(seed: int, k: int, s: int):
    """m rows g_j = (1 + a_j) p* / ||p*||^2 + 10^-k w_j with w_j orthogonal to p*, times 10^s:
    nearly parallel rows (cond ~ 10^k), all satisfied by p* / 10^s, as a T = 2 ATT-SVM
    (X[j] = [g_j, 0], alpha = 0)."""
    rng = np.random.default_rng(seed)
    d = 3
    p_star = rng.normal(size=d)
    m = int(rng.integers(2, 7))
    w = rng.normal(size=(m, d))
    w -= np.outer(w @ p_star, p_star) / (p_star @ p_star)
    G = (1 + rng.uniform(0, 0.5, size=m))[:, None] * p_star / (p_star @ p_star) + 10.0 ** -k * w
    G *= 10.0 ** s
    return np.stack([G, np.zeros_like(G)], axis=1)


@given(seed=st.integers(0, 10_000), k=st.integers(0, 13), s=st.integers(-100, 100))
@settings(max_examples=40, deadline=None, derandomize=True)
def test_every_returned_att_svm_passes_its_kkt_certificate(seed, k, s):
    """Bug caught: an uncertified return (violated constraints, negative multipliers, or p not
    the combination of the rows that the multipliers say), e.g. p = (0.66, -4.5e6) or inf."""
    X = ill_conditioned(seed, k, s)
    try:
        result = mm.att_svm(X, np.zeros(len(X), int))
    except mm.IllConditionedError as error:
        assert "ill-conditioned" in str(error)
        return
    G, p, mu = X[:, 0], result.p, result.multipliers[:, 1]
    tol = 2 * CERTIFICATE_TOL  # 2: the rows are rebuilt here, in other units
    scale = np.abs(G) @ np.abs(p) + 1.0
    slack = (G @ p - 1.0) / scale
    assert np.all(np.isfinite(p)) and np.all(np.isfinite(mu))
    assert slack.min() >= -tol, "primal feasibility"
    assert mu.min() >= 0, "dual feasibility"
    assert np.all(np.abs(slack[mu > 0]) <= tol), "complementary slackness"
    residual = np.linalg.norm(p - G.T @ mu)
    assert residual <= tol * (np.linalg.norm(p) + np.linalg.norm(np.abs(G).T @ mu)), "stationarity"
