"""Normalized gradient descent is scale-free (issue 22, cause 1): the direction of a gradient
does not depend on its size, so neither may a normalized run.

With the correlation loss l(x) = -x the risk is linear in v, so grad_p L(c v) = c grad_p L(v):
normalized GD from the same start, with eps scaled along (eps c), must follow the same path for
every c > 0. The unscaled run is the reference (itself checked against autograd in
test_reference_gd.py). Before the fix, the torch engine's norm overflowed once the gradient's
entries passed about 1e154 (g / inf = 0: the iterates stopped), and the compiled engine refused
a finite gradient whose squares overflowed ("lr too large").
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import maxmargin as mm

SETTINGS = settings(max_examples=10, deadline=None, derandomize=True)
SCALES = st.integers(-300, 300).map(lambda k: 10.0 ** k)
INST = mm.data.fig2()
X, Y, W = INST.X, INST.Y, INST.W
V = np.array(INST.v, dtype=float)
P0 = np.array([[0.5, 0.0, 0.0], [-1.0, 2.0, 0.5]])
STEPS, LR, EPS = 6, 0.1, 1e-12


def reference(engine: str) -> np.ndarray:
    return mm.gd(X, Y, V, P0, STEPS, LR, W=W, loss="correlation", normalized=True, eps=EPS).p


@pytest.mark.parametrize("engine", ["torch", "compiled"])
@SETTINGS
@given(c=SCALES)
def test_normalized_gd_follows_the_same_path_at_every_scale_of_v(engine, c):
    """Bugs caught: a normalized step of g / ||g|| whose norm overflows (the run stalls at its
    start) or underflows (a huge step); a finite gradient refused as an overflow."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MAXMARGIN_ENGINE", engine)
        expected = reference(engine)
        run = mm.gd(X, Y, V * c, P0, STEPS, LR, W=W, loss="correlation", normalized=True,
                    eps=EPS * c)
    np.testing.assert_allclose(run.p, expected, rtol=1e-12, atol=1e-12)


@SETTINGS
@given(c=SCALES)
def test_normalized_gd_on_w_follows_the_same_path_at_every_scale_of_v(c):
    """The same for GD on the key-query matrix W (its own torch loop)."""
    W0, q = np.eye(3), np.array([1.0, 0.5, 0.0])
    expected = mm.gd_W(X, Y, V, W0, q, STEPS, LR, loss="correlation", normalized=True, eps=EPS).W
    run = mm.gd_W(X, Y, V * c, W0, q, STEPS, LR, loss="correlation", normalized=True, eps=EPS * c)
    np.testing.assert_allclose(run.W, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("c", [1e150, 1e200, 1e300])
def test_joint_normalized_steps_have_length_lr_for_a_huge_head(c):
    """gd_joint normalizes the p-gradient on its own: each p-step has length lr (up to
    eps / ||g||), whatever the scale of v0. Bug caught: the p-steps of length 0 once
    ||grad_p|| overflows."""
    run = mm.gd_joint(X, Y, V * c, P0[0], STEPS, LR, W=W, loss="correlation", normalized=True)
    lengths = np.linalg.norm(np.diff(run.p[:, 0], axis=0), axis=1)
    np.testing.assert_allclose(lengths, LR, rtol=1e-12)


@pytest.mark.parametrize("c", [1e-300, 1e-160, 1.0, 1e160, 1e300])
def test_trajectory_norms_are_scale_free(c):
    """Bug caught (issue 22, cause 5): norms of iterates near 1e300 computed as inf (or 0 near
    1e-300) because their squares leave float64. Reference: c times the norm at scale 1, by
    hand (3-4-12 makes 13)."""
    run = mm.gd(X, Y, V, np.array([3.0, 4.0, 12.0]) * c, 1, LR, W=W, normalized=True)
    assert run.norms[0, 0] == pytest.approx(13.0 * c, rel=1e-15)


@SETTINGS
@given(c=SCALES, e=SCALES)
def test_every_cosine_is_scale_free(c, e):
    """Bug caught (issue 22, cause 5): RegularizationPath.cosine with a direction of size 1e200
    gave 0 (its norm overflowed) and of size 1e-200 NaN. Every cosine method, with iterates
    scaled by c and the direction by e, must give the cosines at scale 1, computed here with
    numpy from the unscaled arrays."""
    u = np.array([0.3, -1.0, 2.0])
    run = mm.gd(X, Y, V, P0 * c, 2, LR * c, W=W)
    path = mm.regularization_path(X, Y, V, [1.0, 2.0], W=W, starts=1, steps=20)
    scaled_path = dataclasses.replace(path, points=path.points * c)
    run_W = mm.gd_W(X, Y, V, np.eye(3) * c, P0[1], 2, LR * c)
    unit_p = run.p / c
    for got, points, direction in [(run.cosine(u * e), unit_p, u),
                                   (scaled_path.cosine(u * e), path.points, u),
                                   (mm.cosine(run.p, u * e), unit_p, u),
                                   (run_W.cosine(np.outer(u, u) * e), (run_W.W / c).reshape(3, 1, 9),
                                    np.outer(u, u).ravel())]:
        points = points.reshape(-1, points.shape[-1]) if points.ndim > 2 else points
        expected = points @ direction / (np.linalg.norm(points, axis=-1) * np.linalg.norm(direction))
        np.testing.assert_allclose(np.ravel(got), np.ravel(expected), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("engine", ["torch", "compiled"])
def test_a_long_run_at_1e_300_follows_the_same_path(engine):
    """The 6-step runs above never reach a subnormal gradient; this one does (the gradient
    shrinks as the attention saturates, to about 1e-309 after 150 steps at c = 1e-300). Bug
    caught (found by an independent review): torch computed eps / max|g| as eps * (1 / max|g|),
    whose reciprocal overflows for a subnormal max|g|, so every step had length 0 from step
    158 on and the run ended 0.21 from the c = 1 path."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MAXMARGIN_ENGINE", engine)
        expected = mm.gd(X, Y, V, P0, 200, LR, W=W, loss="correlation", normalized=True,
                         eps=EPS).p
        run = mm.gd(X, Y, V * 1e-300, P0, 200, LR, W=W, loss="correlation", normalized=True,
                    eps=EPS * 1e-300)
    np.testing.assert_allclose(run.p, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("engine", ["torch", "compiled"])
def test_an_undetermined_normalized_step_is_refused_alike(engine):
    """A gradient that is exactly 0 in float64 while its true scale overflows (scores of -1e3
    under the exponential loss: the other token's attention e^-999 underflows, the factor
    e^1000 overflows) has no direction. Both engines raise the same ValueError, naming the
    scale of v. Bugs caught (found by an independent review): the compiled kernel's bare
    ZeroDivisionError, and the torch loop's NaN iterate (refused only at the next step, so a
    NaN last iterate would have been returned)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MAXMARGIN_ENGINE", engine)
        with pytest.raises(ValueError, match="step 0 .*scale of v"):
            mm.gd(np.array([[[1000.0], [1.0]]]), np.ones(1), -np.ones(1), np.ones(1), 1, 0.1,
                  loss="exponential", normalized=True)


@pytest.mark.parametrize("engine", ["torch", "compiled"])
def test_normalized_steps_survive_a_contraction_that_overflows(engine, monkeypatch):
    """Exponential loss at margins near -704 (slope e^704 = 1e305.7) and keys 1e3: the gradient
    (about 1e309) overflows but its direction does not. Every engine must take normalized steps
    of length lr along the direction of an overflow-free reference (one sequence: the slope is a
    common positive factor, so the step is +lr u / ||u|| with u = sum_t s_t (gamma_t - z) k_t,
    and for v, +lr w / ||w|| with w = sum_t s_t Y x_t), to 1e-12. Bug caught (issue 22 review,
    F6): the torch engine, gd_W and gd_joint refused at step 0, blaming the exponential loss's
    derivative, which is finite here."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    X = np.array([[[1e3, 0.0], [0.0, 1e3]]])
    v, lr, steps = np.array([-0.700, -0.708]), 1e-3, 5

    def reference(joint):
        p, w = np.zeros(2), v.copy()
        for _ in range(steps):
            logits = X[0] @ p
            s = np.exp(logits - logits.max())
            s /= s.sum()
            gamma = X[0] @ w
            z = s @ gamma
            u = (s * (gamma - z)) @ X[0]
            if joint:
                g = s @ X[0]
                w = w + lr * g / np.linalg.norm(g)
            p = p + lr * u / np.linalg.norm(u)
        return p, w

    p_ref, _ = reference(joint=False)
    run = mm.gd(X, [1.0], v, [0.0, 0.0], steps, lr, loss="exponential", normalized=True)
    np.testing.assert_allclose(run.p[-1, 0], p_ref, rtol=1e-12)
    for queries in ([1.0, 0.0], [[1.0, 0.0]]):
        W = mm.gd_W(X, [1.0], v, np.zeros((2, 2)), queries, steps, lr, loss="exponential",
                    normalized=True).W[-1, 0]
        np.testing.assert_allclose(W, np.outer(p_ref, [1.0, 0.0]), rtol=1e-12, atol=1e-15)
    with monkeypatch.context() as patch:  # the loop on W itself (the shared query's GD on u off)
        patch.setattr(mm._engines, "_descend_W_shared", lambda *args, **kw: None)
        W = mm.gd_W(X, [1.0], v, np.zeros((2, 2)), [1.0, 0.0], steps, lr, loss="exponential",
                    normalized=True).W[-1, 0]
        np.testing.assert_allclose(W, np.outer(p_ref, [1.0, 0.0]), rtol=1e-12, atol=1e-15)
    p_joint, v_joint = reference(joint=True)
    joint = mm.gd_joint(X, [1.0], v, [0.0, 0.0], steps, lr, loss="exponential", normalized=True)
    np.testing.assert_allclose(joint.p[-1, 0], p_joint, rtol=1e-12)
    np.testing.assert_allclose(joint.v[-1, 0], v_joint, rtol=1e-12)
