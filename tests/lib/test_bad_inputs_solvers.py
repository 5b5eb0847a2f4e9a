"""Bad and extreme inputs for the solvers (issue 13: scale, conditioning, large radii, bounded
work, and the solvers' argument validation).

Every case asserts either the right answer, computed independently of the library (a closed
form worked out by hand, cvxpy/Clarabel on a formulation written here, or the limit loss from
its formula), or a ValueError/TypeError whose message names the argument. The class of each
case is the first word of its name; the before/after table is in the report of issue 13.
"""
from __future__ import annotations


import numpy as np
import pytest

import maxmargin as mm

# ----------------------------------------------------------------------------------------------
# independent references
# ----------------------------------------------------------------------------------------------


def att_rows(X, alpha, W=None):
    """Rows W^T (x_ia - x_it) for t != alpha_i, by loops."""
    n, T, d = X.shape
    W = np.eye(d) if W is None else W
    return np.array([W.T @ (X[i, alpha[i]] - X[i, t]) for i in range(n) for t in range(T)
                     if t != alpha[i]])


def clarabel_ldp(G, h=None):
    """min ||p||^2 s.t. G p >= h with cvxpy/Clarabel, written here (not the library's)."""
    import cvxpy as cp

    h = np.ones(len(G)) if h is None else h
    p = cp.Variable(G.shape[1])
    problem = cp.Problem(cp.Minimize(cp.sum_squares(p)), [G @ p >= h])
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    assert problem.status == cp.OPTIMAL
    return np.asarray(p.value)


# a feasible two-sequence instance whose ATT-SVM has two support tokens
X2 = np.array([[[1.0, 0.3], [0.0, 0.0], [0.5, -1.0]], [[0.2, 1.0], [1.0, -0.5], [0.0, 0.0]]])
A2 = [0, 0]


@pytest.fixture(scope="module")
def p_x2():
    return clarabel_ldp(att_rows(X2, A2))


# ----------------------------------------------------------------------------------------------
# 1. Scale: the SVMs are scale-covariant (X -> c X gives p -> p / c)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("c", [1e-150, 1e-11, 1e-5, 1e5, 1e150])
def test_scale_att_svm(c, p_x2):
    result = mm.att_svm(X2 * c, A2)
    np.testing.assert_allclose(result.p * c, p_x2, rtol=1e-7)
    assert result.margin / c == pytest.approx(1 / np.linalg.norm(p_x2), rel=1e-7)


@pytest.mark.parametrize("c", [1e-11, 1e150])
def test_scale_is_feasible(c):
    assert mm.is_feasible(X2 * c, A2)


def test_scale_att_svm_beyond_1e154_names_x_or_is_right(p_x2):
    """At 1e-160 the multipliers (~ 1 / c^2) overflow float64: a clear refusal naming X."""
    with pytest.raises(ValueError, match="^X: .*multipliers"):
        mm.att_svm(X2 * 1e-160, A2)
    result = mm.att_svm(X2 * 1e160, A2)  # representable: the right answer
    np.testing.assert_allclose(result.p * 1e160, p_x2, rtol=1e-7)


@pytest.mark.parametrize("c", [1e-12, 1e-150, 1e150])
def test_scale_v_svm(c):
    """By hand: r = (1, 0), (0, 1), (1, 1) with labels +1 give v = (1, 1)."""
    R = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    result = mm.v_svm(R * c, np.ones(3))
    np.testing.assert_allclose(result.v * c, [1.0, 1.0], rtol=1e-9)
    assert result.support.tolist() == [True, True, False]


@pytest.mark.parametrize("c", [1e-11, 1e100])
@pytest.mark.parametrize("per_sequence", [False, True])
def test_scale_w_svm(c, per_sequence, p_x2):
    """With one query z the W-SVM is u z^T / ||z||^2, u the ATT-SVM on the raw tokens."""
    z = np.array([0.6, -0.8])
    Z = np.tile(z, (2, 1)) if per_sequence else z
    result = mm.w_svm(X2 * c, A2, queries=Z)
    np.testing.assert_allclose(result.W * c, np.outer(p_x2, z) / (z @ z), rtol=1e-7,
                               atol=1e-9 * np.abs(p_x2).max())


@pytest.mark.parametrize("c", [1e-12, 1e120])
def test_scale_set_svm(c, p_x2):
    """Singleton sets: the set-SVM is the ATT-SVM."""
    sets = np.zeros((2, 3), bool)
    sets[:, 0] = True
    np.testing.assert_allclose(mm.set_svm(X2 * c, sets).p * c, p_x2, rtol=1e-7)


@pytest.mark.parametrize("c", [1e-11, 1e-100, 1e100])
@pytest.mark.parametrize("figure, expected", [("a", [(0,)]), ("b", [(0,), (1,)])])
def test_scale_locally_optimal_indices(c, figure, expected):
    """The paper's Fig. 1: in (a) only token 0 is locally optimal, in (b) tokens 0 and 1; the
    verdicts depend only on the ordering of scores and on the SVMs, both scale-invariant."""
    inst = mm.data.fig1(variant=figure)
    assert mm.locally_optimal_indices(inst.X * c, inst.Y, inst.v, W=inst.W) == expected


@pytest.mark.parametrize("c", [1e-140, 1e140])
def test_scale_least_distance(c):
    """By hand: p1 >= 2 gives p = (2, 0); scaling G by c gives p / c."""
    np.testing.assert_allclose(mm.least_distance([[c, 0.0]], [2.0]) * c, [2.0, 0.0], rtol=1e-12)


# ----------------------------------------------------------------------------------------------
# 2. Conditioning: X = [[[1, delta], [0, 0], [2, 0]]], alpha = 0 has p = (0, 1 / delta)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("delta", [1e-4, 1e-6, 1e-8, 1e-9, 1e-10])
def test_conditioning_nearly_antiparallel_rows(delta):
    """Rows (1, delta) and (-1, delta): p = (0, 1 / delta) (by hand), certified or refused."""
    X = np.array([[[1.0, delta], [0.0, 0.0], [2.0, 0.0]]])
    try:
        result = mm.att_svm(X, [0])
    except mm.IllConditionedError as error:
        assert "ill-conditioned" in str(error)
        return
    np.testing.assert_allclose(result.p, [0.0, 1 / delta], rtol=1e-9, atol=1e-9 / delta)
    assert np.min(result.constraints[0, 1:]) >= 1 - 1e-9


def test_conditioning_beyond_the_resolution_raises_with_the_estimate():
    """p = (0, 1e12) is 1e12 times longer than either constraint alone needs: beyond the
    documented resolution 1e10, so a clear error with the estimate (a ValueError, so callers
    that catch bad inputs catch it), and is_feasible says no."""
    X = np.array([[[1.0, 1e-12], [0.0, 0.0], [2.0, 0.0]]])
    assert issubclass(mm.IllConditionedError, ValueError)
    with pytest.raises(mm.IllConditionedError, match=r"^X: .*ill-conditioned.*1\.00e\+12"):
        mm.att_svm(X, [0])
    assert not mm.is_feasible(X, [0])


def test_conditioning_nearly_duplicated_selected_token():
    """Token 1 = token 0 + (eps, 0): the row (-eps, 0) >= 1 and (1, -1) p >= 1 from token 2 at
    (0, 1) give, by hand, p = (-1 / eps, -1 / eps - 1) with eps the exact float difference."""
    x1 = 1.0 + 1e-13
    eps = x1 - 1.0  # exact (Sterbenz)
    X = np.array([[[1.0, 0.0], [x1, 0.0], [0.0, 1.0]]])
    result = mm.att_svm(X, [0])
    np.testing.assert_allclose(result.p, [-1 / eps, -1 / eps - 1], rtol=1e-9)
    assert np.all(np.isfinite(result.constraints[0, 1:]))
    assert result.support[0].tolist() == [False, True, True]


def test_conditioning_norm_1e7_against_the_closed_form():
    """Rows (1e-7, +-1): p = (1e7, 0) by hand."""
    X = np.array([[[1e-7, 1.0], [0.0, 0.0]], [[1e-7, -1.0], [0.0, 0.0]]])
    np.testing.assert_allclose(mm.att_svm(X, [0, 0]).p, [1e7, 0.0], rtol=1e-9, atol=1e-6)


def test_conditioning_rows_spanning_16_orders_is_infeasible():
    """The LP G p >= 1 with rows from 1e-9 to 3e7 is infeasible (HiGHS); the group [2, 4, 5]."""
    from scipy.optimize import linprog

    G = np.array([[2e-2, -6e-1], [9.0, 2.0], [2e-9, 4e-9], [-2.0, -10.0], [4e-5, -3e-5],
                  [-3e7, 1e7], [1.0, -0.8]])
    assert linprog(np.zeros(2), A_ub=-G, b_ub=-np.ones(7), bounds=[(None, None)] * 2,
                   method="highs").status == 2
    X = np.stack([G, np.zeros_like(G)], axis=1)
    with pytest.raises(ValueError, match=r"^alpha: .*infeasible.*\[2, 4, 5\]"):
        mm.att_svm(X, np.zeros(7, int))


def test_conditioning_trap_sets_do_not_read_ill_conditioning_as_a_verdict():
    """The complement {0} of S = {1} has the rows (1, 1e-12), (-1, 1e-12): ill-conditioned,
    not "cannot be separated"; trap_sets must not skip S silently."""
    X = np.array([[[1.0, 1e-12], [0.0, 0.0], [2.0, 0.0]], [[0.0, 1.0], [0.0, 0.0], [1.0, 0.0]]])
    with pytest.raises(mm.IllConditionedError, match="ill-conditioned"):
        mm.trap_sets(X, np.ones(2), np.array([0.0, 1e6]))


def test_conditioning_v_svm_nearly_parallel_samples():
    """r = (1, delta) with Y = +1 and r = (1, -delta) with Y = -1: v = (0, 1 / delta)."""
    delta = 1e-7
    result = mm.v_svm([[1.0, delta], [1.0, -delta]], [1.0, -1.0])
    np.testing.assert_allclose(result.v, [0.0, 1 / delta], rtol=1e-9, atol=1e-9 / delta)


def test_conditioning_least_distance_matches_clarabel_on_a_wide_range():
    """Rows of norms 1e-6 to 1e6, feasible: agrees with Clarabel on a formulation written here."""
    rng = np.random.default_rng(5)
    G = rng.normal(size=(12, 4)) * np.logspace(-6, 6, 12)[:, None]
    p_ref = np.abs(rng.normal(size=4)) + 1.0
    G *= np.sign(G @ p_ref)[:, None]  # every row sees p_ref on its positive side
    h = (G @ p_ref) * rng.uniform(0.5, 1.0, size=12)  # p_ref is feasible, p = 0 is not
    p = mm.least_distance(G, h)
    size = np.hypot(np.linalg.norm(G, axis=1), h)  # unit rows: the same polyhedron
    reference = clarabel_ldp(G / size[:, None], h / size)
    np.testing.assert_allclose(p, reference, rtol=1e-6, atol=1e-6 * np.linalg.norm(reference))


# ----------------------------------------------------------------------------------------------
# 4. Large radii: the regularization path
# ----------------------------------------------------------------------------------------------


def limit_loss(inst):
    """lim_{R -> inf} of the logistic risk along the direction that selects opt: the mean of
    log(1 + exp(-gamma_{i, opt_i})) from the scores computed here."""
    gamma = inst.Y[:, None] * np.einsum("ntd,d->nt", inst.X, inst.v)
    return float(np.mean(np.log1p(np.exp(-gamma.max(axis=1)))))


@pytest.mark.parametrize("R", [1e100, 1e160, 1e250])
def test_radii_huge_radius_reaches_the_limit_loss(R):
    inst = mm.data.fig1(variant="a")
    path = mm.regularization_path(inst.X, inst.Y, inst.v, [R], W=inst.W, starts=4, steps=50)
    assert path.risk[0] == pytest.approx(limit_loss(inst), rel=1e-9)
    assert np.linalg.norm(path.points[0] / R) == pytest.approx(1.0, rel=1e-9)


@pytest.mark.parametrize("R", [1e300, 1e308])
def test_radii_beyond_the_representable_range_name_radii(R):
    inst = mm.data.fig1(variant="a")
    with pytest.raises(ValueError, match=r"^radii: .*representable range.*largest accepted"):
        mm.regularization_path(inst.X, inst.Y, inst.v, [1.0, R], W=inst.W)


@pytest.mark.parametrize("radii", [[np.inf], [np.nan], [-1.0], [2.0, 1.0], []])
def test_radii_bad_values_name_radii(radii):
    inst = mm.data.fig1(variant="a")
    with pytest.raises(ValueError, match="^radii: "):
        mm.regularization_path(inst.X, inst.Y, inst.v, radii, W=inst.W)


# ----------------------------------------------------------------------------------------------
# 6. Bounded work: refused at once, with the estimate
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, T", [(5, 11), (4, 20)])
def test_work_locally_optimal_indices_refuses_at_once(n, T, monkeypatch):
    """Refused before the enumeration: only the n T single-sequence feasibility tests ran (the
    work is counted, not timed; a search started before the estimate would run many more, and
    an SVM solve or a selection check would show)."""
    from maxmargin import optimality

    inst = mm.data.gaussian_instance(n, T, 3, seed=0)
    calls = {"feasible": 0, "svm": 0, "check": 0}

    def counted(name, original):
        def call(*args, **kwargs):
            calls[name] += 1
            return original(*args, **kwargs)
        return call

    monkeypatch.setattr(optimality, "_is_feasible", counted("feasible", optimality._is_feasible))
    monkeypatch.setattr(optimality, "_att_svm", counted("svm", optimality._att_svm))
    monkeypatch.setattr(optimality, "_check_selection",
                        counted("check", optimality._check_selection))
    with pytest.raises(ValueError, match=r"^max_cost: .*costs up to [0-9.e+]+ units.*max_cost=5000"):
        mm.locally_optimal_indices(inst.X, inst.Y, inst.v)
    assert calls == {"feasible": n * T, "svm": 0, "check": 0}


def test_work_cost_estimate_counts_every_solve_by_hand():
    """n = 3 sequences of T = 2 selectable tokens, d = 1: the search tests 4 prefixes of 2
    sequences (2 rows each), 8 of 3 (3 rows), and checks 8 selections (3 rows): 4 solves of
    1 + 2 * 1 * 2 / 1000 units and 16 of 1 + 3 * 1 * 2 / 1000 (the documented model)."""
    from maxmargin.optimality import enumeration_cost

    assert enumeration_cost([2, 2, 2], 2, 1) == pytest.approx(4 * 1.004 + 16 * 1.006, rel=1e-12)


def test_work_every_selection_feasible_runs_at_most_the_estimated_solves():
    """Count the SVM solves of an instance where nothing is pruned (d = 20 > n (T - 1): every
    selection is feasible): prefix tests plus final checks equal the estimate's solve count."""
    from maxmargin import optimality

    rng = np.random.default_rng(0)
    X = rng.normal(size=(3, 3, 20))
    calls = {"feasible": 0, "svm": 0}
    original_feasible, original_svm = optimality._is_feasible, optimality._att_svm

    def feasible(*args, **kwargs):
        calls["feasible"] += 1
        return original_feasible(*args, **kwargs)

    def svm(*args, **kwargs):
        calls["svm"] += 1
        return original_svm(*args, **kwargs)

    optimality._is_feasible, optimality._att_svm = feasible, svm
    try:
        found = mm.feasible_selections(X, np.ones(3), rng.normal(size=20))
    finally:
        optimality._is_feasible, optimality._att_svm = original_feasible, original_svm
    assert len(found) == 27
    # 9 single-token tests, then 9 + 27 prefix tests and 27 final ATT-SVMs
    assert calls == {"feasible": 9 + 9 + 27, "svm": 27}


def test_work_selection_census_refuses_and_max_cost_raises_the_cap():
    inst = mm.data.gaussian_instance(3, 4, 2, seed=0)
    with pytest.raises(ValueError, match="^max_cost: "):
        mm.selection_census(inst.X, inst.Y, inst.v, max_cost=1)
    census = mm.selection_census(inst.X, inst.Y, inst.v, max_cost=1e4)
    assert census.total == 4 ** 3


def test_work_optimal_sets_estimate_by_hand():
    """n = 2, T = 4: 4 vertices + 6 edge midpoints + 1 centre = 11 starts, each at most 500
    SLSQP iterations of T^3 = 64 units (the documented model): 704 000."""
    from maxmargin.heads import optimal_sets_work

    assert optimal_sets_work(2, 4) == 2 * 11 * 500 * 64


def test_work_optimal_sets_refuses_at_once(monkeypatch):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2, 40, 3))
    head = mm.mlp_head(rng.normal(size=4), rng.normal(size=(4, 3)))
    import scipy.optimize

    def no_search(*args, **kwargs):
        raise AssertionError("optimal_sets started its search before refusing")

    monkeypatch.setattr(scipy.optimize, "minimize", no_search)  # counted, not timed
    with pytest.raises(ValueError, match=r"^max_work: .*T=40.*costs up to"):
        mm.optimal_sets(X, np.ones(2), head)


@pytest.mark.parametrize("bad, error", [(True, TypeError), ("many", TypeError), (-1.0, ValueError),
                                        (np.nan, ValueError), (0, ValueError)])
def test_work_bad_caps_are_named(bad, error):
    inst = mm.data.fig1(variant="a")
    with pytest.raises(error, match="^max_cost: "):
        mm.feasible_selections(inst.X, inst.Y, inst.v, W=inst.W, max_cost=bad)
    rng = np.random.default_rng(0)
    head = mm.mlp_head(rng.normal(size=2), rng.normal(size=(2, 3)))
    with pytest.raises(error, match="^max_work: "):
        mm.optimal_sets(inst.X, inst.Y, head, max_work=bad)


# ----------------------------------------------------------------------------------------------
# Solver arguments: each error names its argument
# ----------------------------------------------------------------------------------------------

BAD_ARGUMENTS = {
    "X with NaN": (lambda: mm.att_svm(np.where(X2 == 0.5, np.nan, X2), A2), ValueError, "^X: non-finite"),
    "X with inf": (lambda: mm.w_svm(np.where(X2 == 0.5, np.inf, X2), A2, queries=[1.0, 0.0]), ValueError, "^X: non-finite"),
    "X 2-D": (lambda: mm.att_svm(X2[0], [0]), ValueError, "^X: expected shape"),
    "X complex": (lambda: mm.att_svm(X2 + 1j, A2), TypeError, "^X: "),
    "X of strings": (lambda: mm.is_feasible([[["a", "b"]]], [0]), TypeError, "^X: "),
    "alpha float": (lambda: mm.att_svm(X2, [0.5, 0]), TypeError, "^alpha: "),
    "alpha bool": (lambda: mm.att_svm(X2, [True, False]), TypeError, "^alpha: "),
    "alpha out of range": (lambda: mm.att_svm(X2, [0, 3]), ValueError, "^alpha: index 3"),
    "alpha negative": (lambda: mm.w_svm(X2, [0, -1], queries=[1.0, 0.0]), ValueError, "^alpha: index -1"),
    "alpha shape": (lambda: mm.att_svm(X2, [0]), ValueError, "^alpha: expected one index"),
    "W shape": (lambda: mm.att_svm(X2, A2, W=np.eye(3)), ValueError, "^W: expected shape"),
    "W NaN": (lambda: mm.att_svm(X2, A2, W=np.array([[1.0, np.nan], [0, 1]])), ValueError, "^W: non-finite"),
    "relaxed ints": (lambda: mm.att_svm(X2, A2, relaxed=[0, 1]), TypeError, "^relaxed: "),
    "tol zero": (lambda: mm.att_svm(X2, A2, tol=0.0), ValueError, "^tol: "),
    "tol NaN": (lambda: mm.v_svm(X2[:, 0], [1.0, -1.0], tol=np.nan), ValueError, "^tol: "),
    "solver name": (lambda: mm.att_svm(X2, A2, solver="gurobi"), ValueError, "^solver: "),
    "R with NaN": (lambda: mm.v_svm([[1.0, np.nan]], [1.0]), ValueError, "^R: non-finite"),
    "R 1-D": (lambda: mm.v_svm([1.0, 2.0], [1.0, 1.0]), ValueError, "^R: expected shape"),
    "Y zero label": (lambda: mm.v_svm([[1.0, 0.0]], [0.0]), ValueError, "^Y: labels"),
    "queries zero": (lambda: mm.w_svm(X2, A2, queries=[0.0, 0.0]), ValueError, "^queries: the query vector is zero"),
    "queries shape": (lambda: mm.w_svm(X2, A2, queries=np.ones((3, 2))), ValueError, "^queries: expected shape"),
    "sets all True": (lambda: mm.set_svm(X2, np.ones((2, 3), bool)), ValueError, "^sets: "),
    "G with inf": (lambda: mm.least_distance([[np.inf, 0.0]], [1.0]), ValueError, "^G: non-finite"),
    "h with NaN": (lambda: mm.least_distance([[1.0, 0.0]], [np.nan]), ValueError, "^h: non-finite"),
    "least_distance tol": (lambda: mm.least_distance([[1.0, 0.0]], [1.0], feasibility_tol=-1.0), ValueError,
                          "^feasibility_tol: "),
    # starts=0 used to pass validation and fail later unpacking None (no start at the first radius)
    "path starts zero": (lambda: _fig1a_path(starts=0), ValueError, "^starts: must be >= 1"),
    "path seed negative": (lambda: _fig1a_path(seed=-1), ValueError, "^seed: must be >= 0"),
    "path seed float": (lambda: _fig1a_path(seed=1.5), TypeError, "^seed: expected an integer"),
}


def _fig1a_path(**kwargs):
    inst = mm.data.fig1(variant="a")
    return mm.regularization_path(inst.X, inst.Y, inst.v, [1.0], W=inst.W, steps=5, **kwargs)


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS))
def test_arguments_are_named(case):
    call, error, pattern = BAD_ARGUMENTS[case]
    with pytest.raises(error, match=pattern):
        call()


def test_arguments_zero_row_of_r_is_infeasible_and_named():
    """A zero sample r_i = 0 makes Y_i v^T r_i = 0 < 1 for every v (by hand)."""
    with pytest.raises(ValueError, match=r"^R, Y: .*row 1 of R is zero"):
        mm.v_svm([[1.0, 0.0], [0.0, 0.0]], [1.0, 1.0])
