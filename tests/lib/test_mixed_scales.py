"""Property tests (hypothesis): SVMs on sequences (or per-sequence queries) of very different
scales either return a solution that satisfies every constraint, checked in exact arithmetic
here, or refuse naming the argument; never an infeasible W reported as optimal.

The independent computation is ``exact_values``: the constraint values (x_{i,alpha_i} - x_it)^T
W z_i (or (k_{i,alpha_i} - k_it)^T p) of the returned float64 solution, summed in Python's
``fractions`` from the float64 inputs, one product at a time, with no use of the library.

Bug caught (issue 22, found by its review): the KKT certificate of the least-distance solver
bounds the backward error only, so with per-sequence queries scaled (1e-100, 1, 1) the returned
W missed the constraints of the unit-scale sequences by 1.3e84 while ``support`` called them
tight (its tolerance tol * ||d|| ||z|| ||W|| was 1e91); with query scales (1e154, 1e-154, 1)
that tolerance overflowed to inf and flagged a constraint of value 3.1e291 as support.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import maxmargin as mm

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True)
EXPONENTS = st.tuples(*[st.integers(-300, 300)] * 3)


def instance(seed=7):
    """The review's instance: X (3, 3, 3), alpha the argmax of a random score, Z (3, 3)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((3, 3, 3))
    rng.standard_normal(3)
    alpha = np.argmax(X @ rng.standard_normal(3), axis=1)
    return X, alpha, rng.standard_normal((3, 3))


def exact_values(X, alpha, W, Z):
    """{(i, t): (x_{i,alpha_i} - x_it)^T W z_i} in exact rationals for t != alpha_i."""
    F = np.vectorize(Fraction, otypes=[object])
    X, W, Z = F(X), F(W), F(Z)
    out = {}
    for i in range(X.shape[0]):
        for t in range(X.shape[1]):
            if t != alpha[i]:
                d = X[i, alpha[i]] - X[i, t]
                out[i, t] = sum(d[a] * W[a, b] * Z[i, b] for a in range(len(d)) for b in range(len(d)))
    return out


def assert_valid_or_refused(call, X, alpha, W_of, Z, names):
    """call() either raises a ValueError whose message starts with one of ``names``, or returns
    a result whose every exact constraint value is >= 1 - 1e-6, whose reported values agree with
    the exact ones to their rounding, and whose support holds only values within 1/2 of 1."""
    try:
        result = call()
    except ValueError as error:
        assert str(error).split(":")[0] in names, str(error)
        return None
    exact = exact_values(X, alpha, W_of(result), Z)
    for (i, t), value in exact.items():
        assert value >= Fraction(1) - Fraction(1e-6), ((i, t), float(value))
        if result.support[i, t]:
            assert abs(value - 1) <= Fraction(1, 2), ((i, t), float(value))
    return result


@given(k=EXPONENTS)
@example(k=(-100, 0, 0))  # the review's case: W off by 1.3e84 on sequences 1 and 2
@example(k=(-300, 0, 0))
@example(k=(154, -154, 0))  # the support tolerance overflowed to inf
@SETTINGS
def test_w_svm_with_queries_of_mixed_scales_is_feasible_or_refused(k):
    X, alpha, Z = instance()
    Z = Z * (10.0 ** np.array(k))[:, None]
    assert_valid_or_refused(lambda: mm.w_svm(X, alpha, queries=Z), X, alpha, lambda r: r.W, Z,
                            {"queries", "X"})


@given(k=EXPONENTS)
@example(k=(-100, 0, 0))  # p off by 1.3e84 on sequences 1 and 2
@example(k=(-20, 0, 0))
@SETTINGS
def test_att_svm_with_sequences_of_mixed_scales_is_feasible_or_refused(k):
    X, alpha, _ = instance()
    X = X * (10.0 ** np.array(k))[:, None, None]
    e1 = np.eye(3)[0]
    # (x_a - x_t)^T p = (x_a - x_t)^T W z for W = p e1^T and z = e1: the same exact check
    assert_valid_or_refused(lambda: mm.att_svm(X, alpha), X, alpha, lambda r: np.outer(r.p, e1),
                            np.broadcast_to(e1, (3, 3)), {"X"})


def test_the_review_case_is_refused_naming_queries():
    """The instance the review found: refused, naming queries (their scales differ by 1e100)."""
    X, alpha, Z = instance()
    Z = Z * np.array([1e-100, 1.0, 1.0])[:, None]
    with pytest.raises(mm.IllConditionedError, match=r"^queries: .*sequence 1"):
        mm.w_svm(X, alpha, queries=Z)


def test_modest_mixed_scales_are_solved_and_match_the_exact_check():
    """Scales (1e-3, 1, 10): solved (no refusal), constraints exact to 1e-6, reported values
    equal to the exact ones to 1e-9, and the same W as cvxpy/Clarabel (relative 1e-6)."""
    X, alpha, Z = instance()
    Z = Z * np.array([1e-3, 1.0, 10.0])[:, None]
    result = assert_valid_or_refused(lambda: mm.w_svm(X, alpha, queries=Z), X, alpha,
                                     lambda r: r.W, Z, set())
    exact = exact_values(X, alpha, result.W, Z)
    for (i, t), value in exact.items():
        assert result.constraints[i, t] == pytest.approx(float(value), rel=1e-9)
    reference = mm.w_svm(X, alpha, queries=Z, solver="cvxpy")
    np.testing.assert_allclose(result.W, reference.W, rtol=1e-6,
                               atol=1e-6 * np.abs(reference.W).max())


def test_a_violated_value_is_refused_even_where_rounding_cannot_explain_it():
    """A solver's solution 1e-5 short of a constraint whose terms are of size 10 (rounding at
    most 1e-14): refused, naming the argument, though the support rule (tol * scale = 1e-7)
    would not flag it. Bug caught: the exact re-evaluation accepting any value it computes."""
    from maxmargin._forward import _check_values

    values = np.array([[np.inf, 1 - 1e-5]])
    others = np.array([[False, True]])
    with pytest.raises(mm.IllConditionedError, match=r"^X: the solution violates .* by 1\.0e-05"):
        _check_values(values, 1.0, np.array([[0.0, 10.0]]), 3, others, "X",
                      lambda i, t: Fraction(1 - 1e-5))
    ok = _check_values(np.array([[np.inf, 1 - 1e-7]]), 1.0, np.array([[0.0, 10.0]]), 3, others,
                       "X", lambda i, t: Fraction(1 - 1e-7))
    assert ok[0, 1] == 1 - 1e-7


# --- Sequences and queries scaled together; false refusals and unnamed errors (issue 22 review) --


def reference_svm(G):
    """Independent: min ||x||^2 s.t. G_j x >= 1, solved by cvxpy/Clarabel on rows divided by
    their norms and in units of L = max_j 1 / ||G_j|| (both exact rescalings of the problem), so
    that rows of sizes 1e-12 ... 1e12 are one well-scaled program. Returns (x, active), active
    the rows whose multiplier exceeds 1e-6 of the largest."""
    import cvxpy as cp

    norms = np.linalg.norm(G, axis=1)
    L = float((1 / norms).max())
    x = cp.Variable(G.shape[1])
    constraint = (G / norms[:, None]) @ x >= (1 / norms) / L
    cp.Problem(cp.Minimize(cp.sum_squares(x)), [constraint]).solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    dual = np.asarray(constraint.dual_value)
    return x.value * L, dual > 1e-6 * dual.max()


def mixed(seed, k, n=3, T=4, d=8):
    """A random instance whose sequence i (tokens and query) is scaled by 10^k_i."""
    rng = np.random.default_rng(seed)
    c = 10.0 ** np.array(k, dtype=float)
    return (rng.standard_normal((n, T, d)) * c[:, None, None],
            rng.standard_normal((n, d)) * c[:, None])


def exact_ok(values):
    return all(v >= Fraction(1) - Fraction(1e-6) for v in values)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [(3, -3, 0), (-6, 0, 0)])
def test_w_svm_solves_sequences_and_queries_of_mixed_scales(seed, k):
    """X and queries scaled per sequence by 10^k_i (constraint rows spread by 10^(2 k)): solved,
    every constraint >= 1 - 1e-6 in exact arithmetic, W equal to an independent cvxpy solve of
    the row-normalized program (relative 1e-6), and the support equal to its active set.
    Bug caught: the review's false refusals (old code: 3 of 8 seeds refused at (3, -3, 0), 5 of
    8 at (-6, 0, 0), "violates ... by 1.8e-04": float64 rounding of a correct W leaves the
    small-scale constraints short by up to the rounding of their values; the fix re-solves once
    with those right sides raised by that rounding)."""
    X, Z = mixed(seed, k)
    alpha = np.array([1, 0, 3])  # not all 0: rows of G map to (i, t != alpha_i)
    result = mm.w_svm(X, alpha, queries=Z)
    assert exact_ok(exact_values(X, alpha, result.W, Z).values())
    rows = [(i, t) for i in range(3) for t in range(4) if t != alpha[i]]
    G = np.array([np.outer(X[i, alpha[i]] - X[i, t], Z[i]).ravel() for i, t in rows])
    W, active = reference_svm(G)
    np.testing.assert_allclose(result.W.ravel(), W, rtol=0, atol=1e-6 * np.abs(W).max())
    assert [bool(result.support[i, t]) for i, t in rows] == list(active)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("k", [(6, -6, 0), (-12, 0, 0)])
def test_att_svm_and_v_svm_solve_sequences_of_mixed_scales(seed, k):
    """att_svm on sequences scaled by 10^k_i, v_svm on samples scaled likewise: solved, exactly
    feasible, equal to the independent row-normalized cvxpy solve, support = its active set.
    Bug caught: refusals of these well-posed problems (old code, seeds 0-5: att_svm refused 3
    at (6, -6, 0) and 5 at (-12, 0, 0); v_svm 2 at (6, -6, 0) and 2 at (-12, 0, 0))."""
    X, _ = mixed(seed, k)
    alpha = np.zeros(3, dtype=int)
    result = mm.att_svm(X, alpha)
    e1 = np.eye(8)[0]
    assert exact_ok(exact_values(X, alpha, np.outer(result.p, e1), np.broadcast_to(e1, (3, 8)))
                    .values())
    p, active = reference_svm((X[:, :1] - X[:, 1:]).reshape(-1, 8))
    np.testing.assert_allclose(result.p, p, rtol=0, atol=1e-6 * np.abs(p).max())
    assert np.array_equal(result.support[:, 1:].ravel(), active)

    rng = np.random.default_rng(seed)
    R = rng.standard_normal((6, 4)) * np.resize(10.0 ** np.array(k, dtype=float), 6)[:, None]
    Y = np.where(R @ rng.standard_normal(4) >= 0, 1.0, -1.0)
    res = mm.v_svm(R, Y)
    F = np.vectorize(Fraction, otypes=[object])
    assert exact_ok([y * sum(F(R[i]) * F(res.v)) for i, y in enumerate(Y.astype(int))])
    v, active = reference_svm(Y[:, None] * R)
    np.testing.assert_allclose(res.v, v, rtol=0, atol=1e-6 * np.abs(v).max())
    assert np.array_equal(res.support, active)


@pytest.mark.parametrize("k", [(300, 0, -300), (-300, 0, 0), (160, 0, 0), (-160, 0, 0)])
def test_w_svm_refuses_constraint_matrices_outside_float64_naming_the_argument(k):
    """Sequence i's constraint matrices (x_{i,alpha_i} - x_it) z_i^T of size 10^(2 k_i) that
    overflow or fall below the smallest normal number: a ValueError naming X or queries.
    Bugs caught: (300, 0, -300) raised numpy's "zero-size array to reduction operation maximum"
    (rows of inf and 0 inside the solver); (-300, 0, 0) said "alpha: W-SVM is infeasible" of a
    feasible problem (its W, about 1e600, is not representable)."""
    X, Z = mixed(0, k)
    with pytest.raises(ValueError, match=r"^(X|queries): the largest entry of the constraint "
                                         r"matrix .* (overflows|is below)"):
        mm.w_svm(X, np.zeros(3, dtype=int), queries=Z)


@given(k=EXPONENTS)
@example(k=(300, 0, -300))
@example(k=(3, -3, 0))
@SETTINGS
def test_w_svm_with_sequences_and_queries_of_mixed_scales_is_feasible_or_refused(k):
    X, Z = mixed(1, k, n=3, T=3, d=3)
    alpha = np.zeros(3, dtype=int)
    assert_valid_or_refused(lambda: mm.w_svm(X, alpha, queries=Z), X, alpha, lambda r: r.W, Z,
                            {"queries", "X"})


def test_support_that_float64_cannot_decide_is_refused_not_guessed():
    """X and queries of sequence 0 scaled by 1e-8 (constraint rows 1e-16 of the others): W needs
    ||W|| ~ 1e15, so the other sequences' constraint values carry rounding of about 20, and
    whether one of them is a support constraint (value 1) cannot be read from its value. The
    call refuses naming the argument, with that reason, and does not claim a violation or
    infeasibility. Bug caught: the old message said the solution "violates the constraint ...
    by 2.3e+01", a statement about the library's own rounding, not about the problem."""
    X, Z = mixed(0, (-8, 0, 0))
    with pytest.raises(mm.IllConditionedError,
                       match=r"^(X|queries): .* cannot be told from a support constraint"):
        mm.w_svm(X, np.zeros(3, dtype=int), queries=Z)


@pytest.mark.parametrize("c", [1e200, 1e-200])
def test_shared_query_w_svm_beyond_float64_is_refused_for_its_reason(c):
    """One query p, X and p both scaled by c: W^mm = u p^T / ||p||^2 scales like 1 / c^2, about
    1e-400 or 1e400, so no float64 W exists: a ValueError naming X that says W leaves float64.
    An infeasible instance at the same scales is called infeasible. Bugs caught: at c = 1e200
    the feasible instance was refused with "violates ... by 1.0e+00 ... the scales of the
    sequences differ" (W had underflowed to 0; the scales are equal) and at 1e-200 with
    "constraint values ... exceed float64" (W was inf); the infeasible one raised numpy's
    "zero-size array to reduction operation maximum" (rows D p^T of inf)."""
    rng = np.random.default_rng(0)
    p = rng.standard_normal((3, 5))[0]
    feasible = rng.standard_normal((2, 3, 5))
    assert mm.w_svm(feasible, [0, 0], queries=p).norm > 0  # feasible at unit scale
    with pytest.raises(ValueError, match=r"^X: W\^mm = u p\^T / \|\|p\|\|\^2 .* leave the range "
                                         r"of float64"):
        mm.w_svm(feasible * c, [0, 0], queries=p * c)
    infeasible = np.random.default_rng(0).standard_normal((3, 4, 5))
    for scale in (1.0, c):
        with pytest.raises(ValueError, match=r"^alpha: W-SVM is infeasible"):
            mm.w_svm(infeasible * scale, [0, 0, 0], queries=p * scale)


def planted_sets(scales, seed=1):
    """Three sequences of three tokens with tokens 0 and 1 tied under a planted direction u and
    token 2 below them, sequence i scaled by scales[i] (the review's instance)."""
    rng = np.random.default_rng(seed)
    u = rng.normal(size=4)
    X = rng.normal(size=(3, 3, 4))
    for i in range(3):
        X[i, 1] += ((X[i, 0] - X[i, 1]) @ u) / (u @ u) * u
        X[i, 2] += ((X[i, 0] - X[i, 2]) @ u - 1 - abs(rng.normal())) / (u @ u) * u
    return X * np.array(scales, dtype=float)[:, None, None]


@pytest.mark.parametrize("scales", [(1e6, 1, 1e-6), (1e8, 1, 1e-8), (1e20, 1, 1e-20),
                                    (1e100, 1, 1e-100)])
def test_set_svm_keeps_the_equalities_of_every_sequence_at_mixed_scales(scales):
    """set_svm on sequences scaled (c, 1, 1/c): the in-set tokens' scores are equal to their
    rounding (checked exactly: |(k_i0 - k_i1)^T p| <= 1e-6 + 2 (d + 2) eps sum |k_i0 - k_i1| |p|),
    every inequality >= 1 - 1e-6 exactly, and ||p|| equal to an independent cvxpy solve of the
    program with each equation and inequality divided by its norm (relative 1e-6).
    Bug caught: the null space of the equalities was cut at 1e-12 of the largest row of E and
    G together, so the equations of the small sequence (and at 1e20 all of them) were dropped
    as rounding: p returned with an equality off by 1.59 (terms of size 1) and ||p|| 1.342e8
    instead of 1.505e8, silently."""
    import cvxpy as cp

    X = planted_sets(scales)
    sets = np.array([[True, True, False]] * 3)
    result = mm.set_svm(X, sets)
    F = np.vectorize(Fraction, otypes=[object])
    eps = np.finfo(np.float64).eps
    for i in range(3):
        d01 = X[i, 0] - X[i, 1]
        bound = 1e-6 + 2 * 6 * eps * float(np.abs(d01) @ np.abs(result.p))
        assert abs(float(sum(F(X[i, 0]) * F(result.p)) - sum(F(X[i, 1]) * F(result.p)))) <= bound
        for t in (0, 1):
            gap = sum(F(X[i, t]) * F(result.p)) - sum(F(X[i, 2]) * F(result.p))
            assert gap >= Fraction(1) - Fraction(1e-6)
    E = np.array([X[i, 0] - X[i, 1] for i in range(3)])
    G = np.array([X[i, t] - X[i, 2] for i in range(3) for t in (0, 1)])
    norms = np.linalg.norm(G, axis=1)
    L = float((1 / norms).max())
    q = cp.Variable(4)
    cp.Problem(cp.Minimize(cp.sum_squares(q)),
               [(E / np.linalg.norm(E, axis=1)[:, None]) @ q == 0,
                (G / norms[:, None]) @ q >= (1 / norms) / L]).solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    assert result.norm == pytest.approx(np.linalg.norm(q.value) * L, rel=1e-6)


def test_an_equality_missed_beyond_its_rounding_is_refused():
    """_check_equalities on hand-made values: a difference of scores of 1e-3 with terms of size
    1 (rounding 1e-15) is refused naming the argument; one of 1e-3 with terms of size 1e14
    (rounding about 0.04) is accepted as rounding. Bug caught: a solver that loses an equation
    (the null-space cut above) going unnoticed because only the inequalities are checked."""
    from maxmargin._forward import _check_equalities

    equal = np.array([[False, True]])
    D = np.array([[[0.0, 0.0], [1.0, -1.0]]])
    with pytest.raises(mm.IllConditionedError, match=r"^X: the solution gives token 1 of "
                                                     r"sequence 0 a score 1\.0e-03 away"):
        _check_equalities(D, np.array([0.5005, 0.4995]), equal, "X")
    _check_equalities(D * 1e14, np.array([0.5 + 5e-18, 0.5 - 5e-18]), equal, "X")


def test_a_tie_up_to_rounding_next_to_a_small_sequence_is_solved():
    """Keys 0.1 + 0.2 and 0.3 in one set (equal up to rounding: a tie) next to a sequence of
    scale 1e-12 that needs ||p|| = 1e12: p = (1e12, 0), the optimum when the two keys tie
    exactly (p must have p_1 = 0 for any other sequence-0 pair... here only the tie and the
    zero token matter: (0.3, 1) p >= 1 + 0 p and 1e-12 p_1 >= 1 give p_1 = 1e12, p_2 = 0).
    Bug caught (review of this fix): the rounding tie, dropped from the equations, was still
    checked as an equality and refused ("a score 5.6e-05 away")."""
    X = np.array([[[0.1 + 0.2, 1.0], [0.3, 1.0], [0.0, 0.0]],
                  [[1e-12, 0.0], [0.0, 1e-12], [0.0, 0.0]]])
    result = mm.set_svm(X, np.array([[True, True, False], [True, False, False]]))
    np.testing.assert_allclose(result.p, [1e12, 0.0], rtol=1e-12, atol=1e-3)


def test_the_subnormal_refusal_reports_the_entry_truly():
    """A constraint matrix whose largest entry is 2^-1023: refused naming X, reporting the
    entry as 2^-1023.0 (it said 2^-1022) and without the false claim that W would leave
    float64's range (W = 2^1023 is representable)."""
    with pytest.raises(ValueError, match=r"^X: .*\(about 2\^-1023\.0\) is below .*at the top of "
                                         r"float64's range or beyond"):
        mm.w_svm(np.array([[[2.0 ** -1023], [0.0]]]), [0], queries=np.array([[1.0]]))
