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
    from maxmargin.svm import _check_values

    values = np.array([[np.inf, 1 - 1e-5]])
    others = np.array([[False, True]])
    with pytest.raises(mm.IllConditionedError, match=r"^X: the solution violates .* by 1\.0e-05"):
        _check_values(values, 1.0, np.array([[0.0, 10.0]]), 3, others, "X",
                      lambda i, t: Fraction(1 - 1e-5))
    ok = _check_values(np.array([[np.inf, 1 - 1e-7]]), 1.0, np.array([[0.0, 10.0]]), 3, others,
                       "X", lambda i, t: Fraction(1 - 1e-7))
    assert ok[0, 1] == 1 - 1e-7
