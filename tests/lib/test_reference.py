"""``mm.reference`` (the paper's equations in plain numpy) both ways.

1. The reference against something independent of it and of the engines: torch autograd on the
   model written out here, each loss built from its registry formula string.
2. Every engine against the reference, one step at a time: the reference's step from the
   engine's iterate k must give the engine's iterate k + 1 to within that step's rounding bound
   (roundoff.step_atol, from the gradient's terms), and the recorded risk must be the
   reference's at iterate k. gd (torch and compiled engines), gd_stack, gd_W (a query per
   sequence, one shared query), gd_joint (W and W=None), gd_KQ, gd_KQ_stack; the one-shot functions (attention, predict,
   risk and gradients) on batches of prompts; the SVMs against the reference cvxpy programs
   (both solvers; the W-SVM in every norm);
   the regularization path against the reference's projected GD.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import maxmargin as mm
from maxmargin import reference as ref
from roundoff import attention_terms, logit_size, one_thread, risk_atol, step_atol

LOSS_NAMES = sorted(mm.LOSSES)
MODES = {  # name: (normalized, lr, eps)
    "plain": (False, 0.5, 1e-12),
    "normalized": (True, 0.1, 1e-9),
    "normalized-large-eps": (True, 0.1, 0.3),   # eps must sit next to the norm
}
STEPS = 12
SEEDS = (0, 1, 2)


def torch_loss(name: str):
    """l(x) of the registry entry ``name``, from its formula string, on torch tensors."""
    formula = mm.LOSSES[name].formula
    return lambda x: eval(formula, {"__builtins__": {}}, {"log": torch.log, "exp": torch.exp, "x": x})


def instance(seed: int, with_W: bool = True, n: int = 4, T: int = 3, d: int = 3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, T, d))
    Y = rng.choice([-1.0, 1.0], size=n)
    v = rng.standard_normal(d)
    W = rng.standard_normal((d, d)) + np.eye(d) if with_W else None
    assert W is None or np.abs(W - W.T).max() > 0.1      # W vs W.T must make a difference
    return X, Y, v, W, rng


# ---- rounding bounds of one step, from the reference's quantities (roundoff.py) ---------------


def _weights(X, Y, v, s, loss):
    gamma = ref.scores(X, Y, v)
    z = np.sum(s * gamma, axis=1)
    return ref.LOSSES[loss][1](z) / len(X), gamma, z


def p_step_atol(X, Y, v, W, p, lr, loss, normalized, eps):
    s = ref.attention(X, p, W=W)
    weight, gamma, z = _weights(X, Y, v, s, loss)
    keys = X @ (np.eye(X.shape[2]) if W is None else W)
    g = np.linalg.norm(ref.risk_grad(X, Y, v, p, W=W, loss=loss)) if normalized else None
    L = logit_size(keys, p)
    return (step_atol(p, lr, attention_terms(weight, s, gamma, z, keys), L, g, eps),
            risk_atol(weight, gamma, L))


def W_terms(X, Y, v, W, queries, loss):
    """(G-terms (d, d), logit size, risk bound) of the gradient in W."""
    n, T, d = X.shape
    Z = np.broadcast_to(queries, (n, d))
    s = ref.self_attention(X, W, Z)
    weight, gamma, z = _weights(X, Y, v, s, loss)
    keys = np.einsum("ntd,ne->ntde", X, Z).reshape(n, T, d * d)   # d logit / dW = x z^T
    L = logit_size(keys, np.asarray(W).reshape(-1))
    return attention_terms(weight, s, gamma, z, keys).reshape(d, d), L, risk_atol(weight, gamma, L)


def assert_step(actual, expected, atol, what):
    np.testing.assert_allclose(actual, expected, rtol=0, atol=atol, err_msg=what)


# ---- 1. the reference against torch autograd ---------------------------------------------------


@pytest.mark.parametrize("loss", LOSS_NAMES)
@pytest.mark.parametrize("seed", SEEDS)
def test_reference_risk_and_gradients_match_autograd(seed, loss):
    """Bugs caught in the reference itself: a sign, a dropped 1/n, W used as W.T, the softmax
    over the wrong axis, a wrong loss or slope formula, x z^T transposed in the W-gradient,
    G Q vs G^T K swapped in the factors' gradients, a penalty without its factor 2."""
    X, Y, v, W, rng = instance(seed)
    p, Z = rng.standard_normal(3), rng.standard_normal((4, 3))
    K, Q = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
    lt = torch_loss(loss)
    with one_thread():
        Xt, Yt = torch.tensor(X), torch.tensor(Y)
        vt, pt, Wt = (torch.tensor(a, requires_grad=True) for a in (v, p, W))
        Kt, Qt = torch.tensor(K, requires_grad=True), torch.tensor(Q, requires_grad=True)
        s = torch.softmax(Xt @ (Wt @ pt), dim=-1)
        risk = lt(Yt * (s * (Xt @ vt)).sum(-1)).mean()
        g_v, g_p = torch.autograd.grad(risk, (vt, pt))

        def risk_of(Wm):
            s = torch.softmax(torch.einsum("ntd,de,ne->nt", Xt, Wm, torch.tensor(Z)), dim=-1)
            return lt(Yt * (s * (Xt @ torch.tensor(v))).sum(-1)).mean()

        risk_w = risk_of(Wt)
        (g_W,) = torch.autograd.grad(risk_w, (Wt,))
        g_K, g_Q = torch.autograd.grad(risk_of(Kt @ Qt.T) + 0.3 * ((Kt ** 2).sum() + (Qt ** 2).sum()),
                                       (Kt, Qt))
    close = dict(rtol=1e-11, atol=1e-14)
    assert ref.risk(X, Y, v, p, W=W, loss=loss) == pytest.approx(risk.item(), rel=1e-12)
    np.testing.assert_allclose(ref.predict(X, v, p, W=W), (s * (Xt @ vt)).sum(-1).detach(), **close)
    np.testing.assert_allclose(ref.risk_grad(X, Y, v, p, W=W, loss=loss), g_p, **close)
    np.testing.assert_allclose(ref.risk_grad_v(X, Y, v, p, W=W, loss=loss), g_v, **close)
    assert ref.risk_W(X, Y, v, W, Z, loss=loss) == pytest.approx(risk_w.item(), rel=1e-12)
    np.testing.assert_allclose(ref.risk_grad_W(X, Y, v, W, Z, loss=loss), g_W, **close)
    grads = ref.risk_grad_KQ(X, Y, v, K, Q, Z, loss=loss, reg=0.3)
    np.testing.assert_allclose(grads.K, g_K, **close)
    np.testing.assert_allclose(grads.Q, g_Q, **close)


def test_reference_steps_are_the_definitions():
    """descend is x - lr g, or x - lr g / (||g|| + eps) (Frobenius for a matrix): checked on
    numbers worked by hand. Bugs caught: eps dropped or added after the division, the norm of
    a matrix taken per row, lr applied twice."""
    assert_step(ref.descend([1.0, 1.0], [3.0, 4.0], 0.5), [-0.5, -1.0], 0, "plain")
    assert_step(ref.descend([1.0, 1.0], [3.0, 4.0], 0.5, normalized=True, eps=5.0),
                [0.85, 0.8], 1e-15, "normalized")
    assert_step(ref.descend(np.zeros((2, 2)), [[3.0, 0.0], [0.0, 4.0]], 1.0, normalized=True,
                            eps=0.0), [[-0.6, 0.0], [0.0, -0.8]], 1e-15, "Frobenius")


# ---- 2. the engines against the reference ------------------------------------------------------


@pytest.mark.parametrize("engine", ["torch", "compiled"])
@pytest.mark.parametrize("with_W", [False, True], ids=["W=None", "W"])
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_gd_takes_the_reference_step(loss, mode, with_W, engine, monkeypatch):
    """Bugs caught in either engine: a wrong sign, a dropped 1/n, W used as W.T, eps in the
    wrong place, normalization across the batch, an off-by-one iterate or risk record."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    normalized, lr, eps = MODES[mode]
    for seed in SEEDS:
        X, Y, v, W, rng = instance(seed, with_W)
        P0 = 0.5 * rng.standard_normal((2, 3))
        traj = mm.gd(X, Y, v, P0, STEPS, lr, W=W, loss=loss, normalized=normalized, eps=eps)
        np.testing.assert_array_equal(traj.p[0], P0)
        for b in range(2):
            for k in range(STEPS + 1):
                p = traj.p[k, b]
                atol, r_atol = p_step_atol(X, Y, v, W, p, lr, loss, normalized, eps)
                assert traj.risk[k, b] == pytest.approx(ref.risk(X, Y, v, p, W=W, loss=loss),
                                                        rel=1e-10, abs=r_atol), (seed, b, k)
                if k < STEPS:
                    assert_step(traj.p[k + 1, b], ref.gd_step(X, Y, v, p, lr, W=W, loss=loss,
                                normalized=normalized, eps=eps), atol, f"seed {seed} run {b} step {k}")


@pytest.mark.parametrize("mode", ["plain", "normalized-large-eps"])
@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_gd_stack_takes_the_reference_step_per_instance(loss, mode):
    """Bugs caught: a per-instance W or v of another instance, W transposed per instance, the
    normalization or the risk's mean taken across instances."""
    normalized, lr, eps = MODES[mode]
    rng = np.random.default_rng(5)
    M, B, n, T, d = 3, 2, 4, 3, 3
    X = rng.standard_normal((M, n, T, d))
    Y = rng.choice([-1.0, 1.0], size=(M, n))
    V = rng.standard_normal((M, d))
    W = rng.standard_normal((M, d, d)) + np.eye(d)
    P0 = 0.5 * rng.standard_normal((M, B, d))
    traj = mm.gd_stack(X, Y, V, P0, STEPS, lr, W=W, loss=loss, normalized=normalized, eps=eps)
    for m in range(M):
        for b in range(B):
            for k in range(STEPS):
                p = traj.p[k, m, b]
                atol, r_atol = p_step_atol(X[m], Y[m], V[m], W[m], p, lr, loss, normalized, eps)
                assert traj.risk[k, m, b] == pytest.approx(
                    ref.risk(X[m], Y[m], V[m], p, W=W[m], loss=loss), rel=1e-10, abs=r_atol)
                assert_step(traj.p[k + 1, m, b], ref.gd_step(X[m], Y[m], V[m], p, lr, W=W[m],
                            loss=loss, normalized=normalized, eps=eps), atol, f"{m} {b} {k}")


@pytest.mark.parametrize("engine", ["torch", "compiled"])
@pytest.mark.parametrize("queries", ["per sequence", "shared"])
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_gd_W_takes_the_reference_step(loss, mode, queries, engine, monkeypatch):
    """Bugs caught: the W-gradient transposed (z x^T), a query of the wrong sequence, the
    Frobenius normalization over the wrong axes; with one shared query (GD on u = W p), W p
    taken as W^T p, the step of u not scaled by ||p||^2 or ||p||, W rebuilt as p u^T."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    normalized, lr, eps = MODES[mode]
    for seed in SEEDS[:2]:
        X, Y, v, _, rng = instance(seed)
        Z = rng.standard_normal((4, 3)) if queries == "per sequence" else rng.standard_normal(3)
        W0 = rng.standard_normal((2, 3, 3))
        traj = mm.gd_W(X, Y, v, W0, Z, STEPS, lr, loss=loss, normalized=normalized, eps=eps)
        np.testing.assert_array_equal(traj.W[0], W0)
        for b in range(2):
            for k in range(STEPS):
                W = traj.W[k, b]
                terms, L, r_atol = W_terms(X, Y, v, W, Z, loss)
                g = ref.risk_grad_W(X, Y, v, W, Z, loss=loss)
                atol = step_atol(W, lr, terms, L, np.linalg.norm(g) if normalized else None, eps)
                assert traj.risk[k, b] == pytest.approx(ref.risk_W(X, Y, v, W, Z, loss=loss),
                                                        rel=1e-10, abs=r_atol)
                assert_step(traj.W[k + 1, b], ref.gd_W_step(X, Y, v, W, Z, lr, loss=loss,
                            normalized=normalized, eps=eps), atol, f"seed {seed} run {b} step {k}")


@pytest.mark.parametrize("engine", ["torch", "compiled"])
@pytest.mark.parametrize("with_W", [False, True], ids=["W=None", "W"])
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_gd_joint_takes_the_reference_step(loss, mode, with_W, engine, monkeypatch):
    """Bugs caught: v's or p's gradient wrong (sign, 1/n, W.T), v updated before p's gradient
    is taken, one normalization for both parameters, eps_v and eps_p swapped; W=None not the
    identity."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    normalized, lr, eps = MODES[mode]
    eps_v, eps_p = eps, 2.0 * eps
    for seed in SEEDS[:2]:
        X, Y, _, W, rng = instance(seed, with_W)
        V0, P0 = 0.5 * rng.standard_normal((2, 3)), 0.5 * rng.standard_normal((2, 3))
        traj = mm.gd_joint(X, Y, V0, P0, STEPS, lr, W=W, loss=loss, normalized=normalized,
                           eps_v=eps_v, eps_p=eps_p)
        for b in range(2):
            for k in range(STEPS):
                v, p = traj.v[k, b], traj.p[k, b]
                s = ref.attention(X, p, W=W)
                weight, gamma, z = _weights(X, Y, v, s, loss)
                keys = X if W is None else X @ W
                L = logit_size(keys, p)
                g_v = ref.risk_grad_v(X, Y, v, p, W=W, loss=loss)
                g_p = ref.risk_grad(X, Y, v, p, W=W, loss=loss)
                atol_v = step_atol(v, lr, attention_terms(weight, s, 0 * gamma, 1 + 0 * z,
                                   Y[:, None, None] * X), L, np.linalg.norm(g_v) if normalized else None, eps_v)
                atol_p = step_atol(p, lr, attention_terms(weight, s, gamma, z, keys), L,
                                   np.linalg.norm(g_p) if normalized else None, eps_p)
                assert traj.risk[k, b] == pytest.approx(ref.risk(X, Y, v, p, W=W, loss=loss),
                                                        rel=1e-10, abs=risk_atol(weight, gamma, L))
                step = ref.gd_joint_step(X, Y, v, p, lr, normalized=normalized, W=W, loss=loss,
                                         eps_v=eps_v, eps_p=eps_p)
                assert_step(traj.v[k + 1, b], step.v, atol_v, f"v: seed {seed} run {b} step {k}")
                assert_step(traj.p[k + 1, b], step.p, atol_p, f"p: seed {seed} run {b} step {k}")


@pytest.mark.parametrize("engine", ["torch", "compiled"])
@pytest.mark.parametrize("case", ["shared", "per sequence", "shared, reg"])
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_gd_KQ_takes_the_reference_step(loss, mode, case, engine, monkeypatch):
    """Bugs caught: K updated before Q's gradient is taken, G Q and G^T K swapped or
    transposed, one normalization for both factors, the penalty's factor 2 or sign."""
    monkeypatch.setenv("MAXMARGIN_ENGINE", engine)
    normalized, lr, eps = MODES[mode]
    reg = 0.05 if "reg" in case else 0.0
    X, Y, v, _, rng = instance(7)
    Z = rng.standard_normal(3) if case.startswith("shared") else rng.standard_normal((4, 3))
    K0, Q0 = rng.standard_normal((2, 3, 2)), rng.standard_normal((2, 3, 2))
    traj = mm.gd_KQ(X, Y, v, K0, Q0, Z, STEPS, lr, loss=loss, normalized=normalized, eps=eps,
                    reg=reg)
    for b in range(2):
        for k in range(STEPS):
            K, Q = traj.K[k, b], traj.Q[k, b]
            terms, _, r_atol = W_terms(X, Y, v, K @ Q.T, Z, loss)
            L = logit_size(np.einsum("ntd,ne->ntde", X, np.broadcast_to(Z, (4, 3))).reshape(4, 3, 9),
                           (np.abs(K) @ np.abs(Q).T).reshape(-1))
            g = ref.risk_grad_KQ(X, Y, v, K, Q, Z, loss=loss, reg=reg)
            size_K = terms @ np.abs(Q) + 2 * reg * np.abs(K)
            size_Q = terms.T @ np.abs(K) + 2 * reg * np.abs(Q)
            atol_K = step_atol(K, lr, size_K, L, np.linalg.norm(g.K) if normalized else None, eps)
            atol_Q = step_atol(Q, lr, size_Q, L, np.linalg.norm(g.Q) if normalized else None, eps)
            assert traj.risk[k, b] == pytest.approx(ref.risk_W(X, Y, v, K @ Q.T, Z, loss=loss),
                                                    rel=1e-10, abs=r_atol)
            step = ref.gd_KQ_step(X, Y, v, K, Q, Z, lr, loss=loss, normalized=normalized,
                                  eps=eps, reg=reg)
            assert_step(traj.K[k + 1, b], step.K, atol_K, f"K: run {b} step {k}")
            assert_step(traj.Q[k + 1, b], step.Q, atol_Q, f"Q: run {b} step {k}")


@pytest.mark.parametrize("freeze_Q", [False, True], ids=["K and Q", "freeze_Q"])
@pytest.mark.parametrize("mode", ["plain", "normalized-large-eps"])
@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_gd_KQ_stack_takes_the_reference_step_per_instance(loss, mode, freeze_Q):
    """Each instance's run of mm.gd_KQ_stack steps as the reference's gd_KQ_step on that
    instance (with freeze_Q, K's step of it and Q kept). Bugs caught: an instance's queries,
    tokens or v paired with another instance's factors, the normalization or the risk's mean
    taken across instances, Q moved when frozen, the penalty's factor."""
    normalized, lr, eps = MODES[mode]
    reg = 0.05
    rng = np.random.default_rng(11)
    M, n, T, d, m = 3, 4, 3, 3, 2
    X = rng.standard_normal((M, n, T, d))
    Y = rng.choice([-1.0, 1.0], size=(M, n))
    V = rng.standard_normal((M, d))
    Z = rng.standard_normal((M, n, d))
    K0, Q0 = rng.standard_normal((M, d, m)), rng.standard_normal((M, d, m))
    traj = mm.gd_KQ_stack(X, Y, V, K0, Q0, Z, STEPS, lr, loss=loss, normalized=normalized,
                          eps=eps, reg=reg, freeze_Q=freeze_Q)
    for j in range(M):
        for k in range(STEPS):
            K, Q = traj.K[k, j], traj.Q[k, j]
            terms, _, r_atol = W_terms(X[j], Y[j], V[j], K @ Q.T, Z[j], loss)
            L = logit_size(np.einsum("ntd,ne->ntde", X[j], Z[j]).reshape(n, T, d * d),
                           (np.abs(K) @ np.abs(Q).T).reshape(-1))
            g = ref.risk_grad_KQ(X[j], Y[j], V[j], K, Q, Z[j], loss=loss, reg=reg)
            atol_K = step_atol(K, lr, terms @ np.abs(Q) + 2 * reg * np.abs(K), L,
                               np.linalg.norm(g.K) if normalized else None, eps)
            atol_Q = step_atol(Q, lr, terms.T @ np.abs(K) + 2 * reg * np.abs(Q), L,
                               np.linalg.norm(g.Q) if normalized else None, eps)
            assert traj.risk[k, j] == pytest.approx(
                ref.risk_W(X[j], Y[j], V[j], K @ Q.T, Z[j], loss=loss), rel=1e-10, abs=r_atol)
            step = ref.gd_KQ_step(X[j], Y[j], V[j], K, Q, Z[j], lr, loss=loss,
                                  normalized=normalized, eps=eps, reg=reg)
            assert_step(traj.K[k + 1, j], step.K, atol_K, f"K: instance {j} step {k}")
            if freeze_Q:
                assert np.array_equal(traj.Q[k + 1, j], Q0[j])
            else:
                assert_step(traj.Q[k + 1, j], step.Q, atol_Q, f"Q: instance {j} step {k}")


@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_the_model_functions_match_the_reference_on_a_batch(loss):
    """mm.attention, predict, risk, risk_grad, risk_grad_v (a batch of prompts), risk_W and
    risk_grad_W (a batch of W, both kinds of queries), each prompt against the reference.
    Bugs caught: a batch axis mixed with the token or sequence axis, a wrong formula."""
    for seed in SEEDS:
        X, Y, v, W, rng = instance(seed)
        P = 1.5 * rng.standard_normal((5, 3))
        Ws = rng.standard_normal((2, 3, 3))
        close = dict(rtol=1e-11, atol=1e-13)
        for b, p in enumerate(P):
            np.testing.assert_allclose(mm.attention(X, P, W=W)[b], ref.attention(X, p, W=W), **close)
            np.testing.assert_allclose(mm.predict(X, v, P, W=W)[b], ref.predict(X, v, p, W=W), **close)
            np.testing.assert_allclose(mm.risk(X, Y, v, P, W=W, loss=loss)[b],
                                       ref.risk(X, Y, v, p, W=W, loss=loss), **close)
            np.testing.assert_allclose(mm.risk_grad(X, Y, v, P, W=W, loss=loss)[b],
                                       ref.risk_grad(X, Y, v, p, W=W, loss=loss), **close)
            np.testing.assert_allclose(mm.risk_grad_v(X, Y, v, P, W=W, loss=loss)[b],
                                       ref.risk_grad_v(X, Y, v, p, W=W, loss=loss), **close)
        for Z in (rng.standard_normal((4, 3)), rng.standard_normal(3)):
            for b, Wb in enumerate(Ws):
                np.testing.assert_allclose(mm.risk_W(X, Y, v, Ws, Z, loss=loss)[b],
                                           ref.risk_W(X, Y, v, Wb, Z, loss=loss), **close)
                np.testing.assert_allclose(mm.risk_grad_W(X, Y, v, Ws, Z, loss=loss)[b],
                                           ref.risk_grad_W(X, Y, v, Wb, Z, loss=loss), **close)


# ---- the max-margin programs -------------------------------------------------------------------


@pytest.mark.parametrize("solver", ["fast", "cvxpy"])
@pytest.mark.parametrize("seed", SEEDS)
def test_att_svm_and_v_svm_match_the_reference_programs(seed, solver):
    """Bugs caught: the keys W x instead of W^T x in the constraints, the relaxed sequences'
    right side 1 instead of 0 (or the flags inverted), a v-SVM constraint without Y_i."""
    X, _, _, W, rng = instance(seed, n=3, T=3, d=6)   # d >= n (T - 1): every alpha feasible
    alpha = rng.integers(0, 3, size=3)
    np.testing.assert_allclose(mm.att_svm(X, alpha, W=W, solver=solver).p,
                               ref.att_svm(X, alpha, W=W), atol=1e-6)
    relaxed = np.array([True, False, True])
    np.testing.assert_allclose(mm.att_svm(X, alpha, W=W, relaxed=relaxed, solver=solver).p,
                               ref.att_svm(X, alpha, W=W, relaxed=relaxed), atol=1e-6)
    R = rng.standard_normal((5, 3))
    Yv = np.sign(R @ rng.standard_normal(3))
    np.testing.assert_allclose(mm.v_svm(R, Yv, solver=solver).v, ref.v_svm(R, Yv), atol=1e-6)


@pytest.mark.parametrize("queries", ["per sequence", "shared"])
@pytest.mark.parametrize("seed", SEEDS)
def test_w_svms_match_the_reference_programs(seed, queries):
    """Frobenius: the unique solution; nuclear: the optimal value (the solution may not be
    unique) and the reference's constraints at the engine's W. Bugs caught: W z_i x^T
    transposed, a query of the wrong sequence, the nuclear norm swapped for another."""
    rng = np.random.default_rng(20 + seed)
    X = rng.standard_normal((3, 3, 3))
    Z = rng.standard_normal((3, 3)) if queries == "per sequence" else rng.standard_normal(3)
    alpha = rng.integers(0, 3, size=3)
    fro = mm.w_svm(X, alpha, queries=Z)
    np.testing.assert_allclose(fro.W, ref.w_svm(X, alpha, queries=Z), atol=1e-6)
    nuc, W_ref = mm.w_svm(X, alpha, queries=Z, norm="nuclear"), ref.w_svm(X, alpha, queries=Z,
                                                                         norm="nuclear")
    nuclear = lambda A: np.linalg.svd(A, compute_uv=False).sum()
    assert nuclear(nuc.W) == pytest.approx(nuclear(W_ref), rel=1e-6)
    Zs = np.broadcast_to(Z, (3, 3))
    for i in range(3):
        for t in range(3):
            if t != alpha[i]:
                assert (X[i, alpha[i]] - X[i, t]) @ nuc.W @ Zs[i] >= 1 - 1e-6


NORMS = {  # the norms of mm.w_svm, computed here from their definitions
    "frobenius": lambda W: np.sqrt(np.sum(W ** 2)),
    "nuclear": lambda W: np.linalg.svd(W, compute_uv=False).sum(),
    "spectral": lambda W: np.linalg.svd(W, compute_uv=False).max(),
    "l1": lambda W: np.abs(W).sum(),
    "linf": lambda W: np.abs(W).max(),
    3.0: lambda W: np.sum(np.abs(W) ** 3) ** (1 / 3),
}


@pytest.mark.parametrize("solver", ["fast", "cvxpy"])
@pytest.mark.parametrize("norm", list(NORMS), ids=str)
def test_w_svm_in_every_norm_matches_the_reference_program(norm, solver):
    """Chapter 8's eq-08-norm-svm: in each norm the engine's W and the reference's W have the
    same optimal norm (the optimum need not be unique: spectral, l1, linf) and both meet the
    margins. Bugs caught: the reference solving the Frobenius problem for another norm (it did,
    silently), a norm of the engine dual to the one asked, solver="cvxpy" not solving the
    program asked."""
    rng = np.random.default_rng(31)
    X, Z = rng.standard_normal((3, 3, 3)), rng.standard_normal((3, 3))
    alpha = np.array([0, 1, 2])
    W_engine = mm.w_svm(X, alpha, queries=Z, norm=norm, solver=solver).W
    W_ref = ref.w_svm(X, alpha, queries=Z, norm=norm)
    size = NORMS[norm]
    assert size(W_engine) == pytest.approx(size(W_ref), rel=1e-5)
    for W in (W_engine, W_ref):
        margins = [(X[i, alpha[i]] - X[i, t]) @ W @ Z[i] for i in range(3) for t in range(3)
                   if t != alpha[i]]
        assert min(margins) >= 1 - 1e-6


def test_the_reference_programs_refuse_what_they_cannot_solve():
    """An infeasible selection (token 0 of (0, 0), (1, 0), (-1, 0) cannot beat both others:
    (x_0 - x_t)^T p >= 1 for t = 1, 2 asks -p_1 >= 1 and p_1 >= 1) and an unknown norm raise
    a ValueError instead of returning None or a solution of another problem."""
    X = np.array([[[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0]]])
    with pytest.raises(ValueError, match="att_svm: the program is infeasible"):
        ref.att_svm(X, [0])
    with pytest.raises(ValueError, match="w_svm: the program is infeasible"):
        ref.w_svm(X, [0], queries=[1.0, 0.0])
    with pytest.raises(ValueError, match="v_svm: the program is infeasible"):
        ref.v_svm(np.array([[1.0, 0.0], [1.0, 0.0]]), np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match="norm: expected one of"):
        ref.w_svm(np.array([[[1.0, 0.0], [0.0, 1.0]]]), [0], queries=[1.0, 0.0], norm="max")


def test_regularization_path_matches_the_reference():
    """The engine's p_bar(R) is the reference's projected-GD point on instances with one basin
    (the risk falls along one direction; a Gaussian instance), and its risk is never above the
    reference's. Bugs caught: a path point off the sphere, the radius applied as R^2, a risk of
    another loss."""
    X1 = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    cases = [(X1, np.array([1.0]), np.array([1.0, 0.5]), None, [0.5, 1.0, 2.0])]
    X, Y, v, W, _ = instance(3)
    cases.append((X, Y, v, W, [0.5, 1.0]))
    for X, Y, v, W, radii in cases:
        path = mm.regularization_path(X, Y, v, radii, W=W, starts=4)
        points = ref.regularization_path(X, Y, v, radii, W=W)
        np.testing.assert_allclose(np.linalg.norm(points, axis=1), radii, rtol=1e-9)
        np.testing.assert_allclose(path.points, points, atol=1e-5)
        for R, p in zip(radii, path.points):
            assert ref.risk(X, Y, v, p, W=W) <= ref.risk(X, Y, v, points[radii.index(R)], W=W) + 1e-12
