"""The one torch loop (lib/maxmargin/_torchdescent.py, issue 38) where the old per-trainer loops
differed for no reason: gd_KQ had no scaled retry (it refused a normalized step whose direction
is finite when G Q overflowed), and gd_KQ_stack refused a gradient that was not finite before
trying the step. Each case is checked against an independent numpy step computed on scores
divided by 1e300 (the direction of a normalized step does not depend on that scale).
"""
from __future__ import annotations

import numpy as np
import pytest

import maxmargin as mm

SCALE = 1e300   # v = SCALE * v_hat: scores near 1e300


def instance():
    rng = np.random.default_rng(38)
    n, T, d = 3, 4, 3
    X = rng.uniform(0.5, 1.5, size=(n, T, d))    # positive tokens
    Y = -np.ones(n)                                # with v_hat > 0: margins near -1e300, l' = -1
    v_hat = rng.uniform(0.5, 1.5, size=d)
    Z = rng.uniform(0.5, 1.5, size=(n, d))         # one query per sequence
    K0 = 1e-10 * np.eye(d)
    Q0 = 1e10 * (np.eye(d) + 0.1 * rng.standard_normal((d, d)))   # K0 Q0^T near I
    return X, Y, v_hat, Z, K0, Q0


def reference_step(X, Y, v_hat, Z, K0, Q0, lr):
    """One normalized GD step on (K, Q) in numpy, from scores / SCALE: G Q near 1e310 in float64
    (not representable) is taken here near 1e10, and each factor's gradient divided by its own
    norm (eps = 1e-12 is below 1e-280 of either norm, so it does not show)."""
    n = len(Y)
    gamma = Y[:, None] * (X @ v_hat)                                 # scores / SCALE
    logits = np.einsum("ntd,de,ne->nt", X, K0 @ Q0.T, Z)
    s = np.exp(logits - logits.max(axis=1, keepdims=True))
    s /= s.sum(axis=1, keepdims=True)
    z = np.sum(s * gamma, axis=1)
    with np.errstate(over="ignore"):
        slope = -1.0 / (1.0 + np.exp(z * SCALE)) / n                 # (1/n) l'(z): -1/n here
    dlogits = slope[:, None] * s * (gamma - z[:, None])              # / SCALE
    G = np.einsum("nt,ntd,ne->de", dlogits, X, Z)                    # dL/dW / SCALE
    grad_K, grad_Q = G @ Q0, G.T @ K0
    return (K0 - lr * grad_K / np.linalg.norm(grad_K),
            Q0 - lr * grad_Q / np.linalg.norm(grad_Q))


@pytest.mark.parametrize("engine", ["torch", "compiled"])
@pytest.mark.parametrize("queries", ["per sequence", "shared"])
def test_gd_KQ_takes_the_normalized_step_whose_gradient_overflows(queries, engine, monkeypatch):
    """dL/dK = G Q reaches about 1e310 (G near 1e300, Q near 1e10) while its direction is finite:
    the step is taken along it, as gd's and gd_W's are. Bug caught: gd_KQ's loop had no scaled
    retry and raised "the gradient at step 0 is not finite" (issue 38); and (plain GD) the retry
    taken for plain steps too, a scaled step of the wrong length."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    if engine == "compiled":
        pytest.importorskip("numba")
    X, Y, v_hat, Z, K0, Q0 = instance()
    if queries == "shared":
        Z = np.broadcast_to(Z[0], Z.shape).copy()
    lr = 0.5
    run = mm.gd_KQ(X, Y, SCALE * v_hat, K0, Q0, Z[0] if queries == "shared" else Z, 1, lr,
                   normalized=True)
    K1, Q1 = reference_step(X, Y, v_hat, Z, K0, Q0, lr)
    np.testing.assert_allclose(run.K[1, 0], K1, rtol=1e-12, atol=1e-12 * lr)
    np.testing.assert_allclose(run.Q[1, 0], Q1, rtol=1e-12, atol=1e-12 * lr)
    assert np.all(np.isfinite(run.risk))
    # plain GD has no direction to rescue: the error keeps its wording (caller, step, cause)
    with pytest.raises(ValueError, match=r"^gd_KQ: the gradient at step 0 is not finite in "
                                         r"float64; "):
        mm.gd_KQ(X, Y, SCALE * v_hat, K0, Q0, Z[0] if queries == "shared" else Z, 1, lr)


def test_gd_KQ_stack_takes_the_normalized_step_whose_gradient_overflows():
    """The same step in a stack of two instances (the second with its tokens reversed), each
    run against its own reference. Bug caught: gd_KQ_stack checked the gradients' finiteness
    before the step and raised, where the normalized step is finite (issue 38)."""
    X, Y, v_hat, Z, K0, Q0 = instance()
    Xs, Zs = np.stack([X, X[:, ::-1]]), np.stack([Z, Z])
    lr = 0.5
    run = mm.gd_KQ_stack(Xs, np.stack([Y, Y]), SCALE * v_hat, K0, Q0, Zs, 1, lr, normalized=True)
    for j in range(2):
        K1, Q1 = reference_step(Xs[j], Y, v_hat, Z, K0, Q0, lr)
        np.testing.assert_allclose(run.K[1, j], K1, rtol=1e-12, atol=1e-12 * lr)
        np.testing.assert_allclose(run.Q[1, j], Q1, rtol=1e-12, atol=1e-12 * lr)
