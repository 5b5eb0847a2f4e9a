"""``mm.gd_stack`` and ``mm.gd_W`` against plain torch autograd loops written here.

``gd_stack`` runs M instances x B starts as one array program, each instance with its own v and
its own (non-symmetric) W; ``gd_W`` trains the key-query matrix with one query per sequence.
The references replay every run on its own: the model written out in torch, the loss from the
formula string of its registry entry, autograd for the gradient.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import maxmargin as mm

STEPS = 25


def torch_loss(name: str):
    formula = mm.LOSSES[name].formula
    return lambda x: eval(formula, {"__builtins__": {}}, {"log": torch.log, "exp": torch.exp, "x": x})


def descend(risk_of, x0, steps, lr, normalized, eps):
    """Plain or normalized GD on one parameter by autograd: iterates and risks, (steps + 1) each."""
    x = torch.tensor(x0)
    iterates, risks = [], []
    for k in range(steps + 1):
        x = x.detach().requires_grad_(True)
        risk = risk_of(x)
        iterates.append(x.detach().clone())
        risks.append(risk.item())
        if k == steps:
            break
        (g,) = torch.autograd.grad(risk, x)
        with torch.no_grad():
            x = x - lr * (g / (g.norm() + eps) if normalized else g)
    return torch.stack(iterates).numpy(), np.array(risks)


@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize("loss", sorted(mm.LOSSES))
def test_gd_stack_matches_an_autograd_loop_per_instance(loss, normalized):
    """Bugs caught: a per-instance W used as W.T, instances mixed up (v, W or starts of the wrong
    instance), a normalization across instances or runs, the risk averaged over the wrong axis."""
    rng = np.random.default_rng(11)
    M, B, n, T, d = 3, 2, 4, 3, 3
    X = rng.standard_normal((M, n, T, d))
    Y = rng.choice([-1.0, 1.0], size=(M, n))
    V = rng.standard_normal((M, d))
    W = rng.standard_normal((M, d, d)) + np.eye(d)
    P0 = 0.5 * rng.standard_normal((M, B, d))
    traj = mm.gd_stack(X, Y, V, P0, STEPS, 0.3, W=W, loss=loss, normalized=normalized, eps=1e-9)
    assert traj.p.shape == (STEPS + 1, M, B, d) and traj.loss.shape == (STEPS + 1, M, B)
    for m in range(M):
        Xm, Ym, Wm = torch.tensor(X[m]), torch.tensor(Y[m]), torch.tensor(W[m])
        values = Xm @ torch.tensor(V[m])

        def risk_of(p):
            s = torch.softmax(Xm @ (Wm @ p), dim=-1)  # logits x_it^T W_m p
            return torch_loss(loss)(Ym * (s * values).sum(-1)).mean()

        for b in range(B):
            p, risks = descend(risk_of, P0[m, b], STEPS, 0.3, normalized, 1e-9)
            # normalized steps amplify rounding where a gradient is small: 1e-9 relative
            np.testing.assert_allclose(traj.p[:, m, b], p, rtol=1e-9, atol=1e-10)
            np.testing.assert_allclose(traj.loss[:, m, b], risks, rtol=1e-9, atol=1e-12)


def test_gd_stack_shared_W_and_v_are_broadcast():
    """A (d, d) W and a (d,) v are shared by every instance. Bug caught: the shared W transposed
    or applied to one instance only."""
    rng = np.random.default_rng(12)
    M, n, T, d = 2, 3, 4, 3
    X = rng.standard_normal((M, n, T, d))
    Y = rng.choice([-1.0, 1.0], size=(M, n))
    v, W = rng.standard_normal(d), rng.standard_normal((d, d))
    p0 = rng.standard_normal(d)
    traj = mm.gd_stack(X, Y, v, p0, STEPS, 0.2, W=W, normalized=True, eps=1e-9)
    for m in range(M):
        Xm, Ym = torch.tensor(X[m]), torch.tensor(Y[m])

        def risk_of(p):
            s = torch.softmax(Xm @ (torch.tensor(W) @ p), dim=-1)
            return torch.nn.functional.softplus(-Ym * (s * (Xm @ torch.tensor(v))).sum(-1)).mean()

        p, _ = descend(risk_of, p0, STEPS, 0.2, True, 1e-9)
        np.testing.assert_allclose(traj.p[:, m, 0], p, rtol=0, atol=1e-10)


@pytest.mark.parametrize("normalized", [False, True])
def test_gd_W_with_one_query_per_sequence_matches_an_autograd_loop(normalized):
    """Bugs caught: the W-gradient transposed (x z^T vs z x^T), a query of the wrong sequence, a
    Frobenius normalization over the wrong axes, a wrong risk record."""
    rng = np.random.default_rng(13)
    n, T, d, B = 4, 3, 3, 2
    X = rng.standard_normal((n, T, d))
    Y = rng.choice([-1.0, 1.0], size=n)
    v = rng.standard_normal(d)
    Z = rng.standard_normal((n, d))
    W0 = rng.standard_normal((B, d, d))
    traj = mm.gd_W(X, Y, v, W0, Z, STEPS, 0.4, normalized=normalized, eps=1e-9)
    assert traj.W.shape == (STEPS + 1, B, d, d)
    Xt, Yt, Zt = torch.tensor(X), torch.tensor(Y), torch.tensor(Z)

    def risk_of(W):
        s = torch.softmax(torch.einsum("ntd,de,ne->nt", Xt, W, Zt), dim=-1)  # x_it^T W z_i
        return torch.nn.functional.softplus(-Yt * (s * (Xt @ torch.tensor(v))).sum(-1)).mean()

    for b in range(B):
        W, risks = descend(risk_of, W0[b], STEPS, 0.4, normalized, 1e-9)
        np.testing.assert_allclose(traj.W[:, b], W, rtol=0, atol=1e-10)
        np.testing.assert_allclose(traj.loss[:, b], risks, rtol=1e-10, atol=1e-12)
