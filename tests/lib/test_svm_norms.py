"""ATT-SVM and the W-SVM in other norms (issue 41; maxmargin.normsvm): each checked against a
formulation of its own (scipy's linprog/HiGHS for l1 and l_inf, SLSQP and the KKT conditions
in numpy for l_q, a cvxpy SDP written differently for the spectral norm), by-hand instances,
the certificate refusing perturbed solutions, and the margin ratio."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog, minimize, nnls

import maxmargin as mm
from maxmargin import normsvm

REL = 1e-6


def att_instance(seed, n=3, T=4, d=3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, T, d))
    alpha = np.argmax(X @ rng.standard_normal(d), axis=1)  # feasible: p ranks them first
    return X, alpha


def w_instance(seed, n=3, T=3, d=3, shared=False):
    rng = np.random.default_rng(100 + seed)
    X = rng.standard_normal((n, T, d))
    Z = rng.standard_normal(d) if shared else rng.standard_normal((n, d))
    W0 = rng.standard_normal((d, d))
    alpha = np.argmax(np.einsum("nta,ab,nb->nt", X, W0, np.broadcast_to(Z, (n, d))), axis=1)
    return X, alpha, Z


def att_rows(X, alpha):
    """Constraint rows (x_{i,alpha_i} - x_it) of ATT-SVM, written out here."""
    return np.array([X[i, alpha[i]] - X[i, t] for i in range(len(X)) for t in range(X.shape[1])
                     if t != alpha[i]])


def w_rows(X, alpha, Z):
    """Rows vec((x_{i,alpha_i} - x_it) z_i^T) (row-major) of the W-SVM, written out here."""
    Z = np.broadcast_to(Z, (len(X), X.shape[2]))
    return np.array([np.outer(X[i, alpha[i]] - X[i, t], Z[i]).ravel() for i in range(len(X))
                     for t in range(X.shape[1]) if t != alpha[i]])


def lp_optimum(A, norm):
    """min ||x||_1 or ||x||_inf s.t. A x >= 1 as an LP of our own, solved by HiGHS."""
    m, k = A.shape
    if norm == "l1":  # x = u - v, u, v >= 0
        res = linprog(np.ones(2 * k), A_ub=-np.hstack([A, -A]), b_ub=-np.ones(m),
                      bounds=[(0, None)] * (2 * k), method="highs")
    else:  # variables (x, t): -t <= x_i <= t
        c = np.r_[np.zeros(k), 1.0]
        A_ub = np.vstack([np.hstack([-A, np.zeros((m, 1))]),
                          np.hstack([np.eye(k), -np.ones((k, 1))]),
                          np.hstack([-np.eye(k), -np.ones((k, 1))])])
        b_ub = np.r_[-np.ones(m), np.zeros(2 * k)]
        res = linprog(c, A_ub=A_ub, b_ub=b_ub, bounds=[(None, None)] * (k + 1), method="highs")
    assert res.status == 0
    return res.fun


def lq_check(A, x, q):
    """||x||_q optimal for min ||x||_q s.t. A x >= 1, checked in numpy: feasible, and the
    gradient sign(x)|x|^(q-1) / ||x||_q^(q-1) is a non-negative combination of the tight rows
    (own NNLS); returns the optimal value from SLSQP on min ||x||_q^q (a second opinion)."""
    values = A @ x
    assert values.min() >= 1 - 1e-7
    norm = np.sum(np.abs(x) ** q) ** (1 / q)
    grad = np.sign(x) * np.abs(x) ** (q - 1) / norm ** (q - 1)
    tight = values <= 1 + 1e-6
    mu, residual = nnls(A[tight].T, grad)
    assert residual <= 1e-5 * np.linalg.norm(grad)
    unit = norm ** q  # the objective relative to its value at x: of size 1
    res = minimize(lambda y: np.sum(np.abs(y) ** q) / unit, x * 1.3 + 0.1,
                   jac=lambda y: q * np.sign(y) * np.abs(y) ** (q - 1) / unit,
                   constraints=[{"type": "ineq", "fun": lambda y: A @ y - 1, "jac": lambda y: A}],
                   method="SLSQP", options={"ftol": 1e-14, "maxiter": 1000})
    assert res.success
    return float(np.sum(np.abs(res.x) ** q) ** (1 / q))


# ----------------------------------------------------------------------------------------------
# 1. the l2 / Frobenius default is today's SVM, by every spelling
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["l2", 2, 2.0, np.float64(2.0)])
def test_l2_spellings_are_todays_att_svm(norm):
    """Bug caught: norm=2 routed to the cvxpy engine (another answer, no least-distance
    certificate) or the default changed."""
    X, alpha = att_instance(0)
    old, new = mm.att_svm(X, alpha), mm.att_svm(X, alpha, norm=norm)
    assert np.array_equal(old.p, new.p) and np.array_equal(old.multipliers, new.multipliers)
    assert new.norm_name == "l2" and new.dual is None and new.norm == old.norm


def test_the_engine_in_l2_agrees_with_the_least_distance_solver():
    """The cvxpy engine of the other norms, run with the l2 norm (pnorm 2), against today's
    att_svm. Bug caught: constraints built with the wrong sign or rows in the engine."""
    X, alpha = att_instance(1)
    A = att_rows(X, alpha)
    solved = normsvm.solve(A, np.ones(len(A)), (3,), normsvm.parse(2, "att"))
    assert np.allclose(solved.x, mm.att_svm(X, alpha).p, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("norm", [2, "frobenius"])
def test_frobenius_spellings_are_todays_w_svm(norm):
    X, alpha, Z = w_instance(0)
    assert np.array_equal(mm.w_svm(X, alpha, queries=Z).W,
                          mm.w_svm(X, alpha, queries=Z, norm=norm).W)


# ----------------------------------------------------------------------------------------------
# 2. l1 and l_inf against HiGHS, l_q against SLSQP and numpy's KKT
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("norm", ["l1", "linf"])
def test_att_lp_norms_match_highs(norm, seed):
    """Bug caught: a wrong objective (l1 for linf, a row-sum norm), a constraint dropped."""
    X, alpha = att_instance(seed)
    res = mm.att_svm(X, alpha, norm=norm)
    A = att_rows(X, alpha)
    opt = lp_optimum(A, norm)
    own = np.abs(res.p).sum() if norm == "l1" else np.abs(res.p).max()
    assert abs(own - opt) <= REL * opt
    assert res.norm == pytest.approx(own, rel=1e-12) and res.margin == pytest.approx(1 / own)
    assert (A @ res.p).min() >= 1 - 1e-7


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("norm", ["l1", "linf"])
@pytest.mark.parametrize("shared", [False, True])
def test_w_entrywise_lp_norms_match_highs(norm, seed, shared):
    """Entrywise norms of W: linf is the largest |entry|. Bug caught: cp.norm(W, "inf") (the
    largest row sum) or cp.norm(W, 1) (the largest column sum) as the objective."""
    X, alpha, Z = w_instance(seed, shared=shared)
    res = mm.w_svm(X, alpha, queries=Z, norm=norm)
    A = w_rows(X, alpha, Z)
    opt = lp_optimum(A, norm)
    own = np.abs(res.W).sum() if norm == "l1" else np.abs(res.W).max()
    assert abs(own - opt) <= REL * opt and res.norm == pytest.approx(own, rel=1e-12)
    assert (A @ res.W.ravel()).min() >= 1 - 1e-7


@pytest.mark.parametrize("q", [1.5, 1.75, 3.0, 7.0])
def test_att_lq_is_optimal_by_kkt_and_slsqp(q):
    """Bug caught: the wrong exponent (q* for q), a norm that is not entrywise l_q."""
    X, alpha = att_instance(3)
    res = mm.att_svm(X, alpha, norm=q)
    A = att_rows(X, alpha)
    slsqp = lq_check(A, res.p, q)
    own = np.sum(np.abs(res.p) ** q) ** (1 / q)
    assert own <= slsqp * (1 + REL) and res.norm == pytest.approx(own, rel=1e-12)
    assert res.norm_name == f"l{q:g}"


@pytest.mark.parametrize("q", [1.75, 3.0])
def test_w_lq_is_optimal_by_kkt_and_slsqp(q):
    X, alpha, Z = w_instance(2)
    res = mm.w_svm(X, alpha, queries=Z, norm=q)
    slsqp = lq_check(w_rows(X, alpha, Z), res.W.ravel(), q)
    own = np.sum(np.abs(res.W) ** q) ** (1 / q)
    assert own <= slsqp * (1 + REL) and res.norm == pytest.approx(own, rel=1e-12)


# ----------------------------------------------------------------------------------------------
# 3. the spectral norm: an SDP of our own, a closed form, by hand
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_spectral_matches_an_own_sdp(seed):
    """min t s.t. [[t I, W], [W^T, t I]] >= 0, with the constraints written as sums over
    entries. Bug caught: sigma_max replaced by another norm (nuclear, Frobenius), the
    certificate's dual norm (nuclear) wrong (a correct answer refused)."""
    import cvxpy as cp

    X, alpha, Z = w_instance(seed)
    res = mm.w_svm(X, alpha, queries=Z, norm="spectral")
    d = X.shape[2]
    W, t = cp.Variable((d, d)), cp.Variable()
    block = cp.bmat([[t * np.eye(d), W], [W.T, t * np.eye(d)]])
    cons = [(block + block.T) / 2 >> 0]
    cons += [sum((X[i, alpha[i]] - X[i, s])[a] * W[a, b] * Z[i, b] for a in range(d)
                 for b in range(d)) >= 1 for i in range(len(X)) for s in range(X.shape[1])
             if s != alpha[i]]
    opt = cp.Problem(cp.Minimize(t), cons).solve(solver=cp.CLARABEL)
    own = np.linalg.norm(res.W, 2)
    assert abs(own - opt) <= REL * opt and res.norm == pytest.approx(own, rel=1e-12)
    # the dual certificate, recomputed: Lambda = sum mu_j A_j has nuclear norm <= 1 and
    # <Lambda, W> = ||W||_2
    A = w_rows(X, alpha, Z)
    mu = res.multipliers[np.arange(X.shape[1])[None, :] != np.asarray(alpha)[:, None]]
    Lam = (mu @ A).reshape(d, d)
    assert np.allclose(Lam, res.dual, atol=1e-12)
    assert np.linalg.norm(Lam, "nuc") <= 1 + REL
    assert abs(np.sum(Lam * res.W) - own) <= REL * own


def test_spectral_with_one_query_is_the_rank_one_canonical_point():
    """One query p: every spectral optimum has W p = u^mm (the l2 ATT-SVM on the tokens), and
    the least-Frobenius one is u^mm p^T / ||p||^2. Bug caught: the solver's point returned (it
    differs off the direction p), the canonical solve skipped."""
    X, alpha, p = w_instance(4, n=3, T=3, d=4, shared=True)
    res = mm.w_svm(X, alpha, queries=p, norm="spectral")
    u = mm.att_svm(X, alpha).p
    expected = np.outer(u, p) / (p @ p)
    assert np.allclose(res.W, expected, atol=1e-5 * np.abs(expected).max())
    assert res.norm == pytest.approx(np.linalg.norm(u) / np.linalg.norm(p), rel=REL)


def test_by_hand_three_constraints():
    """W_11, W_12, W_22 >= 1. Spectral: ||W||_2 >= ||first row|| >= sqrt 2, reached only by
    [[1, 1], [-1, 1]]. linf and l1: optimum 1 and 3 on the face W_11 = W_12 = W_22 = 1 with
    |W_21| <= 1 (resp. W_21 = 0); least-Frobenius point [[1, 1], [0, 1]]."""
    X = np.array([[[1.0, 0.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]], [[0.0, 1.0], [0.0, 0.0]]])
    Z = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    spec = mm.w_svm(X, [0, 0, 0], queries=Z, norm="spectral")
    assert np.allclose(spec.W, [[1, 1], [-1, 1]], atol=1e-5)
    assert spec.norm == pytest.approx(np.sqrt(2), rel=REL)
    for norm, opt in (("linf", 1.0), ("l1", 3.0)):
        res = mm.w_svm(X, [0, 0, 0], queries=Z, norm=norm)
        assert np.allclose(res.W, [[1, 1], [0, 1]], atol=1e-6), norm
        assert res.norm == pytest.approx(opt, rel=REL) and res.margin == pytest.approx(1 / opt)


def test_linf_canonical_point_against_slsqp():
    """The least-l2 point of the l_inf optimal face {A x >= 1, |x_i| <= opt}, by SLSQP (a smooth
    QP). Bug caught: the canonical solve skipped (Clarabel's interior point lies elsewhere on
    the face) or solved over the wrong face."""
    X, alpha = att_instance(5, n=2, T=3, d=4)
    res = mm.att_svm(X, alpha, norm="linf")
    A = att_rows(X, alpha)
    opt = lp_optimum(A, "linf")
    qp = minimize(lambda y: y @ y, np.zeros(4), jac=lambda y: 2 * y, method="SLSQP",
                  constraints=[{"type": "ineq", "fun": lambda y: A @ y - 1, "jac": lambda y: A}],
                  bounds=[(-opt * (1 + 1e-9), opt * (1 + 1e-9))] * 4,
                  options={"ftol": 1e-15, "maxiter": 1000})
    assert qp.success
    assert np.allclose(res.p, qp.x, atol=1e-5)


# ----------------------------------------------------------------------------------------------
# 4. the certificate refuses what is not optimal
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["l1", "linf", 1.75, "spectral"])
def test_certificate_refuses_perturbed_solutions(norm):
    """The internal check passes the returned (W, mu) and raises on W scaled by 1.01 (gap), W
    moved along a random direction (alignment) and mu scaled by 1.01 (dual norm). Bug caught:
    a certificate that checks nothing, or only feasibility."""
    X, alpha, Z = w_instance(1)
    spec = normsvm.parse(norm, "w")
    res = mm.w_svm(X, alpha, queries=Z, norm=norm)
    A = w_rows(X, alpha, Z)
    others = np.arange(X.shape[1])[None, :] != np.asarray(alpha)[:, None]
    mu, b = res.multipliers[others], np.ones(len(A))
    normsvm.certify(A, b, res.W, mu, spec)
    rng = np.random.default_rng(0)
    for W, m in ((1.01 * res.W, mu), (res.W + 1e-3 * rng.standard_normal(res.W.shape) + 2e-3 *
                                      res.W, mu), (res.W, 1.01 * mu)):
        with pytest.raises(mm.IllConditionedError, match="^X: the .* SVM fails its KKT"):
            normsvm.certify(A, b, W, m, spec)


def test_result_fields_are_consistent():
    """margin = 1 / norm, direction of norm 1 in that norm, multipliers zero at the selected
    token, dual = sum mu_j (x_a - x_t) z^T, |gap| tiny. Bug caught: the Frobenius norm reported
    for another norm's W, multipliers stored in the wrong cells."""
    X, alpha, Z = w_instance(3)
    for norm, own in (("linf", lambda W: np.abs(W).max()), (3.0, lambda W: np.sum(np.abs(W) ** 3)
                                                            ** (1 / 3)),
                      ("spectral", lambda W: np.linalg.norm(W, 2))):
        res = mm.w_svm(X, alpha, queries=Z, norm=norm)
        assert res.norm == pytest.approx(own(res.W), rel=1e-12)
        assert res.margin == pytest.approx(1 / own(res.W), rel=1e-12)
        assert own(res.direction) == pytest.approx(1.0, rel=1e-12)
        assert np.all(res.multipliers[np.arange(len(X)), alpha] == 0)
        assert np.all(res.multipliers >= 0) and abs(res.duality_gap) <= REL * res.norm
        D = X[np.arange(len(X)), alpha][:, None, :] - X
        assert np.allclose(np.einsum("it,ita,ib->ab", res.multipliers, D, Z), res.dual, atol=1e-12)
        assert np.all(res.support == (np.abs(res.constraints - 1) <= 1e-6))
    p = mm.att_svm(*att_instance(2), norm=1.5)
    assert p.norm_name == "l1.5" and np.sum(np.abs(p.direction) ** 1.5) == pytest.approx(1.0)


# ----------------------------------------------------------------------------------------------
# 5. the margin ratio
# ----------------------------------------------------------------------------------------------


def test_margin_ratio_by_hand():
    """One sequence, tokens (1, 0) and (0, 1): p_1 - p_2 >= 1, linf optimum 1/2, l1 optimum 1.
    p = (1, 0): margin 1 in both norms, so rho_inf = 1/2 and rho_1 = 1."""
    X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    assert normsvm.att_margin_ratio(X, [1.0, 0.0], [0], norm="linf") == pytest.approx(0.5)
    assert normsvm.att_margin_ratio(X, [1.0, 0.0], [0], norm="l1") == pytest.approx(1.0)
    assert normsvm.att_margin_ratio(X, [3.0, 1.0], [0], norm=2) == pytest.approx(
        (2 / np.sqrt(10)) * np.sqrt(0.5))
    res = mm.att_svm(X, [0], norm="l1")
    assert np.allclose(res.p, [0.5, -0.5], atol=1e-7)  # the least-l2 point of the l1 face


@pytest.mark.parametrize("norm", ["spectral", "linf", "l1", 1.75, "nuclear", "frobenius"])
def test_margin_ratio_is_one_at_the_svm_at_any_scale(norm):
    """Bug caught: a ratio that depends on the scale of W, or that is not 1 at the optimum."""
    X, alpha, Z = w_instance(0)
    res = mm.w_svm(X, alpha, queries=Z, norm=norm)
    for c in (0.5, 1.0, 7.0):
        assert normsvm.w_margin_ratio(X, c * res.W, alpha, queries=Z, norm=norm, svm=res) \
            == pytest.approx(1.0, abs=1e-6)


def test_margin_ratio_below_one_at_the_frobenius_solution():
    """The Frobenius W-SVM rated in the spectral norm, by hand: W = [[1, 1], [0, 1]] has margin
    1 / phi (phi = the golden ratio, its largest singular value), the optimum sqrt 2: rho =
    sqrt 2 / phi. Random data: rho_linf of the Frobenius solution is < 1. Bug caught: the
    ratio's norm not the SVM's (Frobenius everywhere gives 1)."""
    X = np.array([[[1.0, 0.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]], [[0.0, 1.0], [0.0, 0.0]]])
    Z = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    fro = mm.w_svm(X, [0, 0, 0], queries=Z).W
    phi = (1 + np.sqrt(5)) / 2
    assert normsvm.w_margin_ratio(X, fro, [0, 0, 0], queries=Z, norm="spectral") == \
        pytest.approx(np.sqrt(2) / phi, rel=REL)
    X, alpha, Z = w_instance(1)
    fro = mm.w_svm(X, alpha, queries=Z).W
    assert normsvm.w_margin_ratio(X, fro, alpha, queries=Z, norm="linf") < 0.99


# ----------------------------------------------------------------------------------------------
# 6. scale, infeasibility, bad inputs
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("c", [2.0 ** -300, 1e-100, 1e100, 2.0 ** 300])
def test_scale_covariance(c):
    """X -> c X gives p -> p / c (W -> W / c for one scaled argument). Bug caught: the data
    handed to Clarabel unscaled (it fails or is inaccurate far from unit scale)."""
    X, alpha = att_instance(0)
    p = mm.att_svm(X, alpha, norm="linf").p
    assert np.allclose(mm.att_svm(X * c, alpha, norm="linf").p * c, p, rtol=1e-6, atol=1e-7)
    X, alpha, Z = w_instance(0)
    W = mm.w_svm(X, alpha, queries=Z, norm="spectral").W
    assert np.allclose(mm.w_svm(X * c, alpha, queries=Z, norm="spectral").W * c, W, atol=1e-6)


def test_infeasible_gives_the_l2_explanation():
    """Feasibility does not depend on the norm. Bug caught: Clarabel's infeasibility surfacing
    as an IllConditionedError or RuntimeError."""
    X = np.array([[[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]]])
    with pytest.raises(ValueError) as l2:
        mm.att_svm(X, [1])
    for norm in ("l1", "linf", 1.5):
        with pytest.raises(ValueError) as other:
            mm.att_svm(X, [1], norm=norm)
        assert str(other.value) == str(l2.value) and type(other.value) is type(l2.value)
    with pytest.raises(ValueError) as fro:
        mm.w_svm(X, [1], queries=[1.0, 0.0])
    with pytest.raises(ValueError) as spec:
        mm.w_svm(X, [1], queries=[1.0, 0.0], norm="spectral")
    assert str(spec.value) == str(fro.value)


@pytest.mark.parametrize("norm,error", [
    (0.5, ValueError), (1 - 1e-9, ValueError), (float("nan"), ValueError), (-np.inf, ValueError),
    ("l3", ValueError), ("frobenius", ValueError), ("L1", ValueError),
    (None, TypeError), (True, TypeError), (("lq", 1.75), TypeError), ([2.0], TypeError)])
def test_bad_att_norms_name_the_argument(norm, error):
    X, alpha = att_instance(0)
    with pytest.raises(error, match="^norm: "):
        mm.att_svm(X, alpha, norm=norm)
    with pytest.raises(error, match="^norm: "):
        mm.att_svm_problem(X, alpha, norm=norm)


@pytest.mark.parametrize("norm,error", [
    (0.0, ValueError), (float("nan"), ValueError), ("l2", ValueError), ("Spectral", ValueError),
    (None, TypeError), (False, TypeError), ("l1.75", ValueError)])
def test_bad_w_norms_name_the_argument(norm, error):
    X, alpha, Z = w_instance(0)
    with pytest.raises(error, match="^norm: "):
        mm.w_svm(X, alpha, queries=Z, norm=norm)


def test_margin_ratio_bad_inputs_name_the_argument():
    X, alpha, Z = w_instance(0)
    res = mm.w_svm(X, alpha, queries=Z, norm="linf")
    with pytest.raises(ValueError, match="^W: "):
        normsvm.w_margin_ratio(X, np.zeros((3, 3)), alpha, queries=Z, norm="linf", svm=res)
    with pytest.raises(ValueError, match="^W: "):
        normsvm.w_margin_ratio(X, np.eye(2), alpha, queries=Z, norm="linf", svm=res)
    with pytest.raises(ValueError, match="^svm: "):
        normsvm.w_margin_ratio(X, np.eye(3), alpha, queries=Z, norm="l1", svm=res)
    with pytest.raises(TypeError, match="^svm: "):
        normsvm.w_margin_ratio(X, np.eye(3), alpha, queries=Z, norm="linf", svm=res.W)
    with pytest.raises(ValueError, match="^p: "):
        normsvm.att_margin_ratio(X, np.zeros(3), alpha, norm="linf")


def test_problem_builders_take_the_norm():
    """w_svm_problem / att_svm_problem in the new norms give the certified optimum's value."""
    import cvxpy as cp

    X, alpha, Z = w_instance(2)
    program = mm.svm.w_svm_problem(X, alpha, queries=Z, norm="linf")
    value = program.problem.solve(solver=cp.CLARABEL)
    assert value == pytest.approx(mm.w_svm(X, alpha, queries=Z, norm="linf").norm, rel=REL)
    X, alpha = att_instance(2)
    value = mm.att_svm_problem(X, alpha, norm=1.75).problem.solve(solver=cp.CLARABEL)
    assert value == pytest.approx(mm.att_svm(X, alpha, norm=1.75).norm, rel=REL)


def test_certificate_needs_the_dual_norm_by_hand():
    """Points that are feasible, tight where mu > 0, aligned and of zero gap, but not optimal:
    only the dual norm refuses them. linf: p_1 - p_2 >= 1 at p = (1, 0), mu = 1: Lambda =
    (1, -1), <Lambda, p> = 1 = ||p||_inf, but ||Lambda||_1 = 2 (the optimum is 1/2). Spectral:
    W_11, W_12, W_22 >= 1 at W = [[1, 1], [0, 1]] (||W||_2 = phi), mu = phi / 3 each: Lambda =
    W phi / 3 has nuclear norm phi sqrt 5 / 3 = 1.21 > 1 (its spectral norm is 0.87). Bug
    caught: the wrong dual norm (l_inf or spectral itself) in the certificate."""
    with pytest.raises(mm.IllConditionedError, match="dual norm violated"):
        normsvm.certify(np.array([[1.0, -1.0]]), np.ones(1), np.array([1.0, 0.0]), np.ones(1),
                        normsvm.parse("linf", "att"))
    normsvm.certify(np.array([[1.0, -1.0]]), np.ones(1), np.array([0.5, -0.5]), np.full(1, 0.5),
                    normsvm.parse("linf", "att"))  # the optimum and its multiplier pass
    rows = np.array([[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 0, 1.0]])  # W_11, W_12, W_22
    phi = (1 + np.sqrt(5)) / 2
    with pytest.raises(mm.IllConditionedError, match="dual norm violated"):
        normsvm.certify(rows, np.ones(3), np.array([[1.0, 1.0], [0.0, 1.0]]),
                        np.full(3, phi / 3), normsvm.parse("spectral", "w"))
    # l1 at p = (2, 1), mu = 3: Lambda = (3, -3), aligned, gap 0, ||Lambda||_inf = 3
    with pytest.raises(mm.IllConditionedError, match="dual norm violated"):
        normsvm.certify(np.array([[1.0, -1.0]]), np.ones(1), np.array([2.0, 1.0]), np.full(1, 3.0),
                        normsvm.parse("l1", "att"))
