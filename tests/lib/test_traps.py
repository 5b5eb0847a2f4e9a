"""Trap sets (mm.trap_sets): the counterexample to global convergence, the paper's instances,
random instances against an independent brute force, unequal scores, and bad inputs.

The brute force solves its own least-norm problems with cvxpy (not mm.att_svm) and tests the
criterion with its own loops and tolerances. Expected answers of the hand-built instances are
computed by hand in the comments.
"""
from __future__ import annotations

import dataclasses
import itertools

import cvxpy as cp
import numpy as np
import pytest

import maxmargin as mm

W3 = np.diag([1.0, 1.0, 0.0])  # attention sees the first two coordinates
E3 = np.array([0.0, 0.0, 1.0])  # v reads the third: gamma_it = x_it[2] when Y_i = 1
TOL = 1e-6


def counterexample():
    """n = 2, T = 2: sequence 0 has (-2, 3 | 1) [optimal] and (0, 0 | 0); sequence 1 has
    (1, 0 | 1) [optimal] and (0, 0 | 0)."""
    X = np.array([[[-2.0, 3.0, 1.0], [0.0, 0.0, 0.0]], [[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]])
    return X, np.ones(2), E3, W3


# ----------------------------------------------------------------------------------------------
# an independent brute force
# ----------------------------------------------------------------------------------------------


def brute_traps(X, Y, v, W):
    """Every trap set, minimal or not: {S: (q, selection, escape gap)}, by trying all S."""
    n, T, d = X.shape
    K = X @ W
    gamma = Y[:, None] * (X @ v)
    opt = gamma.argmax(axis=1)
    found = {}
    for size in range(1, n):
        for S in itertools.combinations(range(n), size):
            rest = [i for i in range(n) if i not in S]
            A = np.array([K[i, opt[i]] - K[i, t] for i in rest for t in range(T) if t != opt[i]])
            p = cp.Variable(d)
            problem = cp.Problem(cp.Minimize(cp.sum_squares(p)), [A @ p >= 1])
            problem.solve()
            if problem.status != cp.OPTIMAL:
                continue  # no prompt separates the complement
            q = p.value
            selection, gaps, ok = list(opt), [], True
            for i in S:
                logit = K[i] @ q
                t = max((u for u in range(T) if u != opt[i]), key=lambda u: logit[u])
                for u in range(T):
                    gap = logit[t] - logit[u]
                    if u == opt[i] or abs(gamma[i, u] - gamma[i, t]) > TOL:
                        ok &= gap > 1 + TOL
                        gaps.append(gap)
                    else:
                        ok &= gap >= -TOL
                selection[i] = t
            if ok:
                found[S] = (q, tuple(int(a) for a in selection), min(gaps))
    return found


def minimal(found):
    return {S: r for S, r in found.items() if not any(set(R) < set(S) for R in found)}


def assert_same(traps, expected, flags=None):
    """The library's list equals the brute force's trap sets ``expected``, in (size, S) order;
    ``flags`` ({S: minimal}) are the expected minimality flags (default: all minimal)."""
    assert [t.sequences for t in traps] == sorted(expected, key=lambda S: (len(S), S))
    for t in traps:
        q, selection, gap = expected[t.sequences]
        assert t.selection == selection
        np.testing.assert_allclose(t.q, q, atol=1e-5)
        assert t.escape_gap == pytest.approx(gap, abs=1e-5)
        assert t.minimal is (True if flags is None else flags[t.sequences])


def minimality(found):
    """{S: minimal} of the brute force's sets, by its own subset test."""
    return {S: not any(set(R) < set(S) for R in found) for S in found}


def pruning_instance():
    """Hand-built, n = 3, T = 2 (second token (0, 0 | 0) everywhere); optimal keys a0 = (-2, -0.5),
    a1 = (1, 0), a2 = (-1.5, 1). By hand: S = {0}: q from p1 >= 1, -1.5 p1 + p2 >= 1 is
    (1, 2.5), a0.q = -3.25: trap, gap 3.25. S = {2}: q from p1 >= 1, -2 p1 - 0.5 p2 >= 1 is
    (1, -6), a2.q = -7.5: trap, gap 7.5. S = {0, 2}: q = (1, 0) traps both (gaps 2, 1.5) but is
    not minimal. S = {1}, {0, 1}, {1, 2}: a1.q > -1, no trap."""
    X = np.zeros((3, 2, 3))
    X[:, 0] = [[-2.0, -0.5, 1.0], [1.0, 0.0, 1.0], [-1.5, 1.0, 1.0]]
    return X, np.ones(3), E3, W3


def infeasible_complement_instance():
    """The counterexample plus sequence 2 = (0, 0 | 1) [optimal], (2, 0 | 0), (-2, 0 | 0) (the
    counterexample's sequences padded with copies of their second token): the optimal key of
    sequence 2 lies between the others, so every complement containing 2 is infeasible. By hand:
    S = {2}: q = (1, 1) (the counterexample's p^mm), sequence 2 ranks token 1 first, 2 above the
    optimal one: trap, gap 2. S = {0}, {1}, {0, 1} are skipped (infeasible complements), and
    {0, 2}, {1, 2} are supersets of {2}."""
    X = np.zeros((3, 3, 3))
    X[:2, :2] = counterexample()[0]
    X[2] = [[0.0, 0.0, 1.0], [2.0, 0.0, 0.0], [-2.0, 0.0, 0.0]]
    return X, np.ones(3), E3, W3


# ----------------------------------------------------------------------------------------------
# 1. the counterexample to global convergence
# ----------------------------------------------------------------------------------------------


def test_counterexample_has_one_trap_set_by_hand():
    """S = {0}: q is the ATT-SVM of sequence 1 alone, p1 >= 1, so q = (1, 0, 0); sequence 0 then
    ranks (0, 0) first, 0 - (-2) = 2 above its optimal token: a trap with gap 2. S = {1}: q =
    (-2, 3, 0) / 13 puts sequence 1's optimal token only 2/13 below: no trap."""
    traps = mm.trap_sets(*counterexample()[:3], W=counterexample()[3])
    assert [t.sequences for t in traps] == [(0,)]
    (trap,) = traps
    np.testing.assert_allclose(trap.q, [1.0, 0.0, 0.0], atol=1e-9)
    assert trap.selection == (1, 0)
    assert trap.escape_gap == pytest.approx(2.0, abs=1e-9)
    assert not trap.q.flags.writeable
    with pytest.raises(dataclasses.FrozenInstanceError):
        trap.escape_gap = 3.0


def test_counterexample_gd_stays_trapped_but_converges_from_zero():
    """Plain GD, logistic loss, step 1: from (4, 0, 0) the selection stays (1, 0), the direction
    stays at q and the risk stays 0.19 above L*; from 0 it converges toward p^mm = (1, 1, 0)
    (by hand: -2 p1 + 3 p2 >= 1 and p1 >= 1 are both tight, multipliers 10/3 and 2/3)."""
    X, Y, v, W = counterexample()
    run = mm.gd(X, Y, v, np.array([[4.0, 0.0, 0.0], [0.0, 0.0, 0.0]]), 20_000, 1.0, W=W)
    excess = run.risk - mm.optimal_risk(X, Y, v)
    selected = mm.attention(X, run.p[:, 0], W=W).argmax(axis=-1)  # (steps + 1, n)
    assert np.all(selected[300:] == [1, 0])
    assert run.cosine([1.0, 0.0, 0.0])[300:, 0].min() > 0.999
    assert excess[300:, 0].min() > 0.15
    assert tuple(mm.attention(X, run.p[-1, 1], W=W).argmax(axis=-1)) == (0, 0)
    assert run.cosine([1.0, 1.0, 0.0])[-1, 1] > 0.99
    assert excess[-1, 1] < 0.01


# ----------------------------------------------------------------------------------------------
# 2. the paper's instances, and the brute force on random and hand-built ones
# ----------------------------------------------------------------------------------------------


def test_paper_instances_have_no_trap_set():
    """fig1 has n = 1, so it has no trap set by definition (S must be a proper subset): that part
    only checks the n = 1 path. fig2 (n = 3, equal non-optimal scores) is checked against the
    brute force."""
    for variant in ("a", "b"):
        inst = mm.data.fig1(variant=variant)
        assert mm.trap_sets(inst.X, inst.Y, inst.v, W=inst.W) == []
    inst = mm.data.fig2()
    assert mm.trap_sets(inst.X, inst.Y, inst.v, W=inst.W) == []
    assert brute_traps(inst.X, inst.Y, inst.v, inst.W) == {}


BRUTE_CASES = [
    (3, 4, 6, 100, True), (3, 4, 6, 101, True), (3, 4, 6, 103, True), (3, 4, 6, 106, True),
    (3, 4, 6, 112, True), (3, 4, 6, 114, True), (3, 4, 6, 135, False), (3, 4, 6, 144, False),
    (3, 4, 6, 150, False), (4, 3, 4, 4, True), (4, 3, 4, 17, True), (4, 3, 4, 5, False),
    (5, 3, 4, 8, True),
]


@pytest.mark.parametrize("n, T, d, seed, equal", BRUTE_CASES)
def test_random_instances_match_brute_force(n, T, d, seed, equal):
    """Both modes against the brute force: the minimal sets by default, every set (with its
    minimality flag) with minimal_only=False. Catches a flag that is ignored, or a flag
    that marks a superset minimal."""
    inst = mm.data.random_instance(n, T, d, seed, equal_scores=equal)
    found = brute_traps(inst.X, inst.Y, inst.v, inst.W)
    assert_same(mm.trap_sets(inst.X, inst.Y, inst.v, W=inst.W), minimal(found))
    assert_same(mm.trap_sets(inst.X, inst.Y, inst.v, W=inst.W, minimal_only=False), found,
                minimality(found))


def test_brute_force_cases_are_not_vacuous():
    """Several of the cases above have trap sets, one of size 2 (else they test little). None
    of them has a trap set that is not minimal: the hand-built pruning_instance and
    non_minimal_instance below test those."""
    sizes = []
    for n, T, d, seed, equal in BRUTE_CASES:
        inst = mm.data.random_instance(n, T, d, seed, equal_scores=equal)
        sizes += [len(t.sequences) for t in mm.trap_sets(inst.X, inst.Y, inst.v, W=inst.W)]
    assert len(sizes) >= 8 and 2 in sizes


def test_supersets_are_pruned_by_hand():
    X, Y, v, W = pruning_instance()
    found = brute_traps(X, Y, v, W)
    assert set(found) == {(0,), (2,), (0, 2)}  # {0, 2} is a trap set, but not minimal
    traps = mm.trap_sets(X, Y, v, W=W)
    assert_same(traps, minimal(found))
    np.testing.assert_allclose(traps[0].q, [1.0, 2.5, 0.0], atol=1e-9)
    np.testing.assert_allclose(traps[1].q, [1.0, -6.0, 0.0], atol=1e-9)
    assert [t.escape_gap for t in traps] == pytest.approx([3.25, 7.5], abs=1e-9)


def test_supersets_are_listed_with_minimal_only_false_by_hand():
    """The same instance: with minimal_only=False the non-minimal {0, 2} appears, flagged, with
    its own q = (1, 0) (by hand: the ATT-SVM of sequence 1 alone, p1 >= 1) and selection
    (1, 0, 1); escape gap min(2, 1.5) = 1.5 (a0.q = -2, a2.q = -1.5)."""
    X, Y, v, W = pruning_instance()
    traps = mm.trap_sets(X, Y, v, W=W, minimal_only=False)
    assert [(t.sequences, t.minimal) for t in traps] == [((0,), True), ((2,), True),
                                                         ((0, 2), False)]
    np.testing.assert_allclose(traps[2].q, [1.0, 0.0, 0.0], atol=1e-9)
    assert traps[2].selection == (1, 0, 1)
    assert traps[2].escape_gap == pytest.approx(1.5, abs=1e-9)
    found = brute_traps(X, Y, v, W)
    assert_same(traps, found, minimality(found))


def non_minimal_instance():
    """n = 3, T = 2 (second token (0, 0 | 0) everywhere); optimal keys a0 = (-2, 3),
    a1 = (-3, -2), a2 = (1, 0). By hand: S = {0}: q from p1 >= 1, -3 p1 - 2 p2 >= 1 is (1, -2)
    (multipliers 4 and 1), a0.q = -8: trap, gap 8. S = {1}: q from p1 >= 1, -2 p1 + 3 p2 >= 1
    is (1, 1), a1.q = -5: trap, gap 5. S = {2}: a0 and a1 are orthogonal, q = (a0 + a1) / 13
    = (-5, 1) / 13, a2.q = -5/13 > -1: no trap. S = {0, 2}: q = a1 / 13, a0.q = 0; S = {1, 2}:
    q = a0 / 13, a1.q = 0: no trap. S = {0, 1}: q = (1, 0) (sequence 2 alone), a0.q = -2,
    a1.q = -3: a trap set, gap 2, but not minimal ({0} and {1} are trap sets)."""
    X = np.zeros((3, 2, 3))
    X[:, 0] = [[-2.0, 3.0, 1.0], [-3.0, -2.0, 1.0], [1.0, 0.0, 1.0]]
    return X, np.ones(3), E3, W3


def test_non_minimal_trap_set_by_hand():
    X, Y, v, W = non_minimal_instance()
    assert [t.sequences for t in mm.trap_sets(X, Y, v, W=W)] == [(0,), (1,)]
    traps = mm.trap_sets(X, Y, v, W=W, minimal_only=False)
    assert [(t.sequences, t.selection, t.minimal) for t in traps] == [
        ((0,), (1, 0, 0), True), ((1,), (0, 1, 0), True), ((0, 1), (1, 1, 0), False)]
    for t, q, gap in zip(traps, ([1.0, -2.0], [1.0, 1.0], [1.0, 0.0]), (8.0, 5.0, 2.0)):
        np.testing.assert_allclose(t.q, [*q, 0.0], atol=1e-9)
        assert t.escape_gap == pytest.approx(gap, abs=1e-9)
    found = brute_traps(X, Y, v, W)
    assert_same(traps, found, minimality(found))


def test_gd_is_caught_by_the_non_minimal_trap_set():
    """Plain GD (step 1) and NGD (lr 0.1) from (4, 0, 0) lose sequences 0 and 1 together: the
    selection is (1, 1, 0), that of the non-minimal {0, 1}, from step 0 to 2 * 10^4, and the
    direction turns to its q = (1, 0, 0). Neither minimal trap set induces that selection, and
    it is locally optimal (its ATT-SVM is q: only sequence 2's constraint p1 >= 1 is tight, by
    hand 2 p1 - 3 p2 >= 1 and 3 p1 + 2 p2 >= 1 hold with slack at (1, 0)): a classification
    of runs by the minimal trap sets alone would call this run "converged at another locally
    optimal selection", not trapped."""
    X, Y, v, W = non_minimal_instance()
    minimal_selections = {t.selection for t in mm.trap_sets(X, Y, v, W=W)}
    sel = mm.check_selection(X, Y, v, (1, 1, 0), W=W)
    assert sel.locally_optimal
    np.testing.assert_allclose(sel.svm.p, [1.0, 0.0, 0.0], atol=1e-9)
    assert (1, 1, 0) not in minimal_selections
    p0 = np.array([[4.0, 0.0, 0.0]])
    for kw in (dict(lr=1.0), dict(lr=0.1, normalized=True, eps=1e-300)):
        run = mm.gd(X, Y, v, p0, 20_000, W=W, **kw)
        picked = mm.attention(X, run.p[::500, 0], W=W).argmax(axis=-1)
        assert np.all(picked == [1, 1, 0]), kw
        cos = run.cosine([1.0, 0.0, 0.0])[:, 0]
        assert cos[-1] > 0.9998 and cos[-1] > cos[len(cos) // 10], kw


def test_infeasible_complements_are_skipped_by_hand():
    X, Y, v, W = infeasible_complement_instance()
    traps = mm.trap_sets(X, Y, v, W=W)
    assert [(t.sequences, t.selection) for t in traps] == [((2,), (0, 0, 1))]
    np.testing.assert_allclose(traps[0].q, [1.0, 1.0, 0.0], atol=1e-9)
    assert traps[0].escape_gap == pytest.approx(2.0, abs=1e-9)
    assert_same(traps, minimal(brute_traps(X, Y, v, W)))


@pytest.mark.parametrize("seed", [103, 114, 121, 128, 129, 100])
def test_locally_optimal_selections_induce_trap_sets_with_equal_scores(seed):
    """With equal non-optimal scores every locally-optimal alpha != opt (optimality.py, its own
    SVMs) has S = {i : alpha_i != opt_i} as a trap set inducing alpha (brute force)."""
    inst = mm.data.random_instance(3, 4, 6, seed, equal_scores=True)
    found = brute_traps(inst.X, inst.Y, inst.v, inst.W)
    opt = tuple(int(a) for a in inst.optimal)
    others = [a for a in mm.locally_optimal_indices(inst.X, inst.Y, inst.v, W=inst.W) if a != opt]
    for alpha in others:
        S = tuple(i for i in range(3) if alpha[i] != opt[i])
        assert found[S][1] == alpha
    assert bool(others) == (seed != 100)  # the seeds were chosen with one such alpha (not 100)


# ----------------------------------------------------------------------------------------------
# 3. gradient descent near q: trap sets hold, sets failing the criterion do not
# ----------------------------------------------------------------------------------------------


def near(q, R, rng, tilt=0.01):
    """R q plus a random tilt of relative size ``tilt`` orthogonal to q (attended coordinates)."""
    z = rng.standard_normal(q.shape)
    z[-1] = 0.0
    z -= (z @ q) / (q @ q) * q
    return R * (q + tilt * np.linalg.norm(q) * z / np.linalg.norm(z))


def test_gd_near_q_keeps_every_trap_and_leaves_failing_sets():
    """Equal-score instances 100..131: for each trap set, normalized GD (lr 0.1) from 160 q,
    tilted by 1 %, keeps the induced selection for 10^4 steps and turns toward q. Controls: each
    S = {i} that fails only because the optimal token is inside the margin (0 < gap <= 1), started
    the same way with its own induced selection, leaves it. eps = 1e-300 keeps the steps at full
    length until the exponentials underflow (the norm then passes 700 margins)."""
    rng = np.random.default_rng(0)
    cases = []  # (instance, q, selection, should stay)
    for seed in range(100, 132):
        inst = mm.data.random_instance(3, 4, 6, seed, equal_scores=True)
        traps = mm.trap_sets(inst.X, inst.Y, inst.v, W=inst.W)
        cases += [(inst, t.q, t.selection, True) for t in traps]
        K = inst.X @ inst.W
        for i in range(3):
            if any(t.sequences == (i,) for t in traps):
                continue
            rest = [j for j in range(3) if j != i]
            q = mm.att_svm(inst.X[rest], inst.optimal[rest], W=inst.W).p
            logit = K[i] @ q
            t_i = 1 + int(np.argmax(logit[1:]))  # token 0 is optimal in random_instance
            if 0 < logit[t_i] - logit[0] <= 1:
                selection = tuple(t_i if j == i else 0 for j in range(3))
                cases.append((inst, q, selection, False))
    stay = np.array([c[3] for c in cases])
    assert stay.sum() >= 6 and (~stay).sum() >= 20

    X = np.stack([c[0].X for c in cases])
    Y = np.stack([c[0].Y for c in cases])
    Q = np.stack([c[1] for c in cases])
    P0 = np.stack([near(q, 160.0, rng) for q in Q])[:, None]  # (M, 1, d)
    run = mm.gd_stack(X, Y, cases[0][0].v, P0, 10_000, 0.1, W=cases[0][0].W,
                      normalized=True, eps=1e-300)
    cos = run.cosine(Q)[:, :, 0]  # (steps + 1, M)
    for m, (inst, q, selection, should_stay) in enumerate(cases):
        picked = mm.attention(inst.X, run.p[::100, m, 0], W=inst.W).argmax(axis=-1)
        assert tuple(picked[0]) == selection
        kept = bool(np.all(picked == selection))
        assert kept == should_stay, (inst.name, selection)
        if should_stay:
            assert cos[-1, m] > max(cos[0, m], 0.9999)


# ----------------------------------------------------------------------------------------------
# 4. unequal scores, hand-built
# ----------------------------------------------------------------------------------------------

SEQ1 = [[1.0, 0.0, 1.0], [0.0, 0.0, 0.5], [-1.0, 0.0, 0.2]]  # optimal (1, 0); q = (1, 0, 0)


def unequal(extra_key, extra_score, t_score):
    """Sequence 0: optimal (-2, 3 | 1), t = (0, 0 | t_score), u = (extra_key | extra_score);
    sequence 1 = SEQ1, whose ATT-SVM alone is p1 >= 1 (and 2 p1 >= 1): q = (1, 0, 0)."""
    X = np.array([[[-2.0, 3.0, 1.0], [0.0, 0.0, t_score], [*extra_key, extra_score]], SEQ1])
    return X, np.ones(2), E3, W3


# A: lower-score u = (-1.5, 0 | 0) at gap 1.5 > 1: trap {0}, escape gap min(2, 1.5) = 1.5.
# B: higher-score u = (-0.5, 1.5 | 0.6) > t's 0.2 at gap 0.5 < 1: an escape token, no trap.
# C: lower-score u = (-0.5, 0.3 | 0) at gap 0.5 < 1: no trap (u bends q), yet GD stays at (1, 0)
#    and turns to ATT-SVM(1, 0) = (0.5, -0.3) / 0.34 = (25/17, -15/17, 0), where u is tight.
# In all three S = {1} is no trap: q from sequence 0 alone has q1 < 0, so sequence 1 ranks
# (-1, 0) first, less than 1 above its optimal token (by hand: 0.108, 2/3 and 0.314).
CASES = {
    "A": unequal((-1.5, 0.0), 0.0, 0.5),
    "B": unequal((-0.5, 1.5), 0.6, 0.2),
    "C": unequal((-0.5, 0.3), 0.0, 0.5),
}


def test_unequal_scores_criterion_by_hand():
    traps = mm.trap_sets(*CASES["A"][:3], W=CASES["A"][3])
    assert [(t.sequences, t.selection) for t in traps] == [((0,), (1, 0))]
    np.testing.assert_allclose(traps[0].q, [1.0, 0.0, 0.0], atol=1e-9)
    assert traps[0].escape_gap == pytest.approx(1.5, abs=1e-9)
    assert mm.trap_sets(*CASES["B"][:3], W=CASES["B"][3]) == []
    assert mm.trap_sets(*CASES["C"][:3], W=CASES["C"][3]) == []
    for X, Y, v, W in CASES.values():
        assert_same(mm.trap_sets(X, Y, v, W=W), minimal(brute_traps(X, Y, v, W)))


def test_unequal_scores_gd_near_q():
    """Normalized GD from 20 q (tilted 1 %): A stays and turns to q; B leaves (1, 0); C keeps
    (1, 0) but turns to ATT-SVM(1, 0), away from q."""
    rng = np.random.default_rng(1)
    q = np.array([1.0, 0.0, 0.0])
    X = np.stack([c[0] for c in CASES.values()])
    P0 = np.stack([near(q, 20.0, rng) for _ in CASES])[:, None]
    run = mm.gd_stack(X, np.ones((3, 2)), E3, P0, 5000, 0.1, W=W3, normalized=True, eps=1e-150)
    picked = [mm.attention(X[m], run.p[::50, m, 0], W=W3).argmax(axis=-1) for m in range(3)]
    a, b, c = (np.all(s == [1, 0], axis=-1) for s in picked)
    assert a.all() and c.all() and not b[-1]
    assert run.cosine(q)[-1, 0, 0] > 0.9999
    assert run.cosine(q)[-1, 2, 0] < 0.9
    assert mm.cosine(run.p[-1, 2, 0], [25.0, -15.0, 0.0]) > 0.999


def test_equal_score_tolerance_is_relative_to_the_scores():
    """Bug caught: the equal-score tolerance made absolute (1e-9 instead of relative to the scores):
    with the head scaled down, distinct scores read as equal and a lower-score token inside the
    margin no longer blocks a trap.

    By hand, W = diag(1, 1, 0), v = c e3, Y = (1, 1). Sequence 0: (-2, 3 | 1) [optimal],
    (0, 0 | 0), (-0.5, 0 | 0.5); sequence 1: (1, 0 | 1) [optimal], (0, 0 | 0), (0, -1 | 0).
    S = {0}: q = ATT-SVM of sequence 1 (p1 >= 1, p1 + p2 >= 1) = (1, 0, 0); sequence 0 has logits
    (-2, 0, -0.5), t = token 1 (score 0), and token 2 (score 0.5 c, different) has gap 0.5 <= 1:
    no trap. S = {1}: q = ATT-SVM of sequence 0 (-2 p1 + 3 p2 >= 1, -1.5 p1 + 3 p2 >= 1) =
    (-1.5, 3, 0) / 11.25, which puts sequence 1's optimal token only 0.133 below token 1: no
    trap. So no trap set, for every c > 0; c = 1e-10 keeps the top scores 5e-11 apart (above an
    absolute tie test of 1e-12 too)."""
    X = np.array([[[-2.0, 3.0, 1.0], [0.0, 0.0, 0.0], [-0.5, 0.0, 0.5]],
                  [[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, -1.0, 0.0]]])
    for c in (1.0, 1e-10):
        assert mm.trap_sets(X, np.ones(2), c * E3, W=W3) == []


# ----------------------------------------------------------------------------------------------
# 5. bad inputs
# ----------------------------------------------------------------------------------------------


def test_bad_inputs_raise_clear_errors():
    X, Y, v, W = counterexample()
    with pytest.raises(ValueError, match=r"X: n=2 .*max_sequences=1.*2\^n"):
        mm.trap_sets(X, Y, v, W=W, max_sequences=1)
    tied = X.copy()
    tied[1, 1, 2] = 1.0  # sequence 1: both tokens score 1
    with pytest.raises(ValueError, match="sequence 1 has two tokens tied"):
        mm.trap_sets(tied, Y, v, W=W)
    with pytest.raises(ValueError, match=r"^X: expected shape \(n, T, d\)"):
        mm.trap_sets(X[0], Y, v, W=W)
    with pytest.raises(ValueError, match=r"^Y: expected shape \(2,\)"):
        mm.trap_sets(X, np.ones(3), v, W=W)
    with pytest.raises(ValueError, match=r"^Y: labels must be -1 or \+1"):
        mm.trap_sets(X, [1.0, 0.0], v, W=W)
    with pytest.raises(ValueError, match=r"^v: expected shape \(3,\)"):
        mm.trap_sets(X, Y, v[:2], W=W)
    with pytest.raises(ValueError, match=r"^W: expected shape \(3, 3\)"):
        mm.trap_sets(X, Y, v, W=W[:2])
    with pytest.raises(ValueError, match="^X: non-finite"):
        mm.trap_sets(np.where(X == 3.0, np.nan, X), Y, v, W=W)
    with pytest.raises(ValueError, match="^max_sequences: must be >= 1"):
        mm.trap_sets(X, Y, v, W=W, max_sequences=0)
    with pytest.raises(TypeError, match="^max_sequences: expected an integer"):
        mm.trap_sets(X, Y, v, W=W, max_sequences=2.5)
    with pytest.raises(TypeError, match="^minimal_only: expected True or False"):
        mm.trap_sets(X, Y, v, W=W, minimal_only="no")
