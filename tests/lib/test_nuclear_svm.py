"""The nuclear-norm W-SVM, ``mm.w_svm(..., norm="nuclear")``:

    W^mm_* = argmin ||W||_*  s.t.  (x_{i,alpha_i} - x_it)^T W z_i >= 1.

References written here, sharing no code with the library: the full-size program in cvxpy
solved by SCS and by Clarabel, the variational form ||W||_* = min over K Q^T = W of
(||K||_F^2 + ||Q||_F^2) / 2 minimized by SciPy's SLSQP, and facts proved in the docstrings
(optimality of each SVM in its own norm, the rank-one solution of a shared query, the range of
the reduced solution). The minimizer of the nuclear norm need not be unique, so values are
compared, and W itself only where uniqueness is shown.
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import maxmargin as mm
from maxmargin import _nuclear, svm

TOL = svm.NUCLEAR_TOL  # 1e-6, the certificate's relative tolerance


# ----------------------------------------------------------------------------------------------
# instances and references, independent of the library
# ----------------------------------------------------------------------------------------------


def instance(seed: int, n: int = 3, T: int = 4, d: int = 8):
    """Unit-norm Gaussian tokens and queries; alpha_i = argmax_t Y_i v^T x_it (a vertex of the
    hull of sequence i, so W = sum_i Y_i v w_i^T with w_i^T z_j = delta_ij is feasible)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, T, d))
    X /= np.linalg.norm(X, axis=2, keepdims=True)
    Z = rng.normal(size=(n, d))
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    v, Y = rng.normal(size=d), rng.choice([-1.0, 1.0], size=n)
    alpha = np.argmax(Y[:, None] * (X @ v), axis=1)
    return X, alpha, Z


def rows(X, alpha, Z):
    """(differences, queries) of every constraint by loops, in the order (i, t), t != alpha_i."""
    Z = np.broadcast_to(Z, (X.shape[0], X.shape[2]))
    pairs = [(i, t) for i in range(X.shape[0]) for t in range(X.shape[1]) if t != alpha[i]]
    return (np.array([X[i, alpha[i]] - X[i, t] for i, t in pairs]),
            np.array([Z[i] for i, _ in pairs]))


def nuclear(W) -> float:
    return float(np.linalg.svd(W, compute_uv=False).sum())


def reference(Drows, Zrows, solver: str) -> tuple[float, np.ndarray]:
    """min ||W||_* s.t. d_j^T W z_j >= 1 written out in cvxpy (one scalar constraint per row),
    solved by SCS (eps 1e-10) or Clarabel (tolerances 1e-10): (value, W)."""
    import cvxpy as cp

    d = Drows.shape[1]
    W = cp.Variable((d, d))
    constraints = [Drows[j] @ W @ Zrows[j] >= 1 for j in range(len(Drows))]
    problem = cp.Problem(cp.Minimize(cp.normNuc(W)), constraints)
    if solver == "SCS":
        problem.solve(solver=cp.SCS, eps_abs=1e-10, eps_rel=1e-10, max_iters=200_000)
    else:
        problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    assert problem.status == cp.OPTIMAL, problem.status
    return float(problem.value), np.asarray(W.value)


def values(Drows, Zrows, W):
    return np.einsum("ja,ab,jb->j", Drows, W, Zrows)


@lru_cache(maxsize=None)
def solved(seed: int, n: int = 3, T: int = 4, d: int = 8):
    X, alpha, Z = instance(seed, n, T, d)
    return X, alpha, Z, mm.w_svm(X, alpha, queries=Z, norm="nuclear")


# ----------------------------------------------------------------------------------------------
# 1. a second solver
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("solver", ["fast", "cvxpy"])
def test_value_matches_scs_and_clarabel(seed, solver):
    """Bugs caught: a reduction that loses part of the feasible set (a basis of the wrong span,
    a truncated rank) or an objective other than the nuclear norm (the value is then above the
    reference), a W that does not attain the value it reports, or an infeasible W.
    Tolerances: Clarabel at 1e-10 gives the value to its gap tolerance (measured: 3e-12 to
    3e-11 from the library's), so 1e-8; SCS, a first-order method, at eps 1e-10 is within
    about 1e-9 (measured: 5e-12 to 2e-10), so 1e-7."""
    X, alpha, Z = instance(seed)
    result = mm.w_svm(X, alpha, queries=Z, norm="nuclear", solver=solver)
    Drows, Zrows = rows(X, alpha, Z)
    value = nuclear(result.W)
    assert values(Drows, Zrows, result.W).min() >= 1 - 1e-9, "infeasible W"
    assert result.norm == pytest.approx(value, rel=1e-12)
    assert result.margin == pytest.approx(1 / value, rel=1e-12)
    clarabel, W_clarabel = reference(Drows, Zrows, "CLARABEL")
    assert value == pytest.approx(clarabel, rel=1e-8)
    scs, W_scs = reference(Drows, Zrows, "SCS")
    assert value == pytest.approx(scs, rel=1e-7)
    # W itself: the minimizer is unique on these generic instances, but the references' W of an
    # SDP whose optimum has rank < d is only as accurate as the square root of their gap
    # tolerance (1e-10 -> 1e-5; measured 5e-7 to 4e-6 relative), so 1e-4
    for W_ref in (W_clarabel, W_scs):
        assert np.linalg.norm(result.W - W_ref) <= 1e-4 * np.linalg.norm(W_ref)


def test_shared_query_matches_the_unique_reference_matrix():
    """With one query p the minimizer is unique, u^mm p^T / ||p||^2 with u^mm the ATT-SVM of
    the raw tokens (w_svm's docstring proves it), so W itself is compared, with u^mm from a
    Clarabel QP written here; the SDP's value is compared too (its W, from an interior point
    of a rank-one-degenerate SDP, is only accurate to about 1e-6). Bug caught: the closed form
    reused with the Frobenius multipliers (then the certificate fails), or a wrong lift of u."""
    import cvxpy as cp

    X, alpha, Z = instance(5)
    p = Z[0]
    Drows, Zrows = rows(X, alpha, p)
    u = cp.Variable(X.shape[2])
    qp = cp.Problem(cp.Minimize(cp.sum_squares(u)), [Drows @ u >= 1])
    qp.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    W_ref = np.outer(u.value, p) / (p @ p)
    value, W_sdp = reference(Drows, Zrows, "CLARABEL")
    for solver in ("fast", "cvxpy"):
        result = mm.w_svm(X, alpha, queries=p, norm="nuclear", solver=solver)
        np.testing.assert_allclose(result.W, W_ref, atol=1e-8 * np.linalg.norm(W_ref))
        np.testing.assert_allclose(result.W, W_sdp, atol=1e-5 * np.linalg.norm(W_ref))
        assert result.norm == pytest.approx(value, rel=1e-8)


def test_the_worked_example_by_hand():
    """W_11, W_12, W_22 >= 1: the nuclear SVM is the all-ones matrix (unique: ||W||_* >= tr W
    >= 2, with equality only for a PSD W with unit diagonal and W_12 >= 1), Lambda = I, mu = (1,
    0, 1); the Frobenius SVM is [[1, 1], [0, 1]]. Bug caught: the Frobenius solution returned
    for the nuclear norm, or multipliers of the squared norm (then mu = (2, 0, 2))."""
    X = np.array([[[1.0, 0.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]], [[0.0, 1.0], [0.0, 0.0]]])
    queries = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    for solver in ("fast", "cvxpy"):
        result = mm.w_svm(X, [0, 0, 0], queries=queries, norm="nuclear", solver=solver)
        np.testing.assert_allclose(result.W, np.ones((2, 2)), atol=1e-9)
        np.testing.assert_allclose(result.multipliers, [[0, 1], [0, 0], [0, 1]], atol=1e-9)
        np.testing.assert_allclose(result.dual, np.eye(2), atol=1e-9)
        assert abs(result.duality_gap) <= 1e-9 and result.margin == pytest.approx(0.5)
    frobenius = mm.w_svm(X, [0, 0, 0], queries=queries)
    np.testing.assert_allclose(frobenius.W, [[1, 1], [0, 1]], atol=1e-12)


def test_w_svm_problem_states_the_nuclear_program():
    """Bug caught: ``w_svm_problem(norm="nuclear")`` still minimizing sum_squares (its value
    would be ||W^mm||_F^2 = 3 on the worked example, not 2)."""
    import cvxpy as cp

    X = np.array([[[1.0, 0.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]], [[0.0, 1.0], [0.0, 0.0]]])
    queries = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    program = mm.svm.w_svm_problem(X, [0, 0, 0], queries=queries, norm="nuclear")
    assert program.problem.solve(solver=cp.CLARABEL) == pytest.approx(2.0, rel=1e-7)
    program = mm.svm.w_svm_problem(X, [0, 0, 0], queries=queries)
    assert program.problem.solve(solver=cp.CLARABEL) == pytest.approx(3.0, rel=1e-7)


# ----------------------------------------------------------------------------------------------
# 2. the variational form
# ----------------------------------------------------------------------------------------------


def test_value_matches_the_variational_form():
    """||W||_* = min over K Q^T = W of (||K||_F^2 + ||Q||_F^2) / 2, so the SVM's value is the
    minimum of that objective under the constraints on K Q^T (K, Q of shape (d, d)), found here
    by SLSQP from random starts (no spurious local minima at width d; the best is kept).
    Bug caught: a library value above the optimum (a reduction losing feasible points) or below
    it (an infeasible or relaxed W); the identity for the returned W catches a norm computed
    from the wrong singular values."""
    from scipy.optimize import minimize

    X, alpha, Z, result = solved(1)
    Drows, Zrows = rows(X, alpha, Z)
    d = X.shape[2]

    def split(y):
        return y[: d * d].reshape(d, d), y[d * d:].reshape(d, d)

    def objective(y):
        return 0.5 * float(y @ y)

    def constraint(y):
        K, Q = split(y)
        return values(Drows, Zrows, K @ Q.T) - 1.0

    def jacobian(y):  # d (d_j^T K Q^T z_j) = d_j (Q^T z_j)^T dK + z_j (K^T d_j)^T dQ
        K, Q = split(y)
        dK = np.einsum("ja,jb->jab", Drows, Zrows @ Q).reshape(len(Drows), -1)
        dQ = np.einsum("ja,jb->jab", Zrows, Drows @ K).reshape(len(Drows), -1)
        return np.hstack([dK, dQ])

    rng = np.random.default_rng(0)
    best = np.inf
    for _ in range(3):
        run = minimize(objective, rng.normal(size=2 * d * d), jac=lambda y: y, method="SLSQP",
                       constraints=[{"type": "ineq", "fun": constraint, "jac": jacobian}],
                       options={"ftol": 1e-14, "maxiter": 2000})
        if constraint(run.x).min() >= -1e-9:
            best = min(best, run.fun)
    assert best == pytest.approx(nuclear(result.W), rel=1e-5)
    U, S, Vt = np.linalg.svd(result.W)
    K, Q = U * np.sqrt(S), Vt.T * np.sqrt(S)
    np.testing.assert_allclose(K @ Q.T, result.W, atol=1e-13)
    assert 0.5 * (np.sum(K ** 2) + np.sum(Q ** 2)) == pytest.approx(result.norm, rel=1e-12)


# ----------------------------------------------------------------------------------------------
# 3. the certificate refuses what is not optimal
# ----------------------------------------------------------------------------------------------


def certificate_inputs(seed: int = 0):
    X, alpha, Z, result = solved(seed)
    Drows, Zrows = rows(X, alpha, Z)
    others = np.arange(X.shape[1])[None, :] != alpha[:, None]
    return Drows, Zrows, np.array(result.W), np.array(result.multipliers[others])


def test_certificate_accepts_the_solution():
    """The control of the tests below: the returned pair passes (else they prove nothing).
    Bug caught: multipliers returned in another order than the rows, or scaled."""
    Drows, Zrows, W, mu = certificate_inputs()
    assert max(_nuclear._nuclear_kkt(Drows, Zrows, W, mu).values()) <= TOL


def test_certificate_refuses_a_feasible_suboptimal_w():
    """1.01 W is feasible and 1 % too long; W + a rank-one term outside the span of the queries
    has the same constraint values and a larger nuclear norm. Bug caught: a certificate that
    checks only feasibility and mu >= 0 (both pass here)."""
    Drows, Zrows, W, mu = certificate_inputs()
    assert max(_nuclear._nuclear_kkt(Drows, Zrows, 1.01 * W, mu).values()) > 100 * TOL
    Q = np.linalg.svd(Zrows.T)[0][:, :3]    # orthonormal basis of span{z_i} (3 queries)
    b = np.random.default_rng(1).normal(size=W.shape[0])
    b -= Q @ (Q.T @ b)                      # orthogonal to every query
    a = np.random.default_rng(2).normal(size=W.shape[0])
    bumped = W + 1e-3 * np.linalg.norm(W) * np.outer(a, b) / np.linalg.norm(a) / np.linalg.norm(b)
    np.testing.assert_allclose(values(Drows, Zrows, bumped), values(Drows, Zrows, W), atol=1e-12)
    violations = _nuclear._nuclear_kkt(Drows, Zrows, bumped, mu)
    assert violations["primal feasibility"] <= 1e-12 and max(violations.values()) > 100 * TOL
    with pytest.raises(mm.IllConditionedError, match=r"^X: .*KKT certificate"):
        _nuclear._nuclear_certify(Drows, Zrows, bumped, mu)


def test_certificate_refuses_wrong_multipliers():
    """All the weight ||W||_* on one tight constraint: mu >= 0, complementary slackness,
    <Lambda, W> = ||W||_* and the duality gap all hold, and only ||Lambda||_2 <= 1 fails.
    Bug caught: the spectral-norm condition dropped (then this pair passes); multipliers scaled
    by 1.1 catch a dropped duality gap."""
    Drows, Zrows, W, mu = certificate_inputs()
    j = int(np.argmax(mu))
    wrong = np.zeros_like(mu)
    wrong[j] = nuclear(W) / values(Drows, Zrows, W)[j]
    violations = _nuclear._nuclear_kkt(Drows, Zrows, W, wrong)
    others = {k: v for k, v in violations.items() if k != "spectral norm"}
    assert max(others.values()) <= TOL, others
    assert violations["spectral norm"] > 100 * TOL
    with pytest.raises(mm.IllConditionedError, match=r"^X: .*spectral norm violated by"):
        _nuclear._nuclear_certify(Drows, Zrows, W, wrong)
    assert _nuclear._nuclear_kkt(Drows, Zrows, W, 1.1 * mu)["duality gap"] > 100 * TOL


def test_certificate_names_a_multiplier_on_a_slack_constraint():
    """All the weight on the constraint with the largest slack, scaled so that sum mu = ||W||_*
    (no duality gap): complementary slackness fails, and the certificate says so under that
    name. Bug caught: complementary slackness not checked (or reported as 0), so the message
    would blame another condition, or none."""
    Drows, Zrows, W, mu = certificate_inputs()
    slack = values(Drows, Zrows, W) - 1.0
    j = int(np.argmax(slack))
    assert slack[j] > 0.1                  # a constraint that is far from tight
    wrong = np.zeros_like(mu)
    wrong[j] = nuclear(W)
    violations = _nuclear._nuclear_kkt(Drows, Zrows, W, wrong)
    assert violations["duality gap"] <= 1e-12
    assert violations["complementary slackness"] > 100 * TOL


# ----------------------------------------------------------------------------------------------
# 4. facts on random instances
# ----------------------------------------------------------------------------------------------


RANK_SHAPES = [(3, 4, 8), (6, 3, 4), (8, 3, 5), (10, 4, 6)]


@pytest.mark.parametrize("shape", RANK_SHAPES, ids=str)
def test_each_svm_is_shortest_in_its_own_norm_and_the_nuclear_one_has_lower_rank(shape):
    """On 8 instances per shape: ||W_*||_* <= ||W_F||_* and ||W_F||_F <= ||W_*||_F, since each
    is optimal in its own norm over the same feasible set (to the certificate tolerance). Bug
    caught: the two norms swapped, or the nuclear SVM solved over a smaller set (a truncated
    basis), or the Frobenius objective used for the nuclear SVM (then the first inequality fails
    by far more than 1e-6).

    Rank: rank W_* <= rank W_F is an empirical claim, not a theorem; it held on all 60 instances
    of these shapes tried while writing this test (strictly lower on 59), so it is asserted on
    these seeds, together with rank W_* < rank W_F on most of them (which fails when the
    Frobenius solution is returned as the nuclear one)."""
    lower = 0
    for seed in range(8):
        X, alpha, Z = instance(500 + seed, *shape)
        nuc = mm.w_svm(X, alpha, queries=Z, norm="nuclear")
        fro = mm.w_svm(X, alpha, queries=Z)
        assert nuclear(nuc.W) <= nuclear(fro.W) * (1 + 3 * TOL)
        assert np.linalg.norm(fro.W) <= np.linalg.norm(nuc.W) * (1 + 1e-9)
        rank_nuc = np.linalg.matrix_rank(nuc.W, tol=1e-6 * np.linalg.norm(nuc.W, 2))
        rank_fro = np.linalg.matrix_rank(fro.W, tol=1e-6 * np.linalg.norm(fro.W, 2))
        assert rank_nuc <= rank_fro, (seed, rank_nuc, rank_fro)
        lower += rank_nuc < rank_fro
    assert lower >= 6, f"rank(W_*) < rank(W_F) on only {lower} of 8 instances"


@pytest.mark.parametrize("seed", range(3))
def test_shared_query_gives_the_same_rank_one_w_for_both_norms(seed):
    """One query p for all: the constraints see W only through u = W p, and every W with
    W p = u has ||W||_* >= ||W||_2 >= ||u|| / ||p|| and ||W||_F >= ||u|| / ||p||, with equality
    for u p^T / ||p||^2 (rank one, all its norms equal). So both SVMs are u^mm p^T / ||p||^2 with
    u^mm = argmin ||u|| under the same constraints: the same rank-one W. Checked with the
    full-size SDP too (solver="cvxpy"), which does not use the closed form. Bug caught: the
    nuclear branch ignoring the shared-query structure (a wrong lift, a wrong reduction would
    give another W), or the full-size solver and the closed form disagreeing."""
    X, alpha, Z = instance(200 + seed)
    fro = mm.w_svm(X, alpha, queries=Z[0])
    for solver in ("fast", "cvxpy"):
        nuc = mm.w_svm(X, alpha, queries=Z[0], norm="nuclear", solver=solver)
        np.testing.assert_allclose(nuc.W, fro.W, atol=TOL * np.linalg.norm(fro.W))
        S = np.linalg.svd(nuc.W, compute_uv=False)
        assert S[1] <= TOL * S[0]
        assert nuc.norm == pytest.approx(fro.norm, rel=TOL)  # ||.||_* = ||.||_F at rank one


@pytest.mark.parametrize("seed", [3, 4])
def test_range_of_the_solution(seed):
    """The reduction's premise, W^mm_* = P_D W^mm_* P_Z (its column space in the span of the
    differences, its row space in span{z_i}; d = 12 > 9 differences > 3 queries, so both spans
    are proper), checked first on the reference's full-size W (1e-9: measured 4e-13 to 5e-12;
    this fails if the premise is false), then on the library's W from both solvers (1e-13:
    measured 1e-15). Bugs caught: the bases U_D and U_Z swapped; the full-size answer returned
    without its Newton polish (Clarabel's W is off the range by about 1e-12), or a polish that
    leaves the range."""
    X, alpha, Z = instance(seed, 3, 4, 12)
    Drows, Zrows = rows(X, alpha, Z)
    P_D = Drows.T @ np.linalg.pinv(Drows.T)
    P_Z = Zrows.T @ np.linalg.pinv(Zrows.T)
    assert np.linalg.matrix_rank(P_D) == 9 and np.linalg.matrix_rank(P_Z) == 3
    _, W_ref = reference(Drows, Zrows, "CLARABEL")
    for W, tol in [(W_ref, 1e-9)] + [(mm.w_svm(X, alpha, queries=Z, norm="nuclear",
                                              solver=solver).W, 1e-13)
                                     for solver in ("fast", "cvxpy")]:
        assert np.linalg.norm(W - P_D @ W) <= tol * np.linalg.norm(W)
        assert np.linalg.norm(W - W @ P_Z) <= tol * np.linalg.norm(W)
        assert values(Drows, Zrows, W).min() >= 1 - 1e-9


def test_the_reduced_program_alone_attains_the_optimum():
    """The core program (W = U_D M U_Z^T), before any Newton polish, on an instance where both
    spans are proper (9 differences and 3 queries in d = 12): its W attains the full-size
    reference value and its (W, mu) passes the certificate as it is. Bug caught: a wrong basis
    (U_Z built from the differences, the two swapped, a truncated rank), which the polish, run
    in the full space, can repair in w_svm's answer and so hide from the tests above."""
    X, alpha, Z = instance(3, 3, 4, 12)
    Drows, Zrows = rows(X, alpha, Z)
    W, mu = _nuclear._nuclear_core(Drows, Zrows)
    value, _ = reference(Drows, Zrows, "CLARABEL")
    assert nuclear(W) == pytest.approx(value, rel=1e-8)
    assert max(_nuclear._nuclear_kkt(Drows, Zrows, W, mu).values()) <= TOL


# ----------------------------------------------------------------------------------------------
# 5. scale covariance
# ----------------------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def small(seed: int):
    """(n, T, d) = (3, 3, 3) and its value by Clarabel at unit scale."""
    X, alpha, Z = instance(300 + seed, 3, 3, 3)
    return X, alpha, Z, reference(*rows(X, alpha, Z), "CLARABEL")[0]


def check_scaled(X, alpha, Z, value, result, c):
    """``result`` solves the instance (X, alpha, Z) of optimal value ``value`` with X times c_X
    and the queries times c_Z, c = c_X c_Z: W, the margin, the multipliers, Lambda and the
    duality gap are each compared at unit scale with values recomputed here from the data."""
    Drows, Zrows = rows(X, alpha, Z)
    W = result.W * c
    assert nuclear(W) == pytest.approx(value, rel=1e-8)
    assert values(Drows, Zrows, W).min() >= 1 - 1e-9
    assert result.margin / c == pytest.approx(1 / value, rel=1e-8)
    others = np.arange(X.shape[1])[None, :] != alpha[:, None]
    mu = result.multipliers[others] * c
    assert mu.sum() == pytest.approx(value, rel=1e-8)     # sum mu = ||W||_* (strong duality)
    Lam = np.einsum("j,ja,jb->ab", mu, Drows, Zrows)      # Lambda is scale-free
    np.testing.assert_allclose(result.dual, Lam, atol=1e-8)
    assert np.linalg.norm(Lam, 2) <= 1 + 1e-8
    assert abs(result.duality_gap * c) <= 1e-9 * value


@given(seed=st.integers(0, 2), k=st.integers(-300, 300), which=st.sampled_from(["X", "queries"]))
@example(seed=0, k=300, which="X")
@example(seed=1, k=-300, which="queries")
@settings(max_examples=14, deadline=None, derandomize=True)
def test_scale_covariance_over_the_float64_range(seed, k, which):
    """X -> c X gives W -> W / c and mu -> mu / c (queries alike) for c from 1e-300 to 1e300
    (the reference value is Clarabel's at unit scale). Bugs caught: the SDP solved in the units
    of the data (Clarabel's absolute tolerances then fail, or the certificate refuses), W or the
    multipliers or the duality gap not scaled back (or scaled back by the wrong factor), the
    products d_j z_j^T of the feasibility test formed at the data's scale."""
    X, alpha, Z, value = small(seed)
    c = 10.0 ** k
    if which == "X":
        result = mm.w_svm(X * c, alpha, queries=Z, norm="nuclear")
    else:
        result = mm.w_svm(X, alpha, queries=Z * c, norm="nuclear")
    check_scaled(X, alpha, Z, value, result, c)


@given(seed=st.integers(0, 2), k_X=st.integers(-150, 150), k_Z=st.integers(-150, 150))
@settings(max_examples=8, deadline=None, derandomize=True)
def test_scale_covariance_in_both_factors(seed, k_X, k_Z):
    """X and the queries scaled at once, by c_X and c_Z from 1e-150 to 1e150 (so W, of scale
    1 / (c_X c_Z), stays in float64). Bug caught: the scale undone for one factor only (W then
    off by c_Z), or by c_X + c_Z instead of c_X c_Z."""
    X, alpha, Z, value = small(seed)
    c_X, c_Z = 10.0 ** k_X, 10.0 ** k_Z
    result = mm.w_svm(X * c_X, alpha, queries=Z * c_Z, norm="nuclear")
    check_scaled(X, alpha, Z, value, result, c_X * c_Z)


@pytest.mark.parametrize("solver", ["fast", "cvxpy"])
@pytest.mark.parametrize("k", [-1000, -1, 1, 1000])
def test_power_of_two_scales_are_exact(solver, k):
    """X -> 2^k X gives exactly (bit for bit) W -> 2^-k W, mu -> 2^-k mu and the same Lambda:
    the data are brought to unit scale by powers of two, so the solver sees the same numbers.
    Bug caught: the program solved at the data's scale (Clarabel's iterates, and tolerances,
    then differ: not bit for bit, and at 2^1000 not at all), or W and mu scaled back by another
    factor than the data were scaled by."""
    X, alpha, Z = instance(7, 3, 4, 5)
    base = mm.w_svm(X, alpha, queries=Z, norm="nuclear", solver=solver)
    scaled = mm.w_svm(np.ldexp(X, k), alpha, queries=Z, norm="nuclear", solver=solver)
    np.testing.assert_array_equal(scaled.W, np.ldexp(base.W, -k))
    np.testing.assert_array_equal(scaled.multipliers, np.ldexp(base.multipliers, -k))
    np.testing.assert_array_equal(scaled.dual, base.dual)


def test_a_w_beyond_float64_is_refused_naming_x():
    """X and the queries both at 1e200: W^mm_* would be about 1e-400. Bug caught: W flushed to
    zero (or subnormal) and returned, with constraint values 0 < 1."""
    X, alpha, Z = instance(0, 3, 3, 3)
    # per-sequence queries: refused up front, the constraint matrices leave float64
    with pytest.raises(ValueError, match=r"^X: the largest entry of the constraint matrix"):
        mm.w_svm(X * 1e200, alpha, queries=Z * 1e200, norm="nuclear")
    with pytest.raises(ValueError, match=r"^X: the largest entry of the constraint matrix"):
        mm.w_svm(X * 1e-170, alpha, queries=Z * 1e-170, norm="nuclear")
    # one shared query: the nuclear solver's own scale check
    rng = np.random.default_rng(0)
    p, X = rng.standard_normal((3, 5))[0], rng.standard_normal((2, 3, 5))
    assert mm.w_svm(X, [0, 0], queries=p, norm="nuclear").norm > 0
    for c in (1e200, 1e-170):
        with pytest.raises(ValueError, match=r"^X: the nuclear-norm W\^mm scales like"):
            mm.w_svm(X * c, [0, 0], queries=p * c, norm="nuclear")


# ----------------------------------------------------------------------------------------------
# 6. bad inputs and the result
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["Nuclear", "l2", "trace"])
def test_unknown_norm_names_the_argument(norm):
    """Bug caught: an unknown norm silently solved as the Frobenius SVM. (Since issue 41,
    "spectral" and numbers q >= 1 are norms too: tests/lib/test_svm_norms.py.)"""
    X, alpha, Z = instance(0)
    with pytest.raises(ValueError, match="^norm: expected one of"):
        mm.w_svm(X, alpha, queries=Z, norm=norm)
    with pytest.raises(ValueError, match="^norm: expected one of"):
        mm.svm.w_svm_problem(X, alpha, queries=Z, norm=norm)
    with pytest.raises(TypeError, match="^norm: "):
        mm.w_svm(X, alpha, queries=Z, norm=None)


@pytest.mark.parametrize("solver", ["fast", "cvxpy"])
def test_infeasible_gives_the_frobenius_error(solver):
    """Feasibility does not depend on the norm. Bug caught: Clarabel's infeasibility surfacing
    as a RuntimeError or IllConditionedError instead of the W-SVM's explanation."""
    cases = [
        (np.array([[[1.0, 0.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]]]), [0, 0],
         [[1.0, 0.0], [0.0, 0.0]]),                               # a zero query
        (np.array([[[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]]]), [1], [1.0, 0.0]),  # inside the hull
        (np.array([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [1.0, 0.0]]]), [0, 0],
         [[1.0, 0.0], [1.0, 0.0]]),                               # two sequences conflict
    ]
    for X, alpha, queries in cases:
        with pytest.raises(ValueError) as frobenius:
            mm.w_svm(X, alpha, queries=queries)
        with pytest.raises(ValueError) as nuc:
            mm.w_svm(X, alpha, queries=queries, norm="nuclear", solver=solver)
        assert type(nuc.value) is type(frobenius.value)
        assert str(nuc.value) == str(frobenius.value)
        assert str(nuc.value).startswith("alpha: W-SVM is infeasible")


def test_bad_queries_are_refused_as_for_frobenius():
    """Bug caught: the nuclear branch validating queries on its own (or not at all)."""
    X, alpha, _ = instance(0)
    with pytest.raises(ValueError, match="^queries: expected shape"):
        mm.w_svm(X, alpha, queries=np.ones((2, 8)), norm="nuclear")
    with pytest.raises(ValueError, match="^queries: the query vector is zero"):
        mm.w_svm(X, alpha, queries=np.zeros(8), norm="nuclear")


def test_result_fields():
    """The new fields: the nuclear result is frozen with read-only arrays, margin = 1 / ||W||_*
    and direction = W / ||W||_*; the Frobenius result keeps its old values with norm_name
    "frobenius" and None for the nuclear-only fields. Bug caught: margin 1 / ||W||_F for the
    nuclear SVM, or writable arrays."""
    X, alpha, Z, result = solved(0)
    assert result.norm_name == "nuclear"
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.W = result.W
    for name in ("W", "constraints", "support", "multipliers", "dual"):
        assert not getattr(result, name).flags.writeable, name
    assert result.margin == pytest.approx(1 / nuclear(result.W), rel=1e-12)
    assert nuclear(result.direction) == pytest.approx(1.0, rel=1e-12)
    others = np.arange(X.shape[1])[None, :] != alpha[:, None]
    assert np.all(result.multipliers[~others] == 0) and result.multipliers.min() >= 0
    assert result.support[others].any() and not result.support[~others].any()
    fro = mm.w_svm(X, alpha, queries=Z)
    assert (fro.norm_name, fro.multipliers, fro.dual, fro.duality_gap) == ("frobenius", None,
                                                                            None, None)
    assert fro.norm == pytest.approx(np.linalg.norm(fro.W), rel=1e-14)


def test_a_failing_lapack_solve_in_the_polish_is_a_polish_that_does_not_settle(monkeypatch):
    """LAPACK's SVD can fail on a diverging Newton step of the polish (seen on a random
    6 x 8 x 10 instance). Bug caught: numpy's LinAlgError escaping from ``w_svm`` instead of
    the polish being discarded: the answer must still be the certified interior-point one, of
    the same norm as without the failure (to the certificate's accuracy)."""
    inst = mm.data.query_instance(3, 4, 5, seed=1)
    Z = inst.extra["queries"]
    good = mm.w_svm(inst.X, inst.optimal, queries=Z, norm="nuclear")

    def broken(*args, **kwargs):
        raise np.linalg.LinAlgError("SVD did not converge in Linear Least Squares")

    monkeypatch.setattr(svm.np.linalg, "lstsq", broken)
    res = mm.w_svm(inst.X, inst.optimal, queries=Z, norm="nuclear")
    assert res.norm == pytest.approx(good.norm, rel=1e-6)
    assert np.all(res.constraints >= 1 - 1e-6)
