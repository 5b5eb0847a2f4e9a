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
from roundoff import attention_terms, logit_size, noisy_spread, one_thread, step_atol

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


def reference_step(X, Y, W, v, p, lr, loss, normalized, eps_v, eps_p):
    """One step of joint (normalized) GD on (v, p) by torch autograd, from (v, p) ((d,) each).

    Returns the next v and p, the risk, the mean sigmoid margin and the attention (n, T) at
    (v, p), and the largest rounding difference of each of the two updates between two correct
    implementations (atol_v, atol_p; roundoff.step_atol, from the gradient's terms at (v, p)).
    """
    X, Y = torch.tensor(X), torch.tensor(Y)
    Wt = torch.eye(X.shape[2], dtype=torch.float64) if W is None else torch.tensor(W)
    v, p = torch.tensor(v, requires_grad=True), torch.tensor(p, requires_grad=True)
    s = torch.softmax(X @ (Wt @ p), dim=-1)            # logits x_it^T W p
    margin = Y * (s * (X @ v)).sum(dim=-1)
    risk = torch_loss(loss)(margin).mean()
    grad_v, grad_p, weight = torch.autograd.grad(risk, (v, p, margin))  # weight_i = l'(z_i) / n
    with torch.no_grad():
        if normalized:
            v_next = v - lr * grad_v / (grad_v.norm() + eps_v)
            p_next = p - lr * grad_p / (grad_p.norm() + eps_p)
        else:
            v_next = v - lr * grad_v
            p_next = p - lr * grad_p
    keys, gamma = X @ Wt, Y[:, None] * (X @ v)          # k_it = W^T x_it, gamma_it
    L = logit_size(keys, p)
    terms_v = attention_terms(weight, s, torch.zeros_like(gamma), torch.ones_like(margin),
                              Y[:, None, None] * X)
    terms_p = attention_terms(weight, s, gamma, margin, keys)
    atol_v = step_atol(v, lr, terms_v, L, grad_v.norm().item() if normalized else None, eps_v)
    atol_p = step_atol(p, lr, terms_p, L, grad_p.norm().item() if normalized else None, eps_p)
    return (v_next.detach().numpy(), p_next.detach().numpy(), risk.item(),
            torch.sigmoid(margin).mean().item(), s.detach().numpy(), atol_v, atol_p)


def reference_run(X, Y, W, v0, p0, steps, lr, loss, normalized, eps_v, eps_p,
                  perturb=lambda x, atol: x):
    """(steps + 1, 2 d) iterates (v, p) of the autograd loop from (v0, p0), continuing after
    each step from ``perturb(x, atol)`` (roundoff.noisy_spread)."""
    v, p = np.array(v0, dtype=float), np.array(p0, dtype=float)
    path = [np.concatenate([v, p])]
    with one_thread():
        for _ in range(steps):
            v, p, _, _, _, atol_v, atol_p = reference_step(X, Y, W, v, p, lr, loss, normalized,
                                                           eps_v, eps_p)
            v, p = perturb(v, atol_v), perturb(p, atol_p)
            path.append(np.concatenate([v, p]))
    return np.array(path)


def assert_every_step_matches(traj, b, X, Y, W, lr, loss, normalized, eps_v, eps_p, track):
    """Run b of ``traj`` step by step against the reference: the reference's step from the
    engine's iterate k must give the engine's iterate k + 1 to within that step's rounding bound
    (roundoff: tolerances of ~1e-12 of the iterate and step, from the gradient's terms), and the
    risk, probability and tracked attention recorded at k must be the reference's at iterate k
    (single evaluations). Rounding then cannot accumulate along the trajectory, on any CPU."""
    for k in range(len(traj.steps)):
        v, p = traj.v[k, b], traj.p[k, b]
        with one_thread():
            v_next, p_next, risk, prob, s, atol_v, atol_p = reference_step(
                X, Y, W, v, p, lr, loss, normalized, eps_v, eps_p)
        assert traj.risk[k, b] == pytest.approx(risk, rel=1e-10, abs=1e-12), k
        assert traj.probability[k, b] == pytest.approx(prob, rel=1e-10), k
        np.testing.assert_allclose(traj.tracked_attention[k, b], s[np.arange(len(X)), track],
                                   rtol=1e-10, atol=1e-14, err_msg=f"step {k}")
        if k + 1 < len(traj.steps):
            np.testing.assert_allclose(traj.v[k + 1, b], v_next, rtol=0, atol=atol_v,
                                       err_msg=f"v, step {k} -> {k + 1}")
            np.testing.assert_allclose(traj.p[k + 1, b], p_next, rtol=0, atol=atol_p,
                                       err_msg=f"p, step {k} -> {k + 1}")


MODES = {  # name: (normalized, lr, eps_v, eps_p)
    "plain": (False, 0.5, 1e-12, 1e-12),
    "normalized": (True, 0.1, 1e-9, 1e-19),          # the paper's constants
    "normalized-large-eps": (True, 0.1, 0.3, 0.7),   # eps must sit next to the norm
}


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("loss", sorted(mm.LOSSES))
def test_gd_joint_matches_an_autograd_loop(loss, mode):
    """Bugs caught: a wrong sign or a dropped 1/n in either gradient, W used as W.T, eps added in
    the wrong place, normalization across runs, off-by-one iterates, wrong risk or probability.

    Step by step (assert_every_step_matches): the 40 plain steps of the unbounded correlation
    loss amplify rounding so much that the library and this loop end 5e-12 apart with one set of
    CPU kernels and 7e-10 apart with another (ATEN_CPU_CAPABILITY=default, same machine); the
    difference of one step is bounded (roundoff.py) and stays below 2e-4 of that bound.
    """
    normalized, lr, eps_v, eps_p = MODES[mode]
    X, Y, W, V0, P0 = instance(0)
    traj = mm.gd_joint(X, Y, V0, P0, STEPS, lr, W=W, loss=loss, normalized=normalized,
                       eps_v=eps_v, eps_p=eps_p)
    assert traj.v.shape == traj.p.shape == (STEPS + 1, 3, 3)
    assert traj.risk.shape == traj.probability.shape == (STEPS + 1, 3)
    np.testing.assert_array_equal(traj.v[0], V0)   # the starts themselves: iterate 0 is no step
    np.testing.assert_array_equal(traj.p[0], P0)
    for b in range(3):
        assert_every_step_matches(traj, b, X, Y, W, lr, loss, normalized, eps_v, eps_p,
                                  traj.tracked)
    # The whole trajectory of run 0 as well, at a tolerance measured on this trajectory: 3 times
    # the spread of reference runs whose every step is moved by its rounding bound in a random
    # direction (roundoff.noisy_spread), so that it follows the amplification (that spread grows
    # 1e7-fold over the correlation loss's 40 plain steps, 3- to 500-fold in the other modes;
    # the library's drift stays below 3e-5 of it with every kernel tried) instead of one machine.
    spread = noisy_spread(lambda perturb: reference_run(X, Y, W, V0[0], P0[0], STEPS, lr, loss,
                                                        normalized, eps_v, eps_p, perturb))
    clean = reference_run(X, Y, W, V0[0], P0[0], STEPS, lr, loss, normalized, eps_v, eps_p)
    drift = np.abs(np.concatenate([traj.v[:, 0], traj.p[:, 0]], axis=-1) - clean).max(axis=-1)
    assert np.all(drift <= 3 * spread), (drift.max(), spread[np.argmax(drift / np.maximum(spread, 1e-300))])
    # default tracked tokens: the highest-score tokens under the final v of the first run
    final_scores = Y[:, None] * (X @ traj.v[-1, 0])
    np.testing.assert_array_equal(traj.tracked, np.argmax(final_scores, axis=1))


@pytest.mark.parametrize("normalized", [False, True])
def test_gd_joint_identity_W_and_a_shared_start(normalized):
    """W = None is the identity, and a (d,) start v0 is broadcast against a (B, d) batch of p0.

    Bug caught: the identity path or the broadcasting of the starts diverging from the
    reference (step by step, as above)."""
    X, Y, _, _, P0 = instance(2, with_W=False)
    v0 = np.array([0.3, -0.4, 0.2])
    traj = mm.gd_joint(X, Y, v0, P0, STEPS, 0.2, loss="logistic", normalized=normalized,
                       eps_v=1e-9, eps_p=1e-9, track=[0, 1, 2, 0])
    np.testing.assert_array_equal(traj.tracked, [0, 1, 2, 0])
    np.testing.assert_array_equal(traj.v[0], np.broadcast_to(v0, (3, 3)))
    np.testing.assert_array_equal(traj.p[0], P0)
    for b in range(3):
        assert_every_step_matches(traj, b, X, Y, None, 0.2, "logistic", normalized, 1e-9, 1e-9,
                                  [0, 1, 2, 0])
