"""Chapter 04 helpers: normalized GD in the log domain (maxmargin.book.ch04.ngd_log_domain and
its stacked form ngd_log_domain_stack) against mm.gd where float64 does not underflow, and
against 60-digit arithmetic where it does."""
from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

import maxmargin as mm
from maxmargin.book.ch04 import ngd_log_domain, ngd_log_domain_stack


def test_one_step_matches_mm_gd_along_a_trajectory():
    """Step by step: from every iterate of a 200-step mm.gd run (normalized, eps = 1e-300) on a
    random instance and on Fig. 2, one log-domain step gives the next iterate. A step is 0.1
    times a unit vector computed two ways, so they agree to a few ulps of |p| (at most about
    25 here): 1e-12 leaves room for the conditioning of the sums. Catches a wrong loss
    derivative (the weights between sequences), a missing factor s_w or a sign."""
    cases = [mm.data.random_instance(3, 4, 6, seed=3), mm.data.fig2()]
    for inst in cases:
        P0 = np.random.default_rng(0).standard_normal((5, inst.X.shape[2])) * 2
        run = mm.gd(inst.X, inst.Y, inst.v, P0, 200, 0.1, W=inst.W, normalized=True,
                    eps=1e-300)
        for k in range(0, 200, 20):
            step = ngd_log_domain(inst.X, inst.Y, inst.v, run.p[k], 1, lr=0.1, W=inst.W,
                                  record_every=1)
            np.testing.assert_array_equal(step[0], run.p[k])
            np.testing.assert_allclose(step[1], run.p[k + 1], rtol=0, atol=1e-12)


def exact_direction(X, Y, v, W, p, dps=60):
    """-grad L / |grad L| at p in dps-digit arithmetic (logistic loss, mean over sequences)."""
    with mp.workdps(dps):
        K = X @ W
        g = [mp.mpf(0)] * X.shape[2]
        for i in range(X.shape[0]):
            z = [mp.fsum(mp.mpf(a) * mp.mpf(b) for a, b in zip(K[i, t], p))
                 for t in range(X.shape[1])]
            e = [mp.exp(x - max(z)) for x in z]
            s = [x / mp.fsum(e) for x in e]
            gam = [mp.mpf(Y[i]) * mp.fsum(mp.mpf(a) * mp.mpf(b) for a, b in zip(X[i, t], v))
                   for t in range(X.shape[1])]
            f = mp.fsum(a * b for a, b in zip(s, gam))
            lp = 1 / (1 + mp.exp(f))                        # |l'(f)|
            for c in range(X.shape[2]):
                kbar = mp.fsum(s[t] * K[i, t, c] for t in range(X.shape[1]))
                g[c] += lp * mp.fsum(s[t] * (gam[t] - f) * (K[i, t, c] - kbar)
                                     for t in range(X.shape[1]))
        norm = mp.sqrt(mp.fsum(x * x for x in g))
        return np.array([float(x / norm) for x in g])


@pytest.mark.parametrize("scale", [1000.0, 3000.0])
def test_it_moves_where_float64_stalls(scale):
    """Far out along Fig. 2's SVM direction (|p| = 1000 or 3000: logit gaps above 1000) the
    attention off the optimal tokens underflows to 0 in float64: mm.gd's gradient is zero and
    its iterates do not move, while the
    log-domain step has length lr and the direction of the exact gradient (60 digits) to 1e-12.
    Catches the weights formed without logarithms (they underflow to 0 / 0)."""
    inst = mm.data.fig2()
    p_mm = mm.att_svm(inst.X, mm.optimal_indices(inst.X, inst.Y, inst.v), W=inst.W).p
    p = scale * p_mm / np.linalg.norm(p_mm) + np.array([0.3, -0.2, 0.0])
    stalled = mm.gd(inst.X, inst.Y, inst.v, p[None], 5, 0.1, W=inst.W, normalized=True,
                    eps=1e-300)
    assert np.linalg.norm(stalled.p[-1, 0] - p) < 1e-3
    path = ngd_log_domain(inst.X, inst.Y, inst.v, p[None], 1, lr=0.1, W=inst.W, record_every=1)
    step = path[1, 0] - p
    assert np.linalg.norm(step) == pytest.approx(0.1, rel=1e-12)
    np.testing.assert_allclose(step / 0.1, exact_direction(inst.X, inst.Y, inst.v, inst.W, p),
                               atol=1e-12)


def test_bad_prompt_shape_names_p():
    inst = mm.data.fig2()
    with pytest.raises(ValueError, match="^P: expected shape"):
        ngd_log_domain(inst.X, inst.Y, inst.v, np.zeros((2, 5)), 1, W=inst.W)


def tie_instance():
    """Chapter 4's tie example: sequence 0 has its optimal token at (-2, 3) and two tokens of
    score 0 at the origin and at (-0.5, 0); sequence 1 its optimal token at (1, 0) and two
    tokens at the origin. W = diag(1, 1, 0), v = e_3."""
    X = np.zeros((2, 3, 3))
    X[0, 0] = [-2.0, 3.0, 1.0]
    X[0, 2, 0] = -0.5
    X[1, 0] = [1.0, 0.0, 1.0]
    return X, np.ones(2), np.array([0.0, 0.0, 1.0]), np.diag([1.0, 1.0, 0.0])


def test_tied_scores_do_not_swamp_the_step():
    """At p = (2000, 0.3, 0) the pair (origin, (-0.5, 0)) of sequence 0 has the largest weight,
    about e^-1000, but equal scores, so its term is exactly zero; the pairs that move p weigh
    e^-2000 or less, 1000 logits below it. Scaling every weight by the largest (that pair's)
    underflowed them all to 0: the step was 0 / 0. The step must have length lr and the exact
    direction (60 digits). Catches a scale taken over the pairs whose term is zero."""
    X, Y, v, W = tie_instance()
    p = np.array([2000.0, 0.3, 0.0])
    path = ngd_log_domain(X, Y, v, p[None], 1, lr=0.1, W=W, record_every=1)
    step = path[1, 0] - p
    assert np.linalg.norm(step) == pytest.approx(0.1, rel=1e-12)
    np.testing.assert_allclose(step / 0.1, exact_direction(X, Y, v, W, p), atol=1e-12)


def test_all_scores_tied_names_v():
    X, Y, v, W = tie_instance()
    X[:, 0, 2] = 0.0                        # the optimal tokens lose their score: all tie
    with pytest.raises(ValueError, match="^v: every pair"):
        ngd_log_domain(X, Y, v, np.ones((1, 3)), 1, W=W)
    with pytest.raises(ValueError, match="^v: every pair"):
        ngd_log_domain_stack(X[None], Y[None], v, np.ones((1, 3)), 1, W=W)


def stacked_instances():
    """Three instances of one shape with different tokens and labels (one has tied scores):
    (X (3, n, T, d), Y (3, n), v, W). The third has label -1 on sequence 0, whose tokens' last
    coordinate (the one v reads, W = diag(1, ..., 1, 0)) changes sign: same keys and scores as
    a label +1, but a run that took another run's labels gets them wrong."""
    a = mm.data.random_instance(3, 4, 6, seed=5)
    b = mm.data.random_instance(3, 4, 6, seed=6, equal_scores=True)
    c = mm.data.random_instance(3, 4, 6, seed=7)
    assert np.allclose(a.W, np.diag([1.0] * 5 + [0.0])) and np.allclose(a.v, np.eye(6)[5])
    assert np.allclose(a.W, b.W) and np.allclose(a.W, c.W) and np.allclose(a.v, c.v)
    Xc, Yc = c.X.copy(), c.Y.copy()
    Xc[0, :, 5] *= -1
    Yc[0] *= -1
    return np.stack([a.X, b.X, Xc]), np.stack([a.Y, b.Y, Yc]), a.v, a.W


def test_stack_follows_each_instance_with_mm_gd():
    """Run b of the stack is normalized GD on instance b: from every 20th iterate of mm.gd
    (eps = 1e-300, where float64 does not underflow) on each instance alone, one stacked step
    gives the next iterate, to 1e-12 as in the test above. Catches runs that use another
    run's keys or labels."""
    X, Y, v, W = stacked_instances()
    P0 = np.random.default_rng(1).standard_normal((3, 6)) * 2
    runs = [mm.gd(X[b], Y[b], v, P0[b][None], 200, 0.1, W=W, normalized=True, eps=1e-300)
            for b in range(3)]
    for k in range(0, 200, 20):
        P = np.stack([run.p[k, 0] for run in runs])
        step = ngd_log_domain_stack(X, Y, v, P, 1, lr=0.1, W=W, record_every=1)
        np.testing.assert_array_equal(step[0], P)
        np.testing.assert_allclose(step[1], [run.p[k + 1, 0] for run in runs], rtol=0,
                                   atol=1e-12)


def test_stack_moves_far_out_with_the_exact_direction():
    """Far out (|p| = 3000, logit gaps in the thousands), each stacked run takes a step of length
    lr along its own instance's exact direction (60 digits), the tied-score instance included."""
    X, Y, v, W = stacked_instances()
    P = np.random.default_rng(2).standard_normal((3, 6)) * W.diagonal()
    P *= 3000.0 / np.linalg.norm(P, axis=-1, keepdims=True)
    path = ngd_log_domain_stack(X, Y, v, P, 1, lr=0.1, W=W, record_every=1)
    for b in range(3):
        step = path[1, b] - P[b]
        assert np.linalg.norm(step) == pytest.approx(0.1, rel=1e-12)
        np.testing.assert_allclose(step / 0.1, exact_direction(X[b], Y[b], v, W, P[b]),
                                   atol=1e-12)


def test_stack_bad_shapes_name_the_argument():
    X, Y, v, W = stacked_instances()
    with pytest.raises(ValueError, match="^X: expected shape"):
        ngd_log_domain_stack(X[0], Y, v, np.zeros((3, 6)), 1, W=W)
    with pytest.raises(ValueError, match="^Y: expected shape"):
        ngd_log_domain_stack(X, Y[:2], v, np.zeros((3, 6)), 1, W=W)
    with pytest.raises(ValueError, match="^P: expected shape"):
        ngd_log_domain_stack(X, Y, v, np.zeros((2, 6)), 1, W=W)
