"""``mm.gd_joint`` against a plain torch autograd loop written here (issue 11, item 6).

The reference shares no code with the library: the model f(X_i) = v^T X_i^T softmax(X_i W p) is
written out in torch, each loss is built from the formula string its registry entry declares
(``mm.LOSSES[name].formula``, evaluated with torch's log and exp), and autograd gives the two
gradients. Every run of a batch is replayed on its own, so a normalization over the wrong axis
(across runs instead of within a run) shows as well.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import maxmargin as mm

STEPS = 40


def torch_loss(name: str):
    """The loss l(x) of the registry entry ``name``, from its formula, as a torch function."""
    formula = mm.LOSSES[name].formula
    return lambda x: eval(formula, {"__builtins__": {}}, {"log": torch.log, "exp": torch.exp, "x": x})


def instance(seed: int, with_W: bool = True):
    rng = np.random.default_rng(seed)
    n, T, d = 4, 3, 3
    X = rng.standard_normal((n, T, d))
    Y = rng.choice([-1.0, 1.0], size=n)
    W = rng.standard_normal((d, d)) + np.eye(d) if with_W else None
    assert W is None or np.abs(W - W.T).max() > 0.1  # W vs W.T must make a difference
    V0 = 0.5 * rng.standard_normal((3, d))
    P0 = 0.5 * rng.standard_normal((3, d))
    return X, Y, W, V0, P0


def reference_run(X, Y, W, v0, p0, steps, lr, loss, normalized, eps_v, eps_p):
    """One run of joint (normalized) GD on (v, p) by torch autograd.

    Returns iterates v, p (steps + 1, d), risks and mean sigmoid margins (steps + 1,), and the
    attention (steps + 1, n, T).
    """
    X, Y = torch.tensor(X), torch.tensor(Y)
    Wt = torch.eye(X.shape[2], dtype=torch.float64) if W is None else torch.tensor(W)
    loss_fn = torch_loss(loss)
    v, p = torch.tensor(v0), torch.tensor(p0)
    vs, ps, risks, probs, attention = [], [], [], [], []
    for k in range(steps + 1):
        v, p = v.detach().requires_grad_(True), p.detach().requires_grad_(True)
        s = torch.softmax(X @ (Wt @ p), dim=-1)            # logits x_it^T W p
        margin = Y * (s * (X @ v)).sum(dim=-1)
        risk = loss_fn(margin).mean()
        vs.append(v.detach().clone())
        ps.append(p.detach().clone())
        risks.append(risk.item())
        probs.append(torch.sigmoid(margin).mean().item())
        attention.append(s.detach().clone())
        if k == steps:
            break
        grad_v, grad_p = torch.autograd.grad(risk, (v, p))
        with torch.no_grad():
            if normalized:
                v = v - lr * grad_v / (grad_v.norm() + eps_v)
                p = p - lr * grad_p / (grad_p.norm() + eps_p)
            else:
                v = v - lr * grad_v
                p = p - lr * grad_p
    return (torch.stack(vs).numpy(), torch.stack(ps).numpy(), np.array(risks), np.array(probs),
            torch.stack(attention).numpy())


MODES = {  # name: (normalized, lr, eps_v, eps_p)
    "plain": (False, 0.5, 1e-12, 1e-12),
    "normalized": (True, 0.1, 1e-9, 1e-19),          # the paper's constants
    "normalized-large-eps": (True, 0.1, 0.3, 0.7),   # eps must sit next to the norm
}


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("loss", sorted(mm.LOSSES))
def test_gd_joint_matches_an_autograd_loop(loss, mode):
    """Bugs caught: a wrong sign or a dropped 1/n in either gradient, W used as W.T, eps added in
    the wrong place, normalization across runs, off-by-one iterates, wrong risk or probability."""
    normalized, lr, eps_v, eps_p = MODES[mode]
    X, Y, W, V0, P0 = instance(0)
    traj = mm.gd_joint(X, Y, V0, P0, STEPS, lr, W=W, loss=loss, normalized=normalized,
                       eps_v=eps_v, eps_p=eps_p)
    assert traj.v.shape == traj.p.shape == (STEPS + 1, 3, 3)
    assert traj.loss.shape == traj.probability.shape == (STEPS + 1, 3)
    for b in range(3):
        v, p, risks, probs, attention = reference_run(X, Y, W, V0[b], P0[b], STEPS, lr, loss,
                                                      normalized, eps_v, eps_p)
        np.testing.assert_allclose(traj.v[:, b], v, rtol=0, atol=1e-10)
        np.testing.assert_allclose(traj.p[:, b], p, rtol=0, atol=1e-10)
        np.testing.assert_allclose(traj.loss[:, b], risks, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(traj.probability[:, b], probs, rtol=1e-10)
        tracked = attention[:, np.arange(len(X)), traj.tracked]
        np.testing.assert_allclose(traj.tracked_attention[:, b], tracked, rtol=1e-10, atol=1e-14)
    # default tracked tokens: the highest-score tokens under the final v of the first run
    final_scores = Y[:, None] * (X @ traj.v[-1, 0])
    np.testing.assert_array_equal(traj.tracked, np.argmax(final_scores, axis=1))


@pytest.mark.parametrize("normalized", [False, True])
def test_gd_joint_identity_W_and_a_shared_start(normalized):
    """W = None is the identity, and a (d,) start v0 is broadcast against a (B, d) batch of p0.

    Bug caught: the identity path or the broadcasting of the starts diverging from the
    reference."""
    X, Y, _, _, P0 = instance(2, with_W=False)
    v0 = np.array([0.3, -0.4, 0.2])
    traj = mm.gd_joint(X, Y, v0, P0, STEPS, 0.2, loss="logistic", normalized=normalized,
                       eps_v=1e-9, eps_p=1e-9, track=[0, 1, 2, 0])
    np.testing.assert_array_equal(traj.tracked, [0, 1, 2, 0])
    for b in range(3):
        v, p, risks, _, attention = reference_run(X, Y, None, v0, P0[b], STEPS, 0.2, "logistic",
                                                  normalized, 1e-9, 1e-9)
        np.testing.assert_allclose(traj.v[:, b], v, rtol=0, atol=1e-10)
        np.testing.assert_allclose(traj.p[:, b], p, rtol=0, atol=1e-10)
        np.testing.assert_allclose(traj.loss[:, b], risks, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(traj.tracked_attention[:, b], attention[:, range(4), [0, 1, 2, 0]],
                                   rtol=1e-10, atol=1e-14)
