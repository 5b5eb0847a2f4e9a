"""One tie rule for scores (optimality and trap sets), checked against exact arithmetic.

Two scores of sequence i tie when they differ by at most tol_i = 16 (d + 2) eps s_i, with
s_i = max_t sum_j |v_j x_itj| (``maxmargin.problem.tie_tolerances``): the computed scores are
within d u s_i (u = eps / 2) of the exact ones. The references below compute the scores of the
float64 data exactly, with ``fractions.Fraction``, and decide ties and strict order there, with no
tolerance: every instance is built so that its exact scores are either equal or apart by far
more than any rounding (each test asserts it), so the library's verdict must be the exact one.
"""
from __future__ import annotations

import itertools
from fractions import Fraction

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import maxmargin as mm

EPS = np.finfo(np.float64).eps


def exact_scores(X, Y, v) -> list[list[Fraction]]:
    """gamma_it = Y_i sum_j v_j x_itj of the float64 data, in exact rational arithmetic."""
    return [[Fraction(float(Y[i])) * sum(Fraction(float(a)) * Fraction(float(b))
                                         for a, b in zip(v, x))
             for x in X[i]] for i in range(len(X))]


def rounding_bound(X, v) -> np.ndarray:
    """(n,) (d + 2) eps max_t sum_j |v_j x_itj|: how far rounding can move a difference of two
    scores of each sequence (the two scores' summation, and decimal inputs' conversion)."""
    d = X.shape[2]
    return (d + 2) * EPS * np.max(np.abs(X) @ np.abs(v), axis=1)


def assert_exact_or_far_apart(X, Y, v, factor: float = 1000.0) -> None:
    """The premise of the comparisons with exact arithmetic: in each sequence, any two exact
    scores are equal or apart by more than ``factor`` times the rounding bound."""
    bound = rounding_bound(X, v)
    for i, row in enumerate(exact_scores(X, Y, v)):
        for a, b in itertools.combinations(row, 2):
            assert a == b or abs(a - b) > factor * Fraction(float(bound[i])), (i, a, b)


# ----------------------------------------------------------------------------------------------
# F2: local optimality decided by float equality
# ----------------------------------------------------------------------------------------------


def permutation_tie():
    """One sequence: token 1 is token 0 with its coordinates permuted and v = 1, so the exact
    scores are equal; float64 sums them in another order and they come out 1 ulp apart."""
    a = np.array([0.078054870429763, -5.456848130, 0.00246374289, -0.00831969313, 6.65288295])
    return np.array([[a, a[[1, 3, 4, 0, 2]]]]), np.ones(1), np.ones(5)


def test_an_exact_tie_rounded_apart_is_not_a_strict_winner():
    """Bug caught (review F2): is_locally_optimal, check_selection, feasible_selections and
    locally_optimal_indices compared scores with float ``>=``, so a tie computed one ulp apart
    made token 1 strictly best (``is_locally_optimal(X, Y, v, [1])`` True, the only locally
    optimal selection (1,)), while optimal_indices called the same pair tied. Reference: the
    exact scores are equal, so neither token is strictly above the other (its only support
    token): no selection is locally optimal, and the optimal token is not unique."""
    X, Y, v = permutation_tie()
    exact = exact_scores(X, Y, v)[0]
    assert exact[0] == exact[1]                      # a tie in exact arithmetic
    gamma = mm.scores(X, Y, v)[0]
    assert gamma[0] != gamma[1]                      # rounded apart: the case under test
    for alpha in ([0], [1]):
        assert mm.is_locally_optimal(X, Y, v, alpha) is False, alpha
        sel = mm.check_selection(X, Y, v, alpha)
        assert not sel.locally_optimal and sel.violations == ((0, 1 - alpha[0]),), sel
    assert mm.locally_optimal_indices(X, Y, v) == []
    assert [(s.alpha, s.locally_optimal) for s in mm.feasible_selections(X, Y, v)] == \
        [((0,), False), ((1,), False)]
    with pytest.raises(ValueError, match="sequence 0 has two tokens tied"):
        mm.optimal_indices(X, Y, v)


def tie_instance(seed: int):
    """n = 2, T = 4, d = 5, Gaussian tokens, v = 1: in each sequence token 1 is token 0 with its
    coordinates permuted (an exact tie of their scores), tokens 2 and 3 are free."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((2, 4, 5))
    for i in range(2):
        X[i, 1] = X[i, 0][rng.permutation(5)]
    return X, rng.choice([-1.0, 1.0], 2), np.ones(5)


def exact_locally_optimal(X, Y, v) -> list[tuple[int, ...]]:
    """Every selection tried: feasibility and support tokens from cvxpy (mm.att_svm with
    solver="cvxpy"), local optimality decided on the exact scores (strictly above every support
    token, no tolerance)."""
    n, T, _ = X.shape
    exact = exact_scores(X, Y, v)
    found = []
    for alpha in itertools.product(range(T), repeat=n):
        try:
            support = mm.att_svm(X, alpha, solver="cvxpy").support
        except ValueError:
            continue
        if all(exact[i][t] < exact[i][alpha[i]] for i, t in np.argwhere(support)):
            found.append(alpha)
    return found


# seeds whose ties are rounded apart in float64 in one sequence or both (asserted below); on
# 0, 1, 3 and 6 the float comparison listed a selection that is not locally optimal
TIE_SEEDS = [0, 1, 2, 3, 4, 6]


@pytest.mark.parametrize("seed", TIE_SEEDS)
def test_locally_optimal_selections_with_exact_ties_match_exact_arithmetic(seed):
    """Bug caught (review F2): a support token whose exact score ties the selected token's but
    rounds one ulp below it was not a violation (float ``>=``), so selections that are not
    locally optimal were listed (seed 0: (1, 0) besides (0, 2); seed 3: (1, 3) besides
    (2, 3)). Reference: the brute force above, with exact scores."""
    X, Y, v = tie_instance(seed)
    assert_exact_or_far_apart(X, Y, v)
    gamma = mm.scores(X, Y, v)
    assert np.any(gamma[:, 0] != gamma[:, 1])  # some exact tie is rounded apart
    expected = exact_locally_optimal(X, Y, v)
    assert mm.locally_optimal_indices(X, Y, v) == expected
    table = {s.alpha: s.locally_optimal for s in mm.feasible_selections(X, Y, v)}
    for alpha, verdict in table.items():
        assert verdict == (alpha in expected), alpha
        assert mm.is_locally_optimal(X, Y, v, alpha) == verdict, alpha


# ----------------------------------------------------------------------------------------------
# F3: trap sets' equal scores judged on the scale of all the sequences
# ----------------------------------------------------------------------------------------------

W3 = np.diag([1.0, 1.0, 0.0])   # attention sees the first two coordinates
E3 = np.array([0.0, 0.0, 1.0])  # the head reads the third: gamma_it = x_it[2] (Y = 1)


def mixed_scale_instance(big: float):
    """Sequence 0: (-2, 3 | 1) [optimal], (0, 0 | 0), (-0.5, 0 | -1e-4); sequence 1:
    (1, 0 | big) [optimal], (0, 0 | 0), (0, 0 | 0). The keys do not depend on ``big``."""
    X = np.array([[[-2.0, 3.0, 1.0], [0.0, 0.0, 0.0], [-0.5, 0.0, -1e-4]],
                  [[1.0, 0.0, big], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    return X, np.ones(2), E3


def exact_trap_sets(X, Y, v, W) -> list[tuple[int, ...]]:
    """Every trap set S by the module's criterion, with q from cvxpy and the scores compared
    exactly (equal means equal as rationals); gaps with a 1e-6 margin (they are O(1) here)."""
    n, T, d = X.shape
    K = X @ W
    exact = exact_scores(X, Y, v)
    opt = [max(range(T), key=row.__getitem__) for row in exact]
    found = []
    for size in range(1, n):
        for S in itertools.combinations(range(n), size):
            rest = [i for i in range(n) if i not in S]
            A = np.array([K[i, opt[i]] - K[i, t] for i in rest for t in range(T) if t != opt[i]])
            p = cp.Variable(d)
            problem = cp.Problem(cp.Minimize(cp.sum_squares(p)), [A @ p >= 1])
            problem.solve()
            if problem.status != cp.OPTIMAL:
                continue
            ok = True
            for i in S:
                logit = K[i] @ p.value
                t = max((u for u in range(T) if u != opt[i]), key=lambda u: logit[u])
                for u in range(T):
                    gap = logit[t] - logit[u]
                    if u == opt[i] or exact[i][u] != exact[i][t]:
                        ok &= gap > 1 + 1e-6
                    else:
                        ok &= gap >= -1e-6
            if ok:
                found.append(S)
    return found


@pytest.mark.parametrize("big", [1.0, 1e6, 1e12, 1e300])
def test_trap_equal_scores_are_judged_per_sequence(big):
    """Bug caught (review F3): trap_sets called two scores equal within 1e-9 max |gamma| over
    ALL sequences, so a large score in sequence 1 (1e6) made sequence 0's distinct scores 0 and
    -1e-4 "equal", and {0} was returned as a trap set although token 2 (score -1e-4) sits inside
    the margin. Also a tolerance taken as the largest sequence's tie tolerance (1e12, 1e300).

    By hand: S = {0}: q = ATT-SVM of sequence 1 = (1, 0, 0); sequence 0 has logits
    (-2, 0, -0.5), t = token 1 (score 0), and token 2 (score -1e-4, different) has gap
    0.5 <= 1: no trap. S = {1}: q = (-1.5, 3, 0) / 11.25 puts sequence 1's optimal token only
    0.133 below token 1: no trap. So no trap set, whatever ``big`` > 0; the brute force with
    exact scores agrees."""
    X, Y, v = mixed_scale_instance(big)
    assert_exact_or_far_apart(X, Y, v)
    assert exact_trap_sets(X, Y, v, W3) == []
    assert mm.trap_sets(X, Y, v, W=W3, minimal_only=False) == []


# ----------------------------------------------------------------------------------------------
# F8: distinct scores under cancellation refused as tied
# ----------------------------------------------------------------------------------------------


def cancelling(M: float, gap: float = 1e-6):
    """One sequence, d = 2, v = (1, 1): scores M + (1 - M) = 1 and M + (1 - M - gap) = 1 - gap
    (of the float64 data: exactly, see the test), and 0."""
    X = np.array([[[M, -M + 1.0], [M, -M + 1.0 - gap], [0.0, 0.0]]])
    return X, np.ones(1), np.ones(2)


@given(k=st.integers(0, 7))
@example(k=6)  # the reviewer's case
@settings(max_examples=8, deadline=None, derandomize=True)
def test_distinct_scores_under_cancellation_are_not_tied(k):
    """Bug caught (review F8): the tie tolerance 1e-12 s_i (4500 eps s_i), thousands of times
    the rounding of the scores (d eps s_i), refused scores 1 and 1 - 1e-6 computed from terms of
    size 1e6 as "tied". Reference: the exact scores of the float64 data, whose two highest are
    apart by more than 30 times the rounding bound (d + 2) eps s_i, so the winner is certain."""
    X, Y, v = cancelling(10.0 ** k)
    exact = exact_scores(X, Y, v)[0]
    assert_exact_or_far_apart(X, Y, v, factor=30.0)
    assert mm.optimal_indices(X, Y, v).tolist() == [max(range(3), key=exact.__getitem__)]


@given(k=st.integers(0, 11), seed=st.integers(0, 50))
@example(k=6, seed=0)
@settings(max_examples=12, deadline=None, derandomize=True)
def test_exact_ties_under_cancellation_stay_tied(k, seed):
    """Bug caught: a tie tolerance too tight for the rounding of the scores (an absolute one,
    or eps s_i without the factor d): tokens that are permutations of one another (v = 1), with
    coordinates of size 10^k that cancel, have equal exact scores whose float64 sums differ by
    a few ulps of 10^k; they must be refused as tied, not ranked by rounding."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(5) * 10.0 ** k
    a[0] = -a[1:].sum() + 0.5  # the exact score cancels to about 0.5
    X = np.array([[a, a[rng.permutation(5)], np.zeros(5)]])
    X, Y, v = X, np.ones(1), np.ones(5)
    exact = exact_scores(X, Y, v)[0]
    assert exact[0] == exact[1] and exact[0] > exact[2]
    with pytest.raises(ValueError, match="sequence 0 has two tokens tied"):
        mm.optimal_indices(X, Y, v)


def test_instance_optimal_uses_the_one_tie_rule():
    """Instance.optimal took a float argmax: on an exact tie it returned token 0 where
    mm.optimal_indices raises (a second, silent tie rule); now it refuses the same tie, and on
    scores that differ only below the tie tolerance by rounding it refuses too."""
    X = np.array([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]],
                  [[0.3, 0.1], [0.2, 0.0], [1.0, 1.0]]])
    Y, v = np.array([1.0, -1.0]), np.array([1.0, 1.0])   # sequence 0: tokens 0 and 1 tie at 1
    inst = mm.data.Instance("tie", X, Y, v, None, np.zeros((1, 2)))
    with pytest.raises(ValueError, match="X, Y, v") as raised:
        inst.optimal
    with pytest.raises(ValueError) as reference:
        mm.optimal_indices(X, Y, v)
    assert str(raised.value) == str(reference.value)
    # a tie computed with a rounding error of one ulp is still a tie
    X2 = X.copy()
    X2[0, 1, 1] = np.nextafter(1.0, 2.0)
    with pytest.raises(ValueError, match="X, Y, v"):
        mm.data.Instance("near-tie", X2, Y, v, None, np.zeros((1, 2))).optimal
    untied = mm.data.Instance("untied", X2 * [[[1.0, 1.0], [1.0, 0.5], [1.0, 1.0]]], Y, v, None,
                              np.zeros((1, 2)))
    assert untied.optimal.tolist() == [0, 1]   # sequence 1: -(0.2) > -(0.4) > -(2.0)
