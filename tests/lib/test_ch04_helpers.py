"""Chapter 04 helper: normalized GD in the log domain (maxmargin.book.ch04.ngd_log_domain)
against mm.gd where float64 does not underflow, and against 60-digit arithmetic where it does."""
from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

import maxmargin as mm
from maxmargin.book.ch04 import ngd_log_domain


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
