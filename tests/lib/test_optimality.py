"""Locally-optimal selections: the Fig. 1 enumeration (C2) and the pruned search against brute force."""
import itertools

import numpy as np
import pytest

import maxmargin as mm


def test_fig1_enumeration():
    """C2: Fig. 1a has exactly one locally-optimal selection (x1), Fig. 1b has two (x1 and x2)."""
    a, b = mm.data.fig1(variant="a"), mm.data.fig1(variant="b")
    assert mm.locally_optimal_indices(a.X, a.Y, a.v, W=a.W) == [(0,)]
    assert mm.locally_optimal_indices(b.X, b.Y, b.v, W=b.W) == [(0,), (1,)]
    table = {s.alpha: s for s in mm.feasible_selections(a.X, a.Y, a.v, W=a.W)}
    assert set(table) == {(0,), (1,), (2,)}
    np.testing.assert_array_equal(table[(0,)].svm.support[0], [False, False, True])
    np.testing.assert_array_equal(table[(1,)].svm.support[0], [False, False, True])
    np.testing.assert_array_equal(table[(2,)].svm.support[0], [True, True, False])
    assert table[(1,)].violations == ((0, 2),)  # x3 ties x2's score 0.9 in Fig. 1a


def brute_force(inst):
    """Every selection tried by solving its ATT-SVM; local optimality checked from scratch."""
    n, T, _ = inst.X.shape
    gamma = inst.scores
    found = []
    for alpha in itertools.product(range(T), repeat=n):
        try:
            result = mm.att_svm(inst.X, alpha, W=inst.W, solver="cvxpy")
        except ValueError:
            continue
        selected = gamma[np.arange(n), alpha]
        if all(gamma[i, t] < selected[i] for i, t in np.argwhere(result.support)):
            found.append(alpha)
    return found


@pytest.mark.parametrize("seed", range(6))
def test_pruned_enumeration_matches_brute_force(seed):
    inst = mm.data.gaussian_instance(3, 3, 3, seed)
    assert mm.locally_optimal_indices(inst.X, inst.Y, inst.v, W=inst.W) == brute_force(inst)


def test_the_global_selection_is_locally_optimal_whenever_feasible():
    feasible = 0
    for seed in range(12):
        inst = mm.data.gaussian_instance(3, 4, 4, seed)
        opt = mm.optimal_indices(inst.X, inst.Y, inst.v)
        if mm.is_feasible(inst.X, opt, W=inst.W):
            feasible += 1
            assert mm.is_locally_optimal(inst.X, inst.Y, inst.v, opt, W=inst.W)
            assert tuple(opt) in mm.locally_optimal_indices(inst.X, inst.Y, inst.v, W=inst.W)
    assert feasible >= 4, f"only {feasible} of 12 instances had a feasible global selection"


def test_infeasible_selection_is_not_locally_optimal():
    X = np.array([[[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]]])
    assert not mm.is_locally_optimal(X, [1.0], [0.0, 1.0], [1])
